"""Multi-head attention as the textbook writes it: the baselines the benchmarks time against.

Two formulations, for the benchmarks only (attnlab does not import this file):

* :class:`TextbookMHA`: the labs' structure with the Transformer's narrow heads.
  A Python list of single-head modules, each with its own query, key and value
  ``nn.Linear(D, Dh)`` (``Dh = D / H``), an explicit ``softmax(q k^T / sqrt(Dh)) v``
  per head, the heads' contexts concatenated and projected by ``linear_out``.
  :meth:`TextbookMHA.from_attnlab` copies an attnlab ``MultiHeadAttention``'s
  weights into it, so the two can be checked against each other before timing.
* :func:`explicit_attention`: every head at once, materialising the scores and
  the weights ``[B, H, T, S]`` (what the fused kernels avoid); the long-sequence
  scaling benchmark puts the same projections around it.

Shapes: B batch, T queries, S keys, D model dim, H heads, Dh = D / H.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TextbookHead(nn.Module):
    """One narrow head: its own q, k, v projections ``D -> Dh`` and an explicit softmax."""

    def __init__(self, d_model: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.linear_query = nn.Linear(d_model, head_dim)
        self.linear_key = nn.Linear(d_model, head_dim)
        self.linear_value = nn.Linear(d_model, head_dim)

    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        q = self.linear_query(query)  # [B, T, Dh]
        k = self.linear_key(key)  # [B, S, Dh]
        v = self.linear_value(value)  # [B, S, Dh]
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # [B, T, S]
        return torch.softmax(scores, dim=-1) @ v  # [B, T, Dh]


class TextbookMHA(nn.Module):
    """A loop over :class:`TextbookHead`, concatenation, then ``linear_out`` (``H * Dh -> D``)."""

    def __init__(self, n_heads: int, d_model: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        head_dim = d_model // n_heads
        self.heads = nn.ModuleList(TextbookHead(d_model, head_dim) for _ in range(n_heads))
        self.linear_out = nn.Linear(n_heads * head_dim, d_model)

    def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        return self.linear_out(torch.cat([head(query, key, value) for head in self.heads], dim=-1))

    @classmethod
    def from_attnlab(cls, mha: nn.Module) -> TextbookMHA:
        """A copy of attnlab ``MultiHeadAttention``'s weights (narrow heads, projected values).

        attnlab packs every head's projections into ``in_proj`` ``[3 * H * Dh, D]``,
        rows ``q_head0 .. q_headH-1 | k_head0 .. | v_head0 ..``.
        """
        H, D, Dh = mha.n_heads, mha.d_model, mha.head_dim
        if Dh * H != D or mha.input_dim != D or not mha.proj_values:
            raise ValueError("from_attnlab needs narrow heads (head_dim = d_model / n_heads) and projected values")
        ours = cls(H, D)
        inner = H * Dh
        w, b = mha.in_proj.weight, mha.in_proj.bias
        with torch.no_grad():
            for h, head in enumerate(ours.heads):
                for j, linear in enumerate((head.linear_query, head.linear_key, head.linear_value)):
                    rows = slice(j * inner + h * Dh, j * inner + (h + 1) * Dh)
                    linear.weight.copy_(w[rows])
                    linear.bias.copy_(b[rows])
            ours.linear_out.weight.copy_(mha.linear_out.weight)
            ours.linear_out.bias.copy_(mha.linear_out.bias)
        return ours


def explicit_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``softmax(q k^T / sqrt(Dh)) v`` for every head at once, ``q, k, v [B, H, L, Dh] -> [B, H, T, Dh]``.

    Memory for forward + backward: the weights ``[B, H, T, S]`` are kept for the
    backward pass, and while softmax's backward runs the weights, their gradient
    and the scores' gradient are alive together: three ``[B, H, T, S]`` buffers at
    the peak (the scores themselves are freed once softmax has read them, because
    the scale is applied to ``q`` rather than to the scores).
    """
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)  # [B, H, T, S]
    return torch.softmax(scores, dim=-1) @ v  # [B, H, T, Dh]


EXPLICIT_PEAK_BUFFERS = 3  # [B, H, T, S] float buffers alive at once in explicit_attention's fwd + bwd
