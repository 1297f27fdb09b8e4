"""The applications: the labs that train models and leave run folders.

* :mod:`.squares` (a package): the squares lab (``attnlab train``, ``predict``, the
  run figures of ``plot``): the labs' models, and a small Transformer, on noisy squares;
* :mod:`.lengths` (a package): the length-generalisation lab (``attnlab compare``):
  which positional encoding still works on longer sequences: its settings and their costs,
  one model, the sweep in a run folder (here, local worker processes, Ray), the papers'
  presets, the results;
* :mod:`.run_folder`: the one contract for every folder a command writes (lock,
  kinds, resume after any kill);
* :mod:`.memory_bound`: a run's memory, bounded from its settings before anything is built;
* :mod:`.report`: the one HTML report writer.

Both labs train through :func:`attnlab.training.fit`. Imports run one way:
``encodings -> attention -> models -> training -> labs -> cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.labs.lengths.compare import CompareResult, run_compare
    from attnlab.labs.lengths.config import QUICK, CompareConfig
    from attnlab.labs.lengths.report import format_table, summarise
    from attnlab.labs.squares.config import SquaresConfig
    from attnlab.labs.squares.train import RunResult, load_run, predict_corners, train_run

__all__ = ["QUICK", "CompareConfig", "CompareResult", "RunResult", "SquaresConfig", "format_table", "load_run",
           "predict_corners", "run_compare", "summarise", "train_run"]

#: where each name lives: imported when first asked for (PEP 562), so that ``attnlab train`` does not import
#: the length lab (a fifth of a second) and ``attnlab compare`` not the squares lab
_HOMES = {"CompareResult": "lengths.compare", "run_compare": "lengths.compare", "QUICK": "lengths.config",
          "CompareConfig": "lengths.config", "format_table": "lengths.report", "summarise": "lengths.report",
          "RunResult": "squares.train", "SquaresConfig": "squares.config", "load_run": "squares.train",
          "predict_corners": "squares.train", "train_run": "squares.train"}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
