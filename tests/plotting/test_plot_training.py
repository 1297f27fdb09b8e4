"""plot_losses: the training figure of the positional-encoding lab and the attention lab.

The squares' figure is tests/plotting/test_squares.py (data) and the book's
``sequence_pred`` running a model tests/compat/test_chapter9.py.
"""

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnlab.plotting import plot_losses

# -- plot_losses ---------------------------------------------------------------------


def lines_by_label(ax):
    return {ln.get_label(): ln for ln in ax.get_lines()}


def test_plot_losses_the_books_figure(save_png):
    losses = [0.5 / (k + 1) for k in range(20)]
    val = [0.6 / (k + 1) for k in range(20)]
    fig = plot_losses(losses, val)
    assert type(fig) is Figure and tuple(fig.get_size_inches()) == (10.0, 4.0)
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "Epochs" and ax.get_ylabel() == "Loss"
    lines = lines_by_label(ax)
    assert lines["Training Loss"].get_color() == "b" and lines["Validation Loss"].get_color() == "r"
    np.testing.assert_array_equal(lines["Training Loss"].get_xdata(), np.arange(1, 21))
    np.testing.assert_allclose(lines["Validation Loss"].get_ydata(), val)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Training Loss", "Validation Loss"]
    save_png(fig, "plot_losses")


def test_plot_losses_skips_missing_validation_losses(save_png):
    losses = np.linspace(1.0, 0.1, 10)
    val = [None, 0.9, None, 0.7, float("nan"), 0.5, None, None, 0.2, None]
    ax = plot_losses(losses, val).axes[0]
    line = lines_by_label(ax)["Validation Loss"]
    np.testing.assert_array_equal(line.get_xdata(), [2, 4, 6, 9])
    np.testing.assert_allclose(line.get_ydata(), [0.9, 0.7, 0.5, 0.2])
    save_png(ax.figure, "plot_losses_gaps")


@pytest.mark.parametrize("val", [None, [None, None, None]])
def test_plot_losses_without_validation(val):
    ax = plot_losses(torch.tensor([0.3, 0.2, 0.1]), val).axes[0]
    assert list(lines_by_label(ax)) == ["Training Loss"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Training Loss"]


def test_plot_losses_linear_scale_and_given_axes():
    fig = Figure()
    ax = fig.subplots()
    assert plot_losses([0.0, 1.0, -0.5], ax=ax, log=False) is fig  # zero and negative are fine unscaled
    assert ax.get_yscale() == "linear"


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    (([],), {}, ValueError, "losses is empty"),
    (([0.1, 0.2], [0.1]), {}, ValueError, "val_losses"),
    (([0.1, 0.0],), {}, ValueError, "losses has a loss <= 0"),
    (([0.1, 0.2], [0.1, -1.0]), {}, ValueError, "val_losses has a loss <= 0"),
    (("losses",), {}, TypeError, "losses"),
    ((0.5,), {}, TypeError, "losses"),
    (([0.1, "x"],), {}, TypeError, "losses"),
    (([[0.1, 0.2]],), {}, ValueError, "losses"),
    (([0.1], ["x"]), {}, TypeError, "val_losses"),
    (([0.1],), {"log": "yes"}, TypeError, "log"),
    (([0.1],), {"ax": "axes"}, TypeError, "ax"),
])
def test_plot_losses_bad_arguments(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        plot_losses(*args, **kwargs)

