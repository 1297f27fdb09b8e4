"""How a comparison trains and scores: the papers' protocols, each one object.

The same task and encodings give different headlines under different protocols (an
A/B on the ruoss2023 quick preset measured random-ALiBi's gain beyond the training
length at +15.2 points with a fixed padded set, +11.1 with fresh strings and the
reference's loss, +4.0 with fresh strings and a per-token mean), so a comparison names
its protocol and ``results.json`` records it:

* ``fixed`` (:class:`FixedSet`): attnlab's own. One training set of ``n_train``
  sequences of mixed lengths ``min_train_len .. train_len``, right-padded, shuffled into
  batches for ``epochs`` passes; the loss is the mean over the batch's target tokens.
* ``ruoss2023`` (:class:`FreshStrings`): Ruoss et al. 2023's code
  (google-deepmind/randomized_positional_encodings, ``experiments/training.py`` and
  ``curriculum.py``). Every step draws one length uniformly from
  ``min_train_len .. train_len`` (``UniformCurriculum``: Python's ``random.choice`` over
  the lengths) and a fresh batch of strings of that length, so nothing is padded and
  no string is seen twice; the loss sums the cross-entropy over each string's output
  positions and averages over the batch (``example.py``'s ``loss_fn``), so a long string
  weighs more than a short one. Scored by masked token accuracy at every test length.
* ``kazemnejad2023`` (:class:`KazemnejadSet`): Kazemnejad et al. 2023's setup
  (McGill-NLP/length-generalization): a fixed training set of their size, scored by exact
  match of the whole answer, and their rotary, which turns a quarter of each head's
  features (``rotary`` is run as ``rotary-quarter``).

A protocol is the paper's training procedure: it builds a model's training batches, its
loss, its optimiser and its learning-rate schedule. Everything else (the model and its
sizes, the learning rate, the test sets, the scoring) is the comparison's settings.
The gradient's global norm is clipped at 1.0 under every protocol (Ruoss et al.'s
``optax.clip_by_global_norm(1.0)``, the default ``max_grad_norm`` of the Hugging Face
trainer Kazemnejad et al. train with).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from attnlab._validate import check_choice, check_int
from attnlab.catalog import PROTOCOLS
from attnlab.data.tasks import TaskSets, task_loader

if TYPE_CHECKING:  # the settings check themselves against a protocol's declarations: they import this module
    from attnlab.labs.lengths.config import CompareConfig

__all__ = ["CURRICULUM_SEED", "PROTOCOLS", "FixedSet", "FreshBatches", "FreshStrings", "KazemnejadSet", "Protocol",
           "protocol_named", "ruoss_lengths"]


class Protocol:
    """How the models of a comparison are trained and what their headline is.

    Attributes:
        name: the ``--protocol`` name.
        metric: the headline metric of a token task (the paper's); the squares keep their MSE.
        builds_training_set: the training data is one fixed set (else drawn fresh at every step).
        per_row_loss: the loss sums over each row's target tokens and averages over the rows.
        renames: encodings this protocol runs as another scheme (the paper's version of a name).
    """

    name: str = ""
    metric: str = "sequence_accuracy"
    builds_training_set: bool = True
    per_row_loss: bool = False
    renames: dict[str, str] = {}

    def optimizer(self, model: nn.Module, config: CompareConfig) -> torch.optim.Optimizer:
        """The model's optimiser at peak rate ``config.lr``: Adam, unless the protocol says otherwise."""
        # foreach: the same update, element for element, as torch's loop over the tensors on the CPU, one call per
        # operation for all of them. Not fused=True: that kernel rounds differently, which would change the records.
        return torch.optim.Adam(model.parameters(), lr=config.lr, foreach=True)

    def schedule(self, total_steps: int) -> Callable[[int], float]:
        """The learning rate's factor at each step (for ``LambdaLR``): attnlab's warm-up and cosine decay.

        A linear warm-up over 5% of the steps, then a cosine decay to 10% of the peak.
        """
        warmup = max(1, total_steps // 20)

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = (step - warmup) / max(1, total_steps - warmup)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

        return factor

    def describe(self) -> str:
        """One sentence on how the models are trained, for the report.

        Raises:
            NotImplementedError: in the base class (each protocol says its own).
        """
        raise NotImplementedError

    def steps(self, config: CompareConfig) -> int:
        """Optimizer steps each model takes: ``epochs`` passes of ``n_train`` sequences in batches of ``batch_size``."""
        return config.epochs * math.ceil(config.n_train / config.batch_size)

    def batches(self, config: CompareConfig, sets: TaskSets, seed: int) -> tuple[Any, int]:
        """``(loader, epochs)`` for :func:`attnlab.training.fit`: the model's training batches, seeded by ``seed``.

        Raises:
            NotImplementedError: in the base class.
            ValueError: where the protocol cannot train on the task's data.
        """
        raise NotImplementedError

    def loss(self, config: CompareConfig) -> Callable[[nn.Module, Any], torch.Tensor]:
        """The batch loss :func:`attnlab.training.fit` calls: the task's, weighted as the protocol says."""
        task, architecture, per_row = config.task_object, config.architecture, self.per_row_loss
        if per_row and not task.draws_fresh:  # the squares, SCAN: no per-string sum to take
            per_row = False

        def loss(model: nn.Module, batch: Any) -> torch.Tensor:
            if per_row:  # a task that draws fresh strings (a token task) also sums its loss per row
                return cast(Any, task).loss(model, batch, architecture, per_row=True)
            return task.loss(model, batch, architecture)

        return loss


class FixedSet(Protocol):
    """attnlab's protocol: one padded training set of mixed lengths, shuffled for ``epochs`` passes."""

    name = "fixed"

    def describe(self) -> str:
        return ("one fixed training set of mixed lengths, right-padded and shuffled into batches for every epoch; "
                "the loss is the mean over the batch's target tokens")

    def batches(self, config: CompareConfig, sets: TaskSets, seed: int) -> tuple[Any, int]:
        """A loader over the fixed training set, shuffled by ``seed``, for ``epochs`` passes.

        Raises:
            ValueError: if ``sets`` hold no training set.
        """
        if sets.train is None:
            raise ValueError(f"protocol {self.name!r} trains on a fixed set, and these sets have none")
        return task_loader(sets.train, config.batch_size, shuffle=True, seed=seed), config.epochs


class KazemnejadSet(FixedSet):
    """Kazemnejad et al. 2023: a fixed set, AdamW with a linear schedule, exact match of the whole answer.

    Their code (McGill-NLP/length-generalization, ``configs/trainer/base_model.jsonnet`` and
    ``default.jsonnet``) trains with the Hugging Face trainer: AdamW, weight decay 0.05, a linear
    warm-up over 6% of the steps and a linear decay to 0. Their rotary turns a quarter of each
    head's features (``rotary`` runs as ``rotary-quarter``), and their T5 bias is one table in
    the first layer, shared by all (``t5`` runs as ``t5-shared``).
    """

    name = "kazemnejad2023"
    renames = {"rotary": "rotary-quarter", "t5": "t5-shared"}
    weight_decay = 0.05
    warmup = 0.06

    def describe(self) -> str:
        return ("Kazemnejad et al. 2023's protocol: one fixed training set, shuffled for every epoch; AdamW with "
                "weight decay 0.05 (not on biases and norms), a linear warm-up over 6% of the steps and a linear "
                "decay to 0; scored by exact match of the whole answer; rotary turns a quarter of each head's "
                "features and T5's bias is one table shared by every layer, as their code does")

    def optimizer(self, model: nn.Module, config: CompareConfig) -> torch.optim.Optimizer:
        """AdamW, weight decay 0.05 on the weight matrices and tables only.

        The Hugging Face trainer leaves biases and LayerNorm weights undecayed; here every
        parameter of one dimension (biases, norms' scales and shifts) is.
        """
        params = list(model.parameters())
        decayed = [p for p in params if p.dim() > 1]
        plain = [p for p in params if p.dim() <= 1]
        groups = [{"params": decayed, "weight_decay": self.weight_decay}, {"params": plain, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=config.lr, foreach=True)

    def schedule(self, total_steps: int) -> Callable[[int], float]:
        """A linear warm-up over 6% of the steps, then a linear decay to 0 (the trainer's warm-up and decay).

        The warm-up is ``ceil(0.06 x steps)`` steps, from a factor of 0 at the first, as
        ``get_linear_schedule_with_warmup`` (their ``polynomial`` decay of power 1 ends at
        1e-7 instead of 0: a difference below 1e-6 of the peak rate).
        """
        warmup = max(1, math.ceil(self.warmup * total_steps))

        def factor(step: int) -> float:
            if step < warmup:
                return step / warmup
            return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

        return factor


def ruoss_lengths(seed: int, steps: int, *, shortest: int, longest: int) -> list[int]:
    """The training length of each step under Ruoss et al.'s rule, drawn from a stream seeded by ``seed``.

    The reference (``UniformCurriculum.sample_sequence_length``) calls Python's
    ``random.choice`` on the lengths ``shortest .. longest`` once per step. Here it is a
    ``random.Random(seed)`` of its own, so the draws are the reference's for that seed and
    touch no global state.

    Raises:
        TypeError / ValueError: naming the argument, for a bad count or length.

    Example:
        >>> ruoss_lengths(0, 5, shortest=1, longest=40)
        [25, 27, 3, 17, 33]
    """
    values = list(range(check_int("shortest", shortest, minimum=1), check_int("longest", longest, minimum=1) + 1))
    if not values:
        raise ValueError(f"shortest ({shortest}) must not exceed longest ({longest})")
    rng = random.Random(seed)
    return [rng.choice(values) for _ in range(check_int("steps", steps, minimum=0))]


class FreshBatches:
    """``steps`` batches of fresh strings, one length per batch (:func:`ruoss_lengths`), as a loader.

    Args:
        draw: ``draw(n, length, generator=g)`` -> a batch (a task's ``draw``).
        lengths: the length of each step's batch.
        batch_size: strings per batch.
        seed: the strings' generator seed (its own stream: the lengths come from another).
    """

    def __init__(self, draw: Callable[..., Any], lengths: list[int], batch_size: int, seed: int) -> None:
        self.draw, self.lengths = draw, lengths
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.seed = seed

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[Any]:
        # The same strings on every pass: the loader is iterated once (one epoch of `steps` batches).
        g = torch.Generator().manual_seed(self.seed)
        for length in self.lengths:
            yield self.draw(self.batch_size, length, generator=g)


#: the seed of the curriculum's lengths: one sequence of lengths for every model of a comparison, so that the
#: models of a group (attnlab.models.grouped) step through batches of the same shape together
CURRICULUM_SEED = 0


class FreshStrings(Protocol):
    """Ruoss et al. 2023's protocol: a fresh batch of one length at every step, the loss summed over each string.

    Their code (google-deepmind/randomized_positional_encodings, ``experiments/example.py``)
    trains with ``optax.adam`` at a constant learning rate (``1e-3`` there), clipped at a
    global norm of 1.0: no warm-up, no decay.
    """

    name = "ruoss2023"
    metric = "token_accuracy"
    builds_training_set = False
    per_row_loss = True

    def describe(self) -> str:
        return ("Ruoss et al. 2023's protocol: at every step one length drawn uniformly from the training lengths "
                "(the reference's random.choice; the same lengths for every model) and a fresh batch of strings of "
                "that length, none seen twice and none padded; the loss sums the cross-entropy over each string's "
                "outputs and averages over the batch; Adam at a constant learning rate; masked token accuracy at "
                "every test length")

    def schedule(self, total_steps: int) -> Callable[[int], float]:
        """A constant learning rate, as the reference's ``optax.adam(1e-3)``."""
        return lambda step: 1.0

    def batches(self, config: CompareConfig, sets: TaskSets, seed: int) -> tuple[Any, int]:
        """:class:`FreshBatches` of one epoch: a length per step by :func:`ruoss_lengths`, fresh strings of it.

        Raises:
            ValueError: for a task that cannot draw fresh strings (the squares).
        """
        task = config.task_object
        if not task.draws_fresh:
            raise ValueError(f"protocol {self.name!r} draws fresh strings, and the {task.name} task does not "
                             "(use --protocol fixed)")
        lengths = ruoss_lengths(CURRICULUM_SEED, self.steps(config), shortest=config.min_train_len,
                                longest=config.train_len)

        def draw(n: int, length: int, *, generator: torch.Generator) -> Any:
            # A task that draws fresh strings (a token task) has draw(), beyond what every task has.
            return cast(Any, task).draw(n, length, generator=generator, n_symbols=config.n_symbols)

        # The strings' stream is seeded apart from the lengths' and from the weights' (torch.manual_seed(seed)).
        return FreshBatches(draw, lengths, config.batch_size, seed=10_000 + seed), 1


#: the protocols by name.
_PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (FixedSet(), FreshStrings(), KazemnejadSet())}
assert tuple(_PROTOCOLS) == PROTOCOLS, "attnlab.catalog.PROTOCOLS must list the protocols"


def protocol_named(name: str) -> Protocol:
    """The protocol called ``name`` (one of :data:`PROTOCOLS`).

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    return _PROTOCOLS[check_choice("protocol", name, PROTOCOLS)]
