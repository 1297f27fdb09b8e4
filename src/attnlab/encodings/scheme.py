"""The one protocol of positional schemes that act *inside* attention: :class:`PositionScheme`.

Absolute encodings (``sinusoidal``, ``LearnedPositionalEncoding``) change the tokens
before attention. A position scheme changes attention itself, in up to three places
(``MultiHeadAttention`` calls them in this order, heads already split)::

    q, k = scheme.rotate(q, k, q_offset=.., k_offset=..)                 # turn q and k (rotary, xPos)
    scores = q @ k.T * scale + scheme.bias(q, S, q_offset=.., k=k)       # a score term (ALiBi, T5, FIRE, CoPE)
    out = softmax(scores + mask) @ v + scheme.value_term(weights, ..)    # a value term (Shaw's values)

A scheme writes only its *primitives*, at given integer positions ``q_pos [T]``,
``k_pos [S]`` (or, for a :attr:`~PositionScheme.relative` scheme, at signed
key-minus-query distances ``rel [T, S]``), and *declares* what it does as class
attributes. The base derives everything else once:

* the offset methods above (query ``i`` at ``q_offset + i``, key ``j`` at
  ``k_offset + j``; a cached decoding step is ``q_offset = p, k_offset = 0``), so
  cached decoding gives the numbers of a full pass;
* a relative scheme's term at positions from its term at distances, which is
  what lets Ruoss et al. 2023's randomized distances reach it
  (:class:`attnlab.encodings.RandomizedPositions`);
* a FlexAttention ``score_mod`` for a score term that depends on the distance
  alone (:attr:`~PositionScheme.by_distance`), from a table of the term per distance;
* the scheme for a model's sizes (:meth:`PositionScheme.for_model`), which is how a
  name, a class or a user's ``module:Class`` reaches attention the same way.

The backends (:mod:`attnlab.attention.backends`) read the declarations and nothing
else: nothing asks a scheme what it is by comparing its methods.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab._validate import check_int

# FlexAttention's score_mod(score, batch, head, q_idx, kv_idx) -> score, every argument a scalar tensor.
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

__all__ = ["AttentionPosition", "ModelSizes", "NoPosition", "PositionScheme", "ScoreMod", "bias_dtype",
           "check_heads", "check_positions", "check_rel", "distance_table", "positions", "relative_positions"]


def bias_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a score term is returned in, for queries of ``dtype``: float32 for half precision, else ``dtype``.

    Half-precision scores are summed and soft-maxed in float32 (DESIGN.md), and a
    bias of ``-slope * 5000`` is not even representable to the unit in bfloat16.

    Example:
        >>> bias_dtype(torch.bfloat16), bias_dtype(torch.float64)
        (torch.float32, torch.float64)
    """
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def positions(start: int, length: int, device: torch.device | str | None = None) -> Tensor:
    """The integer positions ``start .. start + length - 1``, int64 ``[length]``.

    Example:
        >>> positions(3, 4)
        tensor([3, 4, 5, 6])
    """
    start = check_int("start", start)
    length = check_int("length", length, minimum=0)
    return torch.arange(start, start + length, device=device)  # [length]


