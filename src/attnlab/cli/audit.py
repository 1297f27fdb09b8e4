"""``attnlab audit``: measure an encoding's properties (bounded, unique, shift-invariant, ...)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from attnlab.cli._common import positive_int
from attnlab.cli._table_options import add_encoding_options

__all__ = ["add_parser", "run"]

EXAMPLES = ("examples:\n  attnlab audit --encoding sinusoidal --d-model 8 --max-len 10\n"
            "  attnlab audit --encoding fixed-base --max-len 200 --json\n"
            "  attnlab audit --encoding lab-float32 --d-model 64 --max-len 100000")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``audit`` subcommand to ``sub`` (argparse's subparsers)."""
    what = "measure an encoding's properties: bounded, unique, shift-invariant, ..."
    p: argparse.ArgumentParser = sub.add_parser("audit", help=what, description=what, epilog=EXAMPLES,
                                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_encoding_options(p)
    p.add_argument("--max-positions", type=positive_int, default=1024,
                   help="positions used by the pairwise checks (default 1024)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Print the audit of the table the options describe; returns the exit status."""
    import torch

    from attnlab.analysis import audit
    from attnlab.cli._tables import build_table, table_dtype
    from attnlab.encodings import fixed_base, sinusoidal

    table = build_table(args, table_dtype(args.dtype))
    reference = None
    if args.encoding in ("sinusoidal", "lab-float32"):
        # Precision is measured against the paper's formula evaluated in float64.
        lab = args.encoding == "lab-float32"
        reference = sinusoidal(args.max_len, args.d_model, base=args.base,
                               layout="interleaved" if lab else args.layout,
                               rates=None if lab else args.rates, dtype=torch.float64)
    elif args.encoding == "fixed-base":
        reference = fixed_base(args.max_len, args.bases, dtype=torch.float64)
    report = audit(table, reference=reference, max_positions=args.max_positions)
    if args.json:
        print(json.dumps({"encoding": args.encoding, **report.to_dict()}, indent=2))
    else:
        variant = f", layout {args.layout}" if args.encoding == "sinusoidal" else ""
        print(f"encoding: {args.encoding}{variant}")
        print(report.format())
    return 0
