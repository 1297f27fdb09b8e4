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
    "PositionScheme",
    "bias_dtype",
    "check_positions",
    "check_rel",
    "positions",
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


def positions(start: int, length: int, device: torch.device | str | None = None) -> Tensor:
    """The integer positions ``start .. start + length - 1`` of a call's queries or keys, int64 ``[length]``.

    Raises:
        TypeError: if an argument is not an integer.
        ValueError: if ``length`` is negative.

    Example:
        >>> positions(3, 4)
        tensor([3, 4, 5, 6])
    """
    start = check_int("start", start)
    length = check_int("length", length, minimum=0)
    return torch.arange(start, start + length, device=device)  # [length]


def check_positions(name: str, pos: Tensor, length: int | None = None) -> None:
    """Refuse anything but a 1-D integer tensor of ``length`` positions (``q_pos [T]`` / ``k_pos [S]``).

    Only the metadata is checked (no device sync): that the positions increase
    is the caller's promise, not verified.

    Args:
        name: the argument's name, for messages.
        pos: the positions, int64 ``[L]``.
        length: the number of queries or keys ``L`` they must match (None: any).

    Raises:
        TypeError: if ``pos`` is not an integer tensor.
        ValueError: if it is not 1-D of length ``length``.

    Example:
        >>> check_positions("q_pos", torch.tensor([0, 3, 7]), 3)  # passes silently
    """
    if not isinstance(pos, Tensor):
        raise TypeError(f"{name} must be an integer tensor [L], got {type(pos).__name__}")
    if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor [L], got dtype {pos.dtype}")
    if pos.ndim != 1 or (length is not None and pos.shape[0] != length):
        want = "L" if length is None else length
        raise ValueError(f"{name} must be [{want}] (one position per row), got shape {list(pos.shape)}")


def check_rel(rel: Tensor, T: int, S: int | None = None) -> None:
    """Refuse anything but an integer ``[T, S]`` matrix of signed key-minus-query distances.

    Args:
        rel: the distances, int64 ``[T, S]``.
        T: the number of queries it must have rows for.
        S: the number of keys, when known (None: any).

    Raises:
        TypeError: if ``rel`` is not an integer tensor.
        ValueError: if it is not ``[T, S]``.
    """
    if not isinstance(rel, Tensor) or rel.is_floating_point() or rel.is_complex() or rel.dtype == torch.bool:
        raise TypeError(f"rel must be an integer tensor [T, S], got {getattr(rel, 'dtype', type(rel).__name__)}")
    if rel.ndim != 2 or rel.shape[0] != T or (S is not None and rel.shape[1] != S):
        want = f"[{T}, {S}]" if S is not None else f"[{T}, S]"
        raise ValueError(f"rel must be [T, S] = {want} (queries x keys), got shape {list(rel.shape)}")


