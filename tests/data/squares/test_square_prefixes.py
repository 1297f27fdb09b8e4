"""generate_prefixes / SquarePrefixes / make_loaders(variable_len=True): the book's variable-length squares,
the corners that follow them, padded and masked.

The expected values come from the book's generator, copied below as the book writes it (numpy's global
stream), and from the book's rule for walking the square, written out here on its own: a walk is the
four corners in the book's order, and it goes on round the same cycle.
"""

# numpy's legacy global RNG is used on purpose: it is the book's generator; the fixture puts its state back.
# ruff: noqa: NPY002

import numpy as np
import pytest
import torch

from attnlab.data import SquarePrefixes, generate_prefixes, generate_sequences, make_loaders

pytestmark = pytest.mark.usefixtures("one_thread")


# -- the book's generator, verbatim (the positional-encoding lab, "Data Preparation") -------------

def generate_sequences_book(n=128, variable_len=False, seed=13):
    basic_corners = np.array([[-1, -1], [-1, 1], [1, 1], [1, -1]])
    np.random.seed(seed)
    bases = np.random.randint(4, size=n)
    if variable_len:
        lengths = np.random.randint(3, size=n) + 2
    else:
        lengths = [4] * n
    directions = np.random.randint(2, size=n)
    points = [basic_corners[[(b + i) % 4 for i in range(4)]][slice(None, None, d*2-1)][:l] + np.random.randn(l, 2) * 0.1 for b, d, l in zip(bases, directions, lengths)]  # noqa: E501, E741, B905
    return points, directions


BOOK_CORNERS = np.array([[-1, -1], [-1, 1], [1, 1], [1, -1]])


def expected_prefixes(n, seed, n_next):
    """The book's variable-length squares, then ``n_next`` corners continuing each walk, with noise drawn
    next from numpy's global stream as ``randn(n, n_next, 2) * 0.1``."""
    np.random.seed(seed)
    bases = np.random.randint(4, size=n)  # the book's first draw: each walk's starting corner
    points, directions = generate_sequences_book(n, variable_len=True, seed=seed)
    noise = np.random.randn(n, n_next, 2) * 0.1  # numpy's global stream, right after the book's draws
    clean = np.zeros((n, n_next, 2))
    for i, (b, d, p) in enumerate(zip(bases, directions, points, strict=True)):
        # The book's cycle: clockwise b, b+1, b+2, b+3; counter-clockwise that reversed. It goes on round.
        cycle = BOOK_CORNERS[[(b + k) % 4 for k in range(4)]][:: d * 2 - 1]
        for j in range(n_next):
            clean[i, j] = cycle[(len(p) + j) % 4]
    return points, clean + noise, directions


@pytest.fixture
def keep_numpy_state():
    state = np.random.get_state()
    yield
    np.random.set_state(state)


# -- generate_prefixes against the book ---------------------------------------------------------


@pytest.mark.parametrize(("n", "seed", "n_next"), [(128, 13, 2), (40, 19, 2), (1, 0, 2), (57, 2**32 - 1, 2),
                                                   (30, 7, 1), (30, 7, 5)])
def test_generate_prefixes_is_the_books_squares_and_their_continuation(n, seed, n_next, keep_numpy_state):
    ref_points, ref_next, ref_directions = expected_prefixes(n, seed, n_next)
    points, next_corners, directions = generate_prefixes(n, seed, n_next=n_next)
    assert len(points) == n
    for ours, ref in zip(points, ref_points, strict=True):
        assert ours.dtype == np.float64
        assert np.array_equal(ours, ref)
    assert np.array_equal(directions, ref_directions)
    assert next_corners.shape == (n, n_next, 2) and next_corners.dtype == np.float64
    np.testing.assert_allclose(next_corners, ref_next, rtol=0, atol=1e-12)


def test_generate_prefixes_leaves_numpy_global_state_alone(keep_numpy_state):
    np.random.seed(123)
    before = np.random.get_state()
    generate_prefixes(16, 13)
    after = np.random.get_state()
    assert np.array_equal(before[1], after[1]) and before[2:] == after[2:]


