"""Rotary position embedding, the functional parts: frequencies, angles, the rotation itself.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding"
(arXiv:2104.09864), eq. 13-15. Pair ``i`` of a vector at position ``m`` turns by
``m * theta_i``, ``theta_i = base ** (-2i / d)``. The conventions (which features
pair up), partial rotary, the context extensions and the precision rules are
described in :mod:`attnlab.encodings.rotary`, whose :class:`~attnlab.encodings.rotary.Rotary`
module is built on these functions; every name here is importable from there too.

Shape notation: ``L`` any length, ``Dh`` head dim, ``d`` rotary dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab._validate import check_choice, check_dtype, check_finite_float, check_int

__all__ = [
    "CONVENTIONS",
    "apply_rotary",
    "interleaved_to_half_permutation",
    "rotary_angles",
    "rotary_inv_freq",
]

CONVENTIONS = ("interleaved", "half")
_ANGLE_DTYPES = (torch.float32, torch.float64)


def check_qk(q: Tensor, k: Tensor, *, head_dim: int) -> None:
    """Refuse anything but floating ``q [..., T, Dh]`` and ``k [..., S, Dh]`` with ``Dh = head_dim``.

    Raises:
        TypeError: for a non-tensor or non-floating ``q`` / ``k``.
        ValueError: for fewer than 2 dims or a last dim other than ``head_dim``.
    """
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {getattr(t, 'dtype', type(t).__name__)}")
        if t.ndim < 2 or t.shape[-1] != head_dim:
            raise ValueError(f"{name} must be [..., L, head_dim={head_dim}], got shape {list(t.shape)}")


def _check_rotary_dim(head_dim: int, rotary_dim: int | None) -> int:
    """The rotary dim: ``head_dim`` by default; even, at least 2, at most ``head_dim``."""
    if rotary_dim is None:
        if head_dim % 2:
            raise ValueError(
                f"head_dim must be even to rotate every feature, got head_dim={head_dim}; "
                f"pass rotary_dim={head_dim - 1} to rotate the first {head_dim - 1} and pass the last through"
            )
        return head_dim
    rotary_dim = check_int("rotary_dim", rotary_dim, minimum=2)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (features are rotated in pairs), got rotary_dim={rotary_dim}")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be at most head_dim={head_dim}, got rotary_dim={rotary_dim}")
    return rotary_dim


def _check_angle_dtype(angle_dtype: torch.dtype) -> torch.dtype:
    angle_dtype = check_dtype("angle_dtype", angle_dtype)
    if angle_dtype not in _ANGLE_DTYPES:
        raise ValueError(
            f"angle_dtype must be torch.float32 or torch.float64, got angle_dtype={angle_dtype}: "
            "lower precision rounds the positions themselves"
        )
    return angle_dtype


def rotary_inv_freq(rotary_dim: int, *, base: float = 10000.0, ntk_factor: float = 1.0) -> Tensor:
    """The rotation speeds ``theta_i`` (radians per position) of the feature pairs, float64.

    ``theta_i = b ** (-2i / d)`` for ``i = 0 .. d/2 - 1`` (RoFormer eq. 15), with
    ``b = base * ntk_factor ** (d / (d - 2))`` (NTK-aware scaling; ``b = base``
    when ``ntk_factor`` is 1).

    Args:
        rotary_dim: number ``d`` of rotated features; even, at least 2 (at least 4
            with NTK scaling, whose exponent divides by ``d - 2``).
        base: the wavelength scale, 10000 in the paper.
        ntk_factor: the NTK-aware context-extension factor; 1 is none.

    Returns:
        float64 tensor ``[d / 2]``, decreasing from 1.

    Raises:
        TypeError: for a non-integer ``rotary_dim`` or non-numeric ``base``/``ntk_factor``.
        ValueError: for an odd or too small ``rotary_dim``, or a non-positive ``base``/``ntk_factor``.

    Example:
        >>> rotary_inv_freq(8)
        tensor([1.0000e+00, 1.0000e-01, 1.0000e-02, 1.0000e-03], dtype=torch.float64)
    """
    rotary_dim = check_int("rotary_dim", rotary_dim, minimum=2)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (features are rotated in pairs), got rotary_dim={rotary_dim}")
    base = check_finite_float("base", base, positive=True)
    ntk_factor = check_finite_float("ntk_factor", ntk_factor, positive=True)
    if ntk_factor != 1.0:
        if rotary_dim == 2:
            raise ValueError(
                f"NTK scaling needs rotary_dim >= 4 (its exponent d / (d - 2) divides by zero), "
                f"got rotary_dim={rotary_dim} with ntk_factor={ntk_factor}"
            )
        base = base * ntk_factor ** (rotary_dim / (rotary_dim - 2))
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim  # [d/2]: 2i / d
    return torch.exp(-exponents * math.log(base))


def rotary_angles(
    positions: Tensor,
    inv_freq: Tensor,
    *,
    interpolation: float = 1.0,
    angle_dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The rotation angles ``(positions / interpolation) * theta_i``, in ``angle_dtype``.

    Args:
        positions: positions, any shape ``[*P]``, integer or floating (a float16
            position is refused for the same reason as a float16 angle).
        inv_freq: the speeds ``theta`` ``[d / 2]`` (:func:`rotary_inv_freq`), or one
            row per position ``[*P, d / 2]`` (the length-dependent RoPE scalings).
        interpolation: position-interpolation factor; positions are divided by it.
        angle_dtype: float32 or float64, the precision of the whole computation.

    Returns:
        ``[*P, d / 2]`` in ``angle_dtype``, on ``positions``' device.

    Raises:
        TypeError: if ``positions`` is not a tensor or ``angle_dtype`` not a dtype.
        ValueError: for a half-precision ``positions`` or ``angle_dtype``, or a
            non-positive ``interpolation``.
    """
    angle_dtype = _check_angle_dtype(angle_dtype)
    interpolation = check_finite_float("interpolation", interpolation, positive=True)
    if not isinstance(positions, Tensor):
        raise TypeError(f"positions must be a tensor, got {type(positions).__name__}")
    if positions.dtype in (torch.float16, torch.bfloat16):
        raise ValueError(
            f"positions must be integers, float32 or float64, got dtype {positions.dtype}: "
            "half precision cannot hold positions above 256 (bfloat16) or 2048 (float16) exactly"
        )
    p = positions.to(angle_dtype)
    if interpolation != 1.0:
        p = p / interpolation
    theta = inv_freq.to(device=p.device, dtype=angle_dtype)
    return p[..., None] * theta  # [*P, 1] * [d/2] (or [*P, d/2]) -> [*P, d/2]


