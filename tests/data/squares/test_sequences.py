"""generate_sequences / squares_tensor: the labs' noisy squares, number for number, no global state."""

# numpy's legacy global RNG is used on purpose: it is the labs' generator, and the state we must not touch.
# ruff: noqa: NPY002

import subprocess
import sys

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from attnlab.data import CORNERS, generate_sequences, squares_tensor

GOLDEN_ATOL = 1e-4


def labs_generate_sequences(n=128, variable_len=False, seed=13):
    """The labs' generator, written out as they do it (global np.random), for parity checks."""
    corners = np.array([[-1, -1], [-1, 1], [1, 1], [1, -1]])
    np.random.seed(seed)
    bases = np.random.randint(4, size=n)
    lengths = np.random.randint(3, size=n) + 2 if variable_len else [4] * n
    directions = np.random.randint(2, size=n)
    points = [corners[[(b + i) % 4 for i in range(4)]][:: d * 2 - 1][:l] + np.random.randn(l, 2) * 0.1
              for b, d, l in zip(bases, directions, lengths, strict=True)]
    return points, directions


@pytest.fixture
def keep_numpy_state():
    state = np.random.get_state()
    yield
    np.random.set_state(state)


def same_numpy_state(a, b):
    return a[0] == b[0] and np.array_equal(a[1], b[1]) and a[2:] == b[2:]


# -- golden values (the book's saved outputs) ----------------------------------------


def test_variable_length_golden_values():
    points, _ = generate_sequences(variable_len=True)
    assert_allclose(points[0], [[1.1264, 1.1571], [0.8738, -1.0075], [-0.9150, -1.0915], [-1.0867, 1.0773]],
                    atol=GOLDEN_ATOL)
    assert_allclose(points[1], [[0.9225, -0.8989], [1.0942, 0.9230]], atol=GOLDEN_ATOL)
    assert [len(p) for p in points[:10]] == [4, 2, 4, 3, 3, 2, 3, 2, 2, 3]


def test_book_training_set_golden_values():
    points, directions = generate_sequences(n=256, seed=13)
    assert directions[:10].tolist() == [0, 1, 1, 1, 0, 1, 1, 1, 0, 1]
    assert directions.sum() == 123
    assert_allclose(points[0][0], [-0.9708, 0.9610], atol=GOLDEN_ATOL)


@pytest.mark.parametrize(("seed", "expected"), [
    (19, [1, 0, 1, 1, 1, 1, 1, 0, 0, 1]),  # the labs' test set (Ch 9)
    (17, [1, 0, 0, 0, 1, 1, 0, 0, 0, 0]),  # Ch 10's test set
])
def test_test_set_directions(seed, expected):
    assert generate_sequences(seed=seed)[1][:10].tolist() == expected


@pytest.mark.parametrize("kwargs", [
    {}, {"variable_len": True}, {"n": 256}, {"seed": 19}, {"n": 1, "seed": 0},
    {"n": 300, "variable_len": True, "seed": 2**32 - 1},
])
def test_bitwise_equal_to_the_labs_generator(kwargs, keep_numpy_state):
    ref_points, ref_directions = labs_generate_sequences(**kwargs)
    points, directions = generate_sequences(**kwargs)
    assert len(points) == len(ref_points)
    for ours, ref in zip(points, ref_points, strict=True):
        assert ours.dtype == ref.dtype == np.float64
        assert np.array_equal(ours, ref)
    assert directions.dtype == ref_directions.dtype
    assert np.array_equal(directions, ref_directions)


# -- the task's rule -----------------------------------------------------------------


@pytest.mark.parametrize("variable_len", [False, True])
def test_each_sequence_walks_a_noisy_square_in_its_direction(variable_len):
    points, directions = generate_sequences(n=500, variable_len=variable_len, seed=3)
    for p, d in zip(points, directions, strict=True):
        # nearest corner of each point; the noise (std 0.1) never gets close to half a side
        dist = np.linalg.norm(p[:, None, :] - CORNERS[None, :, :], axis=-1)  # [L, 4]
        corner = dist.argmin(axis=1)
        assert np.abs(p - CORNERS[corner]).max() < 0.5
        steps = np.diff(corner) % 4
        assert (steps == (1 if d == 1 else 3)).all()  # A -> B -> C -> D is clockwise
        assert len(set(corner)) == len(p)
        if not variable_len:
            assert len(p) == 4


