"""copy / reverse / duplicate / sort: attnlab's own token tasks, drawn by make_task_batch."""

from collections import Counter

import pytest
import torch

from attnlab.data import (
    BOS,
    EOS,
    FIRST_SYMBOL,
    PAD,
    TaskBatch,
    make_task_batch,
)


def real_tokens(batch, i):
    """Row ``i``'s source and target tokens (without BOS/EOS/PAD) as lists."""
    n = int(batch.lengths[i])
    return batch.source[i, :n].tolist(), batch.target_out[i, :n].tolist()


# -- the token tasks: golden values from the definitions ------------------------------


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_shapes_dtypes_and_frame(task):
    b = make_task_batch(task, 5, 7, generator=0)
    assert isinstance(b, TaskBatch)
    assert b.source.shape == (5, 7) and b.target_in.shape == b.target_out.shape == (5, 8)
    assert b.source_mask.shape == (5, 1, 7) and b.target_mask.shape == (5, 1, 8)
    assert all(t.dtype == torch.int64 for t in (b.source, b.target_in, b.target_out, b.lengths))
    assert b.source_mask.dtype == b.target_mask.dtype == torch.bool
    assert b.source_mask.all() and b.target_mask.all() and (b.lengths == 7).all()
    # teacher forcing: BOS + target in, target + EOS out, the same target in both
    assert (b.target_in[:, 0] == BOS).all() and (b.target_out[:, -1] == EOS).all()
    assert torch.equal(b.target_in[:, 1:], b.target_out[:, :-1])
    # the source is content only, in range
    assert ((b.source >= FIRST_SYMBOL) & (b.source < FIRST_SYMBOL + 10)).all()


def test_copy_equals_the_source():
    b = make_task_batch("copy", 6, 5, generator=1)
    assert torch.equal(b.target_out[:, :5], b.source)


def test_reverse_reverses():
    b = make_task_batch("reverse", 6, 5, generator=1)
    for i in range(6):
        source, target = real_tokens(b, i)
        assert target == source[::-1]


def test_sort_is_sorted_and_a_permutation_with_duplicates():
    b = make_task_batch("sort", 64, 12, n_symbols=4, generator=2)
    assert (b.target_out[:, 1:12] >= b.target_out[:, :11]).all()
    for i in range(64):
        source, target = real_tokens(b, i)
        assert Counter(source) == Counter(target) and target == sorted(source)
    # 12 draws from 4 symbols repeat: the task is sorting a multiset
    assert any(len(set(b.source[i].tolist())) < 12 for i in range(64))


def test_a_known_sequence():
    # The same generator seed gives the same source for every task, so the targets can be written out.
    src = make_task_batch("copy", 1, 4, generator=5).source
    for task, expected in (("copy", src[0].tolist()), ("reverse", src[0].flip(0).tolist()),
                           ("sort", sorted(src[0].tolist()))):
        b = make_task_batch(task, 1, 4, generator=5)
        assert torch.equal(b.source, src)
        assert b.target_out[0].tolist() == [*expected, EOS]
        assert b.target_in[0].tolist() == [BOS, *expected]


def test_length_one_and_two_symbols():
    b = make_task_batch("reverse", 3, 1, n_symbols=2, generator=0)
    assert b.source.shape == (3, 1) and torch.equal(b.target_out[:, 0], b.source[:, 0])
    assert set(b.source.ravel().tolist()) <= {3, 4}


