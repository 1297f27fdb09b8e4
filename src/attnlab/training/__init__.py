"""Training: the book's ``StepByStep`` trainer (as :class:`Trainer`), checkpoints, the LR range test.

* :class:`Trainer` (and :data:`StepByStep`, the same class under the book's
  name): trains any ``nn.Module`` on ``(x, y)`` batches, keeps the loss
  history, schedules learning rates, clips gradients, hooks layers, logs to
  TensorBoard, stops early, keeps the best checkpoint and reports each epoch
  to a callback;
* :func:`lr_range_test` and :func:`make_lr_fn`: the learning-rate range test;
* :func:`read_checkpoint`: a trainer checkpoint's contents, checked, without a
  trainer (for the CLI and for inspection).

Imports run one way: training never imports :mod:`attnlab.models` or
:mod:`attnlab.data`, and imports :mod:`attnlab.plotting` and matplotlib only
inside the methods that draw.
"""

from attnlab.training.checkpoint import read_checkpoint
from attnlab.training.lr_finder import lr_range_test, make_lr_fn
from attnlab.training.trainer import StepByStep, Trainer, default_device

__all__ = ["StepByStep", "Trainer", "default_device", "lr_range_test", "make_lr_fn", "read_checkpoint"]
