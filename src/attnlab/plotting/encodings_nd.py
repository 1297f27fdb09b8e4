"""Figures of the grid encodings: a 2-D table's channels and similarity, axial RoPE's score pattern.

* ``plot_encoding_2d``: a few channels of a 2-D table (:func:`attnlab.encodings.sinusoidal_nd.sinusoidal_2d`)
  drawn as images, and the dot product of one pixel's vector with every pixel's, the
  2-D analogue of the TensorFlow position-encoding notebook's 1-D similarity figure;
* ``plot_axial_rotary``: for axial RoPE's angles
  (:func:`attnlab.encodings.axial_rotary.axial_rotary_angles`), the score between one
  pixel and every other for queries and keys that are all ``(1, 0)`` pairs, i.e. the
  mean over pairs of ``cos(angle(p) - angle(p0))``: the positional prior axial RoPE
  gives attention before any content.

Images are drawn with row 0 at the top, as an image is shown. Shape notation: the
grid is ``[H, W]`` (rows, columns; ``H`` is the height here, not heads), ``D``
encoding channels, ``d`` rotated features.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attnlab._validate import check_int
from attnlab.plotting._common import axes_or_new, new_figure, real_array, root_figure

__all__ = ["plot_axial_rotary", "plot_encoding_2d"]

# More channel panels than this do not fit a row readably.
MAX_CHANNELS = 8


def _pixel(pixel: Sequence[int] | None, height: int, width: int) -> tuple[int, int]:
    """The (row, column) compared with every pixel: the centre by default, else checked against the grid."""
    if pixel is None:
        return height // 2, width // 2
    if isinstance(pixel, (str, bytes)) or not isinstance(pixel, Sequence) or len(pixel) != 2:
        raise ValueError(f"pixel must be a (row, column) pair, got {pixel!r}")
    row = check_int("pixel row", pixel[0], minimum=0, maximum=height - 1)
    col = check_int("pixel column", pixel[1], minimum=0, maximum=width - 1)
    return row, col


def _image(ax: Axes, values: np.ndarray, *, cmap: str, vmin: float | None, vmax: float | None) -> Any:
    """Draw ``values [H, W]`` as an image, pixel ``(r, c)`` centred at ``(x=c, y=r)``, row 0 on top."""
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, origin="upper", interpolation="nearest")
    ax.set_xlabel("column")
    ax.set_ylabel("row")
    return image


def plot_encoding_2d(
    table: Any,
    *,
    channels: Sequence[int] | None = None,
    pixel: Sequence[int] | None = None,
) -> Figure:
    """A 2-D encoding table: some channels as images, and one pixel's similarity to every pixel.

    Args:
        table: tensor or array ``[H, W, D]`` (e.g. ``sinusoidal_2d(H, W, D)``).
        channels: the channels drawn, at most 8; default ``0, 2, D//2, D//2 + 2``
            (those below ``D``): for ``sinusoidal_2d`` with ``D`` a multiple of 4, the
            two fastest row sines and the two fastest column sines.
        pixel: ``(row, column)`` whose vector is dotted with every pixel's; default
            the centre ``(H // 2, W // 2)``.

    Returns:
        A figure of ``len(channels) + 1`` image axes in a row: the channels on a
        shared ``RdBu`` -1..1 colorbar, then the dot products (largest at ``pixel``,
        marked) with their own colorbar.

    Raises:
        TypeError: if ``table`` does not hold numbers or a channel or pixel is not an integer.
        ValueError: if ``table`` is not a non-empty ``[H, W, D]``, a channel is outside
            ``0 .. D-1`` or repeated, there are none or more than 8, or ``pixel`` is
            not a (row, column) inside the grid.
    """
    values = real_array(table, "table", ndim=3, shape="[H, W, D]")  # [H, W, D] float64
    height, width, d = values.shape
    if channels is None:
        chosen = list(dict.fromkeys(c for c in (0, 2, d // 2, d // 2 + 2) if c < d))
    else:
        if isinstance(channels, (str, bytes)) or not isinstance(channels, Sequence):
            raise TypeError(f"channels must be a sequence of integers, got {channels!r}")
        chosen = [check_int("channel", c, minimum=0, maximum=d - 1) for c in channels]
        if not 1 <= len(chosen) <= MAX_CHANNELS or len(set(chosen)) != len(chosen):
            raise ValueError(f"channels must be 1 to {MAX_CHANNELS} distinct channels, got {list(channels)}")
    row, col = _pixel(pixel, height, width)
    dots = values @ values[row, col]  # [H, W, D] @ [D] -> [H, W]

    fig = new_figure((3.0 * (len(chosen) + 1) + 1.5, 3.6))
    axs = fig.subplots(1, len(chosen) + 1)
    for ax, c in zip(axs[:-1], chosen, strict=True):
        image = _image(ax, values[:, :, c], cmap="RdBu", vmin=-1.0, vmax=1.0)
        ax.set_title(f"channel {c}")
    fig.colorbar(image, ax=list(axs[:-1]), shrink=0.8)
    ax = axs[-1]
    image = _image(ax, dots, cmap="viridis", vmin=None, vmax=None)
    ax.plot([col], [row], "x", color="tab:red", markersize=9, mew=2)
    ax.set_title(f"dot product with pixel ({row}, {col})")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_axial_rotary(angles: Any, ax: Axes | None = None, *, pixel: Sequence[int] | None = None) -> Figure:
    """Axial RoPE's positional prior: the score between one pixel and every other, before content.

    For queries and keys whose every feature pair is ``(1, 0)``, the rotated score
    between pixels ``p0`` and ``p`` is ``sum_j cos(angle[p, j] - angle[p0, j])``;
    divided by the number of pairs it is 1 at ``p0`` and depends only on the offset
    ``p - p0`` (integer coordinates), fading with the distance along each axis.

    Args:
        angles: tensor or array ``[H, W, d / 2]``, e.g. ``axial_rotary_angles(H, W, head_dim=d)``.
        ax: axes to draw into; a new figure is made when None.
        pixel: ``(row, column)`` of ``p0``; default the centre ``(H // 2, W // 2)``.

    Returns:
        The figure holding ``ax``: the ``[H, W]`` map on a ``RdBu`` -1..1 scale with a
        colorbar, ``p0`` marked.

    Raises:
        TypeError: if ``angles`` does not hold numbers or ``pixel`` is not integers.
        ValueError: if ``angles`` is not a non-empty ``[H, W, d / 2]``, or ``pixel``
            is not a (row, column) inside the grid.
    """
    values = real_array(angles, "angles", ndim=3, shape="[H, W, d / 2]")  # [H, W, d/2] float64
    height, width, _ = values.shape
    row, col = _pixel(pixel, height, width)
    kernel = np.cos(values - values[row, col]).mean(axis=-1)  # [H, W, d/2] - [d/2] -> mean -> [H, W]
    ax = axes_or_new(ax, (6.0, 5.0))
    image = _image(ax, kernel, cmap="RdBu", vmin=-1.0, vmax=1.0)
    ax.plot([col], [row], "x", color="black", markersize=9, mew=2)
    ax.set_title(f"axial RoPE: mean cos of the angle offsets to pixel ({row}, {col})")
    ax.figure.colorbar(image, ax=ax, label="score / pairs")
    return root_figure(ax)