def test_corners_walked_clockwise_turn_clockwise():
    # A -> B -> C -> D: the signed area (shoelace) of a clockwise walk is negative.
    x, y = CORNERS[:, 0], CORNERS[:, 1]
    assert 0.5 * np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y) < 0


def test_types_and_shapes():
    points, directions = generate_sequences(n=7, seed=1)
    assert isinstance(points, list) and len(points) == 7
    assert all(p.shape == (4, 2) and p.dtype == np.float64 for p in points)
    assert directions.shape == (7,) and np.issubdtype(directions.dtype, np.integer)
    assert set(directions.tolist()) <= {0, 1}


def test_variable_len_changes_the_directions_drawn():
    # The lengths are drawn before the directions (the book's order).
    assert not np.array_equal(generate_sequences()[1], generate_sequences(variable_len=True)[1])


# -- no global state -----------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"variable_len": True}, {"seed": None}])
def test_numpy_global_state_is_untouched(kwargs, keep_numpy_state):
    np.random.seed(1234)
    before = np.random.get_state()
    generate_sequences(**kwargs)
    assert same_numpy_state(before, np.random.get_state())


def test_global_seed_does_not_leak_in(keep_numpy_state):
    np.random.seed(0)
    a = generate_sequences(seed=5)
    np.random.seed(99)
    b = generate_sequences(seed=5)
    assert all(np.array_equal(p, q) for p, q in zip(a[0], b[0], strict=True))


def test_seed_none_is_fresh_randomness():
    a, b = generate_sequences(n=20, seed=None)[0], generate_sequences(n=20, seed=None)[0]
    assert not all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


def test_numpy_integers_are_accepted():
    a = generate_sequences(n=np.int64(5), seed=np.uint32(19))
    b = generate_sequences(n=5, seed=19)
    assert np.array_equal(a[1], b[1])


@pytest.mark.process
def test_data_never_imports_models():
    code = "import sys, attnlab.data; print(any(m.startswith('attnlab.models') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"n": 0}, ValueError, "n must"),
    ({"n": -3}, ValueError, "n must"),
    ({"n": 2.0}, TypeError, "n must"),
    ({"n": True}, TypeError, "n must"),
    ({"n": "8"}, TypeError, "n must"),
    ({"variable_len": "yes"}, TypeError, "variable_len"),
    ({"variable_len": 1}, TypeError, "variable_len"),
    ({"seed": -1}, ValueError, "seed must"),
    ({"seed": 2**32}, ValueError, "seed must"),
    ({"seed": 1.5}, TypeError, "seed must"),
    ({"seed": "13"}, TypeError, "seed must"),
])
def test_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        generate_sequences(**kwargs)


# -- squares_tensor ------------------------------------------------------------------


def test_squares_tensor_is_the_labs_tensor():
    points, _ = generate_sequences()
    full = squares_tensor(points)
    assert full.shape == (128, 4, 2) and full.dtype == torch.float32 and full.is_contiguous()
    assert torch.equal(full, torch.as_tensor(np.array(points)).float())  # the labs' values


def test_squares_tensor_accepts_arrays_tensors_and_lists_of_tensors():
    points, _ = generate_sequences(n=3)
    expected = squares_tensor(points)
    assert torch.equal(squares_tensor(np.stack(points)), expected)
    assert torch.equal(squares_tensor(torch.as_tensor(np.stack(points))), expected)
    assert torch.equal(squares_tensor([torch.as_tensor(p) for p in points]), expected)
    assert torch.equal(squares_tensor(tuple(points)), expected)


def test_squares_tensor_ragged_points_point_to_pad_sequences():
    points, _ = generate_sequences(variable_len=True)
    with pytest.raises(ValueError, match="pad_sequences"):
        squares_tensor(points)


@pytest.mark.parametrize(("points", "error", "match"), [
    ([], ValueError, "points is empty"),
    ([np.zeros(4)], ValueError, r"points\[0\] must be \[L, F\]"),
    (np.zeros((4, 2)), ValueError, r"\[N, L, F\]"),
    ("squares", TypeError, "points must"),
    (42, TypeError, "points must"),
    ([["a", "b"]], TypeError, "points must"),
])
def test_squares_tensor_bad_input(points, error, match):
    with pytest.raises(error, match=match):
        squares_tensor(points)
