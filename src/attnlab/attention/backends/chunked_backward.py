"""Gradients of chunked attention without keeping any chunk's scores: FlashAttention-2's backward in torch ops.

The forward pass keeps, per query row, one number: the log of its softmax
denominator, ``lse_i = log sum_j exp(s_ij)``. The backward pass walks the
chunks again and, per chunk, rebuilds the scores ``s`` (same plan, same
numbers), the weights ``p = exp(s - lse)`` without another softmax, and then
(Dao 2023, arXiv:2307.08691, Algorithm 2)::

    dV += p^T dO                    dP = dO V^T  (+ the value term's gradient)
    dS  = p * (dP - rowsum(p * dP))
    dQ  = dS K * scale              dK += dS^T Q * scale

``rowsum(p * dP)`` is ``rowsum(dO * O)`` (the output is kept for it), since
the output is linear in the weights, a value term included. The scheme's own
parameters (T5's table, KERPLE's, FIRE's MLP, Shaw's vectors) and any input
its term reads (Shaw's and CoPE's queries, CoPE's keys) get their
gradients by running autograd on the chunk's term alone with ``dS`` as its
output gradient; for a scheme read from a per-distance table, ``dS`` is
first summed into the table along the anti-diagonals the chunk read
(:func:`~.chunk_kernels.hankel_add_`; one ``[H, T + S - 1]`` gradient for the
whole call) and autograd runs once at the end.

Per chunk the passes are few (:mod:`.chunk_kernels`): ``-lse`` is written with
the term into the scores buffer and the matmul adds ``q k^T * scale`` to it;
``exp`` in place (no floor pass where the table carries one); ``dV`` and ``dK``
accumulate inside their matmuls; ``-rowsum`` is written into the ``dP`` buffer
and the matmul adds ``dO V^T``; ``dS = p * dP`` in place.

Compared with checkpointing each chunk (the earlier way): the chunk's forward is
not run twice in the backward pass, and its large tensors live in two
buffers allocated once per call (:class:`attnlab.attention.backends.chunk_kernels.Workspace`)
instead of the autograd graph of a whole chunk per step, which glibc's
allocator did not hand back (6.9 GB at L=16384 with ALiBi).

Dropout is not served here (its mask would have to be drawn again identically);
``chunked_attend`` keeps checkpointing for training with dropout.

Shape notation: ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads, ``T``
queries, ``S`` keys, ``C`` rows per chunk, ``n`` keys the chunk sees, ``Dh``
head dim, ``Dv`` value width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable

from attnlab.attention.backends.chunk_kernels import (
    Workspace,
    grouped_addmm_,
    grouped_addmm_t_,
    grouped_matmul,
    softmax_rows,
    weights_at,
)
from attnlab.attention.backends.chunk_plan import ChunkPlan, compute_dtype

__all__ = ["ChunkedAttention", "attend_chunks"]


class ChunkedAttention(torch.autograd.Function):
    """``softmax(q k^T * scale + term + bias) v (+ value term)`` chunk by chunk, with the backward pass above.

    Called as ``ChunkedAttention.apply(plan, query, key, value, bias, *params)``:
    ``query [B, H, T, Dh]``, ``key [B, Hkv, S, Dh]``, ``value [B, Hkv, S, Dv]``
    (same ``B``), ``bias`` the plan's user bias (or None) and ``params`` the
    scheme's parameters, passed so that autograd returns their gradients.
    Returns ``out [B, H, T, Dv]``.
    """

    @staticmethod
    def forward(ctx: FunctionCtx, plan: ChunkPlan, query: Tensor, key: Tensor, value: Tensor,
                bias: Tensor | None, *params: Tensor) -> Tensor:
        """``query [B, H, T, Dh]``, ``key [B, Hkv, S, Dh]``, ``value [B, Hkv, S, Dv]`` -> ``out [B, H, T, Dv]``."""
        out, lse = attend_chunks(plan, query, key, value)  # [B, H, T, Dv], [B, H, T, 1]
        ctx.plan = plan  # type: ignore[attr-defined]
        assert lse is not None  # want_lse
        ctx.save_for_backward(query, key, value, out, lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_out: Tensor) -> tuple[Tensor | None, ...]:
        """``d_out [B, H, T, Dv]`` -> the gradients of ``query``, ``key``, ``value``, ``bias`` and ``params``."""
        plan: ChunkPlan = ctx.plan
        query, key, value, out, lse = ctx.saved_tensors
        need_q, need_k, need_v, need_bias = ctx.needs_input_grad[1:5]
        params = list(plan.position.parameters())  # the Function's inputs after bias, in this order
        compute = lse.dtype
        k_all, v_all = key.to(compute).contiguous(), value.to(compute)  # contiguous: [B * Hkv] matmul batches
        B, H = query.shape[:2]
        dq = torch.zeros_like(query, dtype=compute)  # [B, H, T, Dh]
        dk = key.new_zeros(key.shape, dtype=compute)  # [B, Hkv, S, Dh]
        dv = value.new_zeros(value.shape, dtype=compute)  # [B, Hkv, S, Dv]
        d_bias, bias_dtype = None, compute
        if need_bias and plan.bias is not None:
            d_bias, bias_dtype = torch.zeros_like(plan.bias, dtype=compute), plan.bias.dtype
        d_params = _ParameterGradients(params)
        terms = _TermGradients(plan, query, key, d_params, need_q=need_q, need_k=need_k)
        work = plan.workspace(B, compute, query.device)
        for start, stop, n in plan.chunks():
            C = stop - start
            q_c = plan.rows_of(query, start, stop).to(compute)  # [B, H, C, Dh], the chunk's row order
            k_n, v_n = k_all[..., :n, :], v_all[..., :n, :]  # [B, Hkv, n, Dh], [B, Hkv, n, Dv]
            term = terms.value(q_c, start, n)  # [B|1, H, C, n] or None
            lse_c = plan.rows_of(lse, start, stop)  # [B, H, C, 1]
            shifted, mask = plan.scores(q_c, k_n, term, start, work.get("scores", B, H, C, n), lse=lse_c)
            p = weights_at(shifted, mask, floored=plan.floored)  # the forward's weights, recomputed in place
            do = plan.rows_of(d_out, start, stop).to(compute)  # [B, H, C, Dv]
            if mask.empty is not None:
                do = do.masked_fill(mask.empty, 0.0)  # their output was zeroed: nothing flows back through them
            grouped_addmm_t_(dv[..., :n, :], p, do)  # dv += p^T dO, inside the matmul: [B, Hkv, n, Dv]
            # rowsum(p * dP) = rowsum(dO * O): O is linear in p (p V plus a value term that sums
            # weights times vectors), so the [C, n] product is never formed; it is subtracted
            # inside dP's matmul (written first, added to), not in a pass of its own.
            row = (do * plan.rows_of(out, start, stop).to(compute)).sum(dim=-1, keepdim=True)  # [B, H, C, 1]
            dp = work.get("dp", B, H, C, n)
            dp.copy_(row.neg().expand_as(dp))
            grouped_addmm_(dp, do, v_n.transpose(-2, -1))  # dO V^T - rowsum: [B, H, C, n]
            if plan.adds_value:
                _value_term_backward(plan, p, do, start, d_params, dp)
            ds = p.mul_(dp)  # [B, H, C, n], in place of the weights
            plan.put_rows(dq, start, stop, grouped_matmul(ds, k_n).mul_(plan.scale))  # [B, H, C, Dh]
            grouped_addmm_t_(dk[..., :n, :], ds, q_c, alpha=plan.scale)  # dk += ds^T q * scale
            terms.backward(q_c, start, n, ds, dq, dk, scratch=work)
            if d_bias is not None:
                _add_bias_gradient(plan, d_bias, ds, start, stop, n)
        terms.finish()
        return (None, dq.to(query.dtype) if need_q else None, dk.to(key.dtype) if need_k else None,
                dv.to(value.dtype) if need_v else None, None if d_bias is None else d_bias.to(bias_dtype),
                *d_params.result())

def attend_chunks(plan: ChunkPlan, query: Tensor, key: Tensor, value: Tensor, *,
                  want_lse: bool = True) -> tuple[Tensor, Tensor | None]:
    """The forward pass, chunk by chunk, with in-place softmax: ``out [B, H, T, Dv]`` and ``lse [B, H, T, 1]``.

    ``want_lse=False`` (inference) skips ``lse`` (None), one pass per chunk fewer.

    ``query [B, H, T, Dh]``, ``key [B, Hkv, S, Dh]``, ``value [B, Hkv, S, Dv]``; no
    autograd history is recorded (call it under ``torch.no_grad()`` or from a Function).
    """
    B, H, T, _ = query.shape
    compute = compute_dtype(query.dtype)
    k_all, v_all = key.to(compute).contiguous(), value.to(compute)  # contiguous: [B * Hkv] matmul batches
    out = query.new_zeros(B, H, T, value.shape[-1])  # [B, H, T, Dv]
    lse = torch.zeros(B, H, T, 1, dtype=compute, device=query.device) if want_lse else None  # [B, H, T, 1]
    table = plan.table(query)  # [H, T + S - 1] or None
    if table is not None:
        table = plan.score_table(table, query, key)  # the backward pass asks with the same tensors
    work = plan.workspace(B, compute, query.device)
    for start, stop, n in plan.chunks():
        C = stop - start
        q_c = plan.rows_of(query, start, stop).to(compute)  # [B, H, C, Dh], the chunk's row order
        term = plan.scheme_rows(q_c, key, start, n, table=table)  # [B|1, H, C, n] or None
        scores, mask = plan.scores(q_c, k_all[..., :n, :], term, start, work.get("scores", B, H, C, n))
        # The weights, in place of the scores.
        p, lse_c = softmax_rows(scores, mask, want_lse=want_lse, floored=plan.floored)
        o = grouped_matmul(p, v_all[..., :n, :])  # [B, H, C, n] x [B, Hkv, n, Dv] -> [B, H, C, Dv]
        if plan.adds_value:
            extra = plan.value_rows(p, start, value_width=v_all.shape[-1])  # [B, H, C, Dv] or None
            if extra is not None:
                o += extra.to(o.dtype)  # [B, H, C, Dv]
        if mask.empty is not None:
            o.masked_fill_(mask.empty, 0.0)
        plan.put_rows(out, start, stop, o)
        if lse is not None and lse_c is not None:
            plan.put_rows(lse, start, stop, lse_c)
    return out, lse


class _ParameterGradients:
    """The scheme's parameters' gradients, summed over the chunks: one slot per parameter."""

    def __init__(self, params: Sequence[Tensor]) -> None:
        self.params = list(params)
        self.sums: list[Tensor | None] = [None] * len(self.params)
        self.index = [i for i, p in enumerate(self.params) if p.requires_grad]

    @property
    def trainable(self) -> list[Tensor]:
        """The parameters that take a gradient, in the order :meth:`add` expects."""
        return [self.params[i] for i in self.index]

    def add(self, grads: Sequence[Tensor | None]) -> None:
        """Add one gradient (or None: nothing flowed) per :attr:`trainable` parameter."""
        for i, g in zip(self.index, grads, strict=True):
            if g is not None:
                total = self.sums[i]
                self.sums[i] = g if total is None else total + g

    def result(self) -> list[Tensor | None]:
        """The sums, in each parameter's dtype; None where nothing flowed."""
        return [None if g is None else g.to(p.dtype) for g, p in zip(self.sums, self.params, strict=True)]


