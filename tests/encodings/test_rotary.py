"""Rotary position embedding against a float64 formula written out here, against
rotary-embedding-torch, and on its invariants: offset-only scores, norms, the
permutation between the two conventions, half-precision inputs."""

import math

import numpy as np
import pytest
import torch

from attnlab.encodings.rotary import (
    Rotary,
    apply_rotary,
    interleaved_to_half_permutation,
    rotary_angles,
    rotary_inv_freq,
)
from attnlab.encodings.scheme import PositionScheme


def reference_rotary(x, positions, *, rotary_dim=None, base=10000.0, convention="interleaved",
                     interpolation=1.0, ntk_factor=1.0):
    """Float64 RoPE, one pair at a time (RoFormer eq. 13-15; GPT-NeoX pairing for "half").

    x: array [..., L, Dh]; positions: [L]. Pair i of a vector at position m turns by
    (m / interpolation) * b ** (-2i / d), b = base * ntk_factor ** (d / (d - 2)).
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1] if rotary_dim is None else rotary_dim
    b = base * ntk_factor ** (d / (d - 2)) if ntk_factor != 1.0 else base
    m = np.asarray(positions, dtype=np.float64) / interpolation  # [L]
    out = x.copy()
    for i in range(d // 2):
        angle = m * b ** (-2.0 * i / d)  # [L]
        c, s = np.cos(angle)[:, None], np.sin(angle)[:, None]  # [L, 1]
        a, p = (2 * i, 2 * i + 1) if convention == "interleaved" else (i, i + d // 2)
        xa, xp = x[..., a : a + 1], x[..., p : p + 1]  # [..., L, 1]
        out[..., a : a + 1] = xa * c - xp * s
        out[..., p : p + 1] = xp * c + xa * s
    return torch.from_numpy(out)


CASES = [
    # (head_dim, rotary_dim, convention, interpolation, ntk_factor)
    (16, None, "interleaved", 1.0, 1.0),
    (16, None, "half", 1.0, 1.0),
    (12, 8, "interleaved", 1.0, 1.0),
    (12, 8, "half", 1.0, 1.0),
    (16, None, "interleaved", 4.0, 1.0),
    (16, None, "half", 1.0, 8.0),
    (10, 6, "half", 2.0, 4.0),
]


@pytest.mark.parametrize(("head_dim", "rotary_dim", "convention", "interpolation", "ntk"), CASES)
@pytest.mark.parametrize(("q_offset", "k_offset"), [(0, 0), (5, 0), (0, 7), (1000, 990)])
def test_rotate_matches_float64_formula(head_dim, rotary_dim, convention, interpolation, ntk, q_offset, k_offset):
    rope = Rotary(head_dim, rotary_dim=rotary_dim, convention=convention, interpolation=interpolation,
                  ntk_factor=ntk, angle_dtype=torch.float64)
    q = torch.randn(2, 3, 5, head_dim, dtype=torch.float64)
    k = torch.randn(2, 3, 9, head_dim, dtype=torch.float64)
    rq, rk = rope.rotate(q, k, q_offset=q_offset, k_offset=k_offset)
    kw = dict(rotary_dim=rotary_dim, convention=convention, interpolation=interpolation, ntk_factor=ntk)
    torch.testing.assert_close(rq, reference_rotary(q, np.arange(q_offset, q_offset + 5), **kw), atol=1e-12, rtol=0)
    torch.testing.assert_close(rk, reference_rotary(k, np.arange(k_offset, k_offset + 9), **kw), atol=1e-12, rtol=0)


@pytest.mark.parametrize(("head_dim", "rotary_dim", "convention", "interpolation", "ntk"), CASES)
def test_float32_with_float32_angles_is_close_to_the_formula(head_dim, rotary_dim, convention, interpolation, ntk):
    rope = Rotary(head_dim, rotary_dim=rotary_dim, convention=convention, interpolation=interpolation, ntk_factor=ntk)
    x = torch.randn(2, 2, 6, head_dim)
    rx, _ = rope.rotate(x, x, q_offset=40, k_offset=40)
    assert rx.dtype == torch.float32
    expected = reference_rotary(x.double(), np.arange(40, 46), rotary_dim=rotary_dim, convention=convention,
                                interpolation=interpolation, ntk_factor=ntk)
    # A float32 angle m * theta is off by ~m * 1.2e-7 (< 1e-5 here), times |x| ~ 3.
    torch.testing.assert_close(rx.double(), expected, atol=3e-5, rtol=0)


@pytest.mark.parametrize(("dtype", "half_ulp"), [(torch.bfloat16, 2.0**-8), (torch.float16, 2.0**-11)])
@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_half_precision_input_is_the_float64_result_rounded(dtype, half_ulp, convention):
    # Positions 1000..1063: bfloat16 cannot even hold 1001 (its spacing there is 8), so
    # angles computed in the input's dtype would be badly wrong (gpt-neox #1003).
    rope = Rotary(16, convention=convention)
    x = torch.randn(2, 2, 64, 16).to(dtype)
    rx, _ = rope.rotate(x, x, q_offset=1000, k_offset=1000)
    assert rx.dtype == dtype
    exact = reference_rotary(x.double(), np.arange(1000, 1064), convention=convention)
    # Rounded once from a float32 result within ~2e-4 of exact (float32 angles at
    # m ~ 1000 are off by ~1.2e-4 rad, times |x| <= ~4): half an ulp plus that.
    err = (rx.double() - exact).abs()
    assert (err <= half_ulp * exact.abs() + 5e-4).all(), err.max()


def test_bfloat16_angles_would_fail_the_half_precision_test():
    # The test above can fail: the bug it guards against, angles in bf16, misses by far more.
    x = torch.randn(1, 1, 64, 16).to(torch.bfloat16)
    positions = torch.arange(1000, 1064).to(torch.bfloat16)  # 1000, 1000, ..., 1008, ...: rounded
    theta = rotary_inv_freq(16).to(torch.bfloat16)
    angles = positions[:, None] * theta  # [64, 8] in bf16
    x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]
    c, s = angles.float().cos(), angles.float().sin()
    buggy = torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), -1).flatten(-2)
    exact = reference_rotary(x.double(), np.arange(1000, 1064))
    assert (buggy.double() - exact).abs().max() > 0.1


def test_inv_freq_golden_and_ntk():
    torch.testing.assert_close(rotary_inv_freq(8), torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64),
                               rtol=1e-14, atol=0)
    plain, ntk = rotary_inv_freq(16), rotary_inv_freq(16, ntk_factor=8.0)
    # NTK keeps the fastest pair and slows the slowest by exactly the factor:
    # (b * a**(d/(d-2))) ** (-(d-2)/d) = b ** (-(d-2)/d) / a.
    assert ntk[0].item() == 1.0
    assert math.isclose(ntk[-1].item(), plain[-1].item() / 8.0, rel_tol=1e-12)


def test_interpolation_divides_positions():
    x = torch.randn(1, 2, 3, 8, dtype=torch.float64)
    slow = Rotary(8, interpolation=4.0, angle_dtype=torch.float64)
    plain = Rotary(8, angle_dtype=torch.float64)
    # Positions 40, 41, 42 interpolated by 4 are 10, 10.25, 10.5.
    got, _ = slow.rotate(x, x, q_offset=40, k_offset=40)
    want = apply_rotary(x, torch.tensor([10.0, 10.25, 10.5], dtype=torch.float64), angle_dtype=torch.float64)
    torch.testing.assert_close(got, want, atol=1e-13, rtol=0)
    assert not torch.allclose(got, plain.rotate(x, x, q_offset=40, k_offset=40)[0])


@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_scores_depend_only_on_the_offset(convention):
    rope = Rotary(16, convention=convention, angle_dtype=torch.float64)
    q = torch.randn(1, 2, 1, 16, dtype=torch.float64)
    k = torch.randn(1, 2, 1, 16, dtype=torch.float64)

    def score(m, n):
        rq, rk = rope.rotate(q, k, q_offset=m, k_offset=n)
        return (rq * rk).sum(-1)

    for m, n, shift in [(7, 3, 97), (0, 5, 1000), (12, 12, 31)]:
        torch.testing.assert_close(score(m, n), score(m + shift, n + shift), atol=1e-11, rtol=0)
    # and it does change with the offset, or the test would prove nothing
    assert not torch.allclose(score(7, 3), score(7, 4))


@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_norms_are_preserved(convention):
    rope = Rotary(12, rotary_dim=8, convention=convention)
    x = torch.randn(2, 3, 50, 12)
    rx, _ = rope.rotate(x, x, q_offset=123, k_offset=123)
    torch.testing.assert_close(rx.norm(dim=-1), x.norm(dim=-1), atol=0, rtol=1e-6)


def test_partial_rotary_passes_the_rest_through_unchanged():
    rope = Rotary(12, rotary_dim=4)
    x = torch.randn(2, 3, 7, 12)
    rx, _ = rope.rotate(x, x, q_offset=3, k_offset=3)
    assert torch.equal(rx[..., 4:], x[..., 4:])
    assert not torch.allclose(rx[..., :4], x[..., :4])


def test_permutation_golden():
    # reference/pe_and_attention_anchors.md §9: perm = [0,2,4,6,1,3,5,7] for head dim 8.
    assert interleaved_to_half_permutation(8).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert interleaved_to_half_permutation(7, rotary_dim=4).tolist() == [0, 2, 1, 3, 4, 5, 6]


@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(8, None), (16, None), (12, 8)])
def test_interleaved_is_half_up_to_the_permutation(head_dim, rotary_dim):
    perm = interleaved_to_half_permutation(head_dim, rotary_dim=rotary_dim)
    inverse = torch.argsort(perm)
    inter = Rotary(head_dim, rotary_dim=rotary_dim, convention="interleaved", angle_dtype=torch.float64)
    half = Rotary(head_dim, rotary_dim=rotary_dim, convention="half", angle_dtype=torch.float64)
    x = torch.randn(2, 2, 9, head_dim, dtype=torch.float64)
    a, _ = inter.rotate(x, x, q_offset=4, k_offset=4)
    b, _ = half.rotate(x[..., perm], x[..., perm], q_offset=4, k_offset=4)
    torch.testing.assert_close(a, b[..., inverse], atol=1e-14, rtol=0)
    # The conventions do differ on the same input: the permutation is needed.
    assert not torch.allclose(a, half.rotate(x, x, q_offset=4, k_offset=4)[0])


def test_cached_decoding_rows_equal_the_full_pass():
    rope = Rotary(8)
    q, k = torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    full_q, full_k = rope.rotate(q, k)
    for p in range(6):
        step_q, step_k = rope.rotate(q[:, :, p : p + 1], k[:, :, : p + 1], q_offset=p, k_offset=0)
        torch.testing.assert_close(step_q, full_q[:, :, p : p + 1], atol=0, rtol=0)
        torch.testing.assert_close(step_k, full_k[:, :, : p + 1], atol=0, rtol=0)


def test_q_and_k_keep_their_own_dtypes_and_far_apart_offsets():
    rope = Rotary(8)
    q, k = torch.randn(1, 1, 2, 8, dtype=torch.float64), torch.randn(1, 1, 3, 8)
    rq, rk = rope.rotate(q, k, q_offset=10_000, k_offset=0)
    assert rq.dtype == torch.float64 and rk.dtype == torch.float32
    torch.testing.assert_close(rq, reference_rotary(q, [10_000, 10_001]), atol=2e-3, rtol=0)
    torch.testing.assert_close(rk.double(), reference_rotary(k.double(), [0, 1, 2]), atol=1e-6, rtol=0)


def test_apply_rotary_per_sample_positions():
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    positions = torch.tensor([[[0, 1, 2, 3]], [[5, 6, 7, 8]]])  # [B=2, 1, L=4]: left padding shifts sample 1
    out = apply_rotary(x, positions, angle_dtype=torch.float64)
    torch.testing.assert_close(out[0], reference_rotary(x[0], [0, 1, 2, 3]), atol=1e-12, rtol=0)
    torch.testing.assert_close(out[1], reference_rotary(x[1], [5, 6, 7, 8]), atol=1e-12, rtol=0)


def test_module_has_no_state_and_survives_half():
    rope = Rotary(8)
    assert isinstance(rope, PositionScheme) and rope.max_len is None and not rope.adds_value
    assert rope.state_dict() == {} and list(rope.parameters()) == []
    x = torch.randn(1, 1, 5, 8)
    before, _ = rope.rotate(x, x, q_offset=300, k_offset=300)
    after, _ = rope.half().rotate(x, x, q_offset=300, k_offset=300)  # the float64 frequencies stay float64
    assert torch.equal(before, after)
    assert rope.bias(x, 5) is None and rope.value_term(torch.ones(1, 1, 5, 5)) is None


def test_rotary_angles_dtype():
    a = rotary_angles(torch.arange(3), rotary_inv_freq(4), angle_dtype=torch.float64)
    assert a.dtype == torch.float64 and a.shape == (3, 2)
    torch.testing.assert_close(a[:, 1], torch.tensor([0.0, 0.01, 0.02], dtype=torch.float64), atol=1e-15, rtol=0)


# --- against rotary-embedding-torch (interleaved convention; its `dim` is the rotary dim) ---
# Imported per test, so that only these skip where the test extra is not installed.


@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(16, 16), (16, 8), (12, 4)])
@pytest.mark.parametrize("offset", [0, 3, 100])
def test_matches_rotary_embedding_torch(head_dim, rotary_dim, offset):
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    theirs = rotary_embedding_torch.RotaryEmbedding(dim=rotary_dim)
    ours = Rotary(head_dim, rotary_dim=rotary_dim)
    x = torch.randn(2, 3, 10, head_dim)  # [B, H, L, Dh], their default seq_dim = -2
    want = theirs.rotate_queries_or_keys(x, offset=offset)
    got, _ = ours.rotate(x, x, q_offset=offset, k_offset=offset)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=0)


def test_matches_rotary_embedding_torch_scaling():
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    theirs = rotary_embedding_torch.RotaryEmbedding(dim=8, interpolate_factor=2.0, theta_rescale_factor=4.0)
    ours = Rotary(8, interpolation=2.0, ntk_factor=4.0)
    x = torch.randn(1, 2, 12, 8)
    torch.testing.assert_close(ours.rotate(x, x)[0], theirs.rotate_queries_or_keys(x), atol=2e-5, rtol=0)


def test_matches_rotary_embedding_torch_cached_keys():
    rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")
    # Their rotate_queries_with_cached_keys puts the queries at the end: offset S - T.
    theirs = rotary_embedding_torch.RotaryEmbedding(dim=8)
    ours = Rotary(16, rotary_dim=8)
    q, k = torch.randn(2, 2, 3, 16), torch.randn(2, 2, 11, 16)
    want_q, want_k = theirs.rotate_queries_with_cached_keys(q, k)
    got_q, got_k = ours.rotate(q, k, q_offset=8, k_offset=0)
    torch.testing.assert_close(got_q, want_q, atol=2e-5, rtol=0)
    torch.testing.assert_close(got_k, want_k, atol=2e-5, rtol=0)


# --- bad arguments: each error names the argument and the value ---

@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(head_dim=8, rotary_dim=5), ValueError, r"rotary_dim.*5"),
    (dict(head_dim=8, rotary_dim=10), ValueError, r"rotary_dim.*10"),
    (dict(head_dim=8, rotary_dim=0), ValueError, r"rotary_dim.*0"),
    (dict(head_dim=7), ValueError, r"head_dim.*7"),
    (dict(head_dim=0), ValueError, r"head_dim.*0"),
    (dict(head_dim=8.0), TypeError, r"head_dim.*8\.0"),
    (dict(head_dim=8, angle_dtype=torch.float16), ValueError, r"angle_dtype.*float16"),
    (dict(head_dim=8, angle_dtype=torch.bfloat16), ValueError, r"angle_dtype.*bfloat16"),
    (dict(head_dim=8, angle_dtype="float32"), TypeError, r"angle_dtype.*float32"),
    (dict(head_dim=8, convention="neox"), ValueError, r"convention.*neox"),
    (dict(head_dim=8, base=0.0), ValueError, r"base.*0"),
    (dict(head_dim=8, base=float("nan")), ValueError, r"base.*nan"),
    (dict(head_dim=8, interpolation=-2.0), ValueError, r"interpolation.*-2"),
    (dict(head_dim=8, ntk_factor=0), ValueError, r"ntk_factor.*0"),
    (dict(head_dim=2, ntk_factor=2.0), ValueError, r"rotary_dim=2.*ntk_factor=2"),
])
def test_bad_constructor_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Rotary(**kwargs)


def test_bad_call_arguments():
    rope = Rotary(8)
    x = torch.randn(1, 1, 3, 8)
    with pytest.raises(ValueError, match=r"q must be .*head_dim=8.*\[1, 1, 3, 6\]"):
        rope.rotate(torch.randn(1, 1, 3, 6), x)
    with pytest.raises(TypeError, match=r"k must be a floating-point tensor.*int64"):
        rope.rotate(x, torch.ones(1, 1, 3, 8, dtype=torch.long))
    with pytest.raises(TypeError, match=r"q_offset.*1\.5"):
        rope.rotate(x, x, q_offset=1.5)
    with pytest.raises(ValueError, match=r"positions.*bfloat16"):
        apply_rotary(x, torch.arange(3).to(torch.bfloat16))
    with pytest.raises(ValueError, match=r"positions of shape \[4\]"):
        apply_rotary(x, torch.arange(4))
    with pytest.raises(TypeError, match=r"positions must be a tensor, got list"):
        apply_rotary(x, [0, 1, 2])
