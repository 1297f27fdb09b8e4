"""The TensorFlow position-encoding notebook's angle figures: each pair's rate, the angle map.

The notebook (TensorFlow's "Transformer Position Encoding") shows that the
angle rates fall exponentially from 1 rad/step with depth, then maps the angle
``p * w`` of every (position, pair) with a cyclic colormap, so each column's
colour cycles with the period of its sinusoid.

Fixed relative to the notebook: its map converts radians with ``* 180 / (2 * pi)``,
which is half the angle in degrees, so its colours turn at half speed; here the
angle is ``degrees(p * w) mod 360``.

Shape notation: ``L`` positions, ``n`` rates (pairs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attnlab._validate import check_int
from attnlab.plotting._common import axes_or_new, heatmap, root_figure, vector_array

__all__ = ["plot_angle_map", "plot_angle_rates"]


def _positive_rates(rates: Any) -> np.ndarray:
    w = vector_array(rates, "rates")  # [n]
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"rates must be finite and positive, got min {w.min()!r}")
    return w


def plot_angle_rates(rates: Any, ax: Axes | None = None) -> Figure:
    """The angle rate of each pair on a log scale (the TensorFlow position-encoding notebook).

    Args:
        rates: rates ``[n]`` in radians per position, e.g.
            ``attnlab.encodings.angle_rates(d_model)``; tensor, array or list.
        ax: axes to draw into; a new figure is made when None.

    Returns:
        The figure: rate against pair index ("Depth"), log y.

    Raises:
        TypeError: if ``rates`` is not numeric.
        ValueError: if ``rates`` is not 1-D, is empty, or has a non-positive entry
            (a log scale cannot show it).
    """
    w = _positive_rates(rates)
    ax = axes_or_new(ax, (7.0, 4.0))
    depth = np.arange(len(w))
    ax.plot(depth, w, marker="o" if len(w) <= 30 else None, markersize=4)
    ax.set_yscale("log")
    ax.set_xlabel("Depth")
    ax.set_ylabel("Angle rate [rads/step]")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{len(w)} rates, from {w.max():.3g} to {w.min():.3g} rad/step")
    return root_figure(ax)


def plot_angle_map(max_len: int, rates: Any, ax: Axes | None = None) -> Figure:
    """The angle ``p * w`` of every position and pair, in degrees mod 360.

    The TensorFlow position-encoding notebook's angle map. A cyclic colormap
    (``hsv``) makes 0 and 360 degrees the same colour, so a column's colour period
    is its sinusoid's period: fast pairs on the left cycle every few positions,
    slow ones on the right barely change.

    Args:
        max_len: number of positions ``L`` (rows ``0 .. L-1``, 0 at the bottom).
        rates: rates ``[n]`` in radians per position; tensor, array or list.
        ax: axes to draw into; a new figure is made when None.

    Returns:
        The figure with a colorbar labelled "Angle [deg]", ticks every 60 degrees.

    Raises:
        TypeError: if ``max_len`` is not an integer or ``rates`` not numeric.
        ValueError: if ``max_len < 1`` or ``rates`` is not a non-empty 1-D array.
    """
    max_len = check_int("max_len", max_len, minimum=1)
    w = vector_array(rates, "rates")  # [n]
    if not np.all(np.isfinite(w)):
        raise ValueError("rates must be finite")
    ax = axes_or_new(ax, (10.0, 6.0))
    angles = np.arange(max_len, dtype=np.float64)[:, None] * w[None, :]  # [L, n] radians
    degrees = np.degrees(angles) % 360.0  # [L, n]
    mesh = heatmap(ax, degrees, cmap="hsv", vmin=0.0, vmax=360.0, origin="lower")
    ax.set_ylabel("Position")
    ax.set_xlabel("Depth")
    ax.set_title("Angle p·w of every position and pair, in degrees mod 360")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    bar = ax.figure.colorbar(mesh, ax=ax, label="Angle [deg]")
    bar.set_ticks(np.linspace(0, 360, 7).tolist())
    return root_figure(ax)
