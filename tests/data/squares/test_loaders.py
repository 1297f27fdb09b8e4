"""SquareSequences / make_loaders: the labs' loaders, a real test set, a shuffle of their own."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from attnlab.data import SquareLoaders, SquareSequences, generate_sequences, make_loaders, squares_tensor


def batches(loader):
    return [tuple(t.clone() for t in batch) for batch in loader]


def order(loader):
    """The squares of one epoch, in the order the loader gave them ``[N, 4, 2]``."""
    return torch.cat([full for full, _ in loader])


def test_shapes_and_batches():
    train_loader, test_loader = make_loaders()
    train, test = batches(train_loader), batches(test_loader)
    assert len(train) == len(test) == 8
    for full, target in train:
        assert full.shape == (16, 4, 2) and target.shape == (16, 2, 2)
        assert full.dtype == target.dtype == torch.float32
        assert torch.equal(full[:, 2:], target)  # the model trains on the whole square
    for source, target in test:
        assert source.shape == (16, 2, 2) and target.shape == (16, 2, 2)


def test_last_batch_may_be_smaller():
    train_loader, test_loader = make_loaders(n_train=50, n_test=20, batch_size=16)
    assert [len(f) for f, _ in train_loader] == [16, 16, 16, 2]
    assert [len(s) for s, _ in test_loader] == [16, 4]


def test_eval_batch_size_batches_only_the_test_set_the_same_squares_in_order():
    small = make_loaders(n_test=40, batch_size=16)
    large = make_loaders(n_test=40, batch_size=16, eval_batch_size=128)
    assert [len(s) for s, _ in large.test] == [40]
    assert [len(f) for f, _ in large.train] == [16] * 8
    for i in (0, 1):
        assert torch.equal(torch.cat([b[i] for b in small.test]), next(iter(large.test))[i])


def test_input_len_moves_the_split():
    train_loader, test_loader = make_loaders(input_len=1)
    full, target = next(iter(train_loader))
    source, test_target = next(iter(test_loader))
    assert full.shape == (16, 4, 2) and target.shape == (16, 3, 2)
    assert source.shape == (16, 1, 2) and test_target.shape == (16, 3, 2)


def test_training_set_is_the_labs_and_every_square_comes_once_per_epoch():
    train_loader, _ = make_loaders()
    expected = squares_tensor(generate_sequences(n=128, seed=13)[0])
    assert torch.equal(train_loader.dataset.full, expected)
    for _ in range(2):
        seen = order(train_loader)
        assert not torch.equal(seen, expected)  # shuffled
        key = lambda t: sorted(map(tuple, t.reshape(len(t), -1).tolist()))  # noqa: E731
        assert key(seen) == key(expected)


def test_test_set_is_the_seed_19_squares_not_the_training_points():
    loaders = make_loaders()
    points, directions = generate_sequences(seed=19)
    full_test = squares_tensor(points)
    assert torch.equal(loaders.full_test, full_test)
    assert torch.equal(loaders.test_directions, torch.as_tensor(directions))
    assert loaders.test_directions.dtype == torch.int64
    assert not torch.equal(loaders.full_test, loaders.train.dataset.full)  # the labs' bug
    # in order, unshuffled, the given points then the target
    sources, targets = zip(*batches(loaders.test), strict=True)
    assert torch.equal(torch.cat(sources), full_test[:, :2])
    assert torch.equal(torch.cat(targets), full_test[:, 2:])


def test_loaders_unpack_as_a_pair_and_reach_the_test_data():
    loaders = make_loaders(n_test=40)
    assert isinstance(loaders, SquareLoaders) and isinstance(loaders, tuple)
    train_loader, test_loader = loaders
    assert train_loader is loaders.train and test_loader is loaders.test
    assert loaders.full_test is test_loader.dataset.full and loaders.full_test.shape == (40, 4, 2)
    assert loaders.test_directions is test_loader.dataset.directions


# -- randomness ----------------------------------------------------------------------


def test_torch_and_numpy_global_rng_untouched_with_a_test_generator_of_its_own():
    torch.manual_seed(7)
    torch_before, np_before = torch.get_rng_state(), np.random.get_state()  # noqa: NPY002 (the global one)
    train_loader, test_loader = make_loaders(test_draws_global=False)
    for _ in range(2):
        batches(train_loader)
        batches(test_loader)
    assert torch.equal(torch.get_rng_state(), torch_before)
    np_after = np.random.get_state()  # noqa: NPY002
    assert np.array_equal(np_after[1], np_before[1]) and np_after[2:] == np_before[2:]


def test_by_default_the_test_loader_draws_from_torchs_generator_as_the_labs_one_does():
    # The labs' test loader: DataLoader(TensorDataset(...), batch_size=16), no generator of its own.
    labs = DataLoader(TensorDataset(torch.zeros(128, 2, 2), torch.zeros(128, 2, 2)), batch_size=16)
    _, test_loader = make_loaders()
    states = []
    for loader in (labs, test_loader):
        torch.manual_seed(7)
        for _ in range(3):
            batches(loader)
        states.append(torch.get_rng_state())
    torch.manual_seed(7)
    assert torch.equal(states[0], states[1]) and not torch.equal(states[1], torch.get_rng_state())


def test_the_train_loader_shuffles_with_its_own_generator():
    train_loader, test_loader = make_loaders()
    assert isinstance(train_loader.generator, torch.Generator)
    # One generator shuffles and seeds the iterator: saving it is enough to resume exactly.
    assert train_loader.sampler.sampler.generator is train_loader.generator
    assert test_loader.generator is not train_loader.generator


def test_same_shuffle_seed_same_order_different_seed_different_order():
    a, b = make_loaders(shuffle_seed=3).train, make_loaders(shuffle_seed=3).train
    c = make_loaders(shuffle_seed=4).train
    for _ in range(3):  # epoch after epoch
        first, second, other = order(a), order(b), order(c)
        assert torch.equal(first, second)
        assert not torch.equal(first, other)


def test_epochs_differ_and_saved_generator_state_resumes_exactly():
    train_loader, _ = make_loaders()
    epoch1 = order(train_loader)
    state = train_loader.generator.get_state()
    epoch2 = order(train_loader)
    assert not torch.equal(epoch1, epoch2)
    fresh, _ = make_loaders()
    fresh.generator.set_state(state)
    assert torch.equal(order(fresh), epoch2)


def test_global_seed_does_not_change_the_order():
    torch.manual_seed(0)
    a = order(make_loaders().train)
    torch.manual_seed(1)
    b = order(make_loaders().train)
    assert torch.equal(a, b)


# -- SquareSequences -----------------------------------------------------------------


def test_square_sequences_items():
    full = SquareSequences(10, seed=19)
    source = SquareSequences(10, seed=19, inputs="source", input_len=3)
    assert len(full) == len(source) == 10
    x, y = full[4]
    assert torch.equal(x, full.full[4]) and torch.equal(y, full.full[4, 2:])
    x, y = source[4]
    assert torch.equal(x, source.full[4, :3]) and torch.equal(y, source.full[4, 3:])
    assert torch.equal(source.source, source.full[:, :3]) and torch.equal(source.target, source.full[:, 3:])


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"input_len": 0}, ValueError, "input_len"),
    ({"input_len": 4}, ValueError, "input_len"),
    ({"input_len": 2.0}, TypeError, "input_len"),
    ({"inputs": "target"}, ValueError, "inputs"),
    ({"n": 0}, ValueError, "n must"),
    ({"seed": -1}, ValueError, "seed"),
])
def test_square_sequences_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        SquareSequences(**kwargs)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"n_train": 0}, ValueError, "n_train"),
    ({"n_test": -1}, ValueError, "n_test"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"batch_size": 16.0}, TypeError, "batch_size"),
    ({"shuffle_seed": -1}, ValueError, "shuffle_seed"),
    ({"shuffle_seed": None}, TypeError, "shuffle_seed"),
    ({"train_seed": 19}, ValueError, "test_seed .* must differ from train_seed"),
    ({"test_seed": None}, TypeError, "test_seed"),
    ({"train_seed": None}, TypeError, "train_seed"),
    ({"train_seed": 2**32}, ValueError, "train_seed"),
    ({"test_seed": "19"}, TypeError, "test_seed"),
    ({"input_len": 4}, ValueError, "input_len"),
    ({"eval_batch_size": 0}, ValueError, "eval_batch_size"),
])
def test_make_loaders_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_loaders(**kwargs)
