"""A task of the length lab as one object: its data, lengths, layout per architecture, loss, decoding, metrics.

The length-generalisation lab (:mod:`attnlab.labs.lengths`) asks the task instead of
branching on its name: :func:`task_named` gives a :class:`TokenTask` (copy, reverse,
duplicate, sort: tokens in, tokens out, scored by accuracy) or the :class:`SquaresTask`
(corners of noisy squares: real values, scored by their mean squared error).

A task never imports a model: it calls the model it is given (``model(inputs)``,
``model.generate(...)``), so ``data`` stays below ``models``.

Shape notation: ``B`` batch, ``N`` test sequences, ``S`` source length, ``T`` target
width, ``M`` output slots, ``V`` vocabulary.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._validate import check_choice
from attnlab.data.layouts import decoder_only_batch, encoder_only_batch
from attnlab.data.metrics import mean_squared_error, sequence_accuracy, token_accuracy
from attnlab.data.square_walks import SquaresBatch, squares_task
from attnlab.data.tasks import (
    BOS,
    PAD,
    TASKS,
    TOKEN_TASKS,
    TaskBatch,
    TaskSets,
    TaskSpec,
    Vocab,
    make_task_batch,
    target_length,
)

__all__ = ["ARCHITECTURES", "SquaresTask", "Task", "TokenTask", "make_task_sets", "task_named"]

#: how a sequence model reads a task: one causal stack over ``source + BOS + target``, an
#: encoder-decoder, or one non-causal pass that writes the target into slots after the source.
ARCHITECTURES = ("decoder-only", "encoder-decoder", "encoder-only")

Batch = TaskBatch | SquaresBatch


class Task(ABC):
    """What the length lab needs of a task, whatever it is.

    Attributes:
        name: the task's name (one of :data:`attnlab.data.tasks.TASKS`).
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


