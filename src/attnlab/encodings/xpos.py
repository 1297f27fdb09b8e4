"""xPos: rotary position embedding with an exponential decay on the offset.

Sun et al. 2022, "A Length-Extrapolatable Transformer" (ACL 2023, arXiv:2212.10554),
§3.1-3.2; reference code microsoft/torchscale ``xpos_relative_position.py``. xPos
is rotary (:mod:`attnlab.encodings.rotary`) with every rotated pair also scaled.
Pair ``k`` (``k = 0 .. d/2 - 1``, ``d = Dh``) has the rotary speed
``theta_k = base ** (-2k / d)`` and the decay rate::

    zeta_k = (2k / d + gamma) / (1 + gamma)        in (0, 1), gamma = 0.4

A query at position ``n`` is rotated by ``n * theta_k`` and scaled by
``zeta_k ** (n / scale_base)``; a key at position ``m`` is rotated by
``m * theta_k`` and scaled by ``zeta_k ** (-m / scale_base)`` (``scale_base`` =
512). The score of pair ``k`` is then the rotary score times
``zeta_k ** ((n - m) / scale_base)``: it depends on the positions only through
``n - m``, and the fast-turning pairs (small ``k``, small ``zeta_k``) fade with
distance, which is what keeps attention stable beyond the training length.

Causal by nature. The factor is a decay only for ``n >= m``, a key at or before
its query. A key *after* its query (``m > n``) is amplified by
``zeta_k ** (-(m - n) / scale_base) > 1``, without bound, so xPos is meant for
causal attention (``is_causal=True`` or a causal mask), as the paper uses it.
Nothing stops a bidirectional call (the scheme cannot see the mask), but its
scores grow with the distance to future keys.

Numerics and the reference position. The two factors each overflow float32 on
their own long before their product does: ``zeta_0 = 0.4 / 1.4`` and
``zeta_0 ** (-m / 512) = exp(1.2528 m / 512)`` passes float32's largest number
at ``m`` near 36,000, while the query's factor becomes subnormal. Only the
product matters, so every exponent is taken relative to a reference position
``c``: queries are scaled by ``zeta ** ((n - c) / scale_base)`` and keys by
``zeta ** (-(m - c) / scale_base)``, which changes no score. torchscale and
rotary-embedding-torch centre each call on its own middle (``c = L // 2``); that
cannot serve a key/value cache, whose keys are scaled once, when they are
appended, and must match keys scaled later. So ``c`` here is a constructor
argument, fixed for the module's life (default 0): cached decoding then gives
exactly the full pass's numbers.

The factors are computed in ``angle_dtype``, like the angles (float32 by
default: the exponent ``(n - c) / scale_base * log zeta`` is rounded once, so a
scale ``s`` is off by about ``u |log s|`` relative, ``u`` the float32 epsilon),
and checked before use: positions that put ``|log s|`` beyond what the output
dtype holds as a normal number (about 87 for float32 and bfloat16, i.e.
``|n - c|`` up to about 35,000 with the defaults; about 9.7 for float16,
``|n - c|`` up to about 4,000) raise ``ValueError`` rather than return inf or
zeros. Pick ``reference_position`` in the middle of the positions you will use.

Relation to rotary-embedding-torch (``RotaryEmbedding(d, use_xpos=True,
xpos_scale_base=512)``, interleaved pairs): the same ``zeta`` (its ``scale``),
the same rotation, and its ``rotate_queries_and_keys`` centres on ``L // 2`` of
each call. Its rotated queries and keys equal ours with
``reference_position = L // 2``, and its scores ``q . k`` equal ours for any
reference position.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L`` any
length, ``Dh`` head dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab._validate import check_choice, check_finite_float, check_int
from attnlab.encodings.rotary import (
    CONVENTIONS,
    _check_angle_dtype,
    _rotate,
    rotary_angles,
    rotary_inv_freq,
)
from attnlab.encodings.scheme import ModelSizes, PositionScheme, check_heads, static_for_compile

__all__ = ["XPos", "xpos_zeta"]


def xpos_zeta(head_dim: int, *, gamma: float = 0.4) -> Tensor:
    """The per-pair decay rates ``zeta_k = (2k / d + gamma) / (1 + gamma)`` of xPos, float64.

    Sun et al. 2022, §3.2; torchscale's ``(arange(0, d, 2) + gamma * d) / ((1 + gamma) * d)``.

    Args:
        head_dim: ``Dh = d``, even.
        gamma: the offset that keeps the fastest pair's rate away from 0; 0.4 in the paper.

    Returns:
        float64 tensor ``[Dh / 2]``, increasing from ``gamma / (1 + gamma)`` towards 1.

    Raises:
        TypeError: for a non-integer ``head_dim`` or non-numeric ``gamma``.
        ValueError: for an odd or non-positive ``head_dim`` or a non-positive ``gamma``.

    Example:
        >>> xpos_zeta(4)
        tensor([0.2857, 0.6429], dtype=torch.float64)
    """
    head_dim = _check_head_dim(head_dim)
    gamma = check_finite_float("gamma", gamma, positive=True)
    two_k = torch.arange(0, head_dim, 2, dtype=torch.float64)  # [d/2]: 2k
    return (two_k / head_dim + gamma) / (1 + gamma)


def _check_head_dim(head_dim: int) -> int:
    head_dim = check_int("head_dim", head_dim, minimum=2)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (xPos rotates and scales features in pairs), got head_dim={head_dim}")
    return head_dim


def _log_limit(dtype: torch.dtype) -> float:
    """The largest ``|log s|`` whose scale ``s`` and ``1 / s`` are both normal numbers in ``dtype``."""
    info = torch.finfo(dtype)
    return min(math.log(info.max), -math.log(info.tiny))


@static_for_compile  # its float64 tensors are constants of a compiled graph
class XPos(PositionScheme):
    """xPos (Sun et al. 2022) as an attention position scheme: rotary times a decay in ``n - m``.

    :meth:`rotate` turns and scales query ``i`` as position ``q_offset + i`` and
    key ``j`` as ``k_offset + j`` (see the module docstring for the formula, the
    reference position and why the scheme is causal). The score of a query at
    ``n`` and a key at ``m`` depends only on ``n - m``; vector norms are *not*
    kept (that is the decay). No parameters, no bias, any length.

    Args:
        head_dim: features per head ``Dh``, even; all of them are rotated and scaled.
        scale_base: positions per e-fold of ``1 / zeta``: the decay of pair ``k``
            over an offset ``t`` is ``zeta_k ** (t / scale_base)``. 512 in the paper.
        gamma: sets the decay rates :func:`xpos_zeta`; 0.4 in the paper.
        base: rotary wavelength scale, 10000 as in RoFormer and the paper.
        convention: which features form a pair: ``"interleaved"`` (adjacent, the
            paper, torchscale, rotary-embedding-torch) or ``"half"`` (``x[k]`` with
            ``x[k + d/2]``, GPT-NeoX's ``rotate_half``).
        reference_position: the position ``c`` whose scale is 1; exponents are
            ``(n - c) / scale_base``. Scores do not depend on it; it only moves the
            window of positions the dtype can hold. Fixed for the module's life, so
            that cached keys stay valid.
        angle_dtype: ``torch.float32`` (default) or ``torch.float64``, the precision
            of the rotation angles (as :class:`attnlab.encodings.Rotary`).

    Raises:
        TypeError: for a non-integer size or position, non-numeric factor, or a
            non-dtype ``angle_dtype``.
        ValueError: for an odd or non-positive ``head_dim``, a non-positive
            ``scale_base``/``gamma``/``base``, an unknown ``convention`` or a
            half-precision ``angle_dtype``.

    Example:
        >>> xpos = XPos(2)
        >>> x = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)  # [B=1, H=1, L=3, Dh=2]
        >>> rq, rk = xpos.rotate(x, x)
        >>> (rq @ rk.transpose(-1, -2))[0, 0]  # query n (row), key m: cos(n - m) * (2/7) ** ((n - m) / 512)
        tensor([[ 1.0000,  0.5416, -0.4182],
                [ 0.5390,  1.0000,  0.5416],
                [-0.4141,  0.5390,  1.0000]])
    """

    rotates = True
    batched_positions = True
    causal_only = True  # its scale decays with the distance one way only: defined for causal attention

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> XPos:
        """xPos over every feature of each head."""
        return cls(sizes.head_dim)

    def __init__(
        self,
        head_dim: int,
        *,
        scale_base: float = 512.0,
        gamma: float = 0.4,
        base: float = 10000.0,
        convention: str = "interleaved",
        reference_position: int = 0,
        angle_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.head_dim = _check_head_dim(head_dim)
        self.scale_base = check_finite_float("scale_base", scale_base, positive=True)
        self.gamma = check_finite_float("gamma", gamma, positive=True)
        self.base = check_finite_float("base", base, positive=True)
        self.convention = check_choice("convention", convention, CONVENTIONS)
        self.reference_position = check_int("reference_position", reference_position)
        self.angle_dtype = _check_angle_dtype(angle_dtype)
        # Plain float64 CPU tensors, not buffers: `module.half()` must not round them.
        self.inv_freq = rotary_inv_freq(self.head_dim, base=self.base)  # [d/2]
        self.log_zeta = xpos_zeta(self.head_dim, gamma=self.gamma).log()  # [d/2], all negative

    @property
    def zeta(self) -> Tensor:
        """The decay rates ``zeta_k``, float64 ``[Dh / 2]`` (as :func:`xpos_zeta`)."""
        return self.log_zeta.exp()

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"head_dim={self.head_dim}, scale_base={self.scale_base:g}, gamma={self.gamma:g}, "
                f"base={self.base:g}, convention={self.convention!r}, "
                f"reference_position={self.reference_position}, angle_dtype={self.angle_dtype}")

    def _scaled_cos_sin(self, pos: Tensor, sign: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin`` of the angles at ``pos [L]`` (or ``[B, L]``), times the xPos scale.

        The scale is ``zeta ** (sign (p - c) / base)``.

        Scaling ``cos`` and ``sin`` by ``s`` scales the rotated pair by ``s``
        (torchscale does the same), so :func:`_rotate` applies both at once.
        Returns two ``[L, d/2]`` (or ``[B, 1, L, d/2]``) tensors in ``angle_dtype``; refuses scales
        ``dtype`` cannot hold.
        """
        c = self.reference_position
        if pos.numel() and torch.compiler.is_compiling():
            # Traced (torch.compile, torch.export): the positions cannot be read back, so the same bound is
            # checked inside the graph, raising a RuntimeError where the ValueError below would be.
            far = (pos - c).abs().amax().to(torch.float32)
            worst_t = far / self.scale_base * -self.log_zeta[0].to(device=pos.device, dtype=torch.float32)
            torch._assert_async(worst_t <= _log_limit(dtype),
                                "xPos scale zeta ** (+-(p - reference_position) / scale_base) leaves the range of "
                                "the queries' dtype at some position p: choose a reference_position near the "
                                "positions used")
        elif pos.numel():
            # The worst pair is the fastest-decaying one, log_zeta[0]; the worst position the farthest from c.
            lo, hi = int(pos.min()), int(pos.max())
            p = hi if abs(hi - c) >= abs(lo - c) else lo
            worst = abs(p - c) / self.scale_base * -self.log_zeta[0].item()
            if worst > _log_limit(dtype):
                raise ValueError(
                    f"xPos scale zeta ** (+-(p - reference_position) / scale_base) at position p={p} "
                    f"leaves the range of {dtype} (|log| = {worst:.1f} > {_log_limit(dtype):.1f}) with "
                    f"reference_position={c}, scale_base={self.scale_base:g}: choose a reference_position "
                    "near the positions used (scores do not depend on it)"
                )
        work = self.angle_dtype
        angles = rotary_angles(pos, self.inv_freq, angle_dtype=work)  # [*P, d/2], P = [L] or [B, L]
        # (p - c) in int64 first: exact, then one rounding to `work`.
        exponent = (pos - c).to(work) * (sign / self.scale_base)  # [*P]
        log_zeta = self.log_zeta.to(device=pos.device, dtype=work)  # [d/2]
        scale = torch.exp(exponent[..., None] * log_zeta)  # [*P, 1] * [d/2] -> [*P, d/2]
        cos, sin = angles.cos() * scale, angles.sin() * scale
        if pos.ndim == 2:
            return cos.unsqueeze(1), sin.unsqueeze(1)  # [B, 1, L, d/2]: the same for every head
        return cos, sin

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate and scale queries and keys by their positions.

        Args:
            q: queries ``[B, H, T, Dh]`` at positions ``q_pos``.
            k: keys ``[B, H, S, Dh]`` at positions ``k_pos``.
            q_pos: int64 positions ``[T]``, or per row ``[B, T]``.
            k_pos: int64 positions ``[S]`` or ``[B, S]``.

        Returns:
            ``(q, k)``, each in its own dtype and shape: query ``n`` turned by
            ``n * theta`` and scaled by ``zeta ** ((n - c) / scale_base)``, key ``m``
            turned by ``m * theta`` and scaled by ``zeta ** (-(m - c) / scale_base)``.

        Raises:
            TypeError: for a non-floating ``q``/``k``.
            ValueError: if ``q``/``k`` is not ``[B, H, L, Dh]`` with ``Dh = head_dim``,
                or a position puts a scale out of the dtype's range (module docstring).
        """
        check_heads("q", q, head_dim=self.head_dim)
        check_heads("k", k, head_dim=self.head_dim)
        cos_q, sin_q = self._scaled_cos_sin(q_pos, 1.0, q.dtype)  # [T, d/2] each
        cos_k, sin_k = self._scaled_cos_sin(k_pos, -1.0, k.dtype)  # [S, d/2] each
        return (_rotate(q, cos_q, sin_q, self.head_dim, self.convention),
                _rotate(k, cos_k, sin_k, self.head_dim, self.convention))
