"""Attention with a positional bias through torch's FlexAttention: no ``[T, S]`` tensor at any length.

``torch.nn.attention.flex_attention`` (He et al. 2024, arXiv:2412.05496) fuses a
per-score function ``score_mod(score, b, h, q_idx, kv_idx)`` into a compiled
attention kernel, and skips the blocks a ``BlockMask`` rules out. A scheme that
can be written as such a function (ALiBi, T5's buckets, KERPLE, FIRE, Shaw's
key term: :mod:`attnlab.encodings.score_mods`) then costs what attention without
positions costs, in memory, at every length.

Compilation. The kernel is compiled by ``torch.compile`` for fixed shapes (torch
2.13's CPU backend fails to compile it for dynamic shapes), and a compile takes
tens of seconds on a CPU. So lengths are rounded up to a **shape family**: the
next power of two, at least 128 (one block), with the padding masked out; every
call of one family reuses one compiled kernel. Each compile is timed, logged on
the ``attnlab`` logger and kept in :func:`compile_log`, so a benchmark can report
it apart from the steady-state time. Only queries/keys/values, the mask pattern
and dtypes decide the family: new weights of a scheme never recompile.

Masks. The causal mask (aligned bottom-right, as everywhere in attnlab) and a
key-padding mask ``[B, S]`` are turned into a ``BlockMask`` from their block
structure directly (``O((T / 128) * (S / 128))`` memory, never ``[T, S]``): whole
blocks outside the mask are skipped, partial ones are masked per score.

Limits. torch 2.13 has no FlexAttention backward on the CPU: there, training
takes the chunked path (:mod:`attnlab.attention.backends.chunked`); on CUDA the kernel
has a backward, with gradients to the scheme's captured parameters. A query row
with no key to attend to gives zeros, as :func:`attnlab.attention.attend` does.

Shape notation: ``B`` batch, ``H`` query heads, ``Hkv`` key/value heads, ``T``
queries, ``S`` keys, ``Dh`` head dim, ``Dv`` value width, ``Tp``/``Sp`` the
lengths rounded up to their family.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab._finite import bounded_pair
from attnlab.encodings.scheme import ScoreMod

__all__ = ["CompileRecord", "compile_log", "flex_attend", "flex_supported", "shape_family"]

_LOG = logging.getLogger("attnlab")
_BLOCK = 128  # FlexAttention's default block size, and the smallest family
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CompileRecord:
    """One compile of the FlexAttention kernel: the shape family it serves and how long it took.

    Attributes:
        key: ``(B, H, Hkv, Tp, Sp, Dh, Dv, dtype, device type, causal, padded keys, backward,
            the score_mod's code)``.
        seconds: wall time of the first call of the family (compile plus one run).
    """

    key: tuple[Any, ...]
    seconds: float


_compiled: dict[tuple[Any, ...], Callable[..., Tensor]] = {}
_records: list[CompileRecord] = []


def compile_log() -> list[CompileRecord]:
    """Every FlexAttention compile of this process so far, oldest first (a copy).

    Example:
        >>> isinstance(compile_log(), list)
        True
    """
    with _LOCK:
        return list(_records)


def shape_family(n: int) -> int:
    """The length a call of length ``n`` is padded to: the next power of two, at least 128.

    Example:
        >>> shape_family(1), shape_family(129), shape_family(4096), shape_family(5000)
        (128, 256, 4096, 8192)
    """
    return max(_BLOCK, 1 << max(0, (n - 1).bit_length()))


def flex_supported(device: torch.device, *, backward: bool) -> bool:
    """Whether FlexAttention can serve a call on ``device``: CUDA always; the CPU only without backward.

    Example:
        >>> flex_supported(torch.device("cpu"), backward=False), flex_supported(torch.device("cpu"), backward=True)
        (True, False)
    """
    return device.type == "cuda" or (device.type == "cpu" and not backward)


def _block_mask(
    Tp: int, Sp: int, *, T: int, S: int, causal: bool, key_valid: Tensor | None, device: torch.device,
) -> Any:
    """The ``BlockMask`` of a call padded to ``Tp x Sp``: real rows/keys, causal (bottom-right), valid keys.

    Built from block bounds, ``[B|1, 1, Tp/128, Sp/128]`` booleans, never from ``[T, S]``.
    """
    from torch.nn.attention.flex_attention import BlockMask

    n_q, n_k = Tp // _BLOCK, Sp // _BLOCK
    q_first = torch.arange(n_q, device=device) * _BLOCK  # [n_q]
    q_last = torch.clamp(q_first + _BLOCK - 1, max=T - 1)  # [n_q]: the last real row of each block
    k_first = torch.arange(n_k, device=device) * _BLOCK  # [n_k]
    k_last = torch.clamp(k_first + _BLOCK - 1, max=S - 1)  # [n_k]
    real = (q_first < T)[:, None] & (k_first < S)[None, :]  # [n_q, n_k]
    whole = real & ((k_first + _BLOCK <= S)[None, :] & (q_first + _BLOCK <= T)[:, None])
    any_ok, all_ok = real, whole
    shift = S - T  # query t sees keys <= t + S - T
    if causal:
        any_ok = any_ok & (k_first[None, :] <= q_last[:, None] + shift)
        all_ok = all_ok & (k_last[None, :] <= q_first[:, None] + shift)
    any_ok, all_ok = any_ok[None, None], all_ok[None, None]  # [1, 1, n_q, n_k]
    if key_valid is not None:
        padded = F.pad(key_valid, (0, Sp - S))  # [B, Sp]
        blocks = padded.view(padded.shape[0], n_k, _BLOCK)  # [B, n_k, 128]
        any_ok = any_ok & blocks.any(-1)[:, None, None, :]  # [B, 1, n_q, n_k]
        all_ok = all_ok & blocks.all(-1)[:, None, None, :]
    partial = any_ok & ~all_ok

    def ordered(blocks: Tensor) -> tuple[Tensor, Tensor]:
        """Per query block: how many key blocks, and their indices first (``int32``)."""
        counts = blocks.sum(-1, dtype=torch.int32)  # [B|1, 1, n_q]
        order = torch.argsort(~blocks, dim=-1, stable=True).to(torch.int32)  # [B|1, 1, n_q, n_k]: True first
        return counts, order

    valid = None if key_valid is None else F.pad(key_valid, (0, Sp - S))  # [B, Sp]

    # The real lengths as a tensor, not Python ints: the compiled kernel would bake ints in
    # as constants and recompile for every length of the family.
    bounds = torch.tensor([T, S, shift], device=device)  # [3]

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        ok = (q_idx < bounds[0]) & (kv_idx < bounds[1])
        if causal:
            ok = ok & (kv_idx <= q_idx + bounds[2])
        if valid is not None:
            ok = ok & valid[b, kv_idx]
        return ok

    kv_num, kv_idx = ordered(partial)
    full_num, full_idx = ordered(all_ok)
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=_BLOCK,
                                    mask_mod=mask_mod, seq_lengths=(Tp, Sp))


def _kernel(key: tuple[Any, ...]) -> tuple[Callable[..., Tensor], bool]:
    """The compiled kernel of a shape family, and whether this call is its first (to be timed)."""
    from torch.nn.attention.flex_attention import flex_attention

    with _LOCK:
        fn = _compiled.get(key)
        if fn is not None:
            return fn, False
        # One compiled callable per family; the recompile limit is raised for these calls only
        # (by torch._dynamo.config.patch in flex_attend), since every family is one cache entry.
        fn = torch.compile(flex_attention, dynamic=False)
        _compiled[key] = fn
        return fn, True


def flex_attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    score_mod: Callable[[int, int], ScoreMod | None],
    is_causal: bool = False,
    key_valid: Tensor | None = None,
    scale: float | None = None,
    compiled: bool = True,
) -> Tensor:
    """Attention with a scheme's score_mod through compiled FlexAttention; ``out [B, H, T, Dv]``.

    Args:
        query: ``[B, H, T, Dh]``, already turned by any rotation.
        key: ``[B, H|Hkv, S, Dh]`` (``Hkv`` dividing ``H``: grouped-query attention).
        value: ``[B, H|Hkv, S, Dv]``.
        score_mod: ``score_mod(Tp, Sp)`` builds the scheme's score_mod for the padded
            lengths (a scheme's ``score_mod(q_padded, Sp, q_offset=..)``, bound by the
            caller); it may return None for no term.
        is_causal: the causal mask aligned bottom-right.
        key_valid: boolean ``[B, S]``, True for keys that may be attended to
            (attnlab's polarity: the opposite of torch's ``key_padding_mask``).
        scale: multiplier of ``q @ k^T``; ``1 / sqrt(Dh)`` by default.
        compiled: False runs FlexAttention eagerly, which materialises the scores
            (``O(T * S)``): the same numbers without a compile, for checking.

    Returns:
        ``[B, H, T, Dv]``; rows with no key to attend to are zeros.

    Raises:
        NotImplementedError: on the CPU when autograd would need a backward
            (torch 2.13 has none there; use the chunked path).
    """
    B, H, T, Dh = query.shape
    Hkv, S, Dv = key.shape[1], key.shape[2], value.shape[-1]
    backward = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    if not flex_supported(query.device, backward=backward):
        raise NotImplementedError(
            f"FlexAttention has no backward on {query.device.type} in torch {torch.__version__}; "
            "train through the chunked path (backend='chunked')"
        )
    scale = 1.0 / math.sqrt(Dh) if scale is None else scale
    if key_valid is not None:  # as attend: a hidden key has no effect, whatever it holds
        hidden = ~key_valid.to(key.device)[:, None, :, None]  # [B, 1, S, 1]
        key, value = key.masked_fill(hidden, 0.0), value.masked_fill(hidden, 0.0)
    query, key = bounded_pair(query, key, scale)  # as attend with a term: the scores cannot overflow
    Tp, Sp = shape_family(T), shape_family(S)
    q = F.pad(query, (0, 0, 0, Tp - T))  # [B, H, Tp, Dh]
    k = F.pad(key, (0, 0, 0, Sp - S))  # [B, Hkv, Sp, Dh]
    v = F.pad(value, (0, 0, 0, Sp - S))  # [B, Hkv, Sp, Dv]
    mod = score_mod(Tp, Sp)
    block_mask = _block_mask(Tp, Sp, T=T, S=S, causal=is_causal, key_valid=key_valid, device=query.device)
    # The scheme's code is part of the family (each score_mod compiles its own kernel); its
    # captured tensors are not (new values, same shapes: no recompile).
    family = (B, H, Hkv, Tp, Sp, Dh, Dv, query.dtype, query.device.type, is_causal,
              key_valid is not None, backward, getattr(mod, "__code__", None))
    if not compiled:
        from torch.nn.attention.flex_attention import flex_attention

        with warnings.catch_warnings():  # "called without torch.compile": that is the point here
            warnings.simplefilter("ignore", UserWarning)
            out = flex_attention(q, k, v, score_mod=mod, block_mask=block_mask, scale=scale, enable_gqa=Hkv != H)
        assert isinstance(out, Tensor)
        return out[:, :, :T]  # [B, H, T, Dv]
    fn, first = _kernel(family)
    start = time.perf_counter()
    with torch._dynamo.config.patch(recompile_limit=max(64, len(_compiled) + 8)):
        out = fn(q, k, v, score_mod=mod, block_mask=block_mask, scale=scale, enable_gqa=Hkv != H)
    if first:
        seconds = time.perf_counter() - start
        with _LOCK:
            _records.append(CompileRecord(family, seconds))
        _LOG.info("FlexAttention compiled for B=%d H=%d T<=%d S<=%d Dh=%d %s in %.1f s (once per shape family)",
                  B, H, Tp, Sp, Dh, query.dtype, seconds)
    assert isinstance(out, Tensor)
    return out[:, :, :T]  # [B, H, T, Dv]
