"""Learning-rate schedulers: which ones step per batch, which per epoch, and stepping them.

The book's classification is kept: ``CyclicLR``, ``OneCycleLR`` and
``CosineAnnealingWarmRestarts`` step after every batch (their schedules are
defined in iterations, or in fractional epochs); every other scheduler steps
once per epoch, and ``ReduceLROnPlateau`` is given that epoch's validation loss.
"""

from __future__ import annotations

from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import (
    CosineAnnealingWarmRestarts,
    CyclicLR,
    LRScheduler,
    OneCycleLR,
    ReduceLROnPlateau,
)

__all__ = ["BATCH_SCHEDULERS", "check_scheduler", "current_lrs", "is_batch_scheduler",
           "scheduler_name", "step_batch", "step_epoch"]

BATCH_SCHEDULERS = (CyclicLR, OneCycleLR, CosineAnnealingWarmRestarts)


def check_scheduler(scheduler: Any, optimizer: Optimizer) -> None:
    """Check that ``scheduler`` is a torch LR scheduler driving ``optimizer`` itself.

    Raises:
        TypeError: if ``scheduler`` is not a torch LR scheduler.
        ValueError: if it is bound to another optimizer (the book silently ignored it).
    """
    # ReduceLROnPlateau derives from LRScheduler in recent torch, not in older ones.
    if not isinstance(scheduler, (LRScheduler, ReduceLROnPlateau)):
        raise TypeError("scheduler must be a torch.optim.lr_scheduler scheduler, "
                        f"got {type(scheduler).__name__}")
    if getattr(scheduler, "optimizer", None) is not optimizer:
        raise ValueError(
            f"scheduler {type(scheduler).__name__} is bound to another optimizer than the trainer's; "
            "build it on trainer.optimizer"
        )


def is_batch_scheduler(scheduler: Any) -> bool:
    """True for the schedulers that step after every batch."""
    return isinstance(scheduler, BATCH_SCHEDULERS)


def current_lrs(optimizer: Optimizer) -> list[float]:
    """The learning rate of each parameter group, as Python floats."""
    return [float(group["lr"]) for group in optimizer.param_groups]


def step_epoch(scheduler: Any, val_loss: float | None) -> None:
    """Step a per-epoch scheduler; ``ReduceLROnPlateau`` watches the validation loss.

    Raises:
        ValueError: if ``ReduceLROnPlateau`` has no validation loss to watch.
    """
    if isinstance(scheduler, ReduceLROnPlateau):
        if val_loss is None:
            raise ValueError("ReduceLROnPlateau needs a validation loss: set a val_loader with set_loaders")
        scheduler.step(val_loss)
    else:
        scheduler.step()


def step_batch(scheduler: Any, epochs_done: float) -> None:
    """Step a per-batch scheduler after a batch.

    Args:
        scheduler: a scheduler from :data:`BATCH_SCHEDULERS`.
        epochs_done: epochs completed including this batch's fraction, e.g.
            ``2.25`` after the first of four batches of the third epoch;
            ``CosineAnnealingWarmRestarts`` counts its periods in these units.
    """
    if isinstance(scheduler, CosineAnnealingWarmRestarts):
        scheduler.step(epochs_done)
    else:
        scheduler.step()


def scheduler_name(scheduler: Any) -> str | None:
    """The class name stored in a checkpoint, to refuse loading one scheduler's state into another."""
    return None if scheduler is None else type(scheduler).__name__

