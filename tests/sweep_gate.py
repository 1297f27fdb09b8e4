"""A position scheme for the tests of processes: ALiBi that says when a process trains, and can hold it there.

Tests of sweeps must act while a worker is training, and a fixed pause or a number
of epochs only makes that likely (on a loaded machine the models finish first, or
have not started). This scheme makes it a condition to wait on, set through the
environment of the processes that train:

* ``ATTNLAB_TEST_STARTED=DIR``: the first training step of a process writes ``DIR/PID``;
* ``ATTNLAB_TEST_GATE=PATH``: every training step waits (in short sleeps) until ``PATH`` exists.

Without them it is ALiBi, with ALiBi's records. Name it ``sweep_gate:Gated``: ``tests/`` is
on the path of the test process and of the workers it spawns; a subprocess gets it
through :func:`env`.
"""

import os
import time
from pathlib import Path

import torch

from attnlab.encodings.alibi import ALiBi

NAME = "sweep_gate:Gated"
HERE = Path(__file__).resolve().parent

_started = False


class Gated(ALiBi):
    """ALiBi whose training steps announce this process (``ATTNLAB_TEST_STARTED``) and wait for a gate."""

    def bias_rel(self, q, *, rel, k=None):
        global _started
        if torch.is_grad_enabled():  # a training step (the test sets are scored without gradients)
            started, gate = os.environ.get("ATTNLAB_TEST_STARTED"), os.environ.get("ATTNLAB_TEST_GATE")
            if started and not _started:
                _started = True
                Path(started, str(os.getpid())).write_text("")
            while gate and not Path(gate).exists():
                time.sleep(0.02)
        return super().bias_rel(q, rel=rel, k=k)


def env(*, started=None, gate=None, **extra):
    """``os.environ`` for a subprocess that can import this module, with the scheme's variables set."""
    environ = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", **extra)
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), environ.get("PYTHONPATH", "")) if p)
    for name, value in (("ATTNLAB_TEST_STARTED", started), ("ATTNLAB_TEST_GATE", gate)):
        environ.pop(name, None)
        if value is not None:
            environ[name] = str(value)
    return environ


def started(folder):
    """The pids that have announced their first training step in ``folder``."""
    return {int(p.name) for p in Path(folder).iterdir() if p.name.isdigit()}


def wait_until(condition, what, *, proc=None, output=None, timeout=300.0):
    """Poll ``condition()`` until it is true; the timeout only bounds a hang (it is not part of the test).

    Fails if ``proc`` (a Popen) exits first, with its output: ``output()`` if given, else what it piped.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            said = output() if output is not None else "".join(text or "" for text in proc.communicate())
            raise AssertionError(f"the process exited ({proc.returncode}) before {what}: {said}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f} s")
        time.sleep(0.02)
