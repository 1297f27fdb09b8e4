"""T5 relative position buckets against the published bucketing, and the learned bias."""

import math

import pytest
import torch

from attnlab.encodings.registry import attention_position
from attnlab.encodings.scheme import relative_positions
from attnlab.encodings.t5 import SharedT5RelativeBias, T5RelativeBias, t5_bucket


def reference_bucket(n, *, bidirectional, num_buckets, max_distance):
    """mesh-tensorflow's _relative_position_bucket for one int n = memory - query, in float64 math."""
    ret = 0
    if bidirectional:
        num_buckets //= 2
        if n > 0:
            ret += num_buckets
        n = abs(n)
    else:
        n = max(-n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(val, num_buckets - 1)


POSITIONS = [-200, -128, -100, -20, -9, -8, -1, 0, 1, 7, 8, 9, 15, 16, 20, 50, 100, 127, 128, 200]

# Worked by hand from the formula, num_buckets=32, max_distance=128.
# Bidirectional: 16 buckets a side, 8 exact; r >= 8 -> 8 + floor(log(r/8) / log(16) * 8), at most 15;
# keys after the query (n > 0) add 16.
HAND_BIDIRECTIONAL = {
    0: 0, -1: 1, 1: 17, 7: 23, -8: 8, 8: 24,
    -9: 8,    # log(9/8)/log 16 * 8 = 0.34 -> 8
    15: 25,   # log(15/8)/log 16 * 8 = 1.81 -> 9, + 16
    16: 26,   # log 2 / log 16 * 8 = 2 exactly -> 10, + 16
    -20: 10,  # log 2.5 / log 16 * 8 = 2.64 -> 10
    127: 31,  # 7.98 -> 15, + 16
    128: 31,  # 8 -> 16, clamped to 15, + 16
    -200: 15,
}
# Causal: 32 buckets for keys at or before the query, 16 exact; r >= 16 ->
# 16 + floor(log(r/16) / log(8) * 16), at most 31; keys after the query -> 0.
HAND_CAUSAL = {
    0: 0, 1: 0, 200: 0, -1: 1, -15: 15, -16: 16,
    -20: 17,   # log 1.25 / log 8 * 16 = 1.72 -> 17
    -50: 24,   # log 3.125 / log 8 * 16 = 8.77 -> 24
    -100: 30,  # log 6.25 / log 8 * 16 = 14.10 -> 30
    -127: 31,  # 15.94 -> 31
    -128: 31,  # 16 -> 32, clamped to 31
}


@pytest.mark.parametrize(("bidirectional", "hand"), [(True, HAND_BIDIRECTIONAL), (False, HAND_CAUSAL)])
def test_hand_checked_buckets(bidirectional, hand):
    got = t5_bucket(torch.tensor(list(hand)), bidirectional=bidirectional)
    assert got.tolist() == list(hand.values())


@pytest.mark.parametrize("bidirectional", [True, False])
def test_table_against_the_float64_formula(bidirectional):
    got = t5_bucket(torch.tensor(POSITIONS), bidirectional=bidirectional, num_buckets=32, max_distance=128)
    want = [reference_bucket(n, bidirectional=bidirectional, num_buckets=32, max_distance=128) for n in POSITIONS]
    assert got.tolist() == want
    assert got.dtype == torch.int64


@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (64, 256), (16, 64), (8, 20), (128, 1024)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_float32_log_agrees_with_float64_everywhere(num_buckets, max_distance, bidirectional):
    # The implementation takes the log in float32 as mesh-tensorflow and HF do; over
    # every distance up to 3000 that gives the float64 buckets.
    n = torch.arange(-3000, 3001)
    got = t5_bucket(n, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    want = [reference_bucket(int(r), bidirectional=bidirectional, num_buckets=num_buckets,
                             max_distance=max_distance) for r in n]
    assert got.tolist() == want


def test_buckets_are_in_range_and_monotonic_in_distance():
    n = torch.arange(0, 2000)
    after = t5_bucket(n)  # keys after the query: 16..31
    before = t5_bucket(-n)  # 0..15
    assert after[1:].min() >= 16 and after.max() == 31 and before.max() == 15
    assert (after[1:].diff() >= 0).all() and (before.diff() >= 0).all()


def test_bias_looks_up_the_table():
    t5 = T5RelativeBias(3, num_buckets=16, max_distance=32)
    q = torch.randn(2, 3, 4, 8)
    b = t5.bias(q, 6, q_offset=10, k_offset=3)
    assert b.shape == (1, 3, 4, 6) and b.dtype == torch.float32
    buckets = t5_bucket(relative_positions(4, 6, q_offset=10, k_offset=3), num_buckets=16, max_distance=32)
    for h in range(3):
        assert torch.equal(b[0, h], t5.table.weight[buckets, h])


def test_bias_is_shift_invariant_and_learned():
    t5 = T5RelativeBias(2, bidirectional=False)
    q = torch.zeros(1, 2, 5, 4)
    assert torch.equal(t5.bias(q, 5), t5.bias(q, 5, q_offset=777, k_offset=777))
    t5.bias(q, 5).sum().backward()
    grad = t5.table.weight.grad
    # causal, 5 x 5: buckets 0 (j >= i: 15 pairs) and 1..4 (4, 3, 2, 1 pairs), per head
    assert grad[:, 0].tolist()[:6] == [15.0, 4.0, 3.0, 2.0, 1.0, 0.0]


def test_bias_dtype_and_initialisation():
    t5 = T5RelativeBias(8, num_buckets=256, max_distance=1024)
    assert t5.bias(torch.zeros(1, 8, 2, 4, dtype=torch.bfloat16), 2).dtype == torch.float32
    assert t5.bias(torch.zeros(1, 8, 2, 4, dtype=torch.float64), 2).dtype == torch.float64
    assert t5.max_len is None and not t5.adds_value
    # N(0, 0.02^2) over 2048 draws: the sample std is within 10%
    assert abs(t5.table.weight.std().item() - 0.02) < 0.002


@pytest.mark.parametrize("causal", [False, True])
def test_t5_shared_is_t5_declared_shared(causal):
    shared = attention_position("t5-shared", n_heads=4, head_dim=8, causal=causal)
    assert type(shared) is SharedT5RelativeBias and shared.shared_across_layers
    assert shared.bidirectional is not causal
    own = attention_position("t5", n_heads=4, head_dim=8, causal=causal)
    assert not own.shared_across_layers
    own.load_state_dict(shared.state_dict())
    q = torch.randn(2, 4, 5, 8)
    assert torch.equal(shared.bias(q, 7, q_offset=2), own.bias(q, 7, q_offset=2))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: T5RelativeBias(0), ValueError, r"n_heads.*0"),
    (lambda: T5RelativeBias(4, num_buckets=33), ValueError, r"num_buckets.*even.*33"),
    (lambda: T5RelativeBias(4, num_buckets=2), ValueError, r"num_buckets.*at least 4.*2"),
    (lambda: T5RelativeBias(4, num_buckets=1, bidirectional=False), ValueError, r"num_buckets.*at least 2.*1"),
    (lambda: T5RelativeBias(4, max_distance=8), ValueError, r"max_distance.*8"),
    (lambda: T5RelativeBias(4, max_distance=0), ValueError, r"max_distance.*0"),
    (lambda: T5RelativeBias(4, bidirectional=1), TypeError, r"bidirectional.*1"),
    (lambda: T5RelativeBias(4, num_buckets=32.0), TypeError, r"num_buckets.*32\.0"),
    (lambda: t5_bucket(torch.tensor([1.5])), TypeError, r"relative_position.*float32"),
    (lambda: t5_bucket([1, 2]), TypeError, r"relative_position.*list"),
    (lambda: T5RelativeBias(4).bias(torch.zeros(1, 2, 3, 8), 3), ValueError, r"n_heads = 4.*\[1, 2, 3, 8\]"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