class _TermGradients:
    """The scheme's term in the backward pass: its value per chunk, and the gradients that flow through it."""

    def __init__(self, plan: ChunkPlan, query: Tensor, key: Tensor, d_params: _ParameterGradients, *,
                 need_q: bool, need_k: bool) -> None:
        self.plan, self.key, self.d_params = plan, key, d_params
        self.need_q, self.need_k = need_q, need_k
        self.table: Tensor | None = None  # [H, T + S - 1], with autograd history to the parameters
        self.scores_table: Tensor | None = None  # what the scores read (ChunkPlan.score_table)
        self.d_table: Tensor | None = None  # its gradient, summed over the chunks
        if plan.by_distance:
            with torch.enable_grad():
                self.table = plan.table(query)
            if self.table is not None:
                self.scores_table = plan.score_table(self.table, query, key)
            if self.table is not None and self.table.requires_grad:
                self.d_table = torch.zeros_like(self.table, dtype=compute_dtype(query.dtype))

    def value(self, q_c: Tensor, start: int, n: int) -> Tensor | None:
        """The term at the chunk, without history (for the scores); a distance scheme's read from its table."""
        return self.plan.scheme_rows(q_c, self.key, start, n, table=self.scores_table)

    def backward(self, q_c: Tensor, start: int, n: int, ds: Tensor, dq: Tensor, dk: Tensor, *,
                 scratch: Workspace) -> None:
        """Send ``ds [B, H, C, n]`` through the chunk's term: into ``dq``'s rows, ``dk`` and the parameters."""
        if self.table is not None:  # a distance scheme: only its table, read per chunk, has a gradient
            if self.d_table is not None:
                C = q_c.shape[-2]
                buffer = scratch.get("skew", ds.shape[1] * C * (n + C - 1))
                self.plan.add_table_rows(self.d_table, ds, start, start + C, scratch=buffer)
            return
        reads_q = self.need_q  # Shaw's and CoPE's terms read the queries; others leave them unused
        reads_k = self.need_k and self.plan.position.reads_keys
        trainable = self.d_params.trainable
        if not (reads_q or reads_k or trainable):
            return
        with torch.enable_grad():
            q_leaf = q_c.detach().requires_grad_(reads_q)
            k_leaf = self.key.detach().requires_grad_(reads_k)
            term = self.plan.scheme_rows(q_leaf, k_leaf, start, n, table=None)
            if term is None or not term.requires_grad:
                return
            leaves = [x for x in (q_leaf, k_leaf) if x.requires_grad]
            grads = torch.autograd.grad(term, leaves + trainable, ds.sum_to_size(term.shape).to(term.dtype),
                                        allow_unused=True)
        for leaf, g in zip(leaves, grads, strict=False):
            if g is None:
                continue
            if leaf is q_leaf:
                dq[..., start : start + q_c.shape[-2], :] += g
            else:
                dk += g
        self.d_params.add(grads[len(leaves):])

    def finish(self) -> None:
        """Send the distance table's summed gradient to the parameters (one autograd call for the whole call)."""
        if self.table is not None and self.d_table is not None:
            trainable = self.d_params.trainable
            self.d_params.add(torch.autograd.grad(self.table, trainable, self.d_table.to(self.table.dtype),
                                                  allow_unused=True))


def _value_term_backward(plan: ChunkPlan, p: Tensor, do: Tensor, start: int, d_params: _ParameterGradients,
                         dp: Tensor) -> None:
    """The value term's share: its gradient into ``dp [B, H, C, n]`` (in place) and into ``d_params``."""
    trainable = d_params.trainable
    with torch.enable_grad():
        p_leaf = p.detach().requires_grad_(True)
        extra = plan.value_rows(p_leaf, start, value_width=do.shape[-1])  # [B, H, C, Dv] or None
        if extra is None:
            return
        grads = torch.autograd.grad(extra, [p_leaf, *trainable], do.to(extra.dtype), allow_unused=True)
    if grads[0] is not None:
        dp += grads[0].to(dp.dtype)
    d_params.add(grads[1:])


def _add_bias_gradient(plan: ChunkPlan, d_bias: Tensor, ds: Tensor, start: int, stop: int, n: int) -> None:
    """Add ``ds [B, H, C, n]`` (the chunk's row order) into the user bias's gradient at the chunk's rows and keys."""
    target = plan.user_rows_of(d_bias, start, stop, n)
    if plan.reversed_rows:
        ds = ds.flip(-2)
    target += ds.sum_to_size(target.shape)
