"""AbacusEmbedding (McLeish et al. 2024): rows at the task's digit indices, a random offset per batch in training.

Expected values are the table's own rows picked by indices worked out here (the rule
of ``Abacus.forward`` in github.com/mcleish7/arithmetic: indices > 0 move by ``k``,
``k`` uniform over ``0 .. max_k``), and offsets recovered by re-seeding a generator.
"""

import copy

import pytest
import torch

from attnlab.data.arithmetic import encode
from attnlab.data.arithmetic.numbering import digit_positions
from attnlab.encodings.abacus import AbacusEmbedding
from attnlab.encodings.scheme import ModelSizes

D = 6


def ids(*rows):
    return torch.tensor(rows, dtype=torch.int64)


def test_eval_adds_the_rows_at_the_indices_with_no_offset():
    abacus = AbacusEmbedding(d_model=D, max_position=16, max_offset=4).eval()
    h = torch.randn(2, 5, D)
    p = ids([1, 2, 0, 1, 3], [0, 4, 5, 6, 0])
    out = abacus(h, position_ids=p)
    assert out.shape == (2, 5, D) and out.dtype == h.dtype
    assert torch.equal(out, h + abacus.pe[p])
    assert abacus.last_offsets is None
    assert torch.equal(abacus(h, position_ids=p), out)  # evaluation draws nothing


def test_training_offsets_are_per_row_bounded_and_leave_non_digits():
    abacus = AbacusEmbedding(d_model=D, max_position=40, max_offset=29, per_row=True,
                             generator=torch.Generator().manual_seed(0))
    B = 16
    p = ids(*[[0, 1, 2, 3, 0]] * B)
    out = abacus(torch.zeros(B, 5, D), position_ids=p)
    k = abacus.last_offsets
    assert k.shape == (B,) and 0 <= int(k.min()) and int(k.max()) <= 29
    assert len(set(k.tolist())) > 1  # each row its own
    for b in range(B):
        shifted = torch.tensor([0, 1 + k[b], 2 + k[b], 3 + k[b], 0])
        assert torch.equal(out[b], abacus.pe[shifted])  # digits moved by k_b, the others at row 0


def test_offsets_are_the_seeded_draws_and_cover_their_range():
    draws = []
    abacus = AbacusEmbedding(d_model=D, max_position=10, max_offset=2, per_row=True,
                             generator=torch.Generator().manual_seed(7))
    for _ in range(40):
        abacus(torch.zeros(4, 2, D), position_ids=ids(*[[1, 2]] * 4))
        draws.append(abacus.last_offsets)
    again = torch.Generator().manual_seed(7)
    expected = torch.cat([torch.randint(0, 3, (4,), generator=again) for _ in range(40)])
    assert torch.equal(torch.cat(draws), expected)
    assert set(expected.tolist()) == {0, 1, 2}  # randint(0, max_k) as the authors': 0 and max_k included


def test_max_offset_zero_draws_none():
    abacus = AbacusEmbedding(d_model=D, max_position=4, max_offset=0)
    out = abacus(torch.zeros(3, 2, D), position_ids=ids(*[[1, 3]] * 3))
    assert abacus.last_offsets.tolist() == [0, 0, 0] and torch.equal(out[0], abacus.pe[[1, 3]])


def test_per_batch_offsets_are_the_authors_code_and_the_default():
    """``Abacus.forward`` (cramming/architectures/embeddings.py): ``k = random.randint(0, self.max_k)`` once per
    call, added to every digit of every row; one seeded draw per call here."""
    abacus = AbacusEmbedding(d_model=D, max_position=200, generator=torch.Generator().manual_seed(1))
    assert abacus.per_row is False
    again = torch.Generator().manual_seed(1)
    p = ids(*[[1, 2, 0, 3]] * 8)
    for _ in range(5):
        out = abacus(torch.zeros(8, 4, D), position_ids=p)
        k = int(torch.randint(0, 101, (1,), generator=again))
        assert abacus.last_offsets.tolist() == [k] * 8
        assert torch.equal(out, abacus.pe[torch.tensor([1 + k, 2 + k, 0, 3 + k])].expand(8, 4, D))


def test_the_global_generator_is_used_without_one():
    abacus = AbacusEmbedding(d_model=D, max_position=200)
    torch.manual_seed(3)
    abacus(torch.zeros(5, 2, D), position_ids=ids(*[[1, 2]] * 5))
    first = abacus.last_offsets
    torch.manual_seed(3)
    abacus(torch.zeros(5, 2, D), position_ids=ids(*[[1, 2]] * 5))
    assert torch.equal(first, abacus.last_offsets)


