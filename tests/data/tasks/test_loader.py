"""Mini-batches of a task's set: each an indexing op, seeded, in order for testing."""


import pytest
import torch

from attnlab.data import (
    PAD,
    SquaresBatch,
    TaskBatch,
    make_task_batch,
    squares_task,
)
from attnlab.data.tasks.loader import TaskDataset, task_loader

# -- loaders -------------------------------------------------------------------------


def epoch(loader):
    return torch.cat([b.source for b in loader])


def test_loader_batches_cover_the_set_once_per_epoch():
    data = make_task_batch("copy", 50, 4, min_len=2, generator=0)
    loader = task_loader(data, 16, seed=3)
    batches = list(loader)
    assert [len(b.source) for b in batches] == [16, 16, 16, 2]
    assert all(isinstance(b, TaskBatch) and b.target_mask.shape[1:] == (1, 5) for b in batches)
    rows = epoch(loader)
    assert not torch.equal(rows, data.source)  # shuffled
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, data.source.tolist()))
    # each row's fields stay together
    b = batches[0]
    assert torch.equal(b.target_mask[:, 0], b.target_out != PAD) and torch.equal(b.source_mask[:, 0], b.source != PAD)


def test_loader_order_is_seeded_and_test_loader_is_in_order():
    data = make_task_batch("sort", 40, 3, generator=0)
    a, b, c = task_loader(data, 8, seed=1), task_loader(data, 8, seed=1), task_loader(data, 8, seed=2)
    for _ in range(2):  # epoch after epoch
        first, second, other = epoch(a), epoch(b), epoch(c)
        assert torch.equal(first, second) and not torch.equal(first, other)
    assert torch.equal(epoch(task_loader(data, 8, shuffle=False)), data.source)
    assert a.sampler.sampler.generator is a.generator


def test_loader_for_squares_and_device():
    sq = squares_task(10, 5)
    batches = list(task_loader(sq, 4, shuffle=False, device="cpu"))
    assert all(isinstance(b, SquaresBatch) for b in batches)
    assert torch.equal(torch.cat([b.full for b in batches]), sq.full)
    assert torch.equal(torch.cat([b.target for b in batches]), sq.target)
    assert batches[0].to("cpu").full.device.type == "cpu"
    assert TaskDataset(sq)[[1, 3]].full.shape == (2, 5, 2) and len(TaskDataset(sq)) == 10


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"batch_size": 0}, ValueError, "batch_size must be positive, got 0"),
    ({"batch_size": 2.0}, TypeError, "batch_size must be an integer, got 2.0"),
    ({"shuffle": 1}, TypeError, "shuffle must be a bool, got 1"),
    ({"seed": -2}, ValueError, "seed must be >= 0, got -2"),
])
def test_loader_bad_arguments(kwargs, error, match):
    data = make_task_batch("copy", 4, 3, generator=0)
    with pytest.raises(error, match=match):
        task_loader(data, **{"batch_size": 2, **kwargs})
    with pytest.raises(TypeError, match="batch must be a TaskBatch or SquaresBatch, got tuple"):
        task_loader((data.source,), 2)
