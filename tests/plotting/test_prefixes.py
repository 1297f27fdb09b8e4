"""prefix_pred: the prediction figure of variable-length squares (2, 3 or 4 given corners, the next ones predicted).

The expected values are computed here from the inputs: the squares come from the labs'
generator, the true next corners are the clean corners that continue each walk, and the
"predictions" are those plus a fixed offset, so every drawn point is known in advance.
"""

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.text import Annotation

from attnlab.data import generate_sequences
from attnlab.plotting import prefix_pred

pytestmark = pytest.mark.usefixtures("one_thread")

PAD = 1e6  # far outside any square: if it is drawn or counted, the limits or the data show it
N, S, T = 6, 4, 2


def next_corner(corner, direction):
    """The clean corner after ``corner`` round the square: clockwise turns (x, y) into (y, -x)."""
    x, y = corner
    return np.array([y, -x]) if direction == 1 else np.array([-y, x])


def make_case(pad=PAD, n_next=T):
    points, directions = generate_sequences(n=N, variable_len=True, seed=13)
    lengths = np.array([len(p) for p in points])
    source = np.full((N, S, 2), pad)
    target = np.zeros((N, n_next, 2))
    for i, (walk, direction) in enumerate(zip(points, directions, strict=True)):
        source[i, : len(walk)] = walk
        corner = np.sign(walk[-1])  # the clean corner under the last given, noisy one
        for k in range(n_next):
            corner = next_corner(corner, direction)
            target[i, k] = corner
    predictions = target + np.array([0.1, -0.15])
    return predictions, source, lengths, target, directions


@pytest.fixture(scope="module")
def case():
    return make_case()


