"""What every verb of the command line shares: the parser class, argument types, one-line errors.

Nothing here imports torch: the parsers (and so ``--help``) are built without it. What
needs torch when a verb runs lives beside this module (``_device``, ``_tables``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["FLOAT32_MAX", "Parser", "UsageError", "add_device_option", "add_progress_option", "add_size_options",
           "decimals", "default_run_folder", "folder_arg", "int_list", "non_negative_int", "parse_int",
           "positive_float", "positive_int", "probability", "seed_int", "size_flags"]


class UsageError(Exception):
    """A problem with the command line, reported as one line and exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line on stderr (no usage block) and exit 2, and no abbreviations.

    ``allow_abbrev`` is always False: argparse would otherwise take a prefix of a flag for
    the flag (``--seed 3`` as ``--seeds 3``), silently. Forced here, in the one class every
    parser and sub-parser of the command line is made from (``add_subparsers(parser_class=Parser)``),
    so a new verb cannot forget it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        # A value that starts with a minus and a digit is a value (``--points -1,-1``, ``--lr -1e-3``):
        # argparse's own pattern knows only ``-3`` and ``-.5``, and answered "expected one argument".
        # No flag of attnlab's looks like a number, so nothing is lost.
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


# --- argument types: each names the bad value in its message (argparse adds the flag) ----

#: the largest finite float32 (``torch.finfo(torch.float32).max``), written out so that the
#: argument types check it without importing torch (tests/test_cli_startup.py compares the two).
FLOAT32_MAX = 3.4028234663852886e38
#: integers a flag may take: what fits the 64-bit integers torch and numpy compute with
INT_MAX = 2**63 - 1
#: torch.manual_seed's range
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1
#: the most intra-op threads a flag may ask for: attnlab.training.threads.MAX_THREADS, written out so that the
#: argument types check it without importing torch (tests/test_cli_startup.py compares the two)
MAX_THREADS = 1024


def _whole_number(text: str, minimum: int | None, maximum: int = INT_MAX) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if minimum is not None and value < minimum:
        bound = "positive" if minimum == 1 else f">= {minimum}"
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number from 1 to 2**63 - 1."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number from 0 to 2**63 - 1."""
    return _whole_number(text, 0)


def parse_int(text: str) -> int:
    """An argparse type: a whole number that fits 64 bits (-2**63 to 2**63 - 1)."""
    return _whole_number(text, -(2**63))


def seed_int(text: str) -> int:
    """An argparse type: a random seed, in torch's range (-2**63 to 2**64 - 1).

    Raises:
        argparse.ArgumentTypeError: for a non-integer or one out of that range.
    """
    value = _whole_number(text, None, SEED_MAX)
    if value < SEED_MIN:
        raise argparse.ArgumentTypeError(f"must be at least {SEED_MIN}, got {value}")
    return value


def decimals(text: str) -> int:
    """An argparse type: a number of decimals, 0 to 17 (float64 holds 17 significant digits at most)."""
    return _whole_number(text, 0, 17)


def _number(text: str, expected: str) -> float:
    """``text`` as a float; ArgumentTypeError saying what was ``expected`` otherwise."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def positive_float(text: str) -> float:
    """An argparse type: a positive finite number.

    Raises:
        argparse.ArgumentTypeError: for anything else (argparse names the flag).
    """
    value = _number(text, "a number")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    if value > FLOAT32_MAX:  # it meets float32 tensors, where it would be inf
        raise argparse.ArgumentTypeError(f"must be finite in float32 (at most 3.4e38), got {text}")
    return value


def probability(text: str) -> float:
    """An argparse type: a probability, a number from 0 to 1.

    Raises:
        argparse.ArgumentTypeError: for anything else (argparse names the flag).
    """
    value = _number(text, "a number from 0 to 1")
    if not 0.0 <= value <= 1.0:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, got {text}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """An argparse type: comma-separated whole numbers, at least one.

    Raises:
        argparse.ArgumentTypeError: for anything else (argparse names the flag).
    """
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number, got {text!r}")
    if any(abs(v) > INT_MAX for v in values):
        raise argparse.ArgumentTypeError(f"every number must be at most {INT_MAX}, got {text!r}")
    return values


#: the model-size flags and the config fields they set.
size_flags = {"--d-model": "d_model", "--n-heads": "n_heads", "--n-layers": "n_layers", "--ff-units": "ff_units"}


def folder_arg(text: str) -> Path:
    """An argparse type: a folder path, never empty (``Path("")`` would silently be ``.``).

    Raises:
        argparse.ArgumentTypeError: for an empty or blank path.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give a folder")
    return Path(text)


def add_size_options(p: argparse.ArgumentParser, *, defaults: str) -> None:
    """``--d-model``, ``--n-heads``, ``--n-layers``, ``--ff-units`` (default None: the model's own)."""
    p.add_argument("--d-model", type=positive_int, default=None, metavar="D", help=f"model width ({defaults})")
    p.add_argument("--n-heads", type=positive_int, default=None, metavar="H", help="attention heads")
    p.add_argument("--n-layers", type=positive_int, default=None, metavar="N", help="layers (where the model has them)")
    p.add_argument("--ff-units", type=positive_int, default=None, metavar="F", help="feed-forward width")


def add_progress_option(p: argparse.ArgumentParser) -> None:
    """``--no-progress``."""
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def add_device_option(p: argparse.ArgumentParser) -> None:
    """``--device`` (default None: :func:`attnlab.cli._device.parse_device` then picks cuda, else mps, else cpu).

    The value is a plain string, checked by :func:`attnlab.cli._device.parse_device` when the command runs, so
    that a device this machine lacks is named in one line before anything is written.
    """
    p.add_argument("--device", default=None, metavar="DEVICE",
                   help="cpu, cuda, cuda:N or mps (default: cuda if available, else mps, else cpu)")


def thread_count(text: str) -> int:
    """An argparse type: a number of threads, 1 to :data:`MAX_THREADS`."""
    return _whole_number(text, 1, MAX_THREADS)


def add_threads_option(p: argparse.ArgumentParser, *, what: str) -> None:
    """``--threads N``: the intra-op threads ``what`` computes on, instead of :mod:`attnlab.training.threads`' rule."""
    p.add_argument("--threads", type=thread_count, default=None, metavar="N",
                   help=f"intra-op threads {what} computes on (default: chosen by the work of a step; one thread "
                        "for the labs' models, where a second only slows a step down)")


def default_run_folder(name: str) -> Path:
    """``runs/NAME-YYYYmmdd-HHMMSS``."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"
