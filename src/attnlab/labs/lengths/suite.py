"""A preset over several tasks: one comparison per task, and the paper's table beside the lab's.

Ruoss et al. 2023 average over the tasks of the Chomsky hierarchy, and Kazemnejad et
al. 2023 report copy, reverse and SCAN side by side; a preset with ``tasks`` runs one
comparison per task (each an ordinary comparison folder, ``OUT/TASK/``, resumable on
its own) and then writes ``OUT/suite.json`` and prints one table: a row per task and
encoding, the lab's number under the paper's metric and aggregate beside the paper's
own (:mod:`attnlab.labs.lengths.published`).

The aggregates, per task and encoding, over the test lengths beyond training:

* ``mean``: the mean over seeds of each seed's mean over those lengths;
* ``best``: the best seed's (Ruoss et al. report the best of their seeds and learning
  rates: the paper's aggregate, where the preset says so).

Beside each, the numbers in distribution, at the longest training length: the mean over
seeds of the metric there (and the best seed's, where the aggregate is the best seed) and
the token accuracy there, which says whether the models learned the task at all
(:data:`~attnlab.labs.lengths.claims.COMPETENCE`). The paper's claims are checked over every
task of the suite, as each paper aggregates (:mod:`attnlab.labs.lengths.paper_claims`).

Every number in ``suite.json`` names its metric and aggregate.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnlab._io import atomic_write, check_below, read_json
from attnlab.labs.lengths.claims import COMPETENCE, Cell, Verdict, check_runs, run_cells
from attnlab.labs.lengths.compare import check_compare
from attnlab.labs.lengths.config import CompareConfig, CompareResult
from attnlab.labs.lengths.presets import Preset, format_settings
from attnlab.labs.report import Report, write_report
from attnlab.labs.run_folder import MARKER, check_claim, check_files, claim

__all__ = ["SuiteRow", "format_suite", "run_suite", "suite_rows", "suite_verdicts"]

SuiteRow = dict[str, Any]


def _per_seed(records: list[dict[str, Any]], metric: str, train_len: int) -> dict[str, list[float]]:
    """``{encoding: [per seed, the mean of metric over the test lengths above train_len]}``."""
    by: dict[str, dict[int, list[float]]] = {}
    for r in records:
        if r["length"] > train_len:
            by.setdefault(r["encoding"], {}).setdefault(int(r["seed"]), []).append(float(r[metric]))
    return {enc: [sum(v) / len(v) for _, v in sorted(seeds.items())] for enc, seeds in by.items()}


def _at_train(records: list[dict[str, Any]], metric: str, train_len: int) -> dict[str, list[float]]:
    """``{encoding: [per seed, metric at the training length]}`` (an encoding without that record: absent)."""
    by: dict[str, list[float]] = {}
    for r in records:
        if r["length"] == train_len:
            by.setdefault(r["encoding"], []).append(float(r[metric]))
    return by


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def suite_rows(results: list[CompareResult], preset: Preset) -> list[SuiteRow]:
    """A row per task and encoding: the lab's mean and best seed beyond training and in distribution, and the
    paper's number.

    Returns:
        Dicts ``{"task", "encoding", "metric", "mean", "best", "seeds", "paper", "paper_metric", "train_len",
        "train_mean", "train_best", "train_token_accuracy", "learned"}``: ``mean`` and ``best`` beyond the
        training length; ``train_*`` at the training length ``train_len`` (the mean over seeds of the
        metric, the best seed's, and the mean token accuracy; None where the run has no record there);
        ``learned`` whether the claims count the cell (True, False, or None where unknown:
        :meth:`~attnlab.labs.lengths.claims.Cell.learned`); ``paper`` None where the paper has no number.
    """
    rows = []
    for result in results:
        config = result.config
        metric = result.metric
        at_train = _at_train(result.records, metric, config.train_len)
        tokens = _at_train(result.records, "token_accuracy", config.train_len)
        cells = {c.encoding: c for c in _cells(result, preset)}
        for encoding, values in _per_seed(result.records, metric, config.train_len).items():
            paper = preset.published.get((config.task, encoding))
            trained, trained_tokens = at_train.get(encoding), tokens.get(encoding)
            cell = cells.get(encoding)
            rows.append({"task": config.task, "encoding": encoding, "metric": metric,
                         "mean": _mean(values), "best": max(values), "seeds": len(values),
                         "paper": paper, "paper_metric": preset.published_metric if paper is not None else None,
                         "train_len": config.train_len,
                         "train_mean": _mean(trained) if trained else None,
                         "train_best": max(trained) if trained else None,
                         "train_token_accuracy": _mean(trained_tokens) if trained_tokens else None,
                         "learned": cell.learned() if cell is not None else None})
    return rows


def _cells(result: CompareResult, preset: Preset) -> list[Cell]:
    """The claims' cells of one comparison (none where it has no accuracy beyond training)."""
    if "token_accuracy" not in result.config.task_object.metrics:
        return []
    try:
        return run_cells(result.records, result.config, metric=preset.metric, aggregate=preset.aggregate)
    except ValueError:  # no test length beyond training: nothing about generalisation
        return []


def suite_verdicts(results: list[CompareResult], preset: Preset) -> list[Verdict]:
    """The verdict on each claim of ``preset`` over every task of the suite (aggregated as its paper does).

    A suite that cannot test the claims (a task with no test length beyond training, or
    no accuracy) gets ``"not tested"`` for each, with the reason.
    """
    for result in results:
        if "token_accuracy" not in result.config.task_object.metrics:
            return [Verdict(c.text, "not tested", f"the {result.config.task} are scored by their error, the claims "
                            "by accuracy") for c in preset.claims]
    try:
        return check_runs(preset, [(r.records, r.config) for r in results])
    except ValueError as err:
        return [Verdict(c.text, "not tested", str(err)) for c in preset.claims]


def format_suite(rows: list[SuiteRow], preset: Preset, *, seconds: float | None = None,
                 verdicts: list[Verdict] | None = None) -> str:
    """The suite's table: a row per encoding; per task a column in distribution and one beyond; the average.

    A cell beyond training is ``lab`` (the preset's aggregate: the best seed for Ruoss et
    al., the mean for the others) ``(paper)`` where the paper has the cell, in percent. A
    cell in distribution (``L=N``, the training length) is the mean over seeds of the metric
    there (``/ best seed`` where the aggregate is the best seed) and ``/ token accuracy``
    where the metric is another; ``!`` marks a cell whose models did not learn the task
    (the claims leave it out), ``?`` one without a record at the training length.
    ``verdicts`` (:func:`suite_verdicts`) are printed after the table, a line each.
    """
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    cell = {(r["task"], r["encoding"]): r for r in rows}
    train_len = {r["task"]: r.get("train_len") for r in rows}
    key = "best" if preset.aggregate == "best" else "mean"
    metric = rows[0]["metric"] if rows else "?"
    tokens_too = metric != "token_accuracy"
    inside = "the mean over seeds" + (" / the best seed" if key == "best" else "") + (
        " / token accuracy" if tokens_too else "")
    lines = [f"preset {preset.name}: {metric.replace('_', ' ')} beyond the training length, % "
             f"({_aggregate_words(preset)}); (paper) where the paper has the cell"
             + ("" if preset.published else ": it has none here"),
             f"L=N: at the training length N, {inside}; !: token accuracy there below {100 * COMPETENCE:.0f}% (the "
             "models did not learn the task: the claims leave them out); ?: no record at the training length",
             ""]
    header = ["encoding"]
    for task in tasks:
        header += [f"{task} L={train_len[task]}", f"{task} L>{train_len[task]}"]
    header.append("average")
    table = [header]
    for enc in encodings:
        line = [enc]
        values = []
        for task in tasks:
            r = cell.get((task, enc))
            if r is None:
                line += ["-", "-"]
                continue
            line.append(_in_distribution(r, key=key, tokens_too=tokens_too))
            values.append(r[key])
            text = f"{100 * r[key]:.1f}"
            if r["paper"] is not None:
                text += f" ({100 * r['paper']:.1f})"
            line.append(text)
        line.append(f"{100 * sum(values) / len(values):.1f}" if values else "-")
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
              for row in table]
    if seconds is not None:
        lines.append(f"{sum(r['seeds'] for r in rows)} models in {seconds:.0f} s")
    if verdicts:
        lines += ["", f"Claims, over the {len(tasks)} task{'s' if len(tasks) > 1 else ''} of the suite, each "
                      "aggregated as its paper does:"]
        lines += [f"  {v.outcome}: {v.claim} — {v.detail}" for v in verdicts]
    return "\n".join(lines)


