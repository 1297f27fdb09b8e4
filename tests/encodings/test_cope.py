"""CoPE against the paper's reference forward re-typed here in float64 (and the authors'
training-code variant), against x-transformers' CoPE, in attention (causal masking,
cached decoding, gradients), under the position audit, and on its bad inputs."""

import math

import pytest
import torch
from torch.testing import assert_close

from attnlab.analysis.position_audit import audit_position
from attnlab.attention import KVCache, MultiHeadAttention, attend
from attnlab.encodings.cope import CoPE
from attnlab.encodings.scheme import PositionScheme

# --- the reference, re-typed from the paper's appendix (Golovneva et al. 2024) ---------------------
# query/key/val are [N, L, Dh] with the heads folded into N, mask [T, S] 0/1 (1 = may attend);
# pos_emb [1, Dh, npos_max]. Plain torch, float64 in every test below.


def paper_cope_term(query, attn_logits, pos_emb, npos_max):
    """The paper's CoPE.forward: the term added to the (scaled, masked) attention logits."""
    gates = torch.sigmoid(attn_logits)
    pos = gates.flip(-1).cumsum(dim=-1).flip(-1)
    pos = pos.clamp(max=npos_max - 1)
    pos_ceil = pos.ceil().long()
    pos_floor = pos.floor().long()
    logits_int = torch.matmul(query, pos_emb)
    logits_ceil = logits_int.gather(-1, pos_ceil)
    logits_floor = logits_int.gather(-1, pos_floor)
    w = pos - pos_floor
    return logits_ceil * w + logits_floor * (1 - w)


def paper_self_attn(query, key, val, mask, pos_emb, npos_max):
    """The paper's SelfAttn.forward; returns the output and the CoPE term."""
    attn_logits = torch.bmm(query, key.transpose(-1, -2)) / math.sqrt(query.shape[-1])
    attn_logits = attn_logits + mask.log()
    term = paper_cope_term(query, attn_logits, pos_emb, npos_max)
    attn = torch.softmax(attn_logits + term, dim=-1)
    return torch.bmm(attn, val), term


def ram_self_attn(query, key, val, mask, pos_emb, npos_max):
    """The authors' training code (facebookresearch/RAM projects/cope, default, without --cope-nodiv):
    gates on q.k / sqrt(Dh) times the mask, and (q.k + position logits) / sqrt(Dh) as the logits."""
    d = query.shape[-1]
    gate_logits = torch.bmm(query, key.transpose(-1, -2))
    gates = torch.sigmoid(gate_logits / math.sqrt(d)) * mask
    positions = gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=npos_max - 1)
    fixed = torch.matmul(query, pos_emb)
    ceil_w = positions - positions.floor().long()
    pos_logits = fixed.gather(-1, positions.ceil().long()) * ceil_w + fixed.gather(
        -1, positions.floor().long()) * (1 - ceil_w)
    attn_logits = (gate_logits + pos_logits) / math.sqrt(d) + mask.log()
    return torch.bmm(torch.softmax(attn_logits, dim=-1), val)


def causal01(T, S, dtype=torch.float64):
    """Bottom-right causal 0/1 mask [T, S]: query i sits at position S - T + i."""
    return (torch.arange(S)[None, :] <= torch.arange(S - T, S)[:, None]).to(dtype)


def fold(x):
    return x.flatten(0, 1)  # [B, H, L, Dh] -> [B * H, L, Dh]


def random_cope(head_dim, npos_max, n_heads=None, *, divide_bias=False, seed=0, std=1.0):
    cope = CoPE(head_dim, npos_max=npos_max, n_heads=n_heads, divide_bias=divide_bias)
    with torch.no_grad():
        cope.pos_emb.normal_(0.0, std, generator=torch.Generator().manual_seed(seed))
    return cope


CASES = [
    # (B, H, T, S, Dh, npos_max, n_heads): T < S puts the queries last, as after a cache
    (1, 1, 4, 4, 2, 3, None),
    (2, 3, 7, 7, 8, 4, None),  # positions reach the clamp
    (2, 2, 3, 9, 4, 16, None),
    (1, 4, 12, 12, 16, 64, None),
    (2, 3, 6, 6, 8, 5, 3),  # one table per head
]


