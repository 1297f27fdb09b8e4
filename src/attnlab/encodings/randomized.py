"""Randomized positional encodings: positions drawn from a longer range at every call.

Ruoss et al. 2023, "Randomized Positional Encodings Boost Length Generalization of
Transformers" (ACL, arXiv:2305.16843). A model trained on sequences of length up to
``N`` meets, at test time, positions it never saw: the encodings of positions
``N .. M`` are out of distribution, and that, more than the task, is why it fails
on longer inputs. The fix: fix a range ``L_max`` at least as long as any test
sequence, and give a sequence of length ``L`` not the positions ``0 .. L - 1``
but a sorted random subset of ``L`` distinct positions of ``[0, L_max)``, drawn
anew every time. Every position (and every distance) up to ``L_max`` is then seen
in training, while the order of the tokens is kept.

What follows the authors' code (google-deepmind/randomized_positional_encodings,
``models/positional_encodings.py``, ``models/transformer.py``,
``experiments/range_evaluation.py``):

* a draw happens at **every call**, in training and at evaluation alike (the
  evaluation passes a fresh random key to the model; there is no training
  switch), and one draw serves the whole batch;
* absolute tables (``NOISY_SIN_COS``, ``NOISY_LEARNT``): a table of ``L_max``
  rows, of which the rows at the drawn positions are added to the embeddings
  once, at the input: :class:`attnlab.encodings.randomized_tables.RandomizedSinusoidal`
  and :class:`~attnlab.encodings.randomized_tables.RandomizedLearned`;
* rotary (``NOISY_ROTARY``): queries and keys are turned by the same drawn
  positions, drawn in each attention layer independently:
  ``RandomizedPositions(Rotary(Dh), sample="positions")``;
* ALiBi (``NOISY_ALIBI``) and the relative encoding (``NOISY_RELATIVE``,
  Transformer-XL's) draw **distances**, not positions: sorted distinct
  ``d_1 < d_2 < ... < d_{L-1}`` from ``[1, L_max)``, and the offset ``j - i = +k``
  becomes ``+d_k``, ``-k`` becomes ``-d_k`` (``randomize_both_sides=False``, their
  default), per layer and call. Here: ``RandomizedPositions(ALiBi(H, causal=False,
  left_offset=0.5), sample="distances")`` (their bidirectional ALiBi adds 0.5
  times the slope to keys on the left, as ``ALiBi``'s ``left_offset`` does) and
  ``RandomizedPositions(ShawRelative(Dh), sample="distances")``, attnlab's learned
  relative encoding standing for Transformer-XL's. We follow the map their
  comments describe: in self-attention without a cache (``T == S``, the only
  case there) it is exactly their ALiBi's; their relative encoding indexes a
  table of positions ``0 .. L_max - 1`` at ``L_max +- d`` (JAX clamps the
  indices past its end), which we read as a slip, not as the method.

T5's bucketed bias and FIRE have no reference implementation; they take
``sample="positions"``: FIRE reads the query's absolute position (its
progressive interpolation divides by it), so only positions mean anything to
it, and T5 then sees offsets ``p_j - p_i`` of the drawn positions.
``sample="distances"`` needs a scheme that depends on positions only through
``k_pos - q_pos`` (``PositionScheme.relative``) and does not rotate.

One call, one draw. Attention calls a scheme's methods in a fixed order
(``MultiHeadAttention``): :meth:`~RandomizedPositions.rotate` first, then
:meth:`~RandomizedPositions.bias`, then, only when ``adds_value``,
:meth:`~RandomizedPositions.value_term`. So ``rotate`` always draws, and leaves
its draw pending; ``bias`` uses a draw pending from ``rotate`` (of the same
sizes and device) and otherwise draws its own; ``value_term`` uses the draw
``bias`` left pending. The method that ends the call (``bias`` without
``adds_value``, else ``value_term``) drops the pending draw, so the next call
draws anew, and a stale draw is never picked up by a later ``bias`` alone.
Thread safety: the pending draw is kept per thread (keyed by
:func:`threading.get_ident`), so concurrent forward passes through one module
(``nn.DataParallel`` replicas share their ``__dict__``) never see each other's
draws. :attr:`RandomizedPositions.last_draw` keeps the most recent draw of any
thread, for inspection and tests only; nothing reads it.

Positions from the data (``position_ids [B, T]``, ``key_position_ids [B, S]``:
left padding, Abacus indices). The draw is made as without them, once per call
for the whole batch, only long enough for the ids: ``n = max(L, p_max + 1)``
sorted positions, ``p_max`` the largest position id, and position id ``p`` reads
the draw's entry ``p`` (every row through the same draw, so equal ids get equal
drawn positions); with ``sample="distances"``, ``n - 1`` sorted distances,
``n = max(L, d_max + 1)`` with ``d_max`` the largest ``|k_id - q_id|``, and the
offset ``k_id - q_id = +-k`` reads ``+-d_k``. With ``position_ids = 0 .. L - 1``
this is exactly the draw without ids, from the same random numbers.

No cache. A new step cannot reuse cached keys turned or biased by another draw,
so the schemes set ``caches = False`` and refuse offsets other than 0; a model
then decodes by re-running the whole sequence at each step
(``SequenceModel._greedy`` in :mod:`attnlab.models.sequence_model` falls back to it).

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``L`` length,
``Dh`` head dim.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab._validate import check_choice, check_int
from attnlab.encodings.draws import MAX_RANGE, check_fits, sample_positions
from attnlab.encodings.positions import call_positions, pair_distances
from attnlab.encodings.scheme import PositionScheme, call_primitive, check_heads, check_rotated, check_term

__all__ = ["SAMPLES", "RandomizedPositions"]

#: what :class:`RandomizedPositions` draws: positions, or distances (relative schemes).
SAMPLES = ("positions", "distances")


@dataclass(frozen=True)
class _Draw:
    """One call's draw: ``n`` sorted positions, or ``[0, d_1, .., d_{n-1}]`` (distances), int64 ``[n]``."""

    T: int
    S: int
    device: torch.device
    raw: Tensor
    stage: str  # "rotated": drawn by rotate; "biased": bias has used it, value_term may


