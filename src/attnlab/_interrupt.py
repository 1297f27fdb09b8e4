"""Ctrl-C while the ``attnlab`` program starts: one line and status 130, never a traceback or an abort.

Python turns Ctrl-C (SIGINT) into a ``KeyboardInterrupt`` wherever the main thread is.
:func:`attnlab.cli.main` catches it around a verb's work, but a program spends its first
second or two importing: a ``KeyboardInterrupt`` there escapes as a traceback, and one
raised while torch's C++ extension runs Python code during its import cannot be passed
back through C++, so the process aborts (SIGABRT, "terminate called after throwing an
instance of 'pybind11::error_already_set'"). Nothing is written while the program
starts, so there is nothing to clean up: the handler here exits at once.

* :func:`quiet_start` installs it (``python -m attnlab`` does before importing anything
  else; the ``attnlab`` script's :func:`attnlab.cli.main` as its first step);
* :func:`started` imports torch under it, then hands Ctrl-C back to Python's own
  ``KeyboardInterrupt``, which ``main`` reports once the verb runs (files written whole,
  a sweep's workers stopped).

Only the main thread of a program may install a handler; called elsewhere (a test, a
notebook, an application embedding :func:`attnlab.cli.main`), both do nothing.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

__all__ = ["quiet_start", "started"]


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"attnlab: interrupted\n")  # os.write: no buffer of print's to be caught half-flushed
    os._exit(130)  # the shell's status for SIGINT; nothing was written yet, so nothing is left half done


def quiet_start() -> None:
    """Ctrl-C exits at once, with one line and status 130, until :func:`started`.

    Only where Ctrl-C has Python's default handling (it raises ``KeyboardInterrupt``)
    and in the main thread: a handler of the embedding program is left alone.
    """
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_quietly)


def started() -> None:
    """Import torch (still quiet on Ctrl-C), then let Ctrl-C raise ``KeyboardInterrupt`` again.

    Does nothing unless :func:`quiet_start` installed the quiet handler.
    """
    if signal.getsignal(signal.SIGINT) is not _exit_quietly:
        return
    import torch  # noqa: F401  # every verb's work needs it; its import is where an interrupt aborts

    signal.signal(signal.SIGINT, signal.default_int_handler)
