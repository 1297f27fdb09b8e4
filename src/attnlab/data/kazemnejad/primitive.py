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
``vocab_size``. Repeat+Change's two informative tokens ``t u`` are part of its input,
so its input is ``L + 2`` symbols long.

The prompt. The reference's data instance processors write the input as
``f"Copy: {src_str} "`` (every copy split but Repeat+Change), ``f"Replace
{source_char} with {target_char} in {src_str} "`` (Repeat+Change) and ``f"Reverse:
{src_str} "`` (every reverse split): src/data/data_instance_processor/
copy_instance_processor.py, lines 22, 20 and 40. The decoder-only sequence is that,
``"[SEP] "`` (``decoder_only_input_output_sep_token`` in configs/data/s2s_copy.jsonnet
and s2s_reverse.jsonnet), the answer and EOS. By default the input here carries those
words as symbols of their own (:mod:`attnlab.data.tasks.prompts`): ``Copy : x1 .. xL``,
``Reverse : x1 .. xL``, ``Replace t with u in t t .. t``; the lab's layout then puts
``BOS`` where the reference has ``[SEP]``, so a decoder-only row reads
``Copy : x1 .. xL BOS y1 .. yM EOS`` as the reference's reads ``Copy: x1 .. xL [SEP]
y1 .. yM </s>``. ``prompt=False`` leaves the words out (the bare ``x1 .. xL``).

This module also holds :class:`KazemnejadTask`, what every Kazemnejad task shares
(checked arguments, ``sample = draw + answer + prompt``, the scored positions).

Shape notation: ``N`` strings, ``L`` input length, ``M`` output length.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from attnlab._validate import check_bool, check_int
from attnlab.data.tasks.prompts import Prompt
from attnlab.data.tasks.strings import DrawnStrings, Strings, check_generator, check_sample

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
    """A task of Kazemnejad et al. 2023 as a :class:`~attnlab.data.tasks.strings.StringGenerator`.

    A subclass says how to draw ``n`` inputs of one length (``_draw``), what the
    answer to an input is (``_answer``), what guessing scores (``_chance_at``), the
    size of its own input alphabet (``body_size``) and the reference's words around
    the input (``template``, a :class:`~attnlab.data.tasks.prompts.Prompt`). :meth:`sample`
    is always "draw, answer, write the prompt around the input", so the outputs are a
    function of the inputs and :meth:`answer` takes inputs written by hand (with their
    prompt, when the task has one).

    Args:
        prompt: write the reference's constant words around every input (default: the
            paper's protocol); False gives the bare input, ``x1 .. xL``.

    Attributes:
        name: the task's name (``"copy-random"``).
        paper_name: the paper's name for it (``"Copy"``).
        body_size: symbols of the task's own input, ``0 .. body_size - 1``.
        input_size: symbols in the input alphabet: ``body_size``, and with the prompt its
            words after every other symbol (from :attr:`first_word`).
        output_size: symbols in the output alphabet.
        first_word: the symbol of the prompt's first word, ``max(body_size, output_size)``:
            a word shares its token id with no input or output symbol.
        prompt: whether the inputs carry the prompt.
        template: the reference's prompt (its words and where the input goes).
        shortest: the shortest input length (the task's own, prompt not counted).
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
    body_size: int
    input_size: int
    output_size: int
    template: ClassVar[Prompt]

    def __init__(self, *, prompt: bool = True) -> None:
        self.prompt = check_bool("prompt", prompt)
        self.first_word = max(self.body_size, self.output_size)
        self.input_size = self.first_word + len(self.template.words) if self.prompt else self.body_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}()" if self.prompt else f"{type(self).__name__}(prompt=False)"

    def input_length(self, length: int) -> int:
        """The input's width at ``length``: ``length`` and the prompt's words (``length`` alone without it)."""
        length = check_int("length", length, minimum=0)
        return self.template.width(length) if self.prompt else length

    def sample(self, n: int, length: int, *, generator: torch.Generator) -> Strings:
        """``n`` inputs of ``length`` symbols (the prompt's words not counted) drawn from ``generator``, and answers.

        Returns:
            :class:`~attnlab.data.tasks.strings.Strings`: inputs int64 ``[N, input_length(L)]`` (the
            prompt around the drawn symbols), outputs int64 ``[N, M]``, scored bool ``[N, M]`` or None.

        Raises:
            TypeError: if ``generator`` is not a ``torch.Generator`` or ``n``/``length`` not integers.
            ValueError: if ``n < 1`` or ``length < shortest``, or naming both and the memory they
                would need, for strings that cannot fit.
        """
        n = check_int("n", n, minimum=1)
        length = check_int("length", length, minimum=self.shortest)
        generator = check_generator(generator)
        check_sample(self, n, length)
        body = self._draw(n, length, generator)  # [N, L]
        outputs = self._answer(body)  # [N, M]
        return Strings(self.frame(body), outputs, self.scored(outputs))

    def frame(self, body: Tensor) -> Tensor:
        """The task's own input int64 ``[N, L]`` with the prompt written around it, ``[N, input_length(L)]``."""
        return self.template.frame(body, first_word=self.first_word) if self.prompt else body

    def unframe(self, inputs: Tensor) -> Tensor:
        """The task's own input ``[N, L]`` inside ``inputs`` (what :meth:`frame` gives), the prompt's words checked.

        Raises:
            ValueError: if a word of the prompt is missing or misplaced.
        """
        if not self.prompt:
            return inputs
        return self.template.unframe(inputs, first_word=self.first_word, name=repr(self.name))

    def answer(self, inputs: Tensor) -> Tensor:
        """The outputs int64 ``[N, M]`` for inputs int64 ``[N, S]`` (``S = input_length(L)``) as :meth:`sample`
        writes them, the prompt included.

        Raises:
            TypeError: if ``inputs`` is not an int64 tensor.
            ValueError: if the prompt's words are not where it puts them, the input is shorter than
                :attr:`shortest` or holds a symbol outside ``0 .. body_size - 1``, or it is not a
                string of the task (a malformed sum).
        """
        if not isinstance(inputs, Tensor) or inputs.dtype != torch.int64:
            raise TypeError(f"inputs must be an int64 tensor, got {getattr(inputs, 'dtype', type(inputs).__name__)}")
        body = self.unframe(inputs)  # [N, L]
        if body.dim() != 2 or body.shape[0] < 1 or body.shape[1] < self.shortest:
            raise ValueError(f"inputs must be [N, L] with N >= 1 and L >= {self.shortest} (the prompt not counted), "
                             f"got {tuple(body.shape)}")
        if int(body.min()) < 0 or int(body.max()) >= self.body_size:
            raise ValueError(f"inputs must hold symbols 0..{self.body_size - 1} for {self.name!r} (the prompt's "
                             "words aside)")
        return self._answer(body.cpu())

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

# The reference's prompts (copy_instance_processor.py): f"Copy: {src_str} " and f"Reverse: {src_str} ".
_COPY = Prompt("Copy: {x}", source="src/data/data_instance_processor/copy_instance_processor.py:22")
_REVERSE = Prompt("Reverse: {x}", source="src/data/data_instance_processor/copy_instance_processor.py:40")


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
    template = _COPY

    def __init__(self, *, vocab_size: int | None = None, prompt: bool = True) -> None:
        """Args: vocab_size: tokens to draw from (default: the paper's count, :attr:`default_vocab_size`);
        prompt: write the reference's words around the input (:class:`KazemnejadTask`)."""
        size = self.default_vocab_size if vocab_size is None else vocab_size
        self.vocab_size = check_int("vocab_size", size, minimum=2)
        self.next_symbol: int | None = self.vocab_size if "NEXT" in self.layout else None
        self.body_size = self.vocab_size
        self.output_size = self.vocab_size + int(self.next_symbol is not None)
        super().__init__(prompt=prompt)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}{'' if self.prompt else ', prompt=False'})"

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
    template = _REVERSE