def _thread_key() -> int:
    """The key of this thread's pending draw; 0 in code torch.compile or torch.export traces.

    Dynamo cannot call :func:`threading.get_ident`; a compiled call is traced once and keeps no
    draw past its end (the method that ends a call drops it), so one key serves it.
    """
    return 0 if torch.compiler.is_compiling() else threading.get_ident()


_Ids = tuple[Tensor, Tensor] | None  # a call's position ids (queries [T]|[B, T], keys [S]|[B, S]), or None: 0 .. L - 1


class RandomizedPositions(PositionScheme):
    """A :class:`PositionScheme` at randomized positions or distances (Ruoss et al. 2023).

    Every call draws (module docstring): with ``sample="positions"`` a sorted
    subset ``p`` of ``L = max(T, S)`` distinct positions of ``[0, max_len)``, and
    the scheme runs at ``q_pos = p[:T]``, ``k_pos = p[:S]``; with
    ``sample="distances"`` sorted distinct ``d_1 < ... < d_{L-1}`` from
    ``[1, max_len)``, and the scheme runs at ``rel[i, j] = sign(j - i) d_{|j - i|}``
    (``d_0 = 0``) through ``bias_rel`` / ``value_term_rel``. With
    ``max_len == L`` both draws are forced to ``0 .. L - 1`` and the wrapper gives
    the plain scheme's numbers.

    Args:
        scheme: the :class:`PositionScheme` to randomize; it becomes a submodule,
            so its parameters train and are saved under ``scheme.``.
        max_len: the range ``L_max`` positions are drawn from; at least the
            longest sequence the model will see (test lengths included).
        sample: ``"positions"`` (rotary, T5, FIRE) or ``"distances"`` (ALiBi,
            Shaw, as the reference's ALiBi and relative encodings).

    Attributes:
        scheme: the wrapped scheme.
        max_len: ``L_max``.
        caches: False: cached decoding would mix draws (module docstring); ``draws_positions`` True.
        rotates, adds_score, adds_value, reads_keys, causal_only, shared_across_layers: the wrapped scheme's; no
            ``score_mod`` (a draw per call is not a function of the indices).
        last_draw: the most recent draw, int64 ``[L]`` positions or ``[L - 1]``
            distances (None before the first call); for inspection only.

    Raises:
        TypeError: if ``scheme`` is not a ``PositionScheme`` or ``max_len`` not an integer.
        ValueError: for ``max_len < 1`` or above 2**62, an unknown ``sample``, or
            ``sample="distances"`` with a scheme that is not ``relative`` or rotates.

    Example:
        >>> from attnlab.encodings.alibi import ALiBi
        >>> alibi = ALiBi(2, causal=False, left_offset=0.5)  # Ruoss et al.'s bidirectional ALiBi
        >>> rand = RandomizedPositions(alibi, max_len=100, sample="distances")
        >>> _ = torch.manual_seed(0)
        >>> bias = rand.bias(torch.zeros(1, 2, 3, 4), 3)  # [1, H, T, S]
        >>> rand.last_draw  # offset +-1 stands for distance 89, +-2 for 99
        tensor([89, 99])
        >>> bias[0, 0] / alibi.slopes[0]  # -d_k, and 0.5 closer on the left
        tensor([[  0.0000, -89.0000, -99.0000],
                [-88.5000,   0.0000, -89.0000],
                [-98.5000, -88.5000,   0.0000]])
        >>> torch.equal(RandomizedPositions(alibi, max_len=3, sample="distances").bias(torch.zeros(1, 2, 3, 4), 3),
        ...             alibi.bias(torch.zeros(1, 2, 3, 4), 3))  # max_len == L: the plain scheme
        True
    """

    caches = False
    draws_positions = True
    batched_positions = True  # per-row position ids index the draw (module docstring)
    max_len: int

    def __init__(self, scheme: PositionScheme, *, max_len: int, sample: str = "positions") -> None:
        super().__init__()
        if not isinstance(scheme, PositionScheme) or not (scheme.rotates or scheme.adds_score or scheme.adds_value):
            raise TypeError(
                f"scheme must be an attnlab.encodings.PositionScheme that uses positions (it rotates, or adds a "
                f"score or value term: Rotary, ALiBi, T5RelativeBias, ShawRelative, ...), got {type(scheme).__name__}"
            )
        self.max_len = check_int("max_len", max_len, minimum=1, maximum=MAX_RANGE)  # positions are int64
        self.sample = check_choice("sample", sample, SAMPLES)
        if self.sample == "distances":
            name = type(scheme).__name__
            if not scheme.relative:
                raise ValueError(f"sample='distances' needs a scheme that depends on positions only through "
                                 f"k_pos - q_pos (relative=True: ALiBi, T5RelativeBias, ShawRelative); "
                                 f"{name} is not: use sample='positions'")
            if scheme.rotates:
                raise ValueError(f"sample='distances' cannot rotate: {name} turns queries and keys by "
                                 f"their positions; use sample='positions'")
        self.scheme = scheme
        # What the wrapped scheme does, this one does (at drawn positions).
        self.rotates, self.adds_score = scheme.rotates, scheme.adds_score
        self.adds_value, self.reads_keys = bool(scheme.adds_value), scheme.reads_keys
        self.reads_mask = scheme.reads_mask
        self.causal_only = scheme.causal_only
        self.shared_across_layers = scheme.shared_across_layers  # one draw-wrapper, one table, for all layers
        self.last_draw: Tensor | None = None
        # The draw of the call in progress, per thread (module docstring).
        self._pending: dict[int, _Draw] = {}

    def extra_repr(self) -> str:
        """The constructor's arguments (the scheme is shown as a child), for ``repr``."""
        return f"max_len={self.max_len}, sample={self.sample!r}"

    # -- the draws ---------------------------------------------------------------------

    def _check_offsets(self, q_offset: int, k_offset: int) -> None:
        """Refuse the offsets of cached decoding: this scheme does not cache."""
        q_offset = check_int("q_offset", q_offset)
        k_offset = check_int("k_offset", k_offset)
        if q_offset or k_offset:
            raise ValueError(
                f"RandomizedPositions draws new positions at every call, so it cannot continue from a "
                f"key/value cache (got q_offset={q_offset}, k_offset={k_offset}); decode without a cache, "
                f"re-running the whole sequence (models do so when a module has caches=False)"
            )

    def _needed(self, ids: _Ids) -> int:
        """How long a draw the ids read: the largest position (or distance) they reach, plus one; 0 without ids."""
        if ids is None:
            return 0
        q_ids, k_ids = ids
        if self.sample == "positions":
            return int(torch.maximum(q_ids.max(), k_ids.max())) + 1 if q_ids.numel() and k_ids.numel() else 0
        rel = pair_distances(q_ids, k_ids)  # [T, S] or [B, T, S]
        return int(rel.abs().max()) + 1 if rel.numel() else 0

    def _new(self, T: int, S: int, device: torch.device, stage: str, need: int) -> _Draw:
        """Draw for ``T`` queries and ``S`` keys (at least ``need`` long); leave it pending for this thread."""
        L = max(T, S, need)
        check_fits(L, self.max_len, type(self).__name__)
        if self.sample == "positions":
            draw = raw = sample_positions(L, self.max_len, device=device)  # [L]
        else:
            # d_1 < ... < d_{L-1} from [1, max_len): a sorted subset of [0, max_len - 1), plus 1.
            draw = (sample_positions(L - 1, self.max_len - 1, device=device) + 1 if L > 1
                    else torch.zeros(0, dtype=torch.long, device=device))  # [L - 1]
            raw = torch.cat([draw.new_zeros(1), draw])  # [L]: d_0 = 0, then d_k for offset k
        self.last_draw = draw
        pending = _Draw(T, S, device, raw, stage)
        self._pending[_thread_key()] = pending
        return pending

    def _take(self, T: int, S: int, device: torch.device, stage: str, then: str | None, need: int) -> _Draw:
        """The pending draw if it was left at ``stage`` for these sizes, else a new one; leave it at ``then``."""
        key = _thread_key()
        pending = self._pending.get(key)
        if pending is not None and (pending.stage != stage or (pending.T, pending.S, pending.device) != (T, S, device)):
            pending = None  # another call's, or another stage's
        if pending is not None and torch.compiler.is_compiling():
            # Traced, a draw's length read from position ids is not known while tracing (a comparison would not
            # trace): the call's methods are given the same ids, so the draw is long enough; asserted.
            torch._check(pending.raw.shape[0] >= need, lambda: "RandomizedPositions: the pending draw is shorter "
                         "than the position ids of this call need (rotate and bias given other ids)")
        elif pending is not None and pending.raw.shape[0] < need:
            pending = None
        if pending is None:
            pending = self._new(T, S, device, stage, need)
        if then is None:
            self._pending.pop(key, None)
        else:
            self._pending[key] = _Draw(pending.T, pending.S, pending.device, pending.raw, then)
        return pending

    def _at(self, draw: _Draw, ids: _Ids) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """``(q_pos, k_pos, None)`` of a positions draw, ``(None, None, rel)`` of a distances draw, at the ids."""
        T, S, raw = draw.T, draw.S, draw.raw
        if self.sample == "positions":
            if ids is None:
                # One tensor for both when T == S: Rotary then computes one cos/sin table.
                L = raw.shape[0]
                return (raw if T == L else raw[:T]), (raw if S == L else raw[:S]), None  # [T], [S]
            q_ids, k_ids = ids
            q_pos = raw[q_ids]  # [T] or [B, T]: position id p reads the draw's entry p
            return q_pos, (q_pos if k_ids is q_ids else raw[k_ids]), None
        if ids is None:
            offset = torch.arange(S, device=raw.device)[None, :] - torch.arange(T, device=raw.device)[:, None]  # [T, S]
        else:
            offset = pair_distances(*ids)  # [T, S] or [B, T, S]
        return None, None, offset.sign() * raw[offset.abs()]  # +k -> +d_k, -k -> -d_k

    def _ids(self, batch: int, T: int, S: int, device: torch.device, position_ids: Tensor | None,
             key_position_ids: Tensor | None) -> _Ids:
        """The call's position ids, checked (None without them)."""
        if position_ids is None and key_position_ids is None:
            return None
        return call_positions(batch, T, S, device, position_ids=position_ids, key_position_ids=key_position_ids)

    # -- the protocol ------------------------------------------------------------------

    def rotate(self, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0,
               position_ids: Tensor | None = None, key_position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Draw for this call and rotate ``q [B, H, T, Dh]`` and ``k [B, H, S, Dh]`` at the drawn positions.

        Args:
            q: queries ``[B, H, T, Dh]``.
            k: keys ``[B, H, S, Dh]``, on ``q``'s device.
            q_offset: must be 0 (no cache).
            k_offset: must be 0 (no cache).
            position_ids: the queries' position ids ``[B, T]``, which index the draw (module docstring).
            key_position_ids: the keys' ``[B, S]`` (default: ``position_ids`` when ``S == T``).

        Returns:
            ``(q, k)`` as the wrapped scheme's ``rotate_at`` returns them (unchanged
            with ``sample="distances"``).

        Raises:
            TypeError / ValueError: for ``q``/``k`` that are not ``[B, H, L, Dh]``,
                non-zero offsets, bad position ids, or a draw longer than ``max_len``.
        """
        self._check_offsets(q_offset, k_offset)
        check_heads("q", q)
        check_heads("k", k)
        T, S = q.shape[2], k.shape[2]
        ids = self._ids(q.shape[0], T, S, q.device, position_ids, key_position_ids)
        draw = self._new(T, S, q.device, "rotated", self._needed(ids))
        q_pos, k_pos, _ = self._at(draw, ids)
        if q_pos is None or k_pos is None:
            return q, k  # distances: the scheme does not rotate (checked in __init__)
        turned = call_primitive(self.scheme, self.scheme.rotate_at, q, k, q_pos=q_pos, k_pos=k_pos)
        return check_rotated(self.scheme, turned, q, k)

    def bias(self, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0, k: Tensor | None = None,
             position_ids: Tensor | None = None, key_position_ids: Tensor | None = None,
             mask: Tensor | None = None) -> Tensor | None:
        """The wrapped scheme's score term at this call's draw (``rotate``'s, or a new one).

        Args:
            q: queries ``[B, H, T, Dh]``.
            n_keys: number of keys ``S``.
            q_offset: must be 0 (no cache).
            k_offset: must be 0 (no cache).
            k: the keys ``[B, H, S, Dh]``, passed on to schemes that set ``reads_keys``.
            position_ids: the queries' position ids ``[B, T]``, which index the draw (module docstring).
            key_position_ids: the keys' ``[B, S]`` (default: ``position_ids`` when ``S == T``).
            mask: boolean, broadcastable to ``[B, H, T, S]``, passed on to schemes that set ``reads_mask``.

        Returns:
            None or a tensor broadcastable to ``[B, H, T, S]``, as the scheme's
            ``bias_at`` (positions) or ``bias_rel`` (distances) returns.

        Raises:
            TypeError / ValueError: for ``q`` that is not ``[B, H, T, Dh]``, a
                negative ``n_keys``, non-zero offsets, bad position ids, or a draw longer than ``max_len``.
        """
        self._check_offsets(q_offset, k_offset)
        check_heads("q", q)
        n_keys = check_int("n_keys", n_keys, minimum=0)
        T = q.shape[2]
        ids = self._ids(q.shape[0], T, n_keys, q.device, position_ids, key_position_ids)
        draw = self._take(T, n_keys, q.device, "rotated", "biased" if self.adds_value else None, self._needed(ids))
        q_pos, k_pos, rel = self._at(draw, ids)
        if rel is not None:
            term = call_primitive(self.scheme, self.scheme.bias_rel, q, rel=rel, k=k)
        else:
            assert q_pos is not None and k_pos is not None
            extra = {"mask": mask} if self.scheme.reads_mask else {}
            term = call_primitive(self.scheme, self.scheme.bias_at, q, q_pos=q_pos, k_pos=k_pos, k=k, **extra)
        return check_term(self.scheme, "bias_rel" if rel is not None else "bias_at", term,
                          (q.shape[0], q.shape[1], T, n_keys), "[B, H, T, S]")

    def value_term(self, weights: Tensor, *, q_offset: int = 0, k_offset: int = 0,
                   position_ids: Tensor | None = None, key_position_ids: Tensor | None = None,
                   value_width: int | None = None) -> Tensor | None:
        """The wrapped scheme's output term at the draw ``bias`` used in this call (or a new one).

        Args:
            weights: post-softmax weights ``[B, H, T, S]``.
            q_offset: must be 0 (no cache).
            k_offset: must be 0 (no cache).
            position_ids: the queries' position ids ``[B, T]``, which index the draw (module docstring).
            key_position_ids: the keys' ``[B, S]`` (default: ``position_ids`` when ``S == T``).
            value_width: the values' width ``Dv`` the term must have (checked when given).

        Returns:
            None or ``[B, H, T, Dv]``, as the scheme's ``value_term_at`` /
            ``value_term_rel`` returns.

        Raises:
            TypeError / ValueError: for ``weights`` that is not a floating
                ``[B, H, T, S]``, non-zero offsets, bad position ids, or a draw longer than ``max_len``.
        """
        self._check_offsets(q_offset, k_offset)
        if not isinstance(weights, Tensor) or not weights.is_floating_point():
            raise TypeError(f"weights must be a floating-point tensor [B, H, T, S], got "
                            f"{getattr(weights, 'dtype', type(weights).__name__)}")
        if weights.ndim != 4:
            raise ValueError(f"weights must be [B, H, T, S] (4 dims), got shape {list(weights.shape)}")
        B, _, T, S = weights.shape
        ids = self._ids(B, T, S, weights.device, position_ids, key_position_ids)
        draw = self._take(T, S, weights.device, "biased", None, self._needed(ids))
        q_pos, k_pos, rel = self._at(draw, ids)
        if rel is not None:
            term = call_primitive(self.scheme, self.scheme.value_term_rel, weights, rel=rel)
        else:
            assert q_pos is not None and k_pos is not None
            term = call_primitive(self.scheme, self.scheme.value_term_at, weights, q_pos=q_pos, k_pos=k_pos)
        return check_term(self.scheme, "value_term_rel" if rel is not None else "value_term_at", term,
                          (B, weights.shape[1], T, value_width), "[B, H, T, Dv]")
