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

from attnlab._limits import check_memory
from attnlab._validate import check_choice
from attnlab.catalog import TOKEN_TASKS
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
        takes_symbols: the lab's ``n_symbols`` sizes the task's alphabet.
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
    #: the lab's ``n_symbols`` sizes the task's alphabet (attnlab's own tasks); False: its vocabulary is fixed
    takes_symbols: bool = False

    def describe(self, architecture: str) -> str:
        """The task as a table's header names it: ``"reverse, decoder-only"``."""
        return f"{self.name}, {architecture}"

    def chance(self, metric: str, *, n_symbols: int | None = None, length: int) -> float | None:
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

    def check_symbols(self, n_symbols: int | None) -> int | None:
        """``n_symbols`` as the task takes it: the alphabet's size where the lab sizes it (None: the task's
        own), None where the task's vocabulary is fixed.

        Raises:
            ValueError: naming ``n_symbols``, its value and the task, for a size given to a task whose
                vocabulary is fixed (it would be recorded and not used).
        """
        if n_symbols is not None:
            raise ValueError(f"n_symbols {n_symbols!r}: the {self.name} task's vocabulary is fixed; n_symbols sizes "
                             f"the alphabet of {', '.join(TOKEN_TASKS)} only")
        return None

    def check_spec(self, spec: TaskSpec) -> None:
        """Refuse, before any data is made, a spec this task cannot make the data of, naming the field and value.

        Every length at least :attr:`shortest`; ``min_train_len`` None where the training
        sequences have one length (:attr:`variable_lengths` False); ``n_symbols`` only where the
        lab sizes the alphabet (:meth:`check_symbols`). Nothing is built.

        Raises:
            ValueError: naming the first field the task refuses, its value and the task.
        """
        self.check_symbols(spec.n_symbols)
        if spec.min_train_len is not None and not self.variable_lengths:
            raise ValueError(f"min_train_len must be None for the {self.name} task, got {spec.min_train_len} (every "
                             "training sequence has train_len)")
        for name, values in (("train_len", [spec.train_len]), ("min_train_len", [spec.min_train_len]),
                             ("test_lens", list(spec.test_lens))):
            below = [v for v in values if v is not None and v < self.shortest]
            if below:
                raise ValueError(f"{name} must be at least {self.shortest} for the {self.name} task (the shortest "
                                 f"length it is defined at), got {below if name == 'test_lens' else below[0]}")

    @abstractmethod
    def data_bytes(self, n: int, length: int) -> int:
        """At most the bytes a set of ``n`` sequences at ``length`` keeps once it is made (a formula: no data)."""

    def draw_bytes(self, n: int, length: int) -> int:
        """At most the bytes making that set holds at once, the set included (here: what it keeps)."""
        return self.data_bytes(n, length)

    def sets_bytes(self, spec: TaskSpec) -> int:
        """At most the bytes :meth:`sets` holds at once: every set it keeps, and the largest draw's own work.

        The training set and every test set live together; they are drawn one after another.
        """
        sizes = [(spec.n_train, spec.train_len), *((spec.n_test, length) for length in spec.test_lens)]
        kept = sum(self.data_bytes(n, length) for n, length in sizes)
        return kept + max(self.draw_bytes(n, length) - self.data_bytes(n, length) for n, length in sizes)

    def check_sets(self, spec: TaskSpec) -> None:
        """Refuse ``spec`` (:meth:`check_spec`), and sets that cannot fit in memory (:meth:`sets_bytes`), before any
        is made.

        Raises:
            ValueError: naming the field, for a spec the task refuses; naming ``n_train``, ``n_test``
                and the lengths, and the memory they would need, for sets that cannot fit.
        """
        self.check_spec(spec)
        check_memory(f"n_train {spec.n_train} x train_len {spec.train_len} and n_test {spec.n_test} x "
                     f"{len(spec.test_lens)} test lengths up to {max(spec.test_lens)}: the {self.name} task's sets",
                     self.sets_bytes(spec))

    @abstractmethod
    def sets(self, spec: TaskSpec) -> TaskSets:
        """The training set and a test set per length of ``spec``, CPU batches, ``tests`` ordered by length.

        Raises:
            ValueError: what :meth:`check_sets` raises, before any set is made.
        """

    @abstractmethod
    def model_io(self, n_symbols: int | None = None) -> dict[str, int | None]:
        """The model's input and output: ``{"vocab_size": V, "n_features": None}`` or the reverse.

        Raises:
            ValueError: what :meth:`check_symbols` raises for ``n_symbols``.
        """

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
