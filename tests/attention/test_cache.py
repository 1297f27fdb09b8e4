"""Key/value caches: the cache objects, and cached attention equal to the full computation."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from attnlab.attention import DecodingCache, KVCache, MultiHeadAttention, attend, causal_mask

# -- KVCache ------------------------------------------------------------------------------


def test_appending_step_by_step_equals_concatenation_and_grows_geometrically():
    g = torch.Generator().manual_seed(0)
    steps = [torch.randn(2, 3, n, 4, generator=g) for n in (1, 1, 3, 1, 1, 5)]
    cache, capacities = KVCache(), []
    for k in steps:
        keys, values = cache.append(k, 2 * k)
        capacities.append(cache.capacity)
    expected = torch.cat(steps, dim=2)
    assert len(cache) == 12
    assert torch.equal(keys, expected) and torch.equal(values, 2 * expected)
    assert torch.equal(cache.keys, expected) and torch.equal(cache.values, 2 * expected)
    assert capacities == [1, 2, 5, 10, 10, 20]  # doubled (or as needed), not grown every step
    assert cache.nbytes == 2 * 2 * 3 * 20 * 4 * 4


def test_appending_never_writes_into_the_callers_tensors():
    first = torch.zeros(1, 1, 1, 2)
    cache = KVCache()
    cache.append(first, first)
    cache.append(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert torch.equal(first, torch.zeros(1, 1, 1, 2))


def test_appending_under_autograd_keeps_gradients_flowing():
    k1 = torch.randn(1, 2, 1, 3, requires_grad=True)
    k2 = torch.randn(1, 2, 1, 3, requires_grad=True)
    cache = KVCache()
    cache.append(k1, k1)
    keys, values = cache.append(k2, k2)
    (keys.sum() + 2 * values.sum()).backward()
    assert torch.equal(k1.grad, torch.full_like(k1, 3.0)) and torch.equal(k2.grad, torch.full_like(k2, 3.0))


def test_store_reset_and_errors():
    cache = KVCache()
    assert len(cache) == 0 and cache.keys is None and repr(cache) == "KVCache(empty)"
    cache.store(torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 5, 6))
    assert len(cache) == 5 and "length=5" in repr(cache)
    with pytest.raises(ValueError, match=r"do not continue.*reset\(\)"):
        cache.append(torch.zeros(4, 3, 1, 4), torch.zeros(4, 3, 1, 6))  # another batch size
    with pytest.raises(ValueError, match=r"keys must be a tensor \[B, H, S, D\], got \[2, 3, 4\]"):
        cache.append(torch.zeros(2, 3, 4), torch.zeros(2, 3, 1, 6))
    with pytest.raises(ValueError, match="disagree"):
        cache.append(torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 2, 6))
    cache.reset()
    assert len(cache) == 0 and cache.nbytes == 0


def test_stored_tells_a_cross_attention_cache_from_appended_steps():
    cache, k = KVCache(), torch.zeros(1, 2, 3, 4)
    assert not cache.stored
    cache.store(k, k)
    assert cache.stored
    cache.reset()
    assert not cache.stored
    cache.append(k, k)
    assert not cache.stored and len(cache) == 3


def test_decoding_cache_layers_position_and_reset():
    cache = DecodingCache()
    assert cache.layer("self_attn") is cache["self_attn"]
    cache["cross_attn"].store(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    cache.advance(2)
    assert cache.position == 2 and list(cache) == ["self_attn", "cross_attn"] and len(cache) == 2
    assert "cross_attn" in cache and "other" not in cache
    assert "position=2" in repr(cache) and "'cross_attn': KVCache(length=3" in repr(cache)
    cache.reset()
    assert cache.position == 0 and all(len(c) == 0 for _, c in cache.items())
    with pytest.raises(TypeError, match="non-empty string, got 3"):
        cache.layer(3)
    with pytest.raises(ValueError, match="steps"):
        cache.advance(-1)


# -- attend(is_causal=...) ------------------------------------------------------------------


@pytest.mark.parametrize(("T", "S"), [(1, 1), (4, 4), (1, 6), (3, 7), (5, 3)])
@pytest.mark.parametrize("need_weights", [False, True])
def test_is_causal_is_the_bottom_right_causal_mask(T, S, need_weights):
    g = torch.Generator().manual_seed(T * 10 + S)
    q, k, v = (torch.randn(2, 3, n, 4, generator=g) for n in (T, S, S))
    rows = torch.arange(T).unsqueeze(1)
    allowed = torch.arange(S).unsqueeze(0) <= S - T + rows  # [T, S], written out independently
    out, weights = attend(q, k, v, is_causal=True, need_weights=need_weights)
    expected, expected_w = attend(q, k, v, mask=allowed, need_weights=True)
    assert_close(out, expected, atol=1e-6, rtol=0)
    if need_weights:
        assert_close(weights, expected_w, atol=1e-6, rtol=0)
    if T > S:  # the first T - S queries see nothing: zeros, not NaN
        assert torch.equal(out[:, :, : T - S], torch.zeros_like(out[:, :, : T - S]))
    if T <= S:
        assert torch.equal(allowed, causal_mask(T, S))


def test_is_causal_with_a_square_matches_sdpa_and_combines_with_a_mask():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g) for _ in range(3))
    out, _ = attend(q, k, v, is_causal=True)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6, rtol=0)
    padding = torch.tensor([True, True, True, False, True]).view(1, 1, 1, 5)
    combined, _ = attend(q, k, v, mask=padding, is_causal=True)
    expected, _ = attend(q, k, v, mask=padding & causal_mask(5))
    assert_close(combined, expected, atol=1e-6, rtol=0)


# -- MultiHeadAttention with a cache ----------------------------------------------------------


@pytest.mark.parametrize(("head_dim", "n_kv_heads"), [(None, None), (8, None), (None, 2), (8, 1)])
def test_cached_self_attention_step_by_step_equals_the_causal_pass(head_dim, n_kv_heads):
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 8, head_dim=head_dim, n_kv_heads=n_kv_heads).eval()
    x = torch.randn(3, 7, 8)
    full = mha(x, is_causal=True)  # [B, T, D]
    cache = KVCache()
    steps = []
    with torch.no_grad():
        for t in range(7):
            step = x[:, t : t + 1]  # [B, 1, D]; self-attention is the call without key
            steps.append(mha(step, is_causal=True, cache=cache))
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert len(cache) == 7
    assert cache.keys.shape == (3, n_kv_heads or 4, 7, mha.head_dim)  # GQA: only the key/value heads are kept
    # Two steps at a time: the new queries still see every earlier step (bottom-right).
    cache.reset()
    chunks = []
    with torch.no_grad():
        for t in range(0, 6, 2):
            chunk = x[:, t : t + 2]  # [B, 2, D]
            chunks.append(mha(chunk, is_causal=True, cache=cache))
    assert_close(torch.cat(chunks, dim=1), full[:, :6], atol=1e-5, rtol=0)


def test_cached_cross_attention_projects_the_keys_once_and_reuses_them():
    torch.manual_seed(0)
    mha = MultiHeadAttention(2, 6)
    memory = torch.randn(2, 5, 6)
    query = torch.randn(2, 3, 6)
    cache = KVCache()
    first = mha(query, memory, cache=cache)
    assert len(cache) == 5
    assert_close(first, mha(query, memory))
    with torch.no_grad():
        mha.in_proj.weight[6:].mul_(1e3)  # a second projection of the memory would give other keys
    again = mha(query, memory, cache=cache)  # the cached keys are used (the same memory is passed)
    assert_close(again, first)
    with pytest.raises(ValueError, match="another key"):
        mha(query, torch.full_like(memory, 1e3), cache=cache)  # other states never meet the cached keys
    assert not [name for name, value in vars(mha).items() if isinstance(value, torch.Tensor)]  # nothing kept


def test_a_reserved_capacity_is_allocated_once_and_filled_in_place():
    cache = KVCache(capacity=4)
    steps = [torch.full((1, 2, 1, 3), float(i)) for i in range(6)]
    capacities = []
    for k in steps:
        cache.append(k, k)
        capacities.append(cache.capacity)
    assert capacities == [4, 4, 4, 4, 8, 8]
    assert torch.equal(cache.keys, torch.cat(steps, dim=2))
    assert DecodingCache(capacity=5).layer("x").append(steps[0], steps[0])[0].shape == (1, 2, 1, 3)
    with pytest.raises(ValueError, match="capacity"):
        KVCache(capacity=-1)