def _in_distribution(row: SuiteRow, *, key: str, tokens_too: bool) -> str:
    """A cell at the training length: ``mean[ / best][ / tokens]`` in percent, then ``!``, ``?`` or nothing."""
    if row.get("train_mean") is None:
        return "?"
    parts = [f"{100 * row['train_mean']:.1f}"]
    if key == "best":
        parts.append(f"{100 * row['train_best']:.1f}")
    if tokens_too and row.get("train_token_accuracy") is not None:
        parts.append(f"{100 * row['train_token_accuracy']:.0f}")
    mark = {False: "!", None: "?"}.get(row.get("learned"), "")
    return " / ".join(parts) + mark


def _aggregate_words(preset: Preset) -> str:
    return ("the best seed's mean over the longer lengths, the paper's aggregate" if preset.aggregate == "best"
            else "the mean over seeds of the mean over the longer lengths, the paper's aggregate")


def run_suite(configs: list[CompareConfig], folder: str | os.PathLike[str], preset: Preset, *, resume: bool,
              run_one: Callable[[CompareConfig, Path, bool], CompareResult],
              announce: Callable[[], None] | None = None) -> tuple[list[CompareResult], Path]:
    """Run one comparison per config in ``folder/tasks/TASK/``, then write ``suite.json``, ``suite.txt`` and
    ``report.html`` (the table, and a link to each task's report).

    Args:
        configs: a comparison per task (the preset's settings with each task).
        folder: the suite's run folder (new, empty, or ``resume``: a suite of these tasks).
        preset: the preset (its published cells and aggregate).
        resume: continue each task's comparison where it stopped (a task not begun starts).
        run_one: ``(config, task_folder, resume) -> CompareResult``: how one comparison runs
            (``run_compare`` with the caller's progress, workers and device).
        announce: called once every task is checked, before the folder is claimed (what the CLI prints).

    Returns:
        The results, in the order of ``configs``, and the suite folder.

    Raises:
        ValueError: for a folder the run-folder contract refuses, a task's comparison that
            :func:`~attnlab.labs.lengths.compare.check_compare` refuses (every task is checked
            before anything is written), and what ``run_one`` raises.
    """
    results = []
    began = time.perf_counter()
    cpu_before = _cpu_seconds()
    _check_suite(configs, check_claim(folder, kind="suite", resume=resume), preset, resume=resume)
    if announce is not None:
        announce()
    with claim(folder, kind="suite", resume=resume) as run:
        # What this folder is a suite of, before any task writes: a later --resume must be this suite.
        run.write_json(_IDENTITY, {"preset": preset.name, "tasks": [config.task for config in configs]})
        for config in configs:
            where = _task_folder(run.path, config)
            results.append(run_one(config, where, resume and where.exists()))
        rows = suite_rows(results, preset)
        verdicts = suite_verdicts(results, preset)
        seconds = time.perf_counter() - began
        cpu_after = _cpu_seconds()
        # This invocation's CPU, its local workers' included (a resumed suite counts what it ran itself).
        cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
        run.write_json("suite.json", {
            "preset": preset.name, "paper": preset.paper, "aggregate": preset.aggregate,
            "published_source": preset.published_source, "published_metric": preset.published_metric,
            "cpu_seconds": cpu,
            "seconds": seconds, "tasks": [c.task for c in configs], "rows": rows, "competence": COMPETENCE,
            "claims": [{"claim": v.claim, "outcome": v.outcome, "detail": v.detail} for v in verdicts],
            "settings_table": [dataclasses.asdict(row) for row in preset.protocol_table]})
        text = format_suite(rows, preset, seconds=seconds, verdicts=verdicts) + "\n"
        if preset.protocol_table:
            text += "\n" + format_settings(preset.name) + "\n"
        atomic_write(run.file("suite.txt"), lambda tmp: tmp.write_text(text))
        links = ", ".join(f"tasks/{c.task}/report.html" for c in configs)
        write_report(run.file("report.html"), Report(
            title=f"Preset {preset.name}: which positional encoding generalises, task by task",
            paragraphs=[f"{preset.paper}. Scaled to run here: {preset.scaled}.",
                        f"Each task is a comparison of its own, with its figures and report: {links}.",
                        f"The paper's numbers: {preset.published_source or 'none could be traced here'}."],
            preformatted=text, settings={"preset": preset.name, "tasks": [c.task for c in configs]},
            table_title="The preset's settings beside the paper's",
            table_header=("setting", "attnlab", "the paper", "source", "status"),
            table_rows=[(r.what, r.lab, r.paper, r.source, r.status) for r in preset.protocol_table]))
        return results, run.path


