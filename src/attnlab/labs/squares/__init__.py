"""The squares lab: a model learns to complete noisy squares (``attnlab train``, ``predict``).

* :mod:`.config`: :class:`SquaresConfig`, a run's settings, checked once;
* :mod:`.train`: the run in a run folder (train, resume, load, predict);
* :mod:`.figures`: the run's figures from its saved state;
* :mod:`.viewer`: the report's interactive attention viewer.
"""

from attnlab.labs.squares.config import SquaresConfig
from attnlab.labs.squares.train import RunResult, load_run, predict_corners, train_run

__all__ = ["RunResult", "SquaresConfig", "load_run", "predict_corners", "train_run"]