def interleaved_to_half_permutation(head_dim: int, *, rotary_dim: int | None = None) -> Tensor:
    """The feature permutation that turns the interleaved convention into the half one.

    With ``perm`` this permutation and ``inv = argsort(perm)``::

        rotate_interleaved(x) == rotate_half(x[..., perm])[..., inv]

    so a model trained with interleaved rotary gives the same scores under
    "half" rotary once the rows of each head's ``W_q`` and ``W_k`` are permuted
    by ``perm`` (HF's ``convert_llama_weights_to_hf.py`` does exactly this to
    Meta's weights). Within the rotated block the even features come first, then
    the odd ones: ``[0, 2, 4, ..., 1, 3, 5, ...]``; pass-through features keep
    their place.

    Args:
        head_dim: features per head ``Dh``.
        rotary_dim: rotated features ``d`` (default ``head_dim``).

    Returns:
        int64 tensor ``[Dh]``, a permutation of ``0 .. Dh - 1``.

    Raises:
        TypeError: for a non-integer size.
        ValueError: for an odd ``rotary_dim`` (or odd ``head_dim`` without one),
            or ``rotary_dim > head_dim``.

    Example:
        >>> interleaved_to_half_permutation(8)
        tensor([0, 2, 4, 6, 1, 3, 5, 7])
        >>> interleaved_to_half_permutation(6, rotary_dim=4)
        tensor([0, 2, 1, 3, 4, 5])
    """
    head_dim = check_int("head_dim", head_dim, minimum=1)
    d = _check_rotary_dim(head_dim, rotary_dim)
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2), torch.arange(d, head_dim)])


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, d: int, convention: str) -> Tensor:
    """Rotate the first ``d`` features of ``x [..., L, Dh]`` by angles with ``cos``/``sin`` ``[..., L, d/2]``."""
    # float32 arithmetic for half inputs (a bf16 product of a large feature and
    # sin loses the small ones); float64 inputs keep their precision.
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = cos.to(work), sin.to(work)
    xr = x[..., :d].to(work)  # [..., L, d]
    if convention == "interleaved":
        x0, x1 = xr.unflatten(-1, (d // 2, 2)).unbind(-1)  # [..., L, d/2] each: (x[2i], x[2i+1])
    else:
        x0, x1 = xr[..., : d // 2], xr[..., d // 2 :]  # [..., L, d/2] each: (x[i], x[i + d/2])
    # Traced (torch.compile, torch.export) the products are fused anyway, and dynamo refuses out= on a view.
    if torch.compiler.is_compiling() or (
            torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)):
        parts = (x0 * cos - x1 * sin, x1 * cos + x0 * sin)  # [..., L, d/2] each
        out = torch.stack(parts, dim=-1).flatten(-2) if convention == "interleaved" else torch.cat(parts, dim=-1)
    else:
        # Without autograd, written into out's halves one product at a time (the same numbers): at
        # long lengths the rotation of q and k is a visible part of inference's peak memory, and
        # stack/cat of four products held five copies of x.
        out = torch.empty(torch.broadcast_shapes(xr.shape[:-1], cos.shape[:-1]) + (d,), dtype=work,
                          device=x.device)  # [..., L, d]
        if convention == "interleaved":
            y0, y1 = out.unflatten(-1, (d // 2, 2)).unbind(-1)  # views of out's even and odd features
        else:
            y0, y1 = out[..., : d // 2], out[..., d // 2 :]
        torch.mul(x0, cos, out=y0).sub_(x1 * sin)  # x0 cos - x1 sin
        torch.mul(x1, cos, out=y1).add_(x0 * sin)  # x1 cos + x0 sin
    out = out.to(x.dtype)  # [..., L, d]
    if d == x.shape[-1]:
        return out
    return torch.cat((out, x[..., d:]), dim=-1)  # [..., L, Dh]: pass-through features untouched


def apply_rotary(
    x: Tensor,
    positions: Tensor,
    *,
    rotary_dim: int | None = None,
    base: float = 10000.0,
    convention: str = "interleaved",
    interpolation: float = 1.0,
    ntk_factor: float = 1.0,
    angle_dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Rotate ``x`` by rotary position embedding at the given positions (functional form).

    Args:
        x: vectors ``[..., L, Dh]`` (e.g. queries ``[B, H, T, Dh]``), any floating dtype.
        positions: the position of each vector, ``[L]`` or any shape that
            broadcasts to ``x.shape[:-1]`` (e.g. ``[B, 1, L]`` for per-sample
            positions with left padding or packing); integer or float32/64.
        rotary_dim: features rotated, the first ``d`` (default all; even).
        base: wavelength scale, 10000 in the paper.
        convention: ``"interleaved"`` (adjacent pairs: RoFormer, Meta LLaMA) or
            ``"half"`` (``rotate_half``: GPT-NeoX, HF).
        interpolation: position-interpolation factor (Chen et al. 2023); 1 is none.
        ntk_factor: NTK-aware base scaling factor; 1 is none.
        angle_dtype: float32 or float64, precision of the angles and their cos/sin.

    Returns:
        ``[..., L, Dh]``, same dtype as ``x``.

    Raises:
        TypeError: for a non-floating ``x``, a non-tensor ``positions`` or a bad type.
        ValueError: for ``positions`` that do not broadcast to ``x.shape[:-1]``
            and any bad value named in :class:`Rotary`.

    Example:
        >>> x = torch.tensor([[1.0, 0.0]])  # one vector, Dh = 2
        >>> apply_rotary(x, torch.tensor([1]))  # turned by 1 radian
        tensor([[0.5403, 0.8415]])
    """
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim < 2:
        raise ValueError(f"x must be [..., L, Dh] (at least 2 dims), got shape {list(x.shape)}")
    convention = check_choice("convention", convention, CONVENTIONS)
    d = _check_rotary_dim(x.shape[-1], rotary_dim)
    inv_freq = rotary_inv_freq(d, base=base, ntk_factor=ntk_factor)
    angles = rotary_angles(positions, inv_freq, interpolation=interpolation, angle_dtype=angle_dtype)
    try:
        torch.broadcast_shapes(positions.shape, x.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"positions of shape {list(positions.shape)} do not broadcast to x's {list(x.shape[:-1])} "
            f"(x without its last dim)"
        ) from None
    return _rotate(x, angles.cos(), angles.sin(), d, convention)

