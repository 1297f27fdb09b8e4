"""MultiHeadAttention: parity with nn.MultiheadAttention, with the labs' per-head formulation, recording."""

import math

import pytest
import torch
from torch import nn

from attnlab.attention import (
    Attention,
    KVCache,
    LabMultiHeadAttention,
    MultiHeadAttention,
    causal_mask,
    collect_attention,
    forward_like_torch,
    from_key_padding_mask,
    from_torch_mask,
    record_attention,
)


class LabHead(nn.Module):
    """The textbook single head of the positional-encoding and attention labs, written out as the reference."""

    def __init__(self, hidden_dim, input_dim, proj_values):
        super().__init__()
        self.d_k, self.proj_values = hidden_dim, proj_values
        self.linear_query = nn.Linear(input_dim, hidden_dim)
        self.linear_key = nn.Linear(input_dim, hidden_dim)
        self.linear_value = nn.Linear(input_dim, hidden_dim)

    def forward(self, query, keys, mask=None):
        scores = self.linear_query(query) @ self.linear_key(keys).transpose(1, 2) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        self.alphas = torch.softmax(scores, dim=-1)
        values = self.linear_value(keys) if self.proj_values else keys
        return self.alphas @ values


class LabMultiHead(nn.Module):
    """The labs' wide multi-head attention: a Python loop over full-width heads."""

    def __init__(self, n_heads, d_model, input_dim=None, proj_values=True):
        super().__init__()
        self.linear_out = nn.Linear(n_heads * d_model, d_model)
        in_dim = input_dim or d_model
        self.heads = nn.ModuleList(LabHead(d_model, in_dim, proj_values) for _ in range(n_heads))

    def forward(self, query, keys, mask=None):
        return self.linear_out(torch.cat([h(query, keys, mask) for h in self.heads], dim=-1))


@pytest.mark.parametrize("n_heads, d_model, input_dim", [(3, 2, 2), (2, 4, 3), (1, 5, None)])
def test_wide_heads_equal_the_labs_per_head_loop_after_manual_seed(n_heads, d_model, input_dim):
    torch.manual_seed(43)
    theirs = LabMultiHead(n_heads, d_model, input_dim)
    torch.manual_seed(43)
    ours = LabMultiHeadAttention(n_heads, d_model, input_dim=input_dim)  # the labs' module: heads D wide
    torch.manual_seed(43)
    fused = MultiHeadAttention(n_heads, d_model, input_dim=input_dim, head_dim=d_model)  # the same, attnlab's call
    x = torch.randn(4, 5, input_dim or d_model)
    mask = causal_mask(5).unsqueeze(0)  # [1, T, S], the labs' subsequent mask
    expected = theirs(x, x, mask)
    ours.init_keys(x)
    with record_attention():
        got = ours(x, mask)  # the labs' positional call
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    alphas = torch.stack([h.alphas for h in theirs.heads])  # [H, B, T, S]
    torch.testing.assert_close(ours.alphas, alphas, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours.attend(x, mask=mask), expected, atol=1e-6, rtol=0)  # stateless
    torch.testing.assert_close(fused(x, mask=mask), expected, atol=1e-6, rtol=0)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())


