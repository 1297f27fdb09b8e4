"""The README's length-lab tables, generated from the committed results of each preset's default run.

Every number in the README's "Reproducing published findings" section comes from a file under
``benchmarks/results/lengths/PRESET/``: the ``suite.json`` that ``attnlab compare --preset PRESET``
wrote (a row per task and encoding: in distribution and beyond, the paper's cell, the claims'
verdicts, the wall time), and each task's ``results.json`` (the settings it ran). Each preset's
settings table is read from the preset itself (:func:`attnlab.labs.lengths.presets.format_settings`'s
rows). The tables sit in the README between ``<!-- lab-table: NAME -->`` and ``<!-- /lab-table -->``.

Run:
    python benchmarks/lab_tables.py            # rewrite the README's tables from the files
    python benchmarks/lab_tables.py --check    # exit 1, naming the table, if the README differs (writes nothing)

A preset's results are refreshed by running it and copying its small files here:
``attnlab compare --preset NAME --out RUN`` then ``python benchmarks/lab_tables.py --take RUN``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "lengths"
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- lab-table: (?P<name>[\w./-]+) -->\n)(?P<body>.*?)(<!-- /lab-table -->)", re.S)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _settings(task_results: dict[str, Any]) -> dict[str, Any]:
    return next(iter(task_results.values()))["config"]


def load(preset: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A preset's ``suite.json`` and each task's ``results.json``, from ``benchmarks/results/lengths/PRESET``.

    Raises:
        FileNotFoundError: naming the file, where the preset's results were never committed.
    """
    folder = RESULTS / preset
    suite = json.loads((folder / "suite.json").read_text())
    tasks = {task: json.loads((folder / "tasks" / task / "results.json").read_text()) for task in suite["tasks"]}
    return suite, tasks


