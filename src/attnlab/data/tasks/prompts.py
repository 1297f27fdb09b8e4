"""A task's constant prompt words as tokens: Kazemnejad et al. 2023's ``"Copy: x [SEP] y"`` in a symbol vocabulary.

Kazemnejad et al. 2023 (McGill-NLP/length-generalization) write every example as
text: their data instance processors wrap the input in fixed words
(``f"Copy: {src_str} "`` in src/data/data_instance_processor/copy_instance_processor.py)
and the decoder-only model reads ``prompt + sep + target + EOS`` as T5 sentencepiece
tokens (src/data/s2s_dl_factory.py, ``_get_tokenize_function_for_decoder_only``), so
every example starts with the same tokens. Under causal attention with no positional
encoding those constant tokens are what a model can count positions from, so they
are part of the data, not decoration.

A :class:`Prompt` is such a template, written as the reference writes it, with the
task's own input as ``{name}`` fields: ``Prompt("Copy: {x}")``. Its words become tokens
of the task's vocabulary by one rule (:func:`split_words`): whitespace separates words,
and a ``:``, ``.``, ``,`` or ``?`` at the end of a word is a token of its own
(``"Copy:"`` is ``Copy`` and ``:``; ``"]."`` is ``]`` and ``.``); ``[SEP]`` is one token.
The lab's vocabulary is symbols, not sentencepiece pieces, so one token per word keeps
what matters here: a fixed, non-empty run of tokens, the same for every example, in
the reference's order. (T5's own pieces split punctuation from a word the same way;
whether a longer word is one piece or two, as ``Reverse`` might be, is not checked
here: T5's vocabulary is not at hand.)

:meth:`Prompt.frame` writes the template around an input ``[N, L]`` as symbols (the
words get the symbols from ``first_word`` on, one per distinct word, in template
order); :meth:`Prompt.unframe` checks the words and gives the input back.

Two families write prompts: Kazemnejad et al.'s tasks (:mod:`attnlab.data.kazemnejad`) and
SCAN as they run it (:mod:`attnlab.data.scan`); a prompt is part of a string generator's
alphabet, so it lives beside the generator protocol.

Shape notation: ``N`` strings, ``L`` the input's own length, ``W`` the framed width.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor

from attnlab._validate import check_int

__all__ = ["Prompt", "split_words"]

#: the punctuation marks that are tokens of their own at the end of a word.
PUNCTUATION = ":.,?"
_FIELD = re.compile(r"^\{(\w+)\}$")


def split_words(text: str) -> tuple[str, ...]:
    """The tokens of ``text`` by this module's rule: words split on whitespace, end punctuation split off.

    Raises:
        TypeError: if ``text`` is not a string.

    Example:
        >>> split_words("Sort the following list [ a, b ]. [SEP] The answer is 7 .")
        ('Sort', 'the', 'following', 'list', '[', 'a', ',', 'b', ']', '.', '[SEP]', 'The', 'answer', 'is', '7', '.')
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    tokens: list[str] = []
    for word in text.split():
        tail: list[str] = []
        while len(word) > 1 and word[-1] in PUNCTUATION and word != "[SEP]":
            tail.insert(0, word[-1])
            word = word[:-1]
        tokens += [word, *tail]
    return tuple(tokens)


