"""What a preset is, and how a published claim is checked on a run's records.

A :class:`Preset` is a paper's setup as ``attnlab compare`` settings, with its tasks, its
published numbers and its :class:`Claim` s; checking a claim on a run gives a
:class:`Verdict`. The presets themselves are :mod:`attnlab.labs.lengths.presets`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MARGIN", "SETTING_STATUSES", "Claim", "Preset", "Setting", "Verdict", "beyond_training", "gap", "pct"]


@dataclass(frozen=True)
class Verdict:
    """What one run says about one published claim.

    Attributes:
        claim: the claim, in the paper's terms.
        outcome: ``"reproduced"``, ``"not reproduced"`` (no clear difference),
            ``"contradicted"`` (the opposite, clearly) or ``"not tested"`` (this run
            lacks an encoding the claim needs).
        detail: the lab's numbers behind the outcome, in words.
    """

    claim: str
    outcome: str
    detail: str


@dataclass(frozen=True)
class Claim:
    """A published claim and the test of it on a run's records.

    Attributes:
        text: the claim, as the paper states it.
        source: where the paper states it.
        test: ``(records, config) -> (outcome, detail)`` (see :class:`Verdict`).
    """

    text: str
    source: str
    test: Callable[[list[dict[str, Any]], Any], tuple[str, str]]


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
        claims: the claims :func:`check_claims` tests.
        published: the paper's numbers, ``{(task, encoding): value}`` (fractions), from
            :data:`attnlab.labs.lengths.published.TABLES` (may be empty where none could be traced).
        published_source: where those numbers come from (a table, or the authors' released logs).
        published_metric: the metric the paper's numbers are in.
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
    """

    what: str
    lab: str
    paper: str
    source: str
    status: str

    def __post_init__(self) -> None:
        if self.status not in SETTING_STATUSES:
            raise ValueError(f"status must be one of {', '.join(SETTING_STATUSES)}, got {self.status!r}")


#: a difference in accuracy (0-1) below this is "no clear difference": about what separates seeds here
MARGIN = 0.02


def beyond_training(records: list[dict[str, Any]], config: Any, metric: str) -> dict[str, float]:
    """``{encoding: mean of metric}`` over the seeds and every test length above ``config.train_len``.

    Raises:
        ValueError: if no test length exceeds the training length (no claim about generalisation can be checked).
    """
    longer = [r for r in records if r["length"] > config.train_len]
    if not longer:
        raise ValueError(f"no test length exceeds train_len {config.train_len}: the claims are about longer sequences")
    sums: dict[str, list[float]] = {}
    for r in longer:
        sums.setdefault(r["encoding"], []).append(float(r[metric]))
    return {enc: sum(v) / len(v) for enc, v in sums.items()}


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal: ``0.123`` -> ``'12.3%'``."""
    return f"{100 * x:.1f}%"




def gap(a: tuple[float, float], b: tuple[float, float]) -> int:
    """+1 if ``a`` clearly beats ``b`` (exact match, then tokens), -1 if clearly worse, 0 if within the margin."""
    for x, y in zip(a, b, strict=True):
        if abs(x - y) > MARGIN:
            return 1 if x > y else -1
    return 0