class TokenTask(Task):
    """A token task: copy, reverse, duplicate or sort ``S`` symbols, scored by token and sequence accuracy.

    Args:
        name: one of :data:`attnlab.data.tasks.TOKEN_TASKS`.

    Raises:
        ValueError: for another name.
    """

    metrics = ("sequence_accuracy", "token_accuracy")

    def __init__(self, name: str) -> None:
        self.name = check_choice("task", name, TOKEN_TASKS)

    def sets(self, spec: TaskSpec) -> TaskSets:
        """The training set at ``spec.train_len`` (mixed lengths from ``min_train_len``) and a test set per length.

        The test set at length ``L`` comes from a generator seeded by ``SeedSequence([test_seed, L])``.
        """
        train = make_task_batch(self.name, spec.n_train, spec.train_len, n_symbols=spec.n_symbols,
                                min_len=spec.min_train_len, generator=spec.train_seed)
        tests: dict[int, Batch] = {}
        for length in sorted(spec.test_lens):
            tests[length] = make_task_batch(self.name, spec.n_test, length, n_symbols=spec.n_symbols,
                                            generator=_test_generator(spec.test_seed, length))
        return TaskSets(train, tests, spec)

    def model_io(self, n_symbols: int) -> dict[str, int | None]:
        """Token ids in, logits over the vocabulary out."""
        return {"vocab_size": Vocab(n_symbols).size, "n_features": None}

    def sequence_length(self, length: int, architecture: str) -> int:
        """Decoder-only: source, BOS, target and EOS; encoder-only: the source and a slot per target token;
        encoder-decoder: the longer of source and target + EOS."""
        target = target_length(self.name, length)
        if architecture == "decoder-only":
            return length + target + 1
        if architecture == "encoder-only":
            return length + target
        return max(length, target + 1)

    def loss(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """Cross-entropy on the next token (decoder-only), the slots (encoder-only) or the target (teacher forcing)."""
        if architecture == "encoder-only":
            inputs, labels = encoder_only_batch(batch)  # [B, S + M] each
            logits = model(inputs)  # [B, S + M, V]: scored on the slots only (labels PAD elsewhere)
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        if architecture == "decoder-only":
            inputs, labels = decoder_only_batch(batch)  # [B, S + T] each
            logits = model(inputs)  # [B, S + T, V]
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        logits = model(batch.source, batch.target_in)  # [B, T, V]
        return F.cross_entropy(logits.flatten(0, 1), batch.target_out.flatten(), ignore_index=PAD)

    def predict(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """``[N, T]`` tokens, the target and EOS; encoder-only: the slots ``[N, M]`` of one pass."""
        if architecture == "encoder-only":
            inputs = encoder_only_batch(batch)[0]  # [N, S + M]
            S = batch.source.shape[1]  # every row of a test set has this length, so the slots line up
            return cast(Tensor, model(inputs)[:, S:].argmax(-1))  # [N, M]
        generate = cast(Any, model).generate
        if architecture == "decoder-only":
            prompt = decoder_only_batch(batch)[0][:, : batch.source.shape[1] + 1]  # source + BOS: [N, S + 1]
            return cast(Tensor, generate(prompt, batch.target_out.shape[1]))  # the target and EOS
        return cast(Tensor, generate(batch.source, batch.target_out.shape[1], start=BOS))

    def chance(self, metric: str, *, n_symbols: int, length: int) -> float | None:
        """Guessing each target symbol uniformly: ``1 / n_symbols`` per token, that to the target's length per sequence.

        Raises:
            ValueError: for a metric the task is not scored by.
        """
        super().chance(metric, n_symbols=n_symbols, length=length)
        p = 1.0 / n_symbols
        return p if metric == "token_accuracy" else p ** target_length(self.name, length)

    def score(self, pred: Tensor, batch: Any, architecture: str) -> dict[str, float]:
        """Token and sequence accuracy of ``pred [N, T]`` against the target (with EOS; the slots: without)."""
        target = batch.target_out
        if architecture == "encoder-only":  # no EOS: the slots hold the target only
            target = encoder_only_batch(batch)[1][:, batch.source.shape[1]:]  # [N, M]
        return {"token_accuracy": token_accuracy(pred, target, pad=PAD),
                "sequence_accuracy": sequence_accuracy(pred, target, pad=PAD)}


class SquaresTask(Task):
    """The noisy squares walked further: the corners after the given ones, scored by their mean squared error."""

    name = "squares"
    metrics = ("mean_squared_error",)
    # The corners are decoded one after another: no slots to fill in one pass.
    architectures = ("decoder-only", "encoder-decoder")
    shortest = 3  # 2 corners given, at least 1 to predict
    variable_lengths = False  # every training walk has train_len corners

    def check_architecture(self, architecture: str) -> str:
        """``architecture`` if it decodes the corners one after another.

        Raises:
            ValueError: for ``"encoder-only"`` (and an unknown architecture).
        """
        check_choice("architecture", architecture, ARCHITECTURES)
        if architecture not in self.architectures:
            raise ValueError(f"architecture {architecture!r} takes the token tasks ({', '.join(TOKEN_TASKS)}): "
                             "the squares are decoded corner by corner")
        return architecture

    def describe(self, architecture: str) -> str:
        """``"squares"``: the corners are a walk, whatever reads them."""
        return self.name

    def sets(self, spec: TaskSpec) -> TaskSets:
        """``n_train`` walks of ``train_len`` corners, and the same ``n_test`` test walks taken to each length."""
        tests: dict[int, Batch] = {}
        train = squares_task(spec.n_train, spec.train_len, seed=spec.train_seed)
        for length in sorted(spec.test_lens):
            tests[length] = squares_task(spec.n_test, length, seed=spec.test_seed)
        return TaskSets(train, tests, spec)

    def model_io(self, n_symbols: int) -> dict[str, int | None]:
        """Corners ``(x, y)`` in and out."""
        return {"vocab_size": None, "n_features": 2}

    def sequence_length(self, length: int, architecture: str) -> int:
        """The corners of the walk."""
        return length

    def loss(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """MSE on the corners after the given ones (the walk continues itself, or teacher forcing)."""
        if architecture == "decoder-only":
            n_given = batch.source.shape[1]
            pred = model(batch.full[:, :-1])[:, n_given - 1:]  # [B, T, 2]
            return F.mse_loss(pred, batch.target)
        # Decoder inputs: the target shifted right, starting from the last given corner.
        target_in = torch.cat([batch.source[:, -1:], batch.target[:, :-1]], dim=1)  # [B, T, 2]
        return F.mse_loss(model(batch.source, target_in), batch.target)

    def predict(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """``[N, T, 2]`` corners, decoded one after another."""
        generate = cast(Any, model).generate
        if architecture == "decoder-only":
            return cast(Tensor, generate(batch.source, batch.target.shape[1]))
        return cast(Tensor, generate(batch.source, batch.target.shape[1], start=batch.source[:, -1:]))

    def score(self, pred: Tensor, batch: Any, architecture: str) -> dict[str, float]:
        """The mean squared error of the predicted corners ``pred [N, T, 2]``."""
        return {"mean_squared_error": mean_squared_error(pred, batch.target)}


def task_named(name: str) -> Task:
    """The task object of ``name`` (one of :data:`attnlab.data.tasks.TASKS`).

    Raises:
        ValueError: for an unknown name, naming the known ones.

    Example:
        >>> task_named("reverse").sequence_length(8, "decoder-only"), task_named("squares").metrics
        (17, ('mean_squared_error',))
    """
    check_choice("task", name, TASKS)
    return SquaresTask() if name == "squares" else TokenTask(name)


def _test_generator(test_seed: int, length: int) -> torch.Generator:
    # One independent stream per test length: the same seed at two lengths would share draws.
    seed = int(np.random.SeedSequence([test_seed, length]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator().manual_seed(seed)


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
