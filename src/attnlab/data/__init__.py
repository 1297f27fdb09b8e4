"""The data the models are taught on: the labs' noisy squares, padded batches, loaders.

* :mod:`attnlab.data.squares`: :func:`generate_sequences`, the book's generator
  number for number (without touching numpy's global random state), and
  :func:`squares_tensor`, which stacks its output into ``[N, 4, 2]``;
* :mod:`attnlab.data.padding`: :func:`pad_sequences` for sequences of different
  lengths (right padding, mask True = real step) and :func:`collate_padded`, a
  DataLoader ``collate_fn`` for such ``(source, target)`` pairs;
* :mod:`attnlab.data.square_prefixes`: :func:`generate_prefixes` and
  :class:`SquarePrefixes`, the book's variable-length squares (2 to 4 corners,
  padded and masked) and the two corners that follow each;
* :mod:`attnlab.data.loaders`: :class:`SquareSequences` (a Dataset) and
  :func:`make_loaders`, the labs' train/test loaders with a real test set and
  a shuffle of their own.

This package never imports :mod:`attnlab.models`: a model is told its sizes
(``n_features=2``, ``input_len``, ``target_len``) by its caller.
"""

from attnlab.data.layouts import EMPTY, decoder_only_batch, encoder_only_batch
from attnlab.data.loaders import SquareLoaders, SquareSequences, make_loaders
from attnlab.data.metrics import mean_squared_error, sequence_accuracy, token_accuracy
from attnlab.data.padding import PaddedBatch, collate_padded, pad_sequences
from attnlab.data.square_prefixes import Prefixes, SquarePrefixes, generate_prefixes
from attnlab.data.squares import CORNERS, generate_sequences, squares_tensor
from attnlab.data.task import ARCHITECTURES, SquaresTask, Task, TokenTask
from attnlab.data.task_loader import TaskDataset, task_loader
from attnlab.data.task_names import make_task_sets, task_named
from attnlab.data.tasks import (
    BOS,
    EOS,
    FIRST_SYMBOL,
    PAD,
    TASKS,
    TOKEN_TASKS,
    SquaresBatch,
    TaskBatch,
    TaskSets,
    TaskSpec,
    Vocab,
    make_task_batch,
    squares_task,
    target_length,
)

__all__ = [
    "BOS",
    "CORNERS",
    "EMPTY",
    "EOS",
    "FIRST_SYMBOL",
    "PAD",
    "PaddedBatch",
    "Prefixes",
    "SquareLoaders",
    "SquarePrefixes",
    "SquareSequences",
    "SquaresBatch",
    "TASKS",
    "TOKEN_TASKS",
    "TaskBatch",
    "TaskDataset",
    "TaskSets",
    "TaskSpec",
    "Vocab",
    "collate_padded",
    "generate_prefixes",
    "generate_sequences",
    "make_loaders",
    "decoder_only_batch",
    "encoder_only_batch",
    "make_task_batch",
    "make_task_sets",
    "ARCHITECTURES",
    "SquaresTask",
    "Task",
    "TokenTask",
    "task_named",
    "mean_squared_error",
    "pad_sequences",
    "sequence_accuracy",
    "squares_task",
    "squares_tensor",
    "target_length",
    "task_loader",
    "token_accuracy",
]
