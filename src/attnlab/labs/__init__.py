"""The applications: the labs that train models and leave run folders.

* :mod:`.squares`: the squares lab (``attnlab train``, ``predict``, the run figures
  of ``plot``): the labs' models, and a small Transformer, on noisy squares;
* :mod:`.lengths`, :mod:`.compare` and :mod:`.lengths_report`: the
  length-generalisation lab (``attnlab compare``): which positional encoding still
  works on longer sequences: its settings and one model, the sweep in a run folder,
  the results;
* :mod:`.run_folder`: the one contract for every folder a command writes (lock,
  kinds, resume after any kill);
* :mod:`.report`: the one HTML report writer.

Both labs train through :func:`attnlab.training.fit`. Imports run one way:
``encodings -> attention -> models -> training -> labs -> cli``.
"""

from attnlab.labs.compare import CompareResult, run_compare
from attnlab.labs.lengths import QUICK, CompareConfig
from attnlab.labs.lengths_report import format_table, summarise
from attnlab.labs.squares import RunResult, SquaresConfig, load_run, predict_corners, train_run

__all__ = ["QUICK", "CompareConfig", "CompareResult", "RunResult", "SquaresConfig", "format_table", "load_run",
           "predict_corners", "run_compare", "summarise", "train_run"]
