"""The length lab's task framework: the task protocol, the token task, the names, the data's ids, layouts and scores.

Every task of the length lab (:mod:`attnlab.labs.lengths`) is one object the lab asks
instead of branching on a name:

* :mod:`.task`: :class:`Task`, the protocol (data, lengths, layout per architecture, loss,
  decoding, metrics, chance), and :data:`ARCHITECTURES`;
* :mod:`.token_task`: :class:`TokenTask`, the one task of tokens in, tokens out: a string
  generator's strings in the lab's ids;
* :mod:`.squares_task`: :class:`SquaresTask`, the noisy squares walked further (real values);
* :mod:`.registry`: :func:`task_named` (every name of :data:`attnlab.catalog.TASKS`) and
  :func:`make_task_sets`;
* :mod:`.strings`: :class:`StringGenerator`, the protocol of a string task (what each
  benchmark family implements), and :mod:`.prompts`, fixed words around an input;
* :mod:`.basic`: attnlab's own token tasks (copy, reverse, duplicate, sort) as generators,
  and :func:`make_task_batch`;
* :mod:`.tokens`: the token ids (:data:`PAD`, :data:`BOS`, :data:`EOS`), :class:`Vocab`
  and :class:`TaskBatch`; :mod:`.spec`: :class:`TaskSpec` and :class:`TaskSets`;
* :mod:`.layouts`: a batch as each architecture reads it; :mod:`.metrics`: the scores;
  :mod:`.loader`: :func:`task_loader`, mini-batches of a set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.data.tasks.basic import TOKEN_TASKS, make_task_batch, target_length
    from attnlab.data.tasks.layouts import EMPTY, decoder_only_batch, encoder_only_batch
    from attnlab.data.tasks.loader import TaskDataset, task_loader
    from attnlab.data.tasks.metrics import mean_squared_error, sequence_accuracy, token_accuracy
    from attnlab.data.tasks.prompts import Prompt
    from attnlab.data.tasks.registry import make_task_sets, task_named
    from attnlab.data.tasks.spec import TASKS, TaskSets, TaskSpec
    from attnlab.data.tasks.squares_task import SquaresTask
    from attnlab.data.tasks.strings import DrawnStrings, PaddedStrings, StringGenerator, Strings
    from attnlab.data.tasks.task import ARCHITECTURES, Task
    from attnlab.data.tasks.token_task import TokenTask
    from attnlab.data.tasks.tokens import BOS, EOS, FIRST_SYMBOL, PAD, TaskBatch, Vocab

__all__ = ["ARCHITECTURES", "BOS", "DrawnStrings", "EMPTY", "EOS", "FIRST_SYMBOL", "PAD", "PaddedStrings", "Prompt",
           "SquaresTask", "StringGenerator", "Strings", "TASKS", "TOKEN_TASKS", "Task", "TaskBatch", "TaskDataset",
           "TaskSets", "TaskSpec", "TokenTask", "Vocab", "decoder_only_batch", "encoder_only_batch", "make_task_batch",
           "make_task_sets", "mean_squared_error", "sequence_accuracy", "target_length", "task_loader", "task_named",
           "token_accuracy"]

#: where each name lives: imported the first time it is asked for (PEP 562), so that importing one
#: module of the package does not import its siblings
_HOMES = {
    "ARCHITECTURES": "task", "Task": "task",
    "TokenTask": "token_task",
    "SquaresTask": "squares_task",
    "make_task_sets": "registry", "task_named": "registry",
    "DrawnStrings": "strings", "PaddedStrings": "strings", "StringGenerator": "strings", "Strings": "strings",
    "Prompt": "prompts",
    "make_task_batch": "basic", "target_length": "basic", "TOKEN_TASKS": "basic",
    "BOS": "tokens", "EOS": "tokens", "FIRST_SYMBOL": "tokens", "PAD": "tokens", "TaskBatch": "tokens",
    "Vocab": "tokens",
    "TASKS": "spec", "TaskSets": "spec", "TaskSpec": "spec",
    "decoder_only_batch": "layouts", "EMPTY": "layouts", "encoder_only_batch": "layouts",
    "mean_squared_error": "metrics", "sequence_accuracy": "metrics", "token_accuracy": "metrics",
    "task_loader": "loader", "TaskDataset": "loader",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
