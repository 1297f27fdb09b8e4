"""The alphabet of reversed-digit arithmetic: 13 symbols, and text to symbols and back.

::

    0 .. 9  the digits        10  "+"        11  "*"        12  "="

The tasks (:mod:`attnlab.data.arithmetic.reversed_digits`) write their strings in it, and
the position rules (:mod:`attnlab.data.arithmetic.numbering`) read which symbols are digits
and which operators.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["DIGITS", "EQUALS", "OPERATORS", "PLUS", "SYMBOLS", "TIMES", "decode", "encode"]

#: the alphabet: symbol ``s`` is ``SYMBOLS[s]``.
SYMBOLS = "0123456789+*="
PLUS = 10
TIMES = 11
EQUALS = 12
#: the digit symbols 0 .. 9 and the operator symbols, as the position functions take them by default.
DIGITS: tuple[int, ...] = tuple(range(10))
OPERATORS: tuple[int, ...] = (PLUS, TIMES, EQUALS)


def encode(text: str) -> Tensor:
    """The symbols of ``text`` (``"75+86="``), int64 ``[L]``.

    Raises:
        ValueError: for a character outside ``0123456789+*=``.

    Example:
        >>> encode("75+86=")
        tensor([ 7,  5, 10,  8,  6, 12])
    """
    bad = sorted({c for c in text if c not in SYMBOLS})
    if bad:
        raise ValueError(f"text {text!r} holds {bad}, outside the alphabet {SYMBOLS!r}")
    return torch.tensor([SYMBOLS.index(c) for c in text], dtype=torch.int64)


def decode(symbols: Tensor | Sequence[int]) -> str:
    """The text of the symbols ``[L]``: the inverse of :func:`encode`.

    Raises:
        ValueError: for a symbol outside ``0 .. 12``.

    Example:
        >>> decode(torch.tensor([5, 2, 1]))
        '521'
    """
    values = symbols.tolist() if isinstance(symbols, Tensor) else list(symbols)
    bad = [v for v in values if not isinstance(v, int) or not 0 <= v < len(SYMBOLS)]
    if bad:
        raise ValueError(f"symbols hold {bad[:5]}, outside 0..{len(SYMBOLS) - 1}")
    return "".join(SYMBOLS[v] for v in values)