@pytest.mark.parametrize(("B", "H", "T", "S", "Dh", "P", "n_heads"), CASES)
def test_bias_and_attention_match_the_papers_forward(B, H, T, S, Dh, P, n_heads):
    torch.manual_seed(1)
    cope = random_cope(Dh, P, n_heads).double()
    q, k, v = (torch.randn(B, H, L, Dh, dtype=torch.float64) * 2 for L in (T, S, S))
    bias = cope.bias(q, S, q_offset=S - T, k_offset=0, k=k)  # [B, H, T, S]
    assert bias.shape == (B, H, T, S) and bias.dtype == torch.float64
    mask = causal01(T, S)
    if n_heads is None:  # one pos_emb for every head: the reference's one module per layer
        want_out, want_term = paper_self_attn(fold(q), fold(k), fold(v), mask, cope.pos_emb.detach()[None], P)
        want_out, want_term = want_out.view(B, H, T, Dh), want_term.view(B, H, T, S)
    else:  # a module per head
        pairs = [paper_self_attn(q[:, h], k[:, h], v[:, h], mask, cope.pos_emb.detach()[h][None], P) for h in range(H)]
        want_out = torch.stack([o for o, _ in pairs], dim=1)
        want_term = torch.stack([t for _, t in pairs], dim=1)
    assert_close(bias, want_term, atol=1e-12, rtol=1e-12)  # every entry, the masked ones too
    out, _ = attend(q, k, v, bias=bias, is_causal=True)
    assert_close(out, want_out, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(("T", "S"), [(5, 5), (2, 6)])
def test_divide_bias_is_the_authors_training_code(T, S):
    torch.manual_seed(2)
    cope = random_cope(8, 6, divide_bias=True).double()
    q, k, v = (torch.randn(2, 2, L, 8, dtype=torch.float64) for L in (T, S, S))
    out, _ = attend(q, k, v, bias=cope.bias(q, S, q_offset=S - T, k=k), is_causal=True)
    want = ram_self_attn(fold(q), fold(k), fold(v), causal01(T, S), cope.pos_emb.detach()[None], 6)
    assert_close(out, want.view(2, 2, T, 8), atol=1e-12, rtol=1e-12)
    # and the default (the appendix) is a different model for the same weights
    same_weights = random_cope(8, 6).double()  # the same pos_emb (same seed), divide_bias=False
    plain, _ = attend(q, k, v, bias=same_weights.bias(q, S, q_offset=S - T, k=k), is_causal=True)
    assert (plain - out).abs().max() > 1e-3


def test_counted_positions_are_sums_of_gates():
    # With q @ pos_emb = [0, 1, 2, ...] the bias *is* the counted position, clamped: check it by hand.
    cope = CoPE(2, npos_max=4).double()
    with torch.no_grad():
        cope.pos_emb[0] = torch.arange(4.0)
    q = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 1, 5, 2)
    k = torch.randn(1, 1, 5, 2, dtype=torch.float64) * 3
    bias = cope.bias(q, 5, k=k)[0, 0]  # [T, S]
    gates = torch.sigmoid(k[0, 0, :, 0] / math.sqrt(2))  # [S]: q . k_t / sqrt(2), the same for every query
    for i in range(5):
        for j in range(5):
            want = min(gates[j : i + 1].sum().item(), 3.0) if j <= i else 0.0
            assert math.isclose(bias[i, j].item(), want, abs_tol=1e-14)


def test_is_a_learned_position_scheme_that_needs_keys():
    cope = CoPE(8)
    assert isinstance(cope, PositionScheme) and cope.reads_keys and cope.caches
    assert cope.max_len is None and not cope.adds_value
    assert [n for n, _ in cope.named_parameters()] == ["pos_emb"] and cope.pos_emb.shape == (8, 64)
    assert CoPE(8, npos_max=5, n_heads=3).pos_emb.shape == (3, 8, 5)
    # zeros at first, as in the paper: a new CoPE adds nothing
    q = torch.randn(2, 2, 3, 8)
    assert torch.equal(cope.bias(q, 3, k=q), torch.zeros(2, 2, 3, 3))
    assert cope.bias(q.half(), 3, k=q.half()).dtype == torch.float32  # half queries: float32 bias
    assert all(t is q for t in cope.rotate(q, q)) and cope.value_term(torch.ones(1, 2, 3, 3)) is None
    assert "npos_max=64" in repr(cope)