# -- variable lengths and padding ----------------------------------------------------


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_variable_lengths_are_padded_and_masked(task):
    b = make_task_batch(task, 200, 9, min_len=3, generator=3)
    assert b.source.shape == (200, 9) and b.target_out.shape == (200, 10)
    assert b.lengths.min() == 3 and b.lengths.max() == 9  # both ends drawn in 200 rows
    steps = torch.arange(10)
    for i in range(200):
        n = int(b.lengths[i])
        assert b.source_mask[i, 0].tolist() == [True] * n + [False] * (9 - n)
        assert b.target_mask[i, 0].tolist() == [True] * (n + 1) + [False] * (9 - n)
        assert (b.source[i, n:] == PAD).all() and (b.source[i, :n] >= FIRST_SYMBOL).all()
        assert b.target_out[i, n] == EOS and (b.target_out[i, n + 1:] == PAD).all()
        assert b.target_in[i, 0] == BOS and (b.target_in[i, n + 1:] == PAD).all()
    # the masks say what the PAD ids say
    assert torch.equal(b.source_mask[:, 0], b.source != PAD)
    assert torch.equal(b.target_mask[:, 0], b.target_out != PAD)
    assert torch.equal(b.target_mask[:, 0], steps <= b.lengths[:, None])


def test_reverse_and_sort_only_touch_the_real_tokens():
    for task, fn in (("reverse", lambda s: s[::-1]), ("sort", sorted)):
        b = make_task_batch(task, 50, 8, min_len=1, generator=4)
        for i in range(50):
            source, target = real_tokens(b, i)
            assert target == fn(source)


def test_min_len_keeps_the_tokens_drawn():
    # tokens are drawn before lengths: the variable batch is the fixed one, cut short
    fixed = make_task_batch("copy", 20, 6, generator=8)
    varied = make_task_batch("copy", 20, 6, min_len=2, generator=8)
    assert torch.equal(varied.source, fixed.source.masked_fill(~varied.source_mask[:, 0], PAD))
    same = make_task_batch("copy", 20, 6, min_len=6, generator=8)
    assert torch.equal(same.source, fixed.source) and (same.lengths == 6).all()


# -- randomness ----------------------------------------------------------------------


def test_same_seed_same_data_different_seed_different_data():
    a = make_task_batch("sort", 8, 6, min_len=2, generator=11)
    b = make_task_batch("sort", 8, 6, min_len=2, generator=torch.Generator().manual_seed(11))
    c = make_task_batch("sort", 8, 6, min_len=2, generator=12)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a.source, c.source)


def test_a_generator_is_advanced_not_reset():
    g = torch.Generator().manual_seed(0)
    first, second = make_task_batch("copy", 4, 5, generator=g), make_task_batch("copy", 4, 5, generator=g)
    assert not torch.equal(first.source, second.source)


def test_global_seed_does_not_leak_in():
    torch.manual_seed(0)
    a = make_task_batch("copy", 4, 5, generator=3)
    torch.manual_seed(1)
    b = make_task_batch("copy", 4, 5, generator=3)
    assert torch.equal(a.source, b.source)


# -- bad arguments -------------------------------------------------------------------


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    (("foo", 4, 3), {}, ValueError, "task 'foo' is not one of copy, reverse, duplicate, sort$"),
    (("squares", 4, 3), {}, ValueError,
     "task 'squares' is not one of copy, reverse, duplicate, sort .*use squares_task"),
    (("copy", 0, 3), {}, ValueError, "n must be positive, got 0"),
    (("copy", 4, 0), {}, ValueError, "length must be positive, got 0"),
    (("copy", 4, 3.0), {}, TypeError, "length must be an integer, got 3.0"),
    (("copy", 4, 3), {"n_symbols": 1}, ValueError, "n_symbols must be >= 2, got 1"),
    (("copy", 4, 3), {"min_len": 4}, ValueError, r"min_len \(4\) must not exceed length \(3\)"),
    (("copy", 4, 3), {"min_len": 0}, ValueError, "min_len must be positive, got 0"),
    (("copy", 4, 3), {"generator": None}, TypeError,
     "generator must be a torch.Generator or an integer seed, got None"),
    (("copy", 4, 3), {"generator": -1}, ValueError, "generator must be >= 0, got -1"),
])
def test_make_task_batch_bad_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        make_task_batch(*args, **{"generator": 0, **kwargs})


def test_make_task_batch_needs_a_generator():
    with pytest.raises(TypeError, match="generator"):
        make_task_batch("copy", 4, 3)
