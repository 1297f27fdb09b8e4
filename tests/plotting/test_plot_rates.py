"""plot_angle_rates / plot_angle_map: the TensorFlow position-encoding notebook's angle figures."""

import numpy as np
import pytest
from matplotlib.figure import Figure

from attnlab.encodings import angle_rates
from attnlab.plotting import plot_angle_map, plot_angle_rates


def test_plot_angle_rates_renders(save_png):
    rates = angle_rates(20, rates="linspace")
    fig = plot_angle_rates(rates)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "Depth" and ax.get_ylabel() == "Angle rate [rads/step]"
    np.testing.assert_allclose(ax.lines[0].get_ydata(), rates.numpy())
    save_png(fig, "plot_angle_rates")


def test_plot_angle_rates_takes_arrays_lists_and_an_axes():
    fig = Figure()
    ax = fig.subplots()
    assert plot_angle_rates(np.array([1.0, 0.1]), ax) is fig
    assert isinstance(plot_angle_rates([1.0, 0.5, 0.25]), Figure)


def test_plot_angle_map_renders_degrees_mod_360(save_png):
    rates = np.array([1.0, 0.1, 0.01])
    fig = plot_angle_map(7, rates)
    ax, bar_ax = fig.axes
    mesh = ax.collections[0]
    # Rows are positions, columns pairs: degrees(p * w) mod 360 (not the notebook's half angle).
    expected = np.degrees(np.arange(7)[:, None] * rates[None, :]) % 360
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(7, 3), expected)
    assert mesh.get_cmap().name == "hsv" and mesh.get_clim() == (0.0, 360.0)
    assert bar_ax.get_ylabel() == "Angle [deg]"
    np.testing.assert_allclose(bar_ax.get_yticks(), np.arange(0, 361, 60))
    assert ax.get_ylabel() == "Position" and ax.get_xlabel() == "Depth"
    save_png(fig, "plot_angle_map")


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: plot_angle_rates([1.0, 0.0]), ValueError, "rates"),
        (lambda: plot_angle_rates(np.ones((2, 2))), ValueError, "rates"),
        (lambda: plot_angle_rates("fast"), TypeError, "rates"),
        (lambda: plot_angle_map(0, [1.0]), ValueError, "max_len"),
        (lambda: plot_angle_map(3.0, [1.0]), TypeError, "max_len"),
        (lambda: plot_angle_map(3, []), ValueError, "rates"),
    ],
)
def test_bad_arguments_name_themselves(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
