"""copy / reverse / sort / squares: the length-generalisation tasks, their sets and loaders."""

# numpy's legacy global RNG is read on purpose: it is the state we must not touch.
# ruff: noqa: NPY002

import random
from collections import Counter

import numpy as np
import pytest
import torch

from attnlab.data import generate_sequences, squares_tensor
from attnlab.data.layouts import decoder_only_batch
from attnlab.data.task_loader import TaskDataset, task_loader
from attnlab.data.task_names import make_task_sets
from attnlab.data.tasks import (
    BOS,
    EOS,
    FIRST_SYMBOL,
    PAD,
    SquaresBatch,
    TaskBatch,
    TaskSets,
    TaskSpec,
    Vocab,
    make_task_batch,
    squares_task,
)


def real_tokens(batch, i):
    """Row ``i``'s source and target tokens (without BOS/EOS/PAD) as lists."""
    n = int(batch.lengths[i])
    return batch.source[i, :n].tolist(), batch.target_out[i, :n].tolist()


# -- vocabulary ----------------------------------------------------------------------


def test_vocab_ids():
    assert (PAD, BOS, EOS, FIRST_SYMBOL) == (0, 1, 2, 3)
    vocab = Vocab()
    assert vocab.size == 13 and list(vocab.symbols) == list(range(3, 13))
    assert Vocab(2).size == 5
    assert vocab.format(torch.tensor([1, 7, 3, 2, 0])) == "<bos> 7 3 <eos> <pad>"


@pytest.mark.parametrize(("value", "error"), [(1, ValueError), (0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_vocab_needs_two_symbols(value, error):
    with pytest.raises(error, match=f"n_symbols must .*got {value}"):
        Vocab(value)


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


def test_global_seed_does_not_leak_in():
    torch.manual_seed(0)
    a = make_task_batch("copy", 4, 5, generator=3)
    torch.manual_seed(1)
    b = make_task_batch("copy", 4, 5, generator=3)
    assert torch.equal(a.source, b.source)


# -- squares -------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [13, 19, 0])
def test_squares_first_four_corners_are_generate_sequences(seed):
    expected = squares_tensor(generate_sequences(n=32, seed=seed)[0])  # [N, 4, 2]
    _, directions = generate_sequences(n=32, seed=seed)
    for n_corners in (3, 4, 9):
        sq = squares_task(32, n_corners, seed=seed)
        k = min(n_corners, 4)
        assert torch.equal(sq.full[:, :k], expected[:, :k])
        assert torch.equal(sq.directions, torch.as_tensor(directions).long())


def test_squares_walk_round_with_fresh_noise():
    sq = squares_task(64, 11, seed=13)
    assert isinstance(sq, SquaresBatch) and sq.full.shape == (64, 11, 2) and sq.full.dtype == torch.float32
    assert torch.equal(sq.source, sq.full[:, :2]) and torch.equal(sq.target, sq.full[:, 2:])
    corners = sq.full.sign()  # noise of std 0.1 never flips a +-1 corner
    assert torch.equal(corners[:, 4:], corners[:, :-4])  # corner k + 4 is corner k
    assert not torch.allclose(sq.full[:, 4:], sq.full[:, :-4])  # ... with fresh noise
    noise = sq.full - corners
    assert 0.08 < noise.std() < 0.12 and noise.abs().max() < 0.6
    # a clockwise walk turns clockwise at every step (negative cross product), all the way round
    steps = corners[:, 1:] - corners[:, :-1]  # [N, K - 1, 2]
    cross = steps[:, :-1, 0] * steps[:, 1:, 1] - steps[:, :-1, 1] * steps[:, 1:, 0]  # [N, K - 2]
    clockwise = sq.directions == 1
    assert (cross[clockwise] < 0).all() and (cross[~clockwise] > 0).all()


def test_squares_longer_walks_continue_shorter_ones():
    short, long = squares_task(16, 6, seed=19), squares_task(16, 10, seed=19)
    assert torch.equal(long.full[:, :6], short.full)
    assert squares_task(16, 4, n_given=3, seed=19).target.shape == (16, 1, 2)


def test_squares_seeded_and_numpy_state_untouched():
    np.random.seed(3)
    before = np.random.get_state()
    a, b, c = squares_task(8, 6, seed=5), squares_task(8, 6, seed=5), squares_task(8, 6, seed=6)
    assert torch.equal(a.full, b.full) and not torch.equal(a.full, c.full)
    after = np.random.get_state()
    assert np.array_equal(after[1], before[1]) and after[2:] == before[2:]


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


def test_make_task_sets_needs_a_spec():
    with pytest.raises(TypeError, match="spec must be a TaskSpec, got dict"):
        make_task_sets({"task": "copy"})


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


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ((0, 4), {}, ValueError, "n must be positive, got 0"),
    ((4, 2), {}, ValueError, r"n_corners \(2\) must exceed n_given \(2\)"),
    ((4, 4), {"n_given": 0}, ValueError, "n_given must be positive, got 0"),
    ((4, 4.0), {}, TypeError, "n_corners must be an integer, got 4.0"),
    ((4, 4), {"seed": None}, TypeError, "seed must be an integer, got None"),
    ((4, 4), {"seed": 2**32}, ValueError, "seed must be in .*got 4294967296"),
])
def test_squares_task_bad_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        squares_task(*args, **kwargs)


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
