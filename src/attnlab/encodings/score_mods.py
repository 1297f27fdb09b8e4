"""Position schemes as FlexAttention ``score_mod``\\ s: a bias computed per score, never as ``[T, S]``.

torch's FlexAttention (``torch.nn.attention.flex_attention``; He et al. 2024,
arXiv:2412.05496) takes a function ``score_mod(score, b, h, q_idx, kv_idx)`` and
applies it to each scaled score inside a fused, compiled kernel, so a positional
bias costs no ``[T, S]`` tensor. This module turns attnlab's bias schemes into
such functions. Each one captures only small tensors:

* a scheme that depends on the positions only through ``j - i`` and not on the
  queries' content (``by_distance``: ALiBi, T5's buckets, KERPLE) gets its
  score_mod from the protocol's base (:meth:`attnlab.encodings.PositionScheme.score_mod`,
  a lookup in :func:`attnlab.encodings.scheme.distance_table`);
* Shaw's key term depends on the query: ``q_i . w^K[clip(j - i)] / sqrt(Dh)``
  for the ``2k + 1`` clipped offsets, ``[B, H, T, 2k + 1]`` (:func:`shaw_score_mod`);
* FIRE reads the query's absolute position; its MLP runs inside the kernel on
  ``psi(|i - j|) / psi(max(L, i))`` (:func:`fire_score_mod`).

Positions follow the protocol: query ``q_idx`` sits at ``q_offset + q_idx`` and
key ``kv_idx`` at ``k_offset + kv_idx``. The functions index captured tensors
with ``q_idx``/``kv_idx``, which FlexAttention supports on CPU and CUDA (with
gradients to the captured tensors on CUDA; torch 2.13 has no FlexAttention
backward on the CPU, where :mod:`attnlab.attention.backends.chunked` serves training).

Shape notation: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` head dim.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from attnlab.encodings.scheme import ScoreMod, bias_dtype


class _ShawLike(Protocol):
    """What :func:`shaw_score_mod` reads of a :class:`attnlab.encodings.ShawRelative`."""

    @property
    def rel_keys(self) -> Tensor: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def max_relative_position(self) -> int: ...


class _FireLike(Protocol):
    """What :func:`fire_score_mod` reads of a :class:`attnlab.encodings.FIRE`."""

    def psi(self, x: Tensor) -> Tensor: ...
    def normaliser(self, q_pos: Tensor) -> Tensor: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def causal(self) -> bool: ...
    @property
    def mlp(self) -> nn.Sequential: ...


__all__ = ["fire_score_mod", "shaw_score_mod"]


def shaw_score_mod(scheme: _ShawLike, q: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> ScoreMod:
    """Shaw et al.'s key term ``q_i . w^K[clip(j - i, -k, k) + k] / sqrt(Dh)`` as a score_mod.

    Args:
        scheme: the :class:`attnlab.encodings.ShawRelative` (its value term, if
            any, is not a score term: attention takes the chunked path for it).
        q: queries ``[B, H, T, Dh]`` (not rotated).
        q_offset: position of the first query.
        k_offset: position of the first key.

    Returns:
        ``score_mod`` adding ``logits[b, h, q_idx, clip(...)]`` from the captured
        ``logits = q @ w^K^T / sqrt(Dh)``, ``[B, H, T, 2k + 1]``.
    """
    dtype = bias_dtype(q.dtype)
    w_k = scheme.rel_keys.to(device=q.device, dtype=dtype)  # [R, Dh]
    logits = (q.to(dtype) @ w_k.T) / (scheme.head_dim**0.5)  # [B, H, T, Dh] x [Dh, R] -> [B, H, T, R]
    k = scheme.max_relative_position
    # Offsets as a tensor: a compiled kernel bakes Python ints in and would recompile per offset.
    shift = torch.tensor(k_offset - q_offset, device=q.device)

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return score + logits[b, h, q_idx, (kv_idx - q_idx + shift).clamp(-k, k) + k]

    return score_mod


def fire_score_mod(scheme: _FireLike, q: Tensor, n_keys: int, *, q_offset: int = 0, k_offset: int = 0) -> ScoreMod:
    """FIRE's bias ``f(psi(|i - j|) / psi(max(L, i)))`` as a score_mod, its MLP evaluated per score.

    The MLP (1 -> hidden -> H, ReLU) is written out as a sum over its hidden
    units, which the compiler fuses into the kernel; ``psi`` of every distance
    and the normaliser of every query are looked up in small captured tables.

    Every captured tensor is indexed once, by the head (or by the query and key
    for the two tables). FlexAttention's backward refuses a tensor that needs a
    gradient and is indexed twice (its gradient would be two scatters summed
    inside the kernel: "multiple indexing operations on the same tensor", seen on
    CUDA with torch 2.11). So each weight is split, outside the kernel, into one
    ``[H]`` vector per hidden unit (views; autograd sums their gradients back
    into the layer's weights), and a bidirectional scheme computes both output
    halves and picks one per score, instead of gathering rows ``h`` or ``h + H``
    by the sign of the distance (a per-score gather of every weight, whose
    kernel also ran out of shared memory on an H200).

    Args:
        scheme: the :class:`attnlab.encodings.FIRE`.
        q: queries ``[B, H, T, Dh]``; fixes ``T``, dtype and device.
        n_keys: ``S``.
        q_offset: position of the first query.
        k_offset: position of the first key.

    Returns:
        The score_mod; the bidirectional FIRE takes the second half of the MLP's
        outputs for keys after the query, as its dense bias does.
    """
    T = q.shape[-2]
    dtype = bias_dtype(q.dtype)
    q_pos = torch.arange(q_offset, q_offset + T, device=q.device)  # [T]
    first = k_offset - q_offset - (T - 1)
    distances = torch.arange(first, first + T + n_keys - 1, device=q.device)  # [T + S - 1]
    # psi(|d|) and 1 / (psi(max(L, i)) + eps) in float64, by the scheme's own formulas.
    psi = scheme.psi(distances.abs())  # [T + S - 1]
    inv_norm = 1.0 / scheme.normaliser(q_pos)  # [T]
    psi, inv_norm = psi.to(device=q.device, dtype=dtype), inv_norm.to(device=q.device, dtype=dtype)
    first_layer, last_layer = scheme.mlp[0], scheme.mlp[2]
    assert isinstance(first_layer, nn.Linear) and isinstance(last_layer, nn.Linear)
    H = scheme.n_heads
    hidden = first_layer.weight.shape[0]
    w2 = last_layer.weight.to(device=q.device, dtype=dtype)  # [H or 2H, hidden]
    b2 = last_layer.bias.to(device=q.device, dtype=dtype)  # [H or 2H]
    # The first layer's weight and bias of each unit, the same for every head: [hidden, H] -> hidden x [H].
    w1 = first_layer.weight[:, :1].to(device=q.device, dtype=dtype).expand(hidden, H).contiguous().unbind(0)
    b1 = first_layer.bias[:, None].to(device=q.device, dtype=dtype).expand(hidden, H).contiguous().unbind(0)
    before = w2[:H].t().contiguous().unbind(0)  # hidden x [H]: the outputs for keys at or before the query
    before_bias = b2[:H]  # [H]
    after = () if scheme.causal else w2[H:].t().contiguous().unbind(0)  # hidden x [H]: keys after the query
    after_bias = b2[H:]  # [H] ([0] when causal)
    shift = T - 1
    gap = torch.tensor(q_offset - k_offset, device=q.device)  # a tensor, so offsets never recompile

    def score_mod(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        x = psi[kv_idx - q_idx + shift] * inv_norm[q_idx]
        units = [torch.relu(x * w1[u][h] + b1[u][h]) for u in range(hidden)]
        acc = before_bias[h]
        for u in range(hidden):
            acc = acc + before[u][h] * units[u]
        if not after:
            return score + acc
        later = after_bias[h]
        for u in range(hidden):
            later = later + after[u][h] * units[u]
        return score + torch.where(kv_idx - q_idx > gap, later, acc)

    return score_mod