class Prompt:
    """Fixed words around a task's input, as the reference writes them: ``Prompt("Copy: {x}")``.

    Args:
        template: the reference's text with each part of the input as a ``{name}`` field
            standing alone between spaces (``"Replace {t} with {u} in {x}"``).
        parts: field name -> the slice of the task's own input it stands for (default:
            ``{"x": slice(None)}``, the whole input). The slices, in template order, must
            cover the input once, in order.
        source: where the reference writes the text (file and line), for the reader.

    Attributes:
        items: the framed sequence: a word (``str``) or a slice of the input, in order.
        words: the distinct words, in order of first appearance (word ``i`` is symbol
            ``first_word + i``).
        fixed: how many word tokens a framed string holds (its width is ``L + fixed``).

    Raises:
        TypeError / ValueError: for a template without words, a field not in ``parts``,
            or parts that do not cover the input once, in order.
    """

    def __init__(self, template: str, *, parts: Mapping[str, slice] | None = None, source: str = "") -> None:
        parts = {"x": slice(None)} if parts is None else dict(parts)
        items: list[str | slice] = []
        for token in split_words(template):
            field = _FIELD.match(token)
            if field is None:
                items.append(token)
            elif field.group(1) in parts:
                items.append(parts[field.group(1)])
            else:
                raise ValueError(f"template {template!r}: field {token} is not one of parts ({', '.join(parts)})")
        slices = [item for item in items if isinstance(item, slice)]
        if len(slices) != len(parts) or not _covers_in_order(slices):
            raise ValueError(f"template {template!r}: its fields must cover the input once, in order (parts {parts})")
        if len(slices) == len(items):
            raise ValueError(f"template {template!r} has no words: a prompt is a fixed, non-empty run of tokens")
        self.template, self.source = template, source
        self.items: tuple[str | slice, ...] = tuple(items)
        self.words: tuple[str, ...] = tuple(dict.fromkeys(item for item in items if isinstance(item, str)))
        self.fixed = len(items) - len(slices)

    def __repr__(self) -> str:
        return f"Prompt({self.template!r})"

    def width(self, length: int) -> int:
        """``W``, the framed width of an input of ``length`` symbols."""
        return check_int("length", length, minimum=0) + self.fixed

    def symbol(self, word: str, *, first_word: int) -> int:
        """The symbol of ``word`` when the words start at ``first_word``.

        Raises:
            ValueError: for a word the template does not have.
        """
        if word not in self.words:
            raise ValueError(f"word {word!r} is not in the prompt {self.template!r} (its words: {self.words})")
        return first_word + self.words.index(word)

    def frame(self, body: Tensor, *, first_word: int) -> Tensor:
        """The input int64 ``[N, L]`` written into the template: int64 ``[N, W]``, ``W = L + fixed``."""
        n = body.shape[0]
        pieces = []
        for item in self.items:
            if isinstance(item, str):
                word = self.symbol(item, first_word=first_word)
                pieces.append(torch.full((n, 1), word, dtype=torch.int64, device=body.device))  # [N, 1]
            else:
                pieces.append(body[:, item])  # [N, part]
        return torch.cat(pieces, dim=1)  # [N, W]

    def columns(self, width: int) -> tuple[Tensor, Tensor, Tensor]:
        """Where a framed string of ``width`` symbols holds what, as int64 vectors.

        Returns:
            ``(word_columns, word_indices, body_columns)``: the columns of the word tokens,
            each one's word index (its symbol less ``first_word``), and the columns of the
            input's symbols in the input's order (``L = width - fixed`` of them).

        Raises:
            ValueError: if ``width`` is below :attr:`fixed`.
        """
        length = check_int("width", width, minimum=self.fixed) - self.fixed
        word_cols: list[int] = []
        word_ids: list[int] = []
        body_cols: list[int] = []
        column = 0
        for item in self.items:
            if isinstance(item, str):
                word_cols.append(column)
                word_ids.append(self.words.index(item))
                column += 1
            else:
                span = len(range(*item.indices(length)))
                body_cols += range(column, column + span)
                column += span
        return torch.tensor(word_cols), torch.tensor(word_ids), torch.tensor(body_cols, dtype=torch.int64)

    def unframe(self, inputs: Tensor, *, first_word: int, name: str = "the task") -> Tensor:
        """The input int64 ``[N, L]`` inside framed strings ``[N, W]``, the words checked.

        Raises:
            ValueError: if ``inputs`` is not ``[N, W]`` with ``W >= fixed``, or a word is not where the
                template puts it (naming the template).
        """
        if inputs.dim() != 2 or inputs.shape[1] < self.fixed:
            raise ValueError(f"inputs of {name} must be [N, W] with W >= {self.fixed} (the prompt "
                             f"{self.template!r} and the input), got {tuple(inputs.shape)}")
        word_cols, word_ids, body_cols = self.columns(inputs.shape[1])
        expected = (word_ids + first_word).to(inputs.device)  # [fixed]
        if not bool((inputs[:, word_cols.to(inputs.device)] == expected).all()):
            raise ValueError(f"inputs of {name} must be framed by the prompt {self.template!r}: its words "
                             f"(symbols {first_word}..{first_word + len(self.words) - 1}) are not where it puts them")
        return inputs[:, body_cols.to(inputs.device)]  # [N, L]


def _covers_in_order(slices: list[slice]) -> bool:
    """The slices are ``[0:a], [a:b], ..., [z:]``: consecutive, from 0, the last open."""
    start = 0
    for i, piece in enumerate(slices):
        if piece.step not in (None, 1) or (piece.start or 0) != start:
            return False
        last = i == len(slices) - 1
        if last != (piece.stop is None):
            return False
        start = piece.stop if piece.stop is not None else start
    return True
