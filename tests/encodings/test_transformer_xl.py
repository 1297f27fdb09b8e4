"""Transformer-XL's relative encoding against the reference code's computation, written out in float64.

The reference is Ruoss et al. 2023's (google-deepmind/randomized_positional_encodings,
models/positional_encodings.py: sinusoid_position_encoding, _rel_shift_inner,
compute_attention_with_relative_encodings; models/transformer.py: the 1 / sqrt(Dh) after the sum).
Here it is restated in torch, float64, step by step (the [-L, L) table, hk.Linear's x @ W,
the rel-shift by reshapes), and the scheme must give its logits.
"""

import math

import numpy as np
import pytest
import torch

from attnlab.attention import DecodingCache, MultiHeadAttention
from attnlab.attention.backends.choose import attend_with_position
from attnlab.encodings import RandomizedPositions
from attnlab.encodings.registry import attention_position
from attnlab.encodings.transformer_xl import TransformerXLRelative, relative_sinusoids
from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer

B, H, DH = 2, 3, 4
W = H * DH


def scheme(seed=0):
    """A float64 scheme with u, v and W_R moved well off their small initial values."""
    torch.manual_seed(seed)
    txl = TransformerXLRelative(H, DH).double()
    with torch.no_grad():
        for p in txl.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return txl


def reference_sinusoids(length, width, *, negative, base=1e4):
    """sinusoid_position_encoding: rows for positions -L .. L-1 (negative) or 0 .. L-1, [sin | cos]."""
    freqs = np.arange(0, width, 2)
    inv_freq = base ** (-freqs / width)
    pos_seq = np.arange(-length if negative else 0, length)
    inp = np.einsum("i,j->ij", pos_seq, inv_freq)
    return torch.from_numpy(np.concatenate([np.sin(inp), np.cos(inp)], axis=-1))  # [2L or L, W] float64


def rel_shift_inner(logits, attention_length):
    """_rel_shift_inner on one [T_q, T_v + T_q] matrix: reshape, drop a row, reshape, keep T_v columns."""
    tq, total = logits.shape
    assert total == tq + attention_length
    x = logits.reshape(total, tq)[1:]
    return x.reshape(tq, total - 1)[:, :attention_length]


def reference_logits(txl, q, k):
    """compute_attention_with_relative_encodings (bidirectional) then the 1 / sqrt(Dh): [B, H, T, T].

    q, k are attnlab's [B, H, T, Dh]; the reference's are [b, t, h, d].
    """
    u, v = txl.content_bias, txl.relative_bias
    qr, kr = q.transpose(1, 2), k.transpose(1, 2)  # [b, t, h, d]
    b, t, h, d = kr.shape
    content = torch.einsum("bthd,bThd->bhtT", qr + u, kr)
    pe = reference_sinusoids(t, h * d, negative=True)  # [2T, W]
    relative_keys = (pe @ txl.relative_proj.weight.T).reshape(2 * t, h, d)  # hk.Linear: x @ W, W = weight.T
    relative = torch.einsum("bthd,Thd->bhtT", qr + v, relative_keys)  # [b, h, t, 2t]
    shifted = torch.stack([torch.stack([rel_shift_inner(relative[i, j], t) for j in range(h)]) for i in range(b)])
    return (content + shifted) / math.sqrt(d)


def ours(txl, q, k, **kw):
    """The scores attention forms: q . k / sqrt(Dh) plus the scheme's term."""
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + txl.bias(q, k.shape[-2], k=k, **kw)