def test_generate_prefixes_continuation_walks_on_round_the_square():
    # Rounded to the nearest corner (the noise is 0.1): after 2 corners the next two are the square's other
    # two corners (the labs' task); after 3, the fourth and then the first again; after 4, the first two again.
    points, next_corners, _ = generate_prefixes(200, 13, n_next=2)
    assert {len(p) for p in points} == {2, 3, 4}
    for p, following in zip(points, next_corners, strict=True):
        given, nxt = np.round(p).astype(int), np.round(following).astype(int)
        walk = np.concatenate([given, nxt])
        if len(p) == 2:
            assert {tuple(c) for c in walk} == {tuple(c) for c in BOOK_CORNERS}
        elif len(p) == 3:
            assert {tuple(c) for c in walk[:4]} == {tuple(c) for c in BOOK_CORNERS}
            assert np.array_equal(nxt[1], given[0])
        else:
            assert np.array_equal(nxt, given[:2])


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"n": 0}, ValueError, r"n must be positive, got 0"),
    ({"n": 2.5}, TypeError, r"n must be an integer, got 2\.5"),
    ({"n": True}, TypeError, r"n must be an integer, got True"),
    ({"seed": None}, TypeError, r"seed must be an integer, got None"),
    ({"seed": -1}, ValueError, r"seed must be in \[0, 2\*\*32 - 1\], got -1"),
    ({"seed": 1.5}, TypeError, r"seed must be an integer"),
    ({"n_next": 0}, ValueError, r"n_next must be positive, got 0"),
    ({"n_next": "2"}, TypeError, r"n_next must be an integer, got '2'"),
])
def test_generate_prefixes_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        generate_prefixes(**{"n": 4, "seed": 13, **kwargs})


# -- SquarePrefixes -------------------------------------------------------------------------------


def test_square_prefixes_tensors(keep_numpy_state):
    n = 50
    data = SquarePrefixes(n, seed=19)
    points, next_corners, directions = expected_prefixes(n, 19, 2)
    assert len(data) == n and data.input_len == 4
    assert data.source.shape == (n, 4, 2) and data.source.dtype == torch.float32
    assert data.source_mask.shape == (n, 1, 4) and data.source_mask.dtype == torch.bool
    assert data.target.shape == (n, 2, 2) and data.full.shape == (n, 6, 2)
    lengths = [len(p) for p in points]
    assert data.lengths.tolist() == lengths
    assert data.source_mask.sum(dim=(1, 2)).tolist() == lengths
    for i, p in enumerate(points):
        L = len(p)
        assert data.source_mask[i, 0].tolist() == [True] * L + [False] * (4 - L)  # right padding
        assert torch.equal(data.source[i, :L], torch.from_numpy(p).float())
    # Zeros exactly where the mask is False, and only padding there.
    assert torch.equal(data.source[~data.source_mask[:, 0]], torch.zeros(int((~data.source_mask).sum()), 2))
    assert bool((data.source[data.source_mask[:, 0]].abs() > 0.5).all())  # real corners are near +-1
    assert torch.equal(data.target, torch.from_numpy(next_corners).float())
    assert torch.equal(data.full, torch.cat([data.source, data.target], dim=1))
    assert data.directions.tolist() == directions.tolist()


def test_square_prefixes_items():
    data = SquarePrefixes(10, seed=13)
    inputs, target = data[3]
    assert set(inputs) == {"X", "source_mask"}
    assert torch.equal(inputs["X"], data.full[3]) and inputs["X"].shape == (6, 2)
    assert torch.equal(inputs["source_mask"], data.source_mask[3]) and inputs["source_mask"].shape == (1, 4)
    assert torch.equal(target, data.target[3])
    inputs, target = data[[4, 0, 7]]
    assert torch.equal(inputs["X"], data.full[[4, 0, 7]]) and inputs["X"].shape == (3, 6, 2)
    assert torch.equal(inputs["source_mask"], data.source_mask[[4, 0, 7]])
    assert torch.equal(target, data.target[[4, 0, 7]])

    source_data = SquarePrefixes(10, seed=13, inputs="source")
    inputs, target = source_data[[1, 2]]
    assert torch.equal(inputs["X"], data.source[[1, 2]]) and inputs["X"].shape == (2, 4, 2)
    assert torch.equal(inputs["source_mask"], data.source_mask[[1, 2]])
    assert torch.equal(target, data.target[[1, 2]])


