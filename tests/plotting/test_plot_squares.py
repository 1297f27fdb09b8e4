"""plot_sequence_pred: the squares' predicted corners against the true squares, from the predictions.

The expected points are the inputs themselves: each square's true corners and
the predictions given (the true corners 3 and 4 moved by a fixed offset), so
every drawn point is known in advance. The book's ``sequence_pred``, which runs a
model first, is tested in tests/compat/test_chapter9.py.
"""

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnlab.data import generate_sequences
from attnlab.plotting import plot_sequence_pred

OFFSET = np.array([0.1, -0.2])


@pytest.fixture(scope="module")
def case():
    points, directions = generate_sequences(n=12, seed=13)
    squares = np.asarray(points, dtype=np.float64)  # [12, 4, 2]
    return squares, squares[:, 2:] + OFFSET, np.asarray(directions)


def visible(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def line(ax, style):
    (found,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == style]
    return found.get_xydata()


def test_the_books_figure_from_the_predictions(case, save_png):
    squares, preds, directions = case
    fig = plot_sequence_pred(preds, squares, directions)
    assert type(fig) is Figure
    assert tuple(fig.get_size_inches()) == (20.0, 8.0)  # 2 x 5 panels of 4 inches, the first 10 squares
    assert len(visible(fig)) == 10
    for i, ax in enumerate(visible(fig)):
        np.testing.assert_allclose(line(ax, "-"), squares[i][[0, 1, 2, 3, 0]])  # the true square, closed
        expected = np.stack([squares[i, 1], preds[i, 0], preds[i, 1], squares[i, 0]])  # 2 -> 3' -> 4' -> 1
        np.testing.assert_allclose(line(ax, "--"), expected)
        assert ax.get_title() == ("Clockwise" if directions[i] == 1 else "Counter-Clockwise")
    save_png(fig, "plot_sequence_pred")


def test_tensors_arrays_and_lists_draw_alike(case):
    squares, preds, directions = case
    reference = [line(ax, "--") for ax in plot_sequence_pred(preds, squares, n_rows=1, n_cols=3).axes]
    for given in (torch.from_numpy(preds), preds.tolist()):
        fig = plot_sequence_pred(given, torch.from_numpy(squares), n_rows=1, n_cols=3)
        for ax, expected in zip(fig.axes, reference, strict=True):
            np.testing.assert_array_equal(line(ax, "--"), expected)


@pytest.mark.parametrize(("predictions", "error", "match"), [
    (np.zeros((11, 2, 2)), ValueError, r"predictions must be the predictions \[N, 2, 2\] with N = 12"),
    (np.zeros((12, 3, 2)), ValueError, "predictions must be"),
    ("corners", TypeError, "predictions must be a tensor or array"),
])
def test_bad_predictions_name_the_argument(case, predictions, error, match):
    with pytest.raises(error, match=match):
        plot_sequence_pred(predictions, case[0])


def test_predictions_for_only_the_drawn_squares_are_refused(case):
    # One pair per square of X, so that a figure never pairs a prediction with the wrong square.
    squares, preds, _ = case
    with pytest.raises(ValueError, match="N = 12"):
        plot_sequence_pred(preds[:10], squares)
    assert len(visible(plot_sequence_pred(preds[:10], squares[:10]))) == 10
