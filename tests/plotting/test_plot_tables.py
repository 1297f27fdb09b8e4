"""plot_encoding / plot_shifted / plot_columns / plot_binary.

Figures of the TensorFlow position-encoding notebook and the d2l chapter.
"""

import re

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnlab.analysis import binary_codes
from attnlab.encodings import shift_matrix, sinusoidal
from attnlab.plotting import plot_binary, plot_columns, plot_encoding, plot_shifted


def _reported_error(fig):
    match = re.search(r"max \|error\| = ([0-9.e+-]+)", fig._suptitle.get_text())
    assert match, fig._suptitle.get_text()
    return float(match.group(1))


def test_plot_encoding_renders_the_tf_notebook_heatmap(save_png):
    table = sinusoidal(9, 12)
    fig = plot_encoding(table, title="PE")
    ax = fig.axes[0]
    mesh = ax.collections[0]
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(9, 12), table.numpy(),
                               atol=1e-7)
    assert mesh.get_cmap().name == "RdBu" and mesh.get_clim() == (-1.0, 1.0)
    assert ax.get_xlabel() == "Depth" and ax.get_ylabel() == "Position"
    assert ax.get_title() == "PE"
    assert ax.get_ylim()[0] < ax.get_ylim()[1]  # position 0 at the bottom
    save_png(fig, "plot_encoding")


def test_plot_encoding_d2l_heatmap_of_p(save_png):
    p = sinusoidal(60, 32)[None]  # the d2l chapter's P: [1, L, D]
    fig = plot_encoding(p, cmap="Blues", vmin=None, vmax=None, origin="upper",
                        xlabel="Column (encoding dimension)", ylabel="Row (position)")
    ax = fig.axes[0]
    mesh = ax.collections[0]
    assert mesh.get_cmap().name == "Blues"
    assert mesh.get_clim() == pytest.approx((p.min().item(), p.max().item()))
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # row 0 at the top
    save_png(fig, "plot_encoding_p")


@pytest.mark.parametrize(
    "delta, kwargs",
    [(-10, {}), (4, {}), (-3, dict(layout="concat")), (7, dict(rates="linspace")),
     (-5, dict(layout="t2t"))],
)
def test_plot_shifted_reports_float64_error(delta, kwargs):
    table = sinusoidal(20, 10, dtype=torch.float64, **kwargs)
    fig = plot_shifted(table, delta, **kwargs)
    assert _reported_error(fig) < 1e-12
    assert f"{20 - abs(delta)} rows" in fig._suptitle.get_text()


def test_plot_shifted_renders_and_its_error_is_meaningful(save_png):
    table = sinusoidal(20, 10, dtype=torch.float64)
    fig = plot_shifted(table, -10)
    right = fig.axes[1]
    expected = table.numpy() @ shift_matrix(-10, 10).numpy()  # [L, D] x [D, D]
    np.testing.assert_allclose(np.asarray(right.collections[0].get_array()).reshape(20, 10),
                               expected)
    save_png(fig, "plot_shifted")
    # A matrix for the wrong layout does not reproduce the rows, and the title says so.
    assert _reported_error(plot_shifted(table, -10, layout="concat")) > 0.1


def test_plot_columns_renders_the_d2l_columns(save_png):
    table = sinusoidal(60, 32)
    fig = plot_columns(table)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["Col 6", "Col 7", "Col 8", "Col 9"]
    assert ax.get_xlabel() == "Row (position)"
    for line, c in zip(ax.lines, (6, 7, 8, 9), strict=True):
        np.testing.assert_allclose(line.get_ydata(), table[:, c].numpy(), atol=1e-7)
    save_png(fig, "plot_columns")


def test_plot_columns_into_an_axes():
    fig = Figure()
    ax = fig.subplots()
    assert plot_columns(np.ones((4, 3)), (0, 2), ax) is fig
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Col 0", "Col 2"]


def test_plot_binary_renders(save_png):
    fig = plot_binary()
    bits_ax, pe_ax = fig.axes[:2]
    codes = binary_codes(8).numpy()
    assert len(bits_ax.texts) == codes.size
    for text in bits_ax.texts:  # each 0/1 on the cell of its number and bit
        x, y = text.get_position()
        assert text.get_text() == str(codes[round(y), round(x)])
    # Default width: one (sin, cos) pair per bit.
    sinusoid = sinusoidal(8, 6, dtype=torch.float64).numpy()
    np.testing.assert_allclose(np.asarray(pe_ax.collections[0].get_array()).reshape(8, 6), sinusoid)
    assert "Binary" in bits_ax.get_title() and "Sinusoidal" in pe_ax.get_title()
    save_png(fig, "plot_binary")


def test_plot_binary_d_model():
    fig = plot_binary(5, d_model=4)
    assert np.asarray(fig.axes[1].collections[0].get_array()).size == 5 * 4


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: plot_shifted(sinusoidal(10, 4), 10), ValueError, "delta"),
        (lambda: plot_shifted(sinusoidal(10, 4), -12), ValueError, "delta"),
        (lambda: plot_shifted(sinusoidal(10, 4), 1.5), TypeError, "delta"),
        (lambda: plot_shifted(sinusoidal(10, 5), 1), ValueError, "d_model"),
        (lambda: plot_shifted(sinusoidal(10, 4), 1, layout="spiral"), ValueError, "layout"),
        (lambda: plot_columns(sinusoidal(10, 8), (6, 7, 8)), ValueError,
         r"column 8 \(columns\[2\]\)"),
        (lambda: plot_columns(sinusoidal(10, 8), (-1,)), ValueError, "column -1"),
        (lambda: plot_columns(sinusoidal(10, 8), ("a",)), TypeError, r"columns\[0\]"),
        (lambda: plot_columns(sinusoidal(10, 8), ()), ValueError, "columns"),
        (lambda: plot_columns(sinusoidal(10, 8), 3), TypeError, "columns"),
        (lambda: plot_encoding(sinusoidal(4, 4), origin="left"), ValueError, "origin"),
        (lambda: plot_encoding(sinusoidal(4, 4), cmap="nope"), ValueError, "cmap"),
        (lambda: plot_binary(0), ValueError, "n"),
        (lambda: plot_binary(4, d_model=0), ValueError, "d_model"),
        (lambda: plot_binary(4, d_model=2.0), TypeError, "d_model"),
    ],
)
def test_bad_arguments_name_themselves(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
