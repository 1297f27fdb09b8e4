"""The trainer's set-up: its loaders, seed, optimizer, scheduler and gradient clipping (the book's setters).

:class:`TrainerSetup` holds the methods of :class:`~attnlab.training.Trainer`
that set what a run trains with, as the book's ``StepByStep`` named them
(``set_loaders``, ``set_seed``, ``set_optimizer``, ``set_lr_scheduler``,
``set_clip_grad_value``, ``set_clip_grad_norm``, ``set_clip_backprop``,
``remove_clip``). ``Trainer`` inherits them; the trainer's attributes they use
are declared here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from torch import nn
from torch.optim import Optimizer

from attnlab._validate import check_int
from attnlab.training import rng
from attnlab.training import schedulers as sched
from attnlab.training.clipping import GradientClipping

__all__ = ["TrainerSetup"]


class TrainerSetup:
    """The book's setters of :class:`~attnlab.training.Trainer`: loaders, seed, optimizer, scheduler, clipping."""

    model: nn.Module
    optimizer: Optimizer
    scheduler: Any
    is_batch_lr_scheduler: bool
    train_loader: Iterable[Any] | None
    val_loader: Iterable[Any] | None
    _clipping: GradientClipping
    _seeded: bool

    def set_loaders(self, train_loader: Iterable[Any], val_loader: Iterable[Any] | None = None) -> None:
        """Set the training loader and, optionally, the validation loader.

        Args:
            train_loader: iterable of ``(x, y)`` batches (usually a ``DataLoader``).
            val_loader: the same for validation, or None.

        Raises:
            TypeError: if a loader is not iterable.
        """
        for name, loader in (("train_loader", train_loader), ("val_loader", val_loader)):
            if loader is not None and not isinstance(loader, Iterable):
                raise TypeError(f"{name} must be an iterable of (x, y) batches, got {type(loader).__name__}")
        self.train_loader = train_loader
        self.val_loader = val_loader

    def set_seed(self, seed: int = 42) -> None:
        """Seed torch (CPU and CUDA), Python's ``random`` and the train loader's generator.

        numpy's global generator and cudnn's flags are left alone (the book set both).

        Raises:
            TypeError, ValueError: if ``seed`` is not a non-negative integer.
        """
        seed = check_int("seed", seed, minimum=0)
        rng.seed_all(seed, self.train_loader)
        self._seeded = True

    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Replace the optimizer; a scheduler bound to the old one is dropped, with a warning.

        Raises:
            TypeError: if ``optimizer`` is not a torch optimizer.
        """
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if self.scheduler is not None and self.scheduler.optimizer is not optimizer:
            warnings.warn("the learning-rate scheduler was bound to the old optimizer and is dropped; "
                          "set a new one with set_lr_scheduler", RuntimeWarning, stacklevel=2)
            self.set_lr_scheduler(None)
        self.optimizer = optimizer

    def set_lr_scheduler(self, scheduler: Any) -> None:
        """Set (or, with None, remove) the learning-rate scheduler.

        ``CyclicLR``, ``OneCycleLR`` and ``CosineAnnealingWarmRestarts`` step after
        every batch; the others after every epoch, ``ReduceLROnPlateau`` with the
        epoch's validation loss. Each step appends the learning rates to
        :attr:`learning_rates`.

        Raises:
            TypeError: if ``scheduler`` is not a torch LR scheduler.
            ValueError: if it is bound to another optimizer than the trainer's.
        """
        if scheduler is not None:
            sched.check_scheduler(scheduler, self.optimizer)
        self.scheduler = scheduler
        self.is_batch_lr_scheduler = sched.is_batch_scheduler(scheduler)

    # -- gradient clipping ------------------------------------------------------------

    @property
    def clipping(self) -> dict[str, Any] | None:
        """The clipping setting, e.g. ``{"mode": "norm", "max_norm": 1.0, "norm_type": 2.0}``, or None."""
        return self._clipping.config

    def set_clip_grad_value(self, clip_value: float) -> None:
        """Clamp gradient elements to ``[-clip_value, clip_value]`` after backward (replaces any clipping).

        Raises:
            TypeError, ValueError: if ``clip_value`` is not a positive finite number.
        """
        self._clipping.set_value(clip_value)

    def set_clip_grad_norm(self, max_norm: float, norm_type: float = 2) -> None:
        """Rescale gradients to a joint ``norm_type``-norm of at most ``max_norm`` (replaces any clipping).

        Raises:
            TypeError, ValueError: if ``max_norm`` is not positive and finite or
                ``norm_type`` not positive (``float("inf")`` is allowed).
        """
        self._clipping.set_norm(max_norm, norm_type)

    def set_clip_backprop(self, clip_value: float) -> None:
        """Clamp each gradient to ``[-clip_value, clip_value]`` during backward (replaces any clipping).

        Hooks on every trainable parameter do it, so the clamp happens before
        gradients from several uses of a parameter are summed.

        Raises:
            TypeError, ValueError: if ``clip_value`` is not a positive finite number.
        """
        self._clipping.set_backprop(self.model, clip_value)

    def remove_clip(self) -> None:
        """Stop clipping gradients (removing backprop hooks, if any)."""
        self._clipping.remove()