def loop_term(txl, q, k, rel):
    """The term of the paper's formula by explicit loops: (u . k_j + (q_i + v) . W_R R_{rel_ij}) / sqrt(Dh)."""
    T, S = rel.shape[-2:]
    u, v = txl.content_bias, txl.relative_bias
    out = torch.zeros(q.shape[0], H, T, S, dtype=torch.float64)
    for i in range(T):
        for j in range(S):
            d = int(rel[i, j])
            angles = [d * 1e4 ** (-2 * c / W) for c in range(W // 2)]
            r = torch.tensor([math.sin(a) for a in angles] + [math.cos(a) for a in angles], dtype=torch.float64)
            wr = (txl.relative_proj.weight @ r).view(H, DH)  # [H, Dh]
            for b in range(q.shape[0]):
                for h in range(H):
                    out[b, h, i, j] = (u[h] @ k[b, h, j] + (q[b, h, i] + v[h]) @ wr[h]) / math.sqrt(DH)
    return out


def test_bidirectional_scores_are_the_reference_rel_shift():
    txl = scheme()
    torch.manual_seed(1)
    q, k = torch.randn(B, H, 6, DH, dtype=torch.float64), torch.randn(B, H, 6, DH, dtype=torch.float64)
    torch.testing.assert_close(ours(txl, q, k), reference_logits(txl, q, k), atol=1e-12, rtol=0)


def test_the_rel_shift_puts_key_minus_query_in_place():
    # The reference's docstring example: rows of positions -3 .. 2 shift to j - i.
    logits = torch.arange(-3, 3).repeat(3, 1)
    assert rel_shift_inner(logits, 3).tolist() == [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]


def test_gradients_reach_u_v_and_w_r_as_the_reference_s():
    txl = scheme()
    ref = scheme()  # the same parameters, its own graph
    torch.manual_seed(2)
    q = torch.randn(B, H, 5, DH, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, H, 5, DH, dtype=torch.float64, requires_grad=True)
    g = torch.randn(B, H, 5, 5, dtype=torch.float64)
    got_q, got_k = torch.autograd.grad((ours(txl, q, k) * g).sum(), [q, k], retain_graph=False)
    (ours(txl, q, k) * g).sum().backward()
    want = reference_logits(ref, q, k)
    want_q, want_k = torch.autograd.grad((want * g).sum(), [q, k], retain_graph=True)
    (want * g).sum().backward()
    for name in ("content_bias", "relative_bias", "relative_proj.weight"):
        mine, theirs = txl.get_parameter(name).grad, ref.get_parameter(name).grad
        assert mine is not None and float(mine.abs().max()) > 0, name
        torch.testing.assert_close(mine, theirs, atol=1e-11, rtol=0)
    torch.testing.assert_close(got_q, want_q, atol=1e-11, rtol=0)
    torch.testing.assert_close(got_k, want_k, atol=1e-11, rtol=0)


@pytest.mark.parametrize(("T", "S", "q_offset", "k_offset"), [(4, 4, 0, 0), (2, 6, 4, 0), (5, 3, 0, 7)])
def test_the_term_is_the_formula_at_any_offsets(T, S, q_offset, k_offset):
    txl = scheme()
    torch.manual_seed(3)
    q, k = torch.randn(B, H, T, DH, dtype=torch.float64), torch.randn(B, H, S, DH, dtype=torch.float64)
    rel = (torch.arange(S)[None, :] + k_offset) - (torch.arange(T)[:, None] + q_offset)
    with torch.no_grad():
        got = txl.bias(q, S, q_offset=q_offset, k_offset=k_offset, k=k)
        torch.testing.assert_close(got, loop_term(txl, q, k, rel), atol=1e-12, rtol=0)


def test_the_position_term_is_shift_invariant():
    txl = scheme()
    torch.manual_seed(4)
    q, k = torch.randn(B, H, 4, DH, dtype=torch.float64), torch.randn(B, H, 7, DH, dtype=torch.float64)
    with torch.no_grad():
        base = txl.bias(q, 7, q_offset=3, k_offset=0, k=k)
        for shift in (1, 50, 10_000):
            torch.testing.assert_close(txl.bias(q, 7, q_offset=3 + shift, k_offset=shift, k=k), base,
                                       atol=1e-10, rtol=0)
        # and another offset pair is another term (the positions matter)
        assert not torch.allclose(txl.bias(q, 7, q_offset=4, k_offset=0, k=k), base)


def test_distances_both_sides_are_distinct():
    # Bidirectional: the key one step right of the query and the one step left get different terms.
    txl = scheme()
    q = torch.zeros(1, H, 1, DH, dtype=torch.float64)
    k = torch.zeros(1, H, 3, DH, dtype=torch.float64)
    with torch.no_grad():
        term = txl.bias(q, 3, q_offset=1, k=k)[0, :, 0]  # [H, 3]: distances -1, 0, +1
    assert not torch.allclose(term[:, 0], term[:, 2])


@pytest.mark.parametrize("causal", [False, True])
def test_attention_output_is_the_loop_formula(causal):
    torch.manual_seed(5)
    mha = MultiHeadAttention(H, W, position=TransformerXLRelative(H, DH), backend="dense").double()
    x = torch.randn(B, 6, W, dtype=torch.float64)
    with torch.no_grad():
        for p in mha.position.parameters():
            p.add_(0.5 * torch.randn_like(p))
        got = mha(x, is_causal=causal)
        qkv = x @ mha.in_proj.weight.T + mha.in_proj.bias  # [B, L, 3W]: rows q | k | v
        q, k, v = (t.view(B, 6, H, DH).transpose(1, 2) for t in qkv.split(W, dim=-1))  # [B, H, L, Dh] each
        rel = torch.arange(6)[None, :] - torch.arange(6)[:, None]
        scores = q @ k.transpose(-1, -2) / math.sqrt(DH) + loop_term(mha.position, q, k, rel)
        if causal:
            scores = scores.masked_fill(rel > 0, float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, 6, W)
        want = mha.linear_out(out)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_path_equals_dense_with_gradients(causal):
    txl = scheme()
    torch.manual_seed(6)
    T = 9
    q, k, v = (torch.randn(B, H, T, DH, dtype=torch.float64, requires_grad=True) for _ in range(3))
    outs, grads = [], []
    for backend in ("dense", "chunked"):
        txl.zero_grad()
        out, _ = attend_with_position(q, k, v, position=txl, backend=backend, q_offset=0, mask=None, bias=None,
                                      is_causal=causal, scale=None, dropout_p=0.0, need_weights=False)
        g = torch.autograd.grad(out.square().sum(), [q, k, v, *txl.parameters()])
        outs.append(out.detach())
        grads.append(g)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-12, rtol=0)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=0)


