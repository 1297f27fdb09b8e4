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

Positions from the data. Every offset method also takes ``position_ids`` (the
queries' positions, ``[B, T]``) and ``key_position_ids`` (``[B, S]``; by default
the queries' own when ``S == T``, self-attention), which replace the offsets: a
left-padded batch (:func:`attnlab.encodings.positions.positions_from_mask`), Abacus
digit indices. The primitives then get per-row positions ``[B, T]`` / ``[B, S]``
(distances ``[B, T, S]``) and return terms with a batch dim; a scheme that does not
declare :attr:`~PositionScheme.batched_positions` is called once per row instead
(:func:`call_by_row`), so a scheme written for one sequence's positions keeps working.
Without position ids every call is what it was: 1-d positions.

The backends (:mod:`attnlab.attention.backends`) read the declarations and nothing
else: nothing asks a scheme what it is by comparing its methods.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from attnlab._validate import check_int
from attnlab.encodings.positions import (
    call_positions,
    check_positions,
    check_rel,
    pair_distances,
    positions,
    relative_positions,
)

# FlexAttention's score_mod(score, batch, head, q_idx, kv_idx) -> score, every argument a scalar tensor.
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

# call_positions, check_positions, check_rel, positions, relative_positions live in .positions; importable from here.
__all__ = ["ModelSizes", "NoPosition", "PositionScheme", "ScoreMod", "bias_dtype", "call_by_row",
           "call_positions", "call_primitive", "check_heads", "check_positions", "check_rel", "check_rotated",
           "check_scheme", "check_term", "distance_table", "positions", "relative_positions", "static_for_compile"]

_Class = TypeVar("_Class", bound=type)


def bias_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a score term is returned in, for queries of ``dtype``: float32 for half precision, else ``dtype``.

    Half-precision scores are summed and soft-maxed in float32 (DESIGN.md), and a
    bias of ``-slope * 5000`` is not even representable to the unit in bfloat16.

    Example:
        >>> bias_dtype(torch.bfloat16), bias_dtype(torch.float64)
        (torch.float32, torch.float64)
    """
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def static_for_compile(cls: _Class) -> _Class:
    """Mark a module class as ``torch._dynamo.mark_static(cls)`` does, without importing dynamo (a second).

    For a scheme whose plain tensor attributes are constants (float64 CPU tensors kept off the
    buffers, so that ``.half()`` cannot round them: ALiBi's slopes, rotary's speeds). torch.compile
    with ``dynamic=True`` takes such a tensor as an input of dynamic size, and gives an input's size
    the same symbol when it is equal at the first call (a batch of 8 against 8 heads' slopes): the
    graph then holds only for batches of 8 and recompiles for the next. A static module's tensors are
    constants of the graph, of static sizes.
    """
    cls._dynamo_marked_static = True  # type: ignore[attr-defined]  # what mark_static(cls) sets (torch._dynamo)
    return cls


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


#: each primitive a scheme may write, and the declaration without which attention never calls it
_DECLARED_BY = (("rotate_at", "rotates"), ("bias_at", "adds_score"), ("bias_rel", "adds_score"),
                ("bias_rel", "relative"), ("value_term_at", "adds_value"), ("value_term_rel", "adds_value"),
                ("value_term_rel", "relative"), ("score_mod", "has_score_mod"))


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
        reads_mask: the score term reads the attention mask (boolean, True = may attend,
            broadcastable to ``[B, H, T, S]``, or None), passed to :meth:`bias_at` as ``mask=``
            (CoPE counts only the keys a query may attend to).
        relative: the terms depend on positions only through ``k_pos - q_pos``; the scheme
            writes :meth:`bias_rel` / :meth:`value_term_rel`, and can be given distances.
        by_distance: the score term depends on the distance alone, not on the queries'
            values (ALiBi, T5, KERPLE): it is computed once per distance, for the chunked
            and FlexAttention paths.
        has_score_mod: :meth:`score_mod` gives the score term per score (FlexAttention).
        batched_positions: the primitives take per-row positions ``[B, T]`` / ``[B, S]``
            (distances ``[B, T, S]``) and return terms with a batch dim; False (a scheme
            written for 1-d positions): the base calls them once per row.
        draws_positions: positions are drawn anew at every call (randomized schemes).
        causal_only: defined for causal attention only; refused in a bidirectional one.
        caches: cached decoding gives a full pass's numbers (False when positions are drawn).
        randomize_by: what Ruoss et al.'s randomized version draws: ``"positions"`` or
            ``"distances"`` (their ALiBi and relative encoding).
        max_len: the most positions the scheme can encode, None for any length.
        shared_across_layers: a model builds one instance for all the self-attentions of a
            stack and gives every layer that same object (T5's one table, in its first layer),
            instead of one per layer (:class:`attnlab.models.sequence_model.SequenceModel`).
    """

    rotates: bool = False
    adds_score: bool = False
    adds_value: bool = False
    reads_keys: bool = False
    reads_mask: bool = False
    relative: bool = False
    by_distance: bool = False
    has_score_mod: bool = False
    batched_positions: bool = False
    draws_positions: bool = False
    causal_only: bool = False
    caches: bool = True
    randomize_by: str = "positions"
    max_len: int | None = None
    shared_across_layers: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check, as the class is made, that every primitive it writes is declared: attention calls a primitive
        only when its declaration says so, and an undeclared one would silently run as no position.

        Raises:
            TypeError: naming the class, the primitive and the declaration it lacks.
        """
        super().__init_subclass__(**kwargs)
        for primitive, declaration in _DECLARED_BY:
            if getattr(cls, primitive) is not getattr(PositionScheme, primitive) and not getattr(cls, declaration):
                raise TypeError(f"{cls.__name__} writes {primitive} but does not declare {declaration} = True: "
                                f"attention calls {primitive} only for a scheme that declares it; add "
                                f"{declaration} = True to the class")

    @classmethod
    def for_model(cls, sizes: ModelSizes) -> PositionScheme:
        """The scheme for one self-attention of a model of ``sizes`` (override to read them)."""
        return cls()

    # -- what a model calls: offsets (or position ids), derived once ---------------------------

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0,
               position_ids: Tensor | None = None, key_position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """:meth:`rotate_at` of ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` at the offsets' positions.

        ``position_ids [B, T]`` / ``key_position_ids [B, S]`` replace the offsets (see
        :func:`call_positions`: the keys default to the queries' positions when ``S == T``).

        Raises:
            TypeError / ValueError: for non-tensor ``q``/``k``, non-integer offsets, position ids
                of the wrong dtype or shape (and what :meth:`rotate_at` raises).
        """
        if not self.rotates:
            return q, k
        if not isinstance(q, Tensor) or not isinstance(k, Tensor):
            raise TypeError(f"q and k must be tensors [B, H, L, Dh], got {type(q).__name__} and {type(k).__name__}")
        if position_ids is not None or key_position_ids is not None:
            q_pos, k_pos = call_positions(q.shape[0], q.shape[-2], k.shape[-2], q.device, q_offset=q_offset,
                                          k_offset=k_offset, position_ids=position_ids,
                                          key_position_ids=key_position_ids)
        else:
            q_offset, k_offset = check_int("q_offset", q_offset), check_int("k_offset", k_offset)
            k_pos = positions(k_offset, k.shape[-2], k.device)  # [S]
            same = q_offset == k_offset and q.shape[-2] == k.shape[-2] and q.device == k.device
            q_pos = k_pos if same else positions(q_offset, q.shape[-2], q.device)  # [T]: one table for self-attention
        turned = call_primitive(self, self.rotate_at, q, k, q_pos=q_pos, k_pos=k_pos)
        return check_rotated(self, turned, q, k)

    def bias(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0, k: Tensor | None = None,
             position_ids: Tensor | None = None, key_position_ids: Tensor | None = None,
             mask: Tensor | None = None) -> Tensor | None:
        """The score term of ``q [B, H, T, Dh]`` against ``n_keys`` keys, broadcastable to ``[B, H, T, S]``.

        ``k`` (the keys ``[B, H, S, Dh]``, rotated) is passed on to a scheme that :attr:`reads_keys`,
        ``mask`` (boolean, broadcastable to ``[B, H, T, S]``) to one that :attr:`reads_mask`.
        ``position_ids [B, T]`` / ``key_position_ids [B, S]`` replace the offsets
        (:func:`call_positions`). Returns None for a scheme that adds no score term.

        Raises:
            TypeError / ValueError: for a ``q`` that is not ``[B, H, T, Dh]``, a negative ``n_keys``,
                non-integer offsets or bad position ids (and what :meth:`bias_at` raises).
        """
        if not self.adds_score:
            return None
        check_heads("q", q)
        n_keys = check_int("n_keys", n_keys, minimum=0)
        q_pos, k_pos = call_positions(q.shape[0], q.shape[-2], n_keys, q.device, q_offset=q_offset,
                                      k_offset=k_offset, position_ids=position_ids, key_position_ids=key_position_ids)
        extra = {"mask": mask} if self.reads_mask else {}
        term = call_primitive(self, self.bias_at, q, q_pos=q_pos, k_pos=k_pos, k=k, **extra)
        return check_term(self, "bias_at", term, (q.shape[0], q.shape[1], q.shape[-2], n_keys), "[B, H, T, S]")

    def value_term(self, weights: Tensor, *, q_offset: int = 0, k_offset: int = 0,
                   position_ids: Tensor | None = None, key_position_ids: Tensor | None = None,
                   value_width: int | None = None) -> Tensor | None:
        """The value term from ``weights [B, H, T, S]`` at the offsets' positions, ``[B, H, T, Dv]`` or None.

        ``position_ids [B, T]`` / ``key_position_ids [B, S]`` replace the offsets (:func:`call_positions`).
        ``value_width``: the values' width ``Dv`` the term is added to (checked when given).

        Raises:
            TypeError / ValueError: for non-tensor ``weights``, non-integer offsets or bad position ids
                (and what :meth:`value_term_at` raises, or a term of another shape, naming the scheme).
        """
        if not self.adds_value:
            return None
        if not isinstance(weights, Tensor):
            raise TypeError(f"weights must be a tensor [B, H, T, S], got {type(weights).__name__}")
        q_pos, k_pos = call_positions(weights.shape[0], weights.shape[-2], weights.shape[-1], weights.device,
                                      q_offset=q_offset, k_offset=k_offset, position_ids=position_ids,
                                      key_position_ids=key_position_ids)
        term = call_primitive(self, self.value_term_at, weights, q_pos=q_pos, k_pos=k_pos)
        B, H, T = weights.shape[0], weights.shape[1], weights.shape[-2]
        return check_term(self, "value_term_at", term, (B, H, T, value_width), "[B, H, T, Dv]")

    # -- primitives at positions ---------------------------------------------------------------

    def rotate_at(self, q: Tensor, k: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Turn ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` by ``q_pos [T]`` and ``k_pos [S]`` (default: unchanged).

        With :attr:`batched_positions` the positions may be per row, ``[B, T]`` and ``[B, S]``.
        """
        return q, k

    def bias_at(self, q: Tensor, *, q_pos: Tensor, k_pos: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term for queries at ``q_pos [T]`` and keys at ``k_pos [S]`` (or per row, ``[B, T]``, ``[B, S]``).

        A :attr:`relative` scheme gets it from :meth:`bias_rel` at ``k_pos - q_pos``
        (``[T, S]``, or ``[B, T, S]`` for per-row positions); otherwise the default is None (no term).

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
        return self.bias_rel(q, rel=pair_distances(q_pos, k_pos), k=k)  # rel [T, S] or [B, T, S]

    def value_term_at(self, weights: Tensor, *, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The value term from ``weights [B, H, T, S]`` at ``q_pos``, ``k_pos``: ``[B, H, T, Dh]`` or None.

        A :attr:`relative` scheme gets it from :meth:`value_term_rel` at ``k_pos - q_pos``.

        Raises:
            TypeError / ValueError: for non-tensor ``weights`` or positions that are not ``[T]`` / ``[S]``
                (or ``[B, T]`` / ``[B, S]``).
        """
        if not self.relative:
            return None
        if not isinstance(weights, Tensor):
            raise TypeError(f"weights must be a tensor [B, H, T, S], got {type(weights).__name__}")
        check_positions("q_pos", q_pos, weights.shape[-2])
        check_positions("k_pos", k_pos, weights.shape[-1])
        return self.value_term_rel(weights, rel=pair_distances(q_pos, k_pos))  # rel [T, S] or [B, T, S]

    # -- primitives at distances (relative schemes) ---------------------------------------------

    def bias_rel(self, q: Tensor, *, rel: Tensor, k: Tensor | None = None) -> Tensor | None:
        """The score term at signed key-minus-query distances ``rel [T, S]`` (relative schemes write this).

        With :attr:`batched_positions`, ``rel`` may be per row, ``[B, T, S]``.

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

    def score_mod(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0,
                  position_ids: Tensor | None = None, key_position_ids: Tensor | None = None) -> ScoreMod | None:
        """:meth:`bias` of ``q [B, H, T, Dh]`` as a FlexAttention ``score_mod(score, b, h, q_idx, kv_idx)``, or None.

        A :attr:`by_distance` scheme gets a lookup in :func:`distance_table`; another
        scheme that declares :attr:`has_score_mod` overrides this. Per-row positions
        (``position_ids [B, T]``, ``key_position_ids [B, S]``) have no score_mod (None):
        their distances are not those of the indices, and a table per call of every
        distance the rows reach would change size, so recompile, from call to call; the
        backends take the chunked path for them (:mod:`attnlab.attention.backends.choose`).
        """
        if not self.by_distance or position_ids is not None or key_position_ids is not None:
            return None
        table = distance_table(self, q, n_keys, q_offset=q_offset, k_offset=k_offset)  # [H, T + S - 1]
        shift = q.shape[-2] - 1

        def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + table[h, kv_idx - q_idx + shift]

        return score_mod


# -- a scheme written for one sequence's positions, at per-row ones ----------------------------

# The unbatched dims of each kind of positions: [T] / [S], and distances [T, S]; one more when per row.
_POSITION_DIMS = {"q_pos": 1, "k_pos": 1, "rel": 2}


def call_by_row(scheme: PositionScheme, primitive: Callable[..., Any], *tensors: Tensor,
                **given: Tensor | None) -> Any:
    """``primitive(*tensors, **given)`` of ``scheme`` at positions that may be per row: once, or once per row.

    The built-in schemes evaluate their primitives at every row's positions at once
    (``q_pos [B, T]``, ``k_pos [B, S]``, distances ``rel [B, T, S]``) and declare it
    (:attr:`PositionScheme.batched_positions`); so do positions shared by the batch
    (``[T]``, ``[S]``, ``[T, S]``): the primitive is called once. A scheme written for one
    sequence's positions is instead called with each row's 1-d positions and its slice of
    the batch-first tensors (``q``, ``k``, ``weights``, ``mask``; one of batch 1 serves
    every row), and the rows are concatenated: the same result, ``B`` calls instead of one.

    Args:
        scheme: whose declaration (``batched_positions``) decides.
        primitive: one of its primitives (``rotate_at``, ``bias_at``, ``bias_rel``,
            ``value_term_at``, ``value_term_rel``).
        tensors: its positional arguments, batch-first (``q``, ``k`` or ``weights``).
        given: its keyword arguments: the positions (``q_pos``, ``k_pos`` or ``rel``) and
            batch-first tensors or None (``k``, ``mask``).

    Returns:
        What the primitive returns: ``(q, k)`` concatenated over the rows, or a term
        ``[B|1, H|1, T, X]`` (None when every row's is None).
    """
    # The per-row positions' batch, for a scheme written for one sequence's (a plain loop: torch.compile traces it).
    rows = 0
    if not scheme.batched_positions:
        for name, t in given.items():
            if name in _POSITION_DIMS and t is not None and t.ndim > _POSITION_DIMS[name]:
                rows = max(rows, t.shape[0])
    if not rows:
        return primitive(*tensors, **given)
    out = []
    for b in range(rows):
        row_given = {name: (_row_positions(t, b, _POSITION_DIMS[name]) if name in _POSITION_DIMS else _row(t, b))
                     for name, t in given.items()}
        out.append(primitive(*(_row(t, b) for t in tensors), **row_given))
    if isinstance(out[0], tuple):  # rotate_at: (q, k)
        return torch.cat([p[0] for p in out]), torch.cat([p[1] for p in out])  # [B, H, T, Dh], [B, H, S, Dh]
    return _stack(out)


def call_primitive(scheme: PositionScheme, primitive: Callable[..., Any], *tensors: Tensor,
                   **given: Tensor | None) -> Any:
    """:func:`call_by_row` of ``primitive``, where what it raises beyond a clear refusal names the scheme.

    ``tensors`` are its batch-first arguments (``q [B, H, T, Dh]``, ``k [B, H, S, Dh]`` or
    ``weights [B, H, T, S]``), ``given`` its positions and keyword tensors, as :func:`call_by_row` takes them.

    The one place attention calls a scheme's primitives (:meth:`PositionScheme.rotate`, ``bias``,
    ``value_term`` and :func:`distance_table`): a scheme is any user's code, and an error deep in it
    (a RuntimeError of a tensor op, an assertion, an index) would otherwise reach the user as if
    attention had failed. A ValueError, TypeError or NotImplementedError is the scheme's own refusal,
    worded by whoever raised it, and passes as it is; so does running out of memory.

    Raises:
        ValueError: ``"position scheme Sandwich: its bias_at raised RuntimeError: ..."``, chained to the error.
    """
    try:
        return call_by_row(scheme, primitive, *tensors, **given)
    except (ValueError, TypeError, NotImplementedError):
        raise
    except Exception as err:
        if isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower():
            raise
        name = getattr(primitive, "__name__", "primitive")
        raise ValueError(f"position scheme {type(scheme).__name__}: its {name} raised {type(err).__name__}: "
                         f"{err}") from err


def _got(value: object) -> str:
    """What a primitive returned, for a message: a tensor's shape, or the type of anything else."""
    if isinstance(value, Tensor):
        return f"shape {list(value.shape)}"
    return "None" if value is None else type(value).__name__


def check_rotated(scheme: PositionScheme, turned: object, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """``turned``, the ``(q, k)`` :meth:`PositionScheme.rotate_at` returned, if they keep ``q``'s and ``k``'s shapes.

    ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` are what the primitive was given.

    Raises:
        TypeError: naming the scheme, for anything but a pair of tensors.
        ValueError: naming the scheme and both shapes, for a pair of other shapes (broadcasting
            would hide a query dropped or a head added).
    """
    def expected() -> str:  # the message is built only when it is raised (a string of sizes is no graph op)
        return (f"position scheme {type(scheme).__name__}: rotate_at must return (q, k) of the shapes it was "
                f"given, {list(q.shape)} and {list(k.shape)} ([B, H, T, Dh], [B, H, S, Dh])")

    if not isinstance(turned, (tuple, list)) or len(turned) != 2 or not all(isinstance(t, Tensor) for t in turned):
        got = type(turned).__name__ if not isinstance(turned, (tuple, list)) else \
            f"({', '.join(_got(t) for t in turned)})"
        raise TypeError(f"{expected()}, got {got}")
    rq, rk = turned
    if rq.shape != q.shape or rk.shape != k.shape:
        raise ValueError(f"{expected()}, got shapes {list(rq.shape)} and {list(rk.shape)}")
    return rq, rk


def check_term(scheme: PositionScheme, primitive: str, term: object, target: tuple[int | None, ...],
                layout: str) -> Tensor | None:
    """``term``, a score or value term, if it is None or a floating tensor broadcastable to ``target``.

    Each of its (at most 4) dims must be the target's or 1; a target dim of None takes any size.
    Checked on the shape alone (no values read), where the term leaves the scheme: a term of another
    shape otherwise broadcast into a wrong result, or failed deep inside attention.

    Raises:
        TypeError: naming the scheme, for a term that is not a floating tensor.
        ValueError: naming the scheme, the layout, the target and the term's shape.
    """
    if term is None:
        return None

    def expected() -> str:  # the message is built only when it is raised (a string of sizes is no graph op)
        shown = "[" + ", ".join("?" if n is None else str(n) for n in target) + "]"
        return (f"position scheme {type(scheme).__name__}: {primitive} must return None or a floating tensor "
                f"broadcastable to {layout} = {shown}")

    if not isinstance(term, Tensor) or not term.is_floating_point():
        got = f"dtype {term.dtype}" if isinstance(term, Tensor) else type(term).__name__
        raise TypeError(f"{expected()}, got {got}")
    shape = tuple(term.shape)
    fits = len(shape) <= len(target) and all(
        s == 1 or n is None or s == n for s, n in zip(reversed(shape), reversed(target), strict=False))
    if not fits:
        raise ValueError(f"{expected()} (each dim that size or 1), got shape {list(shape)}")
    return term


def _row(t: Tensor | None, b: int) -> Tensor | None:
    """Row ``b`` of a batch-first 4-d tensor, batch dim kept (``[1, ...]``); batch 1 or fewer dims serve all."""
    if t is None or t.ndim < 4 or t.shape[0] == 1:
        return t
    return t[b : b + 1]


def _row_positions(t: Tensor | None, b: int, ndim: int) -> Tensor | None:
    """Row ``b`` of per-row positions or distances (``ndim + 1`` dims), unbatched; shared ones as they are."""
    if t is None or t.ndim == ndim:
        return t
    return t[0] if t.shape[0] == 1 else t[b]


def _stack(terms: list[Tensor | None]) -> Tensor | None:
    """Per-row terms, each broadcastable to ``[1, H, T, X]``, as one ``[B, H|1, T, X]`` (None when every one is)."""
    real = [t for t in terms if t is not None]
    if not real:
        return None
    full = [t if t is not None else torch.zeros_like(real[0]) for t in terms]
    full = [t.reshape((1,) * (4 - t.ndim) + tuple(t.shape)) for t in full]  # each [1|.., H|1, T|1, X|1]
    return torch.cat(torch.broadcast_tensors(*full), dim=0)  # [B, H|1, T, X]


def check_scheme(name: str, position: object) -> None:
    """Refuse anything but None or a scheme (an object with ``rotate``, ``bias`` and ``value_term``).

    Raises:
        TypeError: naming ``name`` and the type given.
    """
    if position is not None and not all(callable(getattr(position, m, None)) for m in ("rotate", "bias", "value_term")):
        raise TypeError(f"{name} must be an attnlab.encodings.PositionScheme (rotate, bias, value_term), "
                        f"got {type(position).__name__}")


def distance_table(scheme: PositionScheme, q: Tensor, n_keys: int, *, q_offset: int = 0,
                   k_offset: int = 0) -> Tensor:
    """A :attr:`~PositionScheme.by_distance` scheme's score term at every distance of the call, ``[H, T + S - 1]``.

    Entry ``[h, j - i + T - 1]`` is head ``h``'s term between query ``i`` and key ``j``
    (positions ``q_offset + i`` and ``k_offset + j``): every head's ``[T, S]`` term is a
    sliding window over it. Computed by the scheme's own :meth:`~PositionScheme.bias_at`,
    so with gradients to its parameters when autograd records.

    Raises:
        TypeError / ValueError: naming the scheme, for a term that is None (it declares ``by_distance``)
            or not broadcastable to ``[B, H, 1, T + S - 1]``, or for what its ``bias_at`` raises
            (:func:`call_primitive`).
    """
    T = q.shape[-2]
    first = k_offset - q_offset - (T - 1)  # the smallest key-minus-query distance of the call
    distances = torch.arange(first, first + T + n_keys - 1, device=q.device)  # [T + S - 1]
    zero = torch.zeros(1, dtype=torch.int64, device=q.device)  # one query, at position 0
    first_query = q[..., :1, :]  # [B, H, 1, Dh]
    table = call_primitive(scheme, scheme.bias_at, first_query, q_pos=zero, k_pos=distances)  # [1, H|1, 1, T + S - 1]
    table = check_term(scheme, "bias_at", table, (q.shape[0], q.shape[1], 1, distances.shape[0]), "[B, H, T, S]")
    if table is None:
        raise TypeError(f"position scheme {type(scheme).__name__}: it declares by_distance = True but its bias_at "
                        "returned None: a scheme that declares it must add a score term at every distance")
    table = table.reshape((1,) * (4 - table.ndim) + tuple(table.shape))  # [1|B, H|1, 1, T + S - 1]
    return table[0, :, 0].expand(q.shape[1], distances.shape[0])  # [H, T + S - 1]


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

    batched_positions = True  # nothing to evaluate, at any positions