def test_a_digit_index_is_one_embedding_wherever_the_number_is():
    """The units digit of every number gets one vector, however far into the sequence the number starts."""
    abacus = AbacusEmbedding(d_model=D, max_position=50, max_offset=10).eval()
    seq = torch.stack([encode("2+2345=4345"), encode("1234+5=6234")])  # 2 + 5432 = 5434, 4321 + 5 = 4326
    p = digit_positions(seq)  # [2, 11]
    out = abacus(torch.zeros(2, 11, D), position_ids=p)
    units = out[p == 1]  # every number's first digit
    assert units.shape[0] == 6 and torch.equal(units, units[:1].expand_as(units))
    assert torch.equal(out[0, 3], out[1, 1])  # the tens digit of 5432 and of 4321
    assert torch.equal(out[0, 1], out[1, 4])  # "+" and "=": row 0, not a digit
    assert not torch.equal(out[0, 0], out[0, 3])


def test_gradients_reach_the_rows_read():
    abacus = AbacusEmbedding(d_model=D, max_position=12, max_offset=2).eval()
    abacus(torch.zeros(1, 3, D), position_ids=ids([1, 0, 4])).sum().backward()
    touched = abacus.pe.grad.abs().sum(dim=1) > 0
    assert touched.nonzero().flatten().tolist() == [0, 1, 4]


def test_dtype_device_and_copy():
    g = torch.Generator().manual_seed(0)
    abacus = AbacusEmbedding(d_model=D, max_position=12, max_offset=2, generator=g).eval()
    h = torch.zeros(1, 2, D, dtype=torch.float64)
    assert abacus(h, position_ids=ids([1, 2]).int()).dtype == torch.float64
    clone = copy.deepcopy(abacus)
    assert torch.equal(clone.pe, abacus.pe)


def test_caches_in_evaluation_only():
    abacus = AbacusEmbedding(d_model=D)
    assert abacus.caches is False
    assert abacus.eval().caches is True


def test_offset_is_accepted_and_does_not_move_the_positions():
    abacus = AbacusEmbedding(d_model=D, max_position=12, max_offset=2).eval()
    h = torch.zeros(1, 2, D)
    assert torch.equal(abacus(h, offset=5, position_ids=ids([1, 2])), abacus(h, position_ids=ids([1, 2])))


def test_for_model_leaves_room_for_the_offsets():
    abacus = AbacusEmbedding.for_model(ModelSizes(n_heads=2, head_dim=4, d_model=8, causal=True, max_len=64))
    assert (abacus.d_model, abacus.max_position, abacus.max_offset) == (8, 165, 100)
    # The longest number a 64-token sequence holds, shifted by the largest offset, still has a row.
    abacus(torch.zeros(1, 64, 8), position_ids=torch.arange(1, 65)[None])
    big = AbacusEmbedding.for_model(ModelSizes(n_heads=2, head_dim=4, d_model=8, causal=True))
    assert big.max_position == 1125


def test_missing_position_ids_is_a_clear_error():
    abacus = AbacusEmbedding(d_model=D)
    with pytest.raises(ValueError, match="needs position_ids"):
        abacus(torch.zeros(1, 3, D))


@pytest.mark.parametrize("bad, error, match", [
    (torch.zeros(1, 3), TypeError, "integer position_ids"),
    (torch.zeros(2, 3, dtype=torch.int64), ValueError, "shape"),
    (torch.tensor([[1, -1, 0]]), ValueError, ">= 0"),
    ([[1, 2, 3]], TypeError, "integer position_ids"),
])
def test_bad_position_ids(bad, error, match):
    abacus = AbacusEmbedding(d_model=D)
    with pytest.raises(error, match=match):
        abacus(torch.zeros(1, 3, D), position_ids=bad)


def test_positions_past_the_table_are_refused():
    abacus = AbacusEmbedding(d_model=D, max_position=10, max_offset=4)
    with pytest.raises(ValueError, match="max_position=10"):
        abacus.eval()(torch.zeros(1, 2, D), position_ids=ids([9, 10]))
    # Training: 9 fits alone, but not with every offset; a row that may overflow is refused when it does.
    abacus.train()
    with pytest.raises(ValueError, match="training offset"):
        for _ in range(50):
            abacus(torch.zeros(1, 1, D), position_ids=ids([9]))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"d_model": 0}, ValueError, "d_model"),
    ({"d_model": D, "max_position": 1}, ValueError, "max_position"),
    ({"d_model": D, "max_offset": -1}, ValueError, "max_offset"),
    ({"d_model": D, "max_position": 10, "max_offset": 9}, ValueError, "max_offset"),
    ({"d_model": D, "per_row": 1}, TypeError, "per_row"),
    ({"d_model": D, "std": 0.0}, ValueError, "std"),
    ({"d_model": D, "generator": 3}, TypeError, "generator"),
])
def test_bad_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        AbacusEmbedding(**kwargs)


def test_bad_inputs_to_forward():
    abacus = AbacusEmbedding(d_model=D)
    with pytest.raises(ValueError, match=r"\[B, L, 6\]"):
        abacus(torch.zeros(1, 3, D + 1), position_ids=ids([1, 2, 3]))
    with pytest.raises(TypeError, match="floating"):
        abacus(torch.zeros(1, 3, D, dtype=torch.int64), position_ids=ids([1, 2, 3]))
    with pytest.raises(ValueError, match="offset"):
        abacus(torch.zeros(1, 3, D), offset=-1, position_ids=ids([1, 2, 3]))
