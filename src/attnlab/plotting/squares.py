"""The squares figures: a model's predicted corners against the true squares (the book's ``sequence_pred``).

* :func:`plot_sequence_pred`: one panel per noisy square, its true corners and
  the two corners predicted from the first two (the book's ``plots/chapter9.py``
  figure ``sequence_pred``, used by the positional-encoding lab and the attention
  lab), drawn from the predictions;
* the pieces a panel is made of, shared with :mod:`attnlab.plotting.prefixes`
  (the variable-length squares).

It takes data only. The book's ``sequence_pred(sbs, full_test, test_directions)``,
which runs the model, is :func:`attnlab.compat.chapter9.sequence_pred`. Fixed
relative to the book: fewer squares than panels are drawn (the rest are hidden),
and the predicted corners are told apart from the true ones by colour.

Shape notation: ``N`` squares, ``S = 2`` given and ``T = 2`` predicted corners,
``F = 2`` coordinates.
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
from attnlab.plotting._common import new_figure

__all__ = ["direction_array", "float64_array", "plot_sequence_pred", "prediction_array", "square_array"]

_PANEL = 4.0  # inches per square, as the book
_LIMIT = 1.45  # the book's axis limits: the unit square plus noise and the corner dots
_CORNERS = 4
_TRUE_COLOR = "0.45"  # grey edges
_PRED_COLOR = "tab:red"
_LABEL_GAP = 19.0  # points from a predicted corner to its number


def float64_array(value: Any, name: str) -> np.ndarray:
    """A tensor or array of numbers as float64 numpy, any shape.

    Raises:
        TypeError: naming ``name``, if ``value`` does not hold numbers.
    """
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().double().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a tensor or array of numbers, got {type(value).__name__}") from exc


def square_array(X: Any) -> np.ndarray:
    """``X`` as float64 ``[N, 4, 2]``, the full squares.

    Raises:
        TypeError: if ``X`` does not hold numbers.
        ValueError: naming ``X``, if it is not ``[N, 4, 2]`` with ``N >= 1``.
    """
    squares = float64_array(X, "X")
    if squares.ndim != 3 or squares.shape[0] == 0 or squares.shape[1:] != (_CORNERS, 2):
        raise ValueError(f"X must be the full squares [N, 4, 2] (N >= 1), got shape {list(squares.shape)}")
    return squares


def direction_array(directions: Any, n: int) -> np.ndarray | None:
    """``directions`` as int64 ``[n]``, 1 = clockwise, 0 = counter-clockwise; None stays None.

    Raises:
        TypeError: if ``directions`` does not hold numbers.
        ValueError: naming ``directions``, if it is not ``n`` zeros and ones.
    """
    if directions is None:
        return None
    values = float64_array(directions, "directions")
    if values.ndim != 1 or values.shape[0] != n:
        raise ValueError(f"directions must hold one direction per square ([{n}]), "
                         f"got shape {list(values.shape)}")
    if not np.isin(values, (0, 1)).all():
        raise ValueError(f"directions must be 0 (counter-clockwise) or 1 (clockwise), got "
                         f"{sorted(set(values.tolist()) - {0.0, 1.0})[:5]}")
    return values.astype(np.int64)


def prediction_array(predictions: Any, n: int, name: str) -> np.ndarray:
    """``predictions`` as float64 ``[n, 2, 2]``: the predicted corners 3 and 4 of ``n`` squares.

    Raises:
        TypeError: naming ``name``, if ``predictions`` does not hold numbers.
        ValueError: naming ``name``, if it is not ``[n, 2, 2]``.
    """
    preds = float64_array(predictions, name)
    if preds.ndim != 3 or preds.shape[0] != n or preds.shape[1:] != (2, 2):
        raise ValueError(f"{name} must be the predictions [N, 2, 2] with N = {n} "
                         f"(the squares in X), got shape {list(preds.shape)}")
    return preds


def _true_corners(ax: Axes, corners: np.ndarray, *, first: int = 1, face: str = "black") -> None:
    """Big dots ``[K, 2]`` (black by default) numbered ``first`` to ``first + K - 1`` in white."""
    ax.scatter(corners[:, 0], corners[:, 1], s=400, c=face, zorder=3, linewidths=0, clip_on=False)
    for k, (x, y) in enumerate(corners, start=first):
        ax.text(x, y, str(k), color="white", fontsize=12, fontweight="bold",
                ha="center", va="center", zorder=4)


def _predicted_corners(ax: Axes, pred: np.ndarray, limit: float, *, first: int = 3) -> None:
    """Red rings ``[T, 2]`` numbered from outside (3 and 4 by default), so a true corner under a ring stays readable.

    The numbers sit away from the square's centre, the first turned one way and
    the last the other, so they stay apart even when the predictions fall on the
    same spot; a number that would leave the axes is mirrored back inside.
    """
    ax.scatter(pred[:, 0], pred[:, 1], s=400, facecolors="none", edgecolors=_PRED_COLOR,
               linewidths=2.5, zorder=5, clip_on=False)
    # Data units per point, roughly: a panel's axes are about 0.8 of its 4 inches.
    per_point = 2 * limit / (0.8 * _PANEL * 72)
    turns = np.linspace(0.5, -0.5, len(pred)) if len(pred) > 1 else np.zeros(1)  # radians, (0.5, -0.5) for two
    for k, (x, y), turn in zip(range(first, first + len(pred)), pred, turns, strict=True):
        angle = np.arctan2(y, x) if np.hypot(x, y) > 0.2 else np.pi / 2  # outwards; up near the centre
        dx, dy = _LABEL_GAP * np.cos(angle + turn), _LABEL_GAP * np.sin(angle + turn)
        reach = _LABEL_GAP + 6  # the centre's offset plus half a digit, in points
        if abs(x + np.sign(dx) * reach * per_point) > limit:
            dx = -dx
        if abs(y + np.sign(dy) * reach * per_point) > limit:
            dy = -dy
        ax.annotate(str(k), (x, y), xytext=(dx, dy), textcoords="offset points", color=_PRED_COLOR,
                    fontsize=11, fontweight="bold", ha="center", va="center", zorder=6)


def _panel_limit(points: np.ndarray) -> float:
    """The book's limits, widened (alike in every panel) if a drawn point would sit on or past the edge."""
    reach = float(np.abs(points[np.isfinite(points)]).max())
    return _LIMIT if reach <= _LIMIT - 0.05 else math.ceil((reach + 0.25) * 10) / 10


