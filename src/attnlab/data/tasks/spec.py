"""What a length-generalisation run trains and tests on (:class:`TaskSpec`), the sets built from it, their seeds.

A :class:`TaskSpec` names a task (one of :data:`TASKS`, read from :data:`attnlab.catalog.TASKS`),
the training length and the test lengths, the set sizes and two seeds;
:func:`attnlab.data.tasks.registry.make_task_sets` builds its :class:`TaskSets`. Every set
comes from a generator of its own (:func:`as_generator`; one stream per test length:
:func:`length_generator`), so nothing here reads or changes a global random state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from attnlab._validate import check_int
from attnlab.catalog import TASKS, TOKEN_TASKS
from attnlab.data.squares.sequences import check_seed
from attnlab.data.squares.walks import SquaresBatch
from attnlab.data.tasks.tokens import TaskBatch, Vocab

__all__ = ["TASKS", "TaskSets", "TaskSpec", "as_generator", "check_task", "length_generator"]


def check_task(task: Any, known: tuple[str, ...] = TASKS) -> str:
    """``task`` if it is one of ``known``.

    Raises:
        ValueError: naming the task and the known ones.
    """
    if not isinstance(task, str) or task not in known:
        hint = ""
        if task == "squares":
            hint = " (the squares are float points, not tokens: use squares_task)"
        raise ValueError(f"task {task!r} is not one of {', '.join(known)}{hint}")
    return task


def as_generator(generator: Any) -> torch.Generator:
    """A ``torch.Generator`` as it is, or a new one seeded with an integer.

    Raises:
        TypeError / ValueError: for anything else, or a negative seed.
    """
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, (int, np.integer)):
        raise TypeError(f"generator must be a torch.Generator or an integer seed, got {generator!r} "
                        f"({type(generator).__name__}); the data must come from a seeded generator of its own")
    seed = check_int("generator", int(generator), minimum=0)
    return torch.Generator().manual_seed(seed)


def length_generator(test_seed: int, length: int) -> torch.Generator:
    """The generator of the test set at ``length``: seeded by ``SeedSequence([test_seed, length])``.

    (Not named ``test_*``: pytest would take it for a test wherever it is imported.)

    One independent stream per test length: the same seed at two lengths would share draws.
    """
    seed = int(np.random.SeedSequence([test_seed, length]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator().manual_seed(seed)


@dataclass(frozen=True)
class TaskSpec:
    """What a length-generalisation run trains and tests on.

    Args:
        task: one of :data:`TASKS` (``copy``, ``reverse``, ``squares``, ``parity-check`` ...).
        train_len: training length: the source length ``S`` of a token task
            (the longest, with ``min_train_len``), or the corners per walk ``K`` of ``squares``.
        test_lens: a test set at each of these lengths (usually ``train_len``
            and longer ones); distinct, each at least 1 (3 for ``squares``).
        n_train: training sequences.
        n_test: sequences per test set.
        n_symbols: content tokens of the lab's own token tasks (None: their 10); the other
            tasks' vocabularies are fixed, and their data refuses a size
            (:meth:`~attnlab.data.tasks.task.Task.check_spec`).
        min_train_len: train on lengths ``min_train_len .. train_len`` (token
            tasks only); None for one length. Test sets always have one length.
        train_seed: seed of the training set (the generator seed of a token task's
            draw, or ``squares_task``'s seed).
        test_seed: seed of the test sets, different from ``train_seed``.

    Raises:
        TypeError / ValueError: naming the field and value, for any bad field.
    """

    task: str = "copy"
    train_len: int = 8
    test_lens: tuple[int, ...] = (8, 12, 16, 24, 32)
    n_train: int = 4096
    n_test: int = 256
    n_symbols: int | None = None
    min_train_len: int | None = None
    train_seed: int = 13
    test_seed: int = 19

    def __post_init__(self) -> None:
        check_task(self.task)
        shortest = 3 if self.task == "squares" else 1  # squares: 2 corners given, at least 1 to predict
        check_int("train_len", self.train_len, minimum=shortest)
        if isinstance(self.test_lens, (str, bytes)) or not hasattr(self.test_lens, "__iter__"):
            raise TypeError(f"test_lens must be a sequence of lengths, got {self.test_lens!r}")
        lens = tuple(check_int("test_lens", v, minimum=shortest) for v in self.test_lens)
        if not lens or len(set(lens)) != len(lens):
            raise ValueError(f"test_lens must be a non-empty list of distinct lengths, got {list(self.test_lens)}")
        object.__setattr__(self, "test_lens", lens)  # a list becomes a tuple: the spec stays hashable
        check_int("n_train", self.n_train, minimum=1)
        check_int("n_test", self.n_test, minimum=1)
        if self.n_symbols is not None:
            Vocab(self.n_symbols)
        if self.min_train_len is not None:
            if self.task == "squares":
                raise ValueError(f"min_train_len must be None for the squares task, got {self.min_train_len}")
            check_int("min_train_len", self.min_train_len, minimum=1)
            if self.min_train_len > self.train_len:
                raise ValueError(f"min_train_len ({self.min_train_len}) must not exceed train_len "
                                 f"({self.train_len})")
        for name in ("train_seed", "test_seed"):
            value = getattr(self, name)
            if value is None:
                raise TypeError(f"{name} must be an integer, got None (the sets would not be repeatable)")
            check_seed(value, name)
        if self.train_seed == self.test_seed:
            raise ValueError(f"test_seed ({self.test_seed}) must differ from train_seed ({self.train_seed}): "
                             "the test data would repeat the training data")

    @property
    def vocab(self) -> Vocab:
        """The token vocabulary of the lab's own tasks (``vocab.size`` rows of embedding).

        Raises:
            ValueError: for another task: its vocabulary is its own (``task_named(task).model_io()``).
        """
        if self.task not in TOKEN_TASKS:
            raise ValueError(f"the {self.task} task's vocabulary is its own, not the lab's: "
                             f"attnlab.data.tasks.task_named({self.task!r}).model_io() says its size")
        return Vocab() if self.n_symbols is None else Vocab(self.n_symbols)


class TaskSets(NamedTuple):
    """What :func:`attnlab.data.tasks.registry.make_task_sets` builds: ``train``, ``tests[length]``, the spec.

    ``train`` is None where a protocol draws fresh strings at every step instead of a set.
    """

    train: TaskBatch | SquaresBatch | None
    tests: dict[int, TaskBatch | SquaresBatch]
    spec: TaskSpec
