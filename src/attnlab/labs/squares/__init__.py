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

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.labs.squares.config import SquaresConfig
    from attnlab.labs.squares.train import RunResult, load_run, predict_corners, train_run

__all__ = ["RunResult", "SquaresConfig", "load_run", "predict_corners", "train_run"]

#: where each name lives
_HOMES = {"RunResult": "train", "SquaresConfig": "config", "load_run": "train", "predict_corners": "train",
          "train_run": "train"}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