def test_scores_are_contextual_not_offset_only():
    # Same offsets, different content: key j counts for query i only as much as its gate. Keys pointing
    # along the query get gate ~1, keys pointing away ~0, so the counted distance back along a diagonal
    # i - j = 2 changes with what lies between.
    cope = CoPE(2, npos_max=8).double()
    with torch.no_grad():
        cope.pos_emb[0] = torch.arange(8.0)  # bias = counted position
    q = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 1, 6, 2)
    signs = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    k = torch.zeros(1, 1, 6, 2, dtype=torch.float64)
    k[0, 0, :, 0] = 40 * signs  # gates sigmoid(+-28): 1 or 0 to 1e-12
    bias = cope.bias(q, 6, k=k)[0, 0]
    diagonal = torch.stack([bias[i, i - 2] for i in range(2, 6)])  # score(i, i - 2): gates i - 2 .. i summed
    # gates 1, 0, 0, 1, 1, 1: (1+0+0, 0+0+1, 0+1+1, 1+1+1); a relative scheme would give one value
    assert_close(diagonal, torch.tensor([1.0, 1.0, 2.0, 3.0], dtype=torch.float64), atol=1e-9, rtol=0)


# --- in attention -----------------------------------------------------------------------------


def make_mha(head_dim=8, n_heads=2, npos_max=6):
    torch.manual_seed(0)
    cope = random_cope(head_dim, npos_max, seed=3)
    return MultiHeadAttention(n_heads, n_heads * head_dim, position=cope).eval()


def test_causal_output_does_not_see_later_tokens():
    mha = make_mha()
    x = torch.randn(2, 9, 16)
    y = x.clone()
    y[:, 5:] = torch.randn(2, 4, 16)
    with torch.no_grad():
        out_x, out_y = mha(x, is_causal=True), mha(y, is_causal=True)
    assert_close(out_y[:, :5], out_x[:, :5], atol=1e-6, rtol=0)
    assert (out_y[:, 5:] - out_x[:, 5:]).abs().max() > 1e-2


@pytest.mark.parametrize("npos_max", [3, 64])
def test_cached_decoding_equals_the_full_pass(npos_max):
    mha = make_mha(npos_max=npos_max)
    x = torch.randn(2, 16, 16)
    with torch.no_grad():
        full = mha(x, is_causal=True)  # [B, L, D]
        cache, steps = KVCache(), []
        for t in range(16):
            step = x[:, t : t + 1]
            steps.append(mha(step, is_causal=True, cache=cache))
        cache, chunks = KVCache(), []
        for t in range(0, 16, 3):
            chunk = x[:, t : t + 3]
            chunks.append(mha(chunk, is_causal=True, cache=cache))
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=0)
    # CoPE changed the output: without it the same weights give something else
    mha.position = None
    with torch.no_grad():
        assert (mha(x, is_causal=True) - full).abs().max() > 1e-3


def test_gradients_reach_pos_emb_and_match_the_reference():
    mha = make_mha()
    x = torch.randn(2, 7, 16)
    mha(x, is_causal=True).square().sum().backward()
    assert mha.position.pos_emb.grad is not None and mha.position.pos_emb.grad.abs().max() > 0
    # in float64, the gradients of the bias against those of the paper's forward
    cope = random_cope(4, 5).double()
    q = torch.randn(2, 3, 6, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 6, 4, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    (cope.bias(q, 6, k=k) * weights).sum().backward()
    q2, k2 = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    emb2 = cope.pos_emb.detach()[None].clone().requires_grad_()
    logits = fold(q2) @ fold(k2).transpose(-1, -2) / 2.0 + causal01(6, 6).log()
    (paper_cope_term(fold(q2), logits, emb2, 5).view(2, 3, 6, 6) * weights).sum().backward()
    assert_close(cope.pos_emb.grad, emb2.grad[0], atol=1e-12, rtol=1e-12)
    assert_close(q.grad, q2.grad, atol=1e-12, rtol=1e-12)
    assert_close(k.grad, k2.grad, atol=1e-12, rtol=1e-12)


def test_gradcheck_float64():
    cope = random_cope(3, 4).double()
    del cope.pos_emb  # a plain tensor in its place, so that gradcheck can perturb it

    def f(q, k, emb):
        cope.pos_emb = emb
        return cope.bias(q, 4, q_offset=1, k=k)

    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 3, 3, dtype=torch.float64, generator=gen).requires_grad_()
    k = torch.randn(1, 2, 4, 3, dtype=torch.float64, generator=gen).requires_grad_()
    emb = torch.randn(3, 4, dtype=torch.float64, generator=gen).requires_grad_()
    assert torch.autograd.gradcheck(f, (q, k, emb))


# --- against x-transformers' CoPE (its Appendix-B port; pos_emb stored [npos_max, Dh]) ---------------


