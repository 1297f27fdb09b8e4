"""Reversed-digit arithmetic (McLeish et al. 2024, Cho et al. 2024), and the two ways its papers number the digits.

* :mod:`.alphabet`: the 13 symbols (digits, ``+``, ``*``, ``=``), :func:`encode` and :func:`decode`;
* :mod:`.reversed_digits`: :class:`ReversedAddition` and :class:`ReversedMultiplication`,
  string generators that also number their tokens (``position_ids``);
* :mod:`.numbering`: the numbering: :func:`digit_positions` (Abacus) and
  :func:`coupled_positions` (position coupling).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    """One of :data:`__all__`, imported from its module the first time it is asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazily imported ones included."""
    return sorted([*globals(), *__all__])
