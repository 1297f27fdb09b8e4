"""What a run trains and tests on: every bad field of a TaskSpec, named."""


import pytest

from attnlab.data import (
    TaskSpec,
)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"task": "foo"}, ValueError, "task 'foo' is not one of copy, reverse, duplicate, sort, squares"),
    ({"train_len": 0}, ValueError, "train_len must be positive, got 0"),
    ({"task": "squares", "train_len": 2, "test_lens": (4,)}, ValueError, "train_len must be >= 3, got 2"),
    ({"test_lens": ()}, ValueError, r"test_lens must be a non-empty .* got \[\]"),
    ({"test_lens": (8, 8)}, ValueError, r"distinct lengths, got \[8, 8\]"),
    ({"test_lens": (8, 0)}, ValueError, "test_lens must be positive, got 0"),
    ({"test_lens": 8}, TypeError, "test_lens must be a sequence of lengths, got 8"),
    ({"test_lens": (8, 9.5)}, TypeError, "test_lens must be an integer, got 9.5"),
    ({"n_train": 0}, ValueError, "n_train must be positive, got 0"),
    ({"n_test": -1}, ValueError, "n_test must be positive, got -1"),
    ({"n_symbols": 1}, ValueError, "n_symbols must be >= 2, got 1"),
    ({"min_train_len": 9}, ValueError, r"min_train_len \(9\) must not exceed train_len \(8\)"),
    ({"min_train_len": 0}, ValueError, "min_train_len must be positive, got 0"),
    ({"task": "squares", "train_len": 4, "test_lens": (4,), "min_train_len": 3}, ValueError,
     "min_train_len must be None for the squares task, got 3"),
    ({"test_seed": 13}, ValueError, r"test_seed \(13\) must differ from train_seed \(13\)"),
    ({"train_seed": None}, TypeError, "train_seed must be an integer, got None"),
    ({"test_seed": -1}, ValueError, "test_seed must be in .*got -1"),
])
def test_task_spec_bad_fields(kwargs, error, match):
    with pytest.raises(error, match=match):
        TaskSpec(**kwargs)
