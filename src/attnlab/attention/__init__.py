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
* :class:`MultiHeadAttention` (``mha(x)`` self-attention, ``mha(x, memory)``
  cross-attention, one boolean mask); torch's call on attnlab's module: :func:`forward_like_torch`.
* the labs' modules, apart in :mod:`attnlab.attention.lab`: :class:`Attention` (the
  attention lab's single head) and :class:`LabMultiHeadAttention` (the labs' module:
  ``init_keys``, ``mha(query, mask)``, ``alphas``), and their checkpoint layout.
* :class:`KVCache` / :class:`DecodingCache`: keys and values kept between
  decoding steps, owned by the decoding call.
* :func:`record_attention` / :func:`collect_attention`: weights only when asked.

Every name is imported from its module the first time it is asked for (PEP 562), so that
importing one module of the package (a model's) loads only what that module needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.attention.backends.choose import BACKENDS
    from attnlab.attention.backends.chunked import chunked_attend
    from attnlab.attention.backends.flex import compile_log, flex_attend
    from attnlab.attention.cache import KVCache
    from attnlab.attention.decoding_cache import DecodingCache
    from attnlab.attention.functional import attend, repeat_kv_heads
    from attnlab.attention.interop import forward_like_torch
    from attnlab.attention.lab.heads import LabMultiHeadAttention, keeping_alphas
    from attnlab.attention.lab.single_head import Attention
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

#: each module of the package and the names it gives this one
_NAMES = {
    "functional": ("attend", "repeat_kv_heads"),
    "masks": ("attention_mask", "causal_mask", "from_key_padding_mask", "from_torch_mask", "padding_mask",
              "padding_mask_from_lengths", "subsequent_mask", "to_torch_mask"),
    "scoring": ("AdditiveScore", "GeneralScore", "alphas_from_scores", "context_vector", "dot_product_variance",
                "dot_scores", "scaled_dot_scores", "uniform_scores"),
    "multihead": ("MultiHeadAttention",),
    "interop": ("forward_like_torch",),
    "cache": ("KVCache",),
    "decoding_cache": ("DecodingCache",),
    "recording": ("collect_attention", "is_recording", "record_attention"),
    "backends.choose": ("BACKENDS",),
    "backends.chunked": ("chunked_attend",),
    "backends.flex": ("compile_log", "flex_attend"),
    "lab.single_head": ("Attention",),
    "lab.heads": ("LabMultiHeadAttention", "keeping_alphas"),
}
#: where each name lives, imported when first asked for
_HOMES = {name: module for module, names in _NAMES.items() for name in names}

__all__ = ["AdditiveScore", "Attention", "BACKENDS", "DecodingCache", "GeneralScore", "KVCache",
           "LabMultiHeadAttention", "MultiHeadAttention", "alphas_from_scores", "attend", "attention_mask",
           "causal_mask", "chunked_attend", "collect_attention", "compile_log", "context_vector",
           "dot_product_variance", "dot_scores", "flex_attend", "forward_like_torch", "from_key_padding_mask",
           "from_torch_mask", "is_recording", "keeping_alphas", "padding_mask", "padding_mask_from_lengths",
           "record_attention", "repeat_kv_heads", "scaled_dot_scores", "subsequent_mask", "to_torch_mask",
           "uniform_scores"]


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
