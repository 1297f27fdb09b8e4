"""Every task of the length lab by name: :func:`task_named`, and the data of a spec, :func:`make_task_sets`.

The names are :data:`attnlab.catalog.TASK_CLASSES`': each a "module:Class", imported the
first time the name is used. A class that is a :class:`~attnlab.data.tasks.task.Task`
(the squares, SCAN) is the task; any other is a string generator, wrapped in the one
:class:`~attnlab.data.tasks.token_task.TokenTask`.
"""

from __future__ import annotations

import importlib

from attnlab._validate import check_choice
from attnlab.catalog import TASK_CLASSES, TASKS
from attnlab.data.tasks.spec import TaskSets, TaskSpec
from attnlab.data.tasks.task import Task
from attnlab.data.tasks.token_task import TokenTask

__all__ = ["TASKS", "make_task_sets", "task_named"]


def task_named(name: str) -> Task:
    """The task object of ``name`` (one of :data:`attnlab.catalog.TASKS`).

    Raises:
        ValueError: for an unknown name, naming the known ones.

    Example:
        >>> task_named("reverse").sequence_length(8, "decoder-only"), task_named("squares").metrics
        (17, ('mean_squared_error',))
        >>> task_named("reverse-string")
        TokenTask(ReverseString())
    """
    check_choice("task", name, TASKS)
    module, _, attr = TASK_CLASSES[name].partition(":")
    made = getattr(importlib.import_module(module), attr)()
    return made if isinstance(made, Task) else TokenTask(made)


def make_task_sets(spec: TaskSpec) -> TaskSets:
    """The training set at ``spec.train_len`` and a test set at each of ``spec.test_lens``.

    Token tasks: the training set is the task's draw at ``train_len`` (lengths from
    ``min_train_len``) from a generator seeded with ``train_seed``; the test set at length
    ``L`` comes from a generator seeded by ``SeedSequence([test_seed, L])``, a stream of its
    own. Squares: the training set is ``squares_task(n_train, train_len, seed=train_seed)``
    and every test set uses ``test_seed``, so the test sets are the same squares walked further.

    The seeds differ, so the test draws are independent of the training draws;
    independent is not disjoint, though: at a short length a random test
    sequence may also occur in training (there are only ``n_symbols ** L``).
    Test lengths above the (longest) training length never do.

    Args:
        spec: the :class:`~attnlab.data.tasks.spec.TaskSpec`.

    Returns:
        A :class:`~attnlab.data.tasks.spec.TaskSets` of CPU batches; ``tests`` is ordered by length.

    Raises:
        TypeError: if ``spec`` is not a :class:`~attnlab.data.tasks.spec.TaskSpec`.
    """
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"spec must be a TaskSpec, got {type(spec).__name__}")
    return task_named(spec.task).sets(spec)
