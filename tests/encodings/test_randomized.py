"""Randomized positional encodings (Ruoss et al. 2023) and the schemes evaluated at given positions.

Golden values come from float64 re-implementations of the published formulas written
here (RoFormer's rotation, ALiBi's penalty, mesh-tensorflow's T5 buckets, Shaw's eqs.
3-4, Vaswani's sinusoids) and from Ruoss et al.'s ``compute_alibi_encodings_biases``
(google-deepmind/randomized_positional_encodings) re-typed in numpy; the draws are
recovered by seeding, never read back from the module under test alone.
"""

import math
import threading
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
import torch

from attnlab.attention import MultiHeadAttention
from attnlab.encodings.alibi import ALiBi
from attnlab.encodings.draws import sample_positions
from attnlab.encodings.positional import PositionalEncoding
from attnlab.encodings.randomized import RandomizedPositions
from attnlab.encodings.randomized_tables import RandomizedLearned, RandomizedSinusoidal
from attnlab.encodings.relative import ShawRelative
from attnlab.encodings.rotary import Rotary
from attnlab.encodings.scheme import NoPosition
from attnlab.encodings.t5 import T5RelativeBias

H, DH = 4, 8


# -- float64 references ------------------------------------------------------------------


def ref_rotate(x, pos, *, base=10000.0, convention="interleaved"):
    """RoFormer eq. 15 in float64: pair i of the vector at position p turned by p * base ** (-2i / d)."""
    x = x.double()
    d = x.shape[-1]
    theta = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    angle = torch.tensor(pos, dtype=torch.float64)[:, None] * theta  # [L, d/2]
    cos, sin = angle.cos(), angle.sin()
    if convention == "interleaved":
        x0, x1 = x[..., 0::2], x[..., 1::2]
    else:
        x0, x1 = x[..., : d // 2], x[..., d // 2 :]
    r0, r1 = x0 * cos - x1 * sin, x1 * cos + x0 * sin
    if convention == "interleaved":
        return torch.stack((r0, r1), dim=-1).flatten(-2)
    return torch.cat((r0, r1), dim=-1)


def ref_slopes(n):
    """Press et al.'s get_slopes (as Ruoss et al.'s _get_alibi_slopes), plain math."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + ref_slopes(2 * closest)[0::2][: n - closest]


def ref_alibi(rel, n_heads, left_offset=0.0):
    """-m_h * (|rel| - left_offset [rel < 0]) in float64, [H, T, S]."""
    rel = np.asarray(rel, dtype=np.float64)
    dist = np.abs(rel) - left_offset * (rel < 0)
    return -np.array(ref_slopes(n_heads))[:, None, None] * dist


def ruoss_alibi(n_heads, T, S):
    """Ruoss et al.'s compute_alibi_encodings_biases (models/positional_encodings.py), re-typed in numpy."""
    alibi = np.zeros((T, S))
    alibi -= sum(np.tri(*alibi.shape, k=-i) for i in range(1, T))
    alibi -= sum(np.tri(*alibi.T.shape, k=-i).T for i in range(1, S))
    alibi += 0.5 * np.tri(*alibi.shape, k=-1)
    return alibi * np.array(ref_slopes(n_heads))[:, None, None]


def ref_bucket(n, *, bidirectional=True, num_buckets=32, max_distance=128):
    """mesh-tensorflow's _relative_position_bucket for one int n = key - query, float64 math."""
    ret = 0
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n > 0 else 0
        n = abs(n)
    else:
        n = max(-n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(val, num_buckets - 1)


def naive_shaw(q, w_k, w_v, weights, rel, max_rel):
    """Shaw eqs. 3-4 with a^K_ij, a^V_ij materialised, at signed distances rel [T, S]: (key term, value term)."""
    idx = rel.clamp(-max_rel, max_rel) + max_rel  # [T, S]
    a_k, a_v = w_k[idx], w_v[idx]  # [T, S, Dh]
    key_term = (q[..., :, None, :] * a_k).sum(-1) / math.sqrt(q.shape[-1])  # [B, H, T, S]
    value_term = (weights[..., None] * a_v).sum(-2)  # [B, H, T, Dh]
    return key_term, value_term


def distance_map(d, T, S):
    """rel[i, j] = sign(j - i) d_{|j - i|}, d_0 = 0: the reference's map of offsets to drawn distances."""
    d = [0, *d]
    return torch.tensor([[int(np.sign(j - i)) * d[abs(j - i)] for j in range(S)] for i in range(T)])


def seeded(seed, fn):
    torch.manual_seed(seed)
    return fn()


def run_attention(scheme, q, k, v):
    """What MultiHeadAttention does with a scheme: rotate, bias, softmax, value term (when adds_value)."""
    rq, rk = scheme.rotate(q, k)
    scores = rq @ rk.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, H, T, S]
    bias = scheme.bias(q, k.shape[2])
    if bias is not None:
        scores = scores + bias
    weights = scores.softmax(-1)
    out = weights @ v  # [B, H, T, Dh]
    if scheme.adds_value:
        term = scheme.value_term(weights)
        if term is not None:
            out = out + term
    return out


def big(scheme):
    """Learned tables drawn larger than their 0.02 init, so that they matter in comparisons."""
    with torch.no_grad():
        for p in scheme.parameters():
            p.normal_()
    return scheme


# -- sample_positions --------------------------------------------------------------------


@pytest.mark.parametrize(("n", "max_len"), [(0, 1), (1, 1), (5, 5), (3, 10), (17, 1000)])
def test_sample_positions_sorted_distinct_in_range(n, max_len):
    for _ in range(20):
        draw = sample_positions(n, max_len)
        assert draw.dtype == torch.int64 and draw.shape == (n,)
        assert bool((draw[1:] > draw[:-1]).all())  # sorted and distinct
        assert n == 0 or (int(draw.min()) >= 0 and int(draw.max()) < max_len)
    assert sample_positions(max_len, max_len).tolist() == list(range(max_len))  # nothing left to choose


def test_sample_positions_uniform_over_subsets():
    # Every 2-subset of [0, 5) is reachable, each with probability 1/10: 2000 draws give
    # counts near 200 (sd 13.4); every position is in 2/5 of the draws (800, sd 22).
    torch.manual_seed(0)
    draws = [tuple(sample_positions(2, 5).tolist()) for _ in range(2000)]
    subsets = Counter(draws)
    assert set(subsets) == set(combinations(range(5), 2))
    assert all(130 < c < 270 for c in subsets.values()), subsets
    positions = Counter(p for draw in draws for p in draw)
    assert all(690 < positions[p] < 910 for p in range(5)), positions


def test_sample_positions_is_jax_choice_without_replacement_then_sort():
    # The first n of a uniform permutation: the global CPU generator's randperm, sorted.
    torch.manual_seed(3)
    expected = sorted(torch.randperm(50)[:7].tolist())
    torch.manual_seed(3)
    assert sample_positions(7, 50).tolist() == expected


def test_sample_positions_reproducible_and_device_independent():
    a = seeded(11, lambda: sample_positions(6, 40))
    b = seeded(11, lambda: sample_positions(6, 40, device="cpu"))
    assert torch.equal(a, b)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    state = torch.get_rng_state()
    assert torch.equal(sample_positions(6, 40, generator=g1), sample_positions(6, 40, generator=g2))
    assert torch.equal(torch.get_rng_state(), state)  # a generator leaves the global stream alone
    if torch.cuda.is_available():
        c = seeded(11, lambda: sample_positions(6, 40, device="cuda"))
        assert c.device.type == "cuda" and torch.equal(c.cpu(), a)


# -- the schemes at explicit positions ---------------------------------------------------

Q_POS = [0, 3, 4, 9, 30, 31, 57]  # increasing, with gaps
K_POS = [1, 2, 4, 8, 16, 40]


@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_rotary_rotate_at_is_position_times_theta(convention):
    rope = Rotary(DH, convention=convention, angle_dtype=torch.float64)
    q = torch.randn(2, H, len(Q_POS), DH, dtype=torch.float64)
    k = torch.randn(2, H, len(K_POS), DH, dtype=torch.float64)
    rq, rk = rope.rotate_at(q, k, q_pos=torch.tensor(Q_POS), k_pos=torch.tensor(K_POS))
    torch.testing.assert_close(rq, ref_rotate(q, Q_POS, convention=convention), atol=1e-12, rtol=0)
    torch.testing.assert_close(rk, ref_rotate(k, K_POS, convention=convention), atol=1e-12, rtol=0)
    # float32 inputs: the same within float32's rounding
    rq32, _ = rope.rotate_at(q.float(), k.float(), q_pos=torch.tensor(Q_POS), k_pos=torch.tensor(K_POS))
    torch.testing.assert_close(rq32.double(), ref_rotate(q, Q_POS, convention=convention), atol=1e-5, rtol=0)


def test_rotary_rotate_is_rotate_at_an_arange():
    rope = Rotary(DH)
    q, k = torch.randn(1, H, 3, DH), torch.randn(1, H, 7, DH)
    got = rope.rotate(q, k, q_offset=4, k_offset=0)
    at = rope.rotate_at(q, k, q_pos=torch.arange(4, 7), k_pos=torch.arange(7))
    assert torch.equal(got[0], at[0]) and torch.equal(got[1], at[1])


@pytest.mark.parametrize("left_offset", [0.0, 0.5, -2.0])
def test_alibi_bias_at_and_rel(left_offset):
    alibi = ALiBi(H, causal=False, left_offset=left_offset)
    q = torch.zeros(1, H, len(Q_POS), DH, dtype=torch.float64)
    rel = np.array(K_POS)[None, :] - np.array(Q_POS)[:, None]
    expected = torch.from_numpy(ref_alibi(rel, H, left_offset))[None]
    got = alibi.bias_at(q, q_pos=torch.tensor(Q_POS), k_pos=torch.tensor(K_POS))
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    rel = distance_map([2, 5, 9, 20], 5, 5)  # any signed distances, e.g. a randomized draw
    got = alibi.bias_rel(q[:, :, :5], rel=rel)
    torch.testing.assert_close(got, torch.from_numpy(ref_alibi(rel.numpy(), H, left_offset))[None], atol=1e-12,
                               rtol=0)


def test_alibi_left_offset_is_ruoss_et_al_bidirectional_alibi():
    for n_heads, T, S in [(8, 6, 6), (4, 3, 7), (6, 5, 2)]:
        got = ALiBi(n_heads, causal=False, left_offset=0.5).bias(torch.zeros(1, n_heads, T, 8), S)
        torch.testing.assert_close(got[0].double(), torch.from_numpy(ruoss_alibi(n_heads, T, S)), atol=1e-6, rtol=0)


def test_alibi_default_left_offset_keeps_the_symmetric_bias():
    q = torch.zeros(1, H, 5, DH)
    plain = ALiBi(H).bias(q, 5)
    assert torch.equal(ALiBi(H, left_offset=0.0).bias(q, 5), plain)
    assert torch.equal(plain, plain.transpose(-1, -2))
    assert repr(ALiBi(H)) == "ALiBi(n_heads=4, causal=True)"


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_at_and_rel_are_the_buckets_of_the_offsets(bidirectional):
    t5 = big(T5RelativeBias(H, bidirectional=bidirectional))
    q = torch.zeros(1, H, len(Q_POS), DH)
    table = t5.table.weight.detach()  # [num_buckets, H]

    def expected(rel):
        buckets = torch.tensor([[ref_bucket(int(r), bidirectional=bidirectional) for r in row] for row in rel])
        return table[buckets].permute(2, 0, 1)[None]  # [1, H, T, S]

    rel = torch.tensor(K_POS)[None, :] - torch.tensor(Q_POS)[:, None]
    got = t5.bias_at(q, q_pos=torch.tensor(Q_POS), k_pos=torch.tensor(K_POS))
    assert torch.equal(got, expected(rel))
    rel = distance_map([3, 17, 60, 150], 5, 5)
    assert torch.equal(t5.bias_rel(q[:, :, :5], rel=rel), expected(rel))


def test_shaw_bias_and_value_term_at_positions_and_distances():
    shaw = big(ShawRelative(DH, max_relative_position=3)).double()
    w_k, w_v = shaw.rel_keys.detach(), shaw.rel_values.detach()
    q = torch.randn(2, H, len(Q_POS), DH, dtype=torch.float64)
    weights = torch.rand(2, H, len(Q_POS), len(K_POS), dtype=torch.float64).softmax(-1)
    q_pos, k_pos = torch.tensor(Q_POS), torch.tensor(K_POS)
    key_term, value_term = naive_shaw(q, w_k, w_v, weights, k_pos[None, :] - q_pos[:, None], 3)
    torch.testing.assert_close(shaw.bias_at(q, q_pos=q_pos, k_pos=k_pos), key_term, atol=1e-12, rtol=0)
    torch.testing.assert_close(shaw.value_term_at(weights, q_pos=q_pos, k_pos=k_pos), value_term, atol=1e-12,
                               rtol=0)
    rel = distance_map([1, 2, 6, 7], 5, 5)  # 2 stays, 6 and 7 clip to 3
    key_term, value_term = naive_shaw(q[:, :, :5], w_k, w_v, weights[:, :, :5, :5], rel, 3)
    torch.testing.assert_close(shaw.bias_rel(q[:, :, :5], rel=rel), key_term, atol=1e-12, rtol=0)
    torch.testing.assert_close(shaw.value_term_rel(weights[:, :, :5, :5], rel=rel), value_term, atol=1e-12, rtol=0)


def _row_by_row_at_positions(term, x, rel):
    """A relative scheme's term at distances, one query row at a time through the positions form (*_at)."""
    zero = rel.new_zeros(1)  # the query at position 0, its keys at their distances
    return torch.cat([term(x[..., i : i + 1, :], q_pos=zero, k_pos=rel[i]) for i in range(rel.shape[0])], dim=-2)


def test_terms_at_positions_row_by_row_equal_the_terms_at_distances():
    # The protocol derives bias_at / value_term_at of a relative scheme from its *_rel primitives:
    # evaluated row by row at positions, they give the vectorised terms at distances.
    rel = distance_map([2, 3, 8, 11], 5, 5)
    q = torch.randn(2, H, 5, DH, dtype=torch.float64)
    alibi = ALiBi(H, causal=False, left_offset=0.5)
    torch.testing.assert_close(_row_by_row_at_positions(alibi.bias_at, q, rel), alibi.bias_rel(q, rel=rel))
    shaw = big(ShawRelative(DH, max_relative_position=4)).double()
    weights = torch.rand(2, H, 5, 5, dtype=torch.float64).softmax(-1)
    torch.testing.assert_close(_row_by_row_at_positions(shaw.bias_at, q, rel), shaw.bias_rel(q, rel=rel))
    torch.testing.assert_close(_row_by_row_at_positions(shaw.value_term_at, weights, rel),
                               shaw.value_term_rel(weights, rel=rel))
    with pytest.raises(NotImplementedError, match="Rotary.*relative=False"):
        Rotary(DH).bias_rel(q, rel=rel)


# -- the wrapper -------------------------------------------------------------------------

CASES = [  # (name, scheme factory, sample)
    ("rotary", lambda: Rotary(DH), "positions"),
    ("rotary-half", lambda: Rotary(DH, convention="half"), "positions"),
    ("alibi-causal", lambda: ALiBi(H), "distances"),
    ("alibi-bidirectional", lambda: ALiBi(H, causal=False, left_offset=0.5), "distances"),
    ("alibi-positions", lambda: ALiBi(H, causal=False, left_offset=0.5), "positions"),
    ("t5", lambda: big(T5RelativeBias(H)), "positions"),
    ("t5-distances", lambda: big(T5RelativeBias(H, bidirectional=False)), "distances"),
    ("shaw", lambda: big(ShawRelative(DH, max_relative_position=3)), "distances"),
    ("shaw-positions", lambda: big(ShawRelative(DH, max_relative_position=3)), "positions"),
    ("shaw-keys-only", lambda: big(ShawRelative(DH, max_relative_position=3, on_values=False)), "distances"),
]


@pytest.mark.parametrize(("name", "make", "sample"), CASES, ids=[c[0] for c in CASES])
def test_max_len_equal_to_length_is_the_plain_scheme(name, make, sample):
    scheme = make()
    rand = RandomizedPositions(scheme, max_len=6, sample=sample)
    q, k, v = (torch.randn(2, H, 6, DH) for _ in range(3))
    assert torch.equal(run_attention(rand, q, k, v), run_attention(scheme, q, k, v))
    assert rand.last_draw.tolist() == (list(range(6)) if sample == "positions" else list(range(1, 6)))


@pytest.mark.parametrize("convention", ["interleaved", "half"])
def test_rotary_scores_at_the_drawn_positions(convention):
    rand = RandomizedPositions(Rotary(DH, convention=convention, angle_dtype=torch.float64), max_len=500)
    q, k = torch.randn(2, H, 7, DH, dtype=torch.float64), torch.randn(2, H, 7, DH, dtype=torch.float64)
    draw = seeded(7, lambda: sample_positions(7, 500)).tolist()
    rq, rk = seeded(7, lambda: rand.rotate(q, k))
    assert rand.last_draw.tolist() == draw and draw != list(range(7))
    expected = ref_rotate(q, draw, convention=convention) @ ref_rotate(k, draw, convention=convention).transpose(-1, -2)
    torch.testing.assert_close(rq @ rk.transpose(-1, -2), expected, atol=1e-12, rtol=0)


def test_alibi_bias_at_the_drawn_distances():
    rand = RandomizedPositions(ALiBi(H, causal=False, left_offset=0.5), max_len=200, sample="distances")
    q = torch.zeros(1, H, 6, DH, dtype=torch.float64)
    d = (seeded(2, lambda: sample_positions(5, 199)) + 1).tolist()  # d_1 < ... < d_5 from [1, 200)
    got = seeded(2, lambda: rand.bias(q, 6))
    assert rand.last_draw.tolist() == d and d != [1, 2, 3, 4, 5]
    rel = distance_map(d, 6, 6)
    torch.testing.assert_close(got, torch.from_numpy(ref_alibi(rel.numpy(), H, 0.5))[None], atol=1e-12, rtol=0)


def test_t5_bias_at_the_drawn_positions():
    t5 = big(T5RelativeBias(H))
    rand = RandomizedPositions(t5, max_len=300)
    draw = seeded(4, lambda: sample_positions(6, 300))
    got = seeded(4, lambda: rand.bias(torch.zeros(1, H, 6, DH), 6))
    rel = draw[None, :] - draw[:, None]
    buckets = torch.tensor([[ref_bucket(int(r)) for r in row] for row in rel])
    assert torch.equal(got, t5.table.weight.detach()[buckets].permute(2, 0, 1)[None])


def test_shaw_one_draw_per_call_for_bias_and_value_term():
    shaw = big(ShawRelative(DH, max_relative_position=40)).double()
    rand = RandomizedPositions(shaw, max_len=100, sample="distances")
    q, k, v = (torch.randn(2, H, 5, DH, dtype=torch.float64) for _ in range(3))
    d = (seeded(9, lambda: sample_positions(4, 99)) + 1).tolist()
    out = seeded(9, lambda: run_attention(rand, q, k, v))
    rel = distance_map(d, 5, 5)
    key_term, _ = naive_shaw(q, shaw.rel_keys.detach(), shaw.rel_values.detach(), torch.ones(2, H, 5, 5), rel, 40)
    weights = (q @ k.transpose(-1, -2) / math.sqrt(DH) + key_term).softmax(-1)
    _, value_term = naive_shaw(q, shaw.rel_keys.detach(), shaw.rel_values.detach(), weights, rel, 40)
    torch.testing.assert_close(out, weights @ v + value_term, atol=1e-12, rtol=0)


class Spy(ShawRelative):
    """Shaw that records the positions each method was given."""

    rotates = True  # it writes rotate_at (unchanged q and k) to see the positions it is given

    def __init__(self):
        super().__init__(DH, max_relative_position=3)
        big(self)
        self.seen = []

    def rotate_at(self, q, k, *, q_pos, k_pos):
        self.seen.append(("rotate", q_pos.tolist(), k_pos.tolist()))
        return q, k

    def bias_at(self, q, *, q_pos, k_pos, k=None):
        self.seen.append(("bias", q_pos.tolist(), k_pos.tolist()))
        return super().bias_at(q, q_pos=q_pos, k_pos=k_pos)

    def value_term_at(self, weights, *, q_pos, k_pos):
        self.seen.append(("value", q_pos.tolist(), k_pos.tolist()))
        return super().value_term_at(weights, q_pos=q_pos, k_pos=k_pos)


def test_inside_multihead_attention_one_draw_per_call_and_a_new_one_next_call():
    torch.manual_seed(0)
    spy = Spy()
    mha = MultiHeadAttention(H, H * DH, position=RandomizedPositions(spy, max_len=12))
    mha.eval()  # the reference draws at evaluation too
    x = torch.randn(3, 6, H * DH)
    with torch.no_grad():
        first = mha(x)
        second = mha(x)
    calls = [spy.seen[:3], spy.seen[3:]]
    assert [name for name, _, _ in spy.seen] == ["rotate", "bias", "value"] * 2
    for call in calls:
        assert len({(tuple(qp), tuple(kp)) for _, qp, kp in call}) == 1  # rotate, bias, value: one draw
    assert calls[0][0][1] != calls[1][0][1]  # the next call draws anew
    assert not torch.allclose(first, second)


def test_one_draw_shared_across_the_batch():
    rand = RandomizedPositions(Rotary(DH), max_len=1000)
    row = torch.randn(1, H, 5, DH)
    rq, rk = rand.rotate(row.expand(3, -1, -1, -1), row.expand(3, -1, -1, -1))
    assert torch.equal(rq[0], rq[1]) and torch.equal(rq[0], rq[2]) and torch.equal(rk[1], rk[2])


def test_pending_draw_is_per_thread():
    rand = RandomizedPositions(ALiBi(1, causal=False), max_len=10**6, sample="distances")
    q = torch.zeros(1, 1, 4, DH)
    rand.rotate(q, q)
    mine = rand.last_draw
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append((rand.bias(q, 4), rand.last_draw)))
    thread.start()
    thread.join()
    assert not torch.equal(theirs[0][1], mine)  # the other thread drew its own
    expected = -distance_map(mine.tolist(), 4, 4).abs().double() * ref_slopes(1)[0]
    torch.testing.assert_close(rand.bias(q, 4)[0, 0].double(), expected)  # this thread's rotate draw


