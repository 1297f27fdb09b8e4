"""Fixed-base ("angular speed") positional encoding: the positional-encoding lab's "Your turn".

Each base ``b`` is a hand on a dial that moves ``360 / b`` degrees per position,
so position ``p`` sits at angle ``2 * pi * p / b``; the encoding is the (sin, cos)
of that angle for every base. With bases (4, 5, 7) the three hands line up again
only after lcm(4, 5, 7) = 140 positions: positions are unique up to there and
repeat after it, which the audit shows.

Shape notation: ``L`` positions, ``len(bases)`` dials, ``2 * len(bases)`` columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab._validate import check_dtype, check_finite_float, check_int

__all__ = ["fixed_base"]


def fixed_base(
    max_len: int,
    bases: Sequence[float] = (4, 5, 7),
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Encode each position as the (sin, cos) of its angle on one dial per base.

    Args:
        max_len: number of positions ``L``.
        bases: positions per full turn of each dial (any positive numbers).
        dtype: floating dtype of the result (computed in float64, cast once).

    Returns:
        Tensor ``[L, 2 * len(bases)]``; columns ``2k`` and ``2k + 1`` are the sine
        and cosine of ``2 * pi * p / bases[k]``.

    Raises:
        TypeError: if ``max_len`` is not an integer or a base not a number.
        ValueError: if ``max_len < 1``, ``bases`` is empty or a base is not positive.

    Example:
        >>> fixed_base(3, (4,)).round(decimals=4)
        tensor([[ 0.,  1.],
                [ 1.,  0.],
                [ 0., -1.]])
    """
    max_len = check_int("max_len", max_len, minimum=1)
    dtype = check_dtype("dtype", dtype)
    if isinstance(bases, (str, bytes)) or not isinstance(bases, Sequence):
        raise TypeError(f"bases must be a sequence of numbers, got {bases!r}")
    if len(bases) == 0:
        raise ValueError("bases must name at least one base, got an empty sequence")
    b = torch.tensor(
        [check_finite_float(f"bases[{k}]", v, positive=True) for k, v in enumerate(bases)],
        dtype=torch.float64,
    )
    p = torch.arange(max_len, dtype=torch.float64)
    angles = 2.0 * math.pi * p[:, None] / b[None, :]  # [L, n_bases]
    # Stack on a new last axis and flatten: (sin, cos) per base, interleaved.
    table = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1)  # [L, n_bases, 2]
    return table.reshape(max_len, 2 * len(bases)).to(dtype)  # [L, 2 * n_bases]
