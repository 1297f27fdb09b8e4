"""The trainer's checkpoints: its state as plain data, written, read, checked and restored.

:class:`TrainerCheckpoints` holds the methods of :class:`~attnlab.training.Trainer`
that save and resume a run: ``state_dict``, ``load_state_dict``,
``save_checkpoint``, ``load_checkpoint``. The file format, atomic writing and
reading are :mod:`.checkpoint`'s; the checks against a model and optimizer
:mod:`.checkpoint_checks`'; the random streams :mod:`.rng`'s. ``Trainer``
inherits these methods; the trainer's attributes they use are declared here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from attnlab.training import checkpoint as ckpt
from attnlab.training import checkpoint_checks as checks
from attnlab.training import rng
from attnlab.training import schedulers as sched
from attnlab.training.clipping import GradientClipping
from attnlab.training.history import History

__all__ = ["TrainerCheckpoints"]


class TrainerCheckpoints:
    """The checkpoint methods of :class:`~attnlab.training.Trainer`: exact resume, on CPU bit for bit."""

    model: nn.Module
    optimizer: Optimizer
    scheduler: Any
    device: torch.device
    train_loader: Iterable[Any] | None
    val_loader: Iterable[Any] | None
    history: History
    _clipping: GradientClipping
    _seeded: bool

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: the checkpoint's contents.

        Returns:
            A dict with the keys listed in :mod:`attnlab.training.checkpoint`; its
            tensors are the live ones (``torch.save`` copies them).
        """
        return {
            "format": ckpt.FORMAT,
            "version": ckpt.VERSION,
            "epoch": self.history.epochs,
            "model_state_dict": self.model.state_dict(),
            "optimizer_state_dict": self.optimizer.state_dict(),
            "optimizer_class": type(self.optimizer).__name__,
            "scheduler_class": sched.scheduler_name(self.scheduler),
            "scheduler_state_dict": None if self.scheduler is None else self.scheduler.state_dict(),
            "loss": [float(v) for v in self.history.losses],
            "val_loss": [None if v is None else float(v) for v in self.history.val_losses],
            "learning_rates": [[float(lr) for lr in lrs] for lrs in self.history.learning_rates],
            "best_val_loss": self.history.best_val_loss,
            "best_epoch": self.history.best_epoch,
            "clipping": self._clipping.config,
            "rng": rng.get_rng_state({"train": self.train_loader, "val": self.val_loader}),
        }

    def load_state_dict(self, state: dict[str, Any], *, restore_rng: bool = True,
                        where: str = "state") -> None:
        """Restore :meth:`state_dict` output; everything is checked before anything changes.

        Args:
            state: a :meth:`state_dict` (a checkpoint's contents).
            restore_rng: also restore the random streams (see :meth:`load_checkpoint`).
            where: how to name the state in errors (the checkpoint's path).

        Raises:
            ValueError: if the state is malformed or does not fit this model,
                optimizer or scheduler.
        """
        checks.check_fits(state, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                          where=where)
        # The optimizer's load replaces its param groups: keys a scheduler set on them (initial_lr...) are
        # lost if the checkpoint was saved without that scheduler, so they are put back.
        scheduler_keys = [{k: v for k, v in group.items() if k in checks.SCHEDULER_GROUP_KEYS}
                          for group in self.optimizer.param_groups]
        self.model.load_state_dict(state["model_state_dict"])
        self.optimizer.load_state_dict(state["optimizer_state_dict"])
        for group, kept in zip(self.optimizer.param_groups, scheduler_keys, strict=True):
            for key, value in kept.items():
                group.setdefault(key, value)
        if self.scheduler is not None and state["scheduler_state_dict"] is not None:
            self.scheduler.load_state_dict(state["scheduler_state_dict"])
        elif self.scheduler is not None or state["scheduler_state_dict"] is not None:
            having = "the trainer has a scheduler but the checkpoint none" if self.scheduler is not None \
                else f"the checkpoint has a {state['scheduler_class']} scheduler but the trainer none"
            warnings.warn(f"{where}: {having}; the learning-rate schedule will not resume as saved",
                          RuntimeWarning, stacklevel=3)
        history = self.history
        history.epochs = int(state["epoch"])
        history.losses = [float(v) for v in state["loss"]]
        history.val_losses = [None if v is None else float(v) for v in state["val_loss"]]
        history.learning_rates = [list(map(float, lrs)) for lrs in state["learning_rates"]]
        history.best_val_loss, history.best_epoch = state["best_val_loss"], state["best_epoch"]
        self._clipping.restore(self.model, state["clipping"])
        if restore_rng:
            rng.set_rng_state(state["rng"], {"train": self.train_loader, "val": self.val_loader})
        self._seeded = True  # a resumed run must not be re-seeded by its first train() call

    def save_checkpoint(self, filename: str | os.PathLike[str]) -> Path:
        """Write a checkpoint atomically (see :mod:`attnlab.training.checkpoint` for its keys).

        Returns:
            The path written.

        Raises:
            ValueError: if the folder is missing or not writable.
            OSError: if writing fails; a previous file at ``filename`` stays whole.
        """
        return ckpt.write_checkpoint(filename, self.state_dict())

    def load_checkpoint(self, filename: str | os.PathLike[str], *, restore_rng: bool = True) -> None:
        """Resume from a checkpoint: model, optimizer, scheduler, histories, clipping, random streams.

        Tensors are mapped to this trainer's device; the model's train/eval mode is
        left as it is (the book forced train mode). Set the loaders (and scheduler)
        first so their state is restored too; afterwards ``train`` continues exactly
        where the saved run stopped and never re-seeds by itself.

        Args:
            filename: the checkpoint file.
            restore_rng: also restore the random streams (global torch and Python
                ones, and the loaders' generators); False to load for inference only.

        Raises:
            FileNotFoundError: if ``filename`` does not exist.
            ValueError: if it is unreadable, not a regular file, not an attnlab checkpoint,
                larger than this model and optimizer can need, or does not fit this
                model (naming the mismatched keys), optimizer or scheduler (naming the
                entry: every state tensor's shape and dtype are checked before loading).
        """
        # Bounded by what this model and optimizer can need: a bomb is refused before it is decompressed.
        state = ckpt.read_checkpoint(filename, map_location=self.device,
                                     max_bytes=checks.max_checkpoint_bytes(self.model, self.optimizer))
        self.load_state_dict(state, restore_rng=restore_rng, where=str(filename))
