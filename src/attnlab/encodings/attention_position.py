"""The protocol of positional schemes that act *inside* attention, and NoPE.

Additive encodings (``sinusoidal``, ``LearnedPositionalEncoding``) change the
token vectors before attention. The schemes here change attention itself, in one
or more of three places, and :class:`AttentionPosition` names those places so
that ``MultiHeadAttention`` can call any scheme the same way (queries and keys
already split into heads):

1. :meth:`~AttentionPosition.rotate`: turn ``q`` and ``k`` by their positions
   before the dot product (rotary: ``Rotary``).
2. :meth:`~AttentionPosition.bias`: add a term to the scores before the softmax
   (ALiBi: ``ALiBi``; T5: ``T5RelativeBias``; Shaw's key term: ``ShawRelative``).
3. :meth:`~AttentionPosition.value_term`: add a term to the output after the
   softmax, from the weights (Shaw's value term).

Every default does nothing, so :class:`NoPosition` (NoPE) is the base class with
a name. Positions are passed as offsets: query ``i`` of a call sits at position
``q_offset + i`` and key ``j`` at ``k_offset + j``. A decoder with a key/value
cache passes ``q_offset = p, k_offset = 0`` for a new query at position ``p``
attending to the cached keys ``0 .. p``; a scheme that is honest about offsets
then gives cached decoding the same numbers as a full forward pass.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnlab._validate import check_int

# FlexAttention's score_mod(score, batch, head, q_idx, kv_idx) -> score, every argument a scalar tensor.
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

__all__ = [
    "ScoreMod",
    "AttentionPosition",
    "NoPosition",
    "bias_dtype",
    "relative_positions",
]


def bias_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a positional bias is returned in, for queries of ``dtype``.

    Half-precision scores are summed and soft-maxed in float32 (DESIGN.md), and a
    bias of ``-slope * 5000`` is not even representable to the unit in bfloat16,
    so biases for float16/bfloat16 queries are float32; otherwise ``dtype``.

    Args:
        dtype: the queries' dtype.

    Returns:
        ``torch.float32`` for float16 / bfloat16, else ``dtype``.

    Example:
        >>> bias_dtype(torch.bfloat16), bias_dtype(torch.float64)
        (torch.float32, torch.float64)
    """
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def relative_positions(
    T: int,
    S: int,
    *,
    q_offset: int = 0,
    k_offset: int = 0,
    device: torch.device | str | None = None,
) -> Tensor:
    """Key position minus query position for every (query, key) pair.

    Entry ``[i, j]`` is ``(k_offset + j) - (q_offset + i)``: positive when the key
    comes after the query. This is the sign of T5's ``memory_position -
    query_position`` and of Shaw et al.'s ``j - i``; ALiBi uses its absolute value.

    Args:
        T: number of queries (at positions ``q_offset .. q_offset + T - 1``).
        S: number of keys (at positions ``k_offset .. k_offset + S - 1``).
        q_offset: position of the first query.
        k_offset: position of the first key.
        device: where the result lives.

    Returns:
        int64 tensor ``[T, S]``.

    Raises:
        TypeError: if an argument is not an integer.
        ValueError: if ``T`` or ``S`` is negative.

    Example:
        >>> relative_positions(2, 4, q_offset=2)
        tensor([[-2, -1,  0,  1],
                [-3, -2, -1,  0]])
    """
    T = check_int("T", T, minimum=0)
    S = check_int("S", S, minimum=0)
    q_offset = check_int("q_offset", q_offset)
    k_offset = check_int("k_offset", k_offset)
    q_pos = torch.arange(q_offset, q_offset + T, device=device)  # [T]
    k_pos = torch.arange(k_offset, k_offset + S, device=device)  # [S]
    return k_pos[None, :] - q_pos[:, None]  # [T, S]


