"""Attention with a positional scheme in query chunks: memory linear in the length.

A scheme that adds a term to the scores (ALiBi, T5's buckets, Shaw's key term,
FIRE, KERPLE, CoPE) costs the fused kernel its advantage: the term is a tensor
``[B|1, H, T, S]``, 1 GB for eight heads at ``L = 4096`` and 17 GB at 16384.
Shaw's value term needs the weights themselves. Here the queries are taken
``C`` at a time: for rows ``c0 .. c0 + C - 1`` the scheme is asked for its term
at those rows only (``q_offset = c0``: the protocol's offsets, which cached
decoding already relies on), attention runs on the chunk, and the chunks'
outputs are concatenated. Each row's softmax sees every key, so the result is
the full computation's, not an approximation: only the order of the work
changes.

Memory. A chunk holds ``[B, H, C, n]`` scores (``n`` keys: under the causal
mask a chunk skips the keys none of its rows can see, half the work of a causal
call). ``C`` is chosen so that is at most twice the size of the queries for a
scheme read from its distance table (half of it for a scheme asked for its rows,
which builds temporaries of that size itself), between 2**20 and
:data:`CHUNK_ELEMENTS` numbers (4 to 64 MiB in float32), and those tensors live
in buffers allocated once per call. Large chunks because on the CPU
the cost of a chunk is its few large operations (the matmuls, the softmax) plus a
fixed cost per operation, the matmuls are more efficient with more rows, and the
keys' and values' gradients are read and written once per chunk: at ``C = 32``
that traffic (``n x Dh`` per chunk, twice) was as large as the scores' own.
With gradients, the forward pass keeps one number per query row (its softmax's log-denominator) and the
backward pass rebuilds each chunk's weights from it
(:mod:`attnlab.attention.backends.chunked_backward`, FlashAttention-2's backward in torch
ops). Peak memory is ``O(L * C)``, not ``O(L^2)``, in both passes. Training with
dropout instead runs each chunk under activation checkpointing
(``torch.utils.checkpoint``), which draws the same dropout masks again.

A scheme that is a function of the distance alone (ALiBi, T5, KERPLE) is
evaluated once per distance and read per chunk as a strided view of that table, the
causal mask built into it (:mod:`attnlab.attention.backends.chunk_plan`,
:mod:`attnlab.attention.backends.chunk_kernels`); the others are asked for their rows.

What it needs from the scheme: honesty about offsets (positions not drawn per call: the
term for rows ``c0 ..`` is the full term's rows). Per-row positions (``position_ids
[B, T]``) are cut into chunks too: the chunk's rows of them and the keys' it sees. Randomized schemes draw new
positions on every call and refuse offsets, so they always take the dense
path; they are trained on short sequences, where it fits.

Shape notation: ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads, ``T``
queries, ``S`` keys, ``C`` queries per chunk, ``Dh`` head dim, ``Dv`` value width.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from attnlab._finite import bounded_pair
from attnlab._validate import check_int
from attnlab.attention.backends.chunk_plan import ChunkPlan, default_scale
from attnlab.attention.backends.chunked_backward import ChunkedAttention, attend_chunks
from attnlab.attention.functional import attend_unchecked, drop_unseen_keys
from attnlab.encodings.scheme import PositionScheme, call_positions

__all__ = ["CHUNK_ELEMENTS", "chunk_rows", "chunked_attend"]

# Scores per chunk, B * H * C * S, at most: 2**24 numbers, 64 MiB in float32 (128 rows of 16384
# keys and 8 heads). The rule in chunked_attend keeps a chunk at most twice the queries' size, so
# the peak memory stays within 2x of attention without positions (benchmarks/bench_long_context.py);
# large enough that the per-chunk costs (an operation's fixed cost, the keys' gradient traffic,
# a matmul's efficiency at few rows) are amortised over 128 rows.
CHUNK_ELEMENTS = 2**24


def chunk_rows(batch: int, heads: int, n_keys: int, *, budget: int = CHUNK_ELEMENTS) -> int:
    """Queries per chunk so that a chunk's scores ``[B, H, C, S]`` hold about ``budget`` numbers.

    Args:
        batch: ``B``.
        heads: ``H`` (query heads).
        n_keys: ``S``.
        budget: numbers per chunk, :data:`CHUNK_ELEMENTS` by default.

    Returns:
        ``C = max(1, budget // (B * H * S))``.

    Raises:
        TypeError / ValueError: for non-integer or non-positive sizes.

    Example:
        >>> chunk_rows(1, 8, 16384)  # 128 queries x 16384 keys x 8 heads = 2**24
        128
    """
    batch = check_int("batch", batch, minimum=1)
    heads = check_int("heads", heads, minimum=1)
    n_keys = check_int("n_keys", n_keys, minimum=1)
    budget = check_int("budget", budget, minimum=1)
    return max(1, budget // (batch * heads * n_keys))


def chunked_attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    position: PositionScheme,
    q_offset: int = 0,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    chunk_size: int | None = None,
    position_ids: Tensor | None = None,
    key_position_ids: Tensor | None = None,
) -> Tensor:
    """``attend`` with ``position``'s score and value terms, ``C`` queries at a time.

    Computes what attention with the scheme computes in one pass (the keys at
    positions ``0 .. S - 1``, the queries at ``q_offset .. q_offset + T - 1``, as
    in self-attention with a cache): for each chunk of query rows the scheme's
    ``bias`` at those rows, the user's ``bias`` and ``mask`` rows, the causal
    rows, then the fused kernel (or, when the scheme ``adds_value``, the
    explicit softmax and the scheme's ``value_term``).

    Args:
        query: ``[B, H, T, Dh]``, already turned by any rotation.
        key: ``[B, H|Hkv, S, Dh]``, likewise.
        value: ``[B, H|Hkv, S, Dv]``.
        position: the scheme; it must be honest about offsets (``caches``).
        q_offset: position of the first query (the number of cached steps).
        mask: boolean, True = may attend, broadcastable to ``[B, H, T, S]``.
        bias: an additive float term broadcastable to ``[B, H, T, S]``, added to the scheme's.
        is_causal: the causal mask aligned bottom-right, as :func:`attnlab.attention.attend`'s.
        scale: multiplier of ``q @ k^T``; ``1 / sqrt(Dh)`` by default.
        dropout_p: dropout on the weights (0.0 in evaluation).
        chunk_size: queries per chunk ``C``; :func:`chunk_rows` by default.
        position_ids: the queries' per-row positions ``[B, T]``, replacing ``q_offset``
            (a left-padded batch, Abacus indices).
        key_position_ids: the keys' ``[B, S]`` (default: ``position_ids`` when ``S == T``).

    Returns:
        ``out [B, H, T, Dv]``.

    Raises:
        ValueError: for a scheme that draws new positions per call (``caches`` False),
            a ``chunk_size`` below 1, or position ids of the wrong shape.

    Example:
        >>> from attnlab.encodings import ALiBi
        >>> q = k = v = torch.randn(1, 2, 10, 4)  # [B, H, L, Dh]
        >>> out = chunked_attend(q, k, v, position=ALiBi(2), is_causal=True, chunk_size=3)
        >>> full, _ = attend_unchecked(q, k, v, mask=None, bias=ALiBi(2).bias(q, 10), dropout_p=0.0,
        ...                            scale=None, need_weights=False, is_causal=True)
        >>> torch.allclose(out, full, atol=1e-6)
        True
    """
    if position.draws_positions:
        raise ValueError(
            f"{type(position).__name__} draws new positions at every call, so its rows cannot be asked for "
            "one chunk at a time; it takes the dense path (position=..., backend='dense')"
        )
    B, H, T, Dh = query.shape
    S = key.shape[-2]
    if mask is not None:
        key, value = drop_unseen_keys(key, value, mask)  # as attend: a hidden key has no effect
    query, key = bounded_pair(query, key, default_scale(Dh, scale))  # as attend with a term: no overflow
    if S == 0 or T == 0:  # nothing to cut into chunks; attend's own rules for empty calls
        return attend_unchecked(query, key, value, mask=mask, bias=bias, dropout_p=dropout_p, scale=scale,
                                need_weights=False, is_causal=is_causal)[0]
    rows = None if chunk_size is None else check_int("chunk_size", chunk_size, minimum=1)
    q_pos = k_pos = None  # per-row positions, [B|1, T] and [B|1, S] (None: the indices)
    if position_ids is not None or key_position_ids is not None:
        q_pos, k_pos = call_positions(B, T, S, query.device, q_offset=q_offset, position_ids=position_ids,
                                      key_position_ids=key_position_ids)
        q_pos, k_pos = q_pos.reshape(-1, T), k_pos.reshape(-1, S)  # [B|1, T], [B|1, S]: a chunk's rows are columns
    plan = ChunkPlan(position=position, n_heads=H, n_queries=T, n_keys=S, q_offset=q_offset, rows=rows or 1,
                     scale=default_scale(Dh, scale), is_causal=is_causal, mask=mask, bias=bias,
                     q_pos=q_pos, k_pos=k_pos, reverse=dropout_p == 0.0)
    if rows is None:
        # A chunk's scores at most twice the size of the queries (between 2**20 numbers and the budget)
        # where they are read from a table: two per-chunk buffers, within the O(L) tensors attention keeps
        # anyway. A scheme asked for its rows builds its own temporaries of that size (Shaw's, CoPE's,
        # several): half the queries' size for those.
        share = 2 * query.numel() if plan.reversed_rows else query.numel() // 2
        plan.rows = chunk_rows(B, H, S, budget=min(CHUNK_ELEMENTS, max(2**20, share)))
    params = list(position.parameters())
    recording = torch.is_grad_enabled() and (
        query.requires_grad or key.requires_grad or value.requires_grad
        or (bias is not None and bias.requires_grad) or any(p.requires_grad for p in params)
    )
    if dropout_p == 0.0 and key.shape[0] != B:
        # Keys shared across the batch: one [B * Hkv] batch for the chunks' matmuls (O(L) memory, once per
        # call); with gradients, the expand's backward sums them.
        key, value = key.expand(B, -1, -1, -1), value.expand(B, -1, -1, -1)
    if recording and dropout_p == 0.0:
        out: Tensor = ChunkedAttention.apply(plan, query, key, value, bias, *params)
        return out  # [B, H, T, Dv]
    if dropout_p == 0.0:
        # Without autograd: the same chunk loop as the forward pass above, its [B, H, C, n] tensors
        # in buffers allocated once. (SDPA per chunk is ~15% faster but allocates its own per chunk;
        # their sizes grow with n under the causal mask, and the peak varied fourfold between runs.)
        with torch.no_grad():
            return attend_chunks(plan, query, key, value, want_lse=False)[0]  # [B, H, T, Dv]
    run: Callable[[int, int, int], Tensor] = partial(_chunk_forward, plan, query, key, value, dropout_p,
                                                     plan.table(query))
    if recording:
        # Dropout's masks cannot be drawn again in a hand-written backward pass: each chunk runs under
        # checkpointing instead, which restores the RNG state when it recomputes the chunk.
        def run(start: int, stop: int, n: int) -> Tensor:
            return checkpoint(_chunk_forward, plan, query, key, value, dropout_p, plan.table(query), start, stop, n,
                              use_reentrant=False)
    outs = [run(start, stop, n) for start, stop, n in plan.chunks()]  # each [B, H, C, Dv]
    return torch.cat(outs, dim=-2)  # [B, H, T, Dv]


def _chunk_forward(plan: ChunkPlan, query: Tensor, key: Tensor, value: Tensor, dropout_p: float,
                   table: Tensor | None, start: int, stop: int, n: int) -> Tensor:
    """Rows ``start .. stop - 1`` through attend (with dropout), ``[B, H, C, Dv]``; checkpointed when training."""
    q_c = query[..., start:stop, :]  # [B, H, C, Dh]
    term = plan.scheme_rows(q_c, key, start, n, table=table)  # [B|1, H, C, n] or None
    user = plan.user_rows(start, stop, n)
    if user is not None:
        term = user if term is None else term + user.to(term.dtype)
    out, weights = attend_unchecked(
        q_c, key[..., :n, :], value[..., :n, :], mask=plan.mask_rows(start, stop, n, query.device), bias=term,
        dropout_p=dropout_p, scale=plan.scale, need_weights=plan.adds_value, is_causal=False,
    )  # out [B, H, C, Dv], weights [B, H, C, n] or None
    if weights is not None:
        extra = plan.value_rows(weights, start, value_width=value.shape[-1])  # [B, H, C, Dv] or None
        if extra is not None:
            out = out + extra.to(out.dtype)
    return out
