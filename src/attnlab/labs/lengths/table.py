"""The length-generalisation lab's numbers as text: chance level, the table, a preset's claims.

Everything here is computed from records (``{"encoding", "seed", "length", metric...}``)
and the comparison's settings, so the table of a comparison can always be printed
again from what its folder saved. :mod:`attnlab.labs.lengths.report` writes it into
the run folder; ``attnlab compare`` prints it.

The table (:func:`format_table`), a row per encoding and a column per test length::

    reverse, decoder-only: trained on lengths up to 8
    cells: sequence accuracy % mean [min-max over 3 seeds] / token accuracy % mean
    *: the best encoding at that length, as printed (ties all marked; none where all are equal)
    chance: guessing each symbol uniformly
    encoding              L=8 (train)             L=12             L=16
    sinusoidal  100.0 [100-100] / 100   5.5 [5-6] / 79*  0.1 [0-1] / 64*
    learned     100.0 [100-100] / 100   0.5 [0-1] / 64   0.0 [0-0] / 44
    chance                    ~0 / 10          ~0 / 10          ~0 / 10

For a preset run (``attnlab compare --preset NAME``) the cells hold the preset's
metric, a column ``L>N`` the mean over the test lengths beyond training (what the
paper's claims and numbers are about) and, where the paper's number for the task
and encoding is known (:attr:`~attnlab.labs.lengths.presets.Preset.published`, in the
metric's own unit: a fraction, as the records), a column ``paper`` beside it; the
training length's column adds the token accuracy there where the metric is another
(the models learned the task where it is at least
:data:`~attnlab.labs.lengths.claims.COMPETENCE`: the claims judge only those);
after the table come the paper, its setup against this run's, and a line per
claim with this run's verdict.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

from attnlab._validate import check_choice
from attnlab.labs.lengths.claims import COMPETENCE
from attnlab.labs.lengths.config import CompareConfig, CompareResult
from attnlab.labs.lengths.presets import Verdict, check_claims, preset

__all__ = ["METRICS", "chance_level", "changed_settings", "claim_verdicts", "format_table", "run_setup", "summarise"]

#: the metrics a comparison records: accuracies (token tasks) and the squares' error.
METRICS = ("sequence_accuracy", "token_accuracy", "mean_squared_error")
_NAMES = {"sequence_accuracy": "sequence accuracy", "token_accuracy": "token accuracy",
          "mean_squared_error": "test MSE"}
_WIDTH = 120  # the prose after the table is wrapped to a terminal's width
_SEP = "  "  # between columns


def summarise(records: list[dict[str, Any]], metric: str) -> dict[str, dict[int, tuple[float, float, float]]]:
    """``{encoding: {length: (mean, min, max)}}`` of ``metric`` over seeds, lengths in order."""
    return {enc: {n: (_mean(v), min(v), max(v)) for n, v in by_len.items()}
            for enc, by_len in _grouped(records, metric).items()}


def _grouped(records: list[dict[str, Any]], metric: str) -> dict[str, dict[int, list[float]]]:
    """``{encoding: {length: [value per seed]}}``, lengths in order."""
    grouped: dict[str, dict[int, list[float]]] = {}
    for r in records:
        grouped.setdefault(r["encoding"], {}).setdefault(r["length"], []).append(float(r[metric]))
    return {enc: dict(sorted(by_len.items())) for enc, by_len in grouped.items()}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# -- chance ------------------------------------------------------------------------------


def _chance_at(config: CompareConfig, metric: str, length: int) -> float:
    """The chance level of ``metric`` on the test set of one source ``length`` (see :func:`chance_level`)."""
    chance = config.task_object.chance(metric, n_symbols=config.n_symbols, length=length)
    assert chance is not None  # an accuracy: guessing has a score
    return chance


def chance_level(config: CompareConfig, metric: str) -> float | None:
    """What guessing scores: the baseline a trained model's accuracy is read against.

    The guesser draws every target symbol uniformly from the ``n_symbols`` symbols:

    * token accuracy: ``1 / n_symbols``. Its expected score is exactly that whatever
      the targets' distribution (``sort``'s included); where the target also ends
      with a scored EOS (the decoder-only and encoder-decoder layouts) the guesser
      misses it, so there it is approximate (slightly high).
    * sequence accuracy: the mean over ``config.test_lens`` of
      ``(1 / n_symbols) ** target_length``: essentially 0 (``1e-8`` for 8 of 10 symbols).

    It is the guessing baseline, not the best constant answer: a model that always
    answers the most frequent symbol at each position (in ``sort``, small symbols
    first) scores more, without having learnt the task.

    Args:
        config: the comparison's settings (``task``, ``n_symbols``, ``test_lens``).
        metric: one of :data:`METRICS`.

    Returns:
        The chance level in ``[0, 1]``, or None for ``mean_squared_error`` (the
        squares' error has no chance level).

    Raises:
        ValueError: for an unknown metric, or an accuracy of the squares (which
            are scored by their error alone).
    """
    check_choice("metric", metric, METRICS)
    if metric == "mean_squared_error":
        return None
    if metric not in config.task_object.metrics:
        raise ValueError(f"metric {metric!r}: the {config.task} are scored by "
                         f"{', '.join(config.task_object.metrics)} only")
    return _mean([_chance_at(config, metric, n) for n in config.test_lens])


# -- the claims --------------------------------------------------------------------------


def claim_verdicts(result: CompareResult) -> list[Verdict]:
    """This run's verdict on each claim of its preset (none without a preset), over its one task.

    A run that cannot test the claims (no test length beyond training, or the
    squares, which have no accuracy) gets ``"not tested"`` for each, with the reason;
    a claim whose baselines did not learn the task gets ``"not tested (did not learn: ...)"``
    (:mod:`attnlab.labs.lengths.paper_claims`).

    Returns:
        A :class:`~attnlab.labs.lengths.presets.Verdict` per claim of
        ``presets.preset(result.config.preset)``, in its order; ``[]`` without a preset.
    """
    config = result.config
    if config.preset is None:
        return []
    claims = preset(config.preset).claims
    metric = preset(config.preset).metric
    if metric not in config.task_object.metrics:
        return [Verdict(c.text, "not tested", f"the {config.task} are scored by their error, the claims by accuracy")
                for c in claims]
    try:
        return check_claims(config.preset, [(result.records, config)])
    except ValueError as err:  # no test length beyond training: nothing about generalisation to check
        return [Verdict(c.text, "not tested", str(err)) for c in claims]


# -- the table ---------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _value(x: float, metric: str) -> str:
    return _pct(x) if metric != "mean_squared_error" else f"{x:.3g}"


def _spread(values: list[float], metric: str) -> str:
    """``mean [min-max]``, or the mean alone for one seed.

    An accuracy's range is in whole percent, widened where rounding would leave the
    mean as printed outside it (``0.4 [0-1]``, not ``0.4 [0-0]``).
    """
    text = _value(_mean(values), metric)
    if len(values) == 1:
        return text
    if metric == "mean_squared_error":
        return f"{text} [{min(values):.3g}-{max(values):.3g}]"
    mean = float(text)
    low, high = min(round(100 * min(values)), math.floor(mean)), max(round(100 * max(values)), math.ceil(mean))
    return f"{text} [{low}-{high}]"


def _chance_text(x: float) -> str:
    """A chance level in percent: ``~0`` when it rounds to nothing but is not 0."""
    return "~0" if 0.0 < x < 5e-4 else _pct(x)


def _after(x: float) -> str:
    """A metric after the slash (token accuracy): its mean in whole percent."""
    return f"{100 * x:.0f}"


def _best(keys: dict[str, tuple[float, ...]]) -> set[str]:
    """The encodings with the best key (compared entry by entry; ties all kept); none when every one ties.

    A key holds "higher is better" numbers as the table prints them, so that a mark
    never tells apart two cells that read the same.
    """
    best = set(keys)
    for i in range(len(next(iter(keys.values()), ()))):
        top = max(keys[enc][i] for enc in best)
        best = {enc for enc in best if keys[enc][i] == top}
    return set() if best == set(keys) else best


def _beyond(records: list[dict[str, Any]], metric: str, train_len: int) -> dict[str, list[float]]:
    """``{encoding: [per seed, the mean of metric over the test lengths beyond train_len]}`` (the claims' view)."""
    by_seed: dict[str, dict[int, list[float]]] = {}
    for r in records:
        if r["length"] > train_len:
            by_seed.setdefault(r["encoding"], {}).setdefault(r["seed"], []).append(float(r[metric]))
    return {enc: [_mean(v) for _, v in sorted(seeds.items())] for enc, seeds in by_seed.items()}


#: a column of the table: its header, its test length (None: the lengths beyond training), values per seed
_Column = tuple[str, int | None, dict[str, list[float]]]


def _columns(result: CompareResult, metric: str) -> list[_Column]:
    """A column per test length and, for a preset run with longer test lengths, ``L>N``."""
    config = result.config
    grouped = _grouped(result.records, metric)
    columns: list[_Column] = [
        (f"L={n}" + (" (train)" if n == config.train_len else ""), n,
         {enc: grouped[enc][n] for enc in config.encodings if n in grouped.get(enc, {})})
        for n in sorted(set(config.test_lens))]
    if config.preset is not None and any(n > config.train_len for n in config.test_lens):
        columns.append((f"L>{config.train_len}", None, _beyond(result.records, metric, config.train_len)))
    return columns


def _metrics(result: CompareResult) -> tuple[str, list[str]]:
    """The metric the cells show (and mark), and the ones after a slash (their mean only).

    The squares: MSE; a preset run: its preset's metric; else sequence / token accuracy.
    """
    config = result.config
    metrics = config.task_object.metrics
    if config.preset is not None and preset(config.preset).metric in metrics:
        return preset(config.preset).metric, []
    return metrics[0], list(metrics[1:])


def _chance_cell(config: CompareConfig, metrics: list[str], n: int | None) -> str:
    """The chance row's cell: at length ``n``, or averaged over the lengths beyond training (None)."""
    lengths = [n] if n is not None else [k for k in config.test_lens if k > config.train_len]
    values = [_mean([_chance_at(config, m, k) for k in lengths]) for m in metrics]
    return " / ".join([_chance_text(values[0]), *map(_after, values[1:])])


def format_table(result: CompareResult, *, claims: bool = True) -> str:
    """A plain-text table: a row per encoding, a column per test length, a row of chance.

    Each cell is the mean over seeds of the metric and, with more than one seed, its
    ``[min-max]`` range (accuracies in percent, the range in whole percent). Token
    tasks show ``sequence [range] / token`` accuracy; a preset run its preset's
    metric, a column ``L>N`` (the mean over the test lengths beyond training) and,
    where the paper's number for the task and encoding is known, a column ``paper``;
    the squares show the MSE. ``*`` marks the best encoding at each length (highest
    accuracy, sequence accuracy first and token accuracy breaking its ties; lowest
    MSE): ties are all marked, and a column where every encoding ties has no mark.
    The header says all this. A preset run then gets its paper, the paper's setup
    against this run's, and a line per claim, ``<outcome>: <claim> — <detail>``
    (:func:`claim_verdicts`).

    Args:
        result: the comparison (its settings and records).
        claims: for a preset run, print the paper and the claims after the table
            (``report.html`` shows them apart, before it).

    Returns:
        The table, lines joined by newlines (the table's own lines all of one width).
    """
    config = result.config
    metric, after = _metrics(result)
    # A preset run on another metric: the training length's column also shows token accuracy, which says
    # whether the models learned the task (the claims judge only those that did).
    competence = ["token_accuracy"] if (config.preset is not None and metric != "token_accuracy"
                                         and "token_accuracy" in config.task_object.metrics) else []
    pairs = {m: _grouped(result.records, m) for m in [*after, *competence]}
    sign = -1.0 if metric == "mean_squared_error" else 1.0  # the marks' keys are "higher is better"
    chance = metric != "mean_squared_error"

    # A list of strings per column, top to bottom: header, a cell per encoding, (chance).
    # Every cell ends with its mark or a space, so that the numbers line up under the header.
    table: list[list[str]] = [["encoding", *config.encodings, *(["chance"] if chance else [])]]
    for header, n, values in _columns(result, metric):
        shown = after if n != config.train_len else [*after, *competence]
        keys = {enc: (sign * float(_value(_mean(v), metric)),
                      *(float(_after(_mean(pairs[m][enc][n]))) for m in shown if n is not None))
                for enc, v in values.items()}
        best = _best(keys) if keys else set()
        cells = [header + " "]
        for enc in config.encodings:
            if enc not in values:  # a model without this length (a partial result)
                cells.append("- ")
                continue
            text = _spread(values[enc], metric) + "".join(
                f" / {_after(_mean(pairs[m][enc][n]))}" for m in shown if n is not None)
            cells.append(text + ("*" if enc in best else " "))
        if chance:
            cells.append(_chance_cell(config, [metric, *shown], n) + " ")
        table.append(cells)
    published = {} if config.preset is None else preset(config.preset).published
    paper = {enc: published[config.task, enc] for enc in config.encodings if (config.task, enc) in published}
    if paper:  # the paper's number for (task, encoding), over its own longer lengths: beside L>N
        table.append(["paper ", *(_value(paper[enc], metric) + " " if enc in paper else "" for enc in
                                  config.encodings), *([""] if chance else [])])

    widths = [max(map(len, column)) for column in table]
    lines = [table[0][i].ljust(widths[0])
             + "".join(_SEP + column[i].rjust(w) for column, w in zip(table[1:], widths[1:], strict=True))
             for i in range(len(table[0]))]
    return "\n".join([*_header(result, metric, after, competence), *lines,
                      *(_preset_lines(result, metric) if claims else [])])


def _header(result: CompareResult, metric: str, after: list[str], competence: list[str]) -> list[str]:
    """The lines above the table: the run, what a cell holds, what ``*``, ``chance`` and ``L>N`` mean."""
    config = result.config
    seeds = len({r["seed"] for r in result.records})
    where = config.task_object.describe(config.architecture)
    if config.preset is not None:
        where += f", preset {config.preset}"
    unit = "" if metric == "mean_squared_error" else " %"
    if seeds > 1:
        what = f"{_NAMES[metric]}{unit} mean [min-max over {seeds} seeds]" + "".join(
            f" / {_NAMES[m]} % mean" for m in after)
    else:
        what = f"{_NAMES[metric]}{unit}" + "".join(f" / {_NAMES[m]} %" for m in after) + " (one seed)"
    notes = []
    if metric != "mean_squared_error":
        notes.append("chance: guessing each symbol uniformly")
    if config.preset is not None and any(n > config.train_len for n in config.test_lens):
        notes.append(f"L>{config.train_len}: the mean over the longer test lengths")
    if competence:
        notes.append(f"(train): / token accuracy % mean, the models learned the task where at least "
                     f"{100 * COMPETENCE:.0f}%")
    return [f"{where}: trained on lengths up to {config.train_len}", f"cells: {what}",
            "*: the best encoding at that length, as printed (ties all marked; none where all are equal)",
            *(["; ".join(notes)] if notes else [])]


def _preset_lines(result: CompareResult, metric: str) -> list[str]:
    """After a preset run's table: the paper, its setup against this run's, and each claim's verdict."""
    config = result.config
    if config.preset is None:
        return []
    p = preset(config.preset)

    def wrap(text: str) -> list[str]:
        return textwrap.wrap(text, width=_WIDTH, subsequent_indent="    ")

    lines = ["", *wrap(f"Preset {p.name}: {p.paper}.")]
    lines += wrap("  The paper's setup: " + "; ".join(f"{k} {v}" for k, v in p.paper_setup.items()) + ".")
    lines += wrap(f"  Scaled to run here: {p.scaled}.")
    lines += wrap(f"  This run: {run_setup(config)}.")
    changed = changed_settings(config)
    if changed:
        lines += wrap(f"  Changed from the preset: {changed}.")
    aggregate = "the best seed's" if p.aggregate == "best" else "the mean over seeds of the"
    lines.append(f"Claims, on {_NAMES[metric]} beyond the training length ({aggregate} mean over the lengths), "
                 f"on this task alone; models below {100 * COMPETENCE:.0f}% token accuracy at the training length "
                 "are left out:")
    lines += [f"  {v.outcome}: {v.claim} — {v.detail}" for v in claim_verdicts(result)]
    return lines


def run_setup(config: CompareConfig) -> str:
    """This run's setup in words, to read beside a paper's (lengths, model, training, seeds).

    Returns:
        e.g. ``"encoder-only, 2 layers x 64 wide x 4 heads; train lengths 1-16; tests at
        16, 24, 32; 1,024 steps of 64; L_max 256; 3 seeds"``.
    """
    n = config.n_layers
    layers = f"{n}+{n}" if config.architecture == "encoder-decoder" else str(n)
    model = f"{config.architecture}, {layers} layers x {config.d_model} wide x {config.n_heads} heads"
    first = config.min_train_len if config.task_object.variable_lengths else config.train_len
    return (f"{model}; train lengths {first}-{config.train_len}; tests at {', '.join(map(str, config.test_lens))}; "
            f"{config.steps_per_model():,} steps of {config.batch_size}; L_max {config.l_max}; "
            f"{config.n_seeds} seed{'s' if config.n_seeds > 1 else ''}")


def changed_settings(config: CompareConfig) -> str:
    """The settings of a preset run that differ from the preset's, ``name value (preset value)``; ``""`` if none."""
    if config.preset is None:
        return ""
    settings = preset(config.preset).settings
    changed = []
    for name, value in settings.items():
        mine = getattr(config, name)  # the config holds tuples where a preset may hold lists
        if mine != (tuple(value) if isinstance(value, list) else value):
            changed.append(f"{name} {_setting(mine)} (preset {_setting(value)})")
    return ", ".join(changed)


def _setting(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