#: what a suite writes at its root (each task's comparison writes its own folder, tasks/TASK)
_OUTPUTS = ("suite.json", "suite.txt", "report.html")
#: the preset and tasks a suite folder holds, written when the folder is claimed
_IDENTITY = "suite-settings.json"


def _cpu_seconds() -> float | None:
    """CPU seconds this process and the children it has reaped (local workers) have used; None off Unix."""
    try:
        import resource
    except ImportError:
        return None
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                   resource.getrusage(resource.RUSAGE_CHILDREN)))


def _task_folder(root: Path, config: CompareConfig) -> Path:
    """``root/tasks/TASK``: neither ``tasks`` nor ``tasks/TASK`` a link (the comparison would be written through it)."""
    return check_below(root, root / "tasks" / config.task / MARKER).parent


def _check_suite(configs: list[CompareConfig], root: Path, preset: Preset, *, resume: bool) -> None:
    """Check, writing nothing, every task's comparison (resumed where its folder exists) and the suite's outputs."""
    check_files(root, [(name,) for name in (*_OUTPUTS, _IDENTITY)])
    if resume:
        _check_same_suite(root, preset, [config.task for config in configs])
    for config in configs:
        where = _task_folder(root, config)
        check_compare(config, where, resume=resume and where.exists())


def _check_same_suite(root: Path, preset: Preset, tasks: list[str]) -> None:
    """Refuse to resume, in ``root``, a suite other than the one it holds: another preset, other tasks, or task
    folders this suite would not write (their outputs would be mixed with its own and its table overwritten).

    Each task's settings are its comparison's to check (:func:`~attnlab.labs.lengths.compare.check_compare`).
    """
    shown = str(root)
    for name in (_IDENTITY, "suite.json"):
        if (root / name).is_file():
            doc = read_json(root / name, what=f"the suite's {name}")
            held, held_tasks = (doc.get("preset"), doc.get("tasks")) if isinstance(doc, dict) else (None, None)
            if held != preset.name:
                raise ValueError(f"--resume: {shown!r} holds a suite of preset {held!r}, not {preset.name!r}; "
                                 "give another --out")
            if isinstance(held_tasks, list) and sorted(map(str, held_tasks)) != sorted(tasks):
                raise ValueError(f"--resume: {shown!r} holds the tasks {', '.join(map(str, held_tasks))}, "
                                 f"not {', '.join(tasks)}; give another --out")
            break
    begun = sorted(p.name for p in (root / "tasks").iterdir()) if (root / "tasks").is_dir() else []
    if others := [name for name in begun if name not in tasks]:
        raise ValueError(f"--resume: {shown!r} holds comparisons of {', '.join(others)}, which this suite "
                         f"({preset.name}: {', '.join(tasks)}) does not run; give another --out")
