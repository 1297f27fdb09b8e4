"""The prediction figure of variable-length squares: the corners a model predicts after a prefix.

With ``variable_len`` squares each sequence holds only the first 2, 3 or 4
corners of a noisy square (right-padded to a common length), and the model
predicts the next corners round the square. :func:`prefix_pred` is the sibling
of :func:`attnlab.plotting.plot_sequence_pred` for that task, and looks like it: one
panel per square, the walk in grey, true corners as numbered dots, the
predictions as red rings joined by a dashed path.

Like ``plot_sequence_pred`` it takes only data: the predictions come in already
computed, and no model is run here.

Shape notation: ``N`` squares, ``S`` source steps (given corners plus padding),
``T`` predicted corners, ``2`` coordinates; square ``i`` has ``L = lengths[i]``
given corners.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from attnlab._validate import check_int
from attnlab.plotting._common import float_array, new_figure
from attnlab.plotting.squares import (
    _PANEL,
    _PRED_COLOR,
    _TRUE_COLOR,
    _panel_limit,
    _predicted_corners,
    _style_panel,
    _true_corners,
    direction_array,
)

__all__ = ["prefix_pred"]

# The true next corners are dark grey rather than black: the reader tells what the model
# was given from what it had to find, and the white numbers stay readable on both.
_NEXT_FACE = "0.4"


def _corners(value: Any, name: str, n: int | None) -> np.ndarray:
    """``value`` as float64 ``[N, K, 2]`` with ``K >= 1`` (and ``N == n`` when ``n`` is given)."""
    arr = float_array(value, name, shape="[N, K, 2]")
    if arr.ndim != 3 or arr.shape[0] == 0 or arr.shape[1] == 0 or arr.shape[2] != 2:
        raise ValueError(f"{name} must be [N, K, 2] with N, K >= 1 (corners of 2 coordinates), "
                         f"got shape {list(arr.shape)}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} holds {arr.shape[0]} squares but predictions holds {n}: "
                         f"need one per square, got shape {list(arr.shape)}")
    return arr


def _check_finite(values: np.ndarray, name: str) -> None:
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        i, k = bad[0, :2]
        raise ValueError(f"{name} must be finite, got {values[i, k].tolist()} at square {i}, step {k}")


def _check_lengths(lengths: Any, n: int, steps: int) -> np.ndarray:
    """``lengths`` as int64 ``[N]``, each in ``1..steps``."""
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.detach().cpu().numpy()
    try:
        arr = np.asarray(lengths)
    except ValueError as exc:  # a ragged nested list
        raise TypeError(f"lengths must be a 1-D tensor or array of integers, got {lengths!r}") from exc
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"lengths must hold integers (the number of given corners), got dtype {arr.dtype}: "
                        f"{arr.ravel()[:5].tolist()}")
    if arr.shape != (n,):
        raise ValueError(f"lengths must hold one length per square ([{n}]), got shape {list(arr.shape)}")
    bad = np.flatnonzero((arr < 1) | (arr > steps))
    if bad.size:
        raise ValueError(f"lengths must be in 1..{steps} (the source's steps), got {int(arr[bad[0]])} "
                         f"for square {int(bad[0])}")
    return arr.astype(np.int64)


def _title(length: int, direction: int | None) -> str:
    given = f"{length} given"
    if direction is None:
        return given
    return f"{'Clockwise' if direction == 1 else 'Counter-Clockwise'} · {given}"


def _draw_prefix(
    ax: Axes, given: np.ndarray, true_next: np.ndarray, pred: np.ndarray, title: str, limit: float
) -> None:
    """One square: the given corners ``[L, 2]``, the true ``[T, 2]`` and predicted ``[T, 2]`` next ones."""
    walk = np.concatenate([given, true_next])  # [L + T, 2], in walk order
    ax.plot(walk[:, 0], walk[:, 1], color=_TRUE_COLOR, lw=2, alpha=0.5, solid_capstyle="round", zorder=1)
    path = np.concatenate([given[-1:], pred])  # [1 + T, 2]: last given corner -> the predictions
    ax.plot(path[:, 0], path[:, 1], color=_PRED_COLOR, lw=2, ls="--", alpha=0.8, zorder=2)
    _true_corners(ax, given)
    _true_corners(ax, true_next, first=len(given) + 1, face=_NEXT_FACE)
    _predicted_corners(ax, pred, limit, first=len(given) + 1)
    ax.set_title(title)
    _style_panel(ax, limit)


def prefix_pred(
    predictions: Any,
    source: Any,
    lengths: Any,
    target: Any,
    directions: Any | None = None,
    n_rows: int = 2,
    n_cols: int = 5,
) -> Figure:
    """Predicted next corners of variable-length squares against the true ones, one panel per square.

    Panel ``i`` shows square ``i``'s ``L = lengths[i]`` given corners as black
    dots numbered 1 to ``L`` in white, its true next corners as dark grey dots
    numbered ``L + 1`` to ``L + T`` (all joined in walk order by a grey line), and
    the predicted next corners as red rings numbered ``L + 1`` to ``L + T`` from
    outside, on a dashed red path from the last given corner. A good prediction
    lies on the grey dots. The padding of ``source`` (steps ``L`` onwards) is
    never drawn and never widens the axes, whatever its values.

    Args:
        predictions: the model's predicted next corners ``[N, T, 2]`` (tensor or
            array), ``T >= 1``.
        source: the given corners ``[N, S, 2]``, right-padded: only the first
            ``lengths[i]`` steps of square ``i`` are read.
        lengths: ``[N]`` integers, how many corners of each source are given,
            ``1 <= lengths[i] <= S``.
        target: the true next corners ``[N, T, 2]``.
        directions: ``[N]``, 1 = clockwise, 0 = counter-clockwise; the panels are
            titled e.g. ``Clockwise · 3 given``, or just ``3 given`` when None.
        n_rows: rows of panels.
        n_cols: panels per row. The first ``min(N, n_rows * n_cols)`` squares
            are drawn; with fewer squares than panels, the grid shrinks to
            ``min(n_cols, N)`` columns and as many rows as needed, and the
            panels left over in the last row are hidden.

    Returns:
        The figure, ``4 x 4`` inches per panel, with a legend below the panels.
        The axes span ``[-1.45, 1.45]`` (as ``plot_sequence_pred``'s), widened alike in
        every panel when a drawn corner or prediction falls outside.

    Raises:
        TypeError: naming the argument, if an input does not hold numbers,
            ``lengths`` does not hold integers, or ``n_rows``/``n_cols`` is not an
            integer.
        ValueError: naming the argument and the bad shape or value, if
            ``predictions``, ``source`` or ``target`` is not ``[N, K, 2]``, the
            arguments disagree on ``N``, ``target`` and ``predictions`` on ``T``,
            a length lies outside ``1..S``, a given, true or predicted corner is
            NaN or infinite, ``directions`` is not ``N`` zeros and ones, or
            ``n_rows``/``n_cols`` is below 1.

    Example:
        >>> import numpy as np
        >>> source = np.array([[[-1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]])  # [1, 3, 2]: one padded step
        >>> nxt = np.array([[[1.0, -1.0], [-1.0, -1.0]]])  # [1, 2, 2]
        >>> fig = prefix_pred(nxt, source, [2], nxt, directions=[1])
        >>> fig.axes[0].get_title()
        'Clockwise · 2 given'
    """
    n_rows = check_int("n_rows", n_rows, minimum=1)
    n_cols = check_int("n_cols", n_cols, minimum=1)
    preds = _corners(predictions, "predictions", None)  # [N, T, 2]
    n_squares, n_next = preds.shape[:2]
    src = _corners(source, "source", n_squares)  # [N, S, 2]
    true_next = _corners(target, "target", n_squares)  # [N, T, 2]
    if true_next.shape[1] != n_next:
        raise ValueError(f"target must hold as many next corners as predictions ({n_next}), "
                         f"got shape {list(true_next.shape)}")
    lens = _check_lengths(lengths, n_squares, src.shape[1])
    dirs = direction_array(directions, n_squares)
    # The padding may hold anything (NaN included); only the given steps must be finite.
    given_mask = np.arange(src.shape[1]) < lens[:, None]  # [N, S]
    _check_finite(np.where(given_mask[:, :, None], src, 0.0), "source")
    _check_finite(preds, "predictions")
    _check_finite(true_next, "target")

    n = min(n_squares, n_rows * n_cols)
    if n < n_rows * n_cols:  # fewer squares than panels: no empty rows or columns
        n_cols = min(n_cols, n)
        n_rows = math.ceil(n / n_cols)
    limit = _panel_limit(np.concatenate([src[:n][given_mask[:n]].ravel(), true_next[:n].ravel(), preds[:n].ravel()]))
    fig = new_figure((_PANEL * n_cols, _PANEL * n_rows))
    axs = fig.subplots(n_rows, n_cols, squeeze=False)
    for i, ax in enumerate(axs.flat):
        if i < n:
            length = int(lens[i])
            title = _title(length, None if dirs is None else int(dirs[i]))
            _draw_prefix(ax, src[i, :length], true_next[i], preds[i], title, limit)
        else:
            ax.set_visible(False)
    handles = [
        Line2D([], [], marker="o", ms=10, color=_TRUE_COLOR, mfc="black", mec="black", label="given corners"),
        Line2D([], [], marker="o", ms=10, color=_TRUE_COLOR, mfc=_NEXT_FACE, mec=_NEXT_FACE,
               label="true next corners"),
        Line2D([], [], marker="o", ms=10, color=_PRED_COLOR, ls="--", mfc="none", mec=_PRED_COLOR,
               mew=2, label="predicted next corners"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return fig
