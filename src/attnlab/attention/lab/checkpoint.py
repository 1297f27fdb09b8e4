"""Loading the labs' checkpoints: their per-head attention modules into attnlab's fused projection.

The positional-encoding lab builds multi-head attention as a list of single-head
``Attention`` modules and loops over them, so under each multi-head module its
``state_dict`` holds ``linear_out.{weight,bias}`` and, for every head ``h``::

    attn_heads.{h}.linear_query.weight  [D, F]      attn_heads.{h}.linear_query.bias  [D]
    attn_heads.{h}.linear_key.weight    [D, F]      attn_heads.{h}.linear_key.bias    [D]
    attn_heads.{h}.linear_value.weight  [D, F]      attn_heads.{h}.linear_value.bias  [D]

attnlab's :class:`attnlab.attention.MultiHeadAttention` stacks them into one
``in_proj`` of ``3 * H * Dh`` rows, queries first, then keys, then values, the
heads in order inside each block (``q_0 .. q_{H-1} | k_0 .. k_{H-1} | v_0 .. v_{H-1}``:
the order its constructor packs the lab's own draws into, so a seeded model and a
converted checkpoint agree), and keeps ``linear_out`` under the same name.

:func:`fuse_lab_heads` is a ``load_state_dict`` pre-hook that rewrites the lab's
keys into that layout. :class:`attnlab.attention.LabMultiHeadAttention` registers it
on itself, so it, the labs' layers (:class:`attnlab.models.EncoderSelfAttn`,
:class:`attnlab.models.DecoderSelfAttn`) and the models built on them take either
layout in ``load_state_dict``; a state dict in neither still gets torch's usual
report of missing and unexpected keys.

Shape notation: ``H`` heads, ``D`` model dim, ``Dh`` head dim (``D`` in the lab), ``F`` input features.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab.attention.multihead import MultiHeadAttention

__all__ = ["fuse_lab_heads", "lab_head_keys"]

# The lab's per-head projections, in the order of in_proj's row blocks.
_PROJECTIONS = ("linear_query", "linear_key", "linear_value")


def lab_head_keys(n_heads: int, kind: str, prefix: str = "") -> list[str]:
    """The lab's keys of one kind (``"weight"`` or ``"bias"``) in ``in_proj``'s row order.

    Queries of heads ``0 .. H-1``, then keys, then values: concatenated along the
    rows, these tensors are ``in_proj.weight`` ``[3 * H * Dh, F]`` (or its bias).

    Raises:
        ValueError: for a ``kind`` other than ``"weight"`` and ``"bias"``.

    Example:
        >>> lab_head_keys(2, "bias")[:3]
        ['attn_heads.0.linear_query.bias', 'attn_heads.1.linear_query.bias', 'attn_heads.0.linear_key.bias']
    """
    if kind not in ("weight", "bias"):
        raise ValueError(f"kind must be 'weight' or 'bias', got {kind!r}")
    return [f"{prefix}attn_heads.{h}.{projection}.{kind}" for projection in _PROJECTIONS for h in range(n_heads)]


def fuse_lab_heads(
    module: nn.Module,
    state_dict: dict[str, Any],
    prefix: str,
    local_metadata: dict[str, Any],
    strict: bool,
    missing_keys: list[str],
    unexpected_keys: list[str],
    error_msgs: list[str],
) -> None:
    """Load pre-hook: the lab's per-head keys under ``prefix`` become ``in_proj.weight`` / ``in_proj.bias``.

    Register it with ``mha.register_load_state_dict_pre_hook(fuse_lab_heads)``.
    It acts only when the state dict has no ``in_proj`` of its own and holds the
    lab's six keys for exactly the module's ``H`` heads, each weight ``[Dh, F]``;
    otherwise it leaves the keys alone, so torch reports them as it always does
    (a checkpoint with other sizes then gets torch's size-mismatch message for
    ``in_proj``). The caller's dictionary is not changed: ``load_state_dict``
    hands the hook its own copy. The other arguments are torch's, unused.

    Raises:
        TypeError: if registered on something other than a ``MultiHeadAttention``.
    """
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"fuse_lab_heads is a hook for MultiHeadAttention, got {type(module).__name__}")
    if prefix + "in_proj.weight" in state_dict or prefix + "in_proj.bias" in state_dict:
        return  # attnlab's own layout
    head_prefix = prefix + "attn_heads."
    found = {key for key in state_dict if key.startswith(head_prefix)}
    weights, biases = lab_head_keys(module.n_heads, "weight", prefix), lab_head_keys(module.n_heads, "bias", prefix)
    if not found or found != set(weights) | set(biases):
        return  # not the lab's layout, or another number of heads
    if not all(isinstance(state_dict[key], Tensor) for key in weights + biases):
        return
    widths = {state_dict[key].shape[1] if state_dict[key].dim() == 2 else -1 for key in weights}
    if len(widths) != 1 or -1 in widths or any(state_dict[key].dim() != 1 for key in biases):
        return  # not [Dh, F] weights and [Dh] biases of one width: they cannot be stacked, torch reports the keys
    state_dict[prefix + "in_proj.weight"] = torch.cat([state_dict.pop(key) for key in weights])  # [3 * H * Dh, F]
    state_dict[prefix + "in_proj.bias"] = torch.cat([state_dict.pop(key) for key in biases])  # [3 * H * Dh]
