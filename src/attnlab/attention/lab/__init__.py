"""The labs' attention modules, kept apart from the functional core: their conventions, attnlab's kernels.

* :mod:`.single_head`: :class:`Attention`, the attention lab's single head (``init_keys``,
  ``attn(query, mask)``, ``alphas``);
* :mod:`.heads`: :class:`LabMultiHeadAttention`, the labs' multi-head module (every head
  ``d_model`` wide, ``init_keys``, ``mha(query, mask)``, ``alphas``), and :func:`keeping_alphas`;
* :mod:`.checkpoint`: the labs' per-head checkpoint layout, fused into attnlab's packed
  projection on load (:func:`fuse_lab_heads`).

Each is also importable from :mod:`attnlab.attention`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnlab.attention.lab.checkpoint import fuse_lab_heads, lab_head_keys
    from attnlab.attention.lab.heads import LabMultiHeadAttention, keeping_alphas
    from attnlab.attention.lab.single_head import Attention

__all__ = ["Attention", "LabMultiHeadAttention", "fuse_lab_heads", "keeping_alphas", "lab_head_keys"]

#: where each name lives: imported when first asked for (PEP 562)
_HOMES = {"Attention": "single_head", "LabMultiHeadAttention": "heads", "keeping_alphas": "heads",
          "fuse_lab_heads": "checkpoint", "lab_head_keys": "checkpoint"}


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
