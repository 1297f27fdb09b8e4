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
from attnlab.data.layouts import EMPTY, decoder_only_batch, encoder_only_batch
from attnlab.data.metrics import mean_squared_error, sequence_accuracy, token_accuracy
from attnlab.data.square_walks import SquaresBatch, squares_task
from attnlab.data.tasks import (
    BOS,
    PAD,
    TOKEN_TASKS,
    TaskBatch,
    TaskSets,
    TaskSpec,
    Vocab,
    make_task_batch,
    target_length,
)

__all__ = ["ARCHITECTURES", "SquaresTask", "Task", "TokenTask"]

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


class TokenTask(Task):
    """A token task: copy, reverse, duplicate or sort ``S`` symbols, scored by token and sequence accuracy.

    Args:
        name: one of :data:`attnlab.data.tasks.TOKEN_TASKS`.

    Raises:
        ValueError: for another name.
    """

    metrics = ("sequence_accuracy", "token_accuracy")
    draws_fresh = True

    def __init__(self, name: str) -> None:
        self.name = check_choice("task", name, TOKEN_TASKS)

    def target_length(self, length: int) -> int:
        """The target's length (EOS not counted) for a source of ``length``."""
        return target_length(self.name, length)

    def positions(self, tokens: Tensor, rule: str, *, slots: tuple[int, ...] = ()) -> Tensor:
        """Position ids ``[B, L]`` of laid-out ``tokens`` by the task's structure, for an encoding that takes them.

        Raises:
            ValueError: always here: the copy-like tasks have no structure to number (an arithmetic task has).
        """
        raise ValueError(f"the encoding takes its positions from the task ({rule!r}: Abacus or position coupling), "
                         f"and the {self.name} task has none; use an arithmetic task such as reversed-addition")

    def draw(self, n: int, length: int, *, generator: torch.Generator | int, min_len: int | None = None,
             n_symbols: int = 10) -> TaskBatch:
        """``n`` fresh sequences at ``length`` (or at lengths ``min_len .. length``), from ``generator``.

        What a protocol that draws new strings at every step calls (:mod:`attnlab.labs.lengths.protocols`).
        """
        return make_task_batch(self.name, n, length, n_symbols=n_symbols, min_len=min_len, generator=generator)

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
        target = self.target_length(length)
        if architecture == "decoder-only":
            return length + target + 1
        if architecture == "encoder-only":
            return length + target
        return max(length, target + 1)

    def loss(self, model: nn.Module, batch: Any, architecture: str, *, per_row: bool = False) -> Tensor:
        """Cross-entropy on the next token (decoder-only), the slots (encoder-only) or the target (teacher forcing).

        Args:
            per_row: sum the loss over each row's target tokens and average over the rows
                (the reference code of Ruoss et al. 2023: a longer answer weighs more); False:
                the mean over every target token of the batch.
        """
        if architecture == "encoder-only":
            inputs, labels = encoder_only_batch(batch)  # [B, S + M] each
            # scored on the slots only (labels PAD elsewhere)
            logits = model(inputs, **self._position_ids(model, inputs, architecture))  # [B, S + M, V]
        elif architecture == "decoder-only":
            inputs, labels = decoder_only_batch(batch)  # [B, S + T] each
            logits = model(inputs, **self._position_ids(model, inputs, architecture))  # [B, S + T, V]
        else:
            logits, labels = model(batch.source, batch.target_in), batch.target_out  # [B, T, V], [B, T]
        mean = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        if not per_row:
            return mean
        return mean * (labels != PAD).sum() / labels.shape[0]  # the sum over the tokens, over the rows

    def predict(self, model: nn.Module, batch: Any, architecture: str) -> Tensor:
        """``[N, T]`` tokens, the target and EOS; encoder-only: the slots ``[N, M]`` of one pass."""
        if architecture == "encoder-only":
            inputs = encoder_only_batch(batch)[0]  # [N, S + M]
            S = batch.source.shape[1]  # every row of a test set has this length, so the slots line up
            return cast(Tensor, model(inputs, **self._position_ids(model, inputs, architecture))[:, S:].argmax(-1))
        generate = cast(Any, model).generate
        if architecture == "decoder-only":
            if bool((batch.lengths != batch.source.shape[1]).any()):  # sources of several lengths (SCAN's sets)
                return _by_source_length(self, model, batch, architecture)
            inputs = decoder_only_batch(batch)[0]  # [N, S + T]
            prompt = inputs[:, : batch.source.shape[1] + 1]  # source + BOS: [N, S + 1]
            steps = batch.target_out.shape[1]
            # The answer's positions are known before it is written (the k-th digit is at k): all given up front.
            whole = F.pad(inputs, (0, 1), value=PAD)  # [N, S + T + 1]: the prompt and every step
            return cast(Tensor, generate(prompt, steps, **self._position_ids(model, whole, architecture)))
        return cast(Tensor, generate(batch.source, batch.target_out.shape[1], start=BOS))

    def _position_ids(self, model: nn.Module, inputs: Tensor, architecture: str) -> dict[str, Tensor]:
        """``{"position_ids": [B, L]}`` for a model whose encoding takes its positions from the task, else ``{}``."""
        rule = getattr(model, "task_positions", None)
        if rule is None:
            return {}
        if architecture == "encoder-decoder":
            raise ValueError(f"the encoding takes its positions from the task ({rule!r}): give it a decoder-only or "
                             "encoder-only model")
        return {"position_ids": self.positions(inputs, rule, slots=(EMPTY,) if architecture == "encoder-only" else ())}

    def chance(self, metric: str, *, n_symbols: int, length: int) -> float | None:
        """Guessing each target symbol uniformly: ``1 / n_symbols`` per token, that to the target's length per sequence.

        Raises:
            ValueError: for a metric the task is not scored by.
        """
        super().chance(metric, n_symbols=n_symbols, length=length)
        p = 1.0 / n_symbols
        return p if metric == "token_accuracy" else p ** self.target_length(length)

    def score(self, pred: Tensor, batch: Any, architecture: str) -> dict[str, float]:
        """Token and sequence accuracy of ``pred [N, T]`` against the target (with EOS; the slots: without)."""
        target = batch.target_out
        if batch.scored is not None:  # positions trained on but not scored (the reference's accuracy mask)
            target = target.masked_fill(~batch.scored, PAD)
        if architecture == "encoder-only":  # no EOS: the slots hold the target only
            target = encoder_only_batch(batch._replace(target_out=target))[1][:, batch.source.shape[1]:]  # [N, M]
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


def _by_source_length(task: TokenTask, model: nn.Module, batch: TaskBatch, architecture: str) -> Tensor:
    """Decode a test set whose sources differ in length one length at a time (a prompt must end in BOS)."""
    out = torch.full_like(batch.target_out, PAD)  # [N, T]
    for value in torch.unique(batch.lengths).tolist():
        rows = torch.nonzero(batch.lengths == value).flatten()
        width = int(batch.target_mask[rows, 0].sum(dim=1).max())  # this group's widest target and EOS
        group = TaskBatch(batch.source[rows, :value], batch.target_in[rows, :width], batch.target_out[rows, :width],
                          batch.source_mask[rows, :, :value], batch.target_mask[rows, :, :width], batch.lengths[rows])
        out[rows, :width] = task.predict(model, group, architecture)
    return out



def _test_generator(test_seed: int, length: int) -> torch.Generator:
    # One independent stream per test length: the same seed at two lengths would share draws.
    seed = int(np.random.SeedSequence([test_seed, length]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator().manual_seed(seed)