class ReverseRandom2x(_Primitive):
    """``reverse-random-2x``, "Reverse (2x)" (mc2x_tr20_ts40): the reversed tokens, ``NEXT``, reversed again."""

    name = "reverse-random-2x"
    paper_name = "Reverse (2x)"
    layout = "reverse NEXT reverse"
    template = _REVERSE


class ReverseCopy(_Primitive):
    """``reverse-copy``, "Reverse+Copy" (mcrv_tr20_ts40): the reversed tokens, ``NEXT``, the tokens as given."""

    name = "reverse-copy"
    paper_name = "Reverse+Copy"
    layout = "reverse NEXT copy"
    template = _REVERSE


class CopyRepeatChange(KazemnejadTask):
    """``copy-repeat-change``, "Copy (Repeat+Change)" (rdc_tr20_ts40): "Replace t with u in t t .. t".

    The task's own input is ``t, u`` then ``t`` repeated ``L`` times (``L + 2`` symbols,
    ``t != u`` drawn from 78 tokens), written with the prompt as the reference writes it:
    ``Replace t with u in t t .. t``; the answer is ``u`` repeated ``L`` times. For inputs
    written by hand the answer replaces every ``t`` of the body by ``u`` and keeps the rest.
    """

    name = "copy-repeat-change"
    paper_name = "Copy (Repeat+Change)"
    shortest = 3
    default_vocab_size: ClassVar[int] = 78
    # The paper's lengths 2..20 and 21..40 count the repeated tokens, two fewer than the input.
    train_lengths = tuple(range(4, 23))
    test_lengths = tuple(range(23, 43))
    template = Prompt(
        "Replace {t} with {u} in {x}", parts={"t": slice(0, 1), "u": slice(1, 2), "x": slice(2, None)},
        source="src/data/data_instance_processor/copy_instance_processor.py:20",
    )

    def __init__(self, *, vocab_size: int | None = None, prompt: bool = True) -> None:
        """Args: vocab_size: tokens to draw from (default 78, the paper's); prompt: as :class:`KazemnejadTask`'s."""
        size = self.default_vocab_size if vocab_size is None else vocab_size
        self.vocab_size = check_int("vocab_size", size, minimum=2)
        self.body_size = self.output_size = self.vocab_size
        super().__init__(prompt=prompt)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}{'' if self.prompt else ', prompt=False'})"

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
