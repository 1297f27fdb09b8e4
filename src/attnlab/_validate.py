"""Argument checks shared across attnlab.

Every public function validates its arguments here so that a bad value gives a
``ValueError`` or ``TypeError`` whose message names the argument and the value,
never an ``IndexError`` from deep inside a tensor expression. The CLI relies on
these messages: it prints them as one line on stderr.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

__all__ = [
    "check_choice",
    "check_dtype",
    "check_finite_float",
    "check_int",
    "check_keys",
    "check_probability",
]


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` as an int after checking its type and lower bound.

    Raises:
        TypeError: if ``value`` is not an integer (bools are refused too).
        ValueError: if ``value`` is below ``minimum``.
    """
    # bool is a subclass of int, but `d_model=True` is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
            value = int(value.item())
        else:
            raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        bound = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def check_finite_float(name: str, value: Any, *, positive: bool = False) -> float:
    """Return ``value`` as a finite float, optionally strictly positive.

    Raises:
        TypeError: if ``value`` is not a real number.
        ValueError: if it is NaN or infinite, or not positive when ``positive`` is set.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def check_probability(name: str, value: Any) -> float:
    """Return ``value`` as a float in [0, 1).

    Raises:
        TypeError: if ``value`` is not a number.
        ValueError: if it lies outside [0, 1).
    """
    value = check_finite_float(name, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return value


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``.

    Raises:
        ValueError: naming the value and listing the known choices.
    """
    choices = tuple(choices)
    if value not in choices:
        known = ", ".join(repr(c) for c in choices)
        raise ValueError(f"unknown {name} {value!r}; known: {known}")
    return str(value)


def check_keys(name: str, d: Any, known: Iterable[str]) -> dict[str, Any]:
    """Return ``d`` if it is a dict whose keys are all in ``known`` (a config read from a file).

    Raises:
        ValueError: naming ``name``, if ``d`` is not a dict or has unknown keys (listed).
    """
    if not isinstance(d, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(d).__name__}")
    unknown = set(d) - set(known)
    if unknown:
        raise ValueError(f"{name} has unknown keys {sorted(unknown)}")
    return d


def check_dtype(name: str, value: Any, *, floating: bool = True) -> torch.dtype:
    """Return ``value`` if it is a (floating-point) ``torch.dtype``.

    Raises:
        TypeError: if ``value`` is not a torch dtype, or not a floating one when required.
    """
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {value!r}")
    if floating and not value.is_floating_point:
        raise TypeError(f"{name} must be a floating-point dtype, got {value}")
    return value