def test_gradients_match_the_labs_formulation():
    torch.manual_seed(5)
    theirs = LabMultiHead(3, 2, 2)
    torch.manual_seed(5)
    ours = MultiHeadAttention(3, 2, input_dim=2, head_dim=2)
    x = torch.randn(6, 4, 2)
    theirs(x, x).pow(2).sum().backward()
    ours(x, x, x).pow(2).sum().backward()
    torch.testing.assert_close(ours.linear_out.weight.grad, theirs.linear_out.weight.grad, atol=1e-5, rtol=1e-5)
    qw = torch.cat([h.linear_query.weight.grad for h in theirs.heads])
    torch.testing.assert_close(ours.in_proj.weight.grad[:6], qw, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("masks", ["none", "padding", "causal", "both"])
def test_from_torch_gives_nn_multiheadattention_outputs(masks):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(mha).eval()
    x = torch.randn(3, 9, 32)
    kpm = torch.zeros(3, 9, dtype=torch.bool)
    kpm[1, 6:] = True  # torch: True = ignore
    kpm[2, 3:] = True
    attn_mask = ~causal_mask(9)  # torch: True = not allowed
    kwargs, mask = {}, None
    if masks in ("padding", "both"):
        kwargs["key_padding_mask"] = kpm
        mask = from_torch_mask(kpm)[:, None, :]  # [B, 1, S]
    if masks in ("causal", "both"):
        kwargs["attn_mask"] = attn_mask
        causal = from_torch_mask(attn_mask)
        mask = causal if mask is None else mask & causal
    expected, expected_w = mha(x, x, x, average_attn_weights=False, **kwargs)
    got, w = ours(x, x, x, mask=mask, need_weights=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, expected_w, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours(x, x, x, mask=mask), expected, atol=1e-5, rtol=0)


def test_from_torch_cross_attention_and_refusals():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(16, 2, batch_first=True)
    ours = MultiHeadAttention.from_torch(mha)
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    torch.testing.assert_close(ours(q, kv, kv), mha(q, kv, kv, need_weights=False)[0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="kdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(16, 2, kdim=8, vdim=8))
    with pytest.raises(TypeError, match="nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))


def test_causal_mask_makes_outputs_independent_of_the_future():
    mha = MultiHeadAttention(2, 8)
    x = torch.randn(2, 6, 8)
    out = mha(x, x, x, mask=causal_mask(6))
    x2 = x.clone()
    x2[:, 4] += 1.0
    out2 = mha(x2, x2, x2, mask=causal_mask(6))
    torch.testing.assert_close(out[:, :4], out2[:, :4], atol=0, rtol=0)
    assert not torch.allclose(out[:, 4:], out2[:, 4:])


def test_weights_recorded_only_when_asked():
    mha = MultiHeadAttention(2, 4)
    x = torch.randn(1, 3, 4)
    mha(x, x, x)
    assert mha.attn_weights is None and collect_attention(mha) == {}
    with record_attention():
        mha(x, x, x)
    assert mha.attn_weights.shape == (1, 2, 3, 3)
    assert not mha.attn_weights.requires_grad
    out, w = mha(x, x, x, need_weights=True)
    assert w.shape == (1, 2, 3, 3) and out.shape == (1, 3, 4)


def test_proj_values_false_uses_raw_values():
    torch.manual_seed(2)
    theirs = LabMultiHead(2, 3, 3, proj_values=False)
    torch.manual_seed(2)
    ours = MultiHeadAttention(2, 3, proj_values=False, head_dim=3)
    x = torch.randn(2, 4, 3)
    torch.testing.assert_close(ours(x, x, x), theirs(x, x), atol=1e-6, rtol=0)


def test_dropout_only_in_training():
    mha = MultiHeadAttention(2, 8, dropout=0.5)
    x = torch.randn(2, 5, 8)
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))
    mha.train()
    assert not torch.allclose(mha(x, x, x), mha(x, x, x))


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (lambda: MultiHeadAttention(3, 8), ValueError, r"d_model \(8\).*n_heads \(3\)"),
        (lambda: MultiHeadAttention(0, 8), ValueError, "n_heads"),
        (lambda: MultiHeadAttention(2, 8, dropout=-0.1), ValueError, "dropout"),
        (lambda: MultiHeadAttention(2, 8, input_dim=3, proj_values=False), ValueError, "input_dim"),
        (lambda: MultiHeadAttention(2, 8)(torch.randn(2, 3, 5)), ValueError, r"\[B, L, 8\]"),
        # mha(x) is self-attention; the labs' module has nothing to attend to before init_keys.
        (lambda: LabMultiHeadAttention(2, 8)(torch.randn(2, 3, 8)), RuntimeError, "init_keys"),
    ],
)
def test_bad_arguments(make, exc, words):
    with pytest.raises(exc, match=words):
        make()


def test_attention_lab_masked_alphas():
    torch.manual_seed(11)
    attnh = Attention(2)
    attnh.init_keys(torch.tensor([[[-0.38, 0.44], [0.85, -0.05]]]))
    source_mask = (torch.tensor([[[-1.0, 1.0], [0.0, 0.0]]]) != 0).all(dim=2).unsqueeze(1)
    context = attnh(torch.tensor([[[-1.0, 1.0]]]), mask=source_mask)
    assert attnh.alphas.tolist() == [[[1.0, 0.0]]]
    torch.testing.assert_close(context, torch.tensor([[[-0.38, 0.44]]]))


