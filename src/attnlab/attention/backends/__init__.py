"""The long-context paths of attention with a position scheme, and the rule that chooses among them.

* :mod:`.choose`: ``backend="auto" | "dense" | "flex" | "chunked"`` and the dense path itself;
* :mod:`.chunked`, :mod:`.chunk_plan`, :mod:`.chunk_kernels`, :mod:`.chunked_backward`: the queries a chunk at a time,
  ``O(L * C)`` memory, with their own backward pass;
* :mod:`.flex`: the scheme's ``score_mod`` inside compiled FlexAttention.

The chooser reads what a scheme declares (:class:`attnlab.encodings.PositionScheme`) and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

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


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
