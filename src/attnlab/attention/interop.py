"""Copying ``torch.nn.MultiheadAttention`` into attnlab's :class:`~attnlab.attention.MultiHeadAttention`.

torch keeps one ``in_proj_weight [3 D, D]`` with rows q | k | v and heads
contiguous, the layout attnlab's ``in_proj`` has with ``n_kv_heads == n_heads``,
so the copy is row for row. torch's masks use the opposite polarity (True =
masked): convert with :func:`attnlab.attention.masks.from_torch_mask`, or pass a
key-padding mask as ``key_padding_mask=`` as it is.

Shape notation: ``D`` model dim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import torch
from torch import nn

if TYPE_CHECKING:
    from attnlab.attention.multihead import MultiHeadAttention

__all__ = ["from_torch_module"]

M = TypeVar("M", bound="MultiHeadAttention")


def from_torch_module(cls: type[M], mha: nn.MultiheadAttention) -> M:
    """A ``cls`` (``MultiHeadAttention`` or a subclass) with ``mha``'s weights: same outputs, to 1e-5.

    Args:
        cls: the class to build.
        mha: the ``nn.MultiheadAttention`` to copy (any device and dtype; batch-first or not).

    Returns:
        A new ``cls(mha.num_heads, D, dropout=mha.dropout, bias=...)`` on ``mha``'s device and dtype.

    Raises:
        TypeError: if ``mha`` is not an ``nn.MultiheadAttention``.
        ValueError: for features attnlab does not model (``kdim``/``vdim`` different
            from ``embed_dim``, ``add_bias_kv``, ``add_zero_attn``).
    """
    if not isinstance(mha, nn.MultiheadAttention):
        raise TypeError(f"from_torch expects an nn.MultiheadAttention, got {type(mha).__name__}")
    if not mha._qkv_same_embed_dim:
        raise ValueError(f"kdim/vdim ({mha.kdim}, {mha.vdim}) different from embed_dim ({mha.embed_dim})")
    if mha.bias_k is not None or mha.add_zero_attn:
        raise ValueError("add_bias_kv and add_zero_attn are not supported")
    has_bias = mha.in_proj_bias is not None or mha.out_proj.bias is not None
    ours = cls(mha.num_heads, mha.embed_dim, dropout=mha.dropout, bias=has_bias)
    ours.to(device=mha.in_proj_weight.device, dtype=mha.in_proj_weight.dtype)
    out = mha.out_proj
    with torch.no_grad():
        for mine, weight, bias in ((ours.in_proj, mha.in_proj_weight, mha.in_proj_bias),
                                   (ours.linear_out, out.weight, out.bias)):
            mine.weight.copy_(weight)
            if mine.bias is not None:  # torch keeps both biases or neither; a missing one is zero
                mine.bias.copy_(bias if bias is not None else torch.zeros_like(mine.bias))
    return ours
