"""The options that choose a positional-encoding table, shared by ``encode``, ``audit`` and ``plot``.

The options are built from :mod:`attnlab.catalog`'s names; torch and the encodings are
imported by the functions that build a table, when a verb runs.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnlab.catalog import DTYPES, LAYOUTS, RATES
from attnlab.cli._common import int_list, positive_float, positive_int, seed_int

if TYPE_CHECKING:
    import torch

__all__ = ["DTYPES", "TABLE_ENCODINGS", "add_encoding_options", "add_table_options", "build_table",
           "check_table_size", "lab_float32_table", "table_dtype", "table_of"]

#: what ``--encoding`` builds in ``encode`` and ``audit``.
TABLE_ENCODINGS = ("sinusoidal", "fixed-base", "learned", "lab-float32")


def table_dtype(name: str) -> torch.dtype:
    """The torch dtype ``--dtype NAME`` asks for (``"float64"``: ``torch.float64``).

    Raises:
        ValueError: for a name not in :data:`attnlab.catalog.DTYPES` (argparse's choices keep
            those out of the command line; this guards a call from Python).
    """
    import torch

    if name not in DTYPES:
        raise ValueError(f"--dtype {name!r}: expected one of {', '.join(DTYPES)}")
    dtype: torch.dtype = getattr(torch, name)
    return dtype


def add_table_options(p: argparse.ArgumentParser, *, d_model: int | None, max_len: int | None) -> None:
    """The options that choose a sinusoidal table."""
    p.add_argument("--d-model", type=positive_int, default=d_model, metavar="D",
                   help=f"model dimension (default: {d_model if d_model else 'per figure'})")
    p.add_argument("--max-len", type=positive_int, default=max_len, metavar="L",
                   help=f"number of positions (default: {max_len if max_len else 'per figure'})")
    p.add_argument("--layout", choices=LAYOUTS, default="interleaved",
                   help="column layout: interleaved (the paper, the labs), concat ([sin | cos]), "
                        "t2t (tensor2tensor/fairseq/Whisper)")
    p.add_argument("--rates", choices=RATES, default=None,
                   help="angle rates: vaswani (base^(-2i/D)) or linspace (the TensorFlow notebook, t2t)")
    p.add_argument("--base", type=positive_float, default=10000.0, help="wavelength scale (default 10000)")


def add_encoding_options(p: argparse.ArgumentParser) -> None:
    """Which encoding to build, and in what dtype (encode and audit)."""
    add_table_options(p, d_model=8, max_len=10)
    p.add_argument("--encoding", choices=TABLE_ENCODINGS, default="sinusoidal",
                   help="sinusoidal (with --layout/--rates), fixed-base (with --bases), learned "
                        "(an untrained N(0, 0.02) table), lab-float32 (the labs' float32 formula)")
    p.add_argument("--bases", type=int_list, default=(4, 5, 7), help="fixed-base bases (default 4,5,7)")
    p.add_argument("--seed", type=seed_int, default=0, help="random seed of the learned table")
    p.add_argument("--dtype", choices=DTYPES, default="float32")


def check_table_size(max_len: int, d_model: int, dtype: torch.dtype, *, columns: str = "--d-model") -> None:
    """Refuse a table that cannot fit, naming the flags (it is computed in float64, a few arrays at a time).

    Raises:
        ValueError: naming ``--max-len``, ``columns`` and their values, and the memory needed and available.
    """
    from attnlab._limits import check_memory

    what = f"--max-len {max_len} x {columns} {d_model}: the {str(dtype).removeprefix('torch.')} table"
    check_memory(what, max_len * d_model * 8 * 4)


def build_table(args: argparse.Namespace, dtype: torch.dtype) -> torch.Tensor:
    """The table the encode/audit options describe, ``[L, D]`` in ``dtype``."""
    import torch

    from attnlab.encodings import fixed_base, sinusoidal

    if args.encoding == "fixed-base":
        check_table_size(args.max_len, 2 * len(args.bases), dtype, columns="2 x --bases")
    else:
        check_table_size(args.max_len, args.d_model, dtype)
    if args.encoding == "fixed-base":
        return fixed_base(args.max_len, args.bases, dtype=dtype)
    if args.encoding == "learned":
        # An untrained learned table: N(0, 0.02) from a private generator, so the
        # audit shows what a learned table does *not* guarantee.
        g = torch.Generator().manual_seed(args.seed)
        return (torch.randn(args.max_len, args.d_model, generator=g, dtype=torch.float64) * 0.02).to(dtype)
    if args.encoding == "lab-float32":
        return lab_float32_table(args.max_len, args.d_model, args.base).to(dtype)
    return sinusoidal(args.max_len, args.d_model, base=args.base, layout=args.layout,
                      rates=args.rates, dtype=dtype)


def lab_float32_table(max_len: int, d_model: int, base: float) -> torch.Tensor:
    """The labs' own formula (float32 angles) ``[L, D]``, kept to show what float64 fixes."""
    import numpy as np
    import torch

    position = torch.arange(0, max_len).float().unsqueeze(1)  # [L, 1]
    speed = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(base) / d_model))  # [ceil(D/2)]
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(speed * position)
    table[:, 1::2] = torch.cos(speed * position)[:, : d_model // 2]
    return table


def table_of(a: argparse.Namespace) -> torch.Tensor:
    """The sinusoidal table of the plot options."""
    import torch

    from attnlab.encodings import sinusoidal

    check_table_size(a.max_len, a.d_model, torch.float32)
    return sinusoidal(a.max_len, a.d_model, base=a.base, layout=a.layout, rates=a.rates)
