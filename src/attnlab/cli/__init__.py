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
and the exit status is 2 (argparse's convention for usage errors). Set
``ATTNLAB_DEBUG=1`` to see the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from attnlab import __version__
from attnlab.cli import audit, compare, encode, plot, predict, train
from attnlab.cli._common import Parser, UsageError
from attnlab.cli.plot import FIGURE_NAMES, RUN_FIGURES

__all__ = ["FIGURE_NAMES", "RUN_FIGURES", "UsageError", "build_parser", "main"]

_VERBS = (encode, audit, plot, train, predict, compare)


def build_parser() -> argparse.ArgumentParser:
    """The ``attnlab`` argument parser (exposed for the tests and for docs)."""
    parser = Parser(prog="attnlab", description="Attention and positional encoding, exact and explained.",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for verb in _VERBS:
        verb.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 bad input, 130 interrupted).

    Never raises for bad input, argparse's own errors included (argparse exits
    by itself; here its status is returned, so ``main`` is callable from Python).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2): argparse has printed its message
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return int(args.func(args))
    except (UsageError, ValueError, TypeError, OSError, FloatingPointError) as err:
        if os.environ.get("ATTNLAB_DEBUG"):
            raise  # the whole traceback, for whoever is debugging attnlab itself
        # One line, no traceback: the library's messages already name the argument.
        message = " ".join(str(err).split())
        print(f"attnlab {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C: one line, the shell's status for SIGINT; files written so far were written whole.
        print(f"attnlab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
