"""``attnlab encode``: print (or save) a positional-encoding table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from attnlab._io import atomic_write, check_writable
from attnlab.cli._common import UsageError, decimals
from attnlab.cli._table_options import add_encoding_options

__all__ = ["add_parser", "run"]

EXAMPLES = ("examples:\n  attnlab encode --d-model 8 --max-len 10 --round 4\n"
            "  attnlab encode --d-model 512 --max-len 4096 --out pe.npy")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``encode`` subcommand to ``sub`` (argparse's subparsers)."""
    p: argparse.ArgumentParser = sub.add_parser(
        "encode", help="print (or save) a positional-encoding table", description="print (or save) a "
        "positional-encoding table", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_encoding_options(p)
    p.add_argument("--round", type=decimals, default=None, metavar="N",
                   help="round the printed values to N decimals, 0 to 17 (the labs print 4)")
    p.add_argument("--out", type=Path, default=None, help="write the table to a .npy or .csv file")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Print the table, or write it to ``--out``; returns the exit status.

    Raises:
        UsageError, ValueError, TypeError, OSError: for bad input, reported by
            :func:`attnlab.cli.main` as one line and exit status 2.
    """
    import numpy as np
    import torch

    from attnlab.cli._tables import build_table, table_dtype

    out = check_writable(args.out) if args.out else None
    if out is not None and out.suffix not in (".npy", ".csv"):
        raise UsageError(f"--out {str(args.out)!r}: expected a .npy or .csv file name")
    table = build_table(args, table_dtype(args.dtype))
    if out is not None:
        array = table.double().numpy() if table.dtype in (torch.bfloat16, torch.float16) else table.numpy()
        if out.suffix == ".npy":
            atomic_write(out, lambda tmp: np.save(tmp, array))
        else:
            atomic_write(out, lambda tmp: np.savetxt(tmp, array, delimiter=",", fmt="%.10g"))
        print(f"wrote {out} ({table.shape[0]} x {table.shape[1]}, {args.dtype})", file=sys.stderr)
        return 0
    if args.round is not None:
        # Round the formula's exact values, not their float32 rounding: cos(0.01) =
        # 0.99995000042 shows as 1.0000 (as the labs print it), where its nearest
        # float32, 0.99994999, would show as 0.9999. Half types keep their own
        # values, since their rounding is what a user asking for them wants to see.
        exact = table if table.dtype in (torch.float16, torch.bfloat16) else build_table(args, torch.float64)
        shown_dtype = torch.float64 if table.dtype == torch.float64 else torch.float32
        table = torch.round(exact.double(), decimals=args.round).to(shown_dtype)
    with _PrintOptions(precision=args.round if args.round is not None else 4):
        print(table)
    return 0


class _PrintOptions:
    """torch.set_printoptions for the duration of a block (torch has no context manager for it)."""

    def __init__(self, precision: int) -> None:
        self.precision = precision

    def __enter__(self) -> None:
        import torch

        torch.set_printoptions(precision=self.precision, sci_mode=False)

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.set_printoptions(profile="default")
