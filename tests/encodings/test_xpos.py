"""xPos against the paper's formula written out here in float64, against
rotary-embedding-torch's xPos, in attention (causal masking, cached decoding),
under the position audit, and on its bad inputs."""

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from attnlab.analysis.position_audit import audit_position
from attnlab.attention import KVCache, MultiHeadAttention
from attnlab.encodings.scheme import PositionScheme
from attnlab.encodings.xpos import XPos, xpos_zeta


def pair_indices(k, d, convention):
    return (2 * k, 2 * k + 1) if convention == "interleaved" else (k, k + d // 2)


def reference_xpos(x, positions, *, sign, reference=0, scale_base=512.0, gamma=0.4, base=10000.0,
                   convention="interleaved"):
    """Float64 xPos of vectors x [..., L, d] at positions [L], one pair at a time (Sun et al. 2022, §3.2).

    Pair k turns by n * base ** (-2k / d) and is scaled by zeta_k ** (sign * (n - reference) / scale_base),
    zeta_k = (2k / d + gamma) / (1 + gamma); sign +1 for queries, -1 for keys.
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    n = np.asarray(positions, dtype=np.float64)  # [L]
    out = x.copy()
    for k in range(d // 2):
        theta = base ** (-2.0 * k / d)
        zeta = (2.0 * k / d + gamma) / (1.0 + gamma)
        s = zeta ** (sign * (n - reference) / scale_base)  # [L]
        c, sn = (np.cos(n * theta) * s)[:, None], (np.sin(n * theta) * s)[:, None]  # [L, 1]
        a, p = pair_indices(k, d, convention)
        xa, xp = x[..., a : a + 1], x[..., p : p + 1]  # [..., L, 1]
        out[..., a : a + 1] = xa * c - xp * sn
        out[..., p : p + 1] = xp * c + xa * sn
    return torch.from_numpy(out)


def reference_scores(q, k, q_positions, k_positions, *, scale_base=512.0, gamma=0.4, base=10000.0,
                     convention="interleaved"):
    """Float64 xPos scores q_n . k_m [..., T, S] in the paper's complex form, with no reference position at all:

    sum_k Re(zq_k conj(zk_k) e^{i (n - m) theta_k}) * zeta_k ** ((n - m) / scale_base), z_k = x_a + i x_p.
    """
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    d = q.shape[-1]
    rel = np.asarray(q_positions, np.float64)[:, None] - np.asarray(k_positions, np.float64)[None, :]  # [T, S]: n - m
    total = 0.0
    for j in range(d // 2):
        a, p = pair_indices(j, d, convention)
        zq = q[..., a] + 1j * q[..., p]  # [..., T]
        zk = k[..., a] + 1j * k[..., p]  # [..., S]
        theta = base ** (-2.0 * j / d)
        zeta = (2.0 * j / d + gamma) / (1.0 + gamma)
        total = total + np.real(zq[..., :, None] * np.conj(zk[..., None, :]) * np.exp(1j * rel * theta)) * zeta ** (
            rel / scale_base)
    return torch.from_numpy(np.asarray(total))


def scores(rq, rk):
    return rq @ rk.transpose(-1, -2)  # [B, H, T, S], unscaled


CASES = [
    # (head_dim, convention, scale_base, gamma, reference_position)
    (2, "interleaved", 512.0, 0.4, 0),
    (8, "interleaved", 512.0, 0.4, 0),
    (16, "half", 512.0, 0.4, 0),
    (12, "interleaved", 64.0, 0.4, 7),
    (10, "half", 128.0, 1.0, -30),
]


@pytest.mark.parametrize(("head_dim", "convention", "scale_base", "gamma", "reference"), CASES)
@pytest.mark.parametrize(("q_offset", "k_offset"), [(0, 0), (5, 0), (0, 7), (1000, 990)])
def test_rotate_matches_the_float64_formula(head_dim, convention, scale_base, gamma, reference, q_offset, k_offset):
    xpos = XPos(head_dim, convention=convention, scale_base=scale_base, gamma=gamma, reference_position=reference,
                angle_dtype=torch.float64)
    q = torch.randn(2, 3, 5, head_dim, dtype=torch.float64)
    k = torch.randn(2, 3, 6, head_dim, dtype=torch.float64)
    rq, rk = xpos.rotate(q, k, q_offset=q_offset, k_offset=k_offset)
    kw = dict(reference=reference, scale_base=scale_base, gamma=gamma, convention=convention)
    want_q = reference_xpos(q, range(q_offset, q_offset + 5), sign=1, **kw)
    want_k = reference_xpos(k, range(k_offset, k_offset + 6), sign=-1, **kw)
    # float64 throughout; the scales reach e^{+-20} (scale_base 64 at position 1000), so tolerances are
    # relative to the largest entry (a pair's difference x_a cos - x_p sin may cancel to near zero).
    assert_close(rq, want_q, atol=1e-13 * want_q.abs().max().item(), rtol=1e-12)
    assert_close(rk, want_k, atol=1e-13 * want_k.abs().max().item(), rtol=1e-12)
    # and the scores are the paper's, which know nothing of the reference position
    want = reference_scores(q, k, range(q_offset, q_offset + 5), range(k_offset, k_offset + 6),
                            scale_base=scale_base, gamma=gamma, convention=convention)
    assert_close(scores(rq, rk), want, atol=1e-12 * want.abs().max().item(), rtol=1e-11)


@pytest.mark.parametrize("convention", ["interleaved", "half"])
@pytest.mark.parametrize("reference", [0, 500, 3000])
def test_float32_scores_are_the_formula_whatever_the_reference(convention, reference):
    xpos = XPos(16, convention=convention, reference_position=reference)
    q, k = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    rq, rk = xpos.rotate(q, k, q_offset=1000, k_offset=1000)
    want = reference_scores(q, k, range(1000, 1008), range(1000, 1008), convention=convention)
    # float32 angles at position ~1000 are off by ~1e-4 rad; scores are O(|q||k|) ~ 16
    assert_close(scores(rq, rk).double(), want, atol=5e-3, rtol=0)


def test_zeta_golden_and_the_decay():
    # Sun et al. §3.2: zeta_k = (2k/d + 0.4) / 1.4; d = 8: k = 0..3 -> 0.4/1.4, 0.65/1.4, 0.9/1.4, 1.15/1.4
    assert_close(xpos_zeta(8), torch.tensor([0.4, 0.65, 0.9, 1.15], dtype=torch.float64) / 1.4, atol=1e-15, rtol=0)
    assert_close(XPos(8).zeta, xpos_zeta(8))
    # The decay, on norms: Dh = 2 has one pair, zeta_0 = 0.4 / 1.4. A query 512 positions after the
    # reference is scaled by zeta_0, a key there by 1 / zeta_0 (rotations keep norms).
    xpos = XPos(2, angle_dtype=torch.float64)
    x = torch.tensor([0.6, 0.8], dtype=torch.float64).expand(1, 1, 1, 2)  # |x| = 1
    rq, rk = xpos.rotate(x, x, q_offset=512, k_offset=512)
    assert math.isclose(rq.norm().item(), 0.4 / 1.4, rel_tol=1e-14)
    assert math.isclose(rk.norm().item(), 1.4 / 0.4, rel_tol=1e-14)


def test_is_a_position_scheme_without_state_and_survives_half():
    xpos = XPos(8)
    assert isinstance(xpos, PositionScheme) and xpos.max_len is None and xpos.caches
    assert not xpos.adds_value and not xpos.reads_keys
    assert xpos.state_dict() == {} and list(xpos.parameters()) == []
    x = torch.randn(1, 1, 5, 8)
    before = xpos.rotate(x, x, q_offset=300, k_offset=300)
    after = xpos.half().rotate(x, x, q_offset=300, k_offset=300)  # log_zeta stays float64
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])
    assert xpos.bias(x, 5) is None and xpos.value_term(torch.ones(1, 1, 5, 5)) is None
    assert "reference_position=0" in repr(xpos)


def test_half_and_bfloat16_inputs_are_the_float32_result_rounded_once():
    # Half inputs are rotated and scaled in float32 (angles and scales too) and rounded once at the end.
    xpos = XPos(8)
    q = torch.randn(1, 2, 4, 8)
    for dtype in (torch.float16, torch.bfloat16):
        h = q.to(dtype)
        rq, rk = xpos.rotate(h, h, q_offset=2000, k_offset=2000)
        want_q, want_k = xpos.rotate(h.float(), h.float(), q_offset=2000, k_offset=2000)
        assert rq.dtype == rk.dtype == dtype
        assert torch.equal(rq, want_q.to(dtype)) and torch.equal(rk, want_k.to(dtype))


# --- in attention -----------------------------------------------------------------------------


def make_mha(head_dim=8, n_heads=2, **kwargs):
    torch.manual_seed(0)
    return MultiHeadAttention(n_heads, n_heads * head_dim, position=XPos(head_dim, **kwargs)).eval()


def test_causal_output_does_not_see_later_tokens():
    mha = make_mha()
    x = torch.randn(2, 9, 16)
    y = x.clone()
    y[:, 5:] = torch.randn(2, 4, 16)  # change the future of step 4
    with torch.no_grad():
        out_x, out_y = mha(x, is_causal=True), mha(y, is_causal=True)
    assert_close(out_y[:, :5], out_x[:, :5], atol=1e-6, rtol=0)
    assert (out_y[:, 5:] - out_x[:, 5:]).abs().max() > 1e-2  # the change is seen where it may be


@pytest.mark.parametrize("kwargs", [{}, {"convention": "half", "reference_position": 20}, {"scale_base": 8.0}])
def test_cached_decoding_equals_the_full_pass(kwargs):
    mha = make_mha(**kwargs)
    x = torch.randn(2, 24, 16)
    with torch.no_grad():
        full = mha(x, is_causal=True)  # [B, L, D]
        cache, steps = KVCache(), []
        for t in range(24):
            step = x[:, t : t + 1]
            steps.append(mha(step, is_causal=True, cache=cache))
        cache, chunks = KVCache(), []
        for t in range(0, 24, 3):
            chunk = x[:, t : t + 3]
            chunks.append(mha(chunk, is_causal=True, cache=cache))
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=0)


def test_cached_keys_are_the_full_pass_keys():
    # The reference position is fixed, so a key scaled when appended equals the key scaled in the full pass.
    xpos = XPos(8)
    q, k = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    full_q, full_k = xpos.rotate(q, k)
    for p in range(6):
        step_q, step_k = xpos.rotate(q[:, :, p : p + 1], k[:, :, p : p + 1], q_offset=p, k_offset=p)
        assert torch.equal(step_q, full_q[:, :, p : p + 1]) and torch.equal(step_k, full_k[:, :, p : p + 1])


def test_gradcheck_float64():
    xpos = XPos(4, convention="half", angle_dtype=torch.float64)
    q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: xpos.rotate(a, b, q_offset=3, k_offset=2), (q, k))


# --- the position audit -----------------------------------------------------------------------


@pytest.mark.parametrize("xpos", [XPos(16), XPos(16, convention="half"), XPos(8, angle_dtype=torch.float64)],
                         ids=["interleaved", "half", "float64"])
def test_audit_verdicts(xpos):
    report = audit_position(xpos)
    verdicts = {c.name: c.verdict for c in report.checks}
    # The score of a query at n and a key at m is a function of n - m (the decay included), the scheme
    # honours its offsets, and so shifting everything changes nothing; but xPos scales q and k by
    # zeta ** (+-(p - c) / 512), so norms change: at position 511 the fastest pair of a key is (1.4/0.4) ** (511/512)
    # ~ 3.5 times longer, and the audit must say so.
    assert verdicts == {"offset_only": "pass", "norm_preserved": "fail", "shift_invariant": "pass",
                        "offsets_consistent": "pass"}
    assert report["norm_preserved"].value > 1.0  # relative change of the norm, not a rounding error


# --- against rotary-embedding-torch (interleaved pairs; centres each call on L // 2) ----------------


@pytest.mark.parametrize("head_dim", [8, 16, 32])
@pytest.mark.parametrize("length", [1, 7, 64, 300])
def test_matches_rotary_embedding_torch(head_dim, length):
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    theirs = rotary_embedding_torch.RotaryEmbedding(dim=head_dim, use_xpos=True, xpos_scale_base=512,
                                                    cache_if_possible=False)
    q, k = torch.randn(2, 3, length, head_dim), torch.randn(2, 3, length, head_dim)  # [B, H, L, Dh]
    want_q, want_k = theirs.rotate_queries_and_keys(q, k)
    # Scores: the same for our fixed reference position 0 and their per-call centre L // 2.
    got_q, got_k = XPos(head_dim).rotate(q, k)
    assert_close(scores(got_q, got_k), scores(want_q, want_k), atol=1e-4, rtol=1e-5)
    # The vectors themselves once the centring agrees.
    same_q, same_k = XPos(head_dim, reference_position=length // 2).rotate(q, k)
    assert_close(same_q, want_q, atol=2e-5, rtol=1e-5)
    assert_close(same_k, want_k, atol=2e-5, rtol=1e-5)


# --- bad arguments: each error names the argument and the value -----------------------------------


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(head_dim=7), ValueError, r"head_dim must be even.*head_dim=7"),
    (dict(head_dim=0), ValueError, r"head_dim.*0"),
    (dict(head_dim=8.0), TypeError, r"head_dim.*8\.0"),
    (dict(head_dim=8, scale_base=0.0), ValueError, r"scale_base.*0"),
    (dict(head_dim=8, scale_base=float("inf")), ValueError, r"scale_base.*inf"),
    (dict(head_dim=8, gamma=0), ValueError, r"gamma.*0"),
    (dict(head_dim=8, gamma="0.4"), TypeError, r"gamma.*'0\.4'"),
    (dict(head_dim=8, base=-1.0), ValueError, r"base.*-1"),
    (dict(head_dim=8, convention="neox"), ValueError, r"convention.*neox"),
    (dict(head_dim=8, reference_position=1.5), TypeError, r"reference_position.*1\.5"),
    (dict(head_dim=8, angle_dtype=torch.float16), ValueError, r"angle_dtype.*float16"),
])
def test_bad_constructor_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        XPos(**kwargs)


def test_bad_call_arguments():
    xpos = XPos(8)
    x = torch.randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match=r"q must have head_dim = 8.*\[1, 2, 3, 6\]"):
        xpos.rotate(torch.randn(1, 2, 3, 6), x)
    with pytest.raises(ValueError, match=r"k must be \[B, H, L, Dh\].*\[3, 8\]"):
        xpos.rotate(x, torch.randn(3, 8))
    with pytest.raises(TypeError, match=r"k must be a floating-point tensor.*int64"):
        xpos.rotate(x, torch.ones(1, 2, 3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"head_dim must be even.*head_dim=3"):
        xpos_zeta(3)


def test_positions_beyond_the_dtype_range_are_refused_not_inf():
    xpos = XPos(8)
    x = torch.randn(1, 1, 2, 8, dtype=torch.float64)
    # float32: |log zeta_0| * |p - c| / 512 = 1.2528 * p / 512 passes -log(tiny) = 87.3 near p = 35,700
    x32 = x.float()
    xpos.rotate(x32, x32, q_offset=35_000, k_offset=35_000)  # fine
    with pytest.raises(ValueError, match=r"p=40001.*float32.*reference_position=0"):
        xpos.rotate(x32, x32, q_offset=40_000, k_offset=40_000)
    # the same positions with the reference position in their middle are fine, and give the same scores
    far = XPos(8, reference_position=40_000, angle_dtype=torch.float64).rotate(x, x, q_offset=40_000, k_offset=40_000)
    near = XPos(8, angle_dtype=torch.float64).rotate(x, x)
    assert torch.isfinite(far[0]).all() and torch.isfinite(far[1]).all()
    assert_close(scores(*far), scores(*near), atol=1e-9, rtol=0)
    # float16 holds far less: |p - c| up to ~4,000
    h = x32.half()
    with pytest.raises(ValueError, match=r"p=5001.*float16"):
        xpos.rotate(h, h, q_offset=5000, k_offset=0)
    assert math.isclose(xpos.zeta[0].item(), 0.4 / 1.4)
