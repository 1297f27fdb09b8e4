"""Whole-table figures: the encoding heatmap, the shifted map, columns, binary analogy.

* ``plot_encoding``: the TensorFlow position-encoding notebook's heatmap of the table and
  the d2l chapter's heatmap of ``P``;
* ``plot_shifted``: the notebook's shifted map, ``table @ shift_matrix(delta)``, with
  the error against the rows it should reproduce;
* ``plot_columns``: the d2l chapter's columns 6-9 against position;
* ``plot_binary``: the d2l chapter's analogy between binary counting and the sinusoids.

Shape notation: ``L`` positions, ``D`` encoding dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attnlab._validate import check_choice, check_int
from attnlab.analysis.similarity import binary_codes
from attnlab.encodings import shift_matrix, sinusoidal
from attnlab.plotting._common import (
    annotate_cells,
    axes_or_new,
    check_cells,
    check_cmap,
    heatmap,
    index_ticks,
    new_figure,
    root_figure,
    table_array,
)

__all__ = ["plot_binary", "plot_columns", "plot_encoding", "plot_shifted"]


def plot_encoding(
    table: Any,
    ax: Axes | None = None,
    *,
    cmap: str = "RdBu",
    vmin: float | None = -1.0,
    vmax: float | None = 1.0,
    title: str | None = None,
    xlabel: str = "Depth",
    ylabel: str = "Position",
    origin: str = "lower",
) -> Figure:
    """Heatmap of an encoding table, positions along y, columns along x, with a colorbar.

    The default diverging ``RdBu`` on -1..1 makes zero white (the TensorFlow
    position-encoding notebook). The d2l chapter's "heatmap of P" is::

        plot_encoding(P, cmap="Blues", vmin=None, vmax=None,
                      xlabel="Column (encoding dimension)", ylabel="Row (position)")

    (add ``origin="upper"`` to put row 0 at the top, as its ``imshow`` does).

    Args:
        table: tensor or array ``[L, D]`` (or a ``pe`` buffer ``[1, L, D]``).
        ax: axes to draw into; a new figure is made when None.
        cmap: matplotlib colormap name.
        vmin, vmax: colour scale limits; None takes them from the data.
        title: axes title; none when None.
        xlabel, ylabel: axis labels.
        origin: ``"lower"`` puts position 0 at the bottom (the TensorFlow
            position-encoding notebook), ``"upper"`` at the top (the d2l chapter).

    Returns:
        The figure holding ``ax``.

    Raises:
        TypeError, ValueError: if ``table`` is not a 2-D table of real numbers.
        ValueError: if ``cmap`` is not a colormap name or ``origin`` is neither
            "lower" nor "upper".
    """
    rows = table_array(table)  # [L, D]
    origin = check_choice("origin", origin, ("lower", "upper"))
    cmap = check_cmap(cmap)
    ax = axes_or_new(ax, (9.0, 5.5))
    mesh = heatmap(ax, rows, cmap=cmap, vmin=vmin, vmax=vmax, origin=origin)
    index_ticks(ax, "x", rows.shape[1])
    index_ticks(ax, "y", rows.shape[0])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.figure.colorbar(mesh, ax=ax)
    return root_figure(ax)


def plot_shifted(
    table: Any,
    delta: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rates: str | None = None,
) -> Figure:
    """A sinusoidal table next to the same table moved ``delta`` positions by a matrix.

    Row ``p`` of ``table @ shift_matrix(delta, D)`` is the encoding of position
    ``p + delta`` (Vaswani et al. 2017, §3.5). The title reports the largest
    absolute error over the rows where ``p + delta`` is inside the table (the
    TensorFlow position-encoding notebook uses ``delta = -10`` and compares
    ``product[10:]`` with ``table[:-10]``); the other rows, the encodings of
    positions outside the table, are shaded.

    Args:
        table: sinusoidal table ``[L, D]`` (``D`` even), tensor or array; computed
            in float64. Use ``sinusoidal(..., dtype=torch.float64)`` to see the
            error at float64 precision.
        delta: the shift in positions, ``|delta| < L``.
        base, layout, rates: how ``table`` was made (see
            :func:`attnlab.encodings.sinusoidal`); the matrix must match it.

    Returns:
        A figure with two ``RdBu`` panels on -1..1 and a shared colorbar.

    Raises:
        TypeError: if ``delta`` is not an integer or ``table`` not a table.
        ValueError: if ``|delta| >= L`` (no row would land inside the table),
            ``D`` is odd, or ``layout``/``rates`` is unknown.
    """
    rows = table_array(table)  # [L, D] float64
    n, d = rows.shape
    delta = check_int("delta", delta)
    if abs(delta) >= n:
        raise ValueError(f"delta must satisfy |delta| < {n} (the table's positions), got {delta}")
    m = shift_matrix(delta, d, base=base, layout=layout, rates=rates).numpy()  # [D, D] float64
    shifted = rows @ m  # [L, D] x [D, D] -> [L, D]; row p encodes position p + delta
    # Rows whose target p + delta lies inside 0 .. L-1.
    inside = slice(max(0, -delta), min(n, n - delta))
    error = float(np.abs(shifted[inside] - rows[inside.start + delta: inside.stop + delta]).max())

    fig = new_figure((13.0, 5.5))
    axs = fig.subplots(1, 2, sharey=True)
    for ax, values, title in ((axs[0], rows, "table"),
                              (axs[1], shifted, f"table @ shift_matrix({delta})")):
        mesh = heatmap(ax, values, cmap="RdBu", vmin=-1.0, vmax=1.0, origin="lower")
        index_ticks(ax, "x", d)
        ax.set_xlabel("Depth")
        ax.set_title(title)
    axs[0].set_ylabel("Position")
    axs[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    outside = (-0.5, inside.start - 0.5) if delta < 0 else (inside.stop - 0.5, n - 0.5)
    where = "< 0" if delta < 0 else f">= {n}"
    first, last = (0, inside.start - 1) if delta < 0 else (inside.stop, n - 1)
    axs[1].axhspan(*outside, facecolor="0.5", alpha=0.35, hatch="//", edgecolor="0.3", lw=0)
    axs[1].text(d / 2 - 0.5, sum(outside) / 2,
                f"rows {first}-{last}: positions {where}, outside the table",
                ha="center", va="center", fontsize=10,
                bbox=dict(facecolor="white", alpha=0.85, edgecolor="none"))
    fig.colorbar(mesh, ax=list(axs))
    fig.suptitle(f"Shift by {delta}: max |error| = {error:.1e} over the "
                 f"{inside.stop - inside.start} rows that land inside the table")
    return fig


def plot_columns(
    table: Any, columns: Sequence[int] = (6, 7, 8, 9), ax: Axes | None = None
) -> Figure:
    """Chosen columns of a table against position (the d2l chapter's columns 6 to 9).

    Args:
        table: tensor or array ``[L, D]`` (or ``[1, L, D]``).
        columns: column indices in ``0 .. D-1``, each drawn as one line.
        ax: axes to draw into; a new figure is made when None.

    Returns:
        The figure, with a legend ``Col 6``, ``Col 7``, ...

    Raises:
        TypeError: if a column is not an integer.
        ValueError: if ``columns`` is empty or a column is outside ``0 .. D-1``.
    """
    rows = table_array(table)  # [L, D]
    n, d = rows.shape
    if isinstance(columns, torch.Tensor):
        columns = columns.tolist()
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
        raise TypeError(f"columns must be a sequence of column indices, got {columns!r}")
    if len(columns) == 0:
        raise ValueError("columns must name at least one column, got none")
    cols = [check_int(f"columns[{k}]", c) for k, c in enumerate(columns)]
    for k, c in enumerate(cols):
        if not 0 <= c < d:
            raise ValueError(f"column {c} (columns[{k}]) is out of range: the table has "
                             f"{d} columns, 0 .. {d - 1}")
    ax = axes_or_new(ax, (7.5, 3.2))
    for c in cols:
        ax.plot(np.arange(n), rows[:, c], label=f"Col {c}")
    ax.set_xlabel("Row (position)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return root_figure(ax)


def plot_binary(n: int = 8, *, d_model: int | None = None) -> Figure:
    """The d2l chapter's analogy: binary codes of ``0 .. n-1`` beside ``n`` sinusoidal positions.

    In binary, bit ``k`` flips every ``2**k`` numbers, so the higher bits change
    more slowly; in the sinusoidal table, pair ``i`` turns every ``2*pi / w_i``
    positions, slower and slower along the columns. Both panels use the same
    colormap so the alternation patterns can be compared row by row. Note the
    directions: the binary code has its fastest bit on the right (highest bit
    first, as numbers are written), the encoding its fastest pair on the left.

    Args:
        n: how many numbers / positions (rows).
        d_model: width of the sinusoidal table. By default ``2 * n_bits``: one
            (sin, cos) pair per bit, so both panels show the same number of
            frequencies.

    Returns:
        A figure with two heatmaps: ``binary_codes(n)`` ``[n, n_bits]`` with each
        cell written as 0/1, and ``sinusoidal(n, d_model)`` ``[n, d_model]``.

    Raises:
        TypeError: if ``n`` or ``d_model`` is not an integer.
        ValueError: if ``n < 1`` or ``d_model < 1``, or for more cells than the figure can draw
            (:data:`attnlab.plotting._common.MAX_HEATMAP_CELLS`), before anything is computed.
    """
    n = check_int("n", n, minimum=1)
    n_bits = max(1, (n - 1).bit_length())  # binary_codes' width
    d_model = 2 * n_bits if d_model is None else check_int("d_model", d_model, minimum=1)
    check_cells({"n": n, "n_bits + d_model": n_bits + d_model}, "the two heatmaps")
    codes = binary_codes(n).numpy()  # [n, n_bits], highest bit first
    table = sinusoidal(n, d_model, dtype=torch.float64).numpy()  # [n, D]

    width = float(np.clip(0.6 * (n_bits + d_model) + 3.5, 6, 16))
    height = float(np.clip(0.38 * n + 2.2, 3.5, 10))
    fig = new_figure((width, height))
    axs = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[max(n_bits, 2), d_model]))
    bits_ax, pe_ax = axs
    # 0 white and 1 dark: the same colormap as the encoding, on the bits' own 0..1 range.
    mesh = heatmap(bits_ax, codes.astype(np.float64), cmap="Blues", vmin=0.0, vmax=1.0)
    if n * n_bits <= 600:
        annotate_cells(bits_ax, mesh, codes, "{:d}", fontsize=11)
    weights = [2**k for k in range(n_bits - 1, -1, -1)]
    index_ticks(bits_ax, "x", n_bits, [f"{w}s" for w in weights])
    index_ticks(bits_ax, "y", n)
    bits_ax.set_xlabel("Bit (highest first)")
    bits_ax.set_ylabel("Number")
    bits_ax.set_title(f"Binary codes of 0..{n - 1}\n(fastest bit on the right)")

    mesh = heatmap(pe_ax, table, cmap="Blues", vmin=-1.0, vmax=1.0)
    if n * d_model <= 200:  # the values fit in the cells
        annotate_cells(pe_ax, mesh, table, "{:.2f}", fontsize=8)
    index_ticks(pe_ax, "x", d_model)
    index_ticks(pe_ax, "y", n)
    pe_ax.set_xlabel("Column (encoding dimension)")
    pe_ax.set_ylabel("Row (position)")
    pe_ax.set_title(f"Sinusoidal encoding, {n} positions x {d_model} dims\n"
                    "(fastest pair on the left)")
    fig.colorbar(mesh, ax=pe_ax, shrink=0.9)
    return fig
