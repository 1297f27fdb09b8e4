"""A token task's batch as each architecture reads it: the decoder-only and encoder-only layouts, row by row."""

import pytest
import torch

from attnlab.data import BOS, EOS, FIRST_SYMBOL, PAD, TaskBatch, make_task_batch, squares_task, target_length
from attnlab.data.tasks.layouts import EMPTY, decoder_only_batch, encoder_only_batch

TARGETS = {  # each task's target, from its definition, on a plain list
    "copy": lambda s: list(s),
    "reverse": lambda s: s[::-1],
    "duplicate": lambda s: s + s,
    "sort": sorted,
}


@pytest.mark.parametrize("task", sorted(TARGETS))
@pytest.mark.parametrize("n_symbols", [2, 10])
def test_targets_row_by_row(task, n_symbols):
    b = make_task_batch(task, 40, 7, n_symbols=n_symbols, min_len=1, generator=5)
    T = 2 * 7 + 1 if task == "duplicate" else 7 + 1
    assert b.target_in.shape == (40, T) and b.target_out.shape == (40, T) and b.target_mask.shape == (40, 1, T)
    for i in range(40):
        n = int(b.lengths[i])
        source = b.source[i, :n].tolist()
        assert all(FIRST_SYMBOL <= t < FIRST_SYMBOL + n_symbols for t in source)
        target = TARGETS[task](source)
        assert len(target) == target_length(task, n)
        want_out = target + [EOS] + [PAD] * (T - len(target) - 1)
        want_in = [BOS] + target + [PAD] * (T - len(target) - 1)
        assert b.target_out[i].tolist() == want_out
        assert b.target_in[i].tolist() == want_in
        assert b.target_mask[i, 0].tolist() == [t != PAD for t in want_out]


def test_duplicate_keeps_the_source_draws():
    # The same generator state gives the same source whatever the task: only the target differs.
    a = make_task_batch("copy", 16, 9, min_len=2, generator=11)
    b = make_task_batch("duplicate", 16, 9, min_len=2, generator=11)
    assert torch.equal(a.source, b.source) and torch.equal(a.lengths, b.lengths)


def test_target_length_refuses_the_squares():
    with pytest.raises(ValueError, match="task 'squares'"):
        target_length("squares", 4)


@pytest.mark.parametrize("task", sorted(TARGETS))
def test_decoder_only_layout_of_every_task(task):
    b = make_task_batch(task, 10, 5, n_symbols=3, min_len=1, generator=2)
    inputs, labels = decoder_only_batch(b)
    width = 5 + b.target_in.shape[1]
    assert inputs.shape == labels.shape == (10, width)
    for i in range(10):
        n = int(b.lengths[i])
        source = b.source[i, :n].tolist()
        target = TARGETS[task](source)
        want_in = source + [BOS] + target
        want_out = [PAD] * n + target + [EOS]
        assert inputs[i].tolist() == want_in + [PAD] * (width - len(want_in))
        assert labels[i].tolist() == want_out + [PAD] * (width - len(want_out))


@pytest.mark.parametrize("task", sorted(TARGETS))
def test_encoder_only_layout_row_by_row(task):
    b = make_task_batch(task, 12, 6, n_symbols=2, min_len=1, generator=4)
    inputs, labels = encoder_only_batch(b)
    width = 6 + b.target_out.shape[1] - 1
    assert inputs.shape == labels.shape == (12, width) and inputs.dtype == labels.dtype == torch.int64
    for i in range(12):
        n = int(b.lengths[i])
        source = b.source[i, :n].tolist()
        target = TARGETS[task](source)
        want_in = source + [EMPTY] * len(target)
        want_out = [PAD] * n + target
        assert inputs[i].tolist() == want_in + [PAD] * (width - len(want_in))
        assert labels[i].tolist() == want_out + [PAD] * (width - len(want_out))
    # No EOS anywhere: the output length is known from the input.
    assert not (labels == EOS).any() and not (inputs == EOS).any()


def test_encoder_only_layout_hand_written():
    source = torch.tensor([[5, 6, 7], [8, PAD, PAD]])
    batch = TaskBatch(source=source,
                      target_in=torch.tensor([[BOS, 7, 6, 5], [BOS, 8, PAD, PAD]]),
                      target_out=torch.tensor([[7, 6, 5, EOS], [8, EOS, PAD, PAD]]),
                      source_mask=(source != PAD)[:, None], target_mask=torch.ones(2, 1, 4, dtype=torch.bool),
                      lengths=torch.tensor([3, 1]))
    inputs, labels = encoder_only_batch(batch)
    E = EMPTY
    assert inputs.tolist() == [[5, 6, 7, E, E, E], [8, E, PAD, PAD, PAD, PAD]]
    assert labels.tolist() == [[PAD, PAD, PAD, 7, 6, 5], [PAD, 8, PAD, PAD, PAD, PAD]]


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize("layout", [decoder_only_batch, encoder_only_batch])
def test_layouts_refuse_the_squares(layout):
    with pytest.raises(TypeError, match="batch must be a TaskBatch"):
        layout(squares_task(4, 4))


# -- decoder_only_batch ------------------------------------------------------------------


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_decoder_only_batch_row_by_row(task):
    batch = make_task_batch(task, 12, 6, min_len=1, generator=3)
    inputs, labels = decoder_only_batch(batch)
    assert inputs.shape == labels.shape == (12, 13) and inputs.dtype == labels.dtype == torch.int64
    for i in range(12):
        n = int(batch.lengths[i])
        source = batch.source[i, :n].tolist()
        target = batch.target_out[i, :n].tolist()  # the target without EOS
        want_in = source + [BOS] + target
        want_out = [PAD] * n + target + [EOS]
        assert inputs[i].tolist() == want_in + [PAD] * (13 - len(want_in))
        assert labels[i].tolist() == want_out + [PAD] * (13 - len(want_out))


def test_decoder_only_batch_hand_written():
    source = torch.tensor([[5, 6, 7], [8, PAD, PAD]])
    batch = TaskBatch(source=source,
                      target_in=torch.tensor([[BOS, 7, 6, 5], [BOS, 8, PAD, PAD]]),
                      target_out=torch.tensor([[7, 6, 5, EOS], [8, EOS, PAD, PAD]]),
                      source_mask=(source != PAD)[:, None], target_mask=torch.ones(2, 1, 4, dtype=torch.bool),
                      lengths=torch.tensor([3, 1]))
    inputs, labels = decoder_only_batch(batch)
    assert inputs.tolist() == [[5, 6, 7, BOS, 7, 6, 5], [8, BOS, 8, PAD, PAD, PAD, PAD]]
    assert labels.tolist() == [[PAD, PAD, PAD, 7, 6, 5, EOS], [PAD, 8, EOS, PAD, PAD, PAD, PAD]]


def test_decoder_only_batch_refuses_the_squares():
    with pytest.raises(TypeError, match="batch must be a TaskBatch"):
        decoder_only_batch(squares_task(4, 4))
