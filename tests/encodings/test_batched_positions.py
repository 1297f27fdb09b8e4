"""Per-row positions for every scheme and table: row ``b`` of a batched call is that row's own 1-d call.

The primitives take ``q_pos [B, T]`` / ``k_pos [B, S]`` (distances ``[B, T, S]``), the
offset methods ``position_ids`` / ``key_position_ids``, the input tables ``position_ids``.
Expected values come from the 1-d calls the schemes were tested with before (their own
reference tests), from the sinusoidal float64 formula, and from the randomized schemes'
rule (position id ``p`` reads the draw's entry ``p``), re-derived here from ``last_draw``.
"""

import math

import pytest
import torch

from attnlab.attention import KVCache
from attnlab.encodings import (
    FIRE,
    KERPLE,
    ALiBi,
    AxialRotary,
    CoPE,
    LearnedPositionalEncoding,
    NoPosition,
    PositionalEncoding,
    PositionScheme,
    RandomizedLearned,
    RandomizedPositions,
    RandomizedSinusoidal,
    Rotary,
    ShawRelative,
    T5RelativeBias,
    XPos,
    sinusoidal,
)
from attnlab.encodings.positions import (
    check_position_ids,
    check_positions,
    check_rel,
    continue_positions,
    pair_distances,
    positions_from_mask,
)
from attnlab.encodings.scheme import bias_dtype, check_heads
from attnlab.encodings.transformer_xl import TransformerXLRelative

B, H, DH, T = 3, 2, 8, 5


def schemes():
    torch.manual_seed(0)
    out = {
        "rotary": Rotary(DH),
        "rotary-half-partial": Rotary(DH, rotary_dim=4, convention="half"),
        "rotary-dynamic": Rotary(DH, rope_parameters={"rope_type": "dynamic", "factor": 2.0},
                                 max_position_embeddings=4),
        "xpos": XPos(DH),
        "axial": AxialRotary(DH, grid=(4, 5)),
        "alibi": ALiBi(H),
        "alibi-bidirectional": ALiBi(H, causal=False, left_offset=0.5),
        "t5": T5RelativeBias(H, num_buckets=8, max_distance=16),
        "shaw": ShawRelative(DH, max_relative_position=3),
        "fire": FIRE(H, hidden=8, init_threshold=6.0),
        "fire-bidirectional": FIRE(H, causal=False, hidden=8, init_threshold=6.0),
        "kerple": KERPLE(H),
        "kerple-power": KERPLE(H, kernel="power"),
        "cope": CoPE(DH, npos_max=12),
        "transformer-xl": TransformerXLRelative(H, DH),
        "none": NoPosition(),
    }
    with torch.no_grad():  # away from the initialisation, which is zero for CoPE and Shaw's tables are small
        for scheme in out.values():
            for p in scheme.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return {name: s.double() for name, s in out.items()}


SCHEMES = schemes()
# Per-row positions: row 0 the indices, row 1 shifted, row 2 a left-padded row (its padding at 0).
Q_POS = torch.tensor([[0, 1, 2, 3, 4], [6, 7, 8, 9, 10], [0, 0, 0, 1, 2]])


def qkw(seed=1):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, H, T, DH, generator=g, dtype=torch.float64) for _ in range(2))
    w = torch.softmax(torch.randn(B, H, T, T, generator=g, dtype=torch.float64), dim=-1)
    return q, k, w


