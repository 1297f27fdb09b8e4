"""Two deterministic context-free tasks of Delétang et al. 2023 that need a stack: stack manipulation, reverse.

As in the reference (google-deepmind/randomized_positional_encodings, tasks/dcf/):

* ``stack-manipulation``: run POP / PUSH 0 / PUSH 1 on a given stack and pop the result;
* ``reverse-string``: a binary string backwards.

The other two (modular arithmetic with brackets, solving an equation) are in
:mod:`attnlab.data.chomsky.brackets`.

Shape notation: ``N`` strings, ``L`` input length, ``M`` output length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.chomsky.base import ChomskyTask

__all__ = ["ReverseString", "StackManipulation"]


class StackManipulation(ChomskyTask):
    """Run stack instructions on a binary stack; answer the final stack, top first.

    The input (tasks/dcf/stack_manipulation.py) is a stack of bits, bottom first,
    then instructions: 2 = POP (ignored on an empty stack), 3 = PUSH 0, 4 = PUSH 1.
    The output, ``L + 1`` symbols, is the final stack popped (top first), the
    termination symbol 2, then 0s; only the positions up to the 2 are scored.
    Example: ``0 1 1 0 PUSH1 POP POP`` = ``0 1 1 0 4 2 2`` leaves ``0 1 1`` -> ``1 1 0 2 0 0 0 0``.

    The reference draws the initial stack's size uniformly in ``1 .. L - 1``, its
    bits uniformly, and each of the remaining ``L - size`` instructions uniformly;
    at ``L = 1`` the input is one bit and the answer that bit.
    """

    name = "stack-manipulation"
    level = "dcf"
    input_size = 5
    output_size = 3
    terminator = 2
    POP, PUSH0, PUSH1 = 2, 3, 4

    def output_length(self, length: int) -> int:
        """``L + 1``: a stack of up to ``L`` bits and the termination symbol."""
        return check_int("length", length, minimum=self.shortest) + 1

    def chance(self) -> float:
        """0.5, the limit as ``L`` grows (measured: 0.48 at ``L = 40``, 0.49 at 100, 0.499 at 500).

        The scored positions are the final stack's bits, uniform 0/1, and one terminator,
        so the best constant guess (0 or 1) scores ``E[s / 2] / E[s + 1]`` for a final
        stack of ``s`` bits: a little under 1/2.
        """
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        bits = torch.randint(0, 2, (n, length), generator=generator)
        if length == 1:
            return bits
        actions = torch.randint(self.POP, self.PUSH1 + 1, (n, length), generator=generator)
        size = torch.randint(1, length, (n, 1), generator=generator)  # the initial stack, 1 .. L - 1 bits
        return torch.where(torch.arange(length) < size, bits, actions)  # [N, L]

    def _answer(self, inputs: Tensor) -> Tensor:
        n, length = inputs.shape
        # A bit of the initial stack is pushed just like PUSH 0 / PUSH 1, so one pass runs the whole input.
        stack = torch.zeros(n, length, dtype=torch.int64)  # [N, L], bottom first
        top = torch.zeros(n, dtype=torch.int64)  # [N], how many bits are on the stack
        rows = torch.arange(n)
        for t in range(length):
            symbol = inputs[:, t]
            push = symbol != self.POP
            bit = torch.where(symbol >= self.PUSH0, symbol - self.PUSH0, symbol)
            stack[rows[push], top[push]] = bit[push]
            top = torch.where(push, top + 1, (top - 1).clamp(min=0))
        # Output position j holds the bit j below the top, then the terminator, then 0s.
        j = torch.arange(length + 1)  # [M]
        below = (top[:, None] - 1 - j).clamp(min=0)  # [N, M]
        popped = torch.gather(stack, 1, below)  # [N, M]
        out = torch.where(j < top[:, None], popped, 0)
        return torch.where(j == top[:, None], self.terminator, out)  # [N, M]


class ReverseString(ChomskyTask):
    """A binary string backwards (tasks/dcf/reverse_string.py, ``vocab_size=2``): ``011010`` -> ``010110``."""

    name = "reverse-string"
    level = "dcf"
    input_size = 2
    output_size = 2

    def output_length(self, length: int) -> int:
        """``L``: the same symbols in the other order."""
        return check_int("length", length, minimum=self.shortest)

    def chance(self) -> float:
        """0.5: every output position is a uniform bit."""
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, 2, (n, length), generator=generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        return inputs.flip(1)
