"""Every task of the length lab by name: :func:`task_named`, and the data of a spec, :func:`make_task_sets`.

The token tasks (copy, reverse, duplicate, sort) and the squares are :mod:`attnlab.data.task`'s
classes; the benchmark string tasks (:data:`attnlab.catalog.STRING_TASKS`: the Chomsky
hierarchy, Kazemnejad et al.'s tasks, arithmetic) are their generators wrapped in a
:class:`~attnlab.data.symbol_task.SymbolTask`, each imported the first time its name is used.
"""

from __future__ import annotations

import importlib

from attnlab._validate import check_choice
from attnlab.catalog import STRING_TASKS
from attnlab.data.scan_task import ScanTask
from attnlab.data.symbol_task import SymbolTask
from attnlab.data.task import SquaresTask, Task, TokenTask
from attnlab.data.tasks import TASKS, TaskSets, TaskSpec

__all__ = ["make_task_sets", "task_named"]


def task_named(name: str) -> Task:
    """The task object of ``name`` (one of :data:`attnlab.data.tasks.TASKS`).

    Raises:
        ValueError: for an unknown name, naming the known ones.

    Example:
        >>> task_named("reverse").sequence_length(8, "decoder-only"), task_named("squares").metrics
        (17, ('mean_squared_error',))
    """
    check_choice("task", name, TASKS)
    if name == "squares":
        return SquaresTask()
    if name == "scan":
        return ScanTask()
    if name in STRING_TASKS:
        module, _, attr = STRING_TASKS[name].partition(":")
        return SymbolTask(getattr(importlib.import_module(module), attr)())
    return TokenTask(name)


def make_task_sets(spec: TaskSpec) -> TaskSets:
    """The training set at ``spec.train_len`` and a test set at each of ``spec.test_lens``.

    Token tasks: the training set is ``make_task_batch(..., generator=train_seed)``;
    the test set at length ``L`` comes from a generator seeded by
    ``SeedSequence([test_seed, L])``, a stream of its own. Squares: the training
    set is ``squares_task(n_train, train_len, seed=train_seed)`` and every test
    set uses ``test_seed``, so the test sets are the same squares walked further.

    The seeds differ, so the test draws are independent of the training draws;
    independent is not disjoint, though: at a short length a random test
    sequence may also occur in training (there are only ``n_symbols ** L``).
    Test lengths above the (longest) training length never do.

    Args:
        spec: the :class:`TaskSpec`.

    Returns:
        A :class:`TaskSets` of CPU batches; ``tests`` is ordered by length.

    Raises:
        TypeError: if ``spec`` is not a :class:`TaskSpec`.
    """
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"spec must be a TaskSpec, got {type(spec).__name__}")
    return task_named(spec.task).sets(spec)