class PositionScheme(AttentionPosition):
    r"""A scheme that is a function of the tokens' positions, given as tensors.

    The protocol's offsets say "query ``i`` sits at ``q_offset + i``". A scheme
    that subclasses this one is written instead for any increasing positions,
    ``q_pos [T]`` and ``k_pos [S]`` (int64): :meth:`rotate`, :meth:`bias` and
    :meth:`value_term` turn the offsets into ``arange``\ s and call
    :meth:`rotate_at`, :meth:`bias_at` and :meth:`value_term_at`. That is what
    lets one formula serve both the ordinary positions and the randomized ones
    of Ruoss et al. 2023 (:class:`attnlab.encodings.RandomizedPositions` draws a
    sorted subset of ``[0, L_max)`` and hands it to the same ``*_at`` methods).

    Subclasses override any of the three ``*_at`` methods (each default does
    nothing); the positions are on the device of ``q`` (or ``weights``).

    Signed distances instead of positions. Ruoss et al.'s randomized ALiBi and
    relative encodings do not draw positions but distances: offset ``+k`` becomes
    ``+d_k`` and ``-k`` becomes ``-d_k`` for sorted random ``d_1 < d_2 < ...``, a
    matrix ``rel [T, S]`` that is not ``k_pos - q_pos`` for any positions. A scheme
    that depends on the positions only through ``k_pos - q_pos`` sets
    :attr:`relative` and can then be evaluated at such a matrix by
    :meth:`bias_rel` and :meth:`value_term_rel`; their defaults call the ``*_at``
    methods one query row at a time (exact, since row ``i`` of ``rel`` is
    increasing and a relative scheme sees only differences), and ALiBi, T5 and
    Shaw override them with one vectorised call.

    Attributes:
        relative: True when :meth:`bias_at` and :meth:`value_term_at` depend on
            the positions only through ``k_pos - q_pos`` (ALiBi, T5, Shaw);
            False (the default) when they read absolute positions (FIRE
            normalises by the query's position) or the scheme rotates.
    """

    relative: bool = False

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> tuple[Tensor, Tensor]:
        """:meth:`rotate_at` of ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` at the offsets' positions."""
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.rotate_at(q, k, q_pos=positions(q_offset, q.shape[-2], q.device),
                              k_pos=positions(k_offset, k.shape[-2], k.device))

    def bias(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0,
             k: Tensor | None = None) -> Tensor | None:
        """:meth:`bias_at` at positions ``q_offset + arange(T)`` and ``k_offset + arange(n_keys)``.

        ``k`` (the keys ``[B, H, S, Dh]``) is passed on to schemes that set ``needs_keys``.
        """
        n_keys = check_int("n_keys", n_keys, minimum=0)
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.bias_at(q, q_pos=positions(q_offset, q.shape[-2], q.device),
                            k_pos=positions(k_offset, n_keys, q.device), k=k)

    def value_term(self, weights: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> Tensor | None:
        """:meth:`value_term_at` of ``weights [B, H, T, S]`` at ``q_offset + arange(T)``, ``k_offset + arange(S)``."""
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.value_term_at(weights, q_pos=positions(q_offset, weights.shape[-2], weights.device),
                                  k_pos=positions(k_offset, weights.shape[-1], weights.device))

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Turn ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` by ``q_pos [T]`` and ``k_pos [S]`` (default: unchanged)."""
        return q, k

    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term for queries at ``q_pos [T]`` and keys at ``k_pos [S]`` (default: None).

        Returns what :meth:`AttentionPosition.bias` returns: None or a tensor
        broadcastable to ``[B, H, T, S]`` in :func:`bias_dtype` of ``q.dtype``.
        """
        return None

    def value_term_at(self, weights: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The output term from ``weights [B, H, T, S]`` at positions ``q_pos``, ``k_pos`` (default: None)."""
        return None

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term at signed key-minus-query distances ``rel [T, S]`` (see the class docstring).

        The default evaluates :meth:`bias_at` for each query row ``i`` with the
        query at position 0 and the keys at ``rel[i]``; a scheme with a faster
        way overrides it.

        Args:
            q: queries ``[B, H, T, Dh]``.
            rel: int64 ``[T, S]``, each row increasing (entry ``[i, j]`` stands for
                ``k_pos[j] - q_pos[i]``), on ``q``'s device.
            k: keys ``[B, H, S, Dh]`` for schemes that set ``needs_keys``.

        Returns:
            What :meth:`bias_at` returns: None or a tensor broadcastable to ``[B, H, T, S]``.

        Raises:
            NotImplementedError: for a scheme that is not :attr:`relative`.
            TypeError / ValueError: for ``rel`` that is not an integer ``[T, S]``.
        """
        if not self.relative:
            raise NotImplementedError(
                f"{type(self).__name__} reads absolute positions (relative=False): it cannot be "
                "evaluated at a matrix of distances; give it positions (bias_at)"
            )
        check_rel(rel, q.shape[-2])
        T, S = rel.shape
        if T == 0:
            return self.bias_at(q, q_pos=rel.new_zeros(0), k_pos=torch.arange(S, device=rel.device), k=k)
        zero = rel.new_zeros(1)  # [1]: the query at position 0, the keys at their distances
        rows = [self.bias_at(q[..., i : i + 1, :], q_pos=zero, k_pos=rel[i], k=k) for i in range(T)]
        present = [row for row in rows if row is not None]
        return torch.cat(present, dim=-2) if present else None  # T x [B|1, H, 1, S] -> [B|1, H, T, S]

    def value_term_rel(self, weights: Tensor, *, rel: Tensor) -> Tensor | None:
        """The output term from ``weights [B, H, T, S]`` at signed distances ``rel [T, S]``.

        The default evaluates :meth:`value_term_at` one query row at a time, as
        :meth:`bias_rel` does.

        Args:
            weights: post-softmax weights ``[B, H, T, S]``.
            rel: int64 ``[T, S]``, each row increasing, on ``weights``' device.

        Returns:
            None, or ``[B, H, T, Dh]`` in ``weights.dtype``.

        Raises:
            NotImplementedError: for a scheme that is not :attr:`relative`.
            TypeError / ValueError: for ``rel`` that is not an integer ``[T, S]``.
        """
        if not self.relative:
            raise NotImplementedError(
                f"{type(self).__name__} reads absolute positions (relative=False): it cannot be "
                "evaluated at a matrix of distances; give it positions (value_term_at)"
            )
        check_rel(rel, weights.shape[-2], weights.shape[-1])
        T, S = rel.shape
        if T == 0:
            return self.value_term_at(weights, q_pos=rel.new_zeros(0), k_pos=torch.arange(S, device=rel.device))
        zero = rel.new_zeros(1)  # [1]
        rows = [self.value_term_at(weights[..., i : i + 1, :], q_pos=zero, k_pos=rel[i]) for i in range(T)]
        present = [row for row in rows if row is not None]
        return torch.cat(present, dim=-2) if present else None  # T x [B, H, 1, Dh] -> [B, H, T, Dh]
