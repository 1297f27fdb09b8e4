"""Saved values against the values they are to replace: the same kind, shape and layout.

A checkpoint's contents are data someone may have crafted. Before a saved value
replaces one of an optimizer's or a scheduler's, :func:`like` checks that it is
the same kind of thing as the live value (same types, list lengths, keys,
tensor shapes and dtypes, finite numbers), and :func:`layout_problem` that a
tensor is dense inside its storage, as the kernels that update state in place assume.
:mod:`attnlab.training.checkpoint_checks` applies them entry by entry.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["is_number", "layout_problem", "like", "short", "with_article"]


#: a repr short enough for one line of an error message
short = reprlib.Repr()
short.maxlist = short.maxtuple = short.maxdict = 4
short.maxstring = short.maxother = 40


def with_article(name: str) -> str:
    """``name`` with its indefinite article: "an int", "a float"."""
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def is_number(value: Any) -> bool:
    """True for an int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def layout_problem(t: torch.Tensor) -> str | None:
    """Why ``t`` (any shape ``[...]``) is not a dense strided tensor inside its storage (None if it is).

    Kernels that update state in place (the fused optimizers) walk ``numel``
    elements from the first: a broadcast view (stride 0) of one element would be
    written past its storage's end.
    """
    if t.layout != torch.strided:
        return f"a {t.layout} tensor, not a strided one"
    if t.numel() == 0:
        return None
    expected = 1
    for size, stride in sorted(((n, s) for n, s in zip(t.shape, t.stride(), strict=True) if n != 1),
                               key=lambda pair: pair[1]):
        if stride != expected:
            return (f"its elements overlap or leave gaps (strides {tuple(t.stride())} for shape "
                    f"{tuple(t.shape)}); torch.save writes dense tensors")
        expected *= size
    if (t.storage_offset() + t.numel()) * t.element_size() > t.untyped_storage().nbytes():
        return "it reaches past the end of its storage"
    return None


def like(value: Any, own: Any, owner: str, *, finite: bool,
          counters: Mapping[str, int] | None = None) -> tuple[str, str] | None:
    """How ``value`` differs in kind from ``own``, this object's own value: ``(sub-entry, problem)``, or None.

    Same types (an int is a float; a float where ``own`` is an int only outside
    ``counters``), lists and tuples of the same length, records (dicts with str
    keys) with the same keys, tensors of the same shape and dtype; None where
    ``own`` is None, or a plain scalar. Numbers are never NaN, and finite if ``finite``.
    """
    def kind() -> tuple[str, str]:
        return "", (f"{short.repr(value)} is {with_article(type(value).__name__)}, where this {owner} has "
                    f"{with_article(type(own).__name__)} ({short.repr(own)})")

    if own is None:
        return None if value is None or isinstance(value, (bool, int, float, str)) else kind()
    if isinstance(own, bool) or isinstance(own, str):
        return None if type(value) is type(own) else kind()
    if is_number(own):
        if not is_number(value):
            return kind()
        if math.isnan(value) or (finite and not math.isfinite(value)):
            return "", f"{value!r} is not a finite number"
        return None
    if isinstance(own, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            return kind()
        if len(value) != len(own):
            return "", f"{len(value)} items, where this {owner} has {len(own)}"
        for i, (item, own_item) in enumerate(zip(value, own, strict=True)):
            found = like(item, own_item, owner, finite=finite, counters=counters)
            if found:
                return f"[{i}]{found[0]}", found[1]
        return None
    if isinstance(own, dict):
        if not isinstance(value, dict):
            return kind()
        if not all(isinstance(k, str) for k in own):  # a map of data (MultiStepLR's milestones): like its items
            sample = next(iter(own.items()), None)
            for k, item in value.items():
                if sample is not None and (type(k) is not type(sample[0]) or like(item, sample[1], owner,
                                                                                    finite=finite)):
                    return f"[{k!r}]", f"{short.repr(item)} does not fit this {owner}'s {short.repr(own)}"
            return None
        missing, unknown = [k for k in own if k not in value], [k for k in value if k not in own]
        if missing or unknown:
            return "", f"lacks {missing[0]!r}, which this {owner} has" if missing else \
                f"unknown key {unknown[0]!r} for {owner}"
        for k, item in value.items():
            if counters and k in counters and isinstance(own[k], int):
                if type(item) is not int:
                    return f"[{k!r}]", (f"{short.repr(item)} is {with_article(type(item).__name__)}, "
                                        f"where this {owner} has an int ({own[k]!r})")
                if item < counters[k]:
                    return f"[{k!r}]", f"{item} is less than {counters[k]}"
            found = like(item, own[k], owner, finite=finite, counters=counters)
            if found:
                return f"[{k!r}]{found[0]}", found[1]
        return None
    if isinstance(own, torch.Tensor):
        if not isinstance(value, torch.Tensor):
            return kind()
        if value.shape != own.shape or value.dtype != own.dtype:
            return "", (f"a {value.dtype} tensor of shape {tuple(value.shape)}, where this {owner} has "
                        f"a {own.dtype} one of shape {tuple(own.shape)}")
        if value.is_floating_point() and finite and not bool(torch.isfinite(value).all()):
            return "", "holds a number that is not finite"
        problem = layout_problem(value)
        return ("", problem) if problem else None
    return None if type(value) is type(own) else kind()
