"""What the 15 Chomsky-hierarchy tasks share: checked arguments, ``sample = draw + answer``, the accuracy mask.

Every task of Delétang et al. 2023 ("Neural Networks and the Chomsky
Hierarchy"), as Ruoss et al. 2023 run them, is a subclass of :class:`ChomskyTask`
and so a :class:`~attnlab.data.tasks.strings.StringGenerator`. A subclass says two
things: how to draw ``n`` inputs of one length (``_draw``) and what the answer
to an input is (``_answer``). :meth:`ChomskyTask.sample` is always "draw, then
answer", so the outputs are a function of the inputs and :meth:`ChomskyTask.answer`
can be fed inputs written by hand.

Three tasks (stack manipulation, binary addition, binary multiplication) end
their answer with a termination symbol and pad it with zeros; as in the
reference's ``accuracy_mask``, only the positions up to and including the
first termination symbol are scored.

Shape notation: ``N`` strings, ``L`` input length, ``M`` output length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.tasks.strings import DrawnStrings

__all__ = ["ChomskyTask", "decode", "encode"]


def encode(texts: Sequence[str], alphabet: str) -> Tensor:
    """Strings of equal length as int64 symbols ``[N, L]``: each character's index in ``alphabet``.

    For writing inputs by hand: ``encode(["(1+2)"], "01234+-*()")`` is ``[[8, 1, 5, 2, 9]]``.

    Raises:
        ValueError: if the strings differ in length or hold a character outside ``alphabet``.
    """
    lengths = {len(t) for t in texts}
    if len(lengths) != 1:
        raise ValueError(f"texts must be at least one string, all of one length, got lengths {sorted(lengths)}")
    joined = "".join(texts)
    if not joined.isascii() or not set(joined) <= set(alphabet):
        raise ValueError(f"texts hold characters {sorted(set(joined) - set(alphabet))} outside {alphabet!r}")
    lookup = torch.zeros(128, dtype=torch.int64)
    lookup[list(alphabet.encode("ascii"))] = torch.arange(len(alphabet))
    codes = torch.frombuffer(bytearray(joined.encode("ascii")), dtype=torch.uint8).long()  # [N * L]
    return lookup[codes].view(len(texts), lengths.pop())  # [N, L]


def decode(symbols: Tensor, alphabet: str) -> list[str]:
    """Int64 symbols ``[N, L]`` as ``N`` strings of ``L`` characters of ``alphabet`` (the inverse of :func:`encode`)."""
    chars = torch.tensor(list(alphabet.encode("ascii")), dtype=torch.uint8)[symbols]  # [N, L]
    text = chars.numpy().tobytes().decode("ascii")
    width = symbols.shape[1]
    return [text[i * width : (i + 1) * width] for i in range(symbols.shape[0])]


class ChomskyTask(DrawnStrings):
    """A task of the Chomsky-hierarchy benchmark: alphabets, output length, draw and answer.

    Attributes:
        name: the task's name (``"even-pairs"``).
        level: ``"regular"``, ``"dcf"`` (deterministic context-free) or ``"cs"`` (context-sensitive).
        input_size: symbols in the input alphabet.
        output_size: symbols in the output alphabet.
        shortest: the shortest input length (1 for every task: the reference defines each at every length >= 1).
        terminator: the output symbol that ends the answer (only positions up to its first
            occurrence are scored), or None where every output position is scored.
    """

    name: str
    level: ClassVar[str]
    input_size: int
    output_size: int
    shortest: int = 1
    terminator: int | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def output_length(self, length: int) -> int:
        """``M``, the output length for inputs of ``length`` symbols (1: a single class, unless overridden)."""
        check_int("length", length, minimum=self.shortest)
        return 1

    def chance(self) -> float:
        """The token accuracy of the best input-ignoring guess (each task documents its value).

        Raises:
            NotImplementedError: here; every task gives its own.
        """
        raise NotImplementedError
