"""The positional-encoding table that the options of :mod:`attnlab.cli._table_options` describe.

Imported by a verb when it runs (it imports torch and the encodings), never by the parsers.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from attnlab._limits import check_memory
from attnlab.catalog import DTYPES
from attnlab.encodings import fixed_base, sinusoidal

__all__ = ["build_table", "check_table_size", "lab_float32_table", "table_dtype", "table_of"]


def table_dtype(name: str) -> torch.dtype:
    """The torch dtype ``--dtype NAME`` asks for (``"float64"``: ``torch.float64``).

    Raises:
        ValueError: for a name not in :data:`attnlab.catalog.DTYPES` (argparse's choices keep
            those out of the command line; this guards a call from Python).
    """
    if name not in DTYPES:
        raise ValueError(f"--dtype {name!r}: expected one of {', '.join(DTYPES)}")
    dtype: torch.dtype = getattr(torch, name)
    return dtype


def check_table_size(max_len: int, d_model: int, dtype: torch.dtype, *, columns: str = "--d-model") -> None:
    """Refuse a table that cannot fit, naming the flags (it is computed in float64, a few arrays at a time).

    Raises:
        ValueError: naming ``--max-len``, ``columns`` and their values, and the memory needed and available.
    """
    what = f"--max-len {max_len} x {columns} {d_model}: the {str(dtype).removeprefix('torch.')} table"
    check_memory(what, max_len * d_model * 8 * 4)


def build_table(args: argparse.Namespace, dtype: torch.dtype) -> torch.Tensor:
    """The table the encode/audit options describe, ``[L, D]`` in ``dtype``."""
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
    position = torch.arange(0, max_len).float().unsqueeze(1)  # [L, 1]
    speed = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(base) / d_model))  # [ceil(D/2)]
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(speed * position)
    table[:, 1::2] = torch.cos(speed * position)[:, : d_model // 2]
    return table


def table_of(a: argparse.Namespace) -> torch.Tensor:
    """The sinusoidal table of the plot options."""
    check_table_size(a.max_len, a.d_model, torch.float32)
    return sinusoidal(a.max_len, a.d_model, base=a.base, layout=a.layout, rates=a.rates)
