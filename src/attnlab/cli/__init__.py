"""The ``attnlab`` command line: one module per verb.

::

    attnlab train                                   # the positional-encoding lab's model, run folder in runs/
    attnlab train --model transformer --seed 3      # the same task, with residuals and layer norm
    attnlab predict --run runs/NAME --points "-1,-1 -1,1"
    attnlab encode --d-model 8 --max-len 10 --round 4
    attnlab audit --encoding fixed-base --max-len 200
    attnlab plot exponential-dials --out dials.png
    attnlab compare --quick

Bad input never shows a traceback: the message goes to stderr as one line
and the exit status is 2 (argparse's convention for usage errors). The
library's messages name its Python arguments (``d_model``); here they name the
flags (``--d-model``). Not enough memory is bad input too (the sizes asked
for); any other exception is a bug in attnlab and keeps its traceback. Set
``ATTNLAB_DEBUG=1`` to see the traceback of bad input as well.

The command line starts at once: building the parser imports neither torch nor
attnlab's models, labs, training, attention or encodings (the names it lists come
from :mod:`attnlab.catalog`), so ``--help`` and ``--version`` answer in a few tens
of milliseconds. A verb imports what it needs inside its ``run``.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
from collections.abc import Sequence

import attnlab
from attnlab._interrupt import quiet_start, started
from attnlab._matplotlib_dir import use_writable_matplotlib_dir
from attnlab.cli import audit, compare, encode, plot, predict, train
from attnlab.cli._common import Parser, UsageError
from attnlab.cli._ranks import refused_under_torchrun
from attnlab.cli.plot import FIGURE_NAMES, RUN_FIGURES

__all__ = ["FIGURE_NAMES", "RUN_FIGURES", "UsageError", "build_parser", "main", "program_start"]

_VERBS = (encode, audit, plot, train, predict, compare)


def build_parser() -> argparse.ArgumentParser:
    """The ``attnlab`` argument parser (exposed for the tests and for docs)."""
    parser = Parser(prog="attnlab", description="Attention and positional encoding, exact and explained.",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for verb in _VERBS:
        verb.add_parser(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: argparse's version action, reading the version only when asked (it costs 30 ms)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"attnlab {attnlab.__version__}")  # on stdout, as argparse's own version action
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input, 130 interrupted, 143 terminated).

    Never raises for bad input, argparse's own errors included (argparse exits
    by itself; here its status is returned, so ``main`` is callable from Python).

    Run as the program (``argv`` None, in the main thread), Ctrl-C while it starts
    exits at once with one line and status 130 (see :mod:`attnlab._interrupt`).
    """
    if argv is None:
        program_start()
        try:
            return _main(argv, program=True)
        finally:
            # The program is about to end: its objects are never collected again, so hand them to the permanent
            # generation. Python's shutdown then skips them instead of walking every object torch and
            # matplotlib made (up to 0.5 s of a short `attnlab train`: BENCHMARKS.md, "Exit"); atexit handlers
            # and flushing still run.
            gc.freeze()
    return _main(argv, program=False)


def program_start() -> None:
    """What the ``attnlab`` program does first: Ctrl-C exits quietly (:func:`attnlab._interrupt.quiet_start`), and
    Python's garbage collector waits until torch is imported.

    Importing torch makes a million objects and no garbage; the collector, run every 700 of them, would walk
    them all again and again (a fifth of torch's import time). :func:`main` turns it back on once torch is
    in, with what the import made frozen (:func:`gc.freeze`: never walked again, as it is never garbage).
    """
    quiet_start()
    gc.disable()


