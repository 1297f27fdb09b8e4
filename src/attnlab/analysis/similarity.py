"""How alike two positions' encodings are: the TensorFlow position-encoding notebook's similarity views.

The TensorFlow position-encoding notebook compares every position with every
other (cosine similarity), and one position with all the others (dot product and
sum of squared errors), to show that nearby positions have similar vectors and
that the likeness fades with distance. The d2l chapter relates the sinusoids to
binary counting: bit ``k`` flips every ``2**k`` numbers as column pair ``i``
turns every ``2*pi/w_i`` positions.

All functions take a table ``[L, D]`` (tensor or array) and compute in float64.
Shape notation: ``L`` positions, ``D`` encoding dimension.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab._limits import check_tensor
from attnlab._validate import check_int

__all__ = [
    "as_table",
    "check_table",
    "binary_codes",
    "cosine_similarity_matrix",
    "distance_matrix",
    "dot_products",
    "means",
    "norms",
    "sse",
]


def check_table(table: Any, name: str = "table") -> Tensor:
    """Return ``table`` as a detached tensor ``[L, D]`` in its own dtype and device.

    Accepts a tensor or array ``[L, D]`` or ``[1, L, D]`` (a ``pe`` buffer). No
    float64 copy is made here: for a 1e6 x 512 table that would be 4 GB.

    Raises:
        TypeError: if it is not a tensor or array of real numbers.
        ValueError: if it is not 2-D after dropping a leading 1, or is empty.
    """
    if isinstance(table, np.ndarray):
        if not np.issubdtype(table.dtype, np.number) or np.iscomplexobj(table):
            raise TypeError(f"{name} must hold real numbers, got dtype {table.dtype}")
        table = torch.from_numpy(np.ascontiguousarray(table))
    if not isinstance(table, Tensor):
        raise TypeError(f"{name} must be a tensor or numpy array [L, D], got {type(table).__name__}")
    if table.is_complex() or table.dtype == torch.bool:
        raise TypeError(f"{name} must hold real numbers, got dtype {table.dtype}")
    if table.dim() == 3 and table.shape[0] == 1:  # a `pe` buffer [1, L, D]
        table = table[0]
    if table.dim() != 2:
        raise ValueError(f"{name} must have shape [L, D] or [1, L, D], got {list(table.shape)}")
    if table.shape[0] == 0 or table.shape[1] == 0:
        raise ValueError(f"{name} must have at least one position and one column, got {list(table.shape)}")
    return table.detach()


def as_table(table: Any, name: str = "table") -> Tensor:
    """Return ``table`` (as accepted by :func:`check_table`) as a float64 CPU tensor ``[L, D]``."""
    return check_table(table, name).to("cpu", torch.float64)


def _check_position(position: int, n: int) -> int:
    position = check_int("position", position)
    if not -n <= position < n:
        raise ValueError(f"position must be in [0, {n}) for a table of {n} positions, got {position}")
    return position % n


def cosine_similarity_matrix(table: Any, *, eps: float = 1e-11) -> Tensor:
    """Cosine similarity between every pair of positions.

    ``eps`` is added to each norm as the TensorFlow position-encoding notebook does,
    so an all-zero row gives 0 rather than NaN.

    Returns:
        float64 ``[L, L]``, symmetric, ones on the diagonal (for non-zero rows).
    """
    t = as_table(table)
    unit = t / (t.norm(dim=1, keepdim=True) + eps)  # [L, D]
    return unit @ unit.T  # [L, D] x [D, L] -> [L, L]


def distance_matrix(table: Any) -> Tensor:
    """Euclidean distance ``||PE[i] - PE[j]||`` between every pair of positions.

    Computed from the differences, not from ``|a|^2 + |b|^2 - 2ab``, which loses
    the small distances to cancellation.

    Returns:
        float64 ``[L, L]``, symmetric, zero diagonal.
    """
    t = as_table(table)
    return torch.cdist(t, t, compute_mode="donot_use_mm_for_euclid_dist")  # [L, L]


def dot_products(table: Any, position: int) -> Tensor:
    """Dot product of every position's vector with the one at ``position``: ``[L]``."""
    t = as_table(table)
    return t @ t[_check_position(position, t.shape[0])]  # [L, D] x [D] -> [L]


def sse(table: Any, position: int) -> Tensor:
    """Sum of squared differences between every position and ``position``: ``[L]``."""
    t = as_table(table)
    return ((t - t[_check_position(position, t.shape[0])]) ** 2).sum(dim=1)  # [L]


def norms(table: Any) -> Tensor:
    """Euclidean norm of each position's vector: ``[L]`` (sqrt(D/2) for even-D sinusoids)."""
    return as_table(table).norm(dim=1)


def means(table: Any) -> Tensor:
    """Mean of each position's vector over its columns: ``[L]``."""
    return as_table(table).mean(dim=1)


def binary_codes(n: int, n_bits: int | None = None) -> Tensor:
    """Binary representations of ``0 .. n-1``, highest bit first (the d2l chapter).

    Args:
        n: how many numbers.
        n_bits: width; defaults to the fewest bits that hold ``n - 1`` (at least 1).

    Returns:
        int64 ``[n, n_bits]`` of 0/1; ``binary_codes(8)[5]`` is ``[1, 0, 1]``.

    Raises:
        ValueError: if ``n < 1`` or ``n_bits`` is too small to hold ``n - 1``, or for codes
            that cannot fit in memory (naming ``n`` and ``n_bits``).
    """
    n = check_int("n", n, minimum=1)
    needed = max(1, (n - 1).bit_length())
    if n_bits is None:
        n_bits = needed
    n_bits = check_int("n_bits", n_bits, minimum=1)
    if n_bits < needed:
        raise ValueError(f"n_bits={n_bits} cannot hold {n - 1}; it needs at least {needed}")
    check_tensor({"n": n, "n_bits": n_bits}, "the int64 codes", itemsize=8, copies=2)  # the numbers, the codes
    shifts = torch.arange(n_bits - 1, -1, -1)  # [n_bits], highest bit first
    return (torch.arange(n)[:, None] >> shifts[None, :]) & 1  # [n, n_bits]
