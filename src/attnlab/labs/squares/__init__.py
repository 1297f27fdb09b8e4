"""The squares lab: a model learns to complete noisy squares (``attnlab train``, ``predict``).

* :mod:`.config`: :class:`SquaresConfig`, a run's settings, checked once;
* :mod:`.models`: the lab's models by name, with their sizes;
* :mod:`.train`: the run in a run folder (build, train, resume, load, predict); :mod:`.folder`: the
  folder's own checks; :mod:`.history`: its ``metrics.jsonl``;
* :mod:`.figures`: the run's figures from its saved state; :mod:`.viewer`: the report's interactive
  attention viewer; :mod:`.inference`: the models' predictions.

The names below are imported from their modules when first asked for (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnlab.labs.squares.config import SquaresConfig
    from attnlab.labs.squares.train import RunResult, load_run, predict_corners, train_run

__all__ = ["RunResult", "SquaresConfig", "load_run", "predict_corners", "train_run"]

#: where each name lives
_HOMES = {"RunResult": "train", "SquaresConfig": "config", "load_run": "train", "predict_corners": "train",
          "train_run": "train"}


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