def _check_heads(name: str, t: Tensor, *, head_dim: int | None = None, n_heads: int | None = None) -> None:
    """Refuse anything but a floating ``[B, H, L, Dh]`` tensor (with the given sizes)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a tensor [B, H, L, Dh], got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if t.ndim != 4:
        raise ValueError(f"{name} must be [B, H, L, Dh] (4 dims), got shape {list(t.shape)}")
    if head_dim is not None and t.shape[-1] != head_dim:
        raise ValueError(f"{name} must have head_dim = {head_dim} features, got shape {list(t.shape)}")
    if n_heads is not None and t.shape[1] != n_heads:
        raise ValueError(f"{name} must have n_heads = {n_heads} heads (dim 1), got shape {list(t.shape)}")


class AttentionPosition(nn.Module):
    """Base class: a positional scheme applied inside attention. Every default does nothing.

    Subclasses override any of :meth:`rotate`, :meth:`bias` and
    :meth:`value_term`; attention calls all three, in that order around the
    softmax::

        q, k = scheme.rotate(q, k, q_offset=.., k_offset=..)
        scores = q @ k.T / sqrt(Dh) + scheme.bias(q, S, q_offset=.., k_offset=..)
        weights = softmax(scores + mask)
        out = weights @ v + scheme.value_term(weights, q_offset=.., k_offset=..)

    Attributes:
        max_len: the largest number of positions the scheme can encode, or None
            for any length (every scheme here; a learned absolute table sets it).
        needs_weights: True when :meth:`value_term` is used: attention must then
            take its explicit path that materialises the weights, not a fused kernel.
        needs_keys: True when :meth:`bias` reads the keys as well as the queries
            (CoPE counts positions with gates ``sigmoid(q . k)``); attention then
            passes them as ``bias(q, S, ..., k=keys)``, the keys already rotated.
        caches: True when cached decoding gives the full pass's numbers (a scheme
            honest about offsets). False for schemes that draw new positions on
            every call (the randomized ones): a model then decodes without a cache,
            re-running the whole sequence at each step.
    """

    max_len: int | None = None
    needs_weights: bool = False
    needs_keys: bool = False
    caches: bool = True

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> tuple[Tensor, Tensor]:
        """Turn queries and keys by their positions (default: return them unchanged).

        Args:
            q: queries ``[B, H, T, Dh]`` at positions ``q_offset .. q_offset + T - 1``.
            k: keys ``[B, H, S, Dh]`` at positions ``k_offset .. k_offset + S - 1``.
            q_offset: position of the first query.
            k_offset: position of the first key.

        Returns:
            ``(q, k)`` rotated, same shapes and dtypes.
        """
        return q, k

    def bias(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0) -> Tensor | None:
        """The additive positional term of the attention scores (default: None, no bias).

        Args:
            q: queries ``[B, H, T, Dh]``; fixes ``T``, dtype and device, and the
                term itself for query-dependent schemes (Shaw).
            n_keys: number of keys ``S``.
            q_offset: position of the first query.
            k_offset: position of the first key.

        Returns:
            None, or a tensor broadcastable to ``[B, H, T, S]`` (``[1, H, T, S]``,
            or ``[B, H, T, S]`` when it depends on ``q``), already including the
            ``1 / sqrt(Dh)`` factor where the scheme's scores are scaled, in
            :func:`bias_dtype` of ``q.dtype``.
        """
        return None

    def score_mod(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0) -> ScoreMod | None:
        """:meth:`bias` as a FlexAttention ``score_mod`` (:mod:`attnlab.encodings.score_mods`), or None.

        None (the default) when the scheme adds no score term, or one that cannot
        be computed score by score (CoPE's counts, drawn positions); attention then
        takes the dense or the chunked path.

        Args:
            q: queries ``[B, H, T, Dh]``.
            n_keys: number of keys ``S``.
            q_offset: position of the first query.
            k_offset: position of the first key.

        Returns:
            None, or ``score_mod(score, b, h, q_idx, kv_idx) -> score`` (scalar
            tensors) adding the term of :meth:`bias` at ``[b, h, q_idx, kv_idx]``.
        """
        return None

    def value_term(self, weights: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> Tensor | None:
        """A term added to the attention output, from the weights (default: None).

        Args:
            weights: post-softmax attention weights ``[B, H, T, S]``.
            q_offset: position of the first query.
            k_offset: position of the first key.

        Returns:
            None, or a tensor ``[B, H, T, Dh]`` in ``weights.dtype``.
        """
        return None


class NoPosition(AttentionPosition):
    """NoPE: no positional information at all, as a first-class choice.

    A causal decoder can still tell positions apart without any encoding: the
    causal mask lets query ``i`` see ``i + 1`` keys, so e.g. uniform attention
    averages over a window whose size is the position. Kazemnejad et al. 2023,
    "The Impact of Positional Encoding on Length Generalization in Transformers"
    (NeurIPS, arXiv:2305.19466), prove NoPE can represent both absolute and
    relative positions and find it generalises to longer sequences better than
    sinusoidal, rotary, ALiBi or T5 biases on their reasoning tasks. In an
    encoder (no causal mask) attention is permutation-equivariant, so NoPE there
    really does mean "a bag of tokens".

    Every method is the base class's no-op; ``max_len`` is None and
    ``needs_weights`` False.

    Example:
        >>> q = torch.randn(1, 2, 3, 4)
        >>> NoPosition().rotate(q, q)[0] is q, NoPosition().bias(q, 3)
        (True, None)
    """
