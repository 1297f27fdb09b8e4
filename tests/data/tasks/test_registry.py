"""Every task by name, and the sets of a spec: training and test sets, their seeds."""

# numpy's legacy global RNG is read on purpose: it is the state we must not touch.
# ruff: noqa: NPY002

import random

import numpy as np
import pytest
import torch

from attnlab.data import (
    TaskSets,
    TaskSpec,
    generate_sequences,
    make_task_batch,
    squares_task,
    squares_tensor,
)
from attnlab.data.tasks.loader import task_loader
from attnlab.data.tasks.registry import make_task_sets, task_named


def test_global_random_states_untouched():
    torch.manual_seed(7)
    random.seed(7)
    np.random.seed(7)
    before = torch.get_rng_state(), np.random.get_state(), random.getstate()
    make_task_batch("reverse", 4, 5, min_len=2, generator=0)
    squares_task(4, 7)
    sets = make_task_sets(TaskSpec(task="copy", n_train=16, n_test=4, test_lens=(4, 6), train_len=4))
    for _ in range(2):
        list(task_loader(sets.train, 5))
        list(task_loader(sets.tests[6], 5, shuffle=False))
    after = torch.get_rng_state(), np.random.get_state(), random.getstate()
    assert torch.equal(after[0], before[0])
    assert np.array_equal(after[1][1], before[1][1]) and after[1][2:] == before[1][2:]
    assert after[2] == before[2]


# -- sets for a length-generalisation run ----------------------------------------------


def test_task_sets_token_task():
    spec = TaskSpec(task="reverse", train_len=5, test_lens=[10, 5, 7], n_train=40, n_test=6, min_train_len=2)
    sets = make_task_sets(spec)
    assert isinstance(sets, TaskSets) and sets.spec is spec and spec.test_lens == (10, 5, 7)
    assert list(sets.tests) == [5, 7, 10]
    assert sets.train.source.shape == (40, 5) and sets.train.lengths.min() >= 2
    for length, test in sets.tests.items():
        assert test.source.shape == (6, length) and (test.lengths == length).all()
    # the training set is make_task_batch at train_seed; no test set repeats it
    again = make_task_batch("reverse", 40, 5, min_len=2, generator=spec.train_seed)
    assert torch.equal(sets.train.source, again.source)
    assert not torch.equal(sets.tests[5].source, sets.train.source[:6])
    assert not torch.equal(sets.tests[5].source, make_task_batch("reverse", 6, 5, generator=spec.test_seed).source)
    assert spec.vocab.size == 13


def test_task_sets_squares():
    spec = TaskSpec(task="squares", train_len=4, test_lens=(4, 6, 8), n_train=128, n_test=10)
    sets = make_task_sets(spec)
    labs_training = squares_tensor(generate_sequences(n=128, seed=13)[0])
    assert torch.equal(sets.train.full, labs_training)  # the labs' training squares
    assert sets.tests[4].full.shape == (10, 4, 2) and sets.tests[8].target.shape == (10, 6, 2)
    assert torch.equal(sets.tests[8].full[:, :6], sets.tests[6].full)  # the same squares, walked further


def test_make_task_sets_needs_a_spec():
    with pytest.raises(TypeError, match="spec must be a TaskSpec, got dict"):
        make_task_sets({"task": "copy"})


def test_every_name_is_a_task_of_that_name_read_from_the_catalog():
    from attnlab import catalog
    from attnlab.data.scan.scan_task import ScanTask
    from attnlab.data.tasks import SquaresTask, TokenTask

    for name in catalog.TASKS:
        task = task_named(name)
        assert task.name == name
        expected = {"squares": SquaresTask, "scan": ScanTask}.get(name, TokenTask)
        assert type(task) is expected, name
    with pytest.raises(ValueError, match="unknown task 'foo'; known: 'copy', 'reverse'"):
        task_named("foo")
