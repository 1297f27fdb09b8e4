"""2-D and 3-D sinusoidal positional encodings, for images and video, computed in float64.

Each axis of the grid (rows and columns; or frames, rows and columns) gets its
own block of channels, holding the 1-D interleaved sinusoids of Vaswani et al.
2017 §3.5 (arXiv:1706.03762) of that axis' integer coordinate. With ``A`` axes,
``P = D // 2`` sin/cos pairs, and ``n = ceil(P / A)`` pairs per axis::

    channels  [ axis 0: s0 c0 s1 c1 ... | axis 1: s0 c0 ... | (axis 2 ...) | (0 if D is odd) ]
    pair i of axis a at coordinate x:   sin(x * w_i), cos(x * w_i),   w_i = base ** (-i / n)

so two pixels' vectors have the dot product ``sum_a sum_i cos((x_a - x'_a) w_i)``,
a function of their offset along each axis only (the 2-D analogue of the 1-D
table's shift invariance).

The channel split is the one of positional-encodings (tatp22/multidim-positional-encoding,
``positional_encodings.torch_encodings.PositionalEncoding2D/3D``): every axis but
the last gets ``n`` pairs (their ``ceil(D / 4) * 2`` resp. ``ceil(D / 6) * 2``
channels), all with the same rates ``w_i``, and the last axis takes what is left,
its fastest pairs first. For every even ``D`` at which their split leaves each
axis at least one pair, the tables are equal (2-D: every even ``D >= 4``, e.g. 6
gives 4 row and 2 column channels; 3-D: every even ``D >= 6`` except 8).

Where ours differs, and why:

* **Never an axis without a pair.** Their 3-D table at ``D = 8`` gives the first
  two axes 4 channels each and truncates the third axis away entirely (``D = 2, 4``
  likewise, and 2-D ``D = 2`` loses the columns): every pixel along that axis gets
  the same vector, silently. Ours deals the pairs out as they do, but never so
  many that a later axis is left without one (3-D ``D = 8``: 2, 1, 1 pairs), and
  refuses ``D < 2 * A`` (fewer pairs than axes) with a ValueError.
* **Odd D: a zero last channel.** Their odd-``D`` table is their ``D + 1`` table
  cut by one column, which leaves the last axis a lone sine without its cosine
  (``D = 5``: 2 row pairs, then ``sin(col)``). A lone sine has no linear shift
  map and breaks the offset-only dot product above, so ours is the ``D - 1``
  table with a zero column appended (tensor2tensor pads odd ``D`` the same way):
  ``sinusoidal_2d(H, W, 5) == cat(sinusoidal_2d(H, W, 4), 0)``.
* **float64.** They compute in float32; ours computes the angles in float64 and
  casts once (DESIGN.md), so the entries differ from theirs by float32 rounding.
* **The module adds.** Their ``PositionalEncoding2D(x)`` *returns the encoding*
  ``[B, H, W, D]`` (their ``Summer`` wraps it to add); :class:`PositionalEncoding2D`
  here returns ``x + encoding``, like the 1-D :class:`PositionalEncoding`.

Shape notation: ``B`` batch, ``D`` model dimension; the grid is ``[H, W]`` (2-D:
height, width; ``H`` is the image height here, not heads) or ``[Z, H, W]`` (3-D:
``Z`` frames or depth).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnlab._limits import check_tensor
from attnlab._validate import check_dtype, check_finite_float, check_int, check_probability

__all__ = ["PositionalEncoding2D", "PositionalEncoding3D", "axis_pairs", "sinusoidal_2d", "sinusoidal_3d"]


def axis_pairs(d_model: int, *, axes: int) -> tuple[int, ...]:
    """How many sin/cos pairs each axis of a grid encoding gets.

    positional-encodings' split: ``n = ceil(P / A)`` pairs to each axis in turn
    (``P = D // 2`` pairs, ``A`` axes), the last axis taking the rest; except that
    an axis never takes so many that a later one is left without a pair.

    Args:
        d_model: model dimension ``D``; at least ``2 * axes``.
        axes: number of grid axes ``A`` (2 for images, 3 for video).

    Returns:
        ``A`` positive counts summing to ``D // 2``; the first is the largest, ``n``.

    Raises:
        TypeError: if an argument is not an integer.
        ValueError: if ``axes < 1`` or ``d_model < 2 * axes`` (an axis would get no pair).

    Example:
        >>> axis_pairs(64, axes=2), axis_pairs(6, axes=2), axis_pairs(8, axes=3), axis_pairs(16, axes=3)
        ((16, 16), (2, 1), (2, 1, 1), (3, 3, 2))
    """
    axes = check_int("axes", axes, minimum=1)
    d_model = check_int("d_model", d_model, minimum=1)
    pairs_left = d_model // 2
    if pairs_left < axes:
        raise ValueError(
            f"d_model must be at least {2 * axes} for {axes} axes (one sin/cos pair per axis), got d_model={d_model}"
        )
    per_axis = -(-pairs_left // axes)  # ceil(P / A)
    pairs = []
    for a in range(axes):
        later = axes - 1 - a  # axes still owed at least one pair each
        take = min(per_axis, pairs_left - later)
        pairs.append(take)
        pairs_left -= take
    return tuple(pairs)


def _grid_table(
    sizes: Sequence[int],
    d_model: int,
    *,
    base: float,
    dtype: torch.dtype,
    device: torch.device | str | None,
    names: Sequence[str] = ("height", "width"),
) -> Tensor:
    """The table ``[*sizes, D]`` of checked arguments (see the module docstring for the layout).

    ``names``: the caller's names of the sizes, for the message that refuses a table that cannot fit.
    """
    pairs = axis_pairs(d_model, axes=len(sizes))
    check_tensor({**dict(zip(names, sizes, strict=True)), "d_model": d_model},
                 f"the {str(dtype).removeprefix('torch.')} table", itemsize=dtype.itemsize)
    n = pairs[0]
    # w_i = base ** (-i / n): positional-encodings' 1 / 10000 ** (arange(0, 2n, 2) / 2n).
    rates = torch.exp(-torch.arange(n, dtype=torch.float64) / n * math.log(base))  # [n] float64
    out = torch.zeros(*sizes, d_model, dtype=dtype, device=device)  # [*sizes, D]; an odd D keeps its zero
    col = 0
    for a, (size, k) in enumerate(zip(sizes, pairs, strict=True)):
        # Integer coordinates are exact in float64; the sines are O(size * k), not O(grid * D).
        angles = torch.arange(size, dtype=torch.float64)[:, None] * rates[None, :k]  # [size, k]
        block = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # [size, 2k]: s0 c0 s1 c1 ...
        shape = [1] * len(sizes) + [2 * k]
        shape[a] = size
        out[..., col : col + 2 * k] = block.to(dtype=dtype, device=out.device).view(shape)  # broadcast over other axes
        col += 2 * k
    return out


def _check_sizes(names: Sequence[str], sizes: Sequence[object]) -> list[int]:
    """Each grid size an integer >= 1, named in the error."""
    return [check_int(name, size, minimum=1) for name, size in zip(names, sizes, strict=True)]


def sinusoidal_2d(
    height: int,
    width: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The 2-D sinusoidal table of an image grid, computed in float64 and cast once.

    The first ``2 * n`` channels encode the row, the rest the column (see the
    module docstring); equal to positional-encodings' ``PositionalEncoding2D``
    for every even ``D >= 4``.

    Args:
        height: rows ``H`` of the grid.
        width: columns ``W`` of the grid.
        d_model: model dimension ``D``, at least 4 (one pair per axis); an odd
            ``D`` gets a zero last channel.
        base: wavelength scale, 10000 as in the paper and positional-encodings.
        dtype: floating dtype of the result.
        device: where the result lives.

    Returns:
        Tensor ``[H, W, D]``; entry ``[r, c]`` encodes the pixel at row ``r``, column ``c``.

    Raises:
        TypeError: for a non-integer size or a non-floating ``dtype``.
        ValueError: for a size below 1, ``d_model < 4`` or ``base <= 0``.

    Example:
        >>> sinusoidal_2d(2, 3, 4)[1, 2]  # sin(1), cos(1), sin(2), cos(2)
        tensor([ 0.8415,  0.5403,  0.9093, -0.4161])
    """
    sizes = _check_sizes(("height", "width"), (height, width))
    d_model = check_int("d_model", d_model, minimum=1)
    base = check_finite_float("base", base, positive=True)
    return _grid_table(sizes, d_model, base=base, dtype=check_dtype("dtype", dtype), device=device)


def sinusoidal_3d(
    depth: int,
    height: int,
    width: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The 3-D sinusoidal table of a video (or volume) grid, computed in float64 and cast once.

    Three channel blocks: the frame (depth), the row, the column. Equal to
    positional-encodings' ``PositionalEncoding3D`` for every even ``D >= 6`` but 8
    (where theirs leaves the column axis no channel at all).

    Args:
        depth: frames ``Z`` of the grid.
        height: rows ``H``.
        width: columns ``W``.
        d_model: model dimension ``D``, at least 6 (one pair per axis); an odd
            ``D`` gets a zero last channel.
        base: wavelength scale, 10000 as in the paper and positional-encodings.
        dtype: floating dtype of the result.
        device: where the result lives.

    Returns:
        Tensor ``[Z, H, W, D]``.

    Raises:
        TypeError: for a non-integer size or a non-floating ``dtype``.
        ValueError: for a size below 1, ``d_model < 6`` or ``base <= 0``.

    Example:
        >>> sinusoidal_3d(2, 2, 2, 6)[1, 0, 1]  # sin(1), cos(1) for frame 1; row 0; column 1
        tensor([0.8415, 0.5403, 0.0000, 1.0000, 0.8415, 0.5403])
    """
    sizes = _check_sizes(("depth", "height", "width"), (depth, height, width))
    d_model = check_int("d_model", d_model, minimum=1)
    base = check_finite_float("base", base, positive=True)
    return _grid_table(sizes, d_model, base=base, dtype=check_dtype("dtype", dtype), device=device,
                       names=("depth", "height", "width"))


class _GridPositionalEncoding(nn.Module):
    """Add the grid table to inputs ``[B, *grid, D]``; the 2-D and 3-D modules set ``axes``."""

    axes: int = 2
    _grid_names: tuple[str, ...] = ("H", "W")

    def __init__(self, d_model: int, *, base: float = 10000.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        axis_pairs(self.d_model, axes=self.axes)  # refuse a D too small for the axes now, not at the first call
        self.base = check_finite_float("base", base, positive=True)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def table(self, *sizes: int, dtype: torch.dtype = torch.float32,
              device: torch.device | str | None = None) -> Tensor:
        """The table ``[*grid, D]`` this module adds, for a grid of ``sizes``.

        Raises:
            TypeError, ValueError: for sizes that are not ``axes`` integers >= 1.
        """
        if len(sizes) != self.axes:
            raise ValueError(f"{type(self).__name__}.table expects {self.axes} sizes, got {sizes}")
        checked = _check_sizes(self._grid_names, sizes)
        return _grid_table(checked, self.d_model, base=self.base, dtype=check_dtype("dtype", dtype), device=device,
                           names=self._grid_names)

    def forward(self, x: Tensor) -> Tensor:
        """``x + table``, then dropout; ``x`` is ``[B, *grid, D]`` (see the class docstring).

        Raises:
            TypeError: if ``x`` is not a floating-point tensor.
            ValueError: if ``x`` does not have ``axes + 2`` dimensions and ``D`` features.
        """
        name = type(self).__name__
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} expects a floating-point tensor x, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.dim() != self.axes + 2 or x.shape[-1] != self.d_model:
            want = ", ".join(("B", *self._grid_names, str(self.d_model)))
            raise ValueError(f"{name} expects x of shape [{want}], got {list(x.shape)}")
        # Computed per call, in x's dtype and on its device: the sines cost O((H + W) D)
        # and the rest is a broadcast copy, so no cache can go stale or pin a grid size.
        pe = _grid_table(x.shape[1:-1], self.d_model, base=self.base, dtype=x.dtype, device=x.device,
                         names=self._grid_names)  # [*grid, D]
        out = x + pe  # [B, *grid, D]
        return self.dropout(out) if self.training and self.dropout.p > 0 else out

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return f"d_model={self.d_model}, base={self.base:g}, dropout={self.dropout.p:g}"


class PositionalEncoding2D(_GridPositionalEncoding):
    """Add the 2-D sinusoidal table (:func:`sinusoidal_2d`) to image features, then dropout.

    Unlike positional-encodings' ``PositionalEncoding2D``, which returns the
    encoding itself (its ``Summer`` adds it), this returns ``x + encoding``.
    Any grid size works: the table is computed per call (no ``max_len``), in the
    input's dtype (from float64) and on its device. Nothing is learned and no
    buffer is saved.

    Args:
        d_model: model dimension ``D``, at least 4 (odd works: zero last channel).
        base: wavelength scale, 10000 in the paper.
        dropout: dropout probability applied after the addition.

    Shapes:
        ``forward(x [B, H, W, D]) -> [B, H, W, D]`` (``H`` rows, ``W`` columns).

    Raises:
        TypeError / ValueError: for a non-integer or too small ``d_model``
            (below 4), a non-positive ``base``, a dropout outside [0, 1), or (in
            ``forward``) an input that is not a floating ``[B, H, W, D]``.

    Example:
        >>> enc = PositionalEncoding2D(4)
        >>> enc(torch.zeros(1, 2, 3, 4))[0, 1, 2]  # the table itself, added to zeros
        tensor([ 0.8415,  0.5403,  0.9093, -0.4161])
    """

    axes = 2
    _grid_names = ("height", "width")


class PositionalEncoding3D(_GridPositionalEncoding):
    """Add the 3-D sinusoidal table (:func:`sinusoidal_3d`) to video or volume features, then dropout.

    Unlike positional-encodings' ``PositionalEncoding3D``, which returns the
    encoding itself, this returns ``x + encoding``. Any grid size works (the
    table is computed per call, in the input's dtype and on its device).

    Args:
        d_model: model dimension ``D``, at least 6 (odd works: zero last channel).
        base: wavelength scale, 10000 in the paper.
        dropout: dropout probability applied after the addition.

    Shapes:
        ``forward(x [B, Z, H, W, D]) -> [B, Z, H, W, D]`` (``Z`` frames, ``H`` rows, ``W`` columns).

    Raises:
        TypeError / ValueError: for a non-integer or too small ``d_model``
            (below 6), a non-positive ``base``, a dropout outside [0, 1), or (in
            ``forward``) an input that is not a floating ``[B, Z, H, W, D]``.

    Example:
        >>> PositionalEncoding3D(6)(torch.ones(2, 4, 3, 3, 6)).shape
        torch.Size([2, 4, 3, 3, 6])
    """

    axes = 3
    _grid_names = ("depth", "height", "width")