@pytest.mark.parametrize(("T", "S", "P"), [(6, 6, 4), (3, 8, 16), (10, 10, 64)])
def test_matches_x_transformers(T, S, P):
    x_transformers = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(4)
    ours = random_cope(8, P)
    theirs = x_transformers.CoPE(dim=8, heads=2, max_pos=P)
    with torch.no_grad():
        theirs.pos_emb.copy_(ours.pos_emb.T)
    q, k = torch.randn(2, 2, T, 8) * 2, torch.randn(2, 2, S, 8) * 2
    # their Attend: sim = q.k * Dh ** -0.5, causal (bottom-right) entries filled with -finfo.max, then cope(q, sim)
    sim = (q @ k.transpose(-1, -2)) * 8**-0.5
    sim = sim.masked_fill(~causal01(T, S, torch.bool), -torch.finfo(sim.dtype).max)
    want = theirs(q, sim)
    got = ours.bias(q, S, q_offset=S - T, k=k)
    assert_close(got, want, atol=2e-5, rtol=1e-5)
    assert want.abs().max() > 0.1  # a real comparison, not of two zero tensors


# --- the position audit -----------------------------------------------------------------------


def test_audit_verdicts():
    report = audit_position(random_cope(16, 8))
    verdicts = {c.name: c.verdict for c in report.checks}
    # offset_only passes, and rightly so for what it probes: the audit repeats ONE query vector and ONE key
    # vector at every position, so every gate is the same g = sigmoid(q.k / 4) and the counted distance of key
    # j from query i is (i - j + 1) g, a function of the offset. CoPE is contextual only when the content
    # varies (test_scores_are_contextual_not_offset_only). shift_invariant and offsets_consistent pass
    # because CoPE uses only the order of the positions (k_pos <= q_pos), never their values; no rotation,
    # so no norm to keep.
    assert verdicts == {"offset_only": "pass", "norm_preserved": "n/a", "shift_invariant": "pass",
                        "offsets_consistent": "pass"}
    assert "bias" in report["offset_only"].extra["uses"]
    # the order-only claim, exactly: moved by 1000 positions, the bias does not change by one bit
    cope, q, k = random_cope(8, 6), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    assert torch.equal(cope.bias(q, 5, k=k), cope.bias(q, 5, q_offset=1000, k_offset=1000, k=k))


# --- bad arguments: each error names the argument and the value -----------------------------------


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(head_dim=8, npos_max=1), ValueError, r"npos_max.*1"),
    (dict(head_dim=8, npos_max=0), ValueError, r"npos_max.*0"),
    (dict(head_dim=8, npos_max=4.0), TypeError, r"npos_max.*4\.0"),
    (dict(head_dim=0), ValueError, r"head_dim.*0"),
    (dict(head_dim=8, n_heads=0), ValueError, r"n_heads.*0"),
    (dict(head_dim=8, n_heads=2.5), TypeError, r"n_heads.*2\.5"),
    (dict(head_dim=8, divide_bias="yes"), TypeError, r"divide_bias.*'yes'"),
])
def test_bad_constructor_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        CoPE(**kwargs)


def test_bad_call_arguments():
    cope = CoPE(8, npos_max=4)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(TypeError, match=r"needs the keys.*k=None"):
        cope.bias(q, 4)
    with pytest.raises(ValueError, match=r"k must hold n_keys = 5 keys.*\[1, 2, 4, 8\]"):
        cope.bias(q, 5, k=q)
    with pytest.raises(ValueError, match=r"k must have head_dim = 8.*\[1, 2, 4, 6\]"):
        cope.bias(q, 4, k=torch.randn(1, 2, 4, 6))
    with pytest.raises(ValueError, match=r"k must have q's batch and heads \[1, 2\].*\[3, 2, 4, 8\]"):
        cope.bias(q, 4, k=torch.randn(3, 2, 4, 8))
    with pytest.raises(ValueError, match=r"k must be \[B, H, L, Dh\].*\[4, 8\]"):
        cope.bias(q, 4, k=torch.randn(4, 8))
    with pytest.raises(TypeError, match=r"k must be a floating-point tensor.*int64"):
        cope.bias(q, 4, k=torch.ones(1, 2, 4, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"q must have n_heads = 3.*\[1, 2, 4, 8\]"):
        CoPE(8, n_heads=3).bias(q, 4, k=q)
    with pytest.raises(ValueError, match=r"n_keys.*-1"):
        cope.bias(q, -1, k=q)