def relative_positions(T: int, S: int, *, q_offset: int = 0, k_offset: int = 0,
                       device: torch.device | str | None = None) -> Tensor:
    """Key position minus query position for every (query, key) pair, int64 ``[T, S]``.

    Entry ``[i, j]`` is ``(k_offset + j) - (q_offset + i)``: positive when the key comes
    after the query (T5's ``memory_position - query_position``, Shaw et al.'s ``j - i``).

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
    q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
    q_pos = positions(q_offset, T, device)  # [T]
    k_pos = positions(k_offset, S, device)  # [S]
    return k_pos[None, :] - q_pos[:, None]  # [T, S]


def check_heads(name: str, t: Tensor, *, head_dim: int | None = None, n_heads: int | None = None) -> None:
    """Refuse anything but a floating ``[B, H, L, Dh]`` tensor (with the given sizes).

    Raises:
        TypeError: for a non-tensor or a non-floating one.
        ValueError: for another number of dims, ``Dh`` or ``H``.
    """
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


def check_positions(name: str, pos: Tensor, length: int | None = None) -> None:
    """Refuse anything but a 1-D integer tensor ``pos [L]`` of ``length`` positions (metadata only: no device sync).

    Raises:
        TypeError: for a non-integer tensor.
        ValueError: for a shape other than ``[length]``.

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

    Raises:
        TypeError: for a non-integer tensor.
        ValueError: for a shape other than ``[T, S]``.
    """
    if not isinstance(rel, Tensor) or rel.is_floating_point() or rel.is_complex() or rel.dtype == torch.bool:
        raise TypeError(f"rel must be an integer tensor [T, S], got {getattr(rel, 'dtype', type(rel).__name__)}")
    if rel.ndim != 2 or rel.shape[0] != T or (S is not None and rel.shape[1] != S):
        want = f"[{T}, {S}]" if S is not None else f"[{T}, S]"
        raise ValueError(f"rel must be [T, S] = {want} (queries x keys), got shape {list(rel.shape)}")


@dataclass(frozen=True)
class ModelSizes:
    """What a model tells a scheme it builds (:meth:`PositionScheme.for_model`).

    Attributes:
        n_heads: ``H``.
        head_dim: ``Dh``.
        d_model: ``D`` (what an input table is as wide as).
        causal: the attention is causal (a decoder), or bidirectional (an encoder).
        max_len: the longest sequence the model is built for; the randomized schemes draw
            from ``[0, max_len)``, CoPE counts up to it. None: not known.
        max_relative_position: Shaw et al.'s clipping distance ``k``.
    """

    n_heads: int
    head_dim: int
    d_model: int
    causal: bool
    max_len: int | None = None
    max_relative_position: int = 16


class PositionScheme(nn.Module):
    """Base class of every scheme inside attention: write the primitives you use, declare what you do.

    Primitives (each default does nothing):

    * :meth:`rotate_at`: turn ``q`` and ``k`` by their positions (declare :attr:`rotates`);
    * :meth:`bias_at` (or :meth:`bias_rel` for a :attr:`relative` scheme): the score term
      (declare :attr:`adds_score`; :attr:`reads_keys` when it reads the keys);
    * :meth:`value_term_at` (or :meth:`value_term_rel`): the value term (declare :attr:`adds_value`);
    * :meth:`score_mod`: the score term per score, for FlexAttention (declare :attr:`has_score_mod`;
      a :attr:`by_distance` scheme gets one from the base);
    * :meth:`for_model`: the scheme for a model's sizes (the default calls ``cls()``).

    Attributes:
        rotates: turns q and k (rotary, xPos).
        adds_score: adds a term to the scores before the softmax.
        adds_value: adds a term to the output from the weights (Shaw's values); attention
            then materialises the weights.
        reads_keys: the score term reads the keys, passed as ``k=`` (CoPE).
        relative: the terms depend on positions only through ``k_pos - q_pos``; the scheme
            writes :meth:`bias_rel` / :meth:`value_term_rel`, and can be given distances.
        by_distance: the score term depends on the distance alone, not on the queries'
            values (ALiBi, T5, KERPLE): it is computed once per distance, for the chunked
            and FlexAttention paths.
        has_score_mod: :meth:`score_mod` gives the score term per score (FlexAttention).
        draws_positions: positions are drawn anew at every call (randomized schemes).
        causal_only: defined for causal attention only; refused in a bidirectional one.
        caches: cached decoding gives a full pass's numbers (False when positions are drawn).
        randomize_by: what Ruoss et al.'s randomized version draws: ``"positions"`` or
            ``"distances"`` (their ALiBi and relative encoding).
        max_len: the most positions the scheme can encode, None for any length.
    """

    rotates: bool = False
    adds_score: bool = False
    adds_value: bool = False
    reads_keys: bool = False
    relative: bool = False
    by_distance: bool = False
    has_score_mod: bool = False
    draws_positions: bool = False
    causal_only: bool = False
    caches: bool = True
    randomize_by: str = "positions"
    max_len: int | None = None

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> PositionScheme:
        """The scheme for one self-attention of a model of ``sizes`` (override to read them)."""
        return cls()

    # -- what a model calls: offsets, derived once -----------------------------------------

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> tuple[Tensor, Tensor]:
        """:meth:`rotate_at` of ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` at the offsets' positions.

        Raises:
            TypeError: for non-tensor ``q``/``k`` or non-integer offsets (and what :meth:`rotate_at` raises).
        """
        if not self.rotates:
            return q, k
        if not isinstance(q, Tensor) or not isinstance(k, Tensor):
            raise TypeError(f"q and k must be tensors [B, H, L, Dh], got {type(q).__name__} and {type(k).__name__}")
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        k_pos = positions(k_offset, k.shape[-2], k.device)  # [S]
        same = q_offset == k_offset and q.shape[-2] == k.shape[-2] and q.device == k.device
        q_pos = k_pos if same else positions(q_offset, q.shape[-2], q.device)  # [T]: one table for self-attention
        return self.rotate_at(q, k, q_pos=q_pos, k_pos=k_pos)

    def bias(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0,
             k: Tensor | None = None) -> Tensor | None:
        """The score term of ``q [B, H, T, Dh]`` against ``n_keys`` keys, broadcastable to ``[B, H, T, S]``.

        ``k`` (the keys ``[B, H, S, Dh]``, rotated) is passed on to a scheme that :attr:`reads_keys`.
        Returns None for a scheme that adds no score term.
        """
        if not self.adds_score:
            return None
        check_heads("q", q)
        n_keys = check_int("n_keys", n_keys, minimum=0)
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.bias_at(q, q_pos=positions(q_offset, q.shape[-2], q.device),
                            k_pos=positions(k_offset, n_keys, q.device), k=k)

    def value_term(self, weights: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> Tensor | None:
        """The value term from ``weights [B, H, T, S]`` at the offsets' positions, ``[B, H, T, Dh]`` or None.

        Raises:
            TypeError: for non-tensor ``weights`` or non-integer offsets (and what :meth:`value_term_at` raises).
        """
        if not self.adds_value:
            return None
        if not isinstance(weights, Tensor):
            raise TypeError(f"weights must be a tensor [B, H, T, S], got {type(weights).__name__}")
        q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
        return self.value_term_at(weights, q_pos=positions(q_offset, weights.shape[-2], weights.device),
                                  k_pos=positions(k_offset, weights.shape[-1], weights.device))

    # -- primitives at positions ---------------------------------------------------------------

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Turn ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` by ``q_pos [T]`` and ``k_pos [S]`` (default: unchanged)."""
        return q, k

    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term for queries at ``q_pos [T]`` and keys at ``k_pos [S]``.

        A :attr:`relative` scheme gets it from :meth:`bias_rel` at ``k_pos - q_pos``;
        otherwise the default is None (no term).

        Returns:
            None, or a tensor broadcastable to ``[B, H, T, S]`` in :func:`bias_dtype` of
            ``q.dtype``, the ``scale`` of the scores not applied (the term is added to the
            scaled scores).
        """
        if not self.relative:
            return None
        check_heads("q", q)
        check_positions("q_pos", q_pos, q.shape[-2])
        check_positions("k_pos", k_pos)
        return self.bias_rel(q, rel=k_pos[None, :] - q_pos[:, None], k=k)  # rel [T, S]

    def value_term_at(self, weights: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The value term from ``weights [B, H, T, S]`` at ``q_pos``, ``k_pos``: ``[B, H, T, Dh]`` or None.

        A :attr:`relative` scheme gets it from :meth:`value_term_rel` at ``k_pos - q_pos``.

        Raises:
            TypeError / ValueError: for non-tensor ``weights`` or positions that are not ``[T]`` / ``[S]``.
        """
        if not self.relative:
            return None
        if not isinstance(weights, Tensor):
            raise TypeError(f"weights must be a tensor [B, H, T, S], got {type(weights).__name__}")
        check_positions("q_pos", q_pos, weights.shape[-2])
        check_positions("k_pos", k_pos, weights.shape[-1])
        return self.value_term_rel(weights, rel=k_pos[None, :] - q_pos[:, None])  # rel [T, S]

    # -- primitives at distances (relative schemes) ---------------------------------------------

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term at signed key-minus-query distances ``rel [T, S]`` (relative schemes write this).

        Raises:
            NotImplementedError: for a scheme that is not :attr:`relative` (it reads
                absolute positions: give it positions, :meth:`bias_at`).
        """
        self._need_relative("bias_at")
        return None

    def value_term_rel(self, weights: Tensor, *, rel: Tensor) -> Tensor | None:
        """The value term from ``weights [B, H, T, S]`` at distances ``rel [T, S]`` (relative schemes)."""
        self._need_relative("value_term_at")
        return None

    def _need_relative(self, instead: str) -> None:
        if not self.relative:
            raise NotImplementedError(
                f"{type(self).__name__} reads absolute positions (relative=False): it cannot be "
                f"evaluated at a matrix of distances; give it positions ({instead})")

    # -- FlexAttention -------------------------------------------------------------------------------

    def score_mod(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0) -> ScoreMod | None:
        """:meth:`bias` of ``q [B, H, T, Dh]`` as a FlexAttention ``score_mod(score, b, h, q_idx, kv_idx)``, or None.

        A :attr:`by_distance` scheme gets a lookup in :func:`distance_table`; another
        scheme that declares :attr:`has_score_mod` overrides this.
        """
        if not self.by_distance:
            return None
        table = distance_table(self, q, n_keys, q_offset=q_offset, k_offset=k_offset)  # [H, T + S - 1]
        shift = q.shape[-2] - 1

        def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + table[h, kv_idx - q_idx + shift]

        return score_mod


def distance_table(scheme: PositionScheme, q: Tensor, n_keys: int, *, q_offset: int = 0,
                   k_offset: int = 0) -> Tensor:
    """A :attr:`~PositionScheme.by_distance` scheme's score term at every distance of the call, ``[H, T + S - 1]``.

    Entry ``[h, j - i + T - 1]`` is head ``h``'s term between query ``i`` and key ``j``
    (positions ``q_offset + i`` and ``k_offset + j``): every head's ``[T, S]`` term is a
    sliding window over it. Computed by the scheme's own :meth:`~PositionScheme.bias_at`,
    so with gradients to its parameters when autograd records.
    """
    T = q.shape[-2]
    first = k_offset - q_offset - (T - 1)  # the smallest key-minus-query distance of the call
    distances = torch.arange(first, first + T + n_keys - 1, device=q.device)  # [T + S - 1]
    zero = torch.zeros(1, dtype=torch.int64, device=q.device)  # one query, at position 0
    table = scheme.bias_at(q[..., :1, :], q_pos=zero, k_pos=distances)  # [1, H|1, 1, T + S - 1]
    assert table is not None, f"{type(scheme).__name__} declares by_distance but has no score term"
    return table[0, :, 0].expand(q.shape[1], -1)  # [H, T + S - 1]


class NoPosition(PositionScheme):
    """NoPE: no positional information at all, as a first-class choice.

    A causal decoder can still tell positions apart without any encoding: the causal
    mask lets query ``i`` see ``i + 1`` keys. Kazemnejad et al. 2023 (NeurIPS,
    arXiv:2305.19466) prove NoPE can represent absolute and relative positions, and find
    it generalises to longer sequences better than sinusoidal, rotary, ALiBi or T5 on
    their tasks. In an encoder (no causal mask) attention is permutation-equivariant, so
    NoPE there really is "a bag of tokens". It declares nothing and adds nothing.

    Example:
        >>> q = torch.randn(1, 2, 3, 4)
        >>> NoPosition().rotate(q, q)[0] is q, NoPosition().bias(q, 3)
        (True, None)
    """


#: the protocol's earlier name, kept for code written against it.
AttentionPosition = PositionScheme
