"""Transformer-XL's relative positional encoding, as Ruoss et al. 2023 run it ("relative").

Dai et al. 2019, "Transformer-XL: Attentive Language Models Beyond a Fixed-Length
Context" (ACL, arXiv:1901.02860), §3.3. The score of query ``i`` and key ``j`` is
split into a content part and a position part, each with a learned global bias::

    A_ij = q_i . k_j  +  q_i . W_R R_d  +  u . k_j  +  v . W_R R_d          (their eq., (a)-(d))

per head, with ``R_d`` the sinusoidal encoding of the relative distance ``d``, ``W_R``
a learned projection of it, ``u`` and ``v`` learned vectors per head (their ``u``,
``v``: a query-independent bias on the keys' content and on the positions).

Conventions, as Ruoss et al.'s reference code has them
(google-deepmind/randomized_positional_encodings, ``models/positional_encodings.py``,
``compute_attention_with_relative_encodings``; ``models/transformer.py``,
``MultiHeadDotProductAttention``):

* the distance is **key minus query**, ``d = j - i``, on both sides of the query in
  their (bidirectional) encoder: ``R`` is a table of positions ``-L .. L - 1``
  (``add_negative_side``) and their ``_rel_shift_inner`` gives entry ``(i, j)`` the
  row of ``j - i`` (its docstring: rows ``[0, 1, 2], [-1, 0, 1], [-2, -1, 0]``). The
  paper writes ``R_{i-j}``; the two differ only in the sign of the sine half of
  ``R``, which ``W_R`` absorbs. A causal decoder sees ``d <= 0`` with the same
  formula. (Their causal shift, ``_rel_shift_causal`` on a table of positions
  ``0 .. L - 1``, gives entry ``(i, j)`` the row ``L - 1 - (i - j)``, a row that
  moves with the length ``L``; their experiments never take it, the encoder is
  bidirectional, and attnlab's decoder uses the distance above.) No clipping:
  every distance has its own ``R_d``;
* ``R`` is :mod:`~attnlab.encodings.sinusoidal`'s ``[sin | cos]`` layout (``concat``)
  with rates ``base ** (-2i / W)`` over the width ``W = H * Dh`` of all heads
  (``sinusoid_position_encoding(.., hidden_size=num_heads * num_hiddens)``), base 10,000
  (``RelativeParams.max_time``);
* ``W_R`` is one bias-free ``W x W`` linear map for all heads (``hk.Linear(hiddens,
  with_bias=False)``), its output split into ``H`` heads of ``Dh``: head ``h`` reads
  features ``h * Dh .. (h + 1) * Dh - 1``;
* the whole score, content and position, is scaled by ``1 / sqrt(Dh)``
  (``attention *= 1.0 / jnp.sqrt(num_hiddens_per_head)`` after the sum). attnlab's
  attention scales ``q . k`` itself, so this term is the rest, divided by ``sqrt(Dh)``::

      bias_ij = (u . k_j + (q_i + v) . W_R R_{j - i}) / sqrt(Dh)

* initialisation: ``u`` and ``v`` normal with standard deviation 0.02
  (``hk.initializers.RandomNormal(stddev=0.02)``); ``W_R`` haiku's default for
  ``hk.Linear``, a normal truncated at two standard deviations with standard
  deviation ``1 / sqrt(W)``.

The "relative shift" (their Appendix B) is a memory trick: the position logits are
computed against every distance once, ``[T, T + S]``, and each row is shifted into
place by a reshape. Here the same numbers come from the logits against each distinct
distance of the call (``T + S - 1`` of them for the contiguous positions of a pass
or a cached step) and a gather of each pair's entry, which also serves any
``T != S``, any offsets and randomized distances, where the reshape does not.

Randomized (Ruoss et al.'s ``NOISY_RELATIVE``): ``"random-transformer-xl"`` draws
distances (:attr:`~TransformerXLRelative.randomize_by`), sorted ``d_1 < .. < d_{L-1}``
from ``[1, L_max)``, and the offset ``+-k`` becomes ``+-d_k``
(:class:`attnlab.encodings.RandomizedPositions`).

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim,
``W = H * Dh``, ``U`` distinct distances of a call.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab._validate import check_finite_float, check_int
from attnlab.encodings.scheme import ModelSizes, PositionScheme, bias_dtype, check_heads, check_rel
from attnlab.encodings.sinusoidal import angle_rates

__all__ = ["TransformerXLRelative", "relative_sinusoids"]

# Standard deviation of the initial u and v (the reference's RandomNormal(stddev=0.02)).
_BIAS_STD = 0.02


def relative_sinusoids(distances: Tensor, width: int, *, base: float = 10000.0,
                       dtype: torch.dtype = torch.float32) -> Tensor:
    """The sinusoidal encodings ``R_d`` of signed distances, ``[sin | cos]`` blocks, computed in float64.

    ``R_d[c] = sin(d * w_c)`` for ``c < W / 2`` and ``cos(d * w_{c - W/2})`` after, with
    ``w_c = base ** (-2c / W)``: the reference's ``sinusoid_position_encoding`` at
    position ``d`` (negative ones included).

    Args:
        distances: integer distances, any shape ``[*]``.
        width: ``W``, even.
        base: the wavelength scale (10,000).
        dtype: the result's floating dtype; the angles are float64 anyway.

    Returns:
        ``[*, W]`` in ``dtype``, on the device of ``distances``.

    Raises:
        TypeError: for non-integer ``distances`` or ``width``.
        ValueError: for an odd or non-positive ``width`` or a non-positive ``base``.

    Example:
        >>> relative_sinusoids(torch.tensor([-1, 0, 1]), 4, dtype=torch.float64).round(decimals=4)
        tensor([[-0.8415, -0.0100,  0.5403,  1.0000],
                [ 0.0000,  0.0000,  1.0000,  1.0000],
                [ 0.8415,  0.0100,  0.5403,  1.0000]], dtype=torch.float64)
    """
    width = check_int("width", width, minimum=2)
    if width % 2:
        raise ValueError(f"width must be even ([sin | cos] halves), got width={width}")
    if not isinstance(distances, Tensor) or distances.is_floating_point() or distances.is_complex():
        raise TypeError(f"distances must be an integer tensor, got {getattr(distances, 'dtype', type(distances))}")
    rates = angle_rates(width, base=base).to(distances.device)  # [W / 2] float64
    angles = distances.to(torch.float64)[..., None] * rates  # [*, W / 2]: exact integers times the rates
    return torch.cat([angles.sin(), angles.cos()], dim=-1).to(dtype)  # [*, W]


class TransformerXLRelative(PositionScheme):
    """Transformer-XL's relative encoding (Dai et al. 2019), with Ruoss et al. 2023's conventions.

    :meth:`bias` is ``(u . k_j + (q_i + v) . W_R R_{j - i}) / sqrt(Dh)``, ``[B, H, T, S]``
    (module docstring); attention adds it to its own ``q_i . k_j / sqrt(Dh)``, which
    gives the reference's score. It reads the queries and the keys, so it has no
    FlexAttention ``score_mod`` (``backend="flex"`` refuses it); the dense and chunked
    paths serve it, cached decoding included. Any length (``max_len`` None): every
    distance has its sinusoid, none is clipped.

    Args:
        n_heads: ``H``.
        head_dim: ``Dh``; ``H * Dh`` must be even (the sinusoids' width).
        base: the sinusoids' wavelength scale (10,000: the reference's ``max_time``).

    Attributes:
        content_bias: ``u``, parameter ``[H, Dh]``.
        relative_proj: ``W_R``, an ``nn.Linear(W, W, bias=False)``: head ``h`` of
            ``W_R R_d`` is output features ``h * Dh .. (h + 1) * Dh - 1``.
        relative_bias: ``v``, parameter ``[H, Dh]``.

    Raises:
        TypeError: for non-integer sizes or a non-number ``base``.
        ValueError: for sizes below 1, an odd ``H * Dh`` or a non-positive ``base``.

    Example:
        >>> txl = TransformerXLRelative(2, 4)
        >>> q, k = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 6, 4)
        >>> txl.bias(q, 6, k=k).shape  # depends on q and k: one per batch row
        torch.Size([3, 2, 5, 6])
    """

    adds_score = True
    reads_keys = True  # u . k_j
    relative = True
    batched_positions = True
    randomize_by = "distances"  # Ruoss et al.'s NOISY_RELATIVE draws distances

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> TransformerXLRelative:
        """One ``u``, ``v``, ``W_R`` per self-attention (the reference builds them in each layer's attention)."""
        return cls(sizes.n_heads, sizes.head_dim)

    def __init__(self, n_heads: int, head_dim: int, *, base: float = 10000.0) -> None:
        super().__init__()
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.width = self.n_heads * self.head_dim
        if self.width % 2:
            raise ValueError(f"n_heads * head_dim must be even (the sinusoids' [sin | cos] halves), "
                             f"got n_heads={n_heads}, head_dim={head_dim}")
        self.base = check_finite_float("base", base, positive=True)
        # Created in the reference's order: u, W_R, v.
        self.content_bias = nn.Parameter(torch.empty(self.n_heads, self.head_dim))  # u [H, Dh]
        self.relative_proj = nn.Linear(self.width, self.width, bias=False)  # W_R [W, W]
        self.relative_bias = nn.Parameter(torch.empty(self.n_heads, self.head_dim))  # v [H, Dh]
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw ``u``, ``W_R``, ``v`` in that order (their initialisation: module docstring)."""
        nn.init.normal_(self.content_bias, std=_BIAS_STD)
        std = 1.0 / math.sqrt(self.width)  # haiku's Linear: TruncatedNormal(1 / sqrt(fan_in)), cut at 2 std
        nn.init.trunc_normal_(self.relative_proj.weight, std=std, a=-2.0 * std, b=2.0 * std)
        nn.init.normal_(self.relative_bias, std=_BIAS_STD)

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return f"n_heads={self.n_heads}, head_dim={self.head_dim}, base={self.base:g}"

    def relative_keys(self, distances: Tensor, *, dtype: torch.dtype) -> Tensor:
        """``W_R R_d`` for each of ``distances [U]``, split into heads: ``[U, H, Dh]`` in ``dtype``."""
        r = relative_sinusoids(distances, self.width, base=self.base, dtype=dtype)  # [U, W]
        w_r = self.relative_proj.weight.to(device=r.device, dtype=dtype)  # [W out, W in]
        return (r @ w_r.T).view(-1, self.n_heads, self.head_dim)  # [U, W] x [W, W] -> [U, W] -> [U, H, Dh]

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor:
        """The score term at signed key-minus-query distances ``rel [T, S]`` (or ``[B, T, S]``).

        Args:
            q: queries ``[B, H, T, Dh]``.
            rel: int64 ``[T, S]``, or per row ``[B, T, S]``.
            k: the keys ``[B, H, S, Dh]`` (required: the ``u . k_j`` term reads them).

        Returns:
            ``[B, H, T, S]``: ``(u . k_j + (q_i + v) . W_R R_{rel_ij}) / sqrt(Dh)``, float32 for
            half-precision ``q``, else ``q.dtype``; differentiable in ``q``, ``k``, ``u``, ``v``, ``W_R``.

        Raises:
            TypeError / ValueError: for ``q`` or ``k`` that are not ``[B, H, L, Dh]`` with these
                ``H`` and ``Dh``, ``k`` missing or with another number of keys than ``rel``, or ``rel``
                that is not an integer ``[T, S]``.
            RuntimeError: traced (torch.compile, torch.export), for distances a graph cannot count
                (:func:`_distinct_traced`: sparse per-row positions, drawn distances per row).
        """
        check_heads("q", q, head_dim=self.head_dim, n_heads=self.n_heads)
        check_rel(rel, q.shape[2])
        if k is None:
            raise ValueError("k must be given, the keys [B, H, S, Dh]: Transformer-XL's term u . k_j reads them "
                             "(the scheme declares reads_keys)")
        check_heads("k", k, head_dim=self.head_dim, n_heads=self.n_heads)
        B, H, T, _ = q.shape
        S = rel.shape[-1]
        if k.shape[2] != S:
            raise ValueError(f"k must have S = {S} keys (rel's last dim), got shape {list(k.shape)}")
        dtype = bias_dtype(q.dtype)
        if rel.numel() == 0:
            return q.new_zeros(B, H, T, S, dtype=dtype)
        rel = rel.to(q.device)
        distances, index = _distinct(rel)  # [U], and rel's entries' places in it: [T, S] or [B, T, S]
        r_keys = self.relative_keys(distances, dtype=dtype)  # [U, H, Dh]
        v = self.relative_bias.to(device=q.device, dtype=dtype)  # [H, Dh]
        u = self.content_bias.to(device=q.device, dtype=dtype)  # [H, Dh]
        # (q_i + v) against every distinct distance once: the rel-shift's logits, [B, H, T, U].
        logits = torch.einsum("bhtd,uhd->bhtu", q.to(dtype) + v[:, None, :], r_keys)  # [B, H, T, U]
        index = index if index.ndim == 2 else index[:, None]  # [T, S] or [B, 1, T, S]: one row per head alike
        position = logits.gather(-1, index.expand(logits.shape[0], H, T, S))  # [B, H, T, S]
        content = torch.einsum("bhsd,hd->bhs", k.to(dtype), u)  # u . k_j: [B, H, S]
        return (position + content[:, :, None, :]) / math.sqrt(self.head_dim)  # [B, H, T, S]


def _distinct(rel: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct distances of ``rel`` (non-empty, ``[T, S]`` or ``[B, T, S]``) and each entry's place among them.

    Contiguous positions (a pass, a cached step) span at most ``T + S - 1`` distances: the
    range from the smallest to the largest, found without sorting. Drawn distances
    (randomized) are spread over ``[-L_max, L_max]``: only those present, by ``torch.unique``.
    """
    if torch.compiler.is_compiling():
        return _distinct_traced(rel)
    lo, hi = int(rel.min()), int(rel.max())  # [T, S] or [B, T, S]
    if hi - lo + 1 <= rel.shape[-2] + rel.shape[-1]:
        return torch.arange(lo, hi + 1, device=rel.device), rel - lo  # [U], [T, S] or [B, T, S]
    distances, index = torch.unique(rel, sorted=True, return_inverse=True)  # [U], index shaped like rel
    return distances, index


def _distinct_traced(rel: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`_distinct` in traced code (torch.compile, torch.export), where a count read from the data would
    break the graph: ``T + S - 1`` distances, some perhaps repeated, checked inside the graph.

    ``rel [T, S]``, shared by the batch, is a function of ``j - i`` (offsets, cached steps, drawn distances):
    its first column and first row hold every distance. ``rel [B, T, S]`` (per-row positions) spans at most
    ``T + S - 1`` distances when the positions are contiguous (the indices, a left-padded batch): the range
    from its smallest. Anything else (sparse position ids) fails the check, a RuntimeError naming it.
    """
    T, S = rel.shape[-2], rel.shape[-1]
    offset = torch.arange(S, device=rel.device)[None, :] - torch.arange(T, device=rel.device)[:, None]  # [T, S]
    if rel.ndim == 2:
        distances = torch.cat([rel[:, 0].flip(0), rel[0, 1:]])  # [T + S - 1]: offsets -(T - 1) .. S - 1
        index = offset + (T - 1)  # [T, S]
        torch._assert_async((distances[index] == rel).all(),
                            "TransformerXLRelative traced (torch.compile, torch.export) takes distances [T, S] "
                            "that depend on the offset j - i only")
        return distances, index
    lo = rel.amin()  # 0-d
    torch._assert_async(rel.amax() - lo < T + S - 1,
                        "TransformerXLRelative traced (torch.compile, torch.export) takes per-row positions "
                        "spanning fewer than T + S - 1 distances (contiguous positions); run it uncompiled")
    return lo + torch.arange(T + S - 1, device=rel.device), rel - lo  # [T + S - 1], [B, T, S]
