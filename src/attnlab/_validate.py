"""Argument checks shared across attnlab.

Every public function validates its arguments here so that a bad value gives a
``ValueError`` or ``TypeError`` whose message names the argument and the value,
never an ``IndexError`` from deep inside a tensor expression. The CLI relies on
these messages: it prints them as one line on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, cast

import torch

__all__ = [
    "check_bool",
    "check_choice",
    "check_device",
    "check_dtype",
    "check_finite_float",
    "check_float32",
    "check_int",
    "check_keys",
    "check_probability",
    "check_seed",
]


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int after checking its type and bounds.

    An integer is a Python ``int``, a numpy integer (``np.int64(3)``) or a one-element integer
    tensor or array (``torch.tensor(3)``, ``np.array(3)``): the same for torch and numpy.
    Bools (Python's, numpy's, torch's) and floats (even ``3.0``) are refused, whatever they live in.

    Raises:
        TypeError: if ``value`` is not an integer (bools are refused too).
        ValueError: if ``value`` is below ``minimum`` or above ``maximum``.
    """
    # A size torch.export traces symbolically (its default, non-strict mode runs this code on them) is
    # compared, which records the bounds, but kept symbolic: int() would fix the size exported.
    symbolic = isinstance(value, torch.SymInt)
    # bool is a subclass of int, but `d_model=True` is always a mistake.
    if not symbolic and (isinstance(value, bool) or not isinstance(value, int)):
        whole = _integer_scalar(value)
        if whole is None:
            raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
        value = whole
    if minimum is not None and value < minimum:
        bound = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return cast(int, value) if symbolic else int(value)


def _integer_scalar(value: Any) -> int | None:
    """``value`` as an int if it is one integer held by torch or numpy (not a bool, not a float); else None.

    Duck-typed on ``dtype`` and ``size``/``numel`` so numpy is never imported here.
    """
    if isinstance(value, torch.Tensor):
        ok = value.numel() == 1 and value.dtype != torch.bool and not value.is_floating_point() \
            and not value.is_complex()
        return int(value.item()) if ok else None
    dtype = getattr(value, "dtype", None)
    if type(value).__module__ == "numpy" and getattr(dtype, "kind", None) in ("i", "u") \
            and getattr(value, "size", 0) == 1:
        return int(value.item())
    return None


#: torch.manual_seed's range
SEED_RANGE = (-(2**63), 2**64 - 1)


def check_seed(name: str, value: Any) -> int:
    """Return ``value`` if it is an integer torch can seed with (-2**63 to 2**64 - 1).

    Raises:
        TypeError: if it is not an integer; ValueError: if it is out of that range.
    """
    return check_int(name, value, minimum=SEED_RANGE[0], maximum=SEED_RANGE[1])


def check_finite_float(name: str, value: Any, *, positive: bool = False) -> float:
    """Return ``value`` as a finite float, optionally strictly positive.

    Raises:
        TypeError: if ``value`` is not a real number.
        ValueError: if it is NaN or infinite, or not positive when ``positive`` is set.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    # Not math.isfinite: torch.compile traces a module's float attribute as a symbolic float, which it takes
    # only in comparisons (NaN compares False, so this refuses NaN and both infinities alike).
    if not abs(value) <= sys.float_info.max:
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


#: the largest finite float32 (torch.finfo(torch.float32).max)
FLOAT32_MAX = 3.4028234663852886e38


def check_float32(name: str, value: Any, *, positive: bool = False) -> float:
    """Return ``value`` as a float after checking that it is finite in float32, the dtype it will live in.

    A number finite in Python's float64 but beyond float32's range (``1e39``)
    becomes inf the moment it meets a float32 tensor, so it is refused like inf.

    Raises:
        TypeError: if ``value`` is not a real number.
        ValueError: if it is NaN, infinite, or beyond float32's range (or not positive when asked).
    """
    value = check_finite_float(name, value, positive=positive)
    if abs(value) > FLOAT32_MAX:
        raise ValueError(f"{name} must be finite in float32 (|x| <= 3.4e38), got {value:g}: "
                         "it would become inf")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool.

    Truthiness is not enough: ``is_causal="no"`` is truthy, and would silently mean yes.

    Raises:
        TypeError: for anything but True or False (numpy and torch booleans included as bools).
    """
    if isinstance(value, bool):
        return value
    if type(value).__name__ == "bool_" or (isinstance(value, torch.Tensor) and value.dtype == torch.bool
                                           and value.numel() == 1):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


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


def check_keys(name: str, d: Any, known: Iterable[str], *, complete: bool = False) -> dict[str, Any]:
    """Return ``d`` if it is a dict whose keys are all in ``known`` (a config read from a file).

    Args:
        name: what ``d`` is, for messages.
        d: the dict.
        known: the keys it may hold.
        complete: it must hold every one of them too.

    Raises:
        ValueError: naming ``name``, if ``d`` is not a dict, has unknown keys, or
            (``complete``) lacks some (each listed).
    """
    if not isinstance(d, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(d).__name__}")
    known = list(known)
    unknown = set(d) - set(known)
    if unknown:
        raise ValueError(f"{name} has unknown keys {sorted(unknown)}")
    missing = [key for key in known if key not in d]
    if complete and missing:
        raise ValueError(f"{name} lacks {', '.join(map(repr, missing))}")
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


# How to convert a tensor or a module to a dtype, for the messages of check_input_dtype.
_CONVERSIONS = {torch.float32: "float()", torch.float64: "double()", torch.float16: "half()",
                torch.bfloat16: "bfloat16()"}


def _conversion(dtype: torch.dtype) -> str:
    return _CONVERSIONS.get(dtype, f"to({dtype})")


def check_input_dtype(name: str, x: torch.Tensor, expected: torch.dtype, *, owner: str = "model") -> None:
    """Raise unless ``x`` has ``expected``, the dtype of the parameters it is about to meet.

    One attribute compare, no data read: called once per value, where it first meets
    the weights. Under ``torch.autocast`` mixed dtypes are the point, so nothing is checked.

    Raises:
        TypeError: naming ``name``, its dtype and ``expected``, and how to convert
            (e.g. "X has dtype torch.float64 but the model's parameters are
            torch.float32; convert with X.float() or model.double()").
    """
    if x.dtype == expected or torch.is_autocast_enabled(x.device.type):
        return
    hint = f"{name}.{_conversion(expected)}"
    if x.is_floating_point():
        hint += f" or {owner}.{_conversion(x.dtype)}"
    raise TypeError(f"{name} has dtype {x.dtype} but the {owner}'s parameters are {expected}; convert with {hint}")


def check_device(name: str, t: Any, device: torch.device, *, of: str = "the inputs") -> None:
    """Raise unless the tensor ``t`` (or None) is on ``device``, where the values it goes with are.

    One attribute compare, no data read (static under ``torch.compile``): called once per value,
    where it first meets the inputs. A tensor on the meta device holds no data at all (every read
    of it failed deep in torch: "Tensor.item() cannot be called on meta tensors").

    Raises:
        ValueError: naming ``name``, its device and ``device``, e.g. "position_ids are on meta but
            the inputs are on cpu; move them with position_ids.to('cpu')".
    """
    if not isinstance(t, torch.Tensor) or t.device == device:
        return
    why = " (a meta tensor holds no values)" if t.device.type == "meta" else ""
    raise ValueError(f"{name} is on {t.device}{why} but {of} are on {device}; move it with "
                     f"{name}.to({str(device)!r})")
