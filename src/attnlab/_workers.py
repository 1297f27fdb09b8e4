"""Worker processes that die with their driver, by any signal, and a driver that stops cleanly on SIGTERM.

A sweep's driver (``attnlab compare --jobs N``) starts worker processes. Whatever
ends the driver (Ctrl-C, ``kill``, ``timeout``, a job scheduler's SIGTERM or
SIGKILL, a closed terminal's SIGHUP, running out of memory), its workers must
not outlive it: a SIGKILL leaves the driver no chance to stop them, so the
workers watch the driver instead (:func:`start_worker`, run as each worker's
initializer):

* a *lifeline*: a pipe whose writing end only the driver holds (:class:`Lifeline`).
  The kernel closes it when the driver exits, however it exits; a thread of the
  worker waits on the reading end and ends the worker at end of file. It works
  wherever pipes do (every system Python runs on).
* on Linux, also a parent-death signal (``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the
  kernel kills the worker when its parent dies, even while the worker holds the
  interpreter's lock in a long computation. The signal is sent when the parent
  *thread* that started the worker exits, so it is asked for only when the workers
  are started by the driver's main thread, which lives as long as the driver.
  After asking, the worker checks that its parent is still the driver: a driver
  that died just before would never send it.

multiprocessing's resource tracker (a process the driver starts for the queues'
semaphores) exits by itself once the driver and every worker have closed their
end of its pipe: once the workers are gone, it goes too.

The driver's side of a clean stop is :func:`termination_as_interrupt`: SIGTERM and
SIGHUP raise :class:`Terminated`, a ``KeyboardInterrupt``, so that they stop a sweep
the way Ctrl-C does (the workers stopped, the finished models kept, one line).

This module imports nothing but the standard library: a worker runs
:func:`start_worker` before it imports torch (seconds), so that a driver killed while
its workers start leaves none behind either.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Lifeline", "Terminated", "report", "start_worker", "termination_as_interrupt"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: the signals a driver turns into :class:`Terminated` (what kill, timeout, schedulers and closed terminals send)
_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the driver's main thread: it stops what runs as Ctrl-C does.

    A ``KeyboardInterrupt`` so that every ``finally`` and every handler of Ctrl-C
    cleans up for it too; :attr:`signum` tells the command line which signal it was
    (exit status ``128 + signum``, as the shell reports a process a signal ended).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)

    def __str__(self) -> str:
        return f"terminated by {signal.Signals(self.signum).name}"


@contextmanager
def termination_as_interrupt() -> Iterator[None]:
    """Within this block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread.

    Only a signal whose handling is the default (the process ends without any
    cleanup) is taken over: one the user ignores (``nohup``) or handles already
    is left as it is. A second signal of the kind ends the process at once (the
    default again), as an impatient ``kill`` expects; the workers die with it
    (:func:`start_worker`). Outside the main thread the block changes nothing
    (Python runs signal handlers there only).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [signum for signum in _TERMINATING if signal.getsignal(signum) is signal.SIG_DFL]

    def stop(signum: int, frame: Any) -> None:
        del frame
        for each in taken:  # the next one ends the process
            signal.signal(each, signal.SIG_DFL)
        raise Terminated(signum)

    for signum in taken:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum in taken:
            signal.signal(signum, signal.SIG_DFL)


class Lifeline:
    """The driver's end of its workers' lifeline; :meth:`worker_args` is what :func:`start_worker` takes.

    Create it in the driver before starting the workers (with the ``spawn``
    context that starts them), pass :meth:`worker_args` to every worker, and
    :meth:`close` it once the workers are gone (closing it earlier ends them).

    Args:
        context: the multiprocessing context that starts the workers.
    """

    def __init__(self, context: Any) -> None:
        self._watched, self._held = context.Pipe(duplex=False)  # workers read; only this process writes
        self._driver = os.getpid()
        # Started by the main thread, the workers may ask for the parent-death signal (see the module's doc).
        self._by_main_thread = threading.current_thread() is threading.main_thread()

    def worker_args(self) -> tuple[Any, int, bool]:
        """``(watched end, driver's pid, whether to ask for the parent-death signal)``."""
        return self._watched, self._driver, self._by_main_thread

    def close(self) -> None:
        """Close both ends (a worker still running ends at once)."""
        self._held.close()
        self._watched.close()


_progress: Any = None  # the driver's progress queue, in a worker


def start_worker(lifeline: tuple[Any, int, bool], progress: Any) -> None:
    """A worker's initializer: die with the driver, leave Ctrl-C to it, report progress to ``progress``.

    Args:
        lifeline: :meth:`Lifeline.worker_args` of the driver.
        progress: a multiprocessing queue that :func:`report` puts steps on.
    """
    global _progress
    watched, driver, parent_death_signal = lifeline
    _progress = progress
    # Ctrl-C reaches the whole foreground group: the driver stops the workers itself, the runs they had
    # are abandoned, and a worker's KeyboardInterrupt would only add a traceback to the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_death_signal:
        _ask_parent_death_signal()
    if os.getppid() != driver:  # the driver died before the signal was asked for (or this is no child of it)
        os._exit(1)
    threading.Thread(target=_watch, args=(watched,), name="attnlab-lifeline", daemon=True).start()


def report(steps: int) -> None:
    """Put ``steps`` (training steps done) on the driver's progress queue (see :func:`start_worker`)."""
    _progress.put(steps)


def _watch(watched: Any) -> None:
    """Wait for the end of file on the lifeline (the driver is gone), then end this worker at once."""
    try:
        while True:
            watched.recv_bytes()  # the driver never writes: this returns only at end of file (EOFError)
    except (EOFError, OSError):
        pass
    os._exit(1)  # no cleanup: the driver that would collect this worker's result is gone


def _ask_parent_death_signal() -> None:
    """Linux: SIGKILL this process when its parent thread exits (a no-op elsewhere, or without libc)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None).prctl  # libc's, among the symbols the interpreter is linked with
    except (OSError, AttributeError):  # not found (a static or unusual build): the lifeline remains
        return
    prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
