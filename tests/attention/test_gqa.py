"""Grouped-query and multi-query attention: against transformers' Llama attention, a float64 formula, the cache.

The reference for GQA is HF's: query head ``h`` reads key/value head ``h // (H / Hkv)``
(``repeat_kv``, i.e. ``repeat_interleave`` on the heads), written out here in float64.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from attnlab.attention import KVCache, MultiHeadAttention, attend, causal_mask, from_key_padding_mask
from attnlab.encodings import ALiBi, Rotary

H, D, DH = 8, 32, 4  # heads, model dim, head dim


def reference(q, k, v, *, mask=None, bias=None, scale=None):
    """Float64 GQA: repeat each key/value head over its H / Hkv query heads, then textbook attention."""
    group = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.double().repeat_interleave(group, dim=1), v.double().repeat_interleave(group, dim=1)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)  # [B, H, T, S]
    if bias is not None:
        s = s + bias.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w


def llama_attention(n_kv_heads):
    """transformers' LlamaAttention (eager: ``repeat_kv`` + matmul + softmax) with biased projections."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    config = llama.LlamaConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=n_kv_heads,
                               attention_bias=True, attention_dropout=0.0)
    config._attn_implementation = "eager"
    return llama, config, llama.LlamaAttention(config, layer_idx=0).eval()


def ours_from(theirs, n_kv_heads, **kwargs):
    """attnlab's module holding the Llama module's weights: in_proj rows q | k | v."""
    ours = MultiHeadAttention(H, D, n_kv_heads=n_kv_heads, **kwargs).eval()
    with torch.no_grad():
        ours.in_proj.weight.copy_(torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight]))
        ours.in_proj.bias.copy_(torch.cat([theirs.q_proj.bias, theirs.k_proj.bias, theirs.v_proj.bias]))
        ours.linear_out.weight.copy_(theirs.o_proj.weight)
        ours.linear_out.bias.copy_(theirs.o_proj.bias)
    return ours


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_equals_transformers_llama_eager_attention(n_kv_heads, causal):
    _, _, theirs = llama_attention(n_kv_heads)
    ours = ours_from(theirs, n_kv_heads)
    assert ours.in_proj.weight.shape == ((H + 2 * n_kv_heads) * DH, D)
    x = torch.randn(2, 6, D)
    identity = (torch.ones(2, 6, DH), torch.zeros(2, 6, DH))  # cos, sin: no rotation, GQA alone
    additive = None
    if causal:  # HF's eager mask is additive: 0 where allowed, the dtype's min elsewhere
        additive = torch.zeros(6, 6).masked_fill(~causal_mask(6), torch.finfo(torch.float32).min)[None, None]
    with torch.no_grad():
        expected, expected_w = theirs(x, position_embeddings=identity, attention_mask=additive)
        explicit, w = ours(x, is_causal=causal, need_weights=True)
        fused = ours(x, mask=causal_mask(6) if causal else None)
    assert_close(explicit, expected, atol=1e-5, rtol=0)
    assert_close(w, expected_w, atol=1e-5, rtol=0)
    assert_close(fused, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [4, 1])
