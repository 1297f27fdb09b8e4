"""Rotary position embedding (RoPE): turn queries and keys by their positions.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding"
(arXiv:2104.09864), §3.2-3.4. The features are taken in pairs; pair ``i`` of a
vector at position ``m`` is rotated by the angle ``m * theta_i`` with::

    theta_i = base ** (-2i / d)        i = 0 .. d/2 - 1,   d = rotary_dim

Rotations by ``m * theta`` and ``n * theta`` compose to one by ``(n - m) * theta``,
so the score ``<R(m) q, R(n) k> = <q, R(n - m) k>`` depends on the positions only
through their offset, and a rotation preserves norms.

Which features form a pair is a convention, and the two in use give different
numbers for the same weights (reference/pe_and_attention_anchors.md §0, §4.2):

* ``"interleaved"``: adjacent features ``(x[2i], x[2i+1])``. The paper, GPT-J,
  Meta's LLaMA reference, torchtune, x-transformers, rotary-embedding-torch.
* ``"half"``: ``(x[i], x[i + d/2])``, the ``rotate_half`` of GPT-NeoX and HF
  LLaMA/Qwen.

They are equal up to a fixed permutation of the features,
:func:`interleaved_to_half_permutation`: HF permutes Meta's ``W_q``/``W_k`` rows
by it so that ``rotate_half`` reproduces them.

Partial rotary (GPT-J ``rotary_dim``, GPT-NeoX ``rotary_pct``): only the first
``rotary_dim`` features are rotated, the rest pass through untouched.

Context extension, both off by default:

* position interpolation (Chen et al. 2023, arXiv:2306.15595): positions are
  divided by ``interpolation``, squeezing a longer sequence into the angle range
  the model was trained on;
* NTK-aware scaling (bloc97, 2023; x-transformers, rotary-embedding-torch,
  HF ``"ntk"``): ``base * ntk_factor ** (d / (d - 2))``, which stretches the slow
  pairs and leaves the fastest one (``theta_0 = 1``) alone.

Precision. The angles are computed in ``angle_dtype`` (float32 or float64) from
float64 frequencies, whatever the dtype of ``q``/``k``, and the rotation itself
runs in float32 (float64 for float64 inputs) before casting back. Computing
``m * theta`` in bfloat16 rounds the position itself: 8 bits of mantissa cannot
tell position 257 from 256, the bug of gpt-neox #1003, Megatron #535, HF #29285,
and of rotary-embedding-torch's ``rotate_queries_or_keys`` for bf16 inputs.
A float32 angle is off by at most ~``m * 1.2e-7`` radians (1e-3 at m = 10,000);
``angle_dtype=torch.float64`` makes that ~``m * 2e-16``.

Positions. :class:`Rotary` is a :class:`PositionScheme`: :meth:`Rotary.rotate`
turns by the offsets' positions (with a shared table when the queries' positions
are among the keys'), :meth:`Rotary.rotate_at` by any positions, which is what
Ruoss et al. 2023's randomized rotary draws (``attnlab.encodings.randomized``).

The cos/sin tables are computed per call, never cached: they cost ``O(L d)``
against attention's ``O(L^2 d)``, and a cache keyed on length, device and dtype
is how the anchors got stale tables (rotary-embedding-torch #11).

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L`` any
length, ``Dh`` head dim, ``d`` rotary dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab._validate import check_choice, check_dtype, check_finite_float, check_int
from attnlab.encodings.attention_position import PositionScheme, check_positions

__all__ = [
    "CONVENTIONS",
    "Rotary",
    "apply_rotary",
    "interleaved_to_half_permutation",
    "rotary_angles",
    "rotary_inv_freq",
]

CONVENTIONS = ("interleaved", "half")
_ANGLE_DTYPES = (torch.float32, torch.float64)


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
        inv_freq: the speeds ``theta`` ``[d / 2]`` (:func:`rotary_inv_freq`).
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
    return p[..., None] * theta  # [*P, 1] * [d/2] -> [*P, d/2]


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
        pairs = xr.unflatten(-1, (d // 2, 2))  # [..., L, d/2, 2]: (x[2i], x[2i+1])
        x0, x1 = pairs[..., 0], pairs[..., 1]  # [..., L, d/2] each
        out = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)  # [..., L, d/2, 2]
        out = out.flatten(-2)  # [..., L, d]
    else:
        x0, x1 = xr[..., : d // 2], xr[..., d // 2 :]  # [..., L, d/2] each: (x[i], x[i + d/2])
        out = torch.cat((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)  # [..., L, d]
    out = out.to(x.dtype)
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


class Rotary(PositionScheme):
    """Rotary position embedding as an attention position scheme (RoFormer, Su et al. 2021).

    :meth:`rotate` turns query ``i`` by position ``q_offset + i`` and key ``j``
    by ``k_offset + j``; scores then depend only on ``j - i`` (see the module
    docstring for the formula, conventions and precision). No parameters, no
    bias, no value term, any length (``max_len`` None).

    Args:
        head_dim: features per head ``Dh``.
        rotary_dim: rotate only the first ``d`` features (partial rotary: GPT-J,
            GPT-NeoX); default ``head_dim``. Even, at most ``head_dim``.
        base: wavelength scale, 10000 in the paper (LLaMA 3 uses 500000).
        convention: ``"interleaved"`` (adjacent pairs: the paper, GPT-J, Meta
            LLaMA, rotary-embedding-torch) or ``"half"`` (``rotate_half``:
            GPT-NeoX, HF LLaMA/Qwen).
        interpolation: position interpolation (Chen et al. 2023): positions are
            divided by this factor; 1 is none.
        ntk_factor: NTK-aware scaling: the base becomes
            ``base * ntk_factor ** (d / (d - 2))``; 1 is none.
        angle_dtype: ``torch.float32`` (default, as HF and torchtune) or
            ``torch.float64``; the angles and their cos/sin are computed in it
            whatever the dtype of ``q``/``k``.

    Raises:
        TypeError: for a non-integer size, non-numeric factor or non-dtype ``angle_dtype``.
        ValueError: for an odd ``head_dim`` without ``rotary_dim``, an odd or too
            large ``rotary_dim``, non-positive ``base``/``interpolation``/
            ``ntk_factor``, NTK scaling with ``rotary_dim = 2``, an unknown
            ``convention``, or a half-precision ``angle_dtype``.

    Example:
        >>> rope = Rotary(2)
        >>> x = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)  # [B=1, H=1, L=3, Dh=2]
        >>> rq, rk = rope.rotate(x, x)  # positions 0, 1, 2: turned by 0, 1, 2 radians
        >>> rq[0, 0]
        tensor([[ 1.0000,  0.0000],
                [ 0.5403,  0.8415],
                [-0.4161,  0.9093]])
        >>> (rq @ rk.transpose(-1, -2))[0, 0]  # cos(j - i): depends only on the offset
        tensor([[ 1.0000,  0.5403, -0.4161],
                [ 0.5403,  1.0000,  0.5403],
                [-0.4161,  0.5403,  1.0000]])
    """

    def __init__(
        self,
        head_dim: int,
        *,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        convention: str = "interleaved",
        interpolation: float = 1.0,
        ntk_factor: float = 1.0,
        angle_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.rotary_dim = _check_rotary_dim(self.head_dim, rotary_dim)
        self.base = check_finite_float("base", base, positive=True)
        self.convention = check_choice("convention", convention, CONVENTIONS)
        self.interpolation = check_finite_float("interpolation", interpolation, positive=True)
        self.ntk_factor = check_finite_float("ntk_factor", ntk_factor, positive=True)
        self.angle_dtype = _check_angle_dtype(angle_dtype)
        # A plain float64 CPU tensor, not a buffer: `module.half()` would round a
        # buffer to float16, which is exactly the precision loss this avoids.
        self.inv_freq = rotary_inv_freq(self.rotary_dim, base=self.base, ntk_factor=self.ntk_factor)

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}, "
                f"convention={self.convention!r}, interpolation={self.interpolation:g}, "
                f"ntk_factor={self.ntk_factor:g}, angle_dtype={self.angle_dtype}")

    def _cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of the angles of integer ``positions [L]``, ``[L, d/2]`` each."""
        # int64 positions: converted to angle_dtype once, inside rotary_angles.
        angles = rotary_angles(positions, self.inv_freq, interpolation=self.interpolation,
                               angle_dtype=self.angle_dtype)  # [L, d/2]
        return angles.cos(), angles.sin()

    def _check_qk(self, q: Tensor, k: Tensor) -> None:
        """Refuse anything but floating ``q [..., T, Dh]`` and ``k [..., S, Dh]`` with ``Dh = head_dim``."""
        for name, t in (("q", q), ("k", k)):
            if not isinstance(t, Tensor) or not t.is_floating_point():
                raise TypeError(f"{name} must be a floating-point tensor, got {getattr(t, 'dtype', type(t).__name__)}")
            if t.ndim < 2 or t.shape[-1] != self.head_dim:
                raise ValueError(f"{name} must be [..., L, head_dim={self.head_dim}], got shape {list(t.shape)}")

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> tuple[Tensor, Tensor]:
        """Rotate queries and keys by their positions.

        Args:
            q: queries ``[B, H, T, Dh]`` (any leading dims) at positions
                ``q_offset .. q_offset + T - 1``.
            k: keys ``[B, H, S, Dh]`` at positions ``k_offset .. k_offset + S - 1``.
            q_offset: position of the first query.
            k_offset: position of the first key.

        Returns:
            ``(q, k)`` rotated, each in its own dtype and shape.

        Raises:
            TypeError: for non-floating ``q``/``k`` or non-integer offsets.
            ValueError: if ``q`` or ``k`` does not have ``head_dim`` features.
        """
        self._check_qk(q, k)
        q_offset = check_int("q_offset", q_offset)
        k_offset = check_int("k_offset", k_offset)
        T, S = q.shape[-2], k.shape[-2]
        cos_k, sin_k = self._cos_sin(torch.arange(k_offset, k_offset + S, device=k.device))  # [S, d/2]
        if q.device == k.device and k_offset <= q_offset and q_offset + T <= k_offset + S:
            # Self-attention and cached decoding: the query positions are among
            # the keys', so one table serves both.
            rows = slice(q_offset - k_offset, q_offset - k_offset + T)
            cos_q, sin_q = cos_k[rows], sin_k[rows]  # [T, d/2]
        else:
            cos_q, sin_q = self._cos_sin(torch.arange(q_offset, q_offset + T, device=q.device))  # [T, d/2]
        return (_rotate(q, cos_q, sin_q, self.rotary_dim, self.convention),
                _rotate(k, cos_k, sin_k, self.rotary_dim, self.convention))

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate queries by the angles ``q_pos * theta`` and keys by ``k_pos * theta``.

        Args:
            q: queries ``[B, H, T, Dh]`` (any leading dims).
            k: keys ``[B, H, S, Dh]``.
            q_pos: the queries' integer positions ``[T]``, on ``q``'s device.
            k_pos: the keys' integer positions ``[S]``, on ``k``'s device; pass the
                same tensor as ``q_pos`` (self-attention) to compute one table.

        Returns:
            ``(q, k)`` rotated, each in its own dtype and shape.

        Raises:
            TypeError: for non-floating ``q``/``k`` or non-integer positions.
            ValueError: if ``q`` or ``k`` does not have ``head_dim`` features, or
                the positions are not ``[T]`` / ``[S]``.
        """
        self._check_qk(q, k)
        check_positions("q_pos", q_pos, q.shape[-2])
        check_positions("k_pos", k_pos, k.shape[-2])
        cos_k, sin_k = self._cos_sin(k_pos)  # [S, d/2]
        cos_q, sin_q = (cos_k, sin_k) if q_pos is k_pos else self._cos_sin(q_pos)  # [T, d/2]
        return (_rotate(q, cos_q, sin_q, self.rotary_dim, self.convention),
                _rotate(k, cos_k, sin_k, self.rotary_dim, self.convention))
