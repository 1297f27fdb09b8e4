"""Figures of a training run: the loss curves, and a model's predicted squares.

* :func:`plot_losses`: training and validation loss per epoch (the book's
  ``StepByStep.plot_losses``, as a function of the two lists);
* :func:`sequence_pred`: one panel per noisy square, its true corners and the
  two corners a model predicts from the first two (the book's
  ``plots/chapter9.py`` figure of the same name, used by the positional-encoding
  lab and the attention lab).

The names and positional arguments are the book's, so the labs' call
``sequence_pred(sbs, full_test, test_directions)`` works with attnlab's trainer.
Fixed relative to the book:

* ``sequence_pred`` also takes a model, any callable, or the predictions
  themselves; it runs the model once on all the drawn squares, without grad,
  and restores every module's train/eval mode afterwards (the book left the
  model in eval mode); it draws fewer squares than panels (the rest are hidden)
  and tells the predicted corners apart from the true ones by colour;
* ``plot_losses`` leaves out missing validation losses (the book drew a run
  without validation as a line of ``None``), puts epoch ``k``'s loss at ``x = k``
  (from 1), and changes no global style (the book set ``fivethirtyeight`` on import).

Shape notation: ``N`` squares, ``S = 2`` given and ``T = 2`` predicted corners,
``F = 2`` coordinates.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from torch import nn

from attnlab._validate import check_int
from attnlab.plotting._common import axes_or_new, new_figure, root_figure

__all__ = ["plot_losses", "sequence_pred"]

_PANEL = 4.0  # inches per square, as the book
_LIMIT = 1.45  # the book's axis limits: the unit square plus noise and the corner dots
_CORNERS, _GIVEN = 4, 2
_TRUE_COLOR = "0.45"  # grey edges
_PRED_COLOR = "tab:red"
_LABEL_GAP = 19.0  # points from a predicted corner to its number


# -- sequence_pred -----------------------------------------------------------------


def _as_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().double().numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a tensor or array of numbers, got {type(value).__name__}") from exc


def _check_squares(X: Any) -> np.ndarray:
    """``X`` as float64 ``[N, 4, 2]``."""
    squares = _as_array(X, "X")
    if squares.ndim != 3 or squares.shape[0] == 0 or squares.shape[1:] != (_CORNERS, 2):
        raise ValueError(f"X must be the full squares [N, 4, 2] (N >= 1), got shape {list(squares.shape)}")
    return squares


def _check_directions(directions: Any, n: int) -> np.ndarray | None:
    if directions is None:
        return None
    values = _as_array(directions, "directions")
    if values.ndim != 1 or values.shape[0] != n:
        raise ValueError(f"directions must hold one direction per square ([{n}]), "
                         f"got shape {list(values.shape)}")
    if not np.isin(values, (0, 1)).all():
        raise ValueError(f"directions must be 0 (counter-clockwise) or 1 (clockwise), got "
                         f"{sorted(set(values.tolist()) - {0.0, 1.0})[:5]}")
    return values.astype(np.int64)


def _model_device(model: nn.Module) -> torch.device | None:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return None


def _model_dtype(model: nn.Module) -> torch.dtype:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


def _run(predict: Any, source: np.ndarray, device: Any) -> Any:
    """``predict(source)`` without grad; an ``nn.Module`` in eval mode, every module's mode restored.

    A module runs through :func:`attnlab.models.inference.run_eval`: safe from several
    threads at once, and attnlab's models draw no random number there.
    """
    if isinstance(predict, nn.Module):
        from attnlab.models.inference import run_eval  # plotting is a leaf: models are imported when one runs

        device = device if device is not None else _model_device(predict)
        return run_eval(predict, torch.as_tensor(source, dtype=_model_dtype(predict), device=device))  # [n, S, F]
    inputs = torch.as_tensor(source, dtype=torch.float32, device=device)
    with torch.no_grad():
        return predict(inputs)


def _predictions(model_or_predictions: Any, squares: np.ndarray, n: int, device: Any) -> np.ndarray:
    """The predicted corners 3 and 4 of the first ``n`` squares, float64 ``[n, T, 2]``."""
    obj = model_or_predictions
    name = "model_or_predictions"
    if isinstance(obj, (torch.Tensor, np.ndarray, list, tuple)):
        preds = _as_array(obj, name)
        if preds.ndim != 3 or preds.shape[0] != squares.shape[0] or preds.shape[1:] != (2, 2):
            raise ValueError(f"{name}: predictions must be [N, 2, 2] with N = {squares.shape[0]} "
                             f"(the squares in X), got shape {list(preds.shape)}")
        return preds[:n]
    if not isinstance(obj, nn.Module) and hasattr(obj, "model"):  # the book's StepByStep, attnlab's Trainer
        if device is None and _model_device(obj.model) is None:
            device = getattr(obj, "device", None)
        obj = obj.model
    if not callable(obj):
        raise TypeError(f"{name} must be a model (callable or nn.Module), an object with .model (a trainer), "
                        f"or predictions [N, 2, 2]; got {type(obj).__name__}")
    out = _run(obj, squares[:n, :_GIVEN], device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name}: the model must return a tensor [B, 2, 2], got {type(out).__name__}")
    preds = out.detach().cpu().double().numpy()
    if preds.shape != (n, 2, 2):
        raise ValueError(f"{name}: the model returned shape {list(preds.shape)} for sources "
                         f"[{n}, 2, 2]; expected the 2 next corners [{n}, 2, 2]")
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


def sequence_pred(
    model_or_predictions: Any,
    X: Any,
    directions: Any | None = None,
    n_rows: int = 2,
    n_cols: int = 5,
    *,
    device: torch.device | str | None = None,
) -> Figure:
    """A model's predicted corners against the true squares, one panel per square.

    Each panel shows a true square, its corners numbered 1 to 4 in the order
    they are walked (white on black dots, grey edges), and the corners 3 and 4
    predicted from corners 1 and 2 (red rings), joined by dashed edges
    2 -> 3 -> 4 -> 1. A good prediction lies on the true corners.

    With a model, it runs once on the first two corners of the drawn squares,
    ``X[:n, :2]``, on the model's device, without grad; an ``nn.Module`` runs in
    eval mode, and every submodule's train/eval mode is restored afterwards (after
    the last call, when several threads draw with one model at once). The
    attention lab's GRU models predict without drawing their teacher-forcing coin.

    Args:
        model_or_predictions: what to draw as predictions: an ``nn.Module`` or
            any callable ``[B, 2, 2] -> [B, 2, 2]``; an object with ``.model``
            (the book passes its ``StepByStep``; attnlab's ``Trainer`` works too);
            or the predictions themselves, ``[N, 2, 2]`` (tensor or array).
        X: the full squares ``[N, 4, 2]``, e.g. ``make_loaders().full_test``.
        directions: ``[N]``, 1 = clockwise, 0 = counter-clockwise; the panels are
            titled ``Clockwise`` / ``Counter-Clockwise``, untitled when None.
        n_rows: rows of panels.
        n_cols: panels per row. The first ``min(N, n_rows * n_cols)`` squares
            are drawn; with fewer squares than panels, the grid shrinks to
            ``min(n_cols, N)`` columns and as many rows as needed, and the
            panels left over in the last row are hidden.
        device: where to run the model; by default the device of its parameters
            (else the trainer's ``.device``, else the CPU).

    Returns:
        The figure, ``4 x 4`` inches per panel (the book's 20x8 inches for 2x5),
        with a legend below the panels. The axes span the book's ``[-1.45, 1.45]``,
        widened alike in every panel when a corner or prediction falls outside.

    Raises:
        TypeError: if ``model_or_predictions`` is none of the above, or the model
            does not return a tensor.
        ValueError: naming the argument, if ``X`` is not ``[N, 4, 2]``, the
            predictions (given or returned) are not ``[N, 2, 2]``, ``directions``
            is not ``N`` zeros and ones, or ``n_rows``/``n_cols`` is below 1.
    """
    n_rows = check_int("n_rows", n_rows, minimum=1)
    n_cols = check_int("n_cols", n_cols, minimum=1)
    squares = _check_squares(X)
    dirs = _check_directions(directions, squares.shape[0])
    n = min(squares.shape[0], n_rows * n_cols)
    preds = _predictions(model_or_predictions, squares, n, device)  # [n, 2, 2]

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


# -- plot_losses -------------------------------------------------------------------


def _series(values: Any, name: str) -> np.ndarray:
    """A list/array/tensor of losses as float64 ``[n]``, None as NaN."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    if isinstance(values, (str, bytes, numbers.Number)) or not hasattr(values, "__len__"):
        raise TypeError(f"{name} must be a list or 1-D array of losses, got {type(values).__name__}")
    try:
        arr = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must hold numbers (or None), got {list(values)[:5]!r}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one loss per epoch), got shape {list(arr.shape)}")
    return arr


def plot_losses(
    losses: Any,
    val_losses: Any | None = None,
    *,
    ax: Axes | None = None,
    log: bool = True,
) -> Figure:
    """Training and validation loss per epoch (the book's ``StepByStep.plot_losses``).

    Epoch ``k``'s losses are drawn at ``x = k``, counting from 1: 'Training Loss'
    in blue, 'Validation Loss' in red, on a log scale by default. Missing
    validation losses (None or NaN, e.g. epochs without validation) are left out
    rather than drawn; NaN training losses (a run that diverged) leave gaps.

    Args:
        losses: the training loss of each epoch (list, array or tensor ``[E]``).
        val_losses: the validation losses ``[E]``, None entries allowed; no
            validation curve when None or when no entry is a number.
        ax: axes to draw into; a new 10x4-inch figure when None.
        log: log-scaled y axis (the book's); the losses must then be positive.

    Returns:
        The figure holding the axes.

    Raises:
        TypeError: if a loss list is not a sequence of numbers, ``log`` not a
            bool, or ``ax`` not an Axes.
        ValueError: naming the argument, if ``losses`` is empty, ``val_losses``
            has a different length, or ``log`` is set and a loss is not positive.
    """
    train = _series(losses, "losses")
    if train.size == 0:
        raise ValueError("losses is empty; need the loss of at least one epoch")
    val = None if val_losses is None else _series(val_losses, "val_losses")
    if val is not None and val.size != train.size:
        raise ValueError(f"val_losses has {val.size} entries but losses has {train.size}: one per epoch")
    if not isinstance(log, (bool, np.bool_)):
        raise TypeError(f"log must be a bool, got {log!r}")
    if log:
        for name, arr in (("losses", train), ("val_losses", val)):
            if arr is not None and (arr[np.isfinite(arr)] <= 0).any():
                raise ValueError(f"{name} has a loss <= 0, which a log scale cannot show; pass log=False")

    ax = axes_or_new(ax, (10.0, 4.0))
    epochs = np.arange(1, train.size + 1)
    marker = "o" if train.size <= 30 else None  # a few epochs: show where the values are
    ax.plot(epochs, train, color="b", marker=marker, ms=3, label="Training Loss")
    if val is not None and np.isfinite(val).any():
        keep = np.isfinite(val)
        ax.plot(epochs[keep], val[keep], color="r", marker=marker, ms=3, label="Validation Loss")
    if log:
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel("Epochs")
    ax.set_ylabel("Loss")
    ax.legend()
    return root_figure(ax)