def _main(argv: Sequence[str] | None, *, program: bool) -> int:
    """:func:`main` once Ctrl-C is handled (``program``: run as the program, see :func:`program_start`)."""
    use_writable_matplotlib_dir()  # else matplotlib warns twice on stderr where HOME is not writable
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2): argparse has printed its message
        return exit_.code if isinstance(exit_.code, int) else 2
    refused = refused_under_torchrun(args.command)  # a verb that is not data-parallel, started by torchrun
    if refused is not None:
        return refused
    try:
        started()  # torch imported while Ctrl-C still exits quietly; from here on it is KeyboardInterrupt
        if program:
            # started() imported torch, unless Ctrl-C was ignored from the start (a job run in the background by a
            # script): the freeze is for torch's million objects, so they must be in first.
            import torch  # noqa: F401

            gc.freeze()
            gc.enable()
        return int(args.func(args))
    except (UsageError, ValueError, TypeError, OSError, FloatingPointError, MemoryError, RuntimeError) as err:
        if isinstance(err, RuntimeError) and not _out_of_memory(err):
            raise  # a bug: its traceback is what whoever fixes it needs
        if os.environ.get("ATTNLAB_DEBUG"):
            raise  # the whole traceback, for whoever is debugging attnlab itself
        message = _one_line(err, _flags(parser, args.command))
        print(f"attnlab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        # Ctrl-C: one line, the shell's status for SIGINT; files written so far were written whole.
        # A sweep's SIGTERM or SIGHUP stops it the same way (attnlab._workers.Terminated carries its signum).
        signum = getattr(stop, "signum", 2)
        print(f"attnlab {args.command}: {stop if signum != 2 else 'interrupted'}", file=sys.stderr)
        return 128 + signum


def _out_of_memory(err: BaseException) -> bool:
    """torch's allocators report running out of memory as a RuntimeError (CUDA's as a subclass).

    torch is looked up in ``sys.modules``, never imported: an error raised before any verb
    imported torch cannot be torch's (and ``--help`` stays free of it).
    """
    text = str(err)
    torch = sys.modules.get("torch")
    out_of_memory = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return (isinstance(out_of_memory, type) and isinstance(err, out_of_memory)) \
        or "can't allocate memory" in text or "out of memory" in text.lower()


def _flags(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """``{dest: flag}`` of the verb's options (``"d_model": "--d-model"``)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return {action.dest: action.option_strings[-1] for action in sub.choices[command]._actions  # noqa: SLF001
            if action.option_strings and action.dest != "help"}


def _one_line(err: BaseException, flags: dict[str, str]) -> str:
    """The error as one line, with the library's argument names turned into the verb's flags.

    A name with an underscore (``d_model``, ``n_train``) is a flag wherever it stands as a
    word outside quotes (``config.json lacks 'lr'`` names a key, not a flag); a plain word
    (``lr``, ``seed``) only where it opens the message.
    """
    if isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and _out_of_memory(err)):
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        first = re.sub(r"^\[enforce fail at [^]]*\] (err == 0\. )?", "", first)
        return f"not enough memory for the sizes asked for ({first or type(err).__name__}); ask for less"
    message = _shortened(" ".join(str(err).split()))
    for dest, flag in flags.items():
        if "_" in dest:
            message = re.sub(rf"(?<![\w'\"\-.\[]){re.escape(dest)}(?![\w'\"\]])", flag, message)
        elif re.match(rf"{re.escape(dest)}\b[ :]", message):
            message = flag + message[len(dest):]
    return message


#: a list of numbers or names as a message echoes it: ``[5, 5, 5]``, ``(8, 12)``, ``['a', 'b']``
_LIST = re.compile(r"[\[(](?:[^][()]*?, ){8,}[^][()]*?[\])]")
#: the longest line an error prints: a value the user gave is echoed, never a wall of it
MAX_MESSAGE = 2000


def _shortened(message: str) -> str:
    """``message`` with each echoed list of more than 8 items cut to its first 3 and last, and the count, and the
    whole cut at :data:`MAX_MESSAGE` characters (a ``--test-lens`` of 10,000 lengths echoed 30 KB)."""

    def cut(match: re.Match[str]) -> str:
        text = match.group(0)
        items = text[1:-1].split(", ")
        return f"{text[0]}{', '.join(items[:3])}, ..., {items[-1]}{text[-1]} ({len(items):,} items)"

    message = _LIST.sub(cut, message)
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 5] + " ..."


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
