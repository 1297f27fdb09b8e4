"""The positional-encoding lab's meshes: ``plot_mesh``, the encoded-distance matrix, ``encoding_heatmap``.

``plot_mesh`` and ``encoding_heatmap`` keep the book's names and positional
arguments (``plots/chapter9.py`` in dvgodoy/PyTorchStepByStep), so the lab's
notebook runs against attnlab. Fixed relative to the book:

* ``showvals`` wrote the text for ``values[i, j]`` on the cell coloured by
  ``values[j, i]`` (and off the mesh for non-square input); here each number sits
  on its own cell, in a colour readable on that cell;
* the book annotated a global ``distances`` instead of ``values``;
* the y limits no longer leave white margins, and no label reads ``-0.00``;
* ``encoding_heatmap``'s legends were hard-coded for ``d_model = 8``, and its two
  meshes had separate colour scales and no colorbar.

Shape notation: ``L`` positions, ``D`` encoding dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attnlab._validate import check_finite_float, check_int
from attnlab.analysis.similarity import distance_matrix
from attnlab.encodings import sinusoidal
from attnlab.plotting._common import (
    annotate_cells,
    axes_or_new,
    cell_fontsize,
    check_cmap,
    heatmap,
    index_ticks,
    new_figure,
    root_figure,
    table_array,
)

__all__ = ["encoding_heatmap", "plot_distances", "plot_mesh"]


def _check_fmt(fmt: Any) -> str:
    try:
        fmt.format(0.5)
    except (AttributeError, IndexError, KeyError, ValueError) as exc:
        raise TypeError(f"fmt must be a format string such as '{{:.2f}}', got {fmt!r}") from exc
    return fmt


def plot_mesh(
    values: Any,
    ax: Axes | None = None,
    showvals: bool = False,
    colorbar: bool = False,
    ylabel: str | None = None,
    *,
    xlabel: str = "Positions",
    cmap: str = "viridis",
    fmt: str = "{:.2f}",
    vmin: float | None = None,
    vmax: float | None = None,
    yticklabels: Sequence[Any] | None = None,
) -> Figure:
    """Draw a table as a mesh: position along x, dimension (second index) along y.

    Cell ``(x=i, y=j)`` is coloured by ``values[i, j]``; row ``j = 0`` is at the top,
    as in the book.

    Args:
        values: tensor or array ``[L, D]`` (or ``[1, L, D]``); ``D`` may differ from ``L``.
        ax: axes to draw into; a new figure is made when None.
        showvals: write each value on its cell (in black or white, whichever
            reads better on that cell's colour).
        colorbar: add a colorbar next to ``ax``.
        ylabel: y-axis label; ``"Dimensions"`` when None.
        xlabel: x-axis label.
        cmap: matplotlib colormap name.
        fmt: format of the written values (``showvals``); ``-0.00`` prints as ``0.00``.
        vmin, vmax: colour scale limits; the data range when None. Pass the
            same limits to several meshes to compare them.
        yticklabels: labels of the ``D`` rows (e.g. the real column numbers
            of a slice); ``0 .. D-1`` when None.

    Returns:
        The figure holding ``ax``.

    Raises:
        TypeError: if ``values`` is not a tensor/array of numbers or ``fmt`` is
            not a format string.
        ValueError: if ``values`` is not 2-D, ``cmap`` is unknown, or
            ``yticklabels`` does not have ``D`` entries.
    """
    table = table_array(values, "values")  # [L, D]
    n_pos, n_dim = table.shape
    cmap = check_cmap(cmap)
    fmt = _check_fmt(fmt)
    if yticklabels is not None and len(yticklabels) != n_dim:
        raise ValueError(f"yticklabels must have {n_dim} entries, got {len(yticklabels)}")
    figsize = (float(np.clip(0.6 * n_pos + 2.5, 4, 12)), float(np.clip(0.45 * n_dim + 1.5, 2.5, 8)))
    ax = axes_or_new(ax, figsize)

    # Rows of the mesh are dimensions, columns are positions: draw the transpose.
    grid = table.T  # [D, L]
    mesh = heatmap(ax, grid, cmap=cmap, vmin=vmin, vmax=vmax, origin="upper")
    index_ticks(ax, "x", n_pos)
    index_ticks(ax, "y", n_dim, yticklabels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Dimensions" if ylabel is None else ylabel)
    if colorbar:
        ax.figure.colorbar(mesh, ax=ax)
    if showvals:
        # The same transposed grid feeds the colours and the text, so they cannot disagree.
        chars = len(fmt.format(float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 0.0))
        annotate_cells(ax, mesh, grid, fmt, fontsize=cell_fontsize(ax, n_dim, n_pos, chars + 1))
    return root_figure(ax)


#: distances are written on the cells up to this many positions; past it the cells are too small
#: to read, and writing them would make the figure quadratic in n (minutes at n = 200)
MAX_WRITTEN_POSITIONS = 24


def plot_distances(table: Any, n: int = 5, ax: Axes | None = None) -> Figure:
    """The positional-encoding lab's "Distances Between Positions": Euclidean distances of the first rows.

    For a sinusoidal table the matrix is Toeplitz: positions the same number of
    steps apart are the same distance apart, wherever they are.

    Args:
        table: encoding table, tensor or array ``[L, D]`` (or ``[1, L, D]``).
        n: how many leading positions to compare (``1 <= n <= L``).
        ax: axes to draw into; a new figure is made when None.

    Returns:
        The figure: an ``[n, n]`` mesh with a colorbar, the distances written on
        the cells while ``n <= MAX_WRITTEN_POSITIONS`` (24).

    Raises:
        TypeError: if ``n`` is not an integer or ``table`` not a table.
        ValueError: if ``n`` is outside ``1 .. L``.
    """
    rows = table_array(table)
    n = check_int("n", n, minimum=1)
    if n > rows.shape[0]:
        raise ValueError(f"n must be at most the table's {rows.shape[0]} positions, got {n}")
    ax = axes_or_new(ax, (6.4, 5.4))
    distances = distance_matrix(rows[:n])  # [n, n] float64
    plot_mesh(distances, ax, showvals=n <= MAX_WRITTEN_POSITIONS, colorbar=True, ylabel="Positions")
    ax.set_aspect("equal")  # a square matrix drawn with square cells
    ax.set_title("Distances Between Positions")
    return root_figure(ax)


def encoding_heatmap(d_model: int = 8, max_len: int = 10, *, base: float = 10000.0) -> Figure:
    """The positional-encoding lab's sines and cosines of the sinusoidal encoding, as lines and as meshes.

    Top row: the sine columns (even dims) and the cosine columns (odd dims)
    against position, each line named by its real column. Bottom row: the same
    columns as meshes on one shared -1..1 colour scale with one colorbar.

    Args:
        d_model: model dimension ``D`` (at least 2, so there is a cosine).
        max_len: number of positions ``L``.
        base: wavelength scale of :func:`attnlab.encodings.sinusoidal`.

    Returns:
        A 2x2 figure.

    Raises:
        TypeError: if a size is not an integer or ``base`` not a number.
        ValueError: if ``d_model < 2``, ``max_len < 1`` or ``base <= 0``.
    """
    d_model = check_int("d_model", d_model, minimum=2)
    max_len = check_int("max_len", max_len, minimum=1)
    base = check_finite_float("base", base, positive=True)
    table = sinusoidal(max_len, d_model, base=base, dtype=torch.float64).numpy()  # [L, D]
    positions = np.arange(max_len)
    groups = [("Sines - Even Dimensions", np.arange(0, d_model, 2)),
              ("Cosines - Odd Dimensions", np.arange(1, d_model, 2))]

    fig = new_figure((14, 8))
    axs = fig.subplots(2, 2, sharex=True)
    marker = "o" if max_len <= 30 else None  # with few positions, show the samples
    meshes = []
    for col, (title, dims) in enumerate(groups):
        line_ax, mesh_ax = axs[0, col], axs[1, col]
        line_ax.plot(positions, table[:, dims], marker=marker, markersize=4)
        line_ax.set_title(title)
        line_ax.set_ylim(-1.1, 1.1)
        line_ax.axhline(0.0, color="0.8", lw=0.8, zorder=0)
        if len(dims) <= 16:  # beyond that a legend hides the plot; the mesh names the dims
            # Outside, to the right, so it never covers a curve.
            line_ax.legend([f"dim {d}" for d in dims], loc="center left", bbox_to_anchor=(1.0, 0.5),
                           frameon=False, fontsize="small")
        plot_mesh(table[:, dims], mesh_ax, cmap="RdBu", vmin=-1.0, vmax=1.0, ylabel="Dimension",
                  yticklabels=list(dims))
        mesh_ax.tick_params(labelbottom=True)  # sharex hides them; the mesh needs its positions
        meshes.append(mesh_ax.collections[0])
    axs[0, 0].set_ylabel("Value")
    fig.colorbar(meshes[0], ax=list(axs[1, :]), label="Value", shrink=0.9)
    return fig