def test_gqa_with_rotary_equals_llama_and_decodes_with_a_cache_of_hkv_heads(n_kv_heads):
    llama, config, theirs = llama_attention(n_kv_heads)
    ours = ours_from(theirs, n_kv_heads, position=Rotary(DH, convention="half"))  # HF's rotate_half layout
    x = torch.randn(2, 7, D)
    cos_sin = llama.LlamaRotaryEmbedding(config)(x, torch.arange(7).expand(2, 7))  # each [B, T, Dh]
    additive = torch.zeros(7, 7).masked_fill(~causal_mask(7), float("-inf"))[None, None]
    cache = KVCache()
    with torch.no_grad():
        expected, _ = theirs(x, position_embeddings=cos_sin, attention_mask=additive)
        full = ours(x, is_causal=True)
        steps = [ours(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(7)]  # mha(step): self-attention
    assert_close(full, expected, atol=1e-5, rtol=0)
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache.keys.shape == (2, n_kv_heads, 7, DH) and cache.values.shape == (2, n_kv_heads, 7, DH)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("mask_shape", [None, (6,), (5, 6), (2, 1, 1, 6), (2, 8, 5, 6)])
def test_attend_gqa_fused_and_explicit_equal_the_float64_formula(n_kv_heads, mask_shape):
    g = torch.Generator().manual_seed(n_kv_heads)
    q = torch.randn(2, H, 5, DH, generator=g)
    k, v = torch.randn(2, n_kv_heads, 6, DH, generator=g), torch.randn(2, n_kv_heads, 6, 3, generator=g)
    mask = None if mask_shape is None else torch.rand(mask_shape, generator=g) > 0.3
    if mask is not None:
        mask[..., 0] = True  # no empty row: the formula's softmax would give NaN there
    bias = torch.randn(H, 5, 6, generator=g)  # [H, T, S]: per query head
    fused, no_weights = attend(q, k, v, mask=mask, bias=bias)
    explicit, w = attend(q, k, v, mask=mask, bias=bias, need_weights=True)
    ref_out, ref_w = reference(q, k, v, mask=mask, bias=bias)
    assert no_weights is None and w.shape == (2, H, 5, 6) and fused.shape == (2, H, 5, 3)
    assert_close(fused.double(), ref_out, atol=1e-6, rtol=0)
    assert_close(explicit.double(), ref_out, atol=1e-6, rtol=0)
    assert_close(w.double(), ref_w, atol=1e-6, rtol=0)
    causal, _ = attend(q, k, v, is_causal=True)
    assert_close(causal.double(), reference(q, k, v, mask=causal_mask(5, 6))[0], atol=1e-6, rtol=0)


def test_the_explicit_path_never_repeats_the_keys():
    # What autograd keeps for backward: nothing of the size of keys repeated over the H query heads.
    q = torch.randn(1, H, 3, DH, requires_grad=True)
    k, v = (torch.randn(1, 2, 64, DH, requires_grad=True) for _ in range(2))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out, _ = attend(q, k, v, need_weights=True)
    assert saved and (1, H, 64, DH) not in saved and all(math.prod(s) < H * 64 * DH for s in saved)
    out.sum().backward()
    assert k.grad.shape == (1, 2, 64, DH)


def test_gradcheck_float64_gqa_both_paths():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 2, 4, 2, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    mask = torch.tensor([[True, True, False, True], [False, False, False, False], [True, True, True, True]])
    for need_weights in (False, True):
        assert torch.autograd.gradcheck(lambda a, b, c, nw=need_weights: attend(a, b, c, mask=mask, need_weights=nw)[0],
                                        (q, k, v))


@pytest.mark.parametrize("n_kv_heads", [2, 1])
def test_module_gqa_fused_and_explicit_agree_with_masks_bias_and_a_scheme(n_kv_heads):
    mha = MultiHeadAttention(H, D, n_kv_heads=n_kv_heads, position=ALiBi(H)).eval()
    x = torch.randn(2, 6, D)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[1, 4:] = True  # torch's polarity: padding
    bias = torch.randn(H, 6, 6)
    kwargs = dict(mask=from_key_padding_mask(kpm, batch=2, n_keys=6), bias=bias, is_causal=True)
    fused = mha(x, **kwargs)
    explicit, w = mha(x, need_weights=True, **kwargs)
    assert_close(fused, explicit, atol=1e-6, rtol=0)
    assert w.shape == (2, H, 6, 6) and torch.all(w[1, :, :, 4:] == 0)
    assert torch.all(w.triu(1) == 0)  # causal


def test_grouped_parameters_and_the_labs_order_when_n_kv_heads_is_n_heads():
    torch.manual_seed(4)
    default = MultiHeadAttention(4, 8)
    torch.manual_seed(4)
    same = MultiHeadAttention(4, 8, n_kv_heads=4)
    pairs = zip(default.state_dict().values(), same.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    mqa = MultiHeadAttention(4, 8, n_kv_heads=1)
    assert mqa.in_proj.weight.shape == ((4 + 2) * 2, 8) and "n_kv_heads=1" in repr(mqa)


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: MultiHeadAttention(8, 32, n_kv_heads=3), ValueError, r"n_kv_heads \(3\) must divide n_heads \(8\)"),
    (lambda: MultiHeadAttention(8, 32, n_kv_heads=16), ValueError, r"n_kv_heads \(16\) must divide n_heads \(8\)"),
    (lambda: MultiHeadAttention(8, 32, n_kv_heads=0), ValueError, "n_kv_heads must be positive, got 0"),
    (lambda: MultiHeadAttention(8, 32, n_kv_heads=2.0), TypeError, r"n_kv_heads must be an integer, got 2\.0"),
    (lambda: attend(torch.randn(1, 6, 2, 4), torch.randn(1, 4, 2, 4), torch.randn(1, 4, 2, 4)), ValueError,
     r"query has H = 6 heads, which is not a multiple of the key/value heads Hkv = 4"),
    (lambda: attend(torch.randn(1, 8, 2, 4), torch.randn(1, 4, 2, 4), torch.randn(1, 2, 2, 4)), ValueError,
     r"key and value disagree on heads Hkv: \[1, 4, 2, 4\], \[1, 2, 2, 4\]"),
])
def test_bad_head_counts_are_refused_naming_the_value(make, error, match):
    with pytest.raises(error, match=match):
        make()
