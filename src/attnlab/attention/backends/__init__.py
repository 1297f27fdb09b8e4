"""The long-context paths of attention with a position scheme, and the rule that chooses among them.

* :mod:`.choose`: ``backend="auto" | "dense" | "flex" | "chunked"`` and the dense path itself;
* :mod:`.chunked`, :mod:`.chunk_plan`, :mod:`.chunk_kernels`, :mod:`.chunked_backward`: the queries a chunk at a time,
  ``O(L * C)`` memory, with their own backward pass;
* :mod:`.flex`: the scheme's ``score_mod`` inside compiled FlexAttention.

The chooser reads what a scheme declares (:class:`attnlab.encodings.PositionScheme`) and nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnlab.attention.backends.choose import (
        BACKENDS,
        DENSE_MEMORY_BUDGET,
        DENSE_SCORES,
        attend_with_position,
        choose_backend,
        dense_fits,
    )
    from attnlab.attention.backends.chunked import chunked_attend
    from attnlab.attention.backends.flex import compile_log, flex_attend

__all__ = ["BACKENDS", "DENSE_MEMORY_BUDGET", "DENSE_SCORES", "attend_with_position", "choose_backend",
           "chunked_attend", "compile_log", "dense_fits", "flex_attend"]

#: where each name lives (a module of this package), imported when first asked for (PEP 562)
_HOMES = {"BACKENDS": "choose", "DENSE_MEMORY_BUDGET": "choose", "DENSE_SCORES": "choose",
          "attend_with_position": "choose", "choose_backend": "choose", "dense_fits": "choose",
          "chunked_attend": "chunked", "compile_log": "flex", "flex_attend": "flex"}


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