def test_flex_is_refused_by_name():
    txl = scheme()
    q = torch.randn(1, H, 4, DH, dtype=torch.float64)
    with pytest.raises(ValueError, match="TransformerXLRelative has no score_mod"):
        attend_with_position(q, q, q, position=txl, backend="flex", q_offset=0, mask=None, bias=None,
                             is_causal=True, scale=None, dropout_p=0.0, need_weights=False)


def test_randomized_distances_give_the_formula_at_the_drawn_distances():
    txl = scheme()
    rand = RandomizedPositions(txl, max_len=500, sample="distances")
    torch.manual_seed(7)
    q, k = torch.randn(B, H, 5, DH, dtype=torch.float64), torch.randn(B, H, 5, DH, dtype=torch.float64)
    with torch.no_grad():
        got = rand.bias(q, 5, k=k)
        d = torch.cat([torch.zeros(1, dtype=torch.long), rand.last_draw])  # d_0 = 0, d_1 < .. < d_4
        offset = torch.arange(5)[None, :] - torch.arange(5)[:, None]
        rel = offset.sign() * d[offset.abs()]  # +k -> +d_k, -k -> -d_k (Ruoss et al.'s NOISY_RELATIVE map)
        assert int(rel.abs().max()) > 5  # drawn from a longer range
        torch.testing.assert_close(got, loop_term(txl, q, k, rel), atol=1e-11, rtol=0)


def test_randomized_positions_give_the_formula_at_their_differences():
    txl = scheme()
    rand = RandomizedPositions(txl, max_len=300, sample="positions")
    torch.manual_seed(8)
    q, k = torch.randn(B, H, 4, DH, dtype=torch.float64), torch.randn(B, H, 4, DH, dtype=torch.float64)
    with torch.no_grad():
        got = rand.bias(q, 4, k=k)
        p = rand.last_draw  # [4] sorted positions of [0, 300)
        torch.testing.assert_close(got, loop_term(txl, q, k, p[None, :] - p[:, None]), atol=1e-11, rtol=0)


