"""MultiHeadAttention: parity with nn.MultiheadAttention, with the labs' per-head formulation, recording."""

import math

import pytest
import torch
from torch import nn

from attnlab.attention import (
    Attention,
    MultiHeadAttention,
    causal_mask,
    collect_attention,
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
    ours = MultiHeadAttention(n_heads, d_model, input_dim=input_dim, head_dim=d_model)
    x = torch.randn(4, 5, input_dim or d_model)
    mask = causal_mask(5).unsqueeze(0)  # [1, T, S], the labs' subsequent mask
    expected = theirs(x, x, mask)
    ours.init_keys(x)
    with record_attention():
        got = ours(x, mask)  # the labs' positional call
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    alphas = torch.stack([h.alphas for h in theirs.heads])  # [H, B, T, S]
    torch.testing.assert_close(ours.alphas, alphas, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours(x, x, x, mask=mask), expected, atol=1e-6, rtol=0)  # stateless
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
        (lambda: MultiHeadAttention(2, 8)(torch.randn(2, 3, 8)), RuntimeError, "init_keys"),
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
