"""Shaw et al.'s relative position representations, on keys and on values.

Shaw, Uszkoreit and Vaswani 2018, "Self-Attention with Relative Position
Representations" (NAACL, arXiv:1803.02155), §3. Query ``i`` and key ``j`` are
joined by an "edge" carrying two learned vectors chosen by their clipped offset::

    a^K_ij = w^K[clip(j - i, -k, k)]      a^V_ij = w^V[clip(j - i, -k, k)]     (§3.2)
    e_ij   = q_i . (k_j + a^K_ij) / sqrt(Dh)                                 (eq. 4)
    z_i    = sum_j alpha_ij (v_j + a^V_ij)                                   (eq. 3)

with ``2k + 1`` vectors of size ``Dh`` per table, shared across heads and
sequences (§3.3). Offsets beyond ``k`` share the end vectors: "precise
relative position information is not useful beyond a certain distance", and the
model then handles lengths it never saw.

Done naively, ``a^K_ij`` is a ``[T, S, Dh]`` tensor per layer, which is what
Music Transformer's "skewing" (Huang et al. 2018, arXiv:1809.04281, §3.4.1)
was invented to avoid (O(L^2 Dh) -> O(L Dh) memory). Here the key term is
``q_i . w^K[c]`` for the ``2k + 1`` clipped offsets ``c``, one small matmul,
then a gather of each pair's entry; the value term sums the weights of each
clipped offset first (a scatter-add), then multiplies by ``w^V``. Neither ever
builds ``[T, S, Dh]``; both are exact rearrangements of eqs. 3-4 (Shaw §3.3
splits eq. 4 into the same two terms, but still gathers ``a^K`` per pair), and
unlike skewing they work for any ``T != S``, any offsets and without a causal mask.

Positions. :class:`ShawRelative` is a :class:`PositionScheme` that depends on the
positions only through ``j - i``: both terms take the offsets of ordinary and
cached attention (:meth:`~ShawRelative.bias`, :meth:`~ShawRelative.value_term`),
any positions (``bias_at``, ``value_term_at``) or any matrix of signed distances
(``bias_rel``, ``value_term_rel``: Ruoss et al. 2023's randomized relative
encoding draws such distances), always clipped at ``k``.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head
dim, ``R = 2k + 1`` clipped offsets.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab._validate import check_int
from attnlab.encodings.scheme import (
    ModelSizes,
    PositionScheme,
    ScoreMod,
    bias_dtype,
    check_heads,
    check_rel,
    relative_positions,
)
from attnlab.encodings.score_mods import shaw_score_mod

__all__ = ["ShawRelative"]

# Standard deviation of the initial relative vectors; see ShawRelative.
_INIT_STD = 0.02


class ShawRelative(PositionScheme):
    """Relation-aware attention with clipped relative positions (Shaw et al. 2018).

    :meth:`bias` is the key term ``q_i . w^K[clip(j - i) + k] / sqrt(Dh)``,
    ``[B, H, T, S]`` (it depends on the queries); :meth:`value_term` is
    ``sum_j weights_ij w^V[clip(j - i) + k]``, ``[B, H, T, Dh]``. Both are computed
    without a ``[T, S, Dh]`` tensor (module docstring). Any length (``max_len``
    None): offsets beyond ``k`` are clipped.

    Initialisation: both tables normal with standard deviation 0.02 (small
    against unit-scale keys and values, as BERT-style embeddings;
    tensor2tensor leaves it to its model-wide initializer). Call
    :meth:`reset_parameters` to redraw.

    Args:
        head_dim: features per head ``Dh``.
        max_relative_position: the clipping distance ``k``; ``2k + 1`` vectors
            per table. Default 16, the value common in the literature (RETURNN's
            default; tensor2tensor's is 20); Shaw et al.'s ablation found no gain
            from ``k`` above 2 or so on translation.
        on_values: also learn ``w^V`` and add the value term (the full model of
            the paper). With False only the key term is used, ``adds_value``
            is False and attention can stay on a fused kernel with the bias.

    Attributes:
        rel_keys: ``w^K``, parameter ``[2k + 1, Dh]``; row ``c + k`` is offset ``c``.
        rel_values: ``w^V``, parameter ``[2k + 1, Dh]``, or None without ``on_values``.

    Raises:
        TypeError: for a non-integer size or a non-bool ``on_values``.
        ValueError: for ``head_dim < 1`` or ``max_relative_position < 1``.

    Example:
        >>> shaw = ShawRelative(8, max_relative_position=2)
        >>> shaw.rel_keys.shape, shaw.adds_value
        (torch.Size([5, 8]), True)
        >>> shaw.bias(torch.randn(2, 3, 4, 8), 6).shape  # depends on q: one per batch row
        torch.Size([2, 3, 4, 6])
    """

    adds_score = True
    adds_value = True  # the paper's model; on_values=False turns the value term off for the instance,
    has_score_mod = True  # and FlexAttention's score_mod (the key term) on
    relative = True
    batched_positions = True
    randomize_by = "distances"  # Ruoss et al.'s randomized relative encoding draws distances

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> ShawRelative:
        """One pair of tables per self-attention, clipped at the model's ``max_relative_position``."""
        return cls(sizes.head_dim, max_relative_position=sizes.max_relative_position)

    def __init__(self, head_dim: int, *, max_relative_position: int = 16, on_values: bool = True) -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.max_relative_position = check_int("max_relative_position", max_relative_position, minimum=1)
        if not isinstance(on_values, bool):
            raise TypeError(f"on_values must be a bool, got {on_values!r} ({type(on_values).__name__})")
        self.on_values = on_values
        self.adds_value = on_values
        # FlexAttention takes the key term only: with the value term, the chunked path serves the scheme.
        self.has_score_mod = not on_values
        n_rel = 2 * self.max_relative_position + 1
        self.rel_keys = nn.Parameter(torch.empty(n_rel, self.head_dim))  # [R, Dh]
        if on_values:
            self.rel_values = nn.Parameter(torch.empty(n_rel, self.head_dim))  # [R, Dh]
        else:
            self.register_parameter("rel_values", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw ``w^K`` (and ``w^V``) from N(0, 0.02**2) (class docstring)."""
        nn.init.normal_(self.rel_keys, std=_INIT_STD)
        if self.rel_values is not None:
            nn.init.normal_(self.rel_values, std=_INIT_STD)

    def extra_repr(self) -> str:
        """The constructor's arguments, for ``repr``."""
        return (f"head_dim={self.head_dim}, max_relative_position={self.max_relative_position}, "
                f"on_values={self.on_values}")

    def clipped_index(self, T: int, S: int, *, q_offset: int = 0, k_offset: int = 0,
                      device: torch.device | str | None = None) -> Tensor:
        """Row of ``w^K``/``w^V`` for each (query, key) pair: ``clip(j - i, -k, k) + k``.

        Args:
            T: number of queries; S: number of keys.
            q_offset: position of the first query; k_offset: of the first key.
            device: where the result lives.

        Returns:
            int64 tensor ``[T, S]`` with values in ``0 .. 2k``.
        """
        return self._clip(relative_positions(T, S, q_offset=q_offset, k_offset=k_offset, device=device))

    def _clip(self, rel: Tensor) -> Tensor:
        """Row of ``w^K``/``w^V`` for signed distances ``rel [T, S]`` (or ``[B, T, S]``): ``clip(rel, -k, k) + k``."""
        k = self.max_relative_position
        return rel.clamp(-k, k) + k

    def _key_term(self, q: Tensor, idx: Tensor) -> Tensor:
        """``q_i . w^K[idx_ij] / sqrt(Dh)`` for rows ``idx [T, S]`` (or ``[B, T, S]``) of ``w^K``; ``[B, H, T, S]``."""
        T, S = idx.shape[-2:]
        dtype = bias_dtype(q.dtype)
        w_k = self.rel_keys.to(device=q.device, dtype=dtype)  # [R, Dh]
        # Scores against the R distinct vectors only, instead of a [T, S, Dh] a^K.
        # Scaled before the gather: R numbers per row instead of S, and no second [B, H, T, S] tensor.
        rel_logits = (q.to(dtype) @ w_k.T) / math.sqrt(self.head_dim)  # [B, H, T, Dh] x [Dh, R] -> [B, H, T, R]
        # Pick, for each (i, j), the logit of pair (i, j)'s clipped offset. gather with
        # an expanded (stride-0) index: advanced indexing rel_logits[:, :, rows, idx]
        # gives the same numbers ~1000x slower on CPU.
        B, H = rel_logits.shape[:2]
        index = idx if idx.ndim == 2 else idx[:, None]  # [T, S] or [B, 1, T, S]: the same rows for every head
        return rel_logits.gather(-1, index.expand(B, H, T, S))  # [B, H, T, S]

    def _value_term(self, weights: Tensor, idx: Tensor) -> Tensor:
        """``sum_j weights_ij w^V[idx_ij]`` for rows ``idx [T, S]`` (or ``[B, T, S]``) of ``w^V``; ``[B, H, T, Dh]``."""
        assert self.rel_values is not None
        B, H, T, S = weights.shape
        work = bias_dtype(weights.dtype)
        n_rel = self.rel_values.shape[0]
        # Total weight each query puts on each clipped offset: all the keys beyond
        # k on one side fall into one bucket, so this is [.., R] rather than [.., S, Dh].
        buckets = weights.new_zeros(B, H, T, n_rel, dtype=work)  # [B, H, T, R]
        index = idx if idx.ndim == 2 else idx[:, None]  # [T, S] or [B, 1, T, S]
        buckets = buckets.scatter_add(-1, index.expand(B, H, T, S), weights.to(work))  # [B, H, T, R]
        w_v = self.rel_values.to(device=weights.device, dtype=work)  # [R, Dh]
        return (buckets @ w_v).to(weights.dtype)  # [B, H, T, R] x [R, Dh] -> [B, H, T, Dh]

    def score_mod(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0,
                  position_ids: Tensor | None = None, key_position_ids: Tensor | None = None) -> ScoreMod | None:
        """The key term as a FlexAttention score_mod (:func:`attnlab.encodings.score_mods.shaw_score_mod`).

        Args:
            q: queries ``[B, H, T, Dh]``.
            n_keys: number of keys ``S`` (the term is defined for any).
            q_offset: position of the first query.
            k_offset: position of the first key.
            position_ids: per-row query positions ``[B, T]``: no score_mod (None), as the base's.
            key_position_ids: per-row key positions ``[B, S]``: likewise.

        Returns:
            The score_mod, or None with ``on_values`` (the value term needs the
            weights, so attention takes the chunked path for the whole scheme) or per-row positions.
        """
        if self.rel_values is not None or position_ids is not None or key_position_ids is not None:
            return None
        return shaw_score_mod(self, q, q_offset=q_offset, k_offset=k_offset)

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor:
        """The key term at signed key-minus-query distances ``rel [T, S]`` (or ``[B, T, S]``), clipped at ``k``.

        Args:
            q: queries ``[B, H, T, Dh]``.
            rel: int64 ``[T, S]``, or per row ``[B, T, S]``.
            k: the keys ``[B, H, S, Dh]`` of the protocol; unused.

        Returns:
            ``[B, H, T, S]``: ``q_i . w^K[clip(rel_ij) + k] / sqrt(Dh)`` (Shaw's eq. 4), float32
            for half-precision ``q``, else ``q.dtype``.

        Raises:
            TypeError / ValueError: for ``q`` that is not ``[B, H, T, head_dim]``, or ``rel``
                that is not an integer ``[T, S]``.
        """
        check_heads("q", q, head_dim=self.head_dim)
        check_rel(rel, q.shape[2])
        return self._key_term(q, self._clip(rel))

    def _check_weights(self, weights: Tensor) -> None:
        """Refuse anything but floating ``weights [B, H, T, S]``."""
        if not isinstance(weights, Tensor) or not weights.is_floating_point():
            raise TypeError(f"weights must be a floating-point tensor, got "
                            f"{getattr(weights, 'dtype', type(weights).__name__)}")
        if weights.ndim != 4:
            raise ValueError(f"weights must be [B, H, T, S] (4 dims), got shape {list(weights.shape)}")

    def value_term_rel(self, weights: Tensor, *, rel: Tensor) -> Tensor | None:
        """The value term at signed key-minus-query distances ``rel [T, S]`` (or ``[B, T, S]``), clipped at ``k``.

        Args:
            weights: post-softmax weights ``[B, H, T, S]``.
            rel: int64 ``[T, S]``, or per row ``[B, T, S]``.

        Returns:
            ``[B, H, T, Dh]``: ``sum_j weights_ij w^V[clip(rel_ij) + k]`` (Shaw's eq. 3) in
            ``weights.dtype`` (summed in float32 for half precision), or None without ``on_values``.

        Raises:
            TypeError / ValueError: for ``weights`` that is not a floating ``[B, H, T, S]``,
                or ``rel`` that is not an integer ``[T, S]``.
        """
        if self.rel_values is None:
            return None
        self._check_weights(weights)
        check_rel(rel, weights.shape[2], weights.shape[3])
        return self._value_term(weights, self._clip(rel))
