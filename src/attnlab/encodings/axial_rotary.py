"""Axial rotary position embedding (axial RoPE): rotary over the axes of an image or video grid.

RoPE (Su et al. 2021, RoFormer, arXiv:2104.09864) turns feature pairs by
``position * theta_i``. On a grid a token has one coordinate per axis, so the
rotated features are split into ``A`` equal shares, one per axis, and each share
is ordinary RoPE of its own coordinate. This is rotary-embedding-torch's
``RotaryEmbedding(d_a, ...).get_axial_freqs(*sizes)`` followed by
``apply_rotary_emb`` (lucidrains; used in its ViT and video models), and the
2-D RoPE of Heo et al. 2024, "Rotary Position Embedding for Vision Transformer"
(RoPE-Axial, ECCV, arXiv:2403.13298). With ``d`` rotated features, ``d_a = d / A``
per axis and pair ``i`` of a share::

    features  [ axis 0: (x0 x1) (x2 x3) ... | axis 1: ... | (pass-through) ]   adjacent pairs, in axis order
    angle of pair i of axis a  =  c_a * theta_i

with two choices of coordinates ``c_a`` and speeds ``theta_i`` (``coords``):

* ``"integer"`` (default, like a language model's positions): ``c_a = 0 .. n_a - 1``
  and ``theta_i = base ** (-2i / d_a)`` (rotary-embedding-torch's ``freqs_for="lang"``);
* ``"pixel"``: ``c_a = linspace(-1, 1, n_a)``, the grid normalised to [-1, 1],
  and ``theta_i = pi * linspace(1, max_freq / 2, d_a / 2)`` (``freqs_for="pixel"``,
  the Fourier features of Jaegle et al.'s Perceiver): the same image at two
  resolutions gets the same angles at the same place.

Because every share rotates by its own axis' coordinate, the score
``<R(p) q, R(p') k>`` depends on the two pixels only through their offset
``(p'_0 - p_0, p'_1 - p_1, ...)`` (exactly, for integer coordinates; for pixel
coordinates through the offset in normalised units, so on one grid size), and the
rotation keeps norms.

Flattening. Attention sees a sequence, so the grid is flattened **row-major**
(C order: the last axis fastest): token ``l`` of ``[B, H, L, Dh]`` with
``L = rows * cols`` sits at row ``l // cols``, column ``l % cols``, as
``x.flatten(2, 3)`` of ``[B, H, rows, cols, Dh]`` gives. :class:`AxialRotary`
must know the grid (``grid=`` or :meth:`AxialRotary.set_grid`) and refuses a
sequence that is not the whole grid; :meth:`AxialRotary.rotate_at` takes
explicit flattened positions for a subset of it (e.g. the visible patches of a
masked autoencoder).

Convention. Only the interleaved pairs (adjacent features) of rotary-embedding-torch
are offered: other 2-D/3-D RoPEs assign axes differently (Qwen2-VL's M-RoPE
splits one frequency ladder into sections under ``rotate_half``), and giving them
this name would mislead.

Precision, as :class:`attnlab.encodings.Rotary`: the speeds are float64, the
angles and their cos/sin are computed in ``angle_dtype`` (float32 or float64),
the rotation in float32 (float64 for float64 inputs), then cast back.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L`` tokens
(``rows * cols``), ``Dh`` head dim, ``d`` rotated features.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab._limits import check_tensor
from attnlab._validate import check_choice, check_dtype, check_finite_float, check_int
from attnlab.encodings.rotary import rotary_inv_freq
from attnlab.encodings.rotary_functional import check_qk
from attnlab.encodings.scheme import PositionScheme, call_positions, check_positions

__all__ = ["COORDS", "AxialRotary", "axial_rotary_angles"]

COORDS = ("integer", "pixel")
_ANGLE_DTYPES = (torch.float32, torch.float64)


def _check_rotary_dim(head_dim: int, rotary_dim: int | None, axes: int) -> int:
    """The rotated features ``d``: ``head_dim`` by default; a multiple of ``2 * axes``, at most ``head_dim``."""
    step = 2 * axes  # each axis' share must itself be pairs
    if rotary_dim is None:
        if head_dim < step:
            raise ValueError(f"head_dim must be at least {step} for {axes} axes (one feature pair per axis), "
                             f"got head_dim={head_dim}")
        if head_dim % step:
            fit = head_dim - head_dim % step
            raise ValueError(f"head_dim={head_dim} cannot be split into {axes} equal shares of feature pairs "
                             f"(a multiple of {step}); pass rotary_dim={fit} to rotate the first {fit} features "
                             "and pass the rest through")
        return head_dim
    rotary_dim = check_int("rotary_dim", rotary_dim, minimum=1)
    if rotary_dim % step or rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be a multiple of {step} ({axes} axes, pairs) and at most "
                         f"head_dim={head_dim}, got rotary_dim={rotary_dim}")
    return rotary_dim


def _check_angle_dtype(angle_dtype: torch.dtype) -> torch.dtype:
    angle_dtype = check_dtype("angle_dtype", angle_dtype)
    if angle_dtype not in _ANGLE_DTYPES:
        raise ValueError(f"angle_dtype must be torch.float32 or torch.float64, got angle_dtype={angle_dtype}: "
                         "lower precision rounds the coordinates themselves")
    return angle_dtype


def _axis_speeds(axis_dim: int, coords: str, base: float, max_freq: float) -> Tensor:
    """The speeds ``theta [d_a / 2]`` (float64) shared by every axis (see the module docstring)."""
    if coords == "integer":
        return rotary_inv_freq(axis_dim, base=base)  # base ** (-2i / d_a), RoFormer eq. 15
    return math.pi * torch.linspace(1.0, max_freq / 2, axis_dim // 2, dtype=torch.float64)


def _grid_angles(positions: Tensor, sizes: Sequence[int], speeds: Tensor, coords: str,
                 angle_dtype: torch.dtype) -> Tensor:
    """Angles ``[*P, d / 2]`` of the tokens at flattened (row-major) ``positions [*P]`` of a grid of ``sizes``."""
    theta = speeds.to(device=positions.device, dtype=angle_dtype)  # [d_a / 2]
    shares = []
    stride = math.prod(sizes)
    for size in sizes:
        stride //= size
        index = (positions // stride) % size  # [*P]: this axis' coordinate index (C order)
        if coords == "integer":
            c = index.to(angle_dtype)  # exact: integers below 2**24
        else:
            c = torch.linspace(-1.0, 1.0, size, dtype=angle_dtype, device=positions.device)[index]  # [*P]
        shares.append(c[..., None] * theta)  # [*P, 1] * [d_a / 2] -> [*P, d_a / 2]
    return torch.cat(shares, dim=-1)  # [*P, d / 2], axis 0's share first


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, d: int) -> Tensor:
    """Turn adjacent pairs of the first ``d`` features of ``x [..., L, Dh]`` by ``cos``/``sin`` ``[L, d/2]``."""
    work = torch.float64 if x.dtype == torch.float64 else torch.float32  # bf16 products lose small features
    cos, sin = cos.to(work), sin.to(work)
    pairs = x[..., :d].to(work).unflatten(-1, (d // 2, 2))  # [..., L, d/2, 2]: (x[2i], x[2i+1])
    x0, x1 = pairs[..., 0], pairs[..., 1]  # [..., L, d/2] each
    out = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2).to(x.dtype)  # [..., L, d]
    return out if d == x.shape[-1] else torch.cat((out, x[..., d:]), dim=-1)  # [..., L, Dh]


def _check_grid(sizes: Sequence[object], axes: int | None = None) -> tuple[int, ...]:
    """The grid sizes as positive ints (``axes`` of them when given)."""
    if axes is not None and len(sizes) != axes:
        raise ValueError(f"grid must have {axes} sizes (one per axis), got {tuple(sizes)}")
    if not sizes:
        raise ValueError("grid must have at least one size")
    return tuple(check_int(f"grid size {a}", s, minimum=1) for a, s in enumerate(sizes))


def axial_rotary_angles(
    *sizes: int,
    head_dim: int,
    rotary_dim: int | None = None,
    base: float = 10000.0,
    coords: str = "integer",
    max_freq: float = 10.0,
    angle_dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The rotation angles of every token of a grid, one per rotated feature pair.

    ``angles[r, c, j]`` turns pair ``j`` (features ``2j, 2j + 1``) of the token at
    row ``r``, column ``c``: pairs ``0 .. d_a/2 - 1`` by the row's coordinate, the
    next ``d_a / 2`` by the column's, and so on (see the module docstring).
    rotary-embedding-torch's ``get_axial_freqs(*sizes)`` is this with every angle
    repeated twice (``[*sizes, d]``).

    Args:
        *sizes: the grid, e.g. ``rows, cols`` (2-D) or ``frames, rows, cols`` (3-D).
        head_dim: features per head ``Dh``.
        rotary_dim: rotated features ``d`` (default ``head_dim``), a multiple of ``2 * len(sizes)``.
        base: wavelength scale of the integer coordinates' speeds, 10000 as in RoFormer.
        coords: ``"integer"`` (coordinates ``0 .. n - 1``) or ``"pixel"``
            (``linspace(-1, 1, n)`` with speeds ``pi * linspace(1, max_freq / 2, d_a / 2)``).
        max_freq: highest frequency of the pixel speeds (rotary-embedding-torch's
            ``max_freq``, default 10); unused for integer coordinates.
        angle_dtype: float32 or float64, the precision of the angles.
        device: where the result lives.

    Returns:
        ``[*sizes, d / 2]`` in ``angle_dtype`` (``[rows, cols, d / 2]`` for an image).

    Raises:
        TypeError: for a non-integer size, a non-numeric ``base``/``max_freq`` or a non-dtype.
        ValueError: for no sizes or a size below 1, a ``head_dim``/``rotary_dim`` that
            cannot be split into one even share per axis, a non-positive ``base``/``max_freq``,
            an unknown ``coords`` or a half-precision ``angle_dtype``.

    Example:
        >>> axial_rotary_angles(2, 3, head_dim=4)[1, 2]  # row 1, column 2
        tensor([1., 2.])
    """
    grid = _check_grid(sizes)
    head_dim = check_int("head_dim", head_dim, minimum=1)
    d = _check_rotary_dim(head_dim, rotary_dim, len(grid))
    base = check_finite_float("base", base, positive=True)
    coords = check_choice("coords", coords, COORDS)
    max_freq = check_finite_float("max_freq", max_freq, positive=True)
    angle_dtype = _check_angle_dtype(angle_dtype)
    speeds = _axis_speeds(d // len(grid), coords, base, max_freq)
    # Per token: its int64 position and index, and each axis' share of the d/2 angles, then all of them.
    check_tensor({f"grid size {a}": s for a, s in enumerate(grid)}, f"the angles of {d // 2} feature pairs",
                 itemsize=16 + 3 * (d // 2) * angle_dtype.itemsize, device=device)
    positions = torch.arange(math.prod(grid), device=device)  # [L], row-major
    return _grid_angles(positions, grid, speeds, coords, angle_dtype).reshape(*grid, d // 2)  # [*sizes, d/2]


class AxialRotary(PositionScheme):
    """Axial RoPE as an attention position scheme, for flattened images and videos.

    ``MultiHeadAttention(..., position=AxialRotary(Dh, grid=(rows, cols)))``
    attends over ``x [B, rows * cols, D]``, the grid flattened row-major (see the
    module docstring). :meth:`rotate` refuses queries or keys that are not the
    whole grid at offset 0; a subset of the grid goes through :meth:`rotate_at`
    with its flattened positions. For the same image at several sizes, call
    :meth:`set_grid` before each forward. No parameters, no bias, no value term.

    Args:
        head_dim: features per head ``Dh``.
        axes: number of grid axes ``A`` (2: rows and columns; 3: frames, rows, columns).
        grid: the grid sizes, ``A`` of them (e.g. ``(14, 14)``); may be set later
            with :meth:`set_grid`.
        rotary_dim: rotated features ``d`` (default ``head_dim``), a multiple of
            ``2 * A``; the rest pass through untouched.
        base: wavelength scale of the integer coordinates' speeds, 10000 as in RoFormer.
        coords: ``"integer"`` (default) or ``"pixel"`` coordinates (see the module docstring).
        max_freq: highest frequency of the pixel speeds (default 10, as rotary-embedding-torch).
        angle_dtype: float32 (default) or float64, the precision of the angles.

    Attributes:
        caches: False: a decoding step with a key/value cache is not the whole grid,
            so :meth:`rotate` would refuse it; a model decodes without a cache.

    Raises:
        TypeError / ValueError: for a non-integer size, an ``axes`` below 1, a
            ``head_dim``/``rotary_dim`` that cannot be split into one even share per
            axis, a grid of the wrong length or with a size below 1, a non-positive
            ``base``/``max_freq``, an unknown ``coords`` or a half-precision ``angle_dtype``.

    Example:
        >>> rope = AxialRotary(4, grid=(2, 2))  # one pair for the row, one for the column
        >>> x = torch.tensor([1.0, 0.0, 1.0, 0.0]).expand(1, 1, 4, 4)  # [B=1, H=1, L=2*2, Dh=4]
        >>> rq, rk = rope.rotate(x, x)
        >>> (rq @ rk.transpose(-1, -2))[0, 0]  # cos(d_row) + cos(d_col): offsets only
        tensor([[2.0000, 1.5403, 1.5403, 1.0806],
                [1.5403, 2.0000, 1.0806, 1.5403],
                [1.5403, 1.0806, 2.0000, 1.5403],
                [1.0806, 1.5403, 1.5403, 2.0000]])
    """

    rotates = True
    batched_positions = True
    caches = False

    def __init__(
        self,
        head_dim: int,
        *,
        axes: int = 2,
        grid: Sequence[int] | None = None,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        coords: str = "integer",
        max_freq: float = 10.0,
        angle_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.axes = check_int("axes", axes, minimum=1)
        self.rotary_dim = _check_rotary_dim(self.head_dim, rotary_dim, self.axes)
        self.base = check_finite_float("base", base, positive=True)
        self.coords = check_choice("coords", coords, COORDS)
        self.max_freq = check_finite_float("max_freq", max_freq, positive=True)
        self.angle_dtype = _check_angle_dtype(angle_dtype)
        # A plain float64 tensor, not a buffer: `module.half()` must not round the speeds.
        self.speeds = _axis_speeds(self.rotary_dim // self.axes, self.coords, self.base, self.max_freq)
        self.grid: tuple[int, ...] | None = None if grid is None else _check_grid(tuple(grid), self.axes)

    def set_grid(self, *sizes: int) -> AxialRotary:
        """Set the grid the flattened sequences come from, e.g. ``set_grid(rows, cols)``; returns ``self``.

        Raises:
            TypeError / ValueError: unless ``sizes`` are ``axes`` integers >= 1.
        """
        self.grid = _check_grid(sizes, self.axes)
        return self

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"head_dim={self.head_dim}, axes={self.axes}, grid={self.grid}, rotary_dim={self.rotary_dim}, "
                f"coords={self.coords!r}, base={self.base:g}, max_freq={self.max_freq:g}, "
                f"angle_dtype={self.angle_dtype}")

    def _known_grid(self) -> tuple[int, ...]:
        if self.grid is None:
            raise RuntimeError("AxialRotary has no grid: pass grid=(rows, cols) or call set_grid(rows, cols) first")
        return self.grid

    def _cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        angles = _grid_angles(positions, self._known_grid(), self.speeds, self.coords, self.angle_dtype)  # [*P, d/2]
        if positions.ndim == 2:
            angles = angles.unsqueeze(1)  # [B, P, d/2] -> [B, 1, P, d/2]: the same for every head
        return angles.cos(), angles.sin()

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0,
               position_ids: Tensor | None = None, key_position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Rotate the queries and keys of a whole flattened grid by their (row, column, ...) coordinates.

        Args:
            q: queries ``[B, H, L, Dh]``, ``L = rows * cols`` (row-major).
            k: keys ``[B, H, L, Dh]``.
            q_offset: must be 0 (the sequence is the whole grid).
            k_offset: must be 0.
            position_ids: the queries' flattened grid positions ``[B, T]`` (a subset of the grid
                per row, e.g. patches kept after dropping some); then ``q`` and ``k`` need not be
                the whole grid.
            key_position_ids: the keys' ``[B, S]`` (default: ``position_ids`` when ``S == T``).

        Returns:
            ``(q, k)`` rotated, each in its own dtype and shape.

        Raises:
            RuntimeError: if no grid was given.
            TypeError: for non-floating ``q``/``k`` or non-integer offsets.
            ValueError: if ``q``/``k`` do not have ``head_dim`` features, or are not the
                whole grid (length ``rows * cols``, offsets 0).
        """
        check_qk(q, k, head_dim=self.head_dim)
        if position_ids is not None or key_position_ids is not None:
            q_pos, k_pos = call_positions(q.shape[0], q.shape[-2], k.shape[-2], q.device, position_ids=position_ids,
                                          key_position_ids=key_position_ids)
            return self.rotate_at(q, k, q_pos=q_pos, k_pos=k_pos)
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        grid = self._known_grid()
        n = math.prod(grid)
        T, S = q.shape[-2], k.shape[-2]
        if (T, S, q_offset, k_offset) != (n, n, 0, 0):
            raise ValueError(
                f"AxialRotary's grid {' x '.join(map(str, grid))} has {n} positions, but got {T} queries at offset "
                f"{q_offset} and {S} keys at offset {k_offset}: q and k must be the whole grid, flattened row-major "
                "(call set_grid for another size; rotate_at takes the positions of a subset)"
            )
        positions = torch.arange(n, device=k.device)  # [L]
        return self.rotate_at(q, k, q_pos=positions.to(q.device), k_pos=positions)

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate queries and keys at given flattened (row-major) grid positions.

        Args:
            q: queries ``[B, H, T, Dh]`` (any leading dims).
            k: keys ``[B, H, S, Dh]``.
            q_pos: the queries' flattened positions ``[T]`` (or per row ``[B, T]``) in
                ``0 .. rows * cols - 1``, on ``q``'s device; pass the same tensor as ``k_pos``
                to compute one table.
            k_pos: the keys' flattened positions ``[S]`` (or ``[B, S]``), on ``k``'s device.

        Returns:
            ``(q, k)`` rotated, each in its own dtype and shape.

        Raises:
            RuntimeError: if no grid was given.
            TypeError: for non-floating ``q``/``k`` or non-integer positions.
            ValueError: if ``q``/``k`` do not have ``head_dim`` features, or the
                positions are not ``[T]`` / ``[S]`` or ``[B, T]`` / ``[B, S]`` (inside the grid is the
                caller's promise).
        """
        check_qk(q, k, head_dim=self.head_dim)
        check_positions("q_pos", q_pos, q.shape[-2])
        check_positions("k_pos", k_pos, k.shape[-2])
        cos_k, sin_k = self._cos_sin(k_pos)  # [S, d/2] or [B, 1, S, d/2]
        cos_q, sin_q = (cos_k, sin_k) if q_pos is k_pos else self._cos_sin(q_pos)  # [T, d/2] or [B, 1, T, d/2]
        return _rotate(q, cos_q, sin_q, self.rotary_dim), _rotate(k, cos_k, sin_k, self.rotary_dim)
