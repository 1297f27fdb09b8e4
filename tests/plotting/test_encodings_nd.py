"""The grid-encoding figures: what they draw (checked against the formulas), their inputs, the CLI name."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnlab.cli import FIGURE_NAMES, main
from attnlab.encodings.axial_rotary import axial_rotary_angles
from attnlab.encodings.sinusoidal_nd import sinusoidal_2d
from attnlab.plotting._common import new_figure
from attnlab.plotting.encodings_nd import plot_axial_rotary, plot_encoding_2d


def image_axes(fig):
    """The axes holding an image (colorbars hold none)."""
    return [ax for ax in fig.axes if ax.images]


def test_encoding_2d_draws_the_channels_and_the_dot_products(save_png):
    table = sinusoidal_2d(6, 9, 16)
    fig = plot_encoding_2d(table, channels=(0, 11), pixel=(1, 7))
    assert type(fig) is Figure
    axs = image_axes(fig)
    assert [ax.get_title() for ax in axs] == ["channel 0", "channel 11", "dot product with pixel (1, 7)"]
    assert len(fig.axes) == 5  # three images, two colorbars
    # D = 16: 4 pairs per axis, the column block starts at channel 8. Channel 0 is sin(row * 1),
    # channel 11 cos(col * 10000 ** (-1/4)) (the second column pair), each drawn as an [H, W] image.
    rows, cols = np.arange(6.0)[:, None], np.arange(9.0)[None, :]
    np.testing.assert_allclose(axs[0].images[0].get_array(), np.sin(rows) + 0 * cols, atol=1e-6)
    np.testing.assert_allclose(axs[1].images[0].get_array(), np.cos(cols * 0.1) + 0 * rows, atol=1e-6)
    # dot products with pixel (1, 7): sum over pairs of cos(offset * w), w = 10000 ** (-i / 4), i < 4 per axis
    w = 10000.0 ** (-np.arange(4) / 4)
    want = (np.cos((rows - 1)[..., None] * w).sum(-1) + np.cos((cols - 7)[..., None] * w).sum(-1))
    np.testing.assert_allclose(axs[2].images[0].get_array(), want, atol=1e-5)
    save_png(fig, "encoding_2d")


def test_encoding_2d_defaults():
    fig = plot_encoding_2d(sinusoidal_2d(5, 4, 12).numpy())  # arrays work too
    axs = image_axes(fig)
    assert [ax.get_title() for ax in axs] == ["channel 0", "channel 2", "channel 6", "channel 8",
                                              "dot product with pixel (2, 2)"]
    # tiny D: the default channels below D only, once each
    small = plot_encoding_2d(sinusoidal_2d(3, 3, 4))  # 0, 2, D//2 = 2 again, D//2 + 2 = 4 is past the end
    assert [ax.get_title() for ax in image_axes(small)][:-1] == ["channel 0", "channel 2"]


def test_axial_rotary_figure_is_the_offset_kernel(save_png):
    angles = axial_rotary_angles(7, 8, head_dim=8, angle_dtype=torch.float64)
    fig = plot_axial_rotary(angles, pixel=(2, 5))
    (ax,) = image_axes(fig)
    # d_a = 4: theta = (1, 0.01) per axis; mean over the 4 pairs of cos(offset * theta)
    rows, cols = np.arange(7.0)[:, None] - 2, np.arange(8.0)[None, :] - 5
    want = (np.cos(rows) + np.cos(rows * 0.01) + np.cos(cols) + np.cos(cols * 0.01)) / 4
    np.testing.assert_allclose(ax.images[0].get_array(), want, atol=1e-12)
    assert "(2, 5)" in ax.get_title()
    save_png(fig, "axial_rotary")
    # into a given axes
    host = new_figure((4, 4))
    target = host.subplots()
    assert plot_axial_rotary(angles, target) is host and target.images


def test_figures_touch_no_global_state():
    rc_before = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in matplotlib.rcParams.items()}
    figs_before = plt.get_fignums()
    plot_encoding_2d(sinusoidal_2d(4, 4, 8))
    plot_axial_rotary(axial_rotary_angles(4, 4, head_dim=8))
    assert plt.get_fignums() == figs_before
    assert dict(matplotlib.rcParams.items()) == rc_before


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: plot_encoding_2d(torch.zeros(4, 8)), ValueError, r"table.*\[H, W, D\].*\[4, 8\]"),
    (lambda: plot_encoding_2d(torch.zeros(0, 3, 8)), ValueError, r"table.*non-empty"),
    (lambda: plot_encoding_2d(sinusoidal_2d(3, 3, 8), channels=(8,)), ValueError, r"channel.*8"),
    (lambda: plot_encoding_2d(sinusoidal_2d(3, 3, 8), channels=(1, 1)), ValueError, r"distinct.*\[1, 1\]"),
    (lambda: plot_encoding_2d(sinusoidal_2d(3, 3, 8), channels=()), ValueError, r"1 to 8"),
    (lambda: plot_encoding_2d(sinusoidal_2d(3, 3, 8), channels=3), TypeError, r"channels.*3"),
    (lambda: plot_encoding_2d(sinusoidal_2d(3, 3, 8), pixel=(3, 0)), ValueError, r"pixel row.*3"),
    (lambda: plot_encoding_2d(sinusoidal_2d(3, 3, 8), pixel=(0,)), ValueError, r"\(row, column\)"),
    (lambda: plot_axial_rotary(axial_rotary_angles(3, 3, head_dim=8), pixel=(0, -1)), ValueError,
     r"pixel column.*-1"),
    (lambda: plot_axial_rotary("angles"), TypeError, r"angles"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("name", ["sinusoidal-2d", "axial-rotary"])
def test_cli_writes_the_png(name, tmp_path, capsys):
    assert name in FIGURE_NAMES
    out = tmp_path / f"{name}.png"
    assert main(["plot", name, "--out", str(out), "--max-len", "8", "--d-model", "16"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("argv", "words"), [
    (["plot", "sinusoidal-2d", "--max-len", "600"], "--max-len 600"),
    (["plot", "sinusoidal-2d", "--d-model", "2"], "d-model"),
    (["plot", "axial-rotary", "--d-model", "30"], "head_dim=30"),
])
def test_cli_bad_sizes_are_one_line(argv, words, tmp_path, capsys):
    out = tmp_path / "x.png"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err
    assert not out.exists()