def _draw_square(
    ax: Axes, square: np.ndarray, pred: np.ndarray, direction: int | None, limit: float
) -> None:
    """The true square (grey edges, black corners 1-4) and the predicted corners 3 and 4 (dashed)."""
    loop = square[[0, 1, 2, 3, 0]]  # 1 -> 2 -> 3 -> 4 -> 1
    ax.plot(loop[:, 0], loop[:, 1], color=_TRUE_COLOR, lw=2, alpha=0.5, solid_capstyle="round", zorder=1)
    path = np.concatenate([square[1:2], pred, square[0:1]])  # 2 -> 3' -> 4' -> 1
    ax.plot(path[:, 0], path[:, 1], color=_PRED_COLOR, lw=2, ls="--", alpha=0.8, zorder=2)
    _true_corners(ax, square)
    _predicted_corners(ax, pred, limit)
    if direction is not None:
        ax.set_title("Clockwise" if direction == 1 else "Counter-Clockwise")
    _style_panel(ax, limit)


def _style_panel(ax: Axes, limit: float) -> None:
    """Square axes ``[-limit, limit]`` in both directions, ticks at -1, 0, 1 while they fit, labelled x0 and x1."""
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    if limit < 2.5:  # else matplotlib's ticks
        ax.set_xticks([-1, 0, 1])
        ax.set_yticks([-1, 0, 1])
    ax.set_xlabel("$x_0$")
    ax.set_ylabel("$x_1$", rotation=0, labelpad=8)


def plot_sequence_pred(
    predictions: Any,
    X: Any,
    directions: Any | None = None,
    n_rows: int = 2,
    n_cols: int = 5,
) -> Figure:
    """Predicted corners against the true squares, one panel per square.

    Each panel shows a true square, its corners numbered 1 to 4 in the order
    they are walked (white on black dots, grey edges), and the corners 3 and 4
    predicted from corners 1 and 2 (red rings), joined by dashed edges
    2 -> 3 -> 4 -> 1. A good prediction lies on the true corners.

    It takes the predictions; to draw a model's, run it first (the labs do), or
    call the book's :func:`attnlab.compat.chapter9.sequence_pred`, which runs the
    model and calls this function.

    Args:
        predictions: the predicted corners 3 and 4, ``[N, 2, 2]`` (tensor or array),
            one pair per square of ``X``.
        X: the full squares ``[N, 4, 2]``, e.g. ``make_loaders().full_test``.
        directions: ``[N]``, 1 = clockwise, 0 = counter-clockwise; the panels are
            titled ``Clockwise`` / ``Counter-Clockwise``, untitled when None.
        n_rows: rows of panels.
        n_cols: panels per row. The first ``min(N, n_rows * n_cols)`` squares
            are drawn; with fewer squares than panels, the grid shrinks to
            ``min(n_cols, N)`` columns and as many rows as needed, and the
            panels left over in the last row are hidden.

    Returns:
        The figure, ``4 x 4`` inches per panel (the book's 20x8 inches for 2x5),
        with a legend below the panels. The axes span the book's ``[-1.45, 1.45]``,
        widened alike in every panel when a corner or prediction falls outside.

    Raises:
        TypeError: if ``predictions`` or ``X`` does not hold numbers.
        ValueError: naming the argument, if ``X`` is not ``[N, 4, 2]``, the
            predictions are not ``[N, 2, 2]``, ``directions`` is not ``N`` zeros
            and ones, or ``n_rows``/``n_cols`` is below 1.
    """
    n_rows = check_int("n_rows", n_rows, minimum=1)
    n_cols = check_int("n_cols", n_cols, minimum=1)
    squares = square_array(X)
    dirs = direction_array(directions, squares.shape[0])
    n = min(squares.shape[0], n_rows * n_cols)
    preds = prediction_array(predictions, squares.shape[0], "predictions")[:n]  # [n, 2, 2]

    if n < n_rows * n_cols:  # fewer squares than panels: no empty rows or columns
        n_cols = min(n_cols, n)
        n_rows = math.ceil(n / n_cols)
    limit = _panel_limit(np.concatenate([squares[:n].ravel(), preds.ravel()]))
    fig = new_figure((_PANEL * n_cols, _PANEL * n_rows))
    axs = fig.subplots(n_rows, n_cols, squeeze=False)
    for i, ax in enumerate(axs.flat):
        if i < n:
            _draw_square(ax, squares[i], preds[i], None if dirs is None else int(dirs[i]), limit)
        else:
            ax.set_visible(False)
    handles = [
        Line2D([], [], marker="o", ms=10, color=_TRUE_COLOR, mfc="black", mec="black",
               label="true corners"),
        Line2D([], [], marker="o", ms=10, color=_PRED_COLOR, ls="--", mfc="none", mec=_PRED_COLOR,
               mew=2, label="predicted corners 3 and 4"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)
    return fig