def results_table(suite: dict[str, Any], tasks: dict[str, dict[str, Any]]) -> str:
    """In distribution and beyond, per task and encoding, in the preset's aggregate, the paper's cell beside."""
    key = "best" if suite["aggregate"] == "best" else "mean"
    names = list(dict.fromkeys(r["encoding"] for r in suite["rows"]))
    cell = {(r["task"], r["encoding"]): r for r in suite["rows"]}
    config = _settings(tasks)
    metric = suite["rows"][0]["metric"].replace("_", " ")
    beyond = ", ".join(f"{t} {min(n for n in tasks[t]['config']['test_lens'] if n > tasks[t]['config']['train_len'])}"
                       f"-{max(tasks[t]['config']['test_lens'])}" for t in suite["tasks"])
    after = "" if suite["rows"][0]["metric"] == "token_accuracy" else ", with token accuracy after the slash"
    lines = [f"{metric} in percent, {'the best seed' if key == 'best' else 'the mean over seeds'} "
             f"({config['n_seeds']} seed{'s' if config['n_seeds'] > 1 else ''}); in distribution: at the longest "
             f"training length{after}; beyond: the mean over lengths {beyond}; "
             + ("the paper's cell in brackets (its metric, its aggregate)" if any(r["paper"] is not None
                                                                                 for r in suite["rows"])
                else "no cell of the paper's could be traced (`attnlab.labs.lengths.published`)")
             + f"; `!` marks a model below {100 * suite['competence']:.0f}% token accuracy in distribution "
             "(a claim never rests on a baseline that did not learn)", ""]
    header = ["encoding"]
    for task in suite["tasks"]:
        header += [f"{task} L={tasks[task]['config']['train_len']}", f"{task} beyond"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for enc in names:
        row = [enc]
        for task in suite["tasks"]:
            r = cell.get((task, enc))
            if r is None:
                row += ["-", "-"]
                continue
            trained = r["train_best"] if key == "best" else r["train_mean"]
            mark = "" if r["learned"] else " !"
            tokens = "" if r["metric"] == "token_accuracy" else f" / {_pct(r['train_token_accuracy'])}"
            row.append(f"{_pct(trained)}{tokens}{mark}")
            row.append(_pct(r[key]) + (f" ({_pct(r['paper'])})" if r["paper"] is not None else ""))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def gains_table(suite: dict[str, Any]) -> str:
    """Each randomized scheme's gain beyond training over its baseline, per task and on average (Ruoss et al.)."""
    key = "best" if suite["aggregate"] == "best" else "mean"
    cell = {(r["task"], r["encoding"]): r for r in suite["rows"]}
    bases = [e for e in dict.fromkeys(r["encoding"] for r in suite["rows"])
             if not e.startswith("random-") and any(t for t in suite["tasks"] if (t, f"random-{e}") in cell)]
    lines = ["| randomized - baseline, points | " + " | ".join(suite["tasks"]) + " | average |",
             "|" + "---|" * (len(suite["tasks"]) + 2)]
    every = []
    for base in bases:
        gains = [100 * (cell[t, f"random-{base}"][key] - cell[t, base][key]) for t in suite["tasks"]
                 if (t, base) in cell and (t, f"random-{base}") in cell]
        every += gains
        lines.append(f"| random-{base} - {base} | " + " | ".join(f"{g:+.1f}" for g in gains)
                     + f" | {sum(gains) / len(gains):+.1f} |")
    if every:
        per_task = [[100 * (cell[t, f"random-{b}"][key] - cell[t, b][key]) for b in bases
                     if (t, b) in cell and (t, f"random-{b}") in cell] for t in suite["tasks"]]
        lines.append("| every scheme | " + " | ".join(f"{sum(g) / len(g):+.1f}" for g in per_task)
                     + f" | {sum(every) / len(every):+.1f} |")
    return "\n".join(lines)


def verdicts(suite: dict[str, Any], tasks: dict[str, dict[str, Any]]) -> str:
    """The claims' verdicts, then what the run cost: each model's training and scoring time, from ``results.json``."""
    seconds = [s for t in tasks.values() for s in t["seconds_per_model"].values()]
    lines = [f"- **{c['outcome']}**: {c['claim']}. {c['detail'][:1].upper()}{c['detail'][1:]}."
             for c in suite["claims"]]
    walls = (f"{len(seconds)} models of {min(seconds) / 60:.1f}-{max(seconds) / 60:.1f} minutes each of wall "
             f"time on one core ({sum(seconds) / 60:.0f} in all), as the run recorded them")
    if suite.get("cpu_seconds") is not None:  # the run's own CPU count: its cost, whatever else shared the machine
        lines.append(f"- {walls}; {suite['cpu_seconds'] / 60:.0f} core-minutes of CPU in all: about "
                     f"{suite['cpu_seconds'] / 120:.0f} minutes on 2 cores, two at a time.")
    else:
        lines.append(f"- {walls} (a wall time grows with whatever else shared the machine).")
    return "\n".join(lines)


def settings_table(preset: str) -> str:
    """The preset's settings table (:attr:`attnlab.labs.lengths.claims.Preset.protocol_table`) as markdown."""
    from attnlab.labs.lengths.presets import preset as preset_named

    marks = {"same": "=", "scaled": "scaled", "differs": "differs"}
    lines = ["| setting | attnlab | the paper | source | |", "|---|---|---|---|---|"]
    for row in preset_named(preset).protocol_table:
        cells = [row.what, row.lab, row.paper, row.source, marks[row.status]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def render(name: str) -> str:
    """The table called ``name``: ``PRESET/results``, ``PRESET/gains``, ``PRESET/claims`` or ``PRESET/settings``.

    Raises:
        ValueError: for another name.
    """
    preset, _, part = name.partition("/")
    if part == "settings":
        return settings_table(preset)
    suite, tasks = load(preset)
    parts = {"results": lambda: results_table(suite, tasks), "gains": lambda: gains_table(suite),
             "claims": lambda: verdicts(suite, tasks)}
    if part not in parts:
        raise ValueError(f"unknown table {name!r}: PRESET/ then one of settings, {', '.join(parts)}")
    return parts[part]()


def updated(text: str) -> str:
    """``text`` (the README) with every table between its markers generated again."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + "\n" + m.group(4), text)


def take(run: Path) -> Path:
    """Copy a finished preset run's small files (``suite.json``, each task's ``results.json``) into the results."""
    suite = json.loads((run / "suite.json").read_text())
    target = RESULTS / suite["preset"]
    for rel in ["suite.json", *(f"tasks/{t}/results.json" for t in suite["tasks"])]:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run / rel, target / rel)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README's tables are not the files'")
    parser.add_argument("--take", type=Path, default=None, help="first copy this preset run's results in")
    args = parser.parse_args(argv)
    if args.take is not None:
        print(f"results copied to {take(args.take).relative_to(ROOT)}")
    text = README.read_text()
    new = updated(text)
    if args.check:
        stale = [m.group("name") for m, n in zip(BLOCK.finditer(text), BLOCK.finditer(new), strict=True)
                 if m.group("body") != n.group("body")]
        if stale:
            print(f"README.md: these tables differ from their files: {', '.join(stale)} "
                  "(run python benchmarks/lab_tables.py)", file=sys.stderr)
            return 1
        print(f"README.md: {len(BLOCK.findall(text))} tables match their files")
        return 0
    if new != text:
        README.write_text(new)
    print(f"README.md: {len(BLOCK.findall(text))} tables written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
