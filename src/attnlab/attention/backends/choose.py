"""Which path attention with a positional scheme takes: dense, FlexAttention or chunked.

Attention without positions, or with a rotation (rotary, xPos), runs in torch's
fused kernel, whose memory grows linearly with the length. A scheme that adds a
term to the scores or the output has three ways to run:

* ``"dense"``: the term as a ``[B|1, H, T, S]`` tensor, then the fused kernel with
  it as a float mask (or the explicit softmax when the weights are needed).
  Fastest for short sequences; ``O(L^2)`` memory.
* ``"flex"``: the scheme's ``score_mod`` inside compiled FlexAttention
  (:mod:`attnlab.attention.backends.flex`): ``O(L)`` memory, a compile per shape family.
* ``"chunked"``: the queries a chunk at a time (:mod:`attnlab.attention.backends.chunked`):
  ``O(L * C)`` memory, forward and backward, for every scheme that is honest
  about offsets, Shaw's value term and CoPE included.

The rule of ``backend="auto"`` (:func:`choose_backend`), in order:

1. no scheme, or one that only rotates (nothing to add): dense (already fused);
2. the weights are wanted (``need_weights``, ``record_attention``), or the scheme
   draws positions per call (``draws_positions``, the randomized ones): dense;
3. on the CPU (:func:`dense_fits`): dense while ``T * S`` is at most the
   crossover in time, :data:`DENSE_SCORES` (``2**16``, 256 x 256) on one thread
   and :data:`DENSE_SCORES_THREADED` (``2**22``, 2048 x 2048) on more, **and**
   the ``[B, H, T, S]`` scores the dense path holds, :func:`dense_bytes`
   (``B * H * T * S`` times the compute dtype's size), fit ``memory_budget``
   (:data:`DENSE_MEMORY_BUDGET`, 1 GiB by default: a constant, never the
   machine's free memory, so the path, and the numbers, do not depend on what
   else runs); otherwise chunked. Both paths' costs scale with ``B * H``, so the
   crossover is a count of scores per head. On one thread the chunked path is
   faster from 512 x 512 on; on two, every operation is a barrier of both
   threads, and the chunked path, with more and smaller operations, loses more
   to a descheduled thread, so dense stays faster up to 2048 x 2048 and B = 4,
   H = 8, L = 2048 (512 MiB of scores) is dense (``python
   benchmarks/bench_long_context.py --crossover``; BENCHMARKS.md, "Dense or
   chunked attention on the CPU");
4. on CUDA: dense up to ``T * S <= 2**20`` (a guess: not timed on a GPU); past it a
   scheme with a ``score_mod``, no dropout, no mask beyond causal and key padding,
   and positions that are the indices: flex;
5. otherwise chunked. On the CPU that is the rule at every length: torch 2.13
   has no FlexAttention backward there, and a compile per shape family costs
   seconds to tens of seconds for a forward pass no faster than the chunked
   one (``benchmarks/bench_long_context.py --flex``); ``backend="flex"``
   asks for it anyway, for inference.

Per-row positions (``position_ids [B, T]``: a left-padded batch, Abacus indices)
never take FlexAttention, not even when ``backend="flex"`` asks for it: they take
the chunked path instead. A score_mod reads the indices ``q_idx``/``kv_idx``; per
row it would have to look up each row's positions and a table of every distance
the rows reach, whose size changes from call to call (a recompile per call), for
the one use, generation from a padded batch, where the dense and chunked paths
already serve. The dense and chunked paths take per-row terms ``[B, H, T, S]``.

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head
dim, ``Dv`` value width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab import catalog
from attnlab._finite import bounded_pair
from attnlab._limits import ALWAYS_FITS, check_tensor, memory_budget
from attnlab._validate import check_choice, check_int
from attnlab.attention.functional import attend_unchecked, drop_unseen_keys, repeat_kv_heads
from attnlab.encodings.scheme import PositionScheme, bias_dtype

# The chunked and FlexAttention paths (four modules and torch's flex_attention) are imported where a call takes
# them: most models never reach a length where they would, and importing a model should not load them.

__all__ = ["BACKENDS", "CUDA_DENSE_SCORES", "DENSE_MEMORY_BUDGET", "DENSE_SCORES", "DENSE_SCORES_THREADED",
           "adds_terms", "attend_with_position", "check_dense_scores", "choose_backend", "dense_bytes", "dense_fits",
           "key_valid_of", "may_attend", "position_attend"]

BACKENDS = catalog.BACKENDS

# Scores per head past which the chunked path is faster than the dense one on the CPU, on one thread
# and on more (BENCHMARKS.md, "Dense or chunked attention on the CPU").
DENSE_SCORES = 2**16
DENSE_SCORES_THREADED = 2**22
# Bytes of the dense path's [B, H, T, S] scores that backend="auto" allows on the CPU: a fixed budget.
DENSE_MEMORY_BUDGET = 2**30
# On CUDA, the count FlexAttention takes over from (not timed on a GPU).
CUDA_DENSE_SCORES = 2**20


def dense_bytes(*, batch: int, heads: int, T: int, S: int, dtype: torch.dtype) -> int:
    """Bytes of the ``[B, H, T, S]`` scores the dense path holds at least once, in the compute dtype.

    The term broadcast to the batch once a mask is added, or the weights: ``B * H * T * S``
    times the size of the dtype scores are computed in (float32 for half-precision inputs).

    Example:
        >>> dense_bytes(batch=4, heads=8, T=2048, S=2048, dtype=torch.float32) // 2**20  # MiB
        512
    """
    return batch * heads * T * S * bias_dtype(dtype).itemsize


def dense_fits(*, batch: int, heads: int, T: int, S: int, dtype: torch.dtype, threads: int = 1,
               memory_budget: int = DENSE_MEMORY_BUDGET) -> bool:
    """The CPU rule of ``backend="auto"`` (module docstring, rule 3): True for the dense path, False for chunked.

    Args:
        batch, heads: ``B`` and ``H`` (query heads).
        T: queries; S: keys.
        dtype: the queries' dtype.
        threads: torch's intra-op threads (:func:`torch.get_num_threads`): the crossover differs.
        memory_budget: the most bytes of :func:`dense_bytes` allowed (:data:`DENSE_MEMORY_BUDGET`).

    Example:
        >>> dense_fits(batch=4, heads=8, T=256, S=256, dtype=torch.float32)  # one thread, at the crossover
        True
        >>> dense_fits(batch=1, heads=8, T=512, S=512, dtype=torch.float32)  # one thread, past it
        False
        >>> dense_fits(batch=4, heads=8, T=2048, S=2048, dtype=torch.float32, threads=2)  # 512 MiB
        True
        >>> dense_fits(batch=16, heads=8, T=1024, S=1024, dtype=torch.float32, threads=2)  # 512 MiB: fits
        True
        >>> dense_fits(batch=64, heads=8, T=1024, S=1024, dtype=torch.float32, threads=2)  # 2 GiB: over budget
        False
    """
    memory_budget = check_int("memory_budget", memory_budget, minimum=0)
    threads = check_int("threads", threads, minimum=1)
    crossover = DENSE_SCORES if threads == 1 else DENSE_SCORES_THREADED
    return T * S <= crossover and dense_bytes(batch=batch, heads=heads, T=T, S=S, dtype=dtype) <= memory_budget


# Past the budget above the dense path is not chosen; asked for by name, or the only path (weights wanted, positions
# drawn per call), its scores are checked against the memory the run has, before torch's allocator tries for
# tens of gigabytes and fails late. Sizes only, and not while torch.compile traces (a graph break there).
def check_dense_scores(*, backend: str, batch: int, heads: int, T: int, S: int, dtype: torch.dtype,
                       device: torch.device, chunked_serves: bool = True) -> None:
    """Refuse a dense call whose ``[B, H, T, S]`` scores (in :func:`bias_dtype` of ``dtype``) cannot fit.

    Args:
        backend: the ``backend`` the caller asked for, for the message.
        batch, heads: ``B`` and ``H`` (query heads).
        T: queries; S: keys.
        dtype: the queries' dtype.
        device: where the scores would be allocated (CUDA: its free memory counts).
        chunked_serves: the chunked path could serve the call (not when the weights are wanted or
            the scheme draws positions per call): the message suggests it, else a shorter length.

    Raises:
        ValueError: naming ``backend``, the length ``T x S``, the bytes and the memory available,
            and suggesting ``backend='chunked'`` (or ``'auto'``).
    """
    if torch.compiler.is_compiling():
        return
    n_bytes = dense_bytes(batch=batch, heads=heads, T=T, S=S, dtype=dtype)
    if n_bytes <= ALWAYS_FITS and memory_budget() is None:
        return
    compute = str(bias_dtype(dtype)).removeprefix("torch.")
    try:
        check_tensor({"B": batch, "H": heads, "T": T, "S": S}, f"the dense path's {compute} scores",
                     itemsize=bias_dtype(dtype).itemsize, device=device)
    except ValueError as err:
        way_out = ("use backend='chunked', whose memory grows as L (or backend='auto', which takes it when the "
                   "scores do not fit)") if chunked_serves else \
            ("only the dense path serves this call (it returns the weights, or its scheme draws positions at "
             "every call): use shorter sequences or a smaller batch")
        raise ValueError(f"backend={backend!r} at length L = {T} queries x {S} keys: {err}; {way_out}") from None


def adds_terms(position: PositionScheme | None) -> bool:
    """Whether ``position`` declares a term added to the scores or the outputs (rather than only rotating).

    Example:
        >>> from attnlab.encodings import ALiBi, Rotary
        >>> adds_terms(ALiBi(2)), adds_terms(Rotary(8)), adds_terms(None)
        (True, False, False)
    """
    return position is not None and bool(position.adds_score or position.adds_value)


def key_valid_of(mask: Tensor | None, T: int) -> Tensor | None | bool:
    """A mask ``[B|1, 1, 1|T, S]`` that only masks keys, as ``key_valid [B|1, S]``; False if it is more.

    Returns None for no mask, the key-validity rows for a key-padding mask
    (the same for every query and head), and False for any other mask (which
    FlexAttention could take only as an ``O(T * S)`` tensor).
    """
    if mask is None:
        return None
    if mask.dim() != 4 or mask.shape[1] != 1 or (mask.shape[2] != 1 and T != 1):
        return False
    return mask[:, 0, 0, :]  # [B|1, S]


def choose_backend(
    backend: str,
    *,
    position: PositionScheme | None,
    T: int,
    S: int,
    need_weights: bool,
    device: torch.device,
    backward: bool,
    dropout_p: float,
    flex_mask_ok: bool,
    per_row: bool = False,
    batch: int = 1,
    heads: int = 1,
    dtype: torch.dtype = torch.float32,
    memory_budget: int = DENSE_MEMORY_BUDGET,
    threads: int | None = None,
) -> str:
    """The path a call takes: ``"dense"``, ``"flex"`` or ``"chunked"`` (the rule in the module docstring).

    Args:
        backend: ``"auto"``, or a path to force.
        position: the scheme (None: no positions).
        T: queries; S: keys.
        need_weights: the weights are wanted (only the dense path returns them).
        device: where the call runs.
        backward: autograd records this call.
        dropout_p: dropout on the weights (FlexAttention has none).
        flex_mask_ok: the mask is at most causal plus key padding.
        per_row: the positions are per row (``position_ids``): never flex, which falls back to chunked.
        batch, heads, dtype: ``B``, ``H`` and the queries' dtype, for :func:`dense_bytes` (CPU rule).
        memory_budget: bytes the dense path's scores may take on the CPU (:data:`DENSE_MEMORY_BUDGET`).
        threads: intra-op threads for the CPU rule (None: :func:`torch.get_num_threads`).

    Returns:
        The path's name.

    Raises:
        ValueError: for an unknown ``backend``, or a forced path that cannot serve
            the call (naming why).
    """
    backend = check_choice("backend", backend, BACKENDS)
    if backend == "dense" or not adds_terms(position):
        return "dense"
    assert position is not None
    draws = position.draws_positions
    if backend == "auto":
        if need_weights or draws:
            return "dense"
        if device.type != "cuda":
            if threads is None:
                # Traced, the count cannot be read (dynamo cannot call torch.get_num_threads), and a compiled
                # graph keeps its path when it changes: the rule takes the threaded crossover.
                threads = 2 if torch.compiler.is_compiling() else torch.get_num_threads()
            fits = dense_fits(batch=batch, heads=heads, T=T, S=S, dtype=dtype, memory_budget=memory_budget,
                              threads=threads)
            return "dense" if fits else "chunked"
        if T * S <= CUDA_DENSE_SCORES:
            return "dense"
        if device.type == "cuda" and position.has_score_mod and dropout_p == 0.0 and flex_mask_ok and not per_row:
            return "flex"
        return "chunked"
    if backend == "flex" and per_row and not (need_weights or draws):
        return "chunked"  # per-row positions have no score_mod (module docstring): the same numbers, chunked
    name = type(position).__name__
    if need_weights:
        raise ValueError(f"backend={backend!r} does not return attention weights; use backend='dense' for them")
    if draws:
        raise ValueError(f"backend={backend!r} cannot serve {name}, which draws new positions at every call; "
                         "use backend='dense'")
    if backend == "flex":
        why = None
        if not position.has_score_mod:
            why = f"{name} has no score_mod"
        elif not _flex_supported(device, backward=backward):
            why = f"torch {torch.__version__} has no FlexAttention backward on {device.type}"
        elif dropout_p:
            why = "FlexAttention has no attention dropout"
        elif not flex_mask_ok:
            why = "the mask is more than causal and key padding"
        if why:
            raise ValueError(f"backend='flex' cannot serve this call: {why}; use backend='chunked'")
    return backend


def position_attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    position: PositionScheme,
    backend: str,
    q_offset: int,
    mask: Tensor | None,
    bias: Tensor | None,
    is_causal: bool,
    scale: float | None,
    dropout_p: float,
    position_ids: Tensor | None = None,
    key_position_ids: Tensor | None = None,
) -> Tensor:
    """Attention with ``position``'s terms on the ``"flex"`` or ``"chunked"`` path; ``out [B, H, T, Dv]``.

    Args:
        query: ``[B, H, T, Dh]``, already rotated; key ``[B, H|Hkv, S, Dh]``; value ``[B, H|Hkv, S, Dv]``.
        position: the scheme, its keys at ``0 .. S - 1`` and queries from ``q_offset``.
        backend: ``"flex"`` or ``"chunked"`` (from :func:`choose_backend`).
        q_offset: position of the first query.
        mask: boolean, True = may attend, broadcastable to ``[B, H, T, S]``.
        bias: an additive float term (chunked path only), or None.
        is_causal: the causal mask aligned bottom-right.
        scale: multiplier of ``q @ k^T`` (default ``1 / sqrt(Dh)``).
        dropout_p: dropout on the weights (chunked path only).
        position_ids: the queries' per-row positions ``[B, T]`` (chunked path only), replacing ``q_offset``.
        key_position_ids: the keys' ``[B, S]`` (default: ``position_ids`` when ``S == T``).

    Returns:
        ``[B, H, T, Dv]``.

    Raises:
        ValueError: for ``"flex"`` with a ``bias`` or position ids, or a path other than the two.
    """
    if backend == "chunked":
        from attnlab.attention.backends.chunked import chunked_attend

        return chunked_attend(query, key, value, position=position, q_offset=q_offset, mask=mask, bias=bias,
                              is_causal=is_causal, scale=scale, dropout_p=dropout_p, position_ids=position_ids,
                              key_position_ids=key_position_ids)
    if backend != "flex":
        raise ValueError(f"position_attend serves backend 'flex' or 'chunked', got backend={backend!r}")
    if position_ids is not None or key_position_ids is not None:
        raise ValueError("backend='flex' takes the positions of the indices only; per-row position_ids need "
                         "'chunked' (choose_backend falls back to it)")
    if bias is not None:
        raise ValueError("backend='flex' takes the scheme's score_mod only; an additive bias= needs 'chunked'")
    T = query.shape[-2]
    key_valid = key_valid_of(mask, T)
    if key_valid is False:
        raise ValueError("backend='flex' takes causal and key-padding masks only; use backend='chunked'")
    valid = None if key_valid is None or key_valid is True else key_valid.expand(query.shape[0], -1)  # [B, S]

    def score_mod(Tp: int, Sp: int):  # type: ignore[no-untyped-def]
        padded = F.pad(query, (0, 0, 0, Tp - T))  # [B, H, Tp, Dh]: the padded rows are masked out
        return position.score_mod(padded, Sp, q_offset=q_offset, k_offset=0)

    from attnlab.attention.backends.flex import flex_attend

    return flex_attend(query, key, value, score_mod=score_mod, is_causal=is_causal, key_valid=valid, scale=scale)


def may_attend(mask: Tensor | None, T: int, S: int, *, is_causal: bool, device: torch.device) -> Tensor | None:
    """Which keys each query may attend to: ``mask`` and the bottom-right causal mask, or None for every key.

    What a scheme that :attr:`~attnlab.encodings.PositionScheme.reads_mask` is given (CoPE
    counts those keys only), as the chunked path gives it a chunk's rows.

    Args:
        mask: boolean, True = may attend, broadcastable to ``[B, H, T, S]``, or None.
        T: queries; S: keys.
        is_causal: add the causal mask, query ``t`` seeing keys ``<= S - T + t``.
        device: where the causal mask is made.

    Returns:
        Boolean, broadcastable to ``[B, H, T, S]``, or None.
    """
    if not is_causal:
        return mask
    causal = torch.ones(T, S, dtype=torch.bool, device=device).tril(S - T)  # [T, S]
    return causal if mask is None else mask.to(device) & causal


def attend_with_position(
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    *,
    position: PositionScheme | None,
    backend: str,
    q_offset: int,
    mask: Tensor | None,
    bias: Tensor | None,
    is_causal: bool,
    scale: float | None,
    dropout_p: float,
    need_weights: bool,
    position_ids: Tensor | None = None,
    key_position_ids: Tensor | None = None,
    memory_budget: int = DENSE_MEMORY_BUDGET,
) -> tuple[Tensor, Tensor | None]:
    """Self-attention's core with a scheme: the path :func:`choose_backend` picks, then the scheme's terms.

    What ``MultiHeadAttention`` calls once ``q``, ``keys`` and ``values`` are projected
    and rotated: the dense path (the scheme's ``bias`` as a tensor, the fused kernel
    or the explicit softmax, the ``value_term``) or an ``O(L)`` one.

    Args:
        q: ``[B, H, T, Dh]``; keys: ``[B, H|Hkv, S, Dh]``; values: ``[B, H|Hkv, S, Dv]``.
        position: the scheme, or None (then this is :func:`attnlab.attention.attend`).
        backend: ``"auto"``, ``"dense"``, ``"flex"`` or ``"chunked"``.
        q_offset: position of the first query (the keys start at 0).
        mask: boolean, True = may attend, broadcastable to ``[B, H, T, S]``, or None.
        bias: the caller's additive float term, or None.
        is_causal: the causal mask aligned bottom-right.
        scale: multiplier of ``q @ k^T`` (None: ``1 / sqrt(Dh)``).
        dropout_p: dropout on the weights (0.0 in evaluation).
        need_weights: return the weights ``[B, H, T, S]`` (the dense path).
        position_ids: the queries' per-row positions ``[B, T]``, replacing ``q_offset`` (None: the indices).
        key_position_ids: the keys' ``[B, S]`` (default: ``position_ids`` when ``S == T``).
        memory_budget: bytes ``backend="auto"`` lets the dense path's scores take on the CPU.

    Returns:
        ``(out [B, H, T, Dv], weights [B, H, T, S] or None)``.

    Raises:
        ValueError: for a forced ``backend`` that cannot serve the call (see :func:`choose_backend`), or
            dense scores ``[B, H, T, S]`` that cannot fit in memory (:func:`check_dense_scores`).
    """
    B, H, T, S = q.shape[0], q.shape[1], q.shape[2], keys.shape[2]
    backward = torch.is_grad_enabled() and any(t.requires_grad for t in (q, keys, values))
    per_row = position_ids is not None or key_position_ids is not None
    path = choose_backend(backend, position=position, T=T, S=S, need_weights=need_weights, device=q.device,
                          backward=backward, dropout_p=dropout_p,
                          flex_mask_ok=bias is None and key_valid_of(mask, T) is not False, per_row=per_row,
                          batch=B, heads=H, dtype=q.dtype, memory_budget=memory_budget)
    if path != "dense":
        # The chunked and FlexAttention paths guard their inputs themselves, once, as below.
        assert position is not None
        out = position_attend(q, keys, values, position=position, backend=path, q_offset=q_offset, mask=mask,
                              bias=bias, is_causal=is_causal, scale=scale, dropout_p=dropout_p,
                              position_ids=position_ids, key_position_ids=key_position_ids)
        return out, None
    if adds_terms(position) or bias is not None or need_weights:
        # The scores are formed as a [B, H, T, S] tensor here: refused by name if they cannot fit.
        draws = position is not None and position.draws_positions
        check_dense_scores(backend=backend, batch=B, heads=H, T=T, S=S, dtype=q.dtype, device=q.device,
                           chunked_serves=not (need_weights or draws))
    if adds_terms(position):
        # Before the scheme reads them (CoPE's gates, Shaw's q . a): hidden keys have no effect, and the
        # scores cannot overflow before the term is added (attnlab._finite); attend_unchecked is told (guarded).
        if mask is not None:
            keys, values = drop_unseen_keys(keys, values, mask)
        q, keys = bounded_pair(q, keys, 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    value_term = False
    ids = {"position_ids": position_ids, "key_position_ids": key_position_ids} if per_row else {}
    if position is not None:
        # CoPE reads the keys (positions counted from q . k), one key per query head, and the mask.
        k = repeat_kv_heads(keys, H) if position.reads_keys else None
        extra = {"mask": may_attend(mask, T, S, is_causal=is_causal, device=q.device)} if position.reads_mask else {}
        term = position.bias(q, S, q_offset=q_offset, k_offset=0, k=k, **ids, **extra)  # [B|1, H|1, T, S] or None
        if term is not None:
            bias = term if bias is None else term + bias.to(term.device)
        value_term = bool(position.adds_value)
    out, weights = attend_unchecked(q, keys, values, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p,
                                    need_weights=need_weights or value_term, is_causal=is_causal,
                                    guarded=adds_terms(position))
    if value_term and weights is not None and position is not None:
        values_term = position.value_term(weights, q_offset=q_offset, k_offset=0, value_width=values.shape[-1],
                                          **ids)  # [B, H, T, Dv] (Shaw's)
        if values_term is not None:
            out = out + values_term.to(out.dtype)
    return out, weights


def _flex_supported(device: torch.device, *, backward: bool) -> bool:
    """:func:`attnlab.attention.backends.flex.flex_supported`, importing FlexAttention's module only when asked."""
    from attnlab.attention.backends.flex import flex_supported

    return flex_supported(device, backward=backward)
