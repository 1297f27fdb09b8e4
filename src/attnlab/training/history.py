"""What a training run has done so far: the :class:`History`, and the record each epoch adds to it.

:func:`attnlab.training.fit` appends to a :class:`History`; a
:class:`~attnlab.training.Trainer` keeps one across ``train`` calls and writes
it into its checkpoints; callbacks receive each epoch's :data:`EpochRecord`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EpochRecord", "History"]

#: what ``on_epoch_end`` receives: ``epoch`` (1-based, counting earlier calls), ``loss``,
#: ``val_loss`` (None without a val_loader), ``lr`` (first group's, at the epoch's start),
#: ``seconds`` (train and validation time) and ``best`` (the validation loss improved).
EpochRecord = dict[str, Any]


@dataclass
class History:
    """What training has done so far; it survives :func:`~attnlab.training.fit` calls and checkpoints.

    Attributes:
        epochs: epochs trained, across calls.
        losses, val_losses: per-epoch mean losses over samples (``val_losses`` holds
            None for epochs run without a validation loader).
        learning_rates: one list of per-group learning rates per scheduler step.
        best_val_loss, best_epoch: the lowest validation loss and its (1-based) epoch.
        stopped_early: whether the last :func:`~attnlab.training.fit` call was stopped by a callback.
    """

    epochs: int = 0
    losses: list[float] = field(default_factory=list)
    val_losses: list[float | None] = field(default_factory=list)
    learning_rates: list[list[float]] = field(default_factory=list)
    best_val_loss: float | None = None
    best_epoch: int | None = None
    stopped_early: bool = False

    def improve(self, val_loss: float | None, min_delta: float) -> bool:
        """Record ``val_loss`` as the best if it is below the best by more than ``min_delta``; True if it was."""
        if val_loss is None or math.isnan(val_loss):
            return False
        if self.best_val_loss is None or val_loss < self.best_val_loss - min_delta:
            self.best_val_loss, self.best_epoch = val_loss, self.epochs
            return True
        return False
