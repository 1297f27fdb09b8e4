"""pad_sequences / collate_padded: right padding, masks True on the real steps, DataLoader use."""

import functools

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from attnlab.attention import MultiHeadAttention, padding_mask, padding_mask_from_lengths
from attnlab.data import PaddedBatch, collate_padded, generate_sequences, pad_sequences


@pytest.fixture
def var_points():
    return generate_sequences(variable_len=True)[0]


def test_padding_values_and_mask(var_points):
    padded, mask = pad_sequences(var_points)
    lengths = [len(p) for p in var_points]
    assert padded.shape == (128, 4, 2) and padded.dtype == torch.float32
    assert mask.shape == (128, 1, 4) and mask.dtype == torch.bool
    assert mask.sum(-1).ravel().tolist() == lengths
    for i, p in enumerate(var_points):
        assert torch.equal(padded[i, : len(p)], torch.as_tensor(p, dtype=torch.float32))
        assert (padded[i, len(p):] == 0).all()
        assert mask[i, 0, : len(p)].all() and not mask[i, 0, len(p):].any()


def test_mask_matches_attnlab_masks(var_points):
    padded, mask = pad_sequences(var_points)
    lengths = torch.tensor([len(p) for p in var_points])
    assert torch.equal(mask, padding_mask_from_lengths(lengths))
    assert torch.equal(mask, padding_mask(padded))  # no real point is exactly (0, 0)


def test_padded_steps_get_no_attention(var_points):
    padded, mask = pad_sequences(var_points[:6], pad_value=123.0)  # a loud padding value
    mha = MultiHeadAttention(2, 2)
    out, weights = mha(padded, mask=mask, need_weights=True)  # self-attention; weights [B, H, T, S]
    assert torch.isfinite(out).all()
    assert (weights.masked_select(~mask.unsqueeze(1).expand_as(weights)) == 0).all()
    # the real steps' outputs do not depend on what the padding holds
    padded0, _ = pad_sequences(var_points[:6])
    out0 = mha(padded0, mask=mask)
    real = mask.squeeze(1)  # [B, L]
    torch.testing.assert_close(out[real], out0[real])


def test_max_len_and_pad_value():
    padded, mask = pad_sequences([np.ones((2, 3)), np.ones((1, 3))], max_len=5, pad_value=-1.5)
    assert padded.shape == (2, 5, 3)
    assert mask.tolist() == [[[True, True, False, False, False]], [[True, False, False, False, False]]]
    assert (padded[0, 2:] == -1.5).all() and (padded[1, 1:] == -1.5).all()


def test_equal_lengths_and_tensor_input():
    points, _ = generate_sequences(n=4)
    padded, mask = pad_sequences(torch.as_tensor(np.stack(points)))
    assert padded.shape == (4, 4, 2) and mask.all()
    padded2, _ = pad_sequences([torch.as_tensor(p) for p in points])
    assert torch.equal(padded, padded2)


def test_empty_sequences_are_all_padding():
    padded, mask = pad_sequences([np.zeros((0, 2)), np.ones((2, 2))])
    assert padded.shape == (2, 2, 2) and mask[0].sum() == 0 and mask[1].all()


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    (([],), {}, ValueError, "points is empty"),
    (("abc",), {}, TypeError, "points must"),
    ((5,), {}, TypeError, "points must"),
    (([np.ones(3)],), {}, ValueError, r"points\[0\]"),
    (([np.ones((2, 2)), np.ones((2, 3))],), {}, ValueError, "same number of features"),
    (([np.ones((4, 2))], 3), {}, ValueError, "max_len"),
    (([np.ones((4, 2))], -1), {}, ValueError, "max_len"),
    (([np.ones((4, 2))], 4.0), {}, TypeError, "max_len"),
    (([np.ones((4, 2))],), {"pad_value": "0"}, TypeError, "pad_value"),
    (([np.ones((4, 2))],), {"pad_value": None}, TypeError, "pad_value"),
    (([[["x", "y"]]],), {}, TypeError, r"points\[0\]"),
])
def test_pad_sequences_bad_input(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        pad_sequences(*args, **kwargs)


# -- collate_padded ------------------------------------------------------------------


def test_collate_pairs_of_sequences(var_points):
    pairs = [(p[:1], p[1:]) for p in var_points]  # first point -> the rest (1 to 3 steps)
    loader = DataLoader(pairs, batch_size=8, collate_fn=collate_padded)
    batch = next(iter(loader))
    assert isinstance(batch, PaddedBatch)
    assert batch.source.shape == (8, 1, 2) and batch.source_mask.all()
    longest = max(len(p) - 1 for p in var_points[:8])
    assert batch.target.shape == (8, longest, 2)
    assert batch.target_mask.sum(-1).ravel().tolist() == [len(p) - 1 for p in var_points[:8]]
    expected, expected_mask = pad_sequences([p[1:] for p in var_points[:8]])
    assert torch.equal(batch.target, expected) and torch.equal(batch.target_mask, expected_mask)


def test_collate_sequences_with_labels(var_points):
    _, directions = generate_sequences(variable_len=True)
    pairs = list(zip(var_points, directions, strict=True))
    source, source_mask, target, target_mask = collate_padded(pairs[:5])
    assert source.shape == (5, 4, 2) and source_mask.shape == (5, 1, 4)
    assert target.tolist() == directions[:5].tolist() and target_mask is None


def test_collate_pad_value_through_partial():
    pairs = [(np.ones((1, 2)), np.ones((2, 2))), (np.ones((2, 2)), np.ones((1, 2)))]
    batch = functools.partial(collate_padded, pad_value=9.0)(pairs)
    assert batch.source[0, 1].tolist() == [9.0, 9.0] and batch.target[1, 1].tolist() == [9.0, 9.0]


@pytest.mark.parametrize(("batch", "error", "match"), [
    ([], ValueError, "batch must"),
    ([np.ones((2, 2))], TypeError, r"batch\[0\] must be a \(source, target\) pair"),
    ([(np.ones((2, 2)),)], TypeError, r"batch\[0\]"),
    ([(np.ones((2, 2)), 1), (np.ones((2, 2)), [1, 2])], ValueError, "same shape|share one shape"),
])
def test_collate_bad_batches(batch, error, match):
    with pytest.raises(error, match=match):
        collate_padded(batch)
