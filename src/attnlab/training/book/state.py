"""The book trainer's state as plain data: what its checkpoint holds, and putting it back exactly.

:func:`trainer_state` is what :meth:`~attnlab.training.Trainer.state_dict` returns and a
checkpoint holds (its keys: :mod:`attnlab.training.checkpoint`); :func:`restore_state`
puts such a state back into a trainer's parts, everything checked
(:func:`attnlab.training.checkpoint.check_fits`) before anything changes, so that a
resumed run continues bitwise as if it had never stopped (on CPU). The parts are passed
explicitly: the model, optimizer, scheduler, history, clipping and the loaders whose
random streams are saved (``{"train": ..., "val": ...}``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from torch import nn
from torch.optim import Optimizer

from attnlab.training import checkpoint as ckpt
from attnlab.training import rng
from attnlab.training import schedulers as sched
from attnlab.training.clipping import GradientClipping
from attnlab.training.loop import History

__all__ = ["restore_state", "trainer_state"]

Loaders = Mapping[str, Iterable[Any] | None]


def trainer_state(*, model: nn.Module, optimizer: Optimizer, scheduler: Any, history: History,
                  clipping: GradientClipping, loaders: Loaders) -> dict[str, Any]:
    """Everything needed to resume exactly: the checkpoint's contents.

    Returns:
        A dict with the keys listed in :mod:`attnlab.training.checkpoint`; its
        tensors are the live ones (``torch.save`` copies them).
    """
    return {
        "format": ckpt.FORMAT,
        "version": ckpt.VERSION,
        "epoch": history.epochs,
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "optimizer_class": type(optimizer).__name__,
        "scheduler_class": sched.scheduler_name(scheduler),
        "scheduler_state_dict": None if scheduler is None else scheduler.state_dict(),
        "loss": [float(v) for v in history.losses],
        "val_loss": [None if v is None else float(v) for v in history.val_losses],
        "learning_rates": [[float(lr) for lr in lrs] for lrs in history.learning_rates],
        "best_val_loss": history.best_val_loss,
        "best_epoch": history.best_epoch,
        "clipping": clipping.config,
        "rng": rng.get_rng_state(loaders),
    }


def restore_state(state: dict[str, Any], *, model: nn.Module, optimizer: Optimizer, scheduler: Any,
                  history: History, clipping: GradientClipping, loaders: Loaders, restore_rng: bool,
                  where: str) -> None:
    """Put :func:`trainer_state` output back into the parts; everything is checked before anything changes.

    Args:
        state: a :func:`trainer_state` (a checkpoint's contents).
        model, optimizer, scheduler, history, clipping, loaders: the trainer's parts, changed in place.
        restore_rng: also restore the random streams (global torch and Python ones, and the loaders').
        where: how to name the state in errors (the checkpoint's path).

    Raises:
        ValueError: if the state is malformed or does not fit this model,
            optimizer or scheduler.
    """
    ckpt.check_fits(state, model=model, optimizer=optimizer, scheduler=scheduler, where=where)
    # The optimizer's load replaces its param groups: keys a scheduler set on them (initial_lr...) are
    # lost if the checkpoint was saved without that scheduler, so they are put back.
    scheduler_keys = [{k: v for k, v in group.items() if k in ckpt.SCHEDULER_GROUP_KEYS}
                      for group in optimizer.param_groups]
    model.load_state_dict(state["model_state_dict"])
    optimizer.load_state_dict(state["optimizer_state_dict"])
    for group, kept in zip(optimizer.param_groups, scheduler_keys, strict=True):
        for key, value in kept.items():
            group.setdefault(key, value)
    if scheduler is not None and state["scheduler_state_dict"] is not None:
        scheduler.load_state_dict(state["scheduler_state_dict"])
    elif scheduler is not None or state["scheduler_state_dict"] is not None:
        having = "the trainer has a scheduler but the checkpoint none" if scheduler is not None \
            else f"the checkpoint has a {state['scheduler_class']} scheduler but the trainer none"
        # stacklevel: this function, Trainer.load_state_dict, its caller (load_checkpoint), the user's call
        warnings.warn(f"{where}: {having}; the learning-rate schedule will not resume as saved",
                      RuntimeWarning, stacklevel=4)
    history.epochs = int(state["epoch"])
    history.losses = [float(v) for v in state["loss"]]
    history.val_losses = [None if v is None else float(v) for v in state["val_loss"]]
    history.learning_rates = [list(map(float, lrs)) for lrs in state["learning_rates"]]
    history.best_val_loss, history.best_epoch = state["best_val_loss"], state["best_epoch"]
    clipping.restore(model, state["clipping"])
    if restore_rng:
        rng.set_rng_state(state["rng"], loaders)
