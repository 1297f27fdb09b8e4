"""A package's names imported from their modules the first time they are asked for (PEP 562).

A package ``__init__`` lists where each of its public names lives and takes its ``__getattr__`` and
``__dir__`` from :func:`lazy_names`, so importing one module of the package (a model, a scheme, a task)
does not load its siblings.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str], exported: Sequence[str], *,
               renamed: Mapping[str, str] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``homes`` imported from ``package.homes[name]``
    on first use (under its own name there, or ``renamed[name]``) and kept in the package's namespace.

    Raises (the returned ``__getattr__``):
        AttributeError: for a name the package does not have, as a module without it would.
    """
    namespace = sys.modules[package].__dict__
    renamed = renamed or {}

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{homes[name]}"), renamed.get(name, name))
        namespace[name] = value  # looked up once: the next read finds it in the module
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exported])

    return __getattr__, __dir__
