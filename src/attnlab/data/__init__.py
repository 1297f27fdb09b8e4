"""The data the models are taught on: the labs' noisy squares, the length lab's tasks, the benchmarks' tasks.

* :mod:`.squares`: the noisy squares of the labs: :func:`generate_sequences` (the book's
  generator, number for number), the squares walked further, the variable-length prefixes,
  :func:`make_loaders` and :func:`pad_sequences`;
* :mod:`.tasks`: the length lab's task framework: :class:`Task` (the protocol),
  :class:`TokenTask` (the one task of tokens in, tokens out, wrapping a string generator),
  :class:`SquaresTask`, the names (:func:`task_named`), the token ids and batches, the
  layout per architecture, the scores and :func:`task_loader`;
* one package per benchmark family, each task a string generator:
  :mod:`.chomsky` (Delétang et al. 2023, as Ruoss et al. 2023 run them),
  :mod:`.kazemnejad` (Kazemnejad et al. 2023), :mod:`.scan` (SCAN, a fixed set of commands)
  and :mod:`.arithmetic` (reversed-digit arithmetic, with its own position rules: Abacus, coupling).

Every name below is imported the first time it is asked for, from the module that defines
it. This package never imports :mod:`attnlab.models`: a model is told its sizes
(``n_features=2``, ``input_len``, ``target_len``, ``vocab_size``) by its caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.data.squares.loaders import SquareLoaders, SquareSequences, make_loaders
    from attnlab.data.squares.padding import PaddedBatch, collate_padded, pad_sequences
    from attnlab.data.squares.sequences import CORNERS, generate_sequences, squares_tensor
    from attnlab.data.squares.square_prefixes import Prefixes, SquarePrefixes, generate_prefixes
    from attnlab.data.squares.walks import SquaresBatch, squares_task
    from attnlab.data.tasks.basic import TOKEN_TASKS, make_task_batch, target_length
    from attnlab.data.tasks.layouts import EMPTY, decoder_only_batch, encoder_only_batch
    from attnlab.data.tasks.loader import TaskDataset, task_loader
    from attnlab.data.tasks.metrics import mean_squared_error, sequence_accuracy, token_accuracy
    from attnlab.data.tasks.registry import make_task_sets, task_named
    from attnlab.data.tasks.spec import TASKS, TaskSets, TaskSpec
    from attnlab.data.tasks.squares_task import SquaresTask
    from attnlab.data.tasks.task import ARCHITECTURES, Task
    from attnlab.data.tasks.token_task import TokenTask
    from attnlab.data.tasks.tokens import BOS, EOS, FIRST_SYMBOL, PAD, TaskBatch, Vocab

__all__ = ["ARCHITECTURES", "BOS", "CORNERS", "EMPTY", "EOS", "FIRST_SYMBOL", "PAD", "PaddedBatch", "Prefixes",
           "SquareLoaders", "SquarePrefixes", "SquareSequences", "SquaresBatch", "SquaresTask", "TASKS", "TOKEN_TASKS",
           "Task", "TaskBatch", "TaskDataset", "TaskSets", "TaskSpec", "TokenTask", "Vocab", "collate_padded",
           "decoder_only_batch", "encoder_only_batch", "generate_prefixes", "generate_sequences", "make_loaders",
           "make_task_batch", "make_task_sets", "mean_squared_error", "pad_sequences", "sequence_accuracy",
           "squares_task", "squares_tensor", "target_length", "task_loader", "task_named", "token_accuracy"]

#: where each name lives: imported the first time it is asked for (PEP 562), so that importing one
#: module of the package does not import its siblings
_HOMES = {
    "CORNERS": "squares.sequences", "generate_sequences": "squares.sequences", "squares_tensor": "squares.sequences",
    "squares_task": "squares.walks", "SquaresBatch": "squares.walks",
    "generate_prefixes": "squares.square_prefixes", "Prefixes": "squares.square_prefixes",
    "SquarePrefixes": "squares.square_prefixes",
    "make_loaders": "squares.loaders", "SquareLoaders": "squares.loaders", "SquareSequences": "squares.loaders",
    "collate_padded": "squares.padding", "pad_sequences": "squares.padding", "PaddedBatch": "squares.padding",
    "ARCHITECTURES": "tasks.task", "Task": "tasks.task",
    "TokenTask": "tasks.token_task",
    "SquaresTask": "tasks.squares_task",
    "make_task_sets": "tasks.registry", "task_named": "tasks.registry",
    "make_task_batch": "tasks.basic", "target_length": "tasks.basic", "TOKEN_TASKS": "tasks.basic",
    "BOS": "tasks.tokens", "EOS": "tasks.tokens", "FIRST_SYMBOL": "tasks.tokens", "PAD": "tasks.tokens",
    "TaskBatch": "tasks.tokens", "Vocab": "tasks.tokens",
    "TASKS": "tasks.spec", "TaskSets": "tasks.spec", "TaskSpec": "tasks.spec",
    "decoder_only_batch": "tasks.layouts", "EMPTY": "tasks.layouts", "encoder_only_batch": "tasks.layouts",
    "mean_squared_error": "tasks.metrics", "sequence_accuracy": "tasks.metrics", "token_accuracy": "tasks.metrics",
    "task_loader": "tasks.loader", "TaskDataset": "tasks.loader",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