def visible(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def artist_points(ax):
    """Every point any artist of ``ax`` is drawn at: lines, scatter offsets, text anchors."""
    parts = [line.get_xydata() for line in ax.get_lines()]
    parts += [np.asarray(c.get_offsets()) for c in ax.collections]
    parts += [np.array([t.xy if isinstance(t, Annotation) else t.get_position()]) for t in ax.texts]
    return np.concatenate([np.reshape(p, (-1, 2)) for p in parts])


def test_the_case_is_what_the_tests_assume(case):
    _, source, lengths, target, directions = case
    assert lengths.tolist() == [2, 3, 2, 4, 4, 2] and directions.tolist() == [0, 0, 0, 0, 1, 1]
    assert (source == PAD).sum() == 2 * (S * N - lengths.sum())  # padding present, real corners untouched
    # for a full square the next corners are its first two again (up to the noise)
    full = 3
    np.testing.assert_allclose(target[full], source[full, :2], atol=0.5)


def test_renders_like_sequence_pred(case, save_png):
    fig = prefix_pred(*case)
    assert type(fig) is Figure
    assert tuple(fig.get_size_inches()) == (20.0, 8.0)  # 2 x 5 panels of 4 inches
    assert len(fig.axes) == 10 and len(visible(fig)) == N
    assert all(not ax.get_visible() for ax in fig.axes[N:])
    for ax in visible(fig):
        assert ax.get_xlim() == ax.get_ylim() == (-1.45, 1.45)  # the padding at 1e6 is not counted
        assert ax.get_xlabel() == "$x_0$" and ax.get_ylabel() == "$x_1$"
    save_png(fig, "prefix_pred")


@pytest.mark.parametrize("pad", [PAD, float("nan"), -float("inf")])
def test_no_padded_point_is_drawn(pad):
    fig = prefix_pred(*make_case(pad=pad), n_rows=1, n_cols=N)
    for ax in visible(fig):
        points = artist_points(ax)
        assert np.isfinite(points).all() and np.abs(points).max() < 2.0


def test_dots_lines_and_numbers_follow_the_walk(case):
    predictions, source, lengths, target, _ = case
    fig = prefix_pred(predictions, source, lengths, target, n_rows=1, n_cols=N)
    for i, ax in enumerate(visible(fig)):
        length = lengths[i]
        given = source[i, :length]
        given_dots, next_dots, predicted_rings = ax.collections
        np.testing.assert_allclose(given_dots.get_offsets(), given)
        np.testing.assert_allclose(next_dots.get_offsets(), target[i])
        np.testing.assert_allclose(predicted_rings.get_offsets(), predictions[i])
        assert len(predicted_rings.get_facecolors()) == 0  # rings: no fill
        assert tuple(given_dots.get_facecolors()[0]) != tuple(next_dots.get_facecolors()[0])

        (solid,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
        (dashed,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        np.testing.assert_allclose(solid.get_xydata(), np.concatenate([given, target[i]]))
        np.testing.assert_allclose(dashed.get_xydata(), np.concatenate([given[-1:], predictions[i]]))

        corner_numbers = [(t.get_text(), t.get_position()) for t in ax.texts if not isinstance(t, Annotation)]
        assert [s for s, _ in corner_numbers] == [str(k) for k in range(1, length + T + 1)]
        np.testing.assert_allclose([p for _, p in corner_numbers], np.concatenate([given, target[i]]))
        predicted_numbers = [(t.get_text(), t.xy) for t in ax.texts if isinstance(t, Annotation)]
        assert [s for s, _ in predicted_numbers] == [str(k) for k in range(length + 1, length + T + 1)]
        np.testing.assert_allclose([p for _, p in predicted_numbers], predictions[i])


def test_titles_name_the_direction_and_the_given_corners(case):
    predictions, source, lengths, target, directions = case
    names = {0: "Counter-Clockwise", 1: "Clockwise"}
    expected = [f"{names[d]} · {n} given" for d, n in zip(directions.tolist(), lengths.tolist(), strict=True)]
    for dirs in (directions, torch.as_tensor(directions), directions.tolist()):
        fig = prefix_pred(predictions, source, lengths, target, dirs, n_rows=1, n_cols=N)
        titles = [ax.get_title() for ax in visible(fig)]
        assert titles == expected
    assert expected[0] == "Counter-Clockwise · 2 given" and expected[4] == "Clockwise · 4 given"
    untitled = prefix_pred(predictions, source, lengths, target, n_rows=1, n_cols=N)
    assert [ax.get_title() for ax in visible(untitled)] == [f"{n} given" for n in lengths.tolist()]


def test_tensors_and_arrays_draw_the_same(case):
    predictions, source, lengths, target, directions = case
    from_arrays = prefix_pred(predictions, source, lengths, target, directions, n_rows=1, n_cols=N)
    from_tensors = prefix_pred(torch.as_tensor(predictions, dtype=torch.float32), torch.as_tensor(source),
                               torch.as_tensor(lengths), torch.as_tensor(target), torch.as_tensor(directions),
                               n_rows=1, n_cols=N)
    for a, b in zip(visible(from_arrays), visible(from_tensors), strict=True):
        np.testing.assert_allclose(artist_points(a), artist_points(b), atol=1e-6)


def test_fewer_squares_than_panels_shrink_the_grid(case):
    predictions, source, lengths, target, _ = case
    small = prefix_pred(predictions[:3], source[:3], lengths[:3], target[:3])
    assert len(small.axes) == 3 and tuple(small.get_size_inches()) == (12.0, 4.0)
    four = prefix_pred(predictions, source, lengths, target, n_rows=1, n_cols=4)  # the first 4 of 6
    assert len(visible(four)) == 4
    assert [ax.get_title() for ax in visible(four)] == [f"{n} given" for n in lengths[:4].tolist()]


def test_only_real_points_set_the_limits(case):
    predictions, source, lengths, target, _ = case
    limits = {pad: prefix_pred(*make_case(pad=pad)[:4], n_rows=1, n_cols=1).axes[0].get_xlim()
              for pad in (0.0, PAD, float("nan"))}
    assert set(limits.values()) == {(-1.45, 1.45)}
    # a real given corner, a true next corner or a prediction far out widens every panel alike
    for which in (0, 1, 3):  # predictions, source (square 0's first corner is given), target
        args = [predictions.copy(), source.copy(), lengths, target.copy()]
        args[which][0, 0] = [2.3, 0.0]
        fig = prefix_pred(*args, n_rows=1, n_cols=2)
        for ax in fig.axes:
            low, high = ax.get_xlim()
            assert high >= 2.5 and low == -high and ax.get_ylim() == (low, high), which


def test_one_given_corner_and_one_predicted():
    source = np.array([[[1.0, 1.0], [np.nan, np.nan]]])  # [1, 2, 2]
    target = np.array([[[1.0, -1.0]]])  # [1, 1, 2]
    predictions = np.array([[[0.9, -1.1]]])
    ax = prefix_pred(predictions, source, [1], target, [1]).axes[0]
    assert ax.get_title() == "Clockwise · 1 given"
    assert sorted(t.get_text() for t in ax.texts) == ["1", "2", "2"]
    np.testing.assert_allclose(artist_points(ax)[:2], [[1.0, 1.0], [1.0, -1.0]])  # the grey walk 1 -> 2


def test_legend_tells_given_true_and_predicted_apart(case):
    (legend,) = prefix_pred(*case, n_rows=1, n_cols=2).legends
    assert [t.get_text() for t in legend.get_texts()] == ["given corners", "true next corners",
                                                          "predicted next corners"]


def _bad(case, which, value):
    args = dict(zip(("predictions", "source", "lengths", "target", "directions"), case, strict=True))
    args[which] = value
    return args


def _with(array, index, value):
    out = np.array(array, dtype=np.float64)
    out[index] = value
    return out


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("which", "make", "error", "match"), [
    ("source", lambda c: c[1][:5], ValueError, r"source holds 5 squares"),
    ("target", lambda c: c[3][:4], ValueError, r"target holds 4 squares"),
    ("lengths", lambda c: c[2][:5], ValueError, r"lengths must hold one length per square \(\[6\]\)"),
    ("directions", lambda c: c[4][:5], ValueError, r"directions"),
    ("directions", lambda c: c[4] + 1, ValueError, r"directions must be 0 .* got \[2\.0\]"),
    ("predictions", lambda c: np.zeros((6, 2, 3)), ValueError, r"predictions must be \[N, K, 2\].*\[6, 2, 3\]"),
    ("predictions", lambda c: np.zeros((0, 2, 2)), ValueError, r"predictions must be"),
    ("source", lambda c: c[1][..., :1], ValueError, r"source must be \[N, K, 2\].*\[6, 4, 1\]"),
    ("target", lambda c: c[3][:, 0], ValueError, r"target must be \[N, K, 2\].*\[6, 2\]"),
    ("target", lambda c: c[3][:, :1], ValueError, r"target must hold as many next corners as predictions \(2\)"),
    ("lengths", lambda c: c[2].astype(float), TypeError, r"lengths must hold integers.*float64"),
    ("lengths", lambda c: c[2] > 2, TypeError, r"lengths must hold integers.*bool"),
    ("lengths", lambda c: ["2", "3", "2", "4", "4", "2"], TypeError, r"lengths must hold integers"),
    ("lengths", lambda c: _with(c[2], 1, 0).astype(int), ValueError, r"lengths must be in 1\.\.4.*got 0 for square 1"),
    ("lengths", lambda c: _with(c[2], 2, 5).astype(int), ValueError, r"lengths must be in 1\.\.4.*got 5 for square 2"),
    ("source", lambda c: _with(c[1], (2, 1, 0), np.nan), ValueError, r"source must be finite.*square 2, step 1"),
    ("predictions", lambda c: _with(c[0], (5, 1, 1), np.inf), ValueError, r"predictions must be finite.*inf"),
    ("target", lambda c: _with(c[3], (0, 0, 0), -np.inf), ValueError, r"target must be finite.*square 0"),
    ("predictions", lambda c: "corners", TypeError, r"predictions must be"),
])
def test_bad_inputs_name_the_argument(case, which, make, error, match):
    with pytest.raises(error, match=match):
        prefix_pred(**_bad(case, which, make(case)))


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"n_rows": 0}, ValueError, "n_rows must be positive, got 0"),
    ({"n_cols": 2.5}, TypeError, "n_cols must be an integer, got 2.5"),
])
def test_bad_grid(case, kwargs, error, match):
    with pytest.raises(error, match=match):
        prefix_pred(*case, **kwargs)


def test_nan_in_the_padding_is_not_an_error(case):
    predictions, source, lengths, target, _ = case
    source = source.copy()
    source[0, lengths[0]:] = np.nan  # right after square 0's given corners
    assert len(visible(prefix_pred(predictions, source, lengths, target))) == N
