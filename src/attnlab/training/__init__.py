"""Training: one loop for every experiment, the book's ``StepByStep`` trainer over it, checkpoints.

* :func:`fit` (:mod:`.loop`): the one training loop: train/validate epochs,
  schedulers, gradient clipping, a divergence check, and :class:`Callback` hooks;
  :func:`supervised` gives the book's ``loss_fn(model(x), y)`` on ``(x, y)`` batches;
* :mod:`.callbacks`: what is optional: :class:`MetricsFile`, :class:`Checkpoint`,
  :class:`KeepBest`, :class:`EarlyStopping`, :class:`EpochProgress`,
  :class:`StepProgress`, :class:`TensorBoard`, :class:`OnEpochEnd`;
* :class:`Trainer` (and :data:`StepByStep`, the same class under the book's
  name): the book's interface as a facade over :func:`fit`: loss history,
  learning-rate schedules, gradient clipping, hooks, TensorBoard, early
  stopping, best-checkpoint keeping, exact resume;
* :func:`lr_range_test` and :func:`make_lr_fn`: the learning-rate range test;
* :func:`read_checkpoint`: a trainer checkpoint's contents, checked, without a
  trainer (for the CLI and for inspection).

Imports run one way: training never imports :mod:`attnlab.models` or
:mod:`attnlab.data`, and imports :mod:`attnlab.plotting` and matplotlib only
inside the methods that draw.
"""

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
from attnlab.training.loop import Callback, History, Loop, fit, supervised
from attnlab.training.lr_finder import lr_range_test, make_lr_fn
from attnlab.training.trainer import StepByStep, Trainer, default_device

__all__ = [
    "Callback",
    "Checkpoint",
    "EarlyStopping",
    "EpochProgress",
    "History",
    "KeepBest",
    "Loop",
    "MetricsFile",
    "OnEpochEnd",
    "StepByStep",
    "StepProgress",
    "TensorBoard",
    "Trainer",
    "default_device",
    "fit",
    "lr_range_test",
    "make_lr_fn",
    "read_checkpoint",
    "supervised",
]
