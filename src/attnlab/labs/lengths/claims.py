"""What a preset is, and the cells its claims are checked on: a run's, or a paper's own.

A :class:`Preset` is a paper's setup as ``attnlab compare`` settings, with its tasks, its
published numbers and its :class:`Claim` s. A claim is checked on :class:`Cell` s, one per
task and encoding: :func:`run_cells` makes them from a comparison's records (the lab's
numbers beyond the training length, under the preset's aggregate over seeds, and the
token accuracy at the training length, which says whether the models learned the task),
:func:`published_cells` from a paper's table. Checking a claim gives a :class:`Verdict`.
The presets are :mod:`attnlab.labs.lengths.presets`, the claims' tests
:mod:`attnlab.labs.lengths.paper_claims`.

In distribution means at the longest training length (``length == config.train_len``,
which a preset's test lengths include); beyond means every test length above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COMPETENCE", "MARGIN", "SETTING_STATUSES", "Cell", "Claim", "Preset", "Setting", "Verdict", "check_preset",
           "check_runs", "gap", "pct", "published_cells", "run_cells"]

#: a difference in accuracy (0-1) below this is "no clear difference": about what separates seeds here
MARGIN = 0.02
#: token accuracy at the longest training length below which a model did not learn the task: its numbers beyond
#: training say nothing about length generalisation
COMPETENCE = 0.90


@dataclass(frozen=True)
class Verdict:
    """What one run says about one published claim.

    Attributes:
        claim: the claim, in the paper's terms.
        outcome: ``"reproduced"``, ``"partly reproduced (...)"``, ``"not reproduced"`` (no clear
            difference), ``"contradicted"`` (the opposite, clearly) or ``"not tested (...)"`` (the run lacks
            an encoding the claim needs, or the models the claim rests on did not learn the task).
        detail: the numbers behind the outcome, in words.
    """

    claim: str
    outcome: str
    detail: str


@dataclass(frozen=True)
class Cell:
    """One encoding on one task: what the claims compare.

    Attributes:
        task: the task's name.
        encoding: the encoding's name.
        exact: sequence accuracy (exact match of the whole answer) beyond the training length, aggregated
            over seeds as the preset says; None where not measured (a paper's table of token accuracy).
        tokens: token accuracy beyond the training length, likewise; None where not measured.
        trained: token accuracy at the longest training length (of the same seeds); None where the run has
            no record there, or for a published cell.
        seeds: how many seeds the numbers come from (0 for a published cell).
        published: a paper's own number, taken as the paper gives it (the papers report their models as
            having learned their tasks in distribution).
    """

    task: str
    encoding: str
    exact: float | None
    tokens: float | None
    trained: float | None = None
    seeds: int = 0
    published: bool = False

    def learned(self) -> bool | None:
        """Whether the models learned the task: token accuracy at the training length at least
        :data:`COMPETENCE` (a published cell: True); None where the run has no record at the training length."""
        if self.published:
            return True
        if self.trained is None:
            return None
        return self.trained >= COMPETENCE

    def key(self) -> tuple[float, float]:
        """What ranks cells, higher first: exact match, then token accuracy (which breaks its ties: beyond
        training exact match is often 0 for all); an unmeasured number counts as 0 for every cell alike."""
        return (self.exact or 0.0, self.tokens or 0.0)


@dataclass(frozen=True)
class Claim:
    """A published claim and the test of it on cells.

    Attributes:
        text: the claim, as the paper states it.
        source: where the paper states it.
        test: ``(cells) -> (outcome, detail)`` (see :class:`Verdict`), over every task the cells hold.
    """

    text: str
    source: str
    test: Callable[[list[Cell]], tuple[str, str]]


@dataclass(frozen=True)
class Preset:
    """A paper's setup, as ``attnlab compare`` settings, with what was scaled and the claims to check.

    Attributes:
        name: the ``--preset`` name.
        paper: the citation.
        settings: :class:`~attnlab.labs.lengths.config.CompareConfig` fields (each overridable).
        quick: further overrides for ``--quick`` (under 5 minutes on 2 cores).
        paper_setup: the paper's own values of what was scaled, ``{what: value}``.
        scaled: what was scaled and by how much, in words.
        metric: the record field the paper's claims are about.
        claims: the claims :func:`check_preset` tests.
        published: the paper's numbers, ``{(task, encoding): value}`` (fractions), from
            :data:`attnlab.labs.lengths.published.TABLES` (may be empty where none could be traced).
        published_source: where those numbers come from (a table, or the authors' released logs).
        published_metric: the metric the paper's numbers are in (:data:`attnlab.labs.lengths.published.METRICS`).
        tasks: the tasks a run of the whole preset compares, one comparison each
            (:mod:`attnlab.labs.lengths.suite`); ``--task`` runs one of them.
        aggregate: the paper's aggregate over seeds of the mean beyond training: ``"mean"``, or
            ``"best"`` (the best seed: Ruoss et al.'s, with their learning rates as well).
        cost: what a run of the whole preset costs here, in words (the full-size ones are meant for ``--ray``).
        per_task: settings of one task that differ from the others' (SCAN's lengths), over the preset's
            and ``--quick``'s, under the command line's.
        quick_per_task: with ``--quick``, a task's own further overrides, over ``per_task``.
        protocol_table: the settings table, a :class:`Setting` per row: the lab's value beside the
            paper's, with its source (:func:`attnlab.labs.lengths.presets.format_settings`).
    """

    name: str
    paper: str
    settings: dict[str, Any]
    quick: dict[str, Any]
    paper_setup: dict[str, str]
    scaled: str
    metric: str
    claims: tuple[Claim, ...]
    published: dict[tuple[str, str], float] = field(default_factory=dict)
    published_source: str = ""
    published_metric: str = ""
    tasks: tuple[str, ...] = ()
    aggregate: str = "mean"
    cost: str = ""
    per_task: dict[str, dict[str, Any]] = field(default_factory=dict)
    quick_per_task: dict[str, dict[str, Any]] = field(default_factory=dict)
    protocol_table: tuple[Setting, ...] = ()


#: how a preset's setting stands against the paper's: the same, scaled here for cost, or different
SETTING_STATUSES = ("same", "scaled", "differs")


@dataclass(frozen=True)
class Setting:
    """One row of a preset's settings table: the lab's value beside the paper's, and where the paper's was read.

    Attributes:
        what: the setting, in words (``"layers x width x heads"``).
        lab: the preset's value.
        paper: the paper's value.
        source: where the paper's value was read: the reference code's file and lines at a named
            commit, or the paper's section or table.
        status: one of :data:`SETTING_STATUSES`: ``"scaled"`` says by how much in ``lab``.

    Raises:
        ValueError: for a status that is not one of :data:`SETTING_STATUSES`.
    """

    what: str
    lab: str
    paper: str
    source: str
    status: str

    def __post_init__(self) -> None:
        if self.status not in SETTING_STATUSES:
            raise ValueError(f"status must be one of {', '.join(SETTING_STATUSES)}, got {self.status!r}")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def run_cells(records: list[dict[str, Any]], config: Any, *, metric: str, aggregate: str) -> list[Cell]:
    """A :class:`Cell` per encoding of one comparison: its numbers beyond training, and at the training length.

    Per seed, the numbers beyond training are the mean over the test lengths above
    ``config.train_len``; in distribution, the token accuracy at ``config.train_len``.
    Over seeds:

    * ``"mean"``: the mean of each (``trained`` None unless every seed has a record at the training length);
    * ``"best"``: the one seed with the highest ``metric`` beyond training among the seeds that learned
      the task (token accuracy at the training length at least :data:`COMPETENCE`), or among all of them
      where none did (its ``trained`` then says so).

    Args:
        records: ``{"encoding", "seed", "length", "token_accuracy", ["sequence_accuracy"]}`` per model and length.
        config: the comparison's settings (``task``, ``train_len``).
        metric: the record field ``"best"`` picks the seed by.
        aggregate: ``"mean"`` or ``"best"``.

    Raises:
        ValueError: for another aggregate, or if no test length exceeds the training length (no claim about
            generalisation can be checked).
    """
    if aggregate not in ("mean", "best"):
        raise ValueError(f"aggregate must be 'mean' or 'best', got {aggregate!r}")
    train_len = config.train_len
    if not any(r["length"] > train_len for r in records):
        raise ValueError(f"no test length exceeds train_len {train_len}: the claims are about longer sequences")
    # {encoding: {seed: [records beyond training], record at the training length}}
    beyond: dict[str, dict[int, list[dict[str, Any]]]] = {}
    at_train: dict[str, dict[int, dict[str, Any]]] = {}
    for r in records:
        enc, seed = r["encoding"], int(r["seed"])
        if r["length"] > train_len:
            beyond.setdefault(enc, {}).setdefault(seed, []).append(r)
        elif r["length"] == train_len:
            at_train.setdefault(enc, {})[seed] = r
    cells = []
    for enc, seeds in beyond.items():
        per_seed = {seed: {m: _mean([float(r[m]) for r in rs]) if m in rs[0] else None
                           for m in ("sequence_accuracy", "token_accuracy")} for seed, rs in seeds.items()}
        trained = {seed: float(at_train[enc][seed]["token_accuracy"]) if seed in at_train.get(enc, {}) else None
                   for seed in seeds}
        if aggregate == "best":
            learned = [s for s in seeds if (trained[s] or 0.0) >= COMPETENCE]
            chosen = max(learned or list(seeds), key=lambda s: per_seed[s][metric] or 0.0)
            exact, tokens = per_seed[chosen]["sequence_accuracy"], per_seed[chosen]["token_accuracy"]
            cells.append(Cell(config.task, enc, exact, tokens, trained[chosen], seeds=1))
            continue
        exacts = [v["sequence_accuracy"] for v in per_seed.values()]
        tokens_ = [v["token_accuracy"] for v in per_seed.values()]
        known = [t for t in trained.values() if t is not None]
        cells.append(Cell(config.task, enc,
                          None if None in exacts else _mean([x for x in exacts if x is not None]),
                          None if None in tokens_ else _mean([x for x in tokens_ if x is not None]),
                          _mean(known) if len(known) == len(trained) else None, seeds=len(seeds)))
    return cells


def published_cells(cells: Mapping[tuple[str, str], float], *, metric: str) -> list[Cell]:
    """A paper's table as :class:`Cell` s, for the claims' checks.

    Args:
        cells: ``{(task, encoding): value in 0-1}`` (a table's, or a preset's ``published``).
        metric: what the values are: ``"exact_match"`` or ``"token_accuracy"``
            (:data:`attnlab.labs.lengths.published.METRICS`).

    Raises:
        ValueError: for another metric.
    """
    if metric not in ("exact_match", "token_accuracy"):
        raise ValueError(f"metric must be 'exact_match' or 'token_accuracy', got {metric!r}")
    exact = metric == "exact_match"
    return [Cell(task, enc, value if exact else None, None if exact else value, published=True)
            for (task, enc), value in cells.items()]


def check_preset(preset: Preset, cells: list[Cell]) -> list[Verdict]:
    """The verdict on each claim of ``preset``, over every task ``cells`` hold, in the preset's order."""
    return [Verdict(claim.text, *claim.test(cells)) for claim in preset.claims]


def check_runs(preset: Preset, runs: Sequence[tuple[list[dict[str, Any]], Any]]) -> list[Verdict]:
    """The verdict on each claim of ``preset`` over comparisons ``[(records, config), ...]``, a task each.

    Raises:
        ValueError: if a comparison has no test length above its training length.
    """
    cells = [cell for records, config in runs
             for cell in run_cells(records, config, metric=preset.metric, aggregate=preset.aggregate)]
    return check_preset(preset, cells)


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal: ``0.123`` -> ``'12.3%'``."""
    return f"{100 * x:.1f}%"


def gap(a: tuple[float, ...], b: tuple[float, ...]) -> int:
    """+1 if ``a`` clearly beats ``b`` (exact match, then tokens), -1 if clearly worse, 0 if within the margin."""
    for x, y in zip(a, b, strict=True):
        if abs(x - y) > MARGIN:
            return 1 if x > y else -1
    return 0
