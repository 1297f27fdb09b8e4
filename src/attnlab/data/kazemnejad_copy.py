"""Kazemnejad et al. 2023's primitive tasks: copy and reverse, in the eight variants of their paper.

Kazemnejad et al. 2023 ("The Impact of Positional Encoding on Length
Generalization in Transformers", code: McGill-NLP/length-generalization) call
these the *primitive tasks*. Their builders (scripts/dataset_builders/
make_copy_dataset.py and make_reverse_dataset.py) draw tokens from a list of
T5 sentencepiece pieces that stay one token each when repeated; here a token is
a symbol ``0 .. vocab_size - 1``. Every variant trains on lengths 2 to 20 and
tests on 21 to 40 (the per-length validation scores logged in results/
sanity_check.jsonl), a length ``L`` being the number of tokens copied: ``x1 .. xL``
are drawn uniformly, ``t t .. t`` is one token ``L`` times.

======================  ==========================  =====  ================  ==========================
name                    paper (split)               vocab  input             output
======================  ==========================  =====  ================  ==========================
``copy-random``         Copy (cmc)                  100    ``x1 .. xL``      ``x1 .. xL``
``copy-repeat``         Copy (Repeat) (rsc)         6052   ``t t .. t``      ``t t .. t``
``copy-repeat-change``  Copy (Repeat+Change) (rdc)  78     ``t u t t .. t``  ``u u .. u``
``copy-random-2x``      Copy (2x) (cmc2x)           100    ``x1 .. xL``      ``x1 .. xL NEXT x1 .. xL``
``copy-repeat-2x``      Copy (Repeat 2x) (rsc2x)    6052   ``t t .. t``      ``t t .. t t t .. t``
``reverse-random``      Reverse (mc)                100    ``x1 .. xL``      ``xL .. x1``
``reverse-random-2x``   Reverse (2x) (mc2x)         100    ``x1 .. xL``      ``xL .. x1 NEXT xL .. x1``
``reverse-copy``        Reverse+Copy (mcrv)         100    ``x1 .. xL``      ``xL .. x1 NEXT x1 .. xL``
======================  ==========================  =====  ================  ==========================

The vocabularies are the builders' own counts: 100 tokens for the random
strings (``get_unique_tokens()[:100]``); for the repeated ones one token per
example of a length, ``int(1.15 * 100000 / 19) = 6052``; for Repeat+Change
``int((1 + sqrt(1 + 4 * 6052)) / 2) = 78`` tokens, all 6006 ordered pairs of
different tokens at every length. ``NEXT`` (their ``[NEXT]``) is output symbol
``vocab_size``. Their prompt words (``"Copy:"``, ``"Reverse:"``, ``"Replace t with
u in"``) are the same in every example and are left out; Repeat+Change keeps its
two informative tokens, so its input is ``L + 2`` symbols long.

This module also holds :class:`KazemnejadTask`, what every Kazemnejad task shares
(checked arguments, ``sample = draw + answer``, the scored positions).

Shape notation: ``N`` strings, ``L`` input length, ``M`` output length.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.strings import DrawnStrings

__all__ = [
    "CopyRandom",
    "CopyRandom2x",
    "CopyRepeat",
    "CopyRepeat2x",
    "CopyRepeatChange",
    "KazemnejadTask",
    "ReverseCopy",
    "ReverseRandom",
    "ReverseRandom2x",
]


class KazemnejadTask(DrawnStrings):
    """A task of Kazemnejad et al. 2023 as a :class:`~attnlab.data.strings.StringGenerator`.

    A subclass says how to draw ``n`` inputs of one length (``_draw``), what the
    answer to an input is (``_answer``) and what guessing scores (``_chance_at``);
    :meth:`sample` is always "draw, then answer", so the outputs are a function of
    the inputs and :meth:`answer` takes inputs written by hand.

    Attributes:
        name: the task's name (``"copy-random"``).
        paper_name: the paper's name for it (``"Copy"``).
        input_size: symbols in the input alphabet.
        output_size: symbols in the output alphabet.
        shortest: the shortest input length.
        terminator: the output symbol that ends a variable-length answer (positions after
            its first occurrence are padding and not scored), or None where every position is.
        train_lengths: the paper's training lengths, as input lengths of this generator.
        test_lengths: the paper's test lengths, likewise.
    """

    # Plain annotations, not ClassVar: the StringGenerator protocol asks for these attributes.
    name: str
    paper_name: str
    shortest: int = 1
    terminator: int | None = None
    train_lengths: tuple[int, ...]
    test_lengths: tuple[int, ...]
    input_size: int
    output_size: int

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def output_length(self, length: int) -> int:
        """``M``, the output length for inputs of ``length`` symbols."""
        return self._output_length(check_int("length", length, minimum=self.shortest))

    def chance(self, *, length: int | None = None) -> float:
        """The token accuracy of the best guess that ignores the input.

        Args:
            length: an input length; None for the mean over :attr:`test_lengths` (the
                paper's test set, each length weighted alike, as it reports them).
        """
        if length is None:
            return sum(self._chance_at(n) for n in self.test_lengths) / len(self.test_lengths)
        return self._chance_at(check_int("length", length, minimum=self.shortest))

    # What a subclass writes.
    def _output_length(self, length: int) -> int:
        raise NotImplementedError

    def _chance_at(self, length: int) -> float:
        raise NotImplementedError


# -- copy and reverse ------------------------------------------------------------------


class _Primitive(KazemnejadTask):
    """Copy or reverse ``L`` tokens, drawn at random or one token repeated; some variants answer twice.

    ``layout`` says what the answer is, read from the builders: ``"copy"``,
    ``"reverse"``, ``"copy copy"`` (``t`` 2L times, Copy (Repeat 2x)), or two halves
    joined by ``NEXT``: ``"copy NEXT copy"``, ``"reverse NEXT reverse"``, ``"reverse NEXT copy"``.
    """

    repeated: ClassVar[bool] = False
    layout: ClassVar[str] = "copy"
    default_vocab_size: ClassVar[int] = 100
    train_lengths = tuple(range(2, 21))
    test_lengths = tuple(range(21, 41))

    def __init__(self, *, vocab_size: int | None = None) -> None:
        """Args: vocab_size: tokens to draw from (default: the paper's count, :attr:`default_vocab_size`)."""
        size = self.default_vocab_size if vocab_size is None else vocab_size
        self.vocab_size = check_int("vocab_size", size, minimum=2)
        self.next_symbol: int | None = self.vocab_size if "NEXT" in self.layout else None
        self.input_size = self.vocab_size
        self.output_size = self.vocab_size + int(self.next_symbol is not None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"

    def _output_length(self, length: int) -> int:
        halves = self.layout.split()
        return len([h for h in halves if h != "NEXT"]) * length + ("NEXT" in halves)

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        if self.repeated:
            token = torch.randint(0, self.vocab_size, (n, 1), generator=generator)  # [N, 1]
            return token.expand(n, length).contiguous()  # [N, L]
        return torch.randint(0, self.vocab_size, (n, length), generator=generator)  # [N, L]

    def _answer(self, inputs: Tensor) -> Tensor:
        halves = {"copy": inputs, "reverse": inputs.flip(1)}
        if self.next_symbol is not None:
            halves["NEXT"] = torch.full((inputs.shape[0], 1), self.next_symbol, dtype=torch.int64)  # [N, 1]
        return torch.cat([halves[h] for h in self.layout.split()], dim=1)  # [N, M]

    def _chance_at(self, length: int) -> float:
        # Every token position is uniform over the vocabulary; NEXT, where there is one,
        # always sits at position L, so a guesser that ignores the input still gets it.
        m = self._output_length(length)
        return ((m - 1) / self.vocab_size + 1) / m if self.next_symbol is not None else 1 / self.vocab_size


class CopyRandom(_Primitive):
    """``copy-random``, the paper's "Copy" (split cmc_tr20_ts40): copy ``L`` tokens drawn uniformly from 100."""

    name = "copy-random"
    paper_name = "Copy"


class CopyRepeat(_Primitive):
    """``copy-repeat``, "Copy (Repeat)" (rsc_tr20_ts40): one token of 6052, repeated ``L`` times, copied."""

    name = "copy-repeat"
    paper_name = "Copy (Repeat)"
    repeated = True
    default_vocab_size = 6052


class CopyRandom2x(_Primitive):
    """``copy-random-2x``, "Copy (2x)" (cmc2x_tr20_ts40): the ``L`` tokens, ``NEXT``, the ``L`` tokens again."""

    name = "copy-random-2x"
    paper_name = "Copy (2x)"
    layout = "copy NEXT copy"


class CopyRepeat2x(_Primitive):
    """``copy-repeat-2x``, "Copy (Repeat 2x)" (rsc2x_tr20_ts40): a token repeated ``L`` times, answered 2L times."""

    name = "copy-repeat-2x"
    paper_name = "Copy (Repeat 2x)"
    repeated = True
    layout = "copy copy"
    default_vocab_size = 6052


class ReverseRandom(_Primitive):
    """``reverse-random``, the paper's "Reverse" (mc_tr20_ts40): ``L`` tokens of 100, answered last first."""

    name = "reverse-random"
    paper_name = "Reverse"
    layout = "reverse"


class ReverseRandom2x(_Primitive):
    """``reverse-random-2x``, "Reverse (2x)" (mc2x_tr20_ts40): the reversed tokens, ``NEXT``, reversed again."""

    name = "reverse-random-2x"
    paper_name = "Reverse (2x)"
    layout = "reverse NEXT reverse"


class ReverseCopy(_Primitive):
    """``reverse-copy``, "Reverse+Copy" (mcrv_tr20_ts40): the reversed tokens, ``NEXT``, the tokens as given."""

    name = "reverse-copy"
    paper_name = "Reverse+Copy"
    layout = "reverse NEXT copy"


class CopyRepeatChange(KazemnejadTask):
    """``copy-repeat-change``, "Copy (Repeat+Change)" (rdc_tr20_ts40): "Replace t with u in t t .. t".

    The input is ``t, u`` then ``t`` repeated ``L`` times (``L + 2`` symbols, ``t != u``
    drawn from 78 tokens); the answer is ``u`` repeated ``L`` times. For inputs written
    by hand the answer replaces every ``t`` of the body by ``u`` and keeps the rest.
    """

    name = "copy-repeat-change"
    paper_name = "Copy (Repeat+Change)"
    shortest = 3
    default_vocab_size: ClassVar[int] = 78
    # The paper's lengths 2..20 and 21..40 count the repeated tokens, two fewer than the input.
    train_lengths = tuple(range(4, 23))
    test_lengths = tuple(range(23, 43))

    def __init__(self, *, vocab_size: int | None = None) -> None:
        """Args: vocab_size: tokens to draw from (default 78, the paper's)."""
        size = self.default_vocab_size if vocab_size is None else vocab_size
        self.vocab_size = check_int("vocab_size", size, minimum=2)
        self.input_size = self.output_size = self.vocab_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"

    def _output_length(self, length: int) -> int:
        return length - 2

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        t = torch.randint(0, self.vocab_size, (n, 1), generator=generator)  # [N, 1]
        # u is uniform over the other vocab_size - 1 tokens: an ordered pair of distinct tokens.
        u = (t + torch.randint(1, self.vocab_size, (n, 1), generator=generator)) % self.vocab_size  # [N, 1]
        return torch.cat([t, u, t.expand(n, length - 2)], dim=1)  # [N, L]

    def _answer(self, inputs: Tensor) -> Tensor:
        t, u, body = inputs[:, :1], inputs[:, 1:2], inputs[:, 2:]  # [N, 1], [N, 1], [N, L - 2]
        return torch.where(body == t, u, body)  # [N, L - 2]

    def _chance_at(self, length: int) -> float:
        # u is uniform over the vocabulary (t is, and u is uniform over the others).
        return 1 / self.vocab_size
