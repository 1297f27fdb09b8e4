r"""Attention: the functional core, masks, scoring functions and the modules on it.

* :func:`attend`: scaled dot-product attention (fused kernel, or explicit with weights;
  grouped-query keys and values: :func:`repeat_kv_heads`).
* long context, for position schemes that add terms: :func:`chunked_attend` (query
  chunks, O(L) memory, forward and backward) and :func:`flex_attend` (FlexAttention
  ``score_mod``\ s); ``MultiHeadAttention(backend=...)`` picks between them and the dense
  path (:mod:`attnlab.attention.backends.choose`).
* masks: :func:`causal_mask` (bottom-right aligned), :func:`padding_mask`,
  :func:`padding_mask_from_lengths`, :func:`subsequent_mask`, converters to and
  from ``nn.MultiheadAttention``'s polarity.
* scoring functions (the attention lab and beyond): uniform, dot, scaled dot, additive
  (Bahdanau), general (Luong), and the variance demonstration.
* :class:`Attention` (the attention lab's single head), :class:`MultiHeadAttention`
  (``mha(x)`` self-attention, ``mha(x, memory)`` cross-attention, one boolean mask) and
  :class:`LabMultiHeadAttention` (the labs' module: ``init_keys``, ``mha(query, mask)``,
  ``alphas``); torch's call on attnlab's module: :func:`forward_like_torch`.
* :class:`KVCache` / :class:`DecodingCache`: keys and values kept between
  decoding steps, owned by the decoding call.
* :func:`record_attention` / :func:`collect_attention`: weights only when asked.
"""

from attnlab.attention.attention import Attention
from attnlab.attention.backends.choose import BACKENDS
from attnlab.attention.backends.chunked import chunked_attend
from attnlab.attention.backends.flex import compile_log, flex_attend
from attnlab.attention.cache import KVCache
from attnlab.attention.decoding_cache import DecodingCache
from attnlab.attention.functional import attend, repeat_kv_heads
from attnlab.attention.interop import forward_like_torch
from attnlab.attention.lab_heads import LabMultiHeadAttention, keeping_alphas
from attnlab.attention.masks import (
    attention_mask,
    causal_mask,
    from_key_padding_mask,
    from_torch_mask,
    padding_mask,
    padding_mask_from_lengths,
    subsequent_mask,
    to_torch_mask,
)
from attnlab.attention.multihead import MultiHeadAttention
from attnlab.attention.recording import collect_attention, is_recording, record_attention
from attnlab.attention.scoring import (
    AdditiveScore,
    GeneralScore,
    alphas_from_scores,
    context_vector,
    dot_product_variance,
    dot_scores,
    scaled_dot_scores,
    uniform_scores,
)

__all__ = [
    "repeat_kv_heads",
    "from_key_padding_mask",
    "forward_like_torch",
    "flex_attend",
    "compile_log",
    "chunked_attend",
    "attention_mask",
    "BACKENDS",
    "AdditiveScore",
    "Attention",
    "DecodingCache",
    "GeneralScore",
    "KVCache",
    "LabMultiHeadAttention",
    "MultiHeadAttention",
    "alphas_from_scores",
    "attend",
    "causal_mask",
    "collect_attention",
    "context_vector",
    "dot_product_variance",
    "dot_scores",
    "from_torch_mask",
    "is_recording",
    "keeping_alphas",
    "padding_mask",
    "padding_mask_from_lengths",
    "record_attention",
    "scaled_dot_scores",
    "subsequent_mask",
    "to_torch_mask",
    "uniform_scores",
]
