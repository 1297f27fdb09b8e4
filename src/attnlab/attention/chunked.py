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

Memory. A chunk holds ``[B, H, C, S]`` scores; ``C`` is chosen so that is about
:data:`CHUNK_ELEMENTS` numbers (16 MiB in float32), whatever the length. With
gradients, each chunk runs under activation checkpointing
(``torch.utils.checkpoint``, non-reentrant): the forward pass keeps only the
chunk's inputs (views of ``q``, ``k``, ``v``) and output, and the backward pass
recomputes one chunk's scores at a time. Peak memory is then ``O(L * C)``, not
``O(L^2)``, in the forward and in the backward pass, at the price of computing
the scores twice. Dropout masks are recomputed identically (checkpointing
restores the RNG state).

What it needs from the scheme: honesty about offsets (``caches`` True: the
term for rows ``c0 ..`` is the full term's rows). Randomized schemes draw new
positions on every call and refuse offsets, so they always take the dense
path; they are trained on short sequences, where it fits.

Shape notation: ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads, ``T``
queries, ``S`` keys, ``C`` queries per chunk, ``Dh`` head dim, ``Dv`` value width.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from attnlab._validate import check_int
from attnlab.attention.functional import attend_unchecked, repeat_kv_heads
from attnlab.encodings.attention_position import AttentionPosition

__all__ = ["CHUNK_ELEMENTS", "chunk_rows", "chunked_attend"]

# Scores per chunk, B * H * C * S: 2**22 numbers, 16 MiB in float32. Small enough that a
# chunk's scores, weights and their gradients stay well below the size of q, k and v
# themselves at long lengths; large enough that the per-chunk overhead (a scheme call,
# a kernel launch) is amortised over thousands of scores per query row.
CHUNK_ELEMENTS = 2**22


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
        >>> chunk_rows(1, 8, 16384)  # 32 queries x 16384 keys x 8 heads = 2**22
        32
    """
    batch = check_int("batch", batch, minimum=1)
    heads = check_int("heads", heads, minimum=1)
    n_keys = check_int("n_keys", n_keys, minimum=1)
    budget = check_int("budget", budget, minimum=1)
    return max(1, budget // (batch * heads * n_keys))


def _rows(t: Tensor | None, start: int, stop: int, n_rows: int) -> Tensor | None:
    """Rows ``start:stop`` of a mask or bias broadcastable to ``[B, H, T, S]`` (whole if it broadcasts over T)."""
    if t is None or t.dim() < 2 or t.shape[-2] != n_rows or n_rows == 1:
        return t
    return t[..., start:stop, :]  # [.., C, S]


def chunked_attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    position: AttentionPosition,
    q_offset: int = 0,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    chunk_size: int | None = None,
) -> Tensor:
    """``attend`` with ``position``'s score and value terms, ``C`` queries at a time.

    Computes what attention with the scheme computes in one pass (the keys at
    positions ``0 .. S - 1``, the queries at ``q_offset .. q_offset + T - 1``, as
    in self-attention with a cache): for each chunk of query rows the scheme's
    ``bias`` at those rows, the user's ``bias`` and ``mask`` rows, the causal
    rows, then the fused kernel (or, when the scheme ``needs_weights``, the
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

    Returns:
        ``out [B, H, T, Dv]``.

    Raises:
        ValueError: for a scheme that draws new positions per call (``caches`` False)
            or a ``chunk_size`` below 1.

    Example:
        >>> from attnlab.encodings import ALiBi
        >>> q = k = v = torch.randn(1, 2, 10, 4)  # [B, H, L, Dh]
        >>> out = chunked_attend(q, k, v, position=ALiBi(2), is_causal=True, chunk_size=3)
        >>> full, _ = attend_unchecked(q, k, v, mask=None, bias=ALiBi(2).bias(q, 10), dropout_p=0.0,
        ...                            scale=None, need_weights=False, is_causal=True)
        >>> torch.allclose(out, full, atol=1e-6)
        True
    """
    if not getattr(position, "caches", True):
        raise ValueError(
            f"{type(position).__name__} draws new positions at every call, so its rows cannot be asked for "
            "one chunk at a time; it takes the dense path (position=..., backend='dense')"
        )
    B, H, T, _ = query.shape
    S = key.shape[-2]
    rows = chunk_rows(max(B, 1), H, max(S, 1)) if chunk_size is None else check_int("chunk_size", chunk_size, minimum=1)
    needs_keys = bool(getattr(position, "needs_keys", False))
    needs_weights = bool(getattr(position, "needs_weights", False))

    def one_chunk(q_c: Tensor, k: Tensor, v: Tensor, start: int) -> Tensor:
        """Rows ``start .. start + C - 1``: ``q_c [B, H, C, Dh]`` -> ``[B, H, C, Dv]``."""
        C = q_c.shape[-2]
        if needs_keys:  # CoPE counts positions with gates from the keys, one key per query head
            term = position.bias(q_c, S, q_offset=q_offset + start, k_offset=0,  # type: ignore[call-arg]
                                 k=repeat_kv_heads(k, H))
        else:
            term = position.bias(q_c, S, q_offset=q_offset + start, k_offset=0)  # [B|1, H, C, S] or None
        user = _rows(bias, start, start + C, T)
        if user is not None:
            term = user if term is None else term + user.to(term.dtype)
        m = _rows(mask, start, start + C, T)
        if is_causal:
            # Bottom-right alignment of the whole call: query t sees keys <= S - T + t.
            last = torch.arange(start, start + C, device=q_c.device) + (S - T)  # [C]
            causal = torch.arange(S, device=q_c.device)[None, :] <= last[:, None]  # [C, S]
            m = causal if m is None else m.to(q_c.device) & causal
        out, weights = attend_unchecked(
            q_c, k, v, mask=m, bias=term, dropout_p=dropout_p, scale=scale,
            need_weights=needs_weights, is_causal=False,
        )  # out [B, H, C, Dv], weights [B, H, C, S] or None
        if needs_weights and weights is not None:
            extra = position.value_term(weights, q_offset=q_offset + start, k_offset=0)  # [B, H, C, Dv] or None
            if extra is not None:
                out = out + extra.to(out.dtype)
        return out

    # Recompute each chunk in the backward pass instead of keeping its scores, whenever
    # autograd records (inputs or the scheme's parameters need gradients).
    recording = torch.is_grad_enabled() and (
        query.requires_grad or key.requires_grad or value.requires_grad
        or any(p.requires_grad for p in position.parameters())
    )
    run: Callable[..., Tensor] = one_chunk
    if recording:
        def run(q_c: Tensor, k: Tensor, v: Tensor, start: int) -> Tensor:
            return checkpoint(one_chunk, q_c, k, v, start, use_reentrant=False)
    outs = [run(query[..., s : s + rows, :], key, value, s) for s in range(0, T, rows)]  # each [B, H, C, Dv]
    if not outs:
        return query.new_zeros(*query.shape[:-1], value.shape[-1])  # [B, H, 0, Dv]
    return torch.cat(outs, dim=-2)  # [B, H, T, Dv]
