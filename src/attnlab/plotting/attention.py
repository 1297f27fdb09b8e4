"""Attention figures of the attention lab: a query and its keys, a word alignment.

* :func:`query_and_keys`: a query and its keys as arrows on the unit circle, with
  the norms and cosines that make up their dot products;
* :func:`alignment_matrix` (and the book's name :func:`figure9`): a translation's
  word alignment (Bahdanau et al. 2015, figure 3), as the attention lab draws it.

Attention maps of recorded weights are :func:`attnlab.plotting.plot_attention_weights`
(:mod:`attnlab.plotting.attention_maps`).

The names and positional arguments are the book's (``plots/chapter9.py`` in
dvgodoy/PyTorchStepByStep), so the labs' notebooks run against attnlab. Fixed
relative to the book:

* ``query_and_keys`` takes any number of keys (the book hard-coded three label
  offsets) and sets its limits so long keys are not cut off;
* every cell's text is black or white by the luminance of its own cell (the book
  compared it with half the largest value).

Shape notation: ``T`` target (query) positions, ``S`` source (key) positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from attnlab.plotting._common import (
    axes_or_new,
    figure_size_inches,
    float_array,
    fmt2,
    heatmap,
    real_array,
    root_figure,
    write_weights,
)

__all__ = ["alignment_matrix", "figure9", "query_and_keys"]

_BOOK_ALIGNMENT = np.array([[0.8, 0.0, 0.0, 0.2],
                            [0.0, 0.0, 0.0, 1.0],
                            [0.0, 0.0, 1.0, 0.0],
                            [0.0, 0.8, 0.0, 0.2]])
_BOOK_SOURCE = ("the", "European", "economic", "zone")
_BOOK_TARGET = ("la", "zone", "économique", "européenne")


# -- query_and_keys ----------------------------------------------------------------


def _vectors(name: str, value: Any, *, single: bool) -> np.ndarray:
    """``value`` as float64 ``[2]`` (single) or ``[n, 2]``; ValueError unless 2-D vectors."""
    arr = float_array(value, name)
    if arr.ndim == 0 or arr.shape[-1] != 2 or (single and arr.size != 2) or arr.size == 0:
        want = "a 2-D vector (2 numbers)" if single else "2-D vectors, shape [n, 2]"
        raise ValueError(f"{name} must be {want}, got shape {list(arr.shape)}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    return arr.reshape(2) if single else arr.reshape(-1, 2)


_LABEL_PT = 10.0  # font size of the arrow labels
_LABEL_GAP_PT = 7.0  # gap between an arrow's head and its label


def _arrow(ax: Axes, tip: np.ndarray, color: str, label: str, *, zorder: int = 3) -> tuple[float, float]:
    """An arrow from the origin to ``tip``, labelled just beyond its head.

    A nearly horizontal arrow gets its label beside the head, any other above or
    below it (centred), so labels of arrows pointing left do not run into the
    axis. Returns the label's reach ``(x, y)`` in inches beyond the tip, for the limits.
    """
    ax.annotate("", xy=tuple(tip), xytext=(0.0, 0.0),
                arrowprops=dict(arrowstyle="-|>", color=color, lw=2, shrinkA=0, shrinkB=0,
                                mutation_scale=14),
                zorder=zorder)
    norm = float(np.hypot(*tip))
    ux, uy = (tip / norm) if norm > 0 else (0.0, 1.0)
    gap = _LABEL_GAP_PT / 72
    if abs(ux) > 0.9:  # beside the head
        ha, va = ("left" if ux > 0 else "right"), "center"
        offset = (np.sign(ux) * _LABEL_GAP_PT, 0.0)
    else:  # above or below the head
        ha, va = "center", ("bottom" if uy > 0 else "top")
        offset = (0.0, np.sign(uy) * _LABEL_GAP_PT)
    text = ax.annotate(label, xy=tuple(tip), xytext=offset, textcoords="offset points",
                       ha=ha, va=va, color=color, fontsize=_LABEL_PT, zorder=zorder + 1)
    box = text.get_window_extent()  # pixels; the size does not depend on the limits
    width, height = box.width / ax.figure.dpi, box.height / ax.figure.dpi  # inches
    reach = (gap + width, height / 2) if va == "center" else (width / 2, gap + height)
    return reach


def _square_limit(ax: Axes, tips: list[np.ndarray], reaches: list[tuple[float, float]]) -> float:
    """Half-width of square limits that hold the unit circle, every arrow and its label.

    A label reaching ``r`` inches past a tip at ``|x|`` needs ``lim >= |x| + r * 2 lim / A``
    for axes ``A`` inches wide, i.e. ``lim >= |x| / (1 - 2 r / A)``.
    """
    fig_w, fig_h = figure_size_inches(ax.figure)
    box = ax.get_position()
    size = 0.9 * min(box.width * fig_w, box.height * fig_h)  # inches, after layout (roughly)
    lim = 1.1
    for tip, reach in zip(tips, reaches, strict=True):
        for coord, r in zip(np.abs(tip), reach, strict=True):
            room = max(1.0 - 2.0 * (r + 0.08) / size, 0.25)
            lim = max(lim, (coord + 0.02) / room)
    return lim


def query_and_keys(q: Any, ks: Any, result: Any | None = None, ax: Axes | None = None) -> Figure:
    """A query and its keys as arrows, with the pieces of their dot products (the attention lab).

    ``Q . K_i = ||Q|| ||K_i|| cos(theta_i)``: the query arrow (red) is labelled with
    its norm, each key (black) with its norm and its cosine with the query, so
    the figure shows why the key pointing the query's way scores highest. The
    context vector (green), the weighted average of the values, is drawn when
    ``result`` is given. The unit circle gives the scale.

    Args:
        q: the query, 2 numbers (e.g. ``[2]`` or the attention lab's ``[1, 1, 2]``).
        ks: the keys ``[n, 2]`` (or ``[1, n, 2]``), any number of them.
        result: the context vector, 2 numbers; not drawn when None (the course
            notebook passes it positionally as ``context``).
        ax: axes to draw into; a new 5x5-inch figure is made when None.

    Returns:
        The figure holding ``ax``.

    Raises:
        TypeError: if a vector is not numeric or ``ax`` is not an Axes.
        ValueError: if a vector is not 2-D (only the plane can be drawn) or not finite.
    """
    q_vec = _vectors("q", q, single=True)
    keys = _vectors("ks", ks, single=False)
    context = None if result is None else _vectors("result", result, single=True)
    ax = axes_or_new(ax, (5.0, 5.0))

    norm_q = float(np.linalg.norm(q_vec))
    tips, reaches = [], []
    ax.add_patch(Circle((0.0, 0.0), 1.0, fill=False, color="0.45", lw=1.5, zorder=1))
    ax.axhline(0.0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0.0, color="0.85", lw=0.8, zorder=0)
    for i, k in enumerate(keys):
        norm_k = float(np.linalg.norm(k))
        cos = float(q_vec @ k) / (norm_q * norm_k) if norm_q > 0 and norm_k > 0 else float("nan")
        cos_text = fmt2(cos) if math.isfinite(cos) else "undefined"
        label = f"$||K_{{{i}}}||={fmt2(norm_k)}$\n$\\cos\\theta_{{{i}}}={cos_text}$"
        tips.append(k)
        reaches.append(_arrow(ax, k, "black", label))
    tips.append(q_vec)
    reaches.append(_arrow(ax, q_vec, "red", f"$||Q||={fmt2(norm_q)}$", zorder=4))
    if context is not None:
        tips.append(context)
        reaches.append(_arrow(ax, context, "green", "Context Vector", zorder=5))

    lim = _square_limit(ax, tips, reaches)
    reach = max(float(np.abs(t).max()) for t in tips)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ticks = [-1.0, 0.0, 1.0] if reach < 2 else None
    if ticks is not None:
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
    ax.set_xlabel("$x_0$")
    ax.set_ylabel("$x_1$")
    ax.set_title("Query and Keys")
    return root_figure(ax)


# -- alignment_matrix / figure9 ----------------------------------------------------


def alignment_matrix(
    weights: Any | None = None,
    source_tokens: Sequence[Any] | None = None,
    target_tokens: Sequence[Any] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """A word alignment as a matrix of attention weights (the attention lab's ``figure9``).

    By default the book's illustration of Bahdanau et al. (2015, figure 3): the
    English "the European economic zone" translated to French "la zone économique
    européenne", where the adjectives swap places and each French word attends to
    the English words it comes from. Row ``t`` (target word), column ``s`` (source
    word), gray from 0 (black) to 1 (white), each weight written on its cell.

    Args:
        weights: ``[T, S]`` tensor or array; the book's 4x4 alignment when None.
        source_tokens: ``S`` labels for the columns, written on top and rotated;
            the book's English words (with the book's weights), else ``0 .. S-1``.
        target_tokens: ``T`` labels for the rows; the book's French words (with the
            book's weights), else ``0 .. T-1``.
        ax: axes to draw into; a new figure is made when None.

    Returns:
        The figure holding ``ax``.

    Raises:
        TypeError: if ``weights`` is not numeric, or a token list is a single string.
        ValueError: if ``weights`` is not 2-D, or a token list does not have ``S``/``T`` entries.
    """
    if weights is None:
        values = _BOOK_ALIGNMENT
        default_src, default_tgt = list(_BOOK_SOURCE), list(_BOOK_TARGET)
    else:
        values = real_array(weights, "weights", ndim=2, shape="[T, S]")
        default_src = [str(s) for s in range(values.shape[1])]
        default_tgt = [str(t) for t in range(values.shape[0])]
    n_tgt, n_src = values.shape
    src = _tokens("source_tokens", source_tokens, default_src, n_src, "S")
    tgt = _tokens("target_tokens", target_tokens, default_tgt, n_tgt, "T")

    width, height = float(np.clip(0.9 * n_src + 1.6, 3.5, 12)), float(np.clip(0.9 * n_tgt + 1.6, 3.5, 12))
    ax = axes_or_new(ax, (width, height))
    mesh = heatmap(ax, values, cmap="gray", vmin=0.0, vmax=1.0, origin="upper")
    mesh.set_edgecolor("0.55")
    mesh.set_linewidth(0.5)
    cell = min((width - 1.6) / n_src, (height - 1.6) / n_tgt) * 72  # points, roughly
    write_weights(ax, mesh, values, float(np.clip(cell * 0.85 / 2.7, 5.0, 12.0)))
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(n_src), src, rotation=90 if max(map(len, src)) > 3 else 0)
    ax.set_yticks(np.arange(n_tgt), tgt)
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False, length=0)
    ax.set_xlabel("Source")
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("Target")
    return root_figure(ax)


def _tokens(name: str, tokens: Sequence[Any] | None, default: list[str], n: int, dim: str) -> list[str]:
    if tokens is None:
        return default
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be a sequence of tokens, not a single string {tokens!r}")
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(f"{name} has {len(tokens)} entries but weights has {dim}={n}")
    return tokens


def figure9() -> Figure:
    """The attention lab's ``figure9()``: the book's English-to-French alignment (:func:`alignment_matrix`).

    Returns:
        The figure.
    """
    return alignment_matrix()