def _bias(scheme, q, k, q_pos, k_pos, **kw):
    extra = {"k": k} if scheme.reads_keys else {}
    return scheme.bias_at(q, q_pos=q_pos, k_pos=k_pos, **extra, **kw)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_each_row_of_a_batched_call_is_that_rows_own_call(name):
    scheme = SCHEMES[name]
    assert scheme.batched_positions
    q, k, w = qkw()
    pos = Q_POS
    rq, rk = scheme.rotate_at(q, k, q_pos=pos, k_pos=pos)
    term = _bias(scheme, q, k, pos, pos) if scheme.adds_score else None
    value = scheme.value_term_at(w, q_pos=pos, k_pos=pos) if scheme.adds_value else None
    for b in range(B):
        one = slice(b, b + 1)
        rq_b, rk_b = scheme.rotate_at(q[one], k[one], q_pos=pos[b], k_pos=pos[b])
        torch.testing.assert_close(rq[one], rq_b, rtol=0, atol=1e-12)
        torch.testing.assert_close(rk[one], rk_b, rtol=0, atol=1e-12)
        if term is not None:
            assert term.shape[0] == B and term.shape[-2:] == (T, T)
            want = _bias(scheme, q[one], k[one], pos[b], pos[b])
            torch.testing.assert_close(term[one], want.expand(1, *term.shape[1:]), rtol=0, atol=1e-12)
        if value is not None:
            torch.testing.assert_close(value[one], scheme.value_term_at(w[one], q_pos=pos[b], k_pos=pos[b]),
                                       rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_position_ids_at_the_indices_are_the_default_call(name):
    scheme = SCHEMES[name]
    q, k, w = qkw(2)
    ids = torch.arange(T).expand(B, T)
    kw = {"k": k} if scheme.reads_keys else {}
    if name != "axial":  # the grid needs every position of it without ids
        for a, b in zip(scheme.rotate(q, k, position_ids=ids), scheme.rotate(q, k), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    got, want = scheme.bias(q, T, position_ids=ids, **kw), scheme.bias(q, T, **kw)
    assert (got is None) == (want is None)
    if got is not None:
        torch.testing.assert_close(got, want.expand_as(got), rtol=0, atol=0)
    got, want = scheme.value_term(w, position_ids=ids), scheme.value_term(w)
    if got is not None:
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_cached_step_at_key_positions_equals_the_full_calls_row():
    """Queries of one step against cached keys at per-row positions: the full per-row call's last rows."""
    q, k, _ = qkw(3)
    for name in ("alibi", "t5", "shaw", "kerple", "fire", "cope", "transformer-xl"):
        scheme = SCHEMES[name]
        kw = {"k": k} if scheme.reads_keys else {}
        full = scheme.bias(q, T, position_ids=Q_POS, **kw)  # [B, H, T, T]
        step = scheme.bias(q[:, :, -2:], T, position_ids=Q_POS[:, -2:], key_position_ids=Q_POS, **kw)
        torch.testing.assert_close(step, full[:, :, -2:], rtol=0, atol=1e-12)


def test_the_keys_need_their_positions_when_they_are_not_the_queries():
    q, _, _ = qkw()
    with pytest.raises(ValueError, match=r"key_position_ids \[B, 7\]"):
        SCHEMES["alibi"].bias(q, 7, position_ids=Q_POS)


class OneRowALiBi(PositionScheme):
    """A user's scheme written for 1-d positions only: ``[H, 1, 1] * [T, S]`` (no batched_positions)."""

    adds_score = True
    relative = True

    def bias_rel(self, q, *, rel, k=None):
        check_heads("q", q)
        assert rel.ndim == 2, "written for one sequence"
        slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
        return (slopes[:, None, None] * -rel.abs().to(torch.float64))[None].to(bias_dtype(q.dtype))


class OneRowRotary(Rotary):
    """Rotary as a user might have written it before per-row positions: refuses anything but 1-d."""

    batched_positions = False

    def rotate_at(self, q, k, *, q_pos, k_pos):
        assert q_pos.ndim == 1 and k_pos.ndim == 1, "written for one sequence"
        return super().rotate_at(q, k, q_pos=q_pos, k_pos=k_pos)


def test_a_scheme_written_for_one_sequence_is_called_row_by_row():
    q, k, _ = qkw(4)
    mine, builtin = OneRowALiBi(), ALiBi(H)
    builtin._slopes64 = torch.tensor([0.5, 0.25], dtype=torch.float64)
    torch.testing.assert_close(mine.bias(q, T, position_ids=Q_POS), builtin.bias(q, T, position_ids=Q_POS),
                               rtol=0, atol=0)
    torch.testing.assert_close(mine.bias(q, T), builtin.bias(q, T), rtol=0, atol=0)  # and without ids, as ever
    for a, b in zip(OneRowRotary(DH).double().rotate(q, k, position_ids=Q_POS),
                    Rotary(DH).double().rotate(q, k, position_ids=Q_POS), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_distances_and_position_checks_take_rows():
    assert pair_distances(torch.arange(3), torch.arange(4)).shape == (3, 4)
    rel = pair_distances(Q_POS, Q_POS)
    assert rel.shape == (B, T, T) and rel[1, 0, 4] == 4 and rel[2, 4, 0] == -2
    check_positions("q_pos", Q_POS, T)
    check_rel(rel, T, T)
    with pytest.raises(ValueError, match=r"q_pos must be \[5\].*got shape \[1, 1, 5\]"):
        check_positions("q_pos", Q_POS[None, :1], T)
    with pytest.raises(ValueError, match=r"rel must be \[T, S\].*\[1, 3, 5, 5\]"):
        check_rel(rel[None], T, T)


@pytest.mark.parametrize(("ids", "error", "match"), [
    (torch.zeros(3, 5), TypeError, r"position_ids must be an integer tensor.*float32"),
    (torch.ones(3, 5, dtype=torch.bool), TypeError, r"position_ids .*bool"),
    ([[0, 1, 2, 3, 4]] * 3, TypeError, r"position_ids must be an integer tensor \[B, L\], got list"),
    (torch.arange(5), ValueError, r"position_ids must be \[3, 5\].*got shape \[5\]"),
    (torch.zeros(2, 5, dtype=torch.long), ValueError, r"position_ids must be \[3, 5\].*got shape \[2, 5\]"),
    (torch.tensor([[0, 1, -1, 2, 3]]), ValueError, r"position_ids must be positions >= 0, got -1"),
])
def test_bad_position_ids_are_refused_naming_them(ids, error, match):
    with pytest.raises(error, match=match):
        check_position_ids(ids, batch=3, length=5)


def test_positions_from_a_left_padding_mask_and_their_continuation():
    mask = torch.tensor([[False, False, True, True], [True, True, True, True], [False, True, False, True]])
    ids = positions_from_mask(mask)
    assert ids.tolist() == [[0, 0, 0, 1], [0, 1, 2, 3], [0, 0, 0, 1]]
    assert continue_positions(ids[:, -1], 2).tolist() == [[2, 3], [4, 5], [2, 3]]
    with pytest.raises(TypeError, match="mask must be a boolean"):
        positions_from_mask(mask.long())


# -- the randomized schemes: one draw, indexed by the position ids ----------------------------------


def test_randomized_positions_at_the_indices_draw_as_without_ids():
    q, k, _ = qkw(5)
    rand = RandomizedPositions(Rotary(DH).double(), max_len=40)
    torch.manual_seed(3)
    plain = rand.rotate(q, k)
    torch.manual_seed(3)
    with_ids = rand.rotate(q, k, position_ids=torch.arange(T).expand(B, T))
    for a, b in zip(plain, with_ids, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_randomized_positions_read_the_draw_at_the_position_ids():
    q, k, _ = qkw(6)
    rotary = Rotary(DH).double()
    rand = RandomizedPositions(rotary, max_len=40)
    torch.manual_seed(4)
    rq, rk = rand.rotate(q, k, position_ids=Q_POS)
    draw = rand.last_draw
    assert draw.shape == (int(Q_POS.max()) + 1,)  # n = max(L, largest id + 1) = 11 sorted positions
    assert bool((draw[1:] > draw[:-1]).all()) and int(draw.max()) < 40
    want_q, want_k = rotary.rotate_at(q, k, q_pos=draw[Q_POS], k_pos=draw[Q_POS])
    torch.testing.assert_close(rq, want_q, rtol=0, atol=0)
    torch.testing.assert_close(rk, want_k, rtol=0, atol=0)


def test_randomized_distances_read_the_draw_at_the_id_offsets():
    alibi = ALiBi(H)
    rand = RandomizedPositions(alibi, max_len=30, sample="distances")
    q = torch.zeros(B, H, T, DH)
    torch.manual_seed(5)
    bias = rand.bias(q, T, position_ids=Q_POS)
    d = torch.cat([torch.zeros(1, dtype=torch.long), rand.last_draw])  # d_0 = 0, d_1 < d_2 < ...
    assert d.shape == (5,)  # the largest |offset| of the ids is 4: distances d_1 .. d_4
    offset = Q_POS[:, None, :] - Q_POS[:, :, None]  # [B, T, S]
    for b in range(B):
        for h in range(H):
            for i in range(T):
                for j in range(T):
                    want = -alibi.slopes[h] * d[offset[b, i, j].abs()]
                    assert math.isclose(float(bias[b, h, i, j]), float(want), abs_tol=1e-6)


# -- the input tables -----------------------------------------------------------------------------


def test_the_sinusoidal_table_at_position_ids_is_the_formulas_rows():
    pe = PositionalEncoding(4, 6, scale_input=False).double()  # rows past max_len computed on demand
    h = torch.zeros(B, T, 6, dtype=torch.float64)
    out = pe(h, position_ids=Q_POS)
    torch.testing.assert_close(out, sinusoidal(11, 6, dtype=torch.float64)[Q_POS], rtol=0, atol=1e-15)
    torch.testing.assert_close(pe(h, position_ids=torch.arange(T)[None]), pe(h), rtol=0, atol=0)


def test_the_learned_table_at_position_ids_and_past_its_rows():
    pe = LearnedPositionalEncoding(12, 6)
    h = torch.randn(B, T, 6)
    torch.testing.assert_close(pe(h, position_ids=Q_POS), h + pe.pe[0, Q_POS], rtol=0, atol=0)
    torch.testing.assert_close(pe(h, position_ids=torch.arange(T).expand(B, T)), pe(h), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"position_ids reach position 12 .*max_len=12"):
        pe(h, position_ids=Q_POS + 2)
    with pytest.raises(ValueError, match=r"position_ids must be positions >= 0"):
        pe(h, position_ids=Q_POS - 1)


@pytest.mark.parametrize("cls", [RandomizedSinusoidal, RandomizedLearned])
def test_randomized_tables_index_their_draw_with_the_position_ids(cls):
    pe = cls(30, 6)
    h = torch.zeros(B, T, 6)
    torch.manual_seed(6)
    plain = pe(h)
    torch.manual_seed(6)
    torch.testing.assert_close(pe(h, position_ids=torch.arange(T).expand(B, T)), plain, rtol=0, atol=0)
    out = pe(h, position_ids=Q_POS)
    table = pe.pe if pe.pe.dim() == 2 else pe.pe[0]  # [max_len, D]
    assert pe.last_draw.shape == (11,)
    torch.testing.assert_close(out, table[pe.last_draw[Q_POS]], rtol=0, atol=0)


# -- the cache keeps each key's position ------------------------------------------------------------


def test_a_cache_keeps_its_keys_positions_and_continues_each_row():
    cache = KVCache()
    kv = torch.zeros(2, 1, 3, 4)
    cache.append(kv, kv)
    assert cache.positions is None and cache.next_positions(2) is None  # the default: 0 .. S - 1
    cache.append(kv[:, :, :1], kv[:, :, :1], positions=torch.tensor([[7], [3]]))
    assert cache.positions.tolist() == [[0, 1, 2, 7], [0, 1, 2, 3]]
    assert cache.next_positions(2).tolist() == [[8, 9], [4, 5]]
    cache.append(kv[:, :, :2], kv[:, :, :2])  # no positions given: each row after its own last
    assert cache.positions[:, -2:].tolist() == [[8, 9], [4, 5]]
    with pytest.raises(ValueError, match=r"positions must be \[2, 1\]"):
        cache.append(kv[:, :, :1], kv[:, :, :1], positions=torch.tensor([[1, 2]]))
    cache.reset()
    assert cache.positions is None
