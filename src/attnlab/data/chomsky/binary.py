"""The three context-sensitive tasks on binary numbers: addition, multiplication, integer square root.

As in the reference (google-deepmind/randomized_positional_encodings,
tasks/cs/binary_addition.py, binary_multiplication.py, compute_sqrt.py).
Addition and multiplication read ``n 2 m``: two little-endian numbers (least
significant bit first) around the separator 2, of lengths ``a`` (uniform in
``1 .. L - 2``) and ``L - 1 - a``, each uniform on ``1 .. 2**len - 1`` (so written
with leading zeros, which stand at its end). The answer is the result in
little-endian binary without leading zeros, the termination symbol 2, then 0s;
only the positions up to the 2 are scored. Square root reads one big-endian
number uniform on ``1 .. 2**L - 1`` and answers ``isqrt`` in big-endian binary
with leading zeros, ``ceil(L / 2)`` bits.

The numbers have up to ``L`` bits, so they are Python ints, converted to and
from text a whole batch at a time.

Shape notation: ``N`` strings, ``L`` input length, ``M`` output length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.chomsky.base import ChomskyTask, decode, encode

__all__ = ["BinaryAddition", "BinaryMultiplication", "ComputeSqrt"]

_DIGITS = "012"  # 0, 1 and the separator / termination symbol 2


def _redraw_zeros(bits: Tensor, spans: list[Tensor], generator: torch.Generator) -> Tensor:
    """``bits`` ``[N, L]`` with every span (bool ``[N, L]``) holding at least one 1.

    A number uniform on ``1 .. 2**k - 1`` is ``k`` uniform bits, not all zero: rows
    with an all-zero span are drawn again until none is left.
    """
    while True:
        empty = torch.zeros(bits.shape[0], dtype=torch.bool)
        for span in spans:
            empty |= ~(bits.bool() & span).any(dim=1)
        if not bool(empty.any()):
            return bits
        bits[empty] = torch.randint(0, 2, (int(empty.sum()), bits.shape[1]), generator=generator)


class _TwoOperands(ChomskyTask):
    """Addition and multiplication: ``n 2 m`` in little-endian binary -> ``n op m``, terminated by 2."""

    level = "cs"
    input_size = 3
    output_size = 3
    terminator = 2

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        if length <= 2:
            # The reference's np.random.randint(0, 2**L - 1): 0 at L = 1, 0..2 at L = 2, written in L bits.
            value = torch.randint(0, 2**length - 1, (n, 1), generator=generator)
            return (value >> torch.arange(length)) & 1  # [N, L], little-endian
        split = torch.randint(1, length - 1, (n, 1), generator=generator)  # where the separator stands
        position = torch.arange(length)  # [L]
        bits = torch.randint(0, 2, (n, length), generator=generator)
        bits = _redraw_zeros(bits, [position < split, position > split], generator)
        return torch.where(position == split, 2, bits)  # [N, L]

    def _operands(self, texts: list[str]) -> list[tuple[int, int]]:
        """The two numbers of each ``n2m`` text."""
        pairs = []
        for text in texts:
            parts = text.split("2")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise ValueError(f"{text!r}: inputs of length >= 3 are two binary numbers around one 2")
            pairs.append((int(parts[0][::-1], 2), int(parts[1][::-1], 2)))
        return pairs

    def _terminated(self, values: list[int], width: int) -> Tensor:
        """``values`` as ``[N, width]``: little-endian bits, the terminator, then 0s."""
        return encode([(format(v, "b")[::-1] + "2").ljust(width, "0") for v in values], _DIGITS)


class BinaryAddition(_TwoOperands):
    """``n + m`` in little-endian binary: ``001 2 01101`` (4 + 22) -> ``01011 2 000`` (26).

    Output ``L + 1`` symbols: the sum has at most ``L - 1`` bits. Below ``L = 3`` the input
    is one little-endian number (no separator) and the answer that number: the reference
    draws it uniformly on ``0 .. 2**L - 2`` (so always 0 at ``L = 1``).
    """

    name = "binary-addition"

    def output_length(self, length: int) -> int:
        """``L + 1``."""
        return check_int("length", length, minimum=self.shortest) + 1

    def chance(self) -> float:
        """0.5 (measured: 0.486 at ``L = 10``, 0.497 at 20, 0.50 from 40 on; the best single symbol is 1).

        The scored positions are the sum's bits and its terminator. The bits below the top
        are close to uniform and the top bit is always 1, so 1 fills about half of them.
        """
        return 0.5

    def _answer(self, inputs: Tensor) -> Tensor:
        texts = decode(inputs, _DIGITS)
        if inputs.shape[1] <= 2:
            if any("2" in t for t in texts):
                raise ValueError("inputs shorter than 3 are one binary number, without the separator 2")
            values = [int(t[::-1], 2) for t in texts]
        else:
            values = [a + b for a, b in self._operands(texts)]
        return self._terminated(values, inputs.shape[1] + 1)


class BinaryMultiplication(_TwoOperands):
    """``n * m`` in little-endian binary: ``001 2 01101`` (4 * 22) -> ``0001011 2 0`` (88).

    Output ``L`` symbols: the product has at most ``a + (L - 1 - a) = L - 1`` bits. Below
    ``L = 3`` the reference answers ``L - 1`` zeros and the terminator, whatever the input.
    """

    name = "binary-multiplication"

    def output_length(self, length: int) -> int:
        """``L``."""
        return check_int("length", length, minimum=self.shortest)

    def chance(self) -> float:
        """0.5, the limit as ``L`` grows (measured: 0.47 at ``L = 20``, 0.49 at 40, 0.496 at 100, 0.499 at 500).

        The product's low bits favour 0 (its lowest bit is 1 only when both numbers are odd)
        and its top bit is 1; over the scored positions 0 and 1 come out close to even.
        """
        return 0.5

    def _answer(self, inputs: Tensor) -> Tensor:
        n, length = inputs.shape
        if length <= 2:
            answer = torch.zeros(n, length, dtype=torch.int64)
            answer[:, -1] = self.terminator
            return answer
        return self._terminated([a * b for a, b in self._operands(decode(inputs, _DIGITS))], length)


class ComputeSqrt(ChomskyTask):
    """``floor(sqrt(n))`` of a big-endian binary number, in ``ceil(L / 2)`` big-endian bits.

    tasks/cs/compute_sqrt.py: ``100101`` (37) -> ``110`` (6), ``0111`` (7) -> ``10`` (2), ``10000``
    (16) -> ``100`` (4). The number is uniform on ``1 .. 2**L - 1``.
    """

    name = "compute-sqrt"
    level = "cs"
    input_size = 2
    output_size = 2

    def output_length(self, length: int) -> int:
        """``ceil(L / 2)``: the root of an ``L``-bit number has at most that many bits."""
        return math.ceil(check_int("length", length, minimum=self.shortest) / 2)

    def chance(self) -> float:
        """0.5, the limit as ``L`` grows (measured: 0.60 at ``L = 10``, 0.52 at 11, 0.525 at 40, 0.506 at 41,
        0.509 at 100, 0.502 at 500).

        The root's bits are close to uniform except the leading ones (for even ``L`` the top
        bit is 1 three times in four), which weigh less as the root grows.
        """
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        bits = torch.randint(0, 2, (n, length), generator=generator)
        return _redraw_zeros(bits, [torch.ones(length, dtype=torch.bool)], generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        width = self.output_length(inputs.shape[1])
        roots = [math.isqrt(int(t, 2)) for t in decode(inputs, "01")]
        return encode([format(r, f"0{width}b") for r in roots], "01")
