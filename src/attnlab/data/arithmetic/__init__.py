"""Reversed-digit arithmetic (McLeish et al. 2024, Cho et al. 2024), and the two ways its papers number the digits.

* :mod:`.alphabet`: the 13 symbols (digits, ``+``, ``*``, ``=``), :func:`encode` and :func:`decode`;
* :mod:`.reversed_digits`: :class:`ReversedAddition` and :class:`ReversedMultiplication`,
  string generators that also number their tokens (``position_ids``);
* :mod:`.numbering`: the numbering: :func:`digit_positions` (Abacus) and
  :func:`coupled_positions` (position coupling).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.data.arithmetic.alphabet import DIGITS, EQUALS, OPERATORS, PLUS, SYMBOLS, TIMES, decode, encode
    from attnlab.data.arithmetic.numbering import coupled_positions, digit_positions, task_positions
    from attnlab.data.arithmetic.reversed_digits import (
        ReversedAddition,
        ReversedMultiplication,
        addition_strings,
        multiplication_strings,
    )

__all__ = ["DIGITS", "EQUALS", "OPERATORS", "PLUS", "ReversedAddition", "ReversedMultiplication", "SYMBOLS", "TIMES",
           "addition_strings", "coupled_positions", "decode", "digit_positions", "encode", "multiplication_strings",
           "task_positions"]

#: where each name lives: imported the first time it is asked for (PEP 562), so that importing one
#: module of the package does not import its siblings
_HOMES = {
    "decode": "alphabet", "DIGITS": "alphabet", "encode": "alphabet", "EQUALS": "alphabet", "OPERATORS": "alphabet",
    "PLUS": "alphabet", "SYMBOLS": "alphabet", "TIMES": "alphabet",
    "addition_strings": "reversed_digits", "multiplication_strings": "reversed_digits",
    "ReversedAddition": "reversed_digits", "ReversedMultiplication": "reversed_digits",
    "coupled_positions": "numbering", "digit_positions": "numbering", "task_positions": "numbering",
}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
