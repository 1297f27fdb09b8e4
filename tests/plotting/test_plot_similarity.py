"""plot_similarity / plot_nearby: the TensorFlow position-encoding notebook's similarity views."""

import numpy as np
import pytest

from attnlab.analysis import cosine_similarity_matrix, dot_products, sse
from attnlab.encodings import sinusoidal
from attnlab.plotting import plot_nearby, plot_similarity


def test_plot_similarity_renders_the_cosine_matrix(save_png):
    table = sinusoidal(12, 16, rates="linspace")
    fig = plot_similarity(table)
    ax = fig.axes[0]
    mesh = ax.collections[0]
    np.testing.assert_allclose(
        np.asarray(mesh.get_array()).reshape(12, 12), cosine_similarity_matrix(table).numpy()
    )
    assert mesh.get_cmap().name == "RdBu" and mesh.get_clim() == (-1.0, 1.0)
    assert len(fig.axes) == 2  # with a colorbar
    save_png(fig, "plot_similarity")


def test_plot_nearby_renders_dot_and_sse(save_png):
    table = sinusoidal(30, 16, rates="linspace")
    fig = plot_nearby(table, 12)
    top, bottom = fig.axes
    np.testing.assert_allclose(top.lines[0].get_ydata(), dot_products(table, 12).numpy())
    np.testing.assert_allclose(bottom.lines[0].get_ydata(), sse(table, 12).numpy())
    assert top.get_ylabel() == "Dot product" and bottom.get_ylabel() == "SSE"
    assert bottom.get_xlabel() == "Position"
    for ax in (top, bottom):  # the chosen position is marked
        marks = [line for line in ax.lines[1:] if list(line.get_xdata()) == [12]]
        assert marks, "position 12 is not marked"
    assert "12" in top.get_title()
    save_png(fig, "plot_nearby")


def test_plot_nearby_negative_position_counts_from_the_end():
    fig = plot_nearby(sinusoidal(10, 4), -1)
    assert "9" in fig.axes[0].get_title()


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: plot_nearby(sinusoidal(10, 4)), ValueError, "position"),  # default 20 >= 10
        (lambda: plot_nearby(sinusoidal(10, 4), 2.0), TypeError, "position"),
        (lambda: plot_nearby("table", 1), TypeError, "table"),
        (lambda: plot_similarity(np.ones((2, 3, 4))), ValueError, "table"),
    ],
)
def test_bad_arguments_name_themselves(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
