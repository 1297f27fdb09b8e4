"""Fully bracketed arithmetic mod 5: the deterministic context-free tasks "modular arithmetic" and "solve equation".

Delétang et al. 2023's grammar (google-deepmind/randomized_positional_encodings,
tasks/dcf/modular_arithmetic_brackets.py) makes an expression of exactly ``L``
characters. Short ones are a digit ``d`` (``L = 1``), ``-d``, ``(d)``, ``(-d)``
(``L = 2, 3, 4``); a longer one is ``(left op right)`` with ``left`` of a length
uniform in ``1 .. L - 4``, ``right`` the rest, and ``op`` uniform on the task's
operators. Digits are uniform on 0..4. Every binary operation has its own
brackets, so there is no precedence to resolve.

* ``modular-arithmetic-brackets``: the expression (operators ``+ - *``) -> its value mod 5.
* ``solve-equation``: an expression with ``+ -`` only, one of its digits replaced by
  ``x``, then ``=`` and the expression's value -> the replaced digit.

:func:`evaluate` reads an expression as a linear form ``a * x + b`` (mod 5), so
one reader serves both tasks and :meth:`~ChomskyTask.answer` takes hand-written
inputs. Drawing happens in Python (a tree per string) from uniforms drawn from
the ``torch.Generator`` at once: the same distribution as the reference's
``np.random`` calls, not the same stream.

Shape notation: ``N`` strings, ``L`` input length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.data.chomsky.base import ChomskyTask, decode, encode

__all__ = ["ModularArithmeticBrackets", "SolveEquation", "draw_expression", "evaluate"]

MODULUS = 5
_SHORT = ("{}", "-{}", "({})", "(-{})")  # the reference's expressions of 1, 2, 3 and 4 characters


def draw_expression(length: int, uniforms: list[float], *, operators: str, modulus: int = MODULUS) -> str:
    """One bracketed expression of exactly ``length`` characters, drawn as the reference draws it.

    Args:
        length: ``L >= 1``, the number of characters.
        uniforms: at least ``L`` floats in ``[0, 1)``, consumed from the front (a leaf takes one and
            makes at least one character; ``(left op right)`` takes two and makes three).
        operators: the binary operators to draw from (``"+-*"`` or ``"+-"``).
        modulus: digits are drawn from ``0 .. modulus - 1``.
    """
    draws = iter(uniforms)

    def pick(k: int) -> int:  # uniform on 0 .. k - 1
        return min(int(next(draws) * k), k - 1)

    out: list[str] = []
    todo: list[int | str] = [length]  # a stack of lengths still to expand and characters to write
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
        elif item <= 4:
            out.append(_SHORT[item - 1].format(pick(modulus)))
        else:
            left = 1 + pick(item - 4)
            op = operators[pick(len(operators))]
            todo.extend([")", item - 3 - left, op, left, "("])  # popped as ( left op right )
    return "".join(out)


def evaluate(text: str, *, modulus: int = MODULUS) -> tuple[int, int]:
    """``(a, b)`` such that the bracketed expression ``text`` equals ``a * x + b`` (mod ``modulus``).

    ``text`` is a digit, ``x``, ``-`` before a digit or ``x``, or ``(e)`` / ``(e op e)``
    with ``op`` in ``+ - *``; a product must have ``x`` on one side at most.

    Raises:
        ValueError: if ``text`` is not such an expression.
    """
    values: list[tuple[int, int]] = []  # operands waiting for their operator
    pending: list[str] = []  # "(" and binary operators, innermost last
    expect_operand, negate = True, False
    for ch in text:
        if ch.isdigit() or ch == "x":
            if not expect_operand:
                raise ValueError(f"{text!r}: an operand follows an operand")
            a, b = (1, 0) if ch == "x" else (0, int(ch))
            values.append((-a % modulus, -b % modulus) if negate else (a, b))
            expect_operand, negate = False, False
        elif negate:
            raise ValueError(f"{text!r}: a unary minus must precede a digit or x")
        elif ch == "(" and expect_operand:
            pending.append(ch)
        elif ch == "-" and expect_operand:
            negate = True
        elif ch in "+-*" and not expect_operand:
            pending.append(ch)
            expect_operand = True
        elif ch == ")" and not expect_operand and pending:
            op = pending.pop()
            if op != "(":
                right, left = values.pop(), values.pop()
                values.append(_apply(op, left, right, modulus, text))
                if not pending or pending.pop() != "(":
                    raise ValueError(f"{text!r}: a bracket holds more than one operator")
        else:
            raise ValueError(f"{text!r}: unexpected {ch!r}")
    if pending or len(values) != 1 or expect_operand:
        raise ValueError(f"{text!r} is not one complete bracketed expression")
    return values[0]


def _apply(op: str, left: tuple[int, int], right: tuple[int, int], modulus: int, text: str) -> tuple[int, int]:
    """``left op right`` for linear forms ``(a, b)``, mod ``modulus``."""
    (a1, b1), (a2, b2) = left, right
    if op == "+":
        return (a1 + a2) % modulus, (b1 + b2) % modulus
    if op == "-":
        return (a1 - a2) % modulus, (b1 - b2) % modulus
    if a1 and a2:
        raise ValueError(f"{text!r}: x times x is not linear")
    return (a1 * b2 + a2 * b1) % modulus, (b1 * b2) % modulus


class ModularArithmeticBrackets(ChomskyTask):
    """A bracketed expression over digits 0..4 and ``+ - *`` -> its value mod 5.

    tasks/dcf/modular_arithmetic_brackets.py with ``modulus=5, mult=True`` (Ruoss
    et al.'s experiments/constants.py). Symbols: 0..4 the digits, 5 ``+``, 6 ``-``,
    7 ``*``, 8 ``(``, 9 ``)``, 10 ``x`` (in the alphabet, ``input_size = 11``, but
    never drawn). Example: ``((1-4)*-2)`` = (-3)(-2) = 6 -> 1.
    """

    name = "modular-arithmetic-brackets"
    level = "dcf"
    alphabet = "01234+-*()x"
    input_size = 11
    output_size = MODULUS

    def chance(self) -> float:
        """0.31: the share of answers equal to 0, averaged over Ruoss et al.'s test lengths 41..500.

        Not 1/5: a product is 0 whenever one side is (9/25 for two digits), and the
        grammar nests products at every depth, so 0 grows more frequent with ``L``.
        The exact share, from the grammar's recursion over the value's distribution
        (uniform up to ``L = 4``; then the average over the split and the operator):
        0.253 at ``L = 5``, 0.263 at 10, 0.292 at 40, 0.303 at 100, 0.316 at 500
        (mean 0.270 over 1..40, 0.310 over 41..500). Always guessing 0 beats 1/5.
        """
        return 0.31

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        uniforms = torch.rand(n, length, generator=generator, dtype=torch.float64).tolist()
        return encode([draw_expression(length, u, operators="+-*") for u in uniforms], self.alphabet)

    def _answer(self, inputs: Tensor) -> Tensor:
        answers = []
        for text in decode(inputs, self.alphabet):
            a, b = evaluate(text)
            if a:
                raise ValueError(f"{text!r}: x has no value in {self.name!r}")
            answers.append(b)
        return torch.tensor(answers, dtype=torch.int64).unsqueeze(1)  # [N, 1]


class SolveEquation(ChomskyTask):
    """``expression(x) = v`` mod 5 -> ``x``, the digit the expression had where ``x`` now stands.

    tasks/dcf/solve_equation.py with ``modulus=5``: an expression of ``L - 2``
    characters with ``+ -`` only (the reference's default ``mult=False``); a
    position is drawn uniformly and the first digit at or after it (cyclically)
    becomes ``x``; then ``=`` and the value (one digit). Symbols: 0..4 the digits,
    5 ``+``, 6 ``-``, 7 ``(``, 8 ``)``, 9 ``x``, 10 ``=``. Example: ``((x-4)+2)=1``
    -> ``x - 2 = 1``, ``x = 3``.

    Below ``L = 3`` there is no room for ``x=v``: as in the reference, the input is
    all 0s and the answer 0 (whatever the input).
    """

    name = "solve-equation"
    level = "dcf"
    alphabet = "01234+-()x="
    input_size = 11
    output_size = MODULUS

    def chance(self) -> float:
        """0.2 = 1/5: ``x`` replaces a digit chosen by position only, and digits are uniform on 0..4
        (below ``L = 3`` the answer is always 0, chance 1)."""
        return 0.2

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        if length < 3:
            return torch.zeros(n, length, dtype=torch.int64)
        uniforms = torch.rand(n, length, generator=generator, dtype=torch.float64).tolist()
        texts = []
        for u in uniforms:
            expr = draw_expression(length - 2, u[1:], operators="+-")
            _, value = evaluate(expr)
            i = min(int(u[0] * len(expr)), len(expr) - 1)
            while not expr[i].isdigit():
                i = (i + 1) % len(expr)
            texts.append(f"{expr[:i]}x{expr[i + 1:]}={value}")
        return encode(texts, self.alphabet)

    def _answer(self, inputs: Tensor) -> Tensor:
        if inputs.shape[1] < 3:
            return torch.zeros(inputs.shape[0], 1, dtype=torch.int64)
        answers = []
        for text in decode(inputs, self.alphabet):
            sides = text.split("=")
            if len(sides) != 2:
                raise ValueError(f"{text!r}: an equation has one '='")
            (a1, b1), (a2, b2) = evaluate(sides[0]), evaluate(sides[1])
            a, b = (a1 - a2) % MODULUS, (b2 - b1) % MODULUS  # a * x = b
            if a == 0:  # 5 is prime: any other coefficient has an inverse
                raise ValueError(f"{text!r}: x cancels out, so it has no single value")
            answers.append(b * pow(a, -1, MODULUS) % MODULUS)
        return torch.tensor(answers, dtype=torch.int64).unsqueeze(1)  # [N, 1]
