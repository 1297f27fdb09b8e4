"""The length-generalisation lab: which positional encoding still works on longer sequences (``attnlab compare``).

* :mod:`.config`: :class:`CompareConfig` (the settings, checked once, and what they cost)
  and :class:`CompareResult`;
* :mod:`.train`: one model's experiment (build, train, score);
* :mod:`.compare`: the sweep over encodings and seeds in a run folder, resumable;
* :mod:`.presets`: the papers' setups and their published claims; :mod:`.published`: the papers'
  numbers; :mod:`.claims` and :mod:`.paper_claims`: the claims checked as each paper aggregates,
  on models that learned the task; :mod:`.suite`: a preset over several tasks;
* :mod:`.table` and :mod:`.report`: the results as a table, figures and a report.
"""

from attnlab.labs.lengths.compare import run_compare
from attnlab.labs.lengths.config import QUICK, CompareConfig, CompareResult
from attnlab.labs.lengths.report import format_table, summarise

__all__ = ["QUICK", "CompareConfig", "CompareResult", "format_table", "run_compare", "summarise"]
