"""plot_mesh / plot_distances / encoding_heatmap: the positional-encoding lab's meshes, without the book's bugs."""

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnlab.analysis import distance_matrix
from attnlab.encodings import sinusoidal
from attnlab.plotting import encoding_heatmap, plot_distances, plot_mesh


def _cell_colors(ax):
    """The value colouring each cell, as ``[rows of the mesh, columns]`` = ``[D, L]``."""
    mesh = ax.collections[0]
    rows = len(ax.get_yticks())
    return np.asarray(mesh.get_array()).reshape(rows, -1)


def test_plot_mesh_renders(save_png):
    fig = plot_mesh(sinusoidal(6, 4), showvals=True, colorbar=True)
    assert isinstance(fig, Figure)
    save_png(fig, "plot_mesh")


def test_plot_mesh_annotations_sit_on_their_own_cells_for_non_square_input():
    values = np.arange(12.0).reshape(3, 4) * 1.5 - 4.0  # [L=3, D=4], all distinct
    fig = plot_mesh(values, showvals=True)
    ax = fig.axes[0]
    colors = _cell_colors(ax)  # [D, L]
    assert colors.shape == (4, 3)
    assert len(ax.texts) == values.size
    (x0, x1), (y1, y0) = ax.get_xlim(), ax.get_ylim()  # y is inverted: dim 0 on top
    for text in ax.texts:
        x, y = text.get_position()
        i, j = int(round(x)), int(round(y))  # x = position i, y = dimension j
        assert x0 < x < x1 and y0 < y < y1
        assert text.get_text() == f"{values[i, j]:.2f}"
        assert colors[j, i] == values[i, j]  # the cell under the text has that value


def test_plot_mesh_text_is_readable_on_its_cell():
    values = np.array([[0.0, 1.0]])  # viridis: dark purple, bright yellow
    ax = plot_mesh(values, showvals=True).axes[0]
    color = {t.get_text(): t.get_color() for t in ax.texts}
    assert color == {"0.00": "white", "1.00": "black"}


def test_plot_mesh_never_prints_negative_zero_and_uses_fmt():
    ax = plot_mesh(np.array([[-0.001, 0.25]]), showvals=True).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["0.00", "0.25"]
    ax = plot_mesh(np.array([[-0.001, 0.25]]), showvals=True, fmt="{:.1f}").axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["0.0", "0.2"]


def test_plot_mesh_draws_into_a_given_axes_and_takes_tensors():
    fig = Figure()
    ax = fig.subplots()
    out = plot_mesh(torch.ones(1, 5, 3), ax, False, True, "Positions")  # the book's positional call
    assert out is fig
    assert ax.get_ylabel() == "Positions" and ax.get_xlabel() == "Positions"
    assert len(fig.axes) == 2  # the axes and its colorbar
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1", "2"]


def test_plot_distances_renders_the_pe_lab_matrix(save_png):
    table = sinusoidal(10, 8)
    fig = plot_distances(table)
    ax = fig.axes[0]
    assert ax.get_title() == "Distances Between Positions"
    assert ax.get_ylabel() == "Positions"
    assert len(fig.axes) == 2  # with a colorbar
    expected = distance_matrix(table[:5]).numpy()
    texts = {tuple(round(v) for v in t.get_position()): t.get_text() for t in ax.texts}
    assert texts[(0, 1)] == "0.96" and texts[(0, 2)] == "1.69" and texts[(0, 3)] == "2.02"
    assert all(texts[i, j] == f"{expected[i, j]:.2f}" for i in range(5) for j in range(5))
    save_png(fig, "plot_distances")


def test_encoding_heatmap_renders(save_png):
    save_png(encoding_heatmap(), "encoding_heatmap")


@pytest.mark.parametrize("d_model", [6, 8, 5])
def test_encoding_heatmap_legends_follow_d_model(d_model):
    fig = encoding_heatmap(d_model, 7)
    sines_ax, cosines_ax, sines_mesh, cosines_mesh = fig.axes[:4]
    legend = [t.get_text() for t in sines_ax.get_legend().get_texts()]
    assert legend == [f"dim {d}" for d in range(0, d_model, 2)]
    legend = [t.get_text() for t in cosines_ax.get_legend().get_texts()]
    assert legend == [f"dim {d}" for d in range(1, d_model, 2)]
    # The meshes hold the real columns, label them, and share one -1..1 scale.
    table = sinusoidal(7, d_model, dtype=torch.float64).numpy()
    for ax, first in ((sines_mesh, 0), (cosines_mesh, 1)):
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == [str(d) for d in range(first, d_model, 2)]
        np.testing.assert_allclose(_cell_colors(ax), table[:, first::2].T)
        assert ax.collections[0].get_clim() == (-1.0, 1.0)
    assert len(fig.axes) == 5  # one shared colorbar


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: plot_mesh([[1.0, 2.0]]), TypeError, "values"),
        (lambda: plot_mesh(np.ones(3)), ValueError, "values"),
        (lambda: plot_mesh(np.ones((2, 2)), cmap="no-such-map"), ValueError, "cmap"),
        (lambda: plot_mesh(np.ones((2, 2)), showvals=True, fmt=3), TypeError, "fmt"),
        (lambda: plot_mesh(np.ones((2, 2)), ax="axes"), TypeError, "ax"),
        (lambda: plot_mesh(np.ones((2, 2)), yticklabels=["a"]), ValueError, "yticklabels"),
        (lambda: plot_distances(np.ones((3, 2)), n=4), ValueError, "n"),
        (lambda: plot_distances(np.ones((3, 2)), n=0), ValueError, "n"),
        (lambda: encoding_heatmap(1), ValueError, "d_model"),
        (lambda: encoding_heatmap(8, 0), ValueError, "max_len"),
        (lambda: encoding_heatmap(8, 4, base=0.0), ValueError, "base"),
    ],
)
def test_bad_arguments_name_themselves(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
