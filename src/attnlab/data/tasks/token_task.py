"""A token task of the length lab: a string generator's strings in the lab's ids, read by any architecture.

:class:`TokenTask` is the one task of tokens in, tokens out. A
:class:`~attnlab.data.tasks.strings.StringGenerator` (copy, reverse, a Chomsky-hierarchy
task, one of Kazemnejad et al.'s, reversed-digit arithmetic) draws inputs and answers in
its own alphabets; the task gives it everything else the lab asks of a task
(:class:`~attnlab.data.tasks.task.Task`): token ids and padding
(:mod:`attnlab.data.tasks.tokens`), the layout for each architecture
(:mod:`attnlab.data.tasks.layouts`), the loss, greedy decoding, the scores and chance.
Two tasks with the same answer (``reverse``, ``reverse-string``, ``reverse-random``) differ
only by their generator.

Token ids: ``PAD``, ``BOS`` and ``EOS`` first; then input symbol ``s`` is id
``FIRST_SYMBOL + s`` and output symbol ``o`` is id ``FIRST_SYMBOL + o``. One shared range
serves both alphabets (the model's logits run over all of it), so the vocabulary holds
``3 + max(input_size, output_size)`` ids.

Output positions a generator marks unscored (``Strings.scored``: the reference's
accuracy mask) are trained on but left out of the accuracies, as in the reference code.

Shape notation: ``B`` batch, ``N`` sequences, ``S`` source length, ``T`` target width
(``M + 1`` with EOS), ``M`` output length or slots, ``V`` vocabulary.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._validate import check_int
from attnlab.data.squares.walks import SquaresBatch
from attnlab.data.tasks.layouts import EMPTY, decoder_only_batch, encoder_only_batch
from attnlab.data.tasks.metrics import sequence_accuracy, token_accuracy
from attnlab.data.tasks.spec import TaskSets, TaskSpec, as_generator, length_generator
from attnlab.data.tasks.strings import (
    StringGenerator,
    Strings,
    check_sample,
    check_strings,
    input_length,
    sample_bytes,
    sized,
)
from attnlab.data.tasks.task import Task
from attnlab.data.tasks.tokens import BOS, FIRST_SYMBOL, PAD, TaskBatch, cat_batches, padded_batch, strings_batch

__all__ = ["BATCH_BYTES_PER_SYMBOL", "TokenTask"]

#: the bytes a made batch keeps per symbol (input, answer and EOS: int64 ids and bool masks), 9 to 17 measured over
#: the tasks, rounded up
BATCH_BYTES_PER_SYMBOL = 24


class TokenTask(Task):
    """A :class:`~attnlab.data.tasks.strings.StringGenerator` as a task of the length lab.

    Args:
        strings: the string task (its ``name`` becomes the task's).

    Attributes:
        strings: the generator.

    Raises:
        TypeError: if ``strings`` does not implement the protocol.

    Example:
        >>> from attnlab.data.chomsky.regular import ParityCheck
        >>> task = TokenTask(ParityCheck())
        >>> batch = task.draw(4, 6, generator=torch.Generator().manual_seed(0))
        >>> batch.source.shape, batch.target_out.shape  # one answer symbol, then EOS
        (torch.Size([4, 6]), torch.Size([4, 2]))
    """

    metrics = ("sequence_accuracy", "token_accuracy")
    draws_fresh = True

    def __init__(self, strings: StringGenerator) -> None:
        if not isinstance(strings, StringGenerator):
            raise TypeError(f"strings must implement attnlab.data.tasks.strings.StringGenerator, got "
                            f"{type(strings).__name__}")
        self.strings = strings
        self.name = strings.name
        self.shortest = check_int("shortest", strings.shortest, minimum=1)
        self.position_rules = tuple(getattr(strings, "position_rules", ()))
        self.takes_symbols = callable(getattr(strings, "with_symbols", None))

    def __repr__(self) -> str:
        return f"TokenTask({self.strings!r})"

    def target_length(self, length: int) -> int:
        """The answer's length (EOS not counted) for a source of ``length``: the generator's output length."""
        return int(self.strings.output_length(length))

    # -- data ------------------------------------------------------------------------------

    def draw(self, n: int, length: int, *, generator: torch.Generator | int, min_len: int | None = None,
             n_symbols: int | None = None) -> TaskBatch:
        """``n`` fresh examples at ``length`` (or lengths drawn uniformly from ``min_len .. length``, right-padded).

        What a protocol that draws new strings at every step calls (:mod:`attnlab.labs.lengths.protocols`).
        A generator that draws mixed lengths at once does (``sample_mixed``); any other draws
        the lengths first, then the strings of each length.

        Args:
            n_symbols: the alphabet's size where the lab sizes it (attnlab's own tasks; None: the
                generator's own); the benchmark tasks have alphabets of their own, and refuse one.

        Raises:
            ValueError: naming the argument, for a length the task is not defined at or a size its
                vocabulary does not take; naming ``n`` and ``length`` and the memory they would
                need, for a batch that cannot fit (before anything is drawn).
        """
        n = check_int("n", n, minimum=1)
        length = check_int("length", length, minimum=self.shortest)
        if min_len is not None:
            min_len = check_int("min_len", min_len, minimum=self.shortest)
            if min_len > length:
                raise ValueError(f"min_len ({min_len}) must not exceed length ({length})")
        strings = sized(self.strings, n_symbols)
        g = as_generator(generator)
        check_sample(strings, n, length)  # every row as wide as the longest
        if min_len is None or min_len == length:
            return strings_batch(self._sample(strings, n, length, g))
        mixed = getattr(strings, "sample_mixed", None)
        if mixed is not None:
            return padded_batch(mixed(n, length, min_len=min_len, generator=g))
        lengths = torch.randint(min_len, length + 1, (n,), generator=g, device=g.device)  # [N]
        groups, rows = [], []
        for value in torch.unique(lengths).tolist():
            where = torch.nonzero(lengths == value).flatten()  # the rows of this length
            groups.append(strings_batch(self._sample(strings, where.numel(), value, g)))
            rows.append(where)
        return cat_batches(groups, torch.cat(rows))

    @staticmethod
    def _sample(strings: StringGenerator, n: int, length: int, g: torch.Generator) -> Strings:
        return check_strings(strings, strings.sample(n, length, generator=g), n, length)

    def sets(self, spec: TaskSpec) -> TaskSets:
        """The training set at ``spec.train_len`` (mixed lengths from ``min_train_len``) and a test set per length.

        The test set at length ``L`` comes from a generator seeded by ``SeedSequence([test_seed, L])``.

        Raises:
            ValueError: what :meth:`~attnlab.data.tasks.task.Task.check_sets` raises, before any set is drawn.
        """
        self.check_sets(spec)
        train = self.draw(spec.n_train, spec.train_len, min_len=spec.min_train_len, generator=spec.train_seed,
                          n_symbols=spec.n_symbols)
        tests: dict[int, TaskBatch | SquaresBatch] = {}
        for length in sorted(spec.test_lens):
            tests[length] = self.draw(spec.n_test, length, generator=length_generator(spec.test_seed, length),
                                      n_symbols=spec.n_symbols)
        return TaskSets(train, tests, spec)

    # -- sizes -----------------------------------------------------------------------------

    def check_symbols(self, n_symbols: int | None) -> int | None:
        """The alphabet's size where the generator takes one (``with_symbols``; None: its own), else None.

        Raises:
            ValueError: naming ``n_symbols``, its value and the task, for a size given to a generator whose
                vocabulary is fixed; what ``with_symbols`` raises for a bad size.
        """
        strings = sized(self.strings, n_symbols)
        return strings.input_size if self.takes_symbols else None

    def data_bytes(self, n: int, length: int) -> int:
        """At most the bytes a batch of ``n`` strings at ``length`` keeps (:data:`BATCH_BYTES_PER_SYMBOL` a symbol)."""
        return n * (input_length(self.strings, length) + self.target_length(length) + 1) * BATCH_BYTES_PER_SYMBOL

    def draw_bytes(self, n: int, length: int) -> int:
        """At most the bytes drawing and batching ``n`` strings at ``length`` holds at once (:func:`sample_bytes`)."""
        return sample_bytes(self.strings, n, length)

    def model_io(self, n_symbols: int | None = None) -> dict[str, int | None]:
        """Token ids in, logits out, over ``3 + max(input_size, output_size)`` ids."""
        strings = sized(self.strings, n_symbols)
        return {"vocab_size": FIRST_SYMBOL + max(strings.input_size, strings.output_size), "n_features": None}

    def sequence_length(self, length: int, architecture: str) -> int:
        """Decoder-only: source, BOS, target and EOS; encoder-only: the source and a slot per target token;
        encoder-decoder: the longer of source and target + EOS. The source is the generator's input width."""
        width, target = input_length(self.strings, length), self.target_length(length)
        if architecture == "decoder-only":
            return width + target + 1
        if architecture == "encoder-only":
            return width + target
        return max(width, target + 1)

    def chance(self, metric: str, *, n_symbols: int | None = None, length: int) -> float | None:
        """The generator's guess rate per token; per sequence, that to the answer's length (EOS given).

        Raises:
            ValueError: for a metric the task is not scored by.
        """
        super().chance(metric, n_symbols=n_symbols, length=length)
        p = float(sized(self.strings, n_symbols).chance())
        return p if metric == "token_accuracy" else p ** self.target_length(length)

    # -- a model on the data ---------------------------------------------------------------

    def positions(self, tokens: Tensor, rule: str, *, slots: tuple[int, ...] = ()) -> Tensor:
        """Position ids ``[B, L]`` of laid-out ``tokens`` by the generator's ``rule`` (Abacus, position coupling).

        Raises:
            ValueError: for a generator that has no such rule.
        """
        if rule not in self.position_rules:
            raise ValueError(f"the encoding takes its positions from the task ({rule!r}: Abacus or position "
                             f"coupling), and the {self.name} task has none; use an arithmetic task such as "
                             "reversed-addition")
        number = cast(Any, self.strings).position_ids
        return cast(Tensor, number(tokens, rule, first_symbol=FIRST_SYMBOL, slots=slots))

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
                return self._by_source_length(model, batch, architecture)
            inputs = decoder_only_batch(batch)[0]  # [N, S + T]
            prompt = inputs[:, : batch.source.shape[1] + 1]  # source + BOS: [N, S + 1]
            steps = batch.target_out.shape[1]
            # The answer's positions are known before it is written (the k-th digit is at k): all given up front.
            whole = F.pad(inputs, (0, 1), value=PAD)  # [N, S + T + 1]: the prompt and every step
            return cast(Tensor, generate(prompt, steps, **self._position_ids(model, whole, architecture)))
        return cast(Tensor, generate(batch.source, batch.target_out.shape[1], start=BOS))

    def _by_source_length(self, model: nn.Module, batch: TaskBatch, architecture: str) -> Tensor:
        """Decode a test set whose sources differ in length one length at a time (a prompt must end in BOS)."""
        out = torch.full_like(batch.target_out, PAD)  # [N, T]
        for value in torch.unique(batch.lengths).tolist():
            rows = torch.nonzero(batch.lengths == value).flatten()
            width = int(batch.target_mask[rows, 0].sum(dim=1).max())  # this group's widest target and EOS
            group = TaskBatch(batch.source[rows, :value], batch.target_in[rows, :width],
                              batch.target_out[rows, :width], batch.source_mask[rows, :, :value],
                              batch.target_mask[rows, :, :width], batch.lengths[rows])
            out[rows, :width] = self.predict(model, group, architecture)
        return out

    def _position_ids(self, model: nn.Module, inputs: Tensor, architecture: str) -> dict[str, Tensor]:
        """``{"position_ids": [B, L]}`` for a model whose encoding takes its positions from the task, else ``{}``."""
        rule = getattr(model, "task_positions", None)
        if rule is None:
            return {}
        if architecture == "encoder-decoder":
            raise ValueError(f"the encoding takes its positions from the task ({rule!r}): give it a decoder-only or "
                             "encoder-only model")
        return {"position_ids": self.positions(inputs, rule, slots=(EMPTY,) if architecture == "encoder-only" else ())}

    def score(self, pred: Tensor, batch: Any, architecture: str) -> dict[str, float]:
        """Token and sequence accuracy of ``pred [N, T]`` against the target (with EOS; the slots: without)."""
        target = batch.target_out
        if batch.scored is not None:  # positions trained on but not scored (the reference's accuracy mask)
            target = target.masked_fill(~batch.scored, PAD)
        if architecture == "encoder-only":  # no EOS: the slots hold the target only
            target = encoder_only_batch(batch._replace(target_out=target))[1][:, batch.source.shape[1]:]  # [N, M]
        return {"token_accuracy": token_accuracy(pred, target, pad=PAD),
                "sequence_accuracy": sequence_accuracy(pred, target, pad=PAD)}
