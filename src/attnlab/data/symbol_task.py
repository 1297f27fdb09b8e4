"""A string task of the benchmarks as a task of the length lab: :class:`SymbolTask`.

A :class:`~attnlab.data.strings.StringGenerator` (a Chomsky-hierarchy task, one of
Kazemnejad et al.'s, reversed-digit arithmetic) draws inputs and answers in its own
alphabets. :class:`SymbolTask` gives it everything else the lab asks of a task
(:class:`~attnlab.data.task.Task`): token ids, padding, the layout for each
architecture, the loss, greedy decoding and the scores. It is a
:class:`~attnlab.data.task.TokenTask` whose data comes from the generator.

Token ids: ``PAD``, ``BOS`` and ``EOS`` first, as in :class:`~attnlab.data.tasks.Vocab`;
then input symbol ``s`` is id ``FIRST_SYMBOL + s`` and output symbol ``o`` is id
``FIRST_SYMBOL + o``. One shared range serves both alphabets (the model's logits run
over all of it), so the vocabulary holds ``3 + max(input_size, output_size)`` ids.

Output positions a generator marks unscored (``Strings.scored``: the reference's
accuracy mask) are trained on but left out of the accuracies, as in the reference code.

Shape notation: ``N`` sequences, ``S`` source length, ``T`` target width (``M + 1``
with EOS), ``M`` output length.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.square_walks import SquaresBatch
from attnlab.data.strings import StringGenerator, Strings, check_strings, input_length
from attnlab.data.task import TokenTask, _test_generator
from attnlab.data.tasks import BOS, EOS, FIRST_SYMBOL, PAD, TaskBatch, TaskSets, TaskSpec, _as_generator

__all__ = ["SymbolTask", "strings_batch"]


def strings_batch(strings: Strings) -> TaskBatch:
    """One length's strings as a :class:`TaskBatch`: ids shifted past the special tokens, EOS after the answer.

    Args:
        strings: inputs ``[N, S]`` and outputs ``[N, M]`` in the task's alphabets.

    Returns:
        A :class:`TaskBatch`: ``source [N, S]``, ``target_in`` / ``target_out [N, M + 1]``;
        its ``scored`` marks the output positions the accuracies count (EOS always counts).
    """
    inputs, outputs, scored = strings
    n, S = inputs.shape
    M = outputs.shape[1]
    device = inputs.device
    source = inputs + FIRST_SYMBOL  # [N, S]
    target = outputs + FIRST_SYMBOL  # [N, M]
    target_out = torch.cat([target, torch.full((n, 1), EOS, dtype=torch.int64, device=device)], dim=1)  # [N, M + 1]
    target_in = torch.cat([torch.full((n, 1), BOS, dtype=torch.int64, device=device), target], dim=1)  # [N, M + 1]
    ones = torch.ones(n, M + 1, dtype=torch.bool, device=device)  # [N, M + 1]
    counted = ones if scored is None else torch.cat([scored, ones[:, :1]], dim=1)  # [N, M + 1]: EOS counts
    return TaskBatch(source, target_in, target_out, torch.ones(n, 1, S, dtype=torch.bool, device=device),
                     ones.unsqueeze(1), torch.full((n,), S, dtype=torch.int64, device=device), counted)


def _pad_cat(batches: list[TaskBatch], index: Tensor) -> TaskBatch:
    """Batches of different lengths as one, right-padded with ``PAD`` (masks with False), rows put back at ``index``."""
    S = max(b.source.shape[1] for b in batches)
    T = max(b.target_out.shape[1] for b in batches)

    def pad(t: Tensor, width: int, value: Any) -> Tensor:
        return torch.nn.functional.pad(t, (0, width - t.shape[-1]), value=value)

    fields = [
        torch.cat([pad(b.source, S, PAD) for b in batches]),
        torch.cat([pad(b.target_in, T, PAD) for b in batches]),
        torch.cat([pad(b.target_out, T, PAD) for b in batches]),
        torch.cat([pad(b.source_mask, S, False) for b in batches]),
        torch.cat([pad(b.target_mask, T, False) for b in batches]),
        torch.cat([b.lengths for b in batches]),
    ]
    fields.append(torch.cat([pad(b.target_mask[:, 0] if b.scored is None else b.scored, T, False) for b in batches]))
    order = torch.empty_like(index)
    order[index] = torch.arange(index.numel(), device=index.device)  # row i of the result is row order[i] here
    return TaskBatch(*(f[order] for f in fields))


class SymbolTask(TokenTask):
    """A :class:`~attnlab.data.strings.StringGenerator` as a task of the length lab.

    Args:
        generator: the string task (its ``name`` becomes the task's).

    Raises:
        TypeError: if ``generator`` does not implement the protocol.

    Example:
        >>> from attnlab.data.task_names import task_named
        >>> task = task_named("parity-check")
        >>> batch = task.draw(4, 6, generator=torch.Generator().manual_seed(0))
        >>> batch.source.shape, batch.target_out.shape  # one answer symbol, then EOS
        (torch.Size([4, 6]), torch.Size([4, 2]))
    """

    def __init__(self, generator: StringGenerator) -> None:
        if not isinstance(generator, StringGenerator):
            raise TypeError(f"generator must implement attnlab.data.strings.StringGenerator, got "
                            f"{type(generator).__name__}")
        self.strings = generator
        self.name = generator.name
        self.shortest = check_int("shortest", generator.shortest, minimum=1)
        self.position_rules = tuple(getattr(generator, "position_rules", ()))

    def __repr__(self) -> str:
        return f"SymbolTask({type(self.strings).__name__}())"

    def output_length(self, length: int) -> int:
        """The answer's length (EOS not counted) for inputs of ``length`` symbols."""
        return int(self.strings.output_length(length))

    def draw(self, n: int, length: int, *, generator: torch.Generator | int, min_len: int | None = None,
             n_symbols: int = 10) -> TaskBatch:
        """``n`` fresh examples at ``length`` (or lengths drawn uniformly from ``min_len .. length``, right-padded).

        ``n_symbols`` is not used: the generator's alphabets are its own.

        Raises:
            ValueError: naming the argument, for a length the task is not defined at.
        """
        n = check_int("n", n, minimum=1)
        length = check_int("length", length, minimum=self.shortest)
        g = _as_generator(generator)
        if min_len is None or min_len == length:
            return strings_batch(self._sample(n, length, g))
        min_len = check_int("min_len", min_len, minimum=self.shortest)
        if min_len > length:
            raise ValueError(f"min_len ({min_len}) must not exceed length ({length})")
        lengths = torch.randint(min_len, length + 1, (n,), generator=g, device=g.device)  # [N]
        groups, rows = [], []
        for value in torch.unique(lengths).tolist():
            where = torch.nonzero(lengths == value).flatten()  # the rows of this length
            groups.append(strings_batch(self._sample(where.numel(), value, g)))
            rows.append(where)
        return _pad_cat(groups, torch.cat(rows))

    def _sample(self, n: int, length: int, g: torch.Generator) -> Strings:
        return check_strings(self.strings, self.strings.sample(n, length, generator=g), n, length)

    def sets(self, spec: TaskSpec) -> TaskSets:
        """The training set (lengths ``min_train_len .. train_len``) and one test set per length, as TokenTask's."""
        train = self.draw(spec.n_train, spec.train_len, min_len=spec.min_train_len, generator=spec.train_seed)
        tests: dict[int, TaskBatch | SquaresBatch] = {}
        for length in sorted(spec.test_lens):
            tests[length] = self.draw(spec.n_test, length, generator=_test_generator(spec.test_seed, length))
        return TaskSets(train, tests, spec)

    def model_io(self, n_symbols: int) -> dict[str, int | None]:
        """Token ids in, logits out, over ``3 + max(input_size, output_size)`` ids (``n_symbols`` is not used)."""
        return {"vocab_size": FIRST_SYMBOL + max(self.strings.input_size, self.strings.output_size),
                "n_features": None}

    def sequence_length(self, length: int, architecture: str) -> int:
        """As :meth:`TokenTask.sequence_length`, for a source of the generator's input width at ``length``."""
        width, target = input_length(self.strings, length), self.output_length(length)
        if architecture == "decoder-only":
            return width + target + 1
        if architecture == "encoder-only":
            return width + target
        return max(width, target + 1)

    def positions(self, tokens: Tensor, rule: str, *, slots: tuple[int, ...] = ()) -> Tensor:
        """Position ids ``[B, L]`` of laid-out ``tokens`` by the task's structure (Abacus, position coupling).

        Raises:
            ValueError: for a generator that has no such rule.
        """
        if rule not in getattr(self.strings, "position_rules", ()):
            return super().positions(tokens, rule, slots=slots)
        from attnlab.data.arithmetic_positions import task_positions

        return task_positions(rule, tokens, first_symbol=FIRST_SYMBOL, slots=slots)

    def target_length(self, length: int) -> int:
        """The answer's length for a source of ``length``: the generator's output length."""
        return self.output_length(length)

    def chance(self, metric: str, *, n_symbols: int, length: int) -> float | None:
        """The generator's guess rate per token; per sequence, that to the answer's length (EOS given).

        Raises:
            ValueError: for a metric the task is not scored by.
        """
        if metric not in self.metrics:
            raise ValueError(f"metric {metric!r}: the {self.name} task is scored by {', '.join(self.metrics)} only")
        p = float(self.strings.chance())
        return p if metric == "token_accuracy" else p ** self.output_length(length)
