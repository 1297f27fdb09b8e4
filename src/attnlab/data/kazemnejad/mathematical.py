"""Kazemnejad et al. 2023's mathematical tasks without scratchpad: addition, sorting, summation.

Read from McGill-NLP/length-generalization: the builders draw the numbers
(scripts/dataset_builders/make_addition_dataset.py, make_sort_dataset.py,
make_sum_dataset.py) and the instance processors write them as text
(src/data/data_instance_processor/addition_instance_processor.py, ...).

* ``addition``, "Addition" (s2s_addition, len_tr8_ts16): ``"Compute a + b ?"`` ->
  ``"The answer is s."``, digits most significant first. Here the input is the digits
  of ``a``, ``+`` (symbol 10), the digits of ``b``; the output is the digits of
  ``s = a + b`` then the terminator ``.`` (output symbol 10), padded with more
  terminators to ``M = L`` (an answer has at most ``L - 1`` digits); only the positions
  up to the first terminator are scored, so a whole answer is right exactly when
  the sum is. An operand of ``k`` digits is uniform on ``[10**(k-1), 10**k)``
  (``[0, 10)`` for one digit), as the builder draws it. The paper trains on every
  pair of operand lengths ``(ka, kb)`` in ``1..8 x 1..8`` and tests on the pairs of
  ``1..16 x 1..16`` with ``max(ka, kb) >= 9``: :meth:`Addition.sample_digits` draws one
  such pair; :meth:`Addition.sample` draws ``L = ka + kb + 1`` symbols, ``ka`` uniform.
* ``kz-sort``, "Sort (Single Token)" (s2s_sort, len_sngd_tr8_ts16): ``L`` tokens
  drawn uniformly from 50, answered in ascending order (of their index in the
  builder's token list, here their symbol).
* ``summation``, "Summation" (s2s_sum, len_tr8_ts16): ``L`` digits uniform on
  ``1..9``, answered by their sum modulo 10 (``modulo_factor: 10`` in
  configs/data/s2s_sum.jsonnet), one symbol.

The prompt. What varies is kept as symbols; the fixed words around it are the
task's prompt (:mod:`attnlab.data.tasks.prompts`), written by default as the reference
writes them:

* ``addition``: the reference reads ``Compute a + b ? `` then (no separator) ``The
  answer is s.``; here ``Compute a + b ? The answer is BOS s .``
* ``kz-sort``: ``Sort the following list [ x1, .., xL ]. `` then (no separator) ``The
  sorted list is [ y1, .., yL ].``; here ``Sort the following list [ x1 .. xL ] . The
  sorted list is [ BOS y1 .. yL``
* ``summation``: ``Compute: x1 + .. + xL .``, ``[SEP] ``, ``The answer is s .``; here
  ``Compute : x1 .. xL . [SEP] The answer is BOS s``

(prompts: addition_instance_processor.py line 53, sort_instance_processor.py line 56,
sum_instance_processor.py line 129; targets: lines 61, 65 and 137; separators:
``decoder_only_input_output_sep_token`` in configs/data/s2s_addition.jsonnet,
s2s_sort.jsonnet, s2s_sum.jsonnet). The words that open the reference's target
(``The answer is``, ``The sorted list is [``) are the same in every answer: here they
end the prompt, so the model reads them instead of writing them, and ``BOS`` follows
them (a token the reference does not have: the lab's layout marks where the answer
starts with it). Not written: the commas between sort's tokens and the ``+`` between
summation's digits (in the prompt and, for sort, in the answer), and the closing
``].`` / ``.`` after an answer, whose place ``EOS`` takes. Addition's ``+`` is the
task's own symbol 10 and its final ``.`` the terminator, as before. ``prompt=False``
gives the bare inputs.

Shape notation: ``N`` strings, ``L`` input length (the prompt's words not counted), ``M`` output length.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import ClassVar

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.data.kazemnejad.primitive import KazemnejadTask
from attnlab.data.tasks.prompts import Prompt
from attnlab.data.tasks.strings import Strings, check_generator, check_sample

__all__ = ["Addition", "SortTokens", "Summation"]


class Addition(KazemnejadTask):
    """``addition``: the digits of ``a``, ``+``, the digits of ``b`` -> the digits of ``a + b``, ``.``, padding.

    Symbols: inputs ``0..9`` digits and 10 = ``+`` (then the prompt's words); outputs ``0..9`` digits and
    10 = ``.``.
    Lengths are input lengths ``L = ka + kb + 1``: the paper's training pairs span
    ``L = 3..17`` and its test pairs ``L = 11..33``, so the two overlap in ``L``;
    :attr:`train_lengths` / :attr:`test_lengths` are the clean split in ``L`` (3..17 / 18..33)
    and :attr:`train_bins` / :attr:`test_bins` the paper's own.
    """

    name = "addition"
    paper_name = "Addition"
    PLUS: ClassVar[int] = 10
    END: ClassVar[int] = 10
    body_size = 11
    output_size = 11
    template = Prompt(
        "Compute {x} ? The answer is",
        source="src/data/data_instance_processor/addition_instance_processor.py:53 and :61 (sep '')",
    )
    terminator = 10
    shortest = 3
    train_lengths = tuple(range(3, 18))
    test_lengths = tuple(range(18, 34))
    #: the paper's training pairs (digits of a, digits of b): 64 bins of 1,796 examples before the split.
    train_bins: ClassVar[tuple[tuple[int, int], ...]] = tuple((a, b) for a in range(1, 9) for b in range(1, 9))
    #: the paper's test pairs: 192 bins of 52 examples (9,984 in all).
    test_bins: ClassVar[tuple[tuple[int, int], ...]] = tuple(
        (a, b) for a in range(1, 17) for b in range(1, 17) if max(a, b) >= 9
    )

    def sample_digits(self, n: int, a_digits: int, b_digits: int, *, generator: torch.Generator) -> Strings:
        """``n`` sums of an ``a_digits``-digit and a ``b_digits``-digit number: one of the paper's bins.

        Returns:
            :class:`~attnlab.data.tasks.strings.Strings` of input length ``L = a_digits + b_digits + 1``
            (the prompt not counted), exactly as :meth:`sample` pairs such inputs.

        Raises:
            TypeError: if an argument is not an integer, or ``generator`` not a ``torch.Generator``.
            ValueError: if ``n``, ``a_digits`` or ``b_digits`` is below 1, or naming them and the
                memory they would need, for strings that cannot fit.
        """
        n = check_int("n", n, minimum=1)
        a_digits = check_int("a_digits", a_digits, minimum=1)
        b_digits = check_int("b_digits", b_digits, minimum=1)
        check_generator(generator)
        check_sample(self, n, a_digits + b_digits + 1, sizes=f"n {n} x a_digits {a_digits} + b_digits {b_digits}")
        body = self._operands(torch.full((n, 1), a_digits), a_digits + b_digits + 1, generator)  # [N, L]
        outputs = self._answer(body)
        return Strings(self.frame(body), outputs, self.scored(outputs))

    def _output_length(self, length: int) -> int:
        return length

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        a_digits = torch.randint(1, length - 1, (n, 1), generator=generator)  # [N, 1], 1 .. L - 2
        return self._operands(a_digits, length, generator)

    def _operands(self, a_digits: Tensor, length: int, generator: torch.Generator) -> Tensor:
        """Inputs ``[N, L]``: ``a_digits [N, 1]`` digits, ``+``, ``L - 1 - a_digits`` digits."""
        n = a_digits.shape[0]
        pos = torch.arange(length)[None]  # [1, L]
        b_digits = length - 1 - a_digits  # [N, 1]
        digits = torch.randint(0, 10, (n, length), generator=generator)  # [N, L]
        leading = torch.randint(1, 10, (n, length), generator=generator)  # [N, L]
        # A number of two or more digits has no leading zero; a one-digit number may be 0.
        first = ((pos == 0) & (a_digits > 1)) | ((pos == a_digits + 1) & (b_digits > 1))  # [N, L]
        inputs = torch.where(first, leading, digits)
        return torch.where(pos == a_digits, self.PLUS, inputs)  # [N, L]

    def _answer(self, inputs: Tensor) -> Tensor:
        n, length = inputs.shape
        is_plus = inputs == self.PLUS  # [N, L]
        if bool(((is_plus.sum(dim=1) != 1) | is_plus[:, 0] | is_plus[:, -1]).any()):
            raise ValueError("inputs of 'addition' must be digits, one '+' (symbol 10), digits")
        a_digits = is_plus.to(torch.uint8).argmax(dim=1, keepdim=True)  # [N, 1], the position of '+'
        col = torch.arange(length)[None]  # [1, L], column k = the 10**k digit
        a_pos = a_digits - 1 - col  # [N, L]: where column k of a sits (negative: a has no such digit)
        b_pos = (length - 1 - col).expand(n, length)  # [N, L]: where column k of b sits, if past the '+'
        a_col = torch.where(a_pos >= 0, inputs.gather(1, a_pos.clamp(min=0)), 0)  # [N, L]
        b_col = torch.where(b_pos > a_digits, inputs.gather(1, b_pos.clamp(min=0)), 0)  # [N, L]
        total = torch.zeros(n, length, dtype=torch.int64)  # [N, L], least significant first
        carry = torch.zeros(n, dtype=torch.int64)
        for k in range(length):  # columns right to left, as by hand
            column = a_col[:, k] + b_col[:, k] + carry
            total[:, k], carry = column % 10, column // 10
        # The sum has at most L - 1 digits (the carry out of the top column lands in column L - 2).
        nonzero = total != 0
        n_digits = torch.where(nonzero.any(dim=1), length - nonzero.flip(1).to(torch.uint8).argmax(dim=1), 1)  # [N]
        j = torch.arange(length)[None]  # [1, M], M = L
        src = (n_digits[:, None] - 1 - j).clamp(min=0)  # [N, M], the column written at position j
        return torch.where(j < n_digits[:, None], total.gather(1, src), self.END)  # [N, M]

    def _chance_at(self, length: int) -> float:
        return _addition_chance(length)


def _digit_law(k: int, n_digits: int) -> list[float]:
    """The law of an operand's 10**k digit: uniform 0..9, 1..9 for a leading digit (n_digits > 1), else 0."""
    if k < n_digits - 1 or (k == 0 and n_digits == 1):
        return [0.1] * 10
    if k == n_digits - 1:
        return [0.0] + [1 / 9] * 9
    return [1.0] + [0.0] * 9


@lru_cache(maxsize=64)
def _addition_chance(length: int) -> float:
    """The token accuracy of the best input-ignoring guess at input ``length``, exactly (float64).

    For each split ``ka + kb = L - 1`` (equally likely), a pass over the columns gives the
    law of every sum digit jointly with the final carry, which decides where the
    digits sit: ``1 s_{D-1} .. s_0 .`` with a carry, ``s_{D-1} .. s_0 .`` without
    (``D = max(ka, kb)``). The best guess at each position is its most likely symbol
    among the answers that score it; the accuracy is the expected number right over
    the expected number scored.
    """
    table = [[0.0] * 11 for _ in range(length + 1)]  # table[j][v]: P(position j is v and scored)
    scored = 0.0
    for ka in range(1, length - 1):
        kb, weight = length - 1 - ka, 1 / (length - 2)
        top = max(ka, kb)
        # column k's law of a_k + b_k (0..18)
        laws = []
        for k in range(top):
            a, b = _digit_law(k, ka), _digit_law(k, kb)
            laws.append([sum(a[x] * b[t - x] for x in range(max(0, t - 9), min(9, t) + 1)) for t in range(19)])
        carry_in = [[1.0, 0.0]]  # carry_in[k][c] = P(carry c into column k)
        for law in laws:
            nxt = [0.0, 0.0]
            for c in (0, 1):
                for t, p in enumerate(law):
                    nxt[(t + c) // 10] += carry_in[-1][c] * p
            carry_in.append(nxt)
        final = [[0.0, 1.0]]  # final[0][c] = P(final carry 1 | carry c into the column above), top down
        for law in reversed(laws):
            final.insert(0, [sum(p * final[0][(t + c) // 10] for t, p in enumerate(law)) for c in (0, 1)])
        p_carry = final[0][0]
        for k, law in enumerate(laws):
            for c in (0, 1):
                for t, p in enumerate(law):
                    q = weight * carry_in[k][c] * p
                    up = final[k + 1][(t + c) // 10]  # P(final carry 1 | what column k passes up)
                    table[top - k][(t + c) % 10] += q * up  # with a carry, s_k sits at position D - k
                    table[top - 1 - k][(t + c) % 10] += q * (1 - up)  # without, at D - 1 - k
        table[0][1] += weight * p_carry  # the carry's leading 1
        table[top + 1][Addition.END] += weight * p_carry
        table[top][Addition.END] += weight * (1 - p_carry)
        scored += weight * (p_carry * (top + 2) + (1 - p_carry) * (top + 1))
    return sum(max(row) for row in table) / scored


class SortTokens(KazemnejadTask):
    """``kz-sort``, "Sort (Single Token)": ``L`` tokens of 50 -> the same tokens in ascending order."""

    name = "kz-sort"
    paper_name = "Sort (Single Token)"
    default_vocab_size: ClassVar[int] = 50
    # "tr8_ts16": trained up to 8 tokens, tested on 9..16; the shortest training length is not
    # recorded in the repository, 4 is its builder's default (--train_min).
    train_lengths = tuple(range(4, 9))
    test_lengths = tuple(range(9, 17))
    template = Prompt(
        "Sort the following list [ {x} ]. The sorted list is [",
        source="src/data/data_instance_processor/sort_instance_processor.py:56 and :65 (sep '')",
    )

    def __init__(self, *, vocab_size: int | None = None, prompt: bool = True) -> None:
        """Args: vocab_size: tokens to draw from (default 50, the paper's); prompt: as :class:`KazemnejadTask`'s."""
        size = self.default_vocab_size if vocab_size is None else vocab_size
        self.vocab_size = check_int("vocab_size", size, minimum=2)
        self.body_size = self.output_size = self.vocab_size
        super().__init__(prompt=prompt)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}{'' if self.prompt else ', prompt=False'})"

    def _output_length(self, length: int) -> int:
        return length

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, self.vocab_size, (n, length), generator=generator)  # [N, L]

    def _answer(self, inputs: Tensor) -> Tensor:
        return inputs.sort(dim=1).values  # [N, L]

    def _chance_at(self, length: int) -> float:
        # Position i holds the (i+1)-th smallest of L uniform tokens: P(X(i) <= s) is the
        # chance that at least i + 1 of the L tokens are <= s, a binomial tail. The best
        # guess at position i is its most likely value.
        k = self.vocab_size

        def at_most(s: int, i: int) -> float:
            p = (s + 1) / k
            return sum(math.comb(length, m) * p**m * (1 - p) ** (length - m) for m in range(i + 1, length + 1))

        best = [max(at_most(s, i) - (at_most(s - 1, i) if s else 0.0) for s in range(k)) for i in range(length)]
        return sum(best) / length


class Summation(KazemnejadTask):
    """``summation``, "Summation": ``L`` digits of ``1..9`` -> their sum modulo 10, one symbol.

    Symbols are the digits ``0..9`` (0 is never drawn but may be written by hand), then the prompt's words.
    """

    name = "summation"
    paper_name = "Summation"
    body_size = 10
    output_size = 10
    template = Prompt(
        "Compute: {x} . [SEP] The answer is",
        source="src/data/data_instance_processor/sum_instance_processor.py:129 and :137 (sep '[SEP] ')",
    )
    # As for kz-sort: up to 8 in training (from 4, the builder's default), 9..16 in test.
    train_lengths = tuple(range(4, 9))
    test_lengths = tuple(range(9, 17))

    def _output_length(self, length: int) -> int:
        return 1

    def _draw(self, n: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(1, 10, (n, length), generator=generator)  # [N, L]

    def _answer(self, inputs: Tensor) -> Tensor:
        return inputs.sum(dim=1, keepdim=True) % 10  # [N, 1]

    def _chance_at(self, length: int) -> float:
        # The distribution of the sum mod 10, one uniform digit of 1..9 at a time.
        dist = [1.0] + [0.0] * 9
        for _ in range(length):
            dist = [sum(dist[(r - d) % 10] for d in range(1, 10)) / 9 for r in range(10)]
        return max(dist)
