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
``rotary_dim`` features are rotated, the rest pass through untouched. GPT-NeoX turns
a quarter (``rotary_pct`` 0.25 by default), and Kazemnejad et al. 2023 ("The Impact of
Positional Encoding on Length Generalization in Transformers", code
McGill-NLP/length-generalization) take that rotary: their "rotary" is
:class:`QuarterRotary`, not the full rotation of :class:`Rotary` (Su et al.). The two can
differ beyond the training length: the unturned three quarters carry no position at all.

Context extension, all off by default:

* position interpolation (Chen et al. 2023, arXiv:2306.15595): positions are
  divided by ``interpolation``, squeezing a longer sequence into the angle range
  the model was trained on;
* NTK-aware scaling (bloc97, 2023; x-transformers, rotary-embedding-torch,
  HF ``"ntk"``): ``base * ntk_factor ** (d / (d - 2))``, which stretches the slow
  pairs and leaves the fastest one (``theta_0 = 1``) alone;
* ``rope_parameters``: transformers' scalings (linear, dynamic NTK, YaRN,
  LongRoPE, Llama 3.1, proportional) from the same dict as a transformers config,
  :mod:`attnlab.encodings.rope_scaling`. Their attention factor multiplies cos and
  sin, as transformers does; "dynamic" and "longrope" turn the token at position
  ``p`` with the frequencies of length ``p + 1``, which keeps cached decoding equal
  to the full pass (the rule, and how transformers differs, are stated there).

The functions (:func:`rotary_inv_freq`, :func:`rotary_angles`, :func:`apply_rotary`,
:func:`interleaved_to_half_permutation`) live in :mod:`.rotary_functional` and are
importable from here.

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

from typing import Any

import torch
from torch import Tensor

from attnlab._validate import check_choice, check_finite_float, check_int
from attnlab.encodings.rope_scaling import LENGTH_DEPENDENT, _RopeScaling
from attnlab.encodings.rotary_functional import (
    CONVENTIONS,
    _check_rotary_dim,
    apply_rotary,
    check_qk,
    interleaved_to_half_permutation,
    rotary_angles,
    rotary_inv_freq,
)
from attnlab.encodings.rotary_functional import _check_angle_dtype as _check_angle_dtype  # re-exported: xpos
from attnlab.encodings.rotary_functional import _rotate as _rotate  # re-exported: xpos
from attnlab.encodings.scheme import ModelSizes, PositionScheme, check_positions, static_for_compile

# The functional parts live in rotary_functional; they are importable from here as before
# (xpos imports the private helpers too).
__all__ = [
    "CONVENTIONS",
    "QuarterRotary",
    "Rotary",
    "apply_rotary",
    "interleaved_to_half_permutation",
    "rotary_angles",
    "rotary_inv_freq",
]


