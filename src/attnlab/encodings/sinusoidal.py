"""Sinusoidal positional encodings, every layout in the wild, computed in float64.

Vaswani et al. 2017, "Attention Is All You Need", §3.5 (arXiv:1706.03762)::

    PE[p, 2i]   = sin(p * w_i)        w_i = base ** (-2i / D)
    PE[p, 2i+1] = cos(p * w_i)

Implementations disagree on two things, and a checkpoint only loads into the
one it was trained with (reference/pe_and_attention_anchors.md §5.3):

* the column **layout**: interleaved ``s0 c0 s1 c1 ...`` (the paper, the labs,
  HF DistilBERT) or two blocks ``[sin | cos]`` (Marian, Pegasus, x-transformers);
* the angle **rates**: ``base ** (-2i/D)`` ("vaswani") or ``base ** (-i/(D/2-1))``
  ("linspace": tensor2tensor, fairseq, Whisper, and the TensorFlow notebook's
  ``min_rate ** linspace(0, 1, D/2)``), whose slowest rate is exactly ``1/base``.

``layout="t2t"`` is the tensor2tensor / fairseq / Whisper preset: ``[sin | cos]``
blocks with "linspace" rates and, for odd ``D``, a zero last column as they pad.

Why float64: the labs evaluate ``sin(p * w)`` in float32, where the angle
``p * w`` itself is rounded. The error grows with the position: 7e-4 at
p = 10,000 and 6e-2 at p = 1,000,000. Angles here are float64 and the table is
cast once at the end, so every entry is the correctly rounded value (error
below 1e-7 in float32 at any position up to ~1e8).

Shape notation: ``L`` positions, ``D`` model dimension (``d_model``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab._limits import check_tensor
from attnlab._validate import check_choice, check_dtype, check_finite_float, check_int

__all__ = ["LAYOUTS", "RATES", "angle_rates", "shift_matrix", "sinusoidal", "sinusoidal_at"]

LAYOUTS = ("interleaved", "concat", "t2t")
RATES = ("vaswani", "linspace")

# Rows computed per float64 block: keeps the float64 scratch near 64 MB for
# D = 512 however long the table is (a 1e6 x 512 table in float64 would be 4 GB).
_BLOCK_ROWS = 1 << 15


def angle_rates(
    d_model: int,
    *,
    base: float = 10000.0,
    rates: str = "vaswani",
) -> Tensor:
    """Angular speeds (radians per position) of the sinusoid pairs, in float64.

    Args:
        d_model: model dimension ``D``; there are ``ceil(D / 2)`` rates.
        base: the wavelength scale (10000 in the paper); the slowest pair turns
            once every ``2 * pi * base`` positions.
        rates: ``"vaswani"`` gives ``base ** (-2i / D)`` (the paper, the labs);
            ``"linspace"`` gives ``base ** (-i / (n - 1))`` for ``n`` rates, i.e.
            ``(1 / base) ** linspace(0, 1, n)`` (tensor2tensor, fairseq, Whisper,
            the TensorFlow position-encoding notebook).

    Returns:
        float64 tensor ``[ceil(D / 2)]``, decreasing from 1.

    Raises:
        TypeError: if ``d_model`` is not an integer or ``base`` not a number.
        ValueError: if ``d_model < 1``, ``base <= 0`` or ``rates`` is unknown.

    Example:
        >>> angle_rates(8)
        tensor([1.0000e+00, 1.0000e-01, 1.0000e-02, 1.0000e-03], dtype=torch.float64)
    """
    d_model = check_int("d_model", d_model, minimum=1)
    base = check_finite_float("base", base, positive=True)
    rates = check_choice("rates", rates, RATES)
    n = (d_model + 1) // 2
    i = torch.arange(n, dtype=torch.float64)
    if rates == "vaswani":
        exponents = 2.0 * i / d_model
    else:
        # t2t's `log_inc = log(max/min) / max(n - 1, 1)`: one rate means rate 1.
        exponents = i / max(n - 1, 1)
    # exp(-e * ln base) rather than base ** -e: same float64 value to the last
    # ulp or two, and it reads as the log-space formula every anchor writes.
    return torch.exp(-exponents * math.log(base))


def _columns(d_model: int, layout: str) -> tuple[Tensor, Tensor]:
    """Column indices of the sines and of the cosines for a layout.

    Returns ``(sin_cols [n_sin], cos_cols [n_cos])``. For odd ``D`` the
    interleaved and concat layouts keep ``ceil(D/2)`` sines and drop the last
    cosine; "t2t" keeps ``D // 2`` of each and leaves the last column zero.
    """
    n_pairs = d_model // 2
    if layout == "interleaved":
        sin_cols = torch.arange(0, d_model, 2)
        cos_cols = torch.arange(1, d_model, 2)
    elif layout == "concat":
        n_sin = (d_model + 1) // 2
        sin_cols = torch.arange(n_sin)
        cos_cols = torch.arange(n_sin, d_model)
    else:  # t2t
        sin_cols = torch.arange(n_pairs)
        cos_cols = torch.arange(n_pairs, 2 * n_pairs)
    return sin_cols, cos_cols


def _layout_rates(d_model: int, layout: str, base: float, rates: str | None) -> Tensor:
    """The float64 rates a layout uses: "t2t" fixes linspace rates over ``D // 2`` pairs."""
    if layout == "t2t":
        if rates not in (None, "linspace"):
            raise ValueError(f"layout 't2t' implies rates='linspace', got rates={rates!r}")
        n_pairs = d_model // 2
        if n_pairs == 0:
            return torch.zeros(0, dtype=torch.float64)
        return angle_rates(2 * n_pairs, base=base, rates="linspace")
    return angle_rates(d_model, base=base, rates=rates or "vaswani")