def test_attention_matches_its_textbook_formula():
    torch.manual_seed(3)
    ref = LabHead(4, 3, proj_values=True)
    torch.manual_seed(3)
    ours = Attention(4, input_dim=3, proj_values=True)
    keys, query = torch.randn(2, 5, 3), torch.randn(2, 1, 3)
    ours.init_keys(keys)
    torch.testing.assert_close(ours(query), ref(query, keys), atol=1e-6, rtol=0)
    torch.testing.assert_close(ours.alphas, ref.alphas, atol=1e-6, rtol=0)
    assert ours.attn_weights.shape == (2, 1, 1, 5)


def test_construction_draws_exactly_what_the_labs_draw():
    # Modules created after the attention layer (FFN, cross-attention) must start from the
    # labs' weights too, so the RNG must be left where the per-head modules leave it.
    torch.manual_seed(7)
    LabMultiHead(3, 2, 2)
    after_theirs = torch.rand(4)
    torch.manual_seed(7)
    MultiHeadAttention(3, 2, input_dim=2, head_dim=2)
    torch.testing.assert_close(torch.rand(4), after_theirs, atol=0, rtol=0)


def test_weights_are_forgotten_outside_recording():
    mha = MultiHeadAttention(2, 4)
    x = torch.randn(1, 3, 4)
    with record_attention():
        mha(x, x, x)
    mha(x, x, x)
    assert mha.attn_weights is None and collect_attention(mha) == {}


# -- bias-free projections, scale, additive bias, key_padding_mask, declared self-attention ---------


def formula(mha, x, kv=None, *, mask=None, bias=None, scale=None):
    """Float64 multi-head attention (Vaswani et al. 2017, §3.2.2) from the module's weights, not its outputs."""
    kv = x if kv is None else kv
    H, Dh = mha.n_heads, mha.head_dim
    w = mha.in_proj.weight.double().split(H * Dh)  # q | k | v rows
    b = [None] * 3 if mha.in_proj.bias is None else mha.in_proj.bias.double().split(H * Dh)

    def heads(t, i):
        y = t.double() @ w[i].T + (0 if b[i] is None else b[i])  # [B, L, H * Dh]
        return y.view(t.shape[0], t.shape[1], H, Dh).transpose(1, 2)  # [B, H, L, Dh]

    q, k, v = heads(x, 0), heads(kv, 1), heads(kv, 2)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(Dh) if scale is None else scale)  # [B, H, T, S]
    if bias is not None:
        s = s + bias.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    ctx = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], H * Dh)  # [B, T, H * Dh]
    out = ctx @ mha.linear_out.weight.double().T
    return out if mha.linear_out.bias is None else out + mha.linear_out.bias.double()


def padded(B=3, S=7):
    """torch's key_padding_mask [B, S], True = padding: sequence 1 has 4 real steps, sequence 2 has 2."""
    kpm = torch.zeros(B, S, dtype=torch.bool)
    kpm[1, 4:] = True
    kpm[2, 2:] = True
    return kpm


def test_bias_false_has_no_bias_anywhere_and_copies_a_bias_free_torch_module():
    ours = MultiHeadAttention(4, 16, bias=False)
    assert ours.in_proj.bias is None and ours.linear_out.bias is None
    assert not [name for name, _ in ours.named_parameters() if "bias" in name]
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(ours(x).double(), formula(ours, x), atol=1e-6, rtol=0)
    theirs = nn.MultiheadAttention(16, 4, bias=False, batch_first=True).eval()
    copied = MultiHeadAttention.from_torch(theirs).eval()
    assert copied.in_proj.bias is None and copied.linear_out.bias is None
    x, kpm = torch.randn(3, 7, 16), padded()
    expected = theirs(x, x, x, key_padding_mask=kpm, need_weights=False)[0]
    like_torch, _ = forward_like_torch(copied, x, x, x, key_padding_mask=kpm)
    torch.testing.assert_close(like_torch, expected, atol=1e-5, rtol=0)


