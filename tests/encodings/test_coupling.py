"""CoupledPositions (Cho et al. 2024): a learned table at the coupled ids, from a random start per row in training.

The start rule is re-derived here from ``AdditionDatasetWithCoupledPositions`` in
github.com/HanseulJo/position-coupling (``start`` uniform over ``1 .. max_position -
len(answer)``, a table of ``max_position + 1`` rows): every shift that keeps a row's
largest id inside the table, and none past it; draws are recovered by re-seeding.
"""

import pytest
import torch

from attnlab.data.arithmetic import ReversedAddition, encode
from attnlab.data.arithmetic.numbering import coupled_positions
from attnlab.encodings.coupling import CoupledPositions
from attnlab.encodings.scheme import ModelSizes

D = 4


def ids(*rows):
    return torch.tensor(rows, dtype=torch.int64)


def test_eval_adds_the_rows_at_the_ids():
    coupling = CoupledPositions(d_model=D, max_position=12).eval()
    h = torch.randn(2, 4, D)
    p = ids([2, 3, 1, 0], [0, 1, 2, 5])
    out = coupling(h, position_ids=p)
    assert out.shape == (2, 4, D) and torch.equal(out, h + coupling.pe[p])
    assert coupling.last_offsets is None


def test_digits_of_one_significance_share_a_vector():
    coupling = CoupledPositions(d_model=D, max_position=12).eval()
    p = coupled_positions(encode("75+86=521")[None])  # 57 + 68 = 125
    out = coupling(torch.zeros(1, 9, D), position_ids=p)
    assert torch.equal(out[0, 0], out[0, 3]) and torch.equal(out[0, 0], out[0, 6])  # units
    assert torch.equal(out[0, 1], out[0, 4]) and torch.equal(out[0, 1], out[0, 7])  # tens
    assert torch.equal(out[0, 2], out[0, 5])  # "+" and "="


def test_training_starts_cover_every_shift_that_fits_and_no_more():
    """Row b moves by k_b in 0 .. R - 1 - max id: Cho et al.'s start in 1 .. max_position - len(answer)."""
    R = 8
    coupling = CoupledPositions(d_model=D, max_position=R, generator=torch.Generator().manual_seed(0))
    p = ids([0, 2, 1, 4, 0], [0, 1, 2, 6, 0], [0, 0, 0, 0, 0])  # largest ids 4, 6, 0
    seen = [set(), set(), set()]
    for _ in range(200):
        out = coupling(torch.zeros(3, 5, D), position_ids=p)
        k = coupling.last_offsets
        for b in range(3):
            seen[b].add(int(k[b]))
            moved = torch.where(p[b] > 0, p[b] + k[b], p[b])
            assert torch.equal(out[b], coupling.pe[moved])  # every id > 0 moves, 0 stays
    assert seen == [set(range(4)), set(range(2)), set(range(8))]


def test_the_starts_are_the_seeded_draws():
    R = 20
    coupling = CoupledPositions(d_model=D, max_position=R, generator=torch.Generator().manual_seed(3))
    p = ids([1, 2, 3], [1, 2, 9])
    coupling(torch.zeros(2, 3, D), position_ids=p)
    u = torch.rand(2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    choices = torch.tensor([R - 3, R - 9])
    assert torch.equal(coupling.last_offsets, (u * choices).long())


def test_a_task_sequence_trains_the_rows_a_longer_test_reads():
    """Train at length 3 in a table for length 12: over many steps the shifted ids reach the top row."""
    task = ReversedAddition()
    s = task.sample(32, 3, generator=torch.Generator().manual_seed(0))
    p = coupled_positions(torch.cat([s.inputs, s.outputs], dim=1))  # [32, 12]: ids 1 .. 5
    test = task.sample(1, 12, generator=torch.Generator().manual_seed(1))
    top = int(coupled_positions(torch.cat([test.inputs, test.outputs], dim=1)).max())  # 14
    coupling = CoupledPositions(d_model=D, max_position=top + 1, generator=torch.Generator().manual_seed(2))
    reached = set()
    for _ in range(20):
        coupling(torch.zeros(32, 12, D), position_ids=p)
        reached |= set((p + coupling.last_offsets[:, None]).masked_select(p > 0).tolist())
    assert reached == set(range(1, top + 1))


def test_caches_in_evaluation_only_and_offset_is_not_a_shift():
    coupling = CoupledPositions(d_model=D, max_position=12)
    assert coupling.caches is False and coupling.eval().caches is True
    h = torch.zeros(1, 2, D)
    assert torch.equal(coupling(h, offset=3, position_ids=ids([1, 2])), coupling(h, position_ids=ids([1, 2])))


def test_for_model():
    sizes = ModelSizes(n_heads=2, head_dim=4, d_model=8, causal=True, max_len=30)
    coupling = CoupledPositions.for_model(sizes)
    assert (coupling.d_model, coupling.max_position) == (8, 32)
    assert CoupledPositions.for_model(ModelSizes(n_heads=2, head_dim=4, d_model=8, causal=True)).max_position == 1024


def test_missing_or_bad_position_ids():
    coupling = CoupledPositions(d_model=D, max_position=6)
    with pytest.raises(ValueError, match="needs position_ids"):
        coupling(torch.zeros(1, 2, D))
    with pytest.raises(TypeError, match="integer position_ids"):
        coupling(torch.zeros(1, 2, D), position_ids=torch.ones(1, 2))
    with pytest.raises(ValueError, match="shape"):
        coupling(torch.zeros(1, 2, D), position_ids=ids([1, 2, 3]))
    with pytest.raises(ValueError, match="max_position=6"):
        coupling(torch.zeros(1, 2, D), position_ids=ids([1, 6]))  # in training too: no start fits it


@pytest.mark.parametrize("kwargs, error, match", [
    ({"d_model": 0}, ValueError, "d_model"),
    ({"d_model": D, "max_position": 1}, ValueError, "max_position"),
    ({"d_model": D, "std": -1.0}, ValueError, "std"),
    ({"d_model": D, "generator": "seed"}, TypeError, "generator"),
])
def test_bad_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        CoupledPositions(**kwargs)