def sinusoidal(
    max_len: int,
    d_model: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rates: str | None = None,
    start: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The sinusoidal positional-encoding table, computed in float64 and cast once.

    Args:
        max_len: number of positions ``L`` (any length >= 1).
        d_model: model dimension ``D`` (odd works: see ``layout``).
        base: wavelength scale, 10000 in the paper.
        layout: ``"interleaved"`` (``s0 c0 s1 c1 ...``: the paper, the labs,
            DistilBERT), ``"concat"`` (``[sin | cos]``: Marian, x-transformers) or
            ``"t2t"`` (``[sin | cos]`` with linspace rates: tensor2tensor, fairseq,
            Whisper; odd ``D`` gets a zero last column). Interleaved and concat
            drop the last cosine column when ``D`` is odd.
        rates: ``"vaswani"`` (default) or ``"linspace"`` (see :func:`angle_rates`).
            ``layout="interleaved", rates="linspace"`` is the table of the
            TensorFlow position-encoding notebook.
        start: position of the first row (rows are ``start .. start + L - 1``);
            used to extend a table or to encode a decoding step.
        dtype: floating dtype of the result; the computation is float64 anyway.
        device: where the result lives.

    Returns:
        Tensor ``[L, D]``.

    Raises:
        TypeError: for a non-integer size or a non-floating ``dtype``.
        ValueError: for ``max_len < 1``, ``d_model < 1``, ``start < 0``,
            ``base <= 0``, an unknown ``layout`` / ``rates``, or a table that cannot fit
            in memory (naming ``max_len`` and ``d_model``), before anything is allocated.

    Example:
        >>> sinusoidal(4, 8)[1].round(decimals=4)
        tensor([0.8415, 0.5403, 0.0998, 0.9950, 0.0100, 1.0000, 0.0010, 1.0000])
    """
    max_len = check_int("max_len", max_len, minimum=1)
    d_model = check_int("d_model", d_model, minimum=1)
    start = check_int("start", start, minimum=0)
    layout = check_choice("layout", layout, LAYOUTS)
    base = check_finite_float("base", base, positive=True)
    dtype = check_dtype("dtype", dtype)
    if rates is not None:
        rates = check_choice("rates", rates, RATES)

    # The table, built on the CPU (and a copy on `device`); the float64 scratch is a block of rows.
    check_tensor({"max_len": max_len, "d_model": d_model}, f"the {str(dtype).removeprefix('torch.')} table",
                 itemsize=dtype.itemsize)
    w = _layout_rates(d_model, layout, base, rates)  # [n] float64
    sin_cols, cos_cols = _columns(d_model, layout)
    out = torch.zeros(max_len, d_model, dtype=dtype)
    for r0 in range(0, max_len, _BLOCK_ROWS):
        r1 = min(max_len, r0 + _BLOCK_ROWS)
        # Positions are exact integers in float64 up to 2**53.
        _write_rows(out[r0:r1], torch.arange(start + r0, start + r1, dtype=torch.float64), w, sin_cols, cos_cols)
    return out if device is None else out.to(device)


def _write_rows(out: Tensor, p: Tensor, w: Tensor, sin_cols: Tensor, cos_cols: Tensor) -> None:
    """Write the rows at float64 positions ``p [N]`` into ``out [N, D]``: each angle ``p * w`` in float64, cast once."""
    angles = p[:, None] * w[None, :]  # [N, n]
    out[:, sin_cols] = torch.sin(angles[:, : len(sin_cols)]).to(out.dtype)
    out[:, cos_cols] = torch.cos(angles[:, : len(cos_cols)]).to(out.dtype)


def sinusoidal_at(
    positions: Tensor,
    d_model: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rates: str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The rows of :func:`sinusoidal`'s table at the integer ``positions [N]`` alone, ``[N, D]``.

    Each row is computed as the table computes it (the angle ``p * w`` in float64, cast once),
    in ``O(N * D)`` whatever the positions: a row at position 10**7 costs what a row at 0 does,
    not a table of every row before it. On ``positions``' device.

    Raises:
        TypeError / ValueError: as :func:`sinusoidal` (naming ``positions`` when they are not a
            1-d integer tensor), or for rows that cannot fit in memory.
    """
    if not isinstance(positions, Tensor) or positions.is_floating_point() or positions.dtype == torch.bool \
            or positions.ndim != 1:
        got = f"{positions.dtype} {list(positions.shape)}" if isinstance(positions, Tensor) else \
            type(positions).__name__
        raise TypeError(f"positions must be a 1-d integer tensor [N], got {got}")
    d_model = check_int("d_model", d_model, minimum=1)
    layout = check_choice("layout", layout, LAYOUTS)
    base = check_finite_float("base", base, positive=True)
    dtype = check_dtype("dtype", dtype)
    if rates is not None:
        rates = check_choice("rates", rates, RATES)
    check_tensor({"positions": positions.shape[0], "d_model": d_model},
                 f"the {str(dtype).removeprefix('torch.')} rows", itemsize=dtype.itemsize, copies=3)
    device = positions.device
    w = _layout_rates(d_model, layout, base, rates).to(device)  # [n] float64
    sin_cols, cos_cols = (c.to(device) for c in _columns(d_model, layout))
    out = torch.zeros(positions.shape[0], d_model, dtype=dtype, device=device)
    _write_rows(out, positions.to(torch.float64), w, sin_cols, cos_cols)  # exact integers in float64 up to 2**53
    return out


def shift_matrix(
    delta: int,
    d_model: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rates: str | None = None,
) -> Tensor:
    """The linear map that moves a sinusoidal encoding ``delta`` positions.

    Each (sin, cos) pair at rate ``w`` is a point on a circle; moving ``delta``
    positions rotates it by ``delta * w`` (Vaswani §3.5, the TensorFlow
    position-encoding notebook's ``transition_matrix``, the d2l chapter's relative
    projection)::

        sin((p+d)w) = sin(pw) cos(dw) + cos(pw) sin(dw)
        cos((p+d)w) = cos(pw) cos(dw) - sin(pw) sin(dw)

    so ``M`` is block-diagonal with 2x2 rotations, independent of ``p``, and
    ``sinusoidal(L, D)[p] @ M == sinusoidal(L, D)[p + delta]`` (row vectors).

    Args:
        delta: the shift in positions; negative moves back.
        d_model: model dimension ``D``; must be even (an odd table has a sine
            column without its cosine, and no linear map can shift it).
        base, layout, rates: as for :func:`sinusoidal`, which the matrix must match.

    Returns:
        float64 tensor ``[D, D]``.

    Raises:
        TypeError: if ``delta`` or ``d_model`` is not an integer.
        ValueError: if ``d_model`` is odd or below 2, or a name is unknown.
    """
    delta = check_int("delta", delta)
    d_model = check_int("d_model", d_model, minimum=2)
    if d_model % 2:
        raise ValueError(
            f"shift_matrix needs an even d_model, got {d_model}: the last sine column has "
            "no cosine partner, so no linear map shifts it"
        )
    layout = check_choice("layout", layout, LAYOUTS)
    base = check_finite_float("base", base, positive=True)
    if rates is not None:
        rates = check_choice("rates", rates, RATES)

    w = _layout_rates(d_model, layout, base, rates)  # [D/2]
    sin_cols, cos_cols = _columns(d_model, layout)
    c, s = torch.cos(delta * w), torch.sin(delta * w)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    # Row k of M says how input column k feeds each output column (x @ M).
    m[sin_cols, sin_cols] = c
    m[cos_cols, sin_cols] = s
    m[sin_cols, cos_cols] = -s
    m[cos_cols, cos_cols] = c
    return m
