"""Shared pieces of the figures: new figures, input conversion, heatmaps, labels.

Every figure is built on :class:`matplotlib.figure.Figure` directly, never through
``pyplot``: no global figure registry (so nothing leaks in a long notebook or a
test run), no ``plt.show()``, no style or rcParams changes.

Shape notation: ``L`` positions, ``D`` encoding dimension.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.collections import QuadMesh
from matplotlib.figure import Figure, SubFigure
from matplotlib.ticker import MaxNLocator

from attnlab.analysis.similarity import as_table

# Above this many cells along an axis, a tick per index is unreadable.
MAX_INDEX_TICKS = 20

#: the most cells one figure's heatmaps draw: matplotlib spends about 100 bytes and a microsecond or more per
#: cell (the binary figure of a million positions, 60 million cells, took minutes and 5.2 GB)
MAX_HEATMAP_CELLS = 2**21


def new_figure(figsize: tuple[float, float], *, constrained: bool = True) -> Figure:
    """A stand-alone Figure (not registered with pyplot), constrained layout by default."""
    return Figure(figsize=figsize, layout="constrained" if constrained else None)


def axes_or_new(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    """``ax`` itself, or the single axes of a new figure when ``ax`` is None."""
    if ax is None:
        return new_figure(figsize).subplots()
    if not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
    return ax


def root_figure(ax: Axes) -> Figure:
    """The whole figure ``ax`` is drawn in, also for the axes of a subfigure (which cannot be saved)."""
    fig = ax.figure
    return fig if isinstance(fig, Figure) else fig.figure


def figure_size_inches(fig: Figure | SubFigure) -> tuple[float, float]:
    """Width and height, in inches, of a figure or a subfigure (which has no ``get_size_inches``).

    An axes' :meth:`~matplotlib.axes.Axes.get_position` is a fraction of this size.
    """
    if isinstance(fig, Figure):
        width, height = fig.get_size_inches()
        return float(width), float(height)
    return fig.bbox.width / fig.dpi, fig.bbox.height / fig.dpi


def check_cmap(cmap: Any) -> str:
    """``cmap`` if it names a registered matplotlib colormap, else a ValueError naming it."""
    if not isinstance(cmap, str) or cmap not in matplotlib.colormaps:
        raise ValueError(f"cmap must name a matplotlib colormap, got {cmap!r}")
    return cmap


def table_array(table: Any, name: str = "table") -> np.ndarray:
    """A table ``[L, D]`` (or ``[1, L, D]``) tensor/array as a float64 numpy array ``[L, D]``."""
    return as_table(table, name).numpy()


def float_array(values: Any, name: str, *, shape: str = "") -> np.ndarray:
    """A tensor, array or sequence of numbers as a float64 numpy array of any shape.

    Raises:
        TypeError: naming ``name`` if ``values`` does not hold numbers.
    """
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        what = f"a {shape} tensor" if shape else "a tensor"
        raise TypeError(f"{name} must be {what} or array of numbers, got {values!r}") from exc


def real_array(values: Any, name: str, *, ndim: int = 1, shape: str = "1-D") -> np.ndarray:
    """A tensor, array or sequence of real numbers as a non-empty float64 numpy array of ``ndim`` dims.

    Raises:
        TypeError: if ``values`` does not hold numbers.
        ValueError: if it is empty or has another number of dimensions (``shape`` names the expected one).
    """
    arr = float_array(values, name, shape=shape)
    if arr.ndim != ndim or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty {shape} tensor or array, got shape {list(arr.shape)}")
    return arr


def vector_array(values: Any, name: str) -> np.ndarray:
    """A 1-D tensor, array or sequence of real numbers as a float64 numpy array ``[n]``."""
    return real_array(values, name)


def no_negative_zero(text: str) -> str:
    """Drop the sign of a label that rounds to zero: ``'-0.00'`` -> ``'0.00'``."""
    if text.startswith("-") and not re.search(r"[1-9]", text):
        return text[1:]
    return text


def fmt2(value: float) -> str:
    """A number to 2 decimals, never ``-0.00`` (the book prints ``-0.00`` on its dials)."""
    return no_negative_zero(f"{value:.2f}")


def readable_text_color(rgba: Sequence[float] | np.ndarray) -> str:
    """Black on light cells, white on dark ones (ITU-R BT.709 luma of the cell colour)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "white"


