"""Four context-sensitive string tasks of Delétang et al. 2023: duplicate, missing duplicate, odds first, bucket sort.

As in the reference (google-deepmind/randomized_positional_encodings,
tasks/cs/), with Ruoss et al.'s settings (experiments/constants.py): binary
strings, except bucket sort's 5 symbols. The three binary-number tasks
(addition, multiplication, square root) are in :mod:`attnlab.data.chomsky.binary`.

Shape notation: ``N`` strings, ``L`` input length, ``M`` output length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.chomsky.base import ChomskyTask

__all__ = ["BucketSort", "DuplicateString", "MissingDuplicate", "OddsFirst"]


class DuplicateString(ChomskyTask):
    """A binary string twice, ``ww`` (tasks/cs/duplicate_string.py, ``vocab_size=2``): ``101`` -> ``101101``."""

    name = "duplicate-string"
    level = "cs"
    input_size = 2
    output_size = 2

    def output_length(self, length: int) -> int:
        """``2 L``."""
        return 2 * check_int("length", length, minimum=self.shortest)

    def chance(self) -> float:
        """0.5: every output position is a uniform bit."""
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, 2, (n, length), generator=generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        return torch.cat([inputs, inputs], dim=1)  # [N, 2L]


class MissingDuplicate(ChomskyTask):
    """The bit hidden in a duplicated binary string ``ww`` (tasks/cs/missing_duplicate_string.py).

    Input: ``w`` (``L // 2`` uniform bits) twice, one position of the ``2 (L // 2)``
    (uniform) replaced by the placeholder 2, and for odd ``L`` the padding symbol 3
    at the end. Output: the hidden bit, read from the other copy. ``01100210`` ->
    ``w = 0110``, the hidden bit is 1. At ``L = 1`` there is no ``w``: as in the
    reference, the input is ``1`` and the answer 1.
    """

    name = "missing-duplicate"
    level = "cs"
    input_size = 4
    output_size = 2
    HIDDEN, PAD = 2, 3

    def chance(self) -> float:
        """0.5: the hidden bit is a uniform bit of ``w`` (at ``L = 1`` it is always 1)."""
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        if length == 1:
            return torch.ones(n, 1, dtype=torch.int64)
        half = length // 2
        w = torch.randint(0, 2, (n, half), generator=generator)
        hidden = torch.randint(0, 2 * half, (n, 1), generator=generator)
        inputs = torch.cat([w, w, torch.full((n, length % 2), self.PAD)], dim=1)  # [N, L]
        return inputs.scatter(1, hidden, self.HIDDEN)

    def _answer(self, inputs: Tensor) -> Tensor:
        n, length = inputs.shape
        if length == 1:
            return torch.ones(n, 1, dtype=torch.int64)
        half = length // 2
        hidden = inputs[:, : 2 * half] == self.HIDDEN  # [N, 2 * half]
        if not bool((hidden.sum(dim=1) == 1).all()):
            raise ValueError("each input must hide exactly one bit (one 2) in its first 2 * (L // 2) symbols")
        where = hidden.long().argmax(dim=1, keepdim=True)  # [N, 1]
        twin = (where + half) % (2 * half)  # the same bit in the other copy of w
        return inputs.gather(1, twin)  # [N, 1]


class OddsFirst(ChomskyTask):
    """A binary string's symbols at odd indices, then those at even ones (tasks/cs/odds_first.py).

    With 0-based indices, ``s[1::2]`` then ``s[::2]``, as the reference's code
    computes: ``110`` -> ``1`` + ``10`` = ``110``, ``00110101`` -> ``0111`` + ``0100``.
    (The reference's docstring and the paper describe the other order, 1-based
    odd positions ``s_1 s_3 ...`` first; the two are the same task up to which half comes first.)
    """

    name = "odds-first"
    level = "cs"
    input_size = 2
    output_size = 2

    def output_length(self, length: int) -> int:
        """``L``: the same symbols, rearranged."""
        return check_int("length", length, minimum=self.shortest)

    def chance(self) -> float:
        """0.5: every output position is a uniform bit."""
        return 0.5

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, 2, (n, length), generator=generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        return torch.cat([inputs[:, 1::2], inputs[:, ::2]], dim=1)  # [N, L]


class BucketSort(ChomskyTask):
    """A string over 5 symbols, sorted (tasks/cs/bucket_sort.py, ``vocab_size=5``): ``10204112`` -> ``00111224``."""

    name = "bucket-sort"
    level = "cs"
    VOCAB = 5
    input_size = VOCAB
    output_size = VOCAB

    def output_length(self, length: int) -> int:
        """``L``: the same symbols, sorted."""
        return check_int("length", length, minimum=self.shortest)

    def chance(self) -> float:
        """0.2 = 1/5: the symbols are uniform, so any one symbol fills a fifth of the output.

        (This is the best guess of one symbol for every position. A guess that knows the
        position could do far better, e.g. 0 at the start and 4 at the end.)
        """
        return 0.2

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, self.VOCAB, (n, length), generator=generator)

    def _answer(self, inputs: Tensor) -> Tensor:
        return inputs.sort(dim=1).values
