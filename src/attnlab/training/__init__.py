"""Training: one loop for every experiment, the book's ``StepByStep`` trainer over it, checkpoints.

* :func:`fit` (:mod:`.loop`): the one training loop: train/validate epochs,
  schedulers, gradient clipping, a divergence check, and :class:`Callback` hooks;
  :func:`supervised` gives the book's ``loss_fn(model(x), y)`` on ``(x, y)`` batches;
  the :class:`History` it appends to; :func:`default_device`;
* :mod:`.callbacks`: what is optional: :class:`MetricsFile`, :class:`Checkpoint`,
  :class:`KeepBest`, :class:`EarlyStopping`, :class:`EpochProgress`,
  :class:`StepProgress`, :class:`TensorBoard`, :class:`OnEpochEnd`;
* :mod:`.checkpoint`: checkpoint files (atomic, plain data, read safely) and their checks;
  :func:`read_checkpoint`: a trainer checkpoint's contents, checked, without a
  trainer (for the CLI and for inspection);
* :mod:`.grouped`: many models of one shape trained as one batched computation (the
  optimizer and the step);
* :mod:`.book`: :class:`Trainer` (and :data:`StepByStep`, the same class under the book's
  name): the book's interface as a facade over :func:`fit`: loss history,
  learning-rate schedules, gradient clipping, hooks, TensorBoard, early
  stopping, best-checkpoint keeping, exact resume;
* :func:`lr_range_test` and :func:`make_lr_fn`: the learning-rate range test.

Imports run one way: training never imports :mod:`attnlab.models` or
:mod:`attnlab.data`, and imports :mod:`attnlab.plotting` and matplotlib only
inside the methods that draw. Every name is imported from its module the first
time it is asked for (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.training.book.trainer import StepByStep, Trainer
    from attnlab.training.callbacks import (
        Checkpoint,
        EarlyStopping,
        EpochProgress,
        KeepBest,
        MetricsFile,
        OnEpochEnd,
        StepProgress,
        TensorBoard,
    )
    from attnlab.training.checkpoint import read_checkpoint
    from attnlab.training.loop import Callback, History, Loop, default_device, fit, supervised
    from attnlab.training.lr_finder import lr_range_test, make_lr_fn

__all__ = ["Callback", "Checkpoint", "EarlyStopping", "EpochProgress", "History", "KeepBest", "Loop", "MetricsFile",
           "OnEpochEnd", "StepByStep", "StepProgress", "TensorBoard", "Trainer", "default_device", "fit",
           "lr_range_test", "make_lr_fn", "read_checkpoint", "supervised"]

#: each module of the package and the names it gives this one
_NAMES = {
    "loop": ("Callback", "History", "Loop", "default_device", "fit", "supervised"),
    "callbacks": ("Checkpoint", "EarlyStopping", "EpochProgress", "KeepBest", "MetricsFile", "OnEpochEnd",
                  "StepProgress", "TensorBoard"),
    "checkpoint": ("read_checkpoint",),
    "lr_finder": ("lr_range_test", "make_lr_fn"),
    "book.trainer": ("StepByStep", "Trainer"),
}
#: where each name lives, imported when first asked for
_HOMES = {name: module for module, names in _NAMES.items() for name in names}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
