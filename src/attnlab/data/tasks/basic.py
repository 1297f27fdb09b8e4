"""attnlab's own token tasks: copy, reverse, duplicate and sort ``n_symbols`` symbols, as string generators.

The source is ``L`` symbols drawn uniformly (with replacement) from ``n_symbols``
(2 for the binary strings of Ruoss et al. 2023); the answer is the source itself,
the source backwards, the source twice (``ww``, length ``2L``: Ruoss et al.'s
"duplicate string"), or the source in ascending order (duplicates allowed, so it is
a sorted multiset, not a permutation of distinct items). Example with ``L = 4``, in
the lab's token ids (:class:`~attnlab.data.tasks.tokens.Vocab`: symbol ``s`` is id
``3 + s``)::

    source      [ 7,  3,  9,  7]
    copy        [ 7,  3,  9,  7]     target_in  [BOS, 7, 3, 9, 7]
    reverse     [ 7,  9,  3,  7]     target_out [7, 3, 9, 7, EOS]   (copy)
    duplicate   [ 7,  3,  9,  7,  7,  3,  9,  7]
    sort        [ 3,  7,  7,  9]

Each task is a :class:`~attnlab.data.tasks.strings.StringGenerator` like the benchmarks'
(:mod:`attnlab.data.chomsky`), and the lab wraps it in the same
:class:`~attnlab.data.tasks.token_task.TokenTask`. Two things are their own: the lab's
``--symbols`` sizes their alphabet (``with_symbols``), and a batch of mixed lengths is
drawn at once (``sample_mixed``): the symbols at the longest length first, then each
row's length, so the same generator state gives the same symbols with or without mixed
lengths. :func:`make_task_batch` draws one task's batch by name.

Shape notation: ``N`` sequences, ``S`` the (longest) source length, ``T`` target width
(``S + 1``, ``2S + 1`` for duplicate: the answer and its EOS), ``M`` answer length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.catalog import TOKEN_TASKS as _CATALOGUED
from attnlab.data.tasks.spec import as_generator, check_task
from attnlab.data.tasks.strings import DrawnStrings, PaddedStrings, check_generator, check_sample
from attnlab.data.tasks.tokens import TaskBatch, padded_batch

__all__ = ["BASIC_TASKS", "TOKEN_TASKS", "BasicTask", "Copy", "Duplicate", "Reverse", "Sort", "make_task_batch",
           "target_length"]

#: the names of attnlab's own token tasks (:data:`attnlab.catalog.TOKEN_TASKS`).
TOKEN_TASKS: tuple[str, ...] = tuple(_CATALOGUED)


class BasicTask(DrawnStrings):
    """A task of ``n_symbols`` symbols whose answer rearranges its input: the generator of copy, reverse, ...

    A subclass says how long the answer is (:attr:`factor` times the input) and what it
    is for rows of several lengths (``_answer_rows``).

    Args:
        n_symbols: the alphabet's size, at least 2 (the lab's ``--symbols``).

    Attributes:
        name: the task's name (``"copy"``).
        n_symbols: as given; ``input_size`` and ``output_size`` too.
        factor: the answer's length over the input's.

    Raises:
        TypeError / ValueError: naming ``n_symbols`` if it is not an integer >= 2.
    """

    factor: int = 1

    def __init__(self, *, n_symbols: int = 10) -> None:
        self.n_symbols = check_int("n_symbols", n_symbols, minimum=2)
        self.input_size = self.output_size = self.n_symbols

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_symbols={self.n_symbols})"

    def with_symbols(self, n_symbols: int) -> BasicTask:
        """The same task over ``n_symbols`` symbols."""
        return self if n_symbols == self.n_symbols else type(self)(n_symbols=n_symbols)

    def output_length(self, length: int) -> int:
        """``M``: ``factor * length``."""
        return self.factor * check_int("length", length, minimum=self.shortest)

    def chance(self) -> float:
        """``1 / n_symbols``: one symbol guessed uniformly."""
        return 1 / self.n_symbols

    def sample_mixed(self, n: int, length: int, *, min_len: int | None, generator: torch.Generator) -> PaddedStrings:
        """``n`` strings of lengths drawn uniformly from ``min_len .. length`` (all ``length`` when None), padded.

        The draws come from ``generator`` on its device, in this order: the symbols
        ``[N, S]`` (padded positions included), then the lengths.

        Returns:
            :class:`~attnlab.data.tasks.strings.PaddedStrings`: inputs ``[N, S]``, outputs
            ``[N, factor * S]``, the lengths and the answers' lengths ``[N]``.

        Raises:
            TypeError / ValueError: naming the argument, for a bad count, length or generator; naming
                ``n`` and ``length`` and the memory they would need, for strings that cannot fit.
        """
        n = check_int("n", n, minimum=1)
        length = check_int("length", length, minimum=self.shortest)
        if min_len is not None:
            min_len = check_int("min_len", min_len, minimum=self.shortest, maximum=length)
        g = check_generator(generator)
        check_sample(self, n, length)
        inputs = self._draw(n, length, g)  # [N, S]
        if min_len is None:
            lengths = torch.full((n,), length, dtype=torch.int64, device=g.device)  # [N]
        else:
            lengths = torch.randint(min_len, length + 1, (n,), generator=g, device=g.device)  # [N]
        return PaddedStrings(inputs, self._answer_rows(inputs, lengths), lengths, self.factor * lengths)

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, self.n_symbols, (n, length), generator=generator, device=generator.device)  # [N, S]

    def _answer(self, inputs: Tensor) -> Tensor:
        n, length = inputs.shape
        return self._answer_rows(inputs, torch.full((n,), length, dtype=torch.int64, device=inputs.device))

    def _answer_rows(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        """The answers ``[N, M]`` to rows ``[N, S]`` of ``lengths [N]`` (each answer in its first columns)."""
        raise NotImplementedError


class Copy(BasicTask):
    """``copy``: the source itself."""

    name = "copy"

    def _answer_rows(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        return inputs.clone()  # [N, S]


class Reverse(BasicTask):
    """``reverse``: the source backwards (each row within its own length)."""

    name = "reverse"

    def _answer_rows(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        steps = torch.arange(inputs.shape[1], device=inputs.device)  # [S]
        # Position j of a row of length L_i takes its position L_i - 1 - j.
        back = (lengths[:, None] - 1 - steps).clamp(min=0)  # [N, S]
        return inputs.gather(1, back)  # [N, S]


class Duplicate(BasicTask):
    """``duplicate``: the source twice (``ww``, Ruoss et al.'s "duplicate string")."""

    name = "duplicate"
    factor = 2

    def _answer_rows(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        # Position j < 2 L_i of row i takes its position j mod L_i: the string, then the string again.
        wide = torch.arange(2 * inputs.shape[1], device=inputs.device)  # [2S]
        return inputs.gather(1, wide[None, :] % lengths[:, None])  # [N, 2S]


class Sort(BasicTask):
    """``sort``: the source in ascending order, duplicates kept."""

    name = "sort"

    def _answer_rows(self, inputs: Tensor, lengths: Tensor) -> Tensor:
        real = torch.arange(inputs.shape[1], device=inputs.device) < lengths[:, None]  # [N, S]
        # Past a row's length the columns sort last (above every symbol), out of its answer.
        return inputs.masked_fill(~real, self.n_symbols).sort(dim=1).values  # [N, S]


#: the generators by name, in :data:`TOKEN_TASKS` order.
BASIC_TASKS: dict[str, type[BasicTask]] = {cls.name: cls for cls in (Copy, Reverse, Duplicate, Sort)}


def target_length(task: str, length: int) -> int:
    """The target's length for a source of ``length`` tokens (EOS not counted): ``2 * length`` for duplicate.

    Raises:
        ValueError: for an unknown token task or a length below 1.
    """
    return BASIC_TASKS[check_task(task, TOKEN_TASKS)]().output_length(length)


def make_task_batch(
    task: str,
    n: int,
    length: int,
    *,
    n_symbols: int = 10,
    min_len: int | None = None,
    generator: torch.Generator | int,
) -> TaskBatch:
    """``n`` sequences of a token task: source ``[N, S]``, decoder input and output ``[N, T]``, ``T = S + 1``.

    (``T = 2S + 1`` for ``duplicate``, whose target is the source twice.)

    Every sequence has ``length`` tokens, or, with ``min_len``, a length drawn
    uniformly from ``min_len`` to ``length`` (training on mixed lengths makes a
    model less tied to one), right-padded with ``PAD`` to ``S = length``. The
    draws come from ``generator`` on its device, in this order: the tokens
    ``[N, S]`` (padded positions included), then the lengths; so the same
    generator state gives the same tokens with or without ``min_len``.

    Args:
        task: ``"copy"``, ``"reverse"``, ``"duplicate"`` (``ww``) or ``"sort"`` (ascending, duplicates kept).
        n: how many sequences, ``N >= 1``.
        length: ``S``, the (longest) source length, at least 1.
        n_symbols: content tokens, ids ``3 .. 2 + n_symbols`` (see :class:`~attnlab.data.tasks.tokens.Vocab`).
        min_len: shortest length when lengths vary, ``1 <= min_len <= length``;
            None for every sequence at ``length``.
        generator: a ``torch.Generator`` (advanced by the draws) or an integer
            seed for a new one; never torch's global generator.

    Returns:
        A :class:`~attnlab.data.tasks.tokens.TaskBatch` on the generator's device.

    Raises:
        TypeError: naming the argument, for a non-integer count or length, or a
            ``generator`` that is neither a Generator nor an integer.
        ValueError: naming the argument and value, for an unknown task, ``n``
            or ``length`` below 1, ``n_symbols`` below 2, or ``min_len`` outside 1..length.

    Example:
        >>> b = make_task_batch("reverse", 2, 4, generator=0)
        >>> b.source.shape, b.target_in.shape, b.target_out.shape
        (torch.Size([2, 4]), torch.Size([2, 5]), torch.Size([2, 5]))
        >>> torch.equal(b.target_out[:, :4], b.source.flip(1)), b.target_out[:, 4].tolist()
        (True, [2, 2])
    """
    task = check_task(task, TOKEN_TASKS)
    n = check_int("n", n, minimum=1)
    length = check_int("length", length, minimum=1)
    n_symbols = check_int("n_symbols", n_symbols, minimum=2)
    if min_len is not None:
        min_len = check_int("min_len", min_len, minimum=1)
        if min_len > length:
            raise ValueError(f"min_len ({min_len}) must not exceed length ({length})")
    g = as_generator(generator)
    strings = BASIC_TASKS[task](n_symbols=n_symbols)
    return padded_batch(strings.sample_mixed(n, length, min_len=min_len, generator=g))
