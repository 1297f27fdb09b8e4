"""The TensorFlow position-encoding notebook's similarity figures: how alike two positions' encodings are.

``plot_similarity`` compares every position with every other (cosine
similarity); ``plot_nearby`` compares one position with all the others (dot
product and sum of squared errors). Both show that nearby positions have
similar vectors and that the likeness fades with distance.

Shape notation: ``L`` positions, ``D`` encoding dimension.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attnlab._validate import check_int
from attnlab.analysis.similarity import cosine_similarity_matrix, dot_products, sse
from attnlab.plotting._common import axes_or_new, heatmap, index_ticks, new_figure, root_figure, table_array

__all__ = ["plot_nearby", "plot_similarity"]


def plot_similarity(table: Any, ax: Axes | None = None) -> Figure:
    """Cosine similarity between every pair of positions (the TensorFlow position-encoding notebook).

    Args:
        table: encoding table, tensor or array ``[L, D]`` (or ``[1, L, D]``).
        ax: axes to draw into; a new figure is made when None.

    Returns:
        The figure: an ``[L, L]`` map on a fixed -1..1 diverging scale (``RdBu``,
        white at 0), square cells, position 0 at the bottom left, and a colorbar.

    Raises:
        TypeError, ValueError: if ``table`` is not a 2-D table of real numbers.
    """
    rows = table_array(table)
    sim = cosine_similarity_matrix(rows).numpy()  # [L, L]
    ax = axes_or_new(ax, (7.0, 6.0))
    mesh = heatmap(ax, sim, cmap="RdBu", vmin=-1.0, vmax=1.0, origin="lower")
    n = sim.shape[0]
    index_ticks(ax, "x", n)
    index_ticks(ax, "y", n)
    ax.set_aspect("equal")
    ax.set_xlabel("Position")
    ax.set_ylabel("Position")
    ax.set_title("Cosine similarity between positions")
    ax.figure.colorbar(mesh, ax=ax, label="Cosine similarity")
    return root_figure(ax)


def plot_nearby(table: Any, position: int = 20) -> Figure:
    """Dot product and SSE of every position's vector against one position's.

    As in the TensorFlow position-encoding notebook.

    Args:
        table: encoding table, tensor or array ``[L, D]`` (or ``[1, L, D]``).
        position: the position compared with all others; negative counts from
            the end, as in indexing.

    Returns:
        A figure of two stacked panels sharing the position axis: the dot product
        (largest at ``position``) and the SSE (zero at ``position``), with the
        chosen position marked on both.

    Raises:
        TypeError: if ``position`` is not an integer or ``table`` not a table.
        ValueError: if ``position`` is outside the table.
    """
    rows = table_array(table)
    n = rows.shape[0]
    position = check_int("position", position)
    if not -n <= position < n:
        raise ValueError(f"position must be in [0, {n}) for a table of {n} positions, "
                         f"got {position}")
    position %= n
    dots = dot_products(rows, position).numpy()  # [L]
    errors = sse(rows, position).numpy()  # [L]

    fig = new_figure((9.0, 6.5))
    axs = fig.subplots(2, 1, sharex=True)
    positions = np.arange(n)
    marker = "o" if n <= 60 else None
    for ax, values, label in ((axs[0], dots, "Dot product"), (axs[1], errors, "SSE")):
        ax.plot(positions, values, marker=marker, markersize=3)
        ax.axvline(position, color="tab:red", lw=1, ls="--", zorder=0)
        ax.plot([position], [values[position]], "o", color="tab:red", markersize=7, zorder=3)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axs[1].set_xlabel("Position")
    axs[1].xaxis.set_major_locator(MaxNLocator(integer=True))
    axs[0].set_title(f"Every position compared with position {position} (red)")
    return fig