@static_for_compile  # its float64 tensors are constants of a compiled graph
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
        rope_parameters: a transformers scaling dict, e.g. ``{"rope_type": "yarn",
            "factor": 4.0, "original_max_position_embeddings": 2048}``
            (:func:`attnlab.encodings.rope_scaling.rope_frequencies`; its
            ``rope_theta`` wins over the default ``base``, its
            ``partial_rotary_factor`` sets ``rotary_dim``). Not with
            ``interpolation`` or ``ntk_factor``, which it replaces.
        max_position_embeddings: the model's ``max_position_embeddings``, for the
            types that need it ("dynamic"; "yarn", "longrope" and "llama3" without
            ``original_max_position_embeddings``).

    Attributes:
        inv_freq: the speeds, float64 ``[d/2]``; for "dynamic" and "longrope" those
            up to the original length (longer positions get their own, per position).
        attention_factor: what cos and sin are multiplied by (1 but for yarn, longrope).

    Raises:
        TypeError: for a non-integer size, non-numeric factor or non-dtype ``angle_dtype``,
            or a ``rope_parameters`` that is not a dict.
        ValueError: for an odd ``head_dim`` without ``rotary_dim``, an odd or too
            large ``rotary_dim``, non-positive ``base``/``interpolation``/
            ``ntk_factor``, NTK scaling with ``rotary_dim = 2``, an unknown
            ``convention``, a half-precision ``angle_dtype``, ``rope_parameters``
            with ``interpolation`` or ``ntk_factor``, and any bad key or value of
            ``rope_parameters`` (see :func:`~attnlab.encodings.rope_scaling.rope_frequencies`).

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

    rotates = True
    batched_positions = True

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> Rotary:
        """Every feature of each head rotated, base 10000 (the paper's RoPE)."""
        return cls(sizes.head_dim)

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
        rope_parameters: dict[str, Any] | None = None,
        max_position_embeddings: int | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.convention = check_choice("convention", convention, CONVENTIONS)
        self.interpolation = check_finite_float("interpolation", interpolation, positive=True)
        self.ntk_factor = check_finite_float("ntk_factor", ntk_factor, positive=True)
        self.angle_dtype = _check_angle_dtype(angle_dtype)
        self.rope_parameters: dict[str, Any] | None = None
        self.attention_factor = 1.0
        self._scaling: _RopeScaling | None = None
        if rope_parameters is None:
            self.max_position_embeddings = (None if max_position_embeddings is None else  # unused without scaling
                                            check_int("max_position_embeddings", max_position_embeddings, minimum=1))
            self.rotary_dim = _check_rotary_dim(self.head_dim, rotary_dim)
            self.base = check_finite_float("base", base, positive=True)
            # A plain float64 CPU tensor, not a buffer: `module.half()` would round a
            # buffer to float16, which is exactly the precision loss this avoids.
            self.inv_freq = rotary_inv_freq(self.rotary_dim, base=self.base, ntk_factor=self.ntk_factor)
            return
        if self.interpolation != 1.0 or self.ntk_factor != 1.0:
            raise ValueError(f"interpolation={self.interpolation:g} and ntk_factor={self.ntk_factor:g} cannot be "
                             "combined with rope_parameters: use rope_type 'linear' or 'dynamic' there instead")
        d = None if rotary_dim is None else _check_rotary_dim(self.head_dim, rotary_dim)
        scaling = _RopeScaling(rope_parameters, head_dim=self.head_dim, base=base, partial_rotary_factor=1.0,
                               max_position_embeddings=max_position_embeddings, rotary_dim=d)
        self.rotary_dim, self.base, self.attention_factor = scaling.dim, scaling.base, scaling.attention_factor
        self.rope_parameters = dict(rope_parameters)  # a copy: the caller's dict may change later
        self.max_position_embeddings = scaling.max_position_embeddings
        self.inv_freq = scaling.inv_freq  # float64 [d/2]
        if scaling.rope_type in LENGTH_DEPENDENT:
            self._scaling = scaling  # per-position frequencies, in _cos_sin

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        scaling = "" if self.rope_parameters is None else (
            f", rope_parameters={self.rope_parameters}, max_position_embeddings={self.max_position_embeddings}")
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}, "
                f"convention={self.convention!r}, interpolation={self.interpolation:g}, "
                f"ntk_factor={self.ntk_factor:g}, angle_dtype={self.angle_dtype}{scaling}")

    def _cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of the angles of integer ``positions [L]`` or ``[B, L]``: ``[L, d/2]`` or ``[B, 1, L, d/2]``.

        Per-row positions get a heads dim, so that the tables broadcast against ``[B, H, L, Dh]``.
        """
        inv_freq = self.inv_freq  # [d/2]
        if self._scaling is not None:
            # "dynamic", "longrope": position p turns with the speeds of length p + 1, so a
            # key cached at one step equals the same key in the full pass (rope_scaling docstring).
            inv_freq = self._scaling.at_positions(positions)  # [L, d/2]
        # int64 positions: converted to angle_dtype once, inside rotary_angles.
        angles = rotary_angles(positions, inv_freq, interpolation=self.interpolation,
                               angle_dtype=self.angle_dtype)  # [L, d/2] or [B, L, d/2]
        if positions.ndim == 2:
            angles = angles.unsqueeze(1)  # [B, L, d/2] -> [B, 1, L, d/2]: the same angles for every head
        if self.attention_factor == 1.0:
            return angles.cos(), angles.sin()
        # YaRN's and LongRoPE's attention factor, on cos and sin as transformers applies it:
        # the rotated q and k are both scaled, so a score q . k by its square.
        return angles.cos() * self.attention_factor, angles.sin() * self.attention_factor

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate queries by the angles ``q_pos * theta`` and keys by ``k_pos * theta``.

        Args:
            q: queries ``[B, H, T, Dh]`` (any leading dims).
            k: keys ``[B, H, S, Dh]``.
            q_pos: the queries' integer positions ``[T]``, or per row ``[B, T]``, on ``q``'s device.
            k_pos: the keys' integer positions ``[S]`` or ``[B, S]``, on ``k``'s device; pass the
                same tensor as ``q_pos`` (self-attention) to compute one table.

        Returns:
            ``(q, k)`` rotated, each in its own dtype and shape.

        Raises:
            TypeError: for non-floating ``q``/``k`` or non-integer positions.
            ValueError: if ``q`` or ``k`` does not have ``head_dim`` features, or
                the positions are not ``[T]`` / ``[S]`` (or ``[B, T]`` / ``[B, S]``).
        """
        check_qk(q, k, head_dim=self.head_dim)
        check_positions("q_pos", q_pos, q.shape[-2])
        check_positions("k_pos", k_pos, k.shape[-2])
        cos_k, sin_k = self._cos_sin(k_pos)  # [S, d/2] or [B, 1, S, d/2]
        cos_q, sin_q = (cos_k, sin_k) if q_pos is k_pos else self._cos_sin(q_pos)  # [T, d/2] or [B, 1, T, d/2]
        return (_rotate(q, cos_q, sin_q, self.rotary_dim, self.convention),
                _rotate(k, cos_k, sin_k, self.rotary_dim, self.convention))


class QuarterRotary(Rotary):
    """:class:`Rotary` turning the first quarter of each head's features (at least one pair), base 10000.

    The rotary of GPT-NeoX and of Kazemnejad et al. 2023 (module docstring): ``"rotary-quarter"``.

    Example:
        >>> QuarterRotary.for_model(ModelSizes(n_heads=4, head_dim=16, d_model=64, causal=True)).rotary_dim
        4
    """

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> QuarterRotary:
        """A quarter of ``head_dim`` rounded down to an even count, at least 2."""
        return cls(sizes.head_dim, rotary_dim=max(2, sizes.head_dim // 4 // 2 * 2))