def test_square_prefixes_target_len():
    data = SquarePrefixes(6, seed=13, target_len=3)
    assert data.target.shape == (6, 3, 2) and data.full.shape == (6, 7, 2)
    _, following, _ = generate_prefixes(6, 13, n_next=3)
    assert torch.equal(data.target, torch.from_numpy(following).float())


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"inputs": "target"}, ValueError, r"inputs"),
    ({"target_len": 0}, ValueError, r"target_len must be positive, got 0"),
    ({"n": 0}, ValueError, r"n must be positive, got 0"),
    ({"seed": None}, TypeError, r"seed must be an integer, got None"),
])
def test_square_prefixes_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        SquarePrefixes(**{"n": 4, "seed": 13, **kwargs})


# -- make_loaders(variable_len=True) --------------------------------------------------------------


def _epoch(loader):
    return [({k: v.clone() for k, v in x.items()}, y.clone()) for x, y in loader]


def test_variable_len_loaders_batches_and_one_pass_over_the_squares():
    train_loader, test_loader = make_loaders(n_train=40, n_test=20, batch_size=16, variable_len=True)
    train_set = train_loader.dataset
    for epoch in range(2):
        batches = _epoch(train_loader)
        assert [len(y) for _, y in batches] == [16, 16, 8]
        seen = []
        for x, y in batches:
            assert set(x) == {"X", "source_mask"}
            B = len(y)
            assert x["X"].shape == (B, 6, 2) and x["source_mask"].shape == (B, 1, 4) and y.shape == (B, 2, 2)
            assert x["source_mask"].dtype == torch.bool
            assert torch.equal(x["X"][:, 4:], y)  # teacher forcing reads the target after the padded source
            # Which square each row is: its full sequence matches exactly one of the training set.
            match = (x["X"][:, None] == train_set.full[None]).all(dim=-1).all(dim=-1)  # [B, N]
            assert match.sum(dim=1).tolist() == [1] * B
            rows = match.float().argmax(dim=1)
            assert torch.equal(x["source_mask"], train_set.source_mask[rows])
            seen += rows.tolist()
        assert sorted(seen) == list(range(40)), f"epoch {epoch}: every square once"
    test_batches = _epoch(test_loader)
    assert [len(y) for _, y in test_batches] == [16, 4]
    X = torch.cat([x["X"] for x, _ in test_batches])
    assert torch.equal(X, test_loader.dataset.source)  # in order, the padded source only
    assert torch.equal(torch.cat([x["source_mask"] for x, _ in test_batches]), test_loader.dataset.source_mask)
    assert isinstance(test_loader.dataset, SquarePrefixes)
    # The test squares are the seed-19 ones.
    assert torch.equal(test_loader.dataset.source, SquarePrefixes(20, seed=19).source)


def test_variable_len_loaders_repeat_with_a_fixed_seed():
    first = make_loaders(n_train=24, n_test=8, batch_size=8, variable_len=True, shuffle_seed=3)
    second = make_loaders(n_train=24, n_test=8, batch_size=8, variable_len=True, shuffle_seed=3)
    for a, b in zip(_epoch(first.train) + _epoch(first.train), _epoch(second.train) + _epoch(second.train),
                    strict=True):
        assert torch.equal(a[0]["X"], b[0]["X"]) and torch.equal(a[0]["source_mask"], b[0]["source_mask"])
        assert torch.equal(a[1], b[1])
    other = make_loaders(n_train=24, n_test=8, batch_size=8, variable_len=True, shuffle_seed=4)
    assert not torch.equal(_epoch(first.train)[0][0]["X"], _epoch(other.train)[0][0]["X"])
    assert first.full_test.shape == (8, 6, 2)


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize("input_len", [1, 3])
def test_variable_len_refuses_another_input_len(input_len):
    with pytest.raises(ValueError, match=rf"input_len must stay 2 with variable_len.*got {input_len}"):
        make_loaders(variable_len=True, input_len=input_len)


# -- generate_sequences unchanged by the refactor (a cheap regression guard) ----------------------


@pytest.mark.parametrize("kwargs", [{}, {"variable_len": True}, {"n": 33, "seed": 19},
                                    {"n": 33, "variable_len": True, "seed": 5}])
def test_generate_sequences_is_still_the_books(kwargs, keep_numpy_state):
    ref_points, ref_directions = generate_sequences_book(**kwargs)
    points, directions = generate_sequences(**kwargs)
    assert len(points) == len(ref_points)
    for ours, ref in zip(points, ref_points, strict=True):
        assert np.array_equal(ours, ref)
    assert np.array_equal(directions, ref_directions)