def test_scale_multiplies_q_dot_k_as_written():
    ours = MultiHeadAttention(2, 8, scale=1.0)  # T5's unscaled attention
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(ours(x).double(), formula(ours, x, scale=1.0), atol=1e-6, rtol=0)
    explicit, _ = ours(x, need_weights=True)
    torch.testing.assert_close(explicit.double(), formula(ours, x, scale=1.0), atol=1e-6, rtol=0)
    assert not torch.allclose(ours(x).double(), formula(ours, x), atol=1e-4)  # the default 1/sqrt(Dh) differs


@pytest.mark.parametrize("with_mask", [False, True])
def test_bias_and_key_padding_mask_equal_the_formula_and_nn_multiheadattention(with_mask):
    theirs = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(theirs).eval()
    B, T, H = 3, 7, 4
    x, kpm, bias = torch.randn(B, T, 16), padded(), torch.randn(H, T, T)
    mask = causal_mask(T) if with_mask else None
    allowed = ~kpm[:, None, None, :] if mask is None else ~kpm[:, None, None, :] & mask  # [B, 1, T, S]
    torch_mask = bias.expand(B, H, T, T).reshape(B * H, T, T)  # torch: additive [B * H, T, S], batch-major
    if mask is not None:
        torch_mask = torch_mask.masked_fill(~mask, float("-inf"))
    float_kpm = torch.zeros(B, T).masked_fill(kpm, float("-inf"))  # same kind as attn_mask (no warning)
    expected, expected_w = theirs(x, x, x, key_padding_mask=float_kpm, attn_mask=torch_mask, average_attn_weights=False)
    ours_mask = from_key_padding_mask(kpm, batch=B, n_keys=T)  # [B, 1, 1, S], True = may attend
    ours_mask = ours_mask if mask is None else ours_mask & mask
    got = ours(x, bias=bias, mask=ours_mask)
    explicit, w = ours(x, x, x, bias=bias, mask=ours_mask, need_weights=True)
    torch.testing.assert_close(got.double(), formula(ours, x, mask=allowed, bias=bias), atol=1e-5, rtol=0)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(explicit, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, expected_w, atol=1e-5, rtol=0)
    # torch's own call, masks in torch's polarity, through the one boundary that converts them
    like_torch, like_w = forward_like_torch(ours, x, x, x, key_padding_mask=kpm, attn_mask=torch_mask,
                                            average_attn_weights=False)
    torch.testing.assert_close(like_torch, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(like_w, expected_w, atol=1e-5, rtol=0)


def test_key_padding_mask_is_not_the_mask_when_batch_equals_queries():
    # The case: B == T, so torch's [B, S] padding mask also has the shape of a [T, S] mask.
    ours = MultiHeadAttention(2, 8)
    x, kpm = torch.randn(3, 3, 8), padded(B=3, S=3)
    right = forward_like_torch(ours, x, x, x, key_padding_mask=kpm, need_weights=False)[0]
    torch.testing.assert_close(right.double(), formula(ours, x, mask=~kpm[:, None, None, :]), atol=1e-6, rtol=0)
    assert not torch.allclose(right, ours(x, mask=kpm))  # as a [T, S] mask it means something else


@pytest.mark.parametrize("scheme", ["alibi", "rotary"])
def test_self_attention_is_the_call_without_key_not_inferred_from_identity(scheme):
    from attnlab.encodings import ALiBi, Rotary

    torch.manual_seed(6)
    mha = MultiHeadAttention(4, 16, position=ALiBi(4) if scheme == "alibi" else Rotary(4)).eval()
    x = torch.randn(2, 5, 16)
    expected = mha(x)  # no key: self-attention
    plain = MultiHeadAttention(4, 16).eval()
    plain.load_state_dict(mha.state_dict(), strict=False)
    for got in (mha(x, is_causal=False), mha(x.clone())):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    assert not torch.allclose(plain(x), expected, atol=1e-4)  # the scheme acts: self-attention it was
    # any key, even the query itself, is cross-attention: no position scheme there
    for key in (x, x.clone()):
        with pytest.raises(ValueError, match=r"position scheme .* self-attention only.*mha\(x\), without key"):
            mha(x, key, key)


def test_a_cross_attention_cache_is_filled_by_the_first_step_and_passed_the_same_memory_after():
    mha = MultiHeadAttention(2, 8)
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    cross = mha(x, memory, memory)
    cache = KVCache()
    torch.testing.assert_close(mha(x, memory, cache=cache), cross)  # first step: the memory's keys are stored
    assert cache.stored and len(cache) == 5
    with torch.no_grad():
        mha.in_proj.weight[8:].mul_(2.0)  # re-projecting the memory would now give other keys and values
    torch.testing.assert_close(mha(x, memory, cache=cache), cross)  # later steps: the stored projection
    torch.testing.assert_close(mha(x, memory[:, :], cache=cache), cross)  # a view of the same memory too
    with pytest.raises(ValueError, match="holds the projection of another key.*reset"):
        mha(x, memory.clone(), cache=cache)  # other states: never the stale keys without a word
    with pytest.raises(ValueError, match="self-attention with a cache holding cross-attention keys"):
        mha(x, cache=cache)  # no key: self-attention, which must not append to the memory's keys
    steps = KVCache()
    mha(x, cache=steps)  # self-attention: appended
    with pytest.raises(ValueError, match="cross-attention .* with a cache holding self-attention steps"):
        mha(x, memory, cache=steps)


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(key_padding_mask=torch.zeros(3, 6, dtype=torch.bool)), ValueError,
     r"key_padding_mask must have shape \[B, S\] = \[3, 7\], got \[3, 6\]"),
    (dict(key_padding_mask=torch.zeros(7, dtype=torch.bool)), ValueError,
     r"key_padding_mask must have shape \[B, S\] = \[3, 7\], got \[7\]"),
    (dict(key_padding_mask=torch.zeros(3, 7, dtype=torch.int64)), TypeError,
     r"key_padding_mask must be a boolean tensor \[B, S\], True = padding .* got torch.int64"),
    (dict(bias=torch.zeros(3, 7, 6)), ValueError, r"bias of shape \[3, 7, 6\] does not broadcast to .*\[3, 4, 7, 7\]"),
    (dict(bias=torch.zeros(4, 7, 7, dtype=torch.bool)), TypeError, "bias must be a floating-point tensor"),
    (dict(mask=torch.ones(3, 7, dtype=torch.bool), query=torch.randn(3, 5, 16), key=torch.randn(3, 7, 16)), ValueError,
     r"a 2-d mask is \[T, S\] = \[5, 7\] .* got \[3, 7\]; a key-padding mask \[B, S\] goes to key_padding_mask="),
    (dict(value=torch.randn(3, 6, 16)), ValueError, r"value given without key: self-attention is mha\(query\)"),
    (dict(key=torch.randn(3, 6, 15)), ValueError, r"key must have shape \[B, L, 16\], got \[3, 6, 15\]"),
    (dict(key=torch.ones(3, 1, 7, dtype=torch.bool)), TypeError,
     r"key is a boolean tensor: a mask goes to mask=.*LabMultiHeadAttention"),  # the labs' mha(query, mask)
])
def test_bad_masks_bias_and_keys_name_the_value(kwargs, error, match):
    mha = MultiHeadAttention(4, 16)
    query = kwargs.pop("query", torch.randn(3, 7, 16))
    with pytest.raises(error, match=match):
        if "key_padding_mask" in kwargs:  # torch's polarity: only through the boundary that converts it
            forward_like_torch(mha, query, query, query, **kwargs)
        else:
            mha(query, **kwargs)


@pytest.mark.bad_input("numbers")
def test_bad_scale_and_a_cross_cache_in_self_attention_are_refused():
    with pytest.raises(ValueError, match="scale must be positive, got 0.0"):
        MultiHeadAttention(2, 8, scale=0)
    with pytest.raises(TypeError, match="bias must be True or False, got 'no'"):
        MultiHeadAttention(2, 8, bias="no")
    cache, x = KVCache(), torch.randn(1, 2, 8)
    cache.store(torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match="self-attention with a cache holding cross-attention keys"):
        MultiHeadAttention(2, 8)(x, cache=cache)