def test_random_transformer_xl_draws_distances_from_the_model_s_range():
    built = attention_position("random-transformer-xl", n_heads=H, head_dim=DH, causal=False, max_len=64)
    assert isinstance(built, RandomizedPositions) and built.sample == "distances" and built.max_len == 64
    assert isinstance(built.scheme, TransformerXLRelative) and not built.caches


def test_encoder_only_model_runs_and_trains_the_scheme():
    torch.manual_seed(9)
    model = EncoderOnlyTransformer(vocab_size=7, d_model=W, n_heads=H, n_layers=2, position="transformer-xl")
    x = torch.randint(0, 7, (B, 8))
    model(x).square().mean().backward()
    for layer in model.layers:
        scheme_ = layer.self_attn.position
        assert isinstance(scheme_, TransformerXLRelative)
        for p in scheme_.parameters():
            assert p.grad is not None and float(p.grad.abs().max()) > 0


@pytest.mark.parametrize("encoding", ["transformer-xl", "random-transformer-xl"])
def test_decoder_only_greedy_decoding_with_and_without_cache(encoding):
    torch.manual_seed(10)
    model = DecoderOnlyTransformer(vocab_size=9, d_model=W, n_heads=H, n_layers=2, position=encoding,
                                   max_len=64).double().eval()
    prompt = torch.randint(0, 9, (B, 5))
    if encoding.startswith("random-"):
        # A draw per call: no cache, and a fresh draw each time (the numbers differ from call to call).
        assert not model._caches(True)
        assert model.generate(prompt, steps=4).shape == (B, 4)
        return
    cached = model.generate(prompt, steps=6, use_cache=True)
    full = model.generate(prompt, steps=6, use_cache=False)
    assert torch.equal(cached, full)
    # and a cached step's logits are the full pass's
    seq = torch.cat([prompt, cached], dim=1)
    with torch.no_grad():
        whole = model(seq)
    cache = DecodingCache()
    with torch.no_grad():
        first = model(seq[:, :5], cache=cache)
        cache.advance(5)
        step = model(seq[:, 5:6], cache=cache)
    torch.testing.assert_close(first, whole[:, :5], atol=1e-12, rtol=0)
    torch.testing.assert_close(step, whole[:, 5:6], atol=1e-12, rtol=0)


def test_sinusoids_and_initialisation_are_the_reference_s():
    torch.testing.assert_close(relative_sinusoids(torch.arange(-5, 5), 8, dtype=torch.float64),
                               reference_sinusoids(5, 8, negative=True), atol=1e-15, rtol=0)
    torch.manual_seed(11)
    txl = TransformerXLRelative(8, 16)
    std = 1 / math.sqrt(128)
    w = txl.relative_proj.weight.detach()
    assert float(w.abs().max()) <= 2 * std and abs(float(w.std()) / std - 0.88) < 0.05  # cut at 2 std: 0.88 std
    for p in (txl.content_bias, txl.relative_bias):
        assert p.shape == (8, 16) and abs(float(p.detach().std()) - 0.02) < 0.004


def test_half_precision_queries_get_a_float32_term():
    txl = TransformerXLRelative(H, DH)
    q = torch.randn(1, H, 3, DH).to(torch.bfloat16)
    assert txl.bias(q, 3, k=q).dtype == torch.float32


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: TransformerXLRelative(1, 3), ValueError, "n_heads \\* head_dim must be even"),
    (lambda: TransformerXLRelative(0, 4), ValueError, "n_heads"),
    (lambda: TransformerXLRelative(2, 4, base=0.0), ValueError, "base"),
    (lambda: TransformerXLRelative(H, DH).bias(torch.zeros(1, H, 2, DH), 2), ValueError, "k must be given"),
    (lambda: TransformerXLRelative(H, DH).bias(torch.zeros(1, H, 2, DH), 3, k=torch.zeros(1, H, 2, DH)),
     ValueError, "S = 3 keys"),
    (lambda: TransformerXLRelative(H, DH).bias(torch.zeros(1, 2, 2, DH), 2, k=torch.zeros(1, 2, 2, DH)),
     ValueError, "n_heads = 3"),
    (lambda: relative_sinusoids(torch.zeros(2), 4), TypeError, "integer"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
