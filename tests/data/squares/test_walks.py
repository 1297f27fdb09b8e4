"""The noisy squares walked round and round: the length lab's real-valued task."""

# numpy's legacy global RNG is read on purpose: it is the state we must not touch.
# ruff: noqa: NPY002


import numpy as np
import pytest
import torch

from attnlab.data import (
    SquaresBatch,
    generate_sequences,
    squares_task,
    squares_tensor,
)

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