def test_wrapper_attributes_and_parameters():
    shaw = ShawRelative(DH)
    rand = RandomizedPositions(shaw, max_len=64, sample="distances")
    assert rand.caches is False and rand.adds_value is True and rand.reads_keys is False
    assert rand.max_len == 64 and rand.scheme is shaw
    assert set(rand.state_dict()) == {"scheme.rel_keys", "scheme.rel_values"}
    assert {id(p) for p in rand.parameters()} == {id(shaw.rel_keys), id(shaw.rel_values)}
    assert RandomizedPositions(ShawRelative(DH, on_values=False), max_len=8).adds_value is False
    assert "max_len=64, sample='distances'" in repr(rand)


def test_greedy_decoding_falls_back_to_no_cache():
    from attnlab.models import DecoderOnlyTransformer

    torch.manual_seed(0)
    model = DecoderOnlyTransformer(vocab_size=7, d_model=16, n_heads=2, n_layers=1, position="alibi").eval()
    for module in list(model.modules()):
        if isinstance(module, MultiHeadAttention) and module.position is not None:
            module.position = RandomizedPositions(module.position, max_len=50, sample="distances")
    out = model.generate(torch.tensor([[1, 2, 3]]), 4, use_cache=True)  # would raise on a cached step
    assert out.shape == (1, 4)


