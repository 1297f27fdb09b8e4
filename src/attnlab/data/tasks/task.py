"""The task protocol of the length lab: what it asks of a task, whatever the task is (:class:`Task`).

The length-generalisation lab (:mod:`attnlab.labs.lengths`) asks the task instead of
branching on its name: its data, lengths, layout per architecture, loss, decoding, metrics
and chance. :func:`attnlab.data.tasks.registry.task_named` gives the task of a name: a
:class:`~attnlab.data.tasks.token_task.TokenTask` (tokens in, tokens out, scored by
accuracy: a string generator's strings, or SCAN's fixed set) or the
:class:`~attnlab.data.tasks.squares_task.SquaresTask` (corners of noisy squares: real
values, scored by their mean squared error).

A task never imports a model: it calls the model it is given (``model(inputs)``,
``model.generate(...)``), so ``data`` stays below ``models``.

Shape notation: ``N`` test sequences, ``T`` target width.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from torch import Tensor, nn

from attnlab._validate import check_choice
from attnlab.data.tasks.spec import TaskSets, TaskSpec

__all__ = ["ARCHITECTURES", "Task"]

#: how a sequence model reads a task: one causal stack over ``source + BOS + target``, an
#: encoder-decoder, or one non-causal pass that writes the target into slots after the source.
ARCHITECTURES = ("decoder-only", "encoder-decoder", "encoder-only")


class Task(ABC):
    """What the length lab needs of a task, whatever it is.

    Attributes:
        name: the task's name (one of :data:`attnlab.catalog.TASKS`).
        metrics: what a test set is scored by, the headline first.
        architectures: the model layouts that can read it.
        shortest: the shortest length the data takes.
        variable_lengths: training sets may mix lengths ``min_train_len .. train_len``.
    """

    name: str
    metrics: tuple[str, ...]
    architectures: tuple[str, ...] = ARCHITECTURES
    shortest: int = 1
    variable_lengths: bool = True
    #: the rules by which the task can number its tokens for an encoding that takes them (Abacus, coupling)
    position_rules: tuple[str, ...] = ()
    #: the task draws new data at any length (``draw``): what a protocol of fresh strings needs
    draws_fresh: bool = False

    def describe(self, architecture: str) -> str:
        """The task as a table's header names it: ``"reverse, decoder-only"``."""
        return f"{self.name}, {architecture}"

    def chance(self, metric: str, *, n_symbols: int, length: int) -> float | None:
        """What guessing scores on ``metric`` at a source ``length``; None where guessing has no score (an error).

        Raises:
            ValueError: for a metric the task is not scored by.
        """
        if metric not in self.metrics:
            raise ValueError(f"metric {metric!r}: the {self.name} task is scored by {', '.join(self.metrics)} only")
        return None

    def check_architecture(self, architecture: str) -> str:
        """``architecture`` if this task can be read that way.

        Raises:
            ValueError: naming the architecture and the ones the task takes.
        """
        check_choice("architecture", architecture, ARCHITECTURES)
        if architecture not in self.architectures:
            raise ValueError(f"architecture {architecture!r} does not take the {self.name} task "
                             f"(it takes {', '.join(self.architectures)})")
        return architecture

    @abstractmethod
    def sets(self, spec: TaskSpec) -> TaskSets:
        """The training set and a test set per length of ``spec``, CPU batches, ``tests`` ordered by length."""

    @abstractmethod
    def model_io(self, n_symbols: int) -> dict[str, int | None]:
        """The model's input and output: ``{"vocab_size": V, "n_features": None}`` or the reverse."""

    @abstractmethod
    def sequence_length(self, length: int, architecture: str) -> int:
        """The longest sequence a model of ``architecture`` reads for a source of ``length``."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """The training loss of ``model`` on ``batch``, a scalar tensor."""

    @abstractmethod
    def predict(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """The model's answers for a test set of one length (greedy, cached where the scheme allows)."""

    @abstractmethod
    def score(self, pred: Tensor, batch: Any, architecture: str) -> dict[str, float]:
        """The test set's scores, one per metric: ``pred [N, T]`` tokens or ``[N, T, 2]`` corners, on the CPU."""
