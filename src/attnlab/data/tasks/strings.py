"""The protocol of a string task: a generator of input strings and their answers, in the task's own alphabets.

Every token task of the length lab is a :class:`StringGenerator`: attnlab's own copy,
reverse, duplicate and sort (:mod:`attnlab.data.tasks.basic`), the 15 tasks of
Delétang et al. 2023 that Ruoss et al. 2023 average over (:mod:`attnlab.data.chomsky`),
Kazemnejad et al. 2023's (:mod:`attnlab.data.kazemnejad`) and reversed-digit arithmetic
(:mod:`attnlab.data.arithmetic`). A generator knows its alphabets and draws ``n`` inputs of
one length with their outputs. Nothing else: the lab wraps it in the one
:class:`~attnlab.data.tasks.token_task.TokenTask`, which maps the symbols to the lab's token
ids, pads, lays the strings out for each architecture and scores them.

A generator may say more, each by a member of its own (the task reads it where it is):

* ``input_length(length)``: the input's width when ``length`` counts something else
  (:func:`input_length`);
* ``with_symbols(n_symbols)``: the same task over ``n_symbols`` symbols, where the lab's
  ``--symbols`` sizes the alphabet (:func:`sized`);
* ``sample_mixed(n, length, *, min_len, generator)``: a batch of lengths ``min_len .. length``
  drawn at once, as :class:`PaddedStrings` (without it, the task draws one length at a time);
* ``position_rules`` and ``position_ids(sequence, rule, *, first_symbol, slots)``: the
  rules by which it numbers its tokens for an encoding that takes positions from the data
  (Abacus, position coupling), and the numbering itself.

Symbols are small integers: an input symbol is ``0 .. input_size - 1`` and an
output symbol ``0 .. output_size - 1``, as in the reference code
(google-deepmind/neural_networks_chomsky_hierarchy, whose tasks one-hot encode
exactly these). A generator draws from the ``torch.Generator`` it is given and from
nothing else (never Python's or numpy's global state), so a seed gives the same
strings on every machine.

Shape notation: ``N`` strings, ``L`` input length, ``M`` output length.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, cast, runtime_checkable

import torch
from torch import Tensor

from attnlab._limits import check_memory
from attnlab._validate import check_int
from attnlab.catalog import TOKEN_TASKS

__all__ = ["BYTES_PER_SYMBOL", "DrawnStrings", "PaddedStrings", "StringGenerator", "Strings", "check_generator",
           "check_sample", "check_strings", "input_length", "sample_bytes", "sized"]

#: at most the bytes a draw holds per symbol of its strings (input, answer and EOS), the lab's batch of them
#: included: measured from 8 (copy's strings alone) to 60 (the bracket tasks, drawn through Python's floats and
#: strings), rounded up
BYTES_PER_SYMBOL = 64


class Strings(NamedTuple):
    """``n`` strings of one input length and their answers, as symbols.

    Attributes:
        inputs: int64 ``[N, L]``, input symbols ``0 .. input_size - 1`` (``L`` is the task's
            ``input_length(length)`` where it defines one, else ``length``).
        outputs: int64 ``[N, M]``, ``M = output_length(L)``, output symbols ``0 .. output_size - 1``.
            Every position is trained on (the reference's loss sums over all of them).
        scored: bool ``[N, M]``, True where an output position counts towards accuracy,
            or None for all of them (the reference's ``accuracy_mask``: binary addition
            pads its answer with zeros after a termination symbol, and those are not scored).
    """

    inputs: Tensor
    outputs: Tensor
    scored: Tensor | None = None


class PaddedStrings(NamedTuple):
    """Strings of several lengths drawn at once, right-padded (what ``sample_mixed`` gives).

    Attributes:
        inputs: int64 ``[N, S]``, row ``i``'s symbols in its first ``lengths[i]`` columns; the
            columns after them are not part of the string (the task writes padding there).
        outputs: int64 ``[N, M]``, row ``i``'s answer in its first ``output_lengths[i]`` columns.
        lengths: int64 ``[N]``, each input's length.
        output_lengths: int64 ``[N]``, each answer's length.
    """

    inputs: Tensor
    outputs: Tensor
    lengths: Tensor
    output_lengths: Tensor


@runtime_checkable
class StringGenerator(Protocol):
    """What a string task is: alphabets, an output length, and a sampler.

    Attributes:
        name: the task's name, as ``--task`` takes it (``"even-pairs"``).
        input_size: symbols in the input alphabet.
        output_size: symbols in the output alphabet.
        shortest: the shortest input length the task is defined at.

    Raises:
        TypeError: when instantiated: a protocol is implemented, not built (``isinstance`` checks it).
    """

    name: str
    input_size: int
    output_size: int
    shortest: int

    def output_length(self, length: int) -> int:
        """``M``, the output length for inputs of ``length`` symbols."""
        ...

    def sample(self, n: int, length: int, *, generator: torch.Generator) -> Strings:
        """``n`` inputs of ``length`` symbols and their outputs, drawn from ``generator``."""
        ...

    def chance(self) -> float:
        """The token accuracy of the best guess that ignores the input (what a model that learnt nothing scores)."""
        ...


def check_generator(generator: object) -> torch.Generator:
    """``generator`` if it is a ``torch.Generator`` (a string task draws from nothing else).

    Raises:
        TypeError: for anything else.
    """
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return generator


class DrawnStrings:
    """A :class:`StringGenerator` written as "draw the inputs, then answer them": :meth:`sample`.

    A subclass says how to draw ``n`` inputs of one length (``_draw``) and what the
    answer to an input is (``_answer``); the outputs are then a function of the inputs,
    and :meth:`answer` takes inputs written by hand. A task whose variable-length
    answers end in a :attr:`terminator` and are padded after it scores only the
    positions up to it (the reference's ``accuracy_mask``).

    Attributes:
        terminator: the output symbol that ends an answer, or None where every position is scored.
    """

    # Plain annotations, not ClassVar: the StringGenerator protocol asks for these attributes.
    name: str
    input_size: int
    shortest: int = 1
    terminator: int | None = None

    def sample(self, n: int, length: int, *, generator: torch.Generator) -> Strings:
        """``n`` inputs of ``length`` symbols drawn from ``generator``, and their answers.

        Args:
            n: how many strings.
            length: ``L``, the input length, at least :attr:`shortest`.
            generator: the only source of randomness.

        Returns:
            :class:`Strings`: inputs int64 ``[N, L]``, outputs int64 ``[N, M]``
            (``M = output_length(L)``), scored bool ``[N, M]`` or None.

        Raises:
            TypeError: if ``generator`` is not a ``torch.Generator`` or ``n``/``length`` not integers.
            ValueError: if ``n < 1`` or ``length < shortest``, or naming both and the memory they
                would need, for strings that cannot fit (:func:`check_sample`).
        """
        n = check_int("n", n, minimum=1)
        length = check_int("length", length, minimum=self.shortest)
        generator = check_generator(generator)
        check_sample(cast(StringGenerator, self), n, length)
        inputs = self._draw(n, length, generator)
        outputs = self._answer(inputs)
        return Strings(inputs, outputs, self.scored(outputs))

    def answer(self, inputs: Tensor) -> Tensor:
        """The outputs int64 ``[N, M]`` for the inputs int64 ``[N, L]`` (what :meth:`sample` pairs them with).

        Raises:
            TypeError: if ``inputs`` is not an int64 tensor.
            ValueError: if ``inputs`` is not ``[N, L]`` with ``L >= shortest``, has a symbol outside
                ``0 .. input_size - 1``, or is not a string of the task (a malformed expression).
        """
        if not isinstance(inputs, Tensor) or inputs.dtype != torch.int64:
            raise TypeError(f"inputs must be an int64 tensor, got {getattr(inputs, 'dtype', type(inputs).__name__)}")
        if inputs.dim() != 2 or inputs.shape[0] < 1 or inputs.shape[1] < self.shortest:
            raise ValueError(f"inputs must be [N, L] with N >= 1 and L >= {self.shortest}, got {tuple(inputs.shape)}")
        if int(inputs.min()) < 0 or int(inputs.max()) >= self.input_size:
            raise ValueError(f"inputs must hold symbols 0..{self.input_size - 1} for {self.name!r}")
        return self._answer(inputs.cpu())

    def scored(self, outputs: Tensor) -> Tensor | None:
        """Bool ``[N, M]`` for outputs ``[N, M]`` (the answers to inputs ``[N, L]``): True up to and including
        the first :attr:`terminator`; None when the task has none.

        The reference's ``accuracy_mask`` (tasks/cs/binary_addition.py and others):
        ``arange(M) <= argmax(target)``, the first position of the largest output
        symbol, which is the terminator.
        """
        if self.terminator is None:
            return None
        first = (outputs == self.terminator).to(torch.uint8).argmax(dim=1, keepdim=True)  # [N, 1]
        return torch.arange(outputs.shape[1]) <= first  # [N, M]

    # What a subclass writes.
    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        """``n`` inputs int64 ``[N, L]`` of ``length`` symbols, as the reference draws them."""
        raise NotImplementedError

    def _answer(self, inputs: Tensor) -> Tensor:
        """The outputs int64 ``[N, M]`` for checked inputs ``[N, L]``."""
        raise NotImplementedError


def input_length(task: StringGenerator, length: int) -> int:
    """The input's width in symbols at ``length``: ``length`` itself, unless the task says otherwise.

    A task whose ``length`` counts something else (arithmetic: the digits of an operand, so
    ``a + b =`` is ``2 * length + 2`` symbols) defines ``input_length(length)``.
    """
    width = getattr(task, "input_length", None)
    return length if width is None else int(width(length))


def sized(task: StringGenerator, n_symbols: int | None) -> StringGenerator:
    """The task over ``n_symbols`` symbols where the lab sizes its alphabet (``with_symbols``); None: the task itself.

    The lab's ``--symbols`` sizes attnlab's own token tasks; every benchmark task has
    alphabets of its own, and refuses a size (it would be recorded and not used).

    Raises:
        ValueError: naming ``n_symbols``, its value and the task, for a size given to a task
            whose vocabulary is fixed; what ``with_symbols`` raises for a bad size.
    """
    if n_symbols is None:
        return task
    resize = getattr(task, "with_symbols", None)
    if resize is None:
        raise ValueError(f"n_symbols {n_symbols!r}: the {task.name} task's vocabulary is fixed ({task.input_size} "
                         f"input and {task.output_size} output symbols); n_symbols sizes the alphabet of "
                         f"{', '.join(TOKEN_TASKS)} only")
    return cast(StringGenerator, resize(n_symbols))


def sample_bytes(task: StringGenerator, n: int, length: int) -> int:
    """At most the bytes ``n`` strings of ``task`` at ``length`` hold while they are drawn and made a batch.

    :data:`BYTES_PER_SYMBOL` for each symbol of an input (``input_length(length)`` wide), its
    answer (``output_length(length)``) and the answer's EOS. A formula: nothing is drawn.
    """
    return n * (input_length(task, length) + int(task.output_length(length)) + 1) * BYTES_PER_SYMBOL


def check_sample(task: StringGenerator, n: int, length: int, *, sizes: str | None = None) -> None:
    """Refuse ``n`` strings of ``task`` at ``length`` before any is drawn, if they cannot fit in memory.

    Args:
        sizes: the caller's arguments that set the size, as the message names them
            (default ``"n N x length L"``).

    Raises:
        ValueError: ``"n 1000000 x length 1000000: 1,000,000 strings of the copy task (2,000,001 symbols
            each) would need 128 TB, more than the 16 GB available"``.
    """
    width = input_length(task, length) + int(task.output_length(length)) + 1
    check_memory(f"{sizes or f'n {n} x length {length}'}: {n:,} strings of the {task.name} task ({width:,} symbols "
                 "each)", sample_bytes(task, n, length))


def check_strings(task: StringGenerator, strings: Strings, n: int, length: int) -> Strings:
    """``strings`` if they are what ``task.sample(n, length)`` promises: shapes, dtypes, alphabets.

    Raises:
        ValueError: naming the task and what is wrong.
    """
    inputs, outputs, scored = strings
    M = task.output_length(length)
    width = input_length(task, length)
    problems = []
    if inputs.dtype != torch.int64 or tuple(inputs.shape) != (n, width):
        problems.append(f"inputs are {inputs.dtype} {tuple(inputs.shape)}, not int64 {(n, width)}")
    if outputs.dtype != torch.int64 or tuple(outputs.shape) != (n, M):
        problems.append(f"outputs are {outputs.dtype} {tuple(outputs.shape)}, not int64 {(n, M)}")
    if inputs.numel() and (int(inputs.min()) < 0 or int(inputs.max()) >= task.input_size):
        problems.append(f"an input symbol is outside 0..{task.input_size - 1}")
    if outputs.numel() and (int(outputs.min()) < 0 or int(outputs.max()) >= task.output_size):
        problems.append(f"an output symbol is outside 0..{task.output_size - 1}")
    if scored is not None and (scored.dtype != torch.bool or scored.shape != outputs.shape):
        problems.append(f"scored is {scored.dtype} {tuple(scored.shape)}, not bool {(n, M)}")
    if problems:
        raise ValueError(f"task {task.name!r} at length {length}: " + "; ".join(problems))
    return strings