def index_ticks(ax: Axes, axis: str, n: int, labels: Sequence[Any] | None = None) -> None:
    """Ticks at the centres of ``n`` cells (cell ``k`` spans ``k - 0.5 .. k + 0.5``).

    Every index gets a tick while that stays readable; beyond ``MAX_INDEX_TICKS``
    cells matplotlib picks a few integer ticks instead (``labels`` is then ignored).
    """
    target = ax.xaxis if axis == "x" else ax.yaxis
    if n <= MAX_INDEX_TICKS:
        target.set_ticks(np.arange(n))
        target.set_ticklabels([str(v) for v in (range(n) if labels is None else labels)])
    else:
        target.set_major_locator(MaxNLocator(integer=True))


def check_cells(sizes: dict[str, int], what: str) -> None:
    """Refuse heatmaps of more than :data:`MAX_HEATMAP_CELLS` cells, before anything is computed for them.

    Args:
        sizes: the caller's arguments (or flags) whose product is the number of cells, with their values.
        what: what would be drawn (``"the two heatmaps"``).

    Raises:
        ValueError: naming the sizes, the cells and the limit.
    """
    cells = 1
    for value in sizes.values():
        cells *= int(value)
    if cells > MAX_HEATMAP_CELLS:
        named = " x ".join(f"{name} {value}" for name, value in sizes.items())
        raise ValueError(f"{named}: {what} would draw {cells:,} cells; at most {MAX_HEATMAP_CELLS:,} "
                         "(more take minutes and gigabytes to draw)")


def heatmap(
    ax: Axes,
    values: np.ndarray,
    *,
    cmap: str,
    vmin: float | None,
    vmax: float | None,
    origin: str = "upper",
) -> QuadMesh:
    """Draw ``values [R, C]`` with row ``r``, column ``c`` centred at ``(x=c, y=r)``.

    Centred cells put integer ticks on the cells rather than on their edges.
    ``origin="upper"`` puts row 0 at the top (a matrix as printed), ``"lower"``
    at the bottom (a plot, as the TensorFlow position-encoding
    notebook's ``pcolormesh``). The y limits are set
    explicitly so later tick changes cannot add the white margins the book's
    ``plot_mesh`` has.
    """
    rows, cols = values.shape
    check_cells({"rows": rows, "columns": cols}, "the heatmap")  # callers check first, naming their arguments
    mesh = ax.pcolormesh(
        np.arange(cols + 1) - 0.5,
        np.arange(rows + 1) - 0.5,
        np.ma.masked_invalid(values),  # NaN cells stay blank instead of poisoning the scale
        cmap=matplotlib.colormaps[cmap],
        vmin=vmin,
        vmax=vmax,
        shading="flat",
    )
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim((rows - 0.5, -0.5) if origin == "upper" else (-0.5, rows - 0.5))
    return mesh


def annotate_cells(ax: Axes, mesh: QuadMesh, values: np.ndarray, fmt: str, **text_kw: Any) -> None:
    """Write ``fmt.format(values[r, c])`` on the cell drawn at ``(x=c, y=r)``.

    The text colour is picked from the colour the mesh gave that very cell, so
    it stays readable on any colormap and scale.
    """
    for (r, c), v in np.ndenumerate(values):
        if not np.isfinite(v):
            continue
        color = readable_text_color(mesh.cmap(mesh.norm(v)))
        ax.text(c, r, no_negative_zero(fmt.format(v)), ha="center", va="center",
                color=color, **text_kw)


def write_weights(ax: Axes, mesh: Any, values: np.ndarray, fontsize: float) -> None:
    """Write each weight (2 decimals) on its cell, black or white by that cell's colour.

    The colour is chosen from the value as written, so cells that read the same
    (0.4999 and 0.5001 both read 0.50) get the same colour.
    """
    for (r, c), v in np.ndenumerate(values):
        if np.isfinite(v):
            text = fmt2(v)
            color = readable_text_color(mesh.cmap(mesh.norm(float(text))))
            ax.text(c, r, text, ha="center", va="center", color=color, fontsize=fontsize)


def cell_fontsize(ax: Axes, rows: int, cols: int, chars: int) -> float:
    """A font size (points) at which ``chars`` characters fit in one cell of ``ax``."""
    bbox = ax.get_position()
    fig_w, fig_h = figure_size_inches(ax.figure)
    cell_w = bbox.width * fig_w * 72 / cols  # points
    cell_h = bbox.height * fig_h * 72 / rows
    # A digit is about 0.6 em wide; keep a margin of ~15% of the cell.
    return float(np.clip(min(cell_w * 0.85 / (0.6 * chars), cell_h * 0.6), 5.0, 12.0))