# -- the input tables --------------------------------------------------------------------


def ref_sinusoid_rows(positions, d_model, base=10000.0):
    """Vaswani §3.5, interleaved, float64."""
    p = torch.tensor(positions, dtype=torch.float64)[:, None]
    w = torch.tensor([base ** (-2 * i / d_model) for i in range(d_model // 2)], dtype=torch.float64)
    return torch.stack(((p * w).sin(), (p * w).cos()), dim=-1).flatten(-2)  # [L, D]


def test_randomized_sinusoidal_adds_the_rows_at_the_draw():
    pe = RandomizedSinusoidal(1000, 8)
    h = torch.randn(3, 5, 8, dtype=torch.float64)
    pe.double()  # the table is recomputed in float64, not cast from float32
    draw = seeded(1, lambda: sample_positions(5, 1000)).tolist()
    out = seeded(1, lambda: pe(h))
    assert pe.last_draw.tolist() == draw and draw != list(range(5))
    torch.testing.assert_close(out - h, ref_sinusoid_rows(draw, 8).expand(3, -1, -1), atol=1e-12, rtol=0)
    assert pe.caches is False and "pe" not in pe.state_dict()


def test_randomized_sinusoidal_with_max_len_equal_to_length_is_positional_encoding():
    h = torch.randn(2, 6, 10)
    assert torch.equal(RandomizedSinusoidal(6, 10)(h), PositionalEncoding(6, 10, scale_input=False)(h))
    concat = RandomizedSinusoidal(6, 10, layout="concat")(torch.zeros(1, 6, 10))[0]
    torch.testing.assert_close(concat, PositionalEncoding(6, 10, scale_input=False, layout="concat").pe[0])


def test_randomized_learned_rows_and_gradient_reach_only_the_drawn_rows():
    pe = RandomizedLearned(50, 4)
    h = torch.randn(2, 6, 4)
    pe.train()
    out = pe(h)
    draw = pe.last_draw
    assert bool((draw[1:] > draw[:-1]).all()) and int(draw.max()) < 50
    assert torch.equal(out, h + pe.pe[0, draw].detach())
    out.pow(2).sum().backward()
    touched = pe.pe.grad[0].abs().sum(-1) > 0  # [max_len]
    assert touched.nonzero().flatten().tolist() == draw.tolist()
    assert set(pe.state_dict()) == {"pe"} and pe.caches is False


@pytest.mark.parametrize("make", [lambda: RandomizedSinusoidal(10**4, 4), lambda: RandomizedLearned(10**4, 4)],
                         ids=["sinusoidal", "learned"])
def test_tables_draw_per_call_in_eval_too_and_share_across_the_batch(make):
    pe = make().eval()
    h = torch.zeros(3, 5, 4)
    with torch.no_grad():
        a, b = pe(h), pe(h)
    assert not torch.equal(a, b)
    assert torch.equal(a[0], a[1]) and torch.equal(a[0], a[2])


# -- bad input ---------------------------------------------------------------------------


def _rotate_long():
    q = torch.zeros(1, H, 9, DH)
    return RandomizedPositions(Rotary(DH), max_len=8).rotate(q, q)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: sample_positions(5, 4), ValueError, r"n=5.*max_len=4"),
    (lambda: sample_positions(1, 0), ValueError, r"max_len.*0"),
    (lambda: sample_positions(-1, 3), ValueError, r"n.*-1"),
    (lambda: sample_positions(2, 3.0), TypeError, r"max_len.*3\.0"),
    (lambda: sample_positions(2, 3, generator=3), TypeError, r"generator.*int"),
    (lambda: RandomizedPositions(Rotary(DH), max_len=0), ValueError, r"max_len.*0"),
    (lambda: RandomizedPositions(Rotary(DH), max_len=None), TypeError, r"max_len.*None"),
    (lambda: RandomizedPositions(NoPosition(), max_len=8), TypeError, r"scheme.*PositionScheme.*NoPosition"),
    (lambda: RandomizedPositions(torch.nn.Linear(2, 2), max_len=8), TypeError, r"scheme.*Linear"),
    (lambda: RandomizedPositions(ALiBi(H), max_len=8, sample="offsets"), ValueError, r"sample.*'offsets'"),
    (lambda: RandomizedPositions(Rotary(DH), max_len=8, sample="distances"), ValueError, r"distances.*Rotary"),
    (_rotate_long, ValueError, r"max_len=8.*L=9"),
    (lambda: RandomizedPositions(ALiBi(H), max_len=3, sample="distances").bias(torch.zeros(1, H, 4, DH), 4),
     ValueError, r"max_len=3.*L=4"),
    (lambda: RandomizedPositions(ALiBi(H), max_len=9).bias(torch.zeros(1, H, 1, DH), 4, q_offset=3),
     ValueError, r"cache.*q_offset=3"),
    (lambda: RandomizedPositions(Rotary(DH), max_len=9).rotate(torch.zeros(1, H, 1, DH), torch.zeros(1, H, 4, DH),
                                                               q_offset=3, k_offset=3), ValueError, r"cache"),
    (lambda: RandomizedPositions(ShawRelative(DH), max_len=9).value_term(torch.rand(1, H, 1, 4), q_offset=3),
     ValueError, r"cache.*q_offset=3"),
    (lambda: RandomizedPositions(ShawRelative(DH), max_len=9).value_term(torch.rand(1, 4)), ValueError,
     r"weights.*\[1, 4\]"),
    (lambda: RandomizedSinusoidal(0, 4), ValueError, r"max_len.*0"),
    (lambda: RandomizedLearned(4, 4)(torch.zeros(1, 5, 4)), ValueError, r"max_len=4.*L=5"),
    (lambda: RandomizedSinusoidal(4, 4)(torch.zeros(1, 5, 4)), ValueError, r"max_len=4.*L=5"),
    (lambda: RandomizedSinusoidal(8, 4)(torch.zeros(1, 1, 4), offset=3), ValueError, r"offset=3"),
    (lambda: RandomizedLearned(8, 4)(torch.zeros(1, 1, 4), offset=2), ValueError, r"offset=2"),
    (lambda: RandomizedLearned(8, 4)(torch.zeros(1, 1, 5)), ValueError, r"\[B, L, 4\]"),
    (lambda: RandomizedLearned(8, 4, init="zeros"), ValueError, r"init.*'zeros'"),
    (lambda: ALiBi(H, left_offset=float("nan")), ValueError, r"left_offset.*nan"),
    (lambda: ALiBi(H, left_offset="0.5"), TypeError, r"left_offset.*'0\.5'"),
    (lambda: Rotary(DH).rotate_at(torch.zeros(1, 1, 3, DH), torch.zeros(1, 1, 3, DH), q_pos=torch.arange(3.0),
                                  k_pos=torch.arange(3)), TypeError, r"q_pos.*float32"),
    (lambda: Rotary(DH).rotate_at(torch.zeros(1, 1, 3, DH), torch.zeros(1, 1, 3, DH), q_pos=torch.arange(3),
                                  k_pos=torch.arange(4)), ValueError, r"k_pos must be \[3\].*\[4\]"),
    (lambda: ALiBi(H).bias_rel(torch.zeros(1, H, 3, DH), rel=torch.zeros(2, 3, dtype=torch.long)), ValueError,
     r"rel must be \[T, S\] = \[3, S\].*\[2, 3\]"),
    (lambda: ShawRelative(DH).value_term_rel(torch.rand(1, 1, 3, 3), rel=torch.zeros(3, 3)), TypeError,
     r"rel.*float32"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
