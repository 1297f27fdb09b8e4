"""``torch.nn.MultiheadAttention`` and attnlab's :class:`~attnlab.attention.MultiHeadAttention`: the one boundary.

torch's conventions differ from attnlab's in two ways, and both are converted
here and nowhere else:

* **Masks.** torch's ``key_padding_mask [B, S]`` and boolean ``attn_mask`` say
  True = *ignore*; attnlab's one ``mask`` says True = *may attend* (SDPA's
  polarity, and the labs' ``mask == 0`` is hidden). A flag of the opposite
  polarity inside attnlab's ``forward`` would be a second way to mask, one
  ``~`` away from a silent bug; and a ``[B, S]`` padding mask passed as a ``[T, S]``
  mask broadcasts without a word whenever ``B == T``. So the conversion lives in
  :func:`forward_like_torch`, which takes torch's call as torch takes it.
* **Self-attention.** torch passes the sequence three times (``mha(x, x, x)``);
  attnlab's self-attention is ``mha(x)`` (a ``key`` is cross-attention), because a
  position scheme and a cache need to know. :func:`forward_like_torch` reads
  torch's call (query, key and value the same tensor) as attnlab's ``mha(x)``.

Weights: :meth:`MultiHeadAttention.from_torch` copies an ``nn.MultiheadAttention``.

Shape notation: ``B`` batch, ``T`` queries, ``S`` keys, ``H`` heads, ``D`` model dim.
"""

from __future__ import annotations

from torch import Tensor

from attnlab._validate import check_bool
from attnlab.attention.masks import from_key_padding_mask, from_torch_mask
from attnlab.attention.multihead import MultiHeadAttention

__all__ = ["forward_like_torch"]


def forward_like_torch(
    mha: MultiHeadAttention,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Call attnlab's ``mha`` as ``nn.MultiheadAttention.forward`` is called (batch-first), masks in torch's polarity.

    Args:
        mha: attnlab's module (e.g. from :meth:`MultiHeadAttention.from_torch`).
        query: ``[B, T, D]``.
        key: ``[B, S, D]``; the query itself (``key is query and value is query``,
            torch's self-attention call) runs attnlab's self-attention ``mha(query)``.
        value: ``[B, S, D]``.
        key_padding_mask: ``[B, S]``, torch's polarity: boolean True = padding (ignored),
            or a float mask added to the scores (0 / -inf).
        need_weights: return the weights (else None), as torch does by default.
        attn_mask: ``[T, S]`` or ``[B * H, T, S]``, torch's polarity: boolean True = not
            allowed, or a float mask added to the scores.
        average_attn_weights: weights averaged over heads ``[B, T, S]`` (torch's
            default), else per head ``[B, H, T, S]``.
        is_causal: the causal mask (bottom-right aligned; torch reads it as a hint
            that ``attn_mask`` is causal: here it is applied).

    Returns:
        ``(out [B, T, D], weights [B, T, S] or [B, H, T, S] or None)``, as torch returns them.

    Raises:
        TypeError / ValueError: for an ``mha`` that is not attnlab's module, inputs that are
            not ``[B, L, D]`` tensors, masks of the wrong dtype or shape (naming the
            argument), and what ``mha`` raises.

    Example:
        >>> import torch
        >>> torch_mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
        >>> ours = MultiHeadAttention.from_torch(torch_mha).eval()
        >>> x = torch.randn(2, 3, 8)
        >>> padding = torch.tensor([[False, False, True], [False, False, False]])
        >>> out, _ = forward_like_torch(ours, x, x, x, key_padding_mask=padding)
        >>> torch.allclose(out, torch_mha(x, x, x, key_padding_mask=padding)[0], atol=1e-6)
        True
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an attnlab MultiHeadAttention, got {type(mha).__name__}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.dim() != 3:
            got = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor [B, L, D] (batch first), got {got}")
    need_weights = check_bool("need_weights", need_weights)
    B, T, S, H = query.shape[0], query.shape[1], key.shape[1], mha.n_heads
    mask: Tensor | None = None
    bias: Tensor | None = None
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise TypeError(f"attn_mask must be a tensor [T, S] or [B * H, T, S], got {type(attn_mask).__name__}")
        if attn_mask.dim() == 3:
            if attn_mask.shape[0] != B * H:
                raise ValueError(f"a 3-d attn_mask is [B * H, T, S] = [{B * H}, {T}, {S}], got {list(attn_mask.shape)}")
            attn_mask = attn_mask.view(B, H, T, S)  # torch: batch-major [B * H, T, S] -> [B, H, T, S]
        if attn_mask.is_floating_point():
            bias = attn_mask  # torch adds a float mask to the scores
        else:
            mask = from_torch_mask(attn_mask)  # True = may attend
    if key_padding_mask is not None:
        if isinstance(key_padding_mask, Tensor) and key_padding_mask.is_floating_point():
            if tuple(key_padding_mask.shape) != (B, S):
                raise ValueError(f"key_padding_mask must have shape [B, S] = {[B, S]}, "
                                 f"got {list(key_padding_mask.shape)}")
            padding = key_padding_mask[:, None, None, :]  # [B, S] -> [B, 1, 1, S], added to the scores
            bias = padding if bias is None else bias + padding
        else:
            allowed = from_key_padding_mask(key_padding_mask, batch=B, n_keys=S)  # [B, 1, 1, S], True = may attend
            mask = allowed if mask is None else mask & allowed  # [T, S] or [B, H, T, S] with [B, 1, 1, S]
    # torch's self-attention passes the sequence three times; attnlab's is the call without key.
    kv = (None, None) if key is query and value is query else (key, value)
    result = mha(query, *kv, mask=mask, bias=bias, is_causal=is_causal, need_weights=need_weights)
    if not isinstance(result, tuple):
        return result, None
    out, weights = result
    return out, weights.mean(dim=1) if average_attn_weights else weights  # [B, T, S] or [B, H, T, S]
