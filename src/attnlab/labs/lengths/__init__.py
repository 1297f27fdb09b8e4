"""The length-generalisation lab: which positional encoding still works on longer sequences (``attnlab compare``).

* :mod:`.config`: :class:`CompareConfig` (the settings, checked once) and :class:`CompareResult`;
  :mod:`.costs`: what a comparison allocates, counted from the settings;
* :mod:`.train`: one model's experiment (build, train, score);
* :mod:`.compare`: the sweep over encodings and seeds in a run folder, resumable; :mod:`.sweep`: where
  its models train (here, local worker processes, Ray), and :mod:`.worker`: what a worker process runs;
* :mod:`.protocols`: how the models train, each paper's protocol one object;
* :mod:`.presets`: the papers' setups and their published claims; :mod:`.published`: the papers'
  numbers; :mod:`.claims` and :mod:`.paper_claims`: the claims checked as each paper aggregates,
  on models that learned the task; :mod:`.suite`: a preset over several tasks;
* :mod:`.saved`: what a comparison folder holds, read and checked;
* :mod:`.table` and :mod:`.report`: the results as a table, figures and a report.

The names below are imported from their modules when first asked for (PEP 562): importing a
module of the lab (a worker imports :mod:`.worker`) runs this file, and it imports nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnlab._lazy import lazy_names

if TYPE_CHECKING:
    from attnlab.labs.lengths.compare import run_compare
    from attnlab.labs.lengths.config import QUICK, CompareConfig, CompareResult
    from attnlab.labs.lengths.report import format_table, summarise

__all__ = ["QUICK", "CompareConfig", "CompareResult", "format_table", "run_compare", "summarise"]

#: where each name lives
_HOMES = {"QUICK": "config", "CompareConfig": "config", "CompareResult": "config", "format_table": "report",
          "run_compare": "compare", "summarise": "report"}


__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__)
