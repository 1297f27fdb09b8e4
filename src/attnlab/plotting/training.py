"""Figures of a training run: the loss curves.

* :func:`plot_losses`: training and validation loss per epoch (the book's
  ``StepByStep.plot_losses``, as a function of the two lists).

Fixed relative to the book: missing validation losses are left out (the book
drew a run without validation as a line of ``None``), epoch ``k``'s loss is put
at ``x = k`` (from 1), and no global style changes (the book set
``fivethirtyeight`` on import).

Shape notation: ``E`` epochs.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from attnlab.plotting._common import axes_or_new, root_figure

__all__ = ["plot_losses"]


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
