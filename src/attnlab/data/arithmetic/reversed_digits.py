"""Reversed-digit arithmetic, and the two ways its papers number the digits.

Two :class:`~attnlab.data.tasks.strings.StringGenerator` tasks, written least significant
digit first, operands and answer alike (McLeish et al. 2024, "Transformers Can Do
Arithmetic with the Right Embeddings", arXiv:2405.17399: their
``create_data_split.py --reverse_all``), in one alphabet of 13 symbols::

    0 .. 9  the digits        10  "+"        11  "*"        12  "="

* :class:`ReversedAddition` (``"reversed-addition"``): ``57 + 68 = 125`` is the input
  ``"75+86="`` and the answer ``"521"``. ``length`` is the number of digits of the
  longer operand: one operand, chosen at random, has exactly ``length`` digits, the
  other a number of digits drawn uniformly from ``1 .. length`` (Cho et al.'s
  ``uniform_fixed_max`` draw; both papers train on two independent lengths and test
  with both operands of one length, which ``equal_lengths=True`` draws). A number of
  ``d > 1`` digits has a nonzero leading digit, a one-digit number is ``0 .. 9`` (Cho
  et al.'s code; McLeish et al.'s draws ``1 .. 9`` unless ``keep_0_for_len_1``). The
  input is fixed at ``2 * length + 2`` symbols by zero-padding the shorter operand to
  ``length`` digits, and the answer at ``length + 1`` digits by zero-padding the sum:
  Cho et al.'s padded format (``padding=True``, ``pad_token='0'``: operands to the
  longer one's length, the answer to one more), every answer digit trained and
  scored; with both sides reversed it is their ``pad_revall`` ablation
  (``scripts/addition_ablation/run_pad_revall.sh``). McLeish et al. pad nothing and
  end the answer with EOS; in reversed order the padding zeros come last, so they do
  not move any real digit.
* :class:`ReversedMultiplication` (``"reversed-multiplication"``): an ``N``-digit
  number times an ``M``-digit one, ``M`` = ``multiplier_digits`` (1, 2 or 3) fixed per
  task: Cho et al.'s ``N x M`` multiplication (their ``NxMMultiplicationDataset``;
  they report ``N x 2``), reversed as McLeish et al. write theirs (up to 15 x 15, a
  task too hard for the length lab's small models). ``length`` is ``N``; the
  multiplier is ``0 .. 10**M - 1`` written with ``M`` digits (zero-padded, as Cho et
  al.); the answer is padded to ``N + M`` digits. ``123 * 45 = 5535`` at ``M = 2``:
  input ``"321*54="``, answer ``"53550"``.

The input holds ``input_length(length)`` symbols, not ``length``: the protocol's
:func:`~attnlab.data.tasks.strings.check_strings` assumes the two are equal, so a task that
wraps these generators reads the input width from :meth:`ReversedAddition.input_length`.
Output symbols are the digits ``0 .. 9``, the same numbers as the input's digits: a
lab that maps both alphabets with one offset gives a digit one token id everywhere.

Positions. Both papers give every digit the position of its significance, read from
the symbols; :func:`~attnlab.data.arithmetic.numbering.digit_positions` and
:func:`~attnlab.data.arithmetic.numbering.coupled_positions` compute them for a
whole laid-out sequence (input, separators, answer), in any vocabulary:

* **Abacus** (McLeish et al.; ``abacus.py`` in github.com/mcleish7/arithmetic): a
  digit's position is its index ``1, 2, 3, ...`` within its run of consecutive digits,
  every other token is 0. Reversed, the index is the significance plus one.
* **Position coupling** (Cho et al. 2024, "Position Coupling: Improving Length
  Generalization of Arithmetic Transformers Using Task Structure", arXiv:2405.20671;
  ``src/data/addition.py``, ``AdditionDatasetWithCoupledPositions`` in
  github.com/HanseulJo/position-coupling): digits of equal significance in the
  operands and the answer share one position id; the operator and ``=`` sit just
  below the units; the tokens the tokenizer adds (BOS, EOS, padding) get 0. With the
  offset of evaluation (``start = 1``) that is: operators 1, the digit of
  significance ``i`` ``i + 2``, everything else 0.

With operands written least significant first both are functions of the prefix: a
token's position depends on the tokens before it only, so an answer generated one
digit at a time gets its positions as it grows. On these reversed formats the two
rules number the digits alike (coupled = Abacus + 1); they differ in the operators
(0 or 1) and in how training moves the ids (an offset of ``0 .. 100`` drawn once per
batch for Abacus, as its authors' code draws it; a start drawn per sample over the whole
table for coupling):
:mod:`attnlab.encodings.abacus`, :mod:`attnlab.encodings.coupling`.

Shape notation: ``N`` strings, ``B`` sequences, ``L`` a sequence's length (an operand's digits
for :func:`addition_strings` and :func:`multiplication_strings`; ``W`` in the code's comments),
``M`` the multiplier's digits.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab._validate import check_bool, check_int
from attnlab.data.arithmetic.alphabet import EQUALS, PLUS, SYMBOLS, TIMES, decode, encode  # noqa: F401  (decode, encode: the examples use them)
from attnlab.data.arithmetic.numbering import task_positions
from attnlab.data.tasks.strings import StringGenerator, Strings, check_sample

__all__ = ["ReversedAddition", "ReversedMultiplication", "addition_strings", "multiplication_strings"]

# -- drawing and computing ---------------------------------------------------------------------


def _check_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU generator (strings are drawn on the CPU), got one on "
                         f"{generator.device}")
    return generator


def _check_digits(name: str, digits: object) -> Tensor:
    """``digits`` if it is an int64 ``[N, W]`` tensor of values 0 .. 9."""
    if not isinstance(digits, Tensor) or digits.dtype != torch.int64 or digits.dim() != 2:
        what = f"{digits.dtype} {list(digits.shape)}" if isinstance(digits, Tensor) else type(digits).__name__
        raise TypeError(f"{name} must be int64 digits [N, W], got {what}")
    if digits.numel() and (int(digits.min()) < 0 or int(digits.max()) > 9):
        raise ValueError(f"{name} must hold digits 0..9, got values {int(digits.min())}..{int(digits.max())}")
    return digits


def _draw_numbers(counts: Tensor, width: int, generator: torch.Generator) -> Tensor:
    """Numbers of ``counts [N]`` digits as reversed digits ``[N, width]``, zero past each number's last digit.

    Every digit is uniform over 0 .. 9 except the leading one of a number of more than
    one digit, uniform over 1 .. 9 (so the number has exactly its count of digits).
    """
    n = counts.shape[0]
    digits = torch.randint(0, 10, (n, width), generator=generator)  # [N, W]
    leading = torch.randint(1, 10, (n,), generator=generator)  # [N]
    column = torch.arange(width)[None, :]  # [1, W]
    top = (column == (counts - 1)[:, None]) & (counts > 1)[:, None]  # [N, W]: the leading digit's column
    digits = torch.where(top, leading[:, None], digits)
    return digits.masked_fill(column >= counts[:, None], 0)  # [N, W]


def _carry(columns: Tensor) -> Tensor:
    """Column sums ``[N, W]`` (least significant first, each >= 0) as digits ``[N, W]``, carrying to the left.

    The caller leaves room for the last carry (the result fits in ``W`` digits).
    """
    digits = torch.empty_like(columns)
    carry = torch.zeros_like(columns[:, 0])  # [N]
    for i in range(columns.shape[1]):
        total = columns[:, i] + carry
        digits[:, i] = total % 10
        carry = total // 10
    return digits


def addition_strings(a: Tensor, b: Tensor) -> Strings:
    """The reversed-addition strings of the operands ``a`` and ``b`` (reversed digits, int64 ``[N, L]`` each).

    Input ``a + b =`` (``2L + 2`` symbols), output the sum's ``L + 1`` digits, least
    significant first (the last is the carry out, 0 when the sum has ``L`` digits).

    Raises:
        TypeError / ValueError: for operands that are not int64 digits ``[N, L]`` of one shape.

    Example:
        >>> s = addition_strings(encode("75")[None], encode("86")[None])  # 57 + 68 = 125
        >>> decode(s.inputs[0]), decode(s.outputs[0])
        ('75+86=', '521')
    """
    a, b = _check_digits("a", a), _check_digits("b", b)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have one shape [N, W], got {list(a.shape)} and {list(b.shape)}")
    n, width = a.shape
    columns = torch.cat([a + b, a.new_zeros(n, 1)], dim=1)  # [N, W + 1]: room for the carry out
    plus, equals = a.new_full((n, 1), PLUS), a.new_full((n, 1), EQUALS)
    inputs = torch.cat([a, plus, b, equals], dim=1)  # [N, 2W + 2]
    return Strings(inputs, _carry(columns))


def multiplication_strings(a: Tensor, b: Tensor) -> Strings:
    """The reversed-multiplication strings of ``a [N, L]`` times ``b [N, M]`` (reversed digits, int64).

    Input ``a * b =`` (``L + M + 2`` symbols), output the product's ``L + M`` digits,
    least significant first, zero-padded (a product of an ``L``- and an ``M``-digit
    number has at most ``L + M`` digits).

    Raises:
        TypeError / ValueError: for operands that are not int64 digits ``[N, L]`` / ``[N, M]``
            with one ``N``.

    Example:
        >>> s = multiplication_strings(encode("321")[None], encode("54")[None])  # 123 * 45 = 5535
        >>> decode(s.inputs[0]), decode(s.outputs[0])
        ('321*54=', '53550')
    """
    a, b = _check_digits("a", a), _check_digits("b", b)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must hold as many numbers, got {a.shape[0]} and {b.shape[0]}")
    n, width = a.shape
    m = b.shape[1]
    # Schoolbook: column i + j collects a_i * b_j, then the carries run once, left to right.
    columns = a.new_zeros(n, width + m)  # [N, W + M]
    for j in range(m):
        columns[:, j:j + width] += a * b[:, j:j + 1]  # [N, W] * [N, 1]
    times, equals = a.new_full((n, 1), TIMES), a.new_full((n, 1), EQUALS)
    inputs = torch.cat([a, times, b, equals], dim=1)  # [N, W + M + 2]
    return Strings(inputs, _carry(columns))


def _check_sample(task: StringGenerator, n: int, length: int, generator: object) -> tuple[int, int, torch.Generator]:
    """``n``, ``length`` and ``generator`` checked, and the strings bounded before any is drawn."""
    n = check_int("n", n, minimum=0)
    length = check_int("length", length, minimum=1)
    generator = _check_generator(generator)
    check_sample(task, n, length)
    return n, length, generator


class ReversedAddition:
    """``a + b`` with operands and answer least significant digit first (McLeish et al. 2024's format).

    ``length`` is the longer operand's number of digits (module docstring): the input is
    ``a + b =`` with both operands zero-padded to ``length`` digits (``2 * length + 2``
    symbols), the output the sum's ``length + 1`` digits, zero-padded.

    Args:
        equal_lengths: both operands have exactly ``length`` digits, as in the papers' test
            sets (Cho et al.'s ``val_long``: ``min_n_digits = max_n_digits``; McLeish et al.'s
            grid at ``n = m``); by default only one does and the other has ``1 .. length``.

    Attributes:
        name: ``"reversed-addition"``.
        input_size: 13 (:data:`SYMBOLS`).
        output_size: 10 (the digits).
        shortest: 1.
        equal_lengths: as given.

    Raises:
        TypeError: for an ``equal_lengths`` that is not a bool.

    Example:
        >>> task = ReversedAddition()
        >>> s = task.sample(2, 3, generator=torch.Generator().manual_seed(0))
        >>> s.inputs.shape, s.outputs.shape, task.input_length(3), task.output_length(3)
        (torch.Size([2, 8]), torch.Size([2, 4]), 8, 4)
    """

    name = "reversed-addition"
    #: the rules it can number its tokens by (:func:`attnlab.data.arithmetic.numbering.task_positions`)
    position_rules = ("abacus", "coupling")
    input_size = len(SYMBOLS)
    output_size = 10
    shortest = 1

    def __init__(self, *, equal_lengths: bool = False) -> None:
        self.equal_lengths = check_bool("equal_lengths", equal_lengths)

    def __repr__(self) -> str:
        return f"ReversedAddition(equal_lengths={self.equal_lengths})"

    def input_length(self, length: int) -> int:
        """The input's symbols for operands of up to ``length`` digits: ``2 * length + 2``."""
        return 2 * length + 2

    def output_length(self, length: int) -> int:
        """The answer's digits: ``length + 1`` (a carry may make the sum one digit longer)."""
        return length + 1

    def sample(self, n: int, length: int, *, generator: torch.Generator) -> Strings:
        """``n`` sums whose longer operand has exactly ``length`` digits, drawn from ``generator``.

        Which operand is the longer one is a fair coin; the other has ``1 .. length`` digits,
        uniformly (``length`` with ``equal_lengths``); the digits are uniform, a leading one
        nonzero (module docstring).

        Returns:
            :class:`~attnlab.data.tasks.strings.Strings`: inputs int64 ``[N, 2 * length + 2]``,
            outputs int64 ``[N, length + 1]``, every output position scored.

        Raises:
            TypeError / ValueError: for ``n < 0``, ``length < 1``, or a generator that is
                not a CPU ``torch.Generator``; naming ``n`` and ``length`` and the memory they
                would need, for strings that cannot fit.
        """
        n, length, generator = _check_sample(self, n, length, generator)
        longer_first = torch.randint(0, 2, (n,), generator=generator).bool()  # [N]
        other = torch.randint(1, length + 1, (n,), generator=generator)  # [N]
        full = torch.full((n,), length, dtype=torch.int64)
        if self.equal_lengths:
            other = full
        a = _draw_numbers(torch.where(longer_first, full, other), length, generator)  # [N, W]
        b = _draw_numbers(torch.where(longer_first, other, full), length, generator)  # [N, W]
        return addition_strings(a, b)

    def chance(self) -> float:
        """0.1: a digit guessed without the input.

        Every answer digit below the longer operand's leading one is uniform over the ten
        digits; the last one or two (the leading digit, the carry out, often 0) are not,
        so the best input-blind guess scores a little more at short lengths, tending to
        0.1 as ``length`` grows.
        """
        return 0.1


    def position_ids(self, sequence: Tensor, rule: str, *, first_symbol: int = 0, slots: Sequence[int] = ()) -> Tensor:
        """The position ids ``[B, L]`` of a laid-out sequence ``[B, L]`` by ``rule`` (``"abacus"`` or ``"coupling"``).

        Symbol ``s`` is id ``first_symbol + s``; ``slots`` are the ids standing for answer digits
        not written yet (:func:`attnlab.data.arithmetic.numbering.task_positions`).

        Raises:
            ValueError: for another rule.
        """
        return task_positions(rule, sequence, first_symbol=first_symbol, slots=slots)

class ReversedMultiplication:
    """An ``N``-digit number times an ``M``-digit one, least significant digit first (Cho et al.'s ``N x M``).

    ``length`` is ``N``; ``M`` (``multiplier_digits``) is fixed per task. The input is
    ``a * b =`` (``N + M + 2`` symbols), the output the product's ``N + M`` digits,
    zero-padded.

    Args:
        multiplier_digits: ``M``, 1 to 3 (Cho et al. report ``N x 2``, the default).

    Attributes:
        name: ``"reversed-multiplication"``.
        input_size: 13 (:data:`SYMBOLS`).
        output_size: 10 (the digits).
        shortest: 1.
        multiplier_digits: ``M``.

    Raises:
        TypeError / ValueError: for ``multiplier_digits`` outside 1 .. 3.

    Example:
        >>> task = ReversedMultiplication(multiplier_digits=2)
        >>> s = task.sample(2, 5, generator=torch.Generator().manual_seed(0))
        >>> s.inputs.shape, s.outputs.shape
        (torch.Size([2, 9]), torch.Size([2, 7]))
    """

    name = "reversed-multiplication"
    #: the rules it can number its tokens by (:func:`attnlab.data.arithmetic.numbering.task_positions`)
    position_rules = ("abacus", "coupling")
    input_size = len(SYMBOLS)
    output_size = 10
    shortest = 1

    def __init__(self, *, multiplier_digits: int = 2) -> None:
        self.multiplier_digits = check_int("multiplier_digits", multiplier_digits, minimum=1, maximum=3)

    def __repr__(self) -> str:
        return f"ReversedMultiplication(multiplier_digits={self.multiplier_digits})"

    def input_length(self, length: int) -> int:
        """The input's symbols: ``length + M + 2``."""
        return length + self.multiplier_digits + 2

    def output_length(self, length: int) -> int:
        """The answer's digits: ``length + M``."""
        return length + self.multiplier_digits

    def sample(self, n: int, length: int, *, generator: torch.Generator) -> Strings:
        """``n`` products of an exactly ``length``-digit number and an ``M``-digit one, drawn from ``generator``.

        The multiplier is uniform over ``0 .. 10**M - 1``, written with ``M`` digits.

        Returns:
            :class:`~attnlab.data.tasks.strings.Strings`: inputs int64 ``[N, length + M + 2]``,
            outputs int64 ``[N, length + M]``, every output position scored.

        Raises:
            TypeError / ValueError: for ``n < 0``, ``length < 1``, or a generator that is
                not a CPU ``torch.Generator``; naming ``n`` and ``length`` and the memory they
                would need, for strings that cannot fit.
        """
        n, length, generator = _check_sample(self, n, length, generator)
        a = _draw_numbers(torch.full((n,), length, dtype=torch.int64), length, generator)  # [N, W]
        b = torch.randint(0, 10, (n, self.multiplier_digits), generator=generator)  # [N, M]
        return multiplication_strings(a, b)

    def chance(self) -> float:
        """0.1: a digit guessed without the input (the leading answer digits are less even; see ReversedAddition)."""
        return 0.1

    def position_ids(self, sequence: Tensor, rule: str, *, first_symbol: int = 0, slots: Sequence[int] = ()) -> Tensor:
        """The position ids ``[B, L]`` of a laid-out sequence ``[B, L]`` by ``rule`` (``"abacus"`` or ``"coupling"``).

        Symbol ``s`` is id ``first_symbol + s``; ``slots`` are the ids standing for answer digits
        not written yet (:func:`attnlab.data.arithmetic.numbering.task_positions`).

        Raises:
            ValueError: for another rule.
        """
        return task_positions(rule, sequence, first_symbol=first_symbol, slots=slots)
