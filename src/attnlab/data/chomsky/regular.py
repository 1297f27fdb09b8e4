"""The four regular tasks of Delétang et al. 2023: a finite automaton reads the input and names one class.

Each answer is a single class (``output_length`` is 1), as in the reference
(google-deepmind/randomized_positional_encodings, tasks/regular/):

* ``even-pairs``: is the number of ``01`` and ``10`` pairs odd? (binary in, 2 classes)
* ``modular-arithmetic``: ``d op d op ... d`` mod 5, with ``+ - *`` and the usual precedence
* ``parity-check``: is the number of 1s odd?
* ``cycle-navigation``: where a walk of stay/right/left steps ends on a cycle of 5 states

Shape notation: ``N`` strings, ``L`` input length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.data.chomsky.base import ChomskyTask

__all__ = ["CycleNavigation", "EvenPairs", "ModularArithmetic", "ParityCheck"]


def _bits(n: int, length: int, generator: torch.Generator) -> Tensor:
    """Uniform binary strings int64 ``[N, L]``."""
    return torch.randint(0, 2, (n, length), generator=generator)


class EvenPairs(ChomskyTask):
    """Whether a binary string has an odd number of unequal neighbours (``01`` or ``10``).

    Class 0 when the count is even, 1 when odd (tasks/regular/even_pairs.py). The
    count is odd exactly when the first and last symbols differ, so ``001110`` (one
    ``01``, one ``10``) is 0 and a single symbol is always 0.
    """

    name = "even-pairs"
    level = "regular"
    input_size = 2
    output_size = 2

    def chance(self) -> float:
        """0.5: for ``L >= 2`` the first and last bits are independent and uniform, so both classes
        have probability 1/2 (at ``L = 1`` the class is always 0, the one exception)."""
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return _bits(n, length, generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        unequal = inputs[:, :-1] != inputs[:, 1:]  # [N, L - 1]
        return (unequal.sum(dim=1, keepdim=True) % 2).long()  # [N, 1]


class ParityCheck(ChomskyTask):
    """Whether a binary string has an odd number of 1s (tasks/regular/parity_check.py): ``1010100`` -> 1."""

    name = "parity-check"
    level = "regular"
    input_size = 2
    output_size = 2

    def chance(self) -> float:
        """0.5: the bits are uniform, so the parity is uniform at every length."""
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return _bits(n, length, generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        return inputs.sum(dim=1, keepdim=True) % 2  # [N, 1]


class CycleNavigation(ChomskyTask):
    """The final state of a walk on a cycle of 5 states, starting at state 0.

    Symbol 0 steps left (-1), 1 stays, 2 steps right (+1); the answer is the sum of
    the steps mod 5 (tasks/regular/cycle_navigation.py: ``sum(actions - 1) % 5``).
    E.g. right, left, stay, left, left (``2 0 1 0 0``) ends at -2, state 3.
    """

    name = "cycle-navigation"
    level = "regular"
    input_size = 3
    output_size = 5
    CYCLE = 5

    def chance(self) -> float:
        """0.2 = 1/5: the steps are uniform on {-1, 0, 1}, and their sum mod 5 is within 0.001 of
        uniform from ``L = 10`` on (its largest Fourier mode decays as 0.54**L). Shorter walks
        favour states near 0 (``L = 1``: 1/3)."""
        return 0.2

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, 3, (n, length), generator=generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        return (inputs - 1).sum(dim=1, keepdim=True) % self.CYCLE  # [N, 1], torch's % is never negative here


class ModularArithmetic(ChomskyTask):
    """An expression ``d op d op ... d`` over digits 0..4 and ``+ - *``, evaluated mod 5.

    As tasks/regular/modular_arithmetic.py with ``modulus=5`` (Ruoss et al.'s
    experiments/constants.py): symbols 0..4 are the digits, 5 ``+``, 6 ``-``, 7 ``*``,
    8 the blank ``_``; digits stand at even positions and operators at odd ones, each
    operator uniform on ``+ - *`` (the blank is never drawn). ``*`` binds tighter than
    ``+`` and ``-``: ``1 + 2 * 3 = 7 = 2`` and ``1 - 1 - 1 = -1 = 4`` (mod 5).

    The reference only makes odd-length expressions: asked for an even length ``L``
    it returns ``L - 1`` symbols. Here an even-length input is that ``L - 1``-symbol
    expression followed by the blank, so that every input has ``L`` symbols. The
    reference's own evaluator reads a blank in an operator position as ``+`` and
    ignores a trailing operator, so the answer is the same as the reference's.
    A blank in a digit position reads as 0, as in the reference.
    """

    name = "modular-arithmetic"
    level = "regular"
    MODULUS = 5
    PLUS, MINUS, TIMES, BLANK = 5, 6, 7, 8
    input_size = 9
    output_size = 5

    def chance(self) -> float:
        """0.2 = 1/5, the limit as ``L`` grows; within 0.005 of it from ``L = 11`` on.

        A digit added or subtracted on its own makes the total uniform, and long expressions
        almost surely hold one. Short ones favour 0 (a product of two digits is 0 with
        probability 9/25). The exact share of 0 (the answer's distribution carried left to
        right over (sum so far, current product)): 19/75 = 0.253 at ``L = 3``, 0.232 at 5,
        0.217 at 7, 0.205 at 11, 0.2002 at 21.
        """
        return 0.2

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        odd = length if length % 2 else length - 1
        inputs = torch.full((n, length), self.BLANK, dtype=torch.int64)
        inputs[:, 0:odd:2] = torch.randint(0, self.MODULUS, (n, odd // 2 + 1), generator=generator)
        inputs[:, 1:odd:2] = self.PLUS + torch.randint(0, 3, (n, odd // 2), generator=generator)
        return inputs

    def _answer(self, inputs: Tensor) -> Tensor:
        odd = inputs.shape[1] if inputs.shape[1] % 2 else inputs.shape[1] - 1
        digits, ops = inputs[:, 0:odd:2], inputs[:, 1::2]  # [N, K], [N, K - 1] (+1 trailing when L is even)
        if bool(((digits >= self.MODULUS) & (digits != self.BLANK)).any()) or bool((ops < self.MODULUS).any()):
            raise ValueError("inputs must alternate digits (or blanks) at even positions and operators at odd ones")
        digits = torch.where(digits == self.BLANK, 0, digits)
        # Left to right: `term` is the running product since the last + or -, `total` the sum before it.
        total = torch.zeros(inputs.shape[0], dtype=torch.int64)
        term = digits[:, 0]
        for j in range(1, digits.shape[1]):
            op, d = ops[:, j - 1], digits[:, j]
            times = op == self.TIMES
            total = torch.where(times, total, total + term)
            signed = torch.where(op == self.MINUS, -d, d)
            term = torch.where(times, term * d, signed) % self.MODULUS
        return ((total + term) % self.MODULUS).unsqueeze(1)  # [N, 1]
