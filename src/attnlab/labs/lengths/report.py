"""What the length-generalisation lab shows: results.json, the figures and report.html of a comparison.

Everything here is computed from records (``{"encoding", "seed", "length", metric...}``)
and the settings, so a comparison's outputs can always be written again from what its
folder saved. The numbers as text (the chance level, the table, a preset's claims)
are :mod:`attnlab.labs.lengths.table`'s, re-exported here.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab._io import atomic_write, read_json
from attnlab.labs.lengths.config import CompareConfig, CompareResult
from attnlab.labs.lengths.presets import Verdict, preset
from attnlab.labs.lengths.table import (
    chance_level,
    changed_settings,
    claim_verdicts,
    format_table,
    run_setup,
    summarise,
)
from attnlab.labs.report import Html, Report, write_report
from attnlab.labs.run_folder import ENVIRONMENT, RunFolder

if TYPE_CHECKING:  # matplotlib is imported only when the figures are drawn
    from matplotlib.figure import Figure

__all__ = ["FIGURE_NAMES", "chance_level", "claim_verdicts", "format_table", "output_names", "summarise",
           "write_outputs"]

#: the file each metric's figure is written to.
FIGURE_NAMES = {"sequence_accuracy": "accuracy.png", "token_accuracy": "tokens.png", "mean_squared_error": "mse.png"}


def _png_writer(fig: Figure) -> Callable[[Path], None]:
    """A callback for :func:`attnlab._io.atomic_write` that saves ``fig`` as a PNG."""

    def write(tmp: Path) -> None:
        fig.savefig(tmp, dpi=100, bbox_inches="tight", format="png")

    return write


def _metrics(config: CompareConfig) -> list[str]:
    """The metrics a comparison records, a figure each."""
    return list(config.task_object.metrics)


def output_names(config: CompareConfig) -> list[str]:
    """The files :func:`write_outputs` writes into the run folder: ``results.json``, the figures, ``report.html``."""
    return ["results.json", *(FIGURE_NAMES[metric] for metric in _metrics(config)), "report.html"]


def _what_ran(result: CompareResult) -> str:
    """The report's first paragraph: the model, the lengths, the seeds, the time."""
    config = result.config
    n = config.n_layers
    model = {
        "decoder-only": f"decoder-only Transformer ({n} layers) that reads source, BOS and answer as one sequence",
        "encoder-only": f"encoder-only Transformer ({n} layers) that writes the answer into empty slots after "
                        "the source, in one pass",
        "encoder-decoder": f"encoder-decoder Transformer ({n}+{n} layers)",
    }[config.architecture]
    scoring = ("fills the slots of the test sets" if config.architecture == "encoder-only"
               else "decodes greedily the test sets")
    first = config.min_train_len if config.task != "squares" else config.train_len
    training = sum(result.seconds_per_model.values())
    return (f"Each encoding trains the same {model}, d_model {config.d_model}, {config.n_heads} heads, on "
            f"lengths {first} to {config.train_len}, at {config.n_seeds} random seed(s), then {scoring} at "
            f"lengths {', '.join(map(str, config.test_lens))}. Protocol {config.protocol}: "
            f"{config.protocol_object.describe()}. Training and scoring took {training:.0f} s in all "
            f"({len(result.seconds_per_model)} models).")


def _preset_paragraph(config: CompareConfig) -> str:
    """For a preset run: the paper, its setup, what was scaled, and this run's setup."""
    assert config.preset is not None
    p = preset(config.preset)
    changed = changed_settings(config)
    return (f"These settings start from the preset {p.name}: {p.paper}. The paper's setup: "
            + "; ".join(f"{k} {v}" for k, v in p.paper_setup.items())
            + f". Scaled to run here: {p.scaled}. This run: {run_setup(config)}."
            + (f" Changed from the preset: {changed}." if changed else ""))


def _claims_section(verdicts: list[Verdict], table: str) -> Html:
    """The verdicts as a list, then the table: one fragment, every text escaped."""
    esc = html.escape
    items = "".join(f"<li><b>{esc(v.outcome)}</b>: {esc(v.claim)} — {esc(v.detail)}</li>" for v in verdicts)
    return Html(f"<h2>The paper's claims on this task (beyond the training length; models that did not learn "
                f"the task in distribution left out)</h2><ul>{items}</ul>"
                f"<pre>{esc(table)}</pre>")


def write_outputs(run: RunFolder, result: CompareResult) -> list[Path]:
    """Write ``results.json``, a figure per metric and ``report.html`` into the run folder; returns the figures.

    ``results.json`` holds the settings, every record, the mean per encoding and
    length, the chance level per metric (:func:`chance_level`; null for MSE) and,
    for a preset run, a verdict per claim (``{"claim", "outcome", "detail"}``,
    :func:`claim_verdicts`). The figures draw the chance level of the accuracies.

    Raises:
        OSError: if a file cannot be written (each is written atomically).
    """
    from attnlab.plotting import plot_length_generalisation

    config = result.config
    metrics = _metrics(config)
    chance = {metric: chance_level(config, metric) for metric in metrics}
    verdicts = claim_verdicts(result)
    doc = {
        "config": config.to_dict(), "device": result.device, "metric": result.metric, "seconds": result.seconds,
        "seconds_per_model": result.seconds_per_model, "parameters_per_model": result.parameters_per_model,
        "protocol": config.protocol, "records": result.records, "chance": chance,
        # Every number names its metric: the headline's summary, then each metric's, mean over seeds per length.
        "summary_metric": result.metric,
        "summary": {enc: {str(n): v[0] for n, v in by_len.items()}
                    for enc, by_len in summarise(result.records, result.metric).items()},
        "summaries": {metric: {enc: {str(n): v[0] for n, v in by_len.items()}
                               for enc, by_len in summarise(result.records, metric).items()} for metric in metrics}}
    if config.preset is not None:
        doc["claims"] = [dataclasses.asdict(v) for v in verdicts]
    # Drawn first: the figures check every record (a finite metric, an accuracy in [0, 1], no repeats),
    # so results.json is replaced only by records that pass.
    drawn = {metric: plot_length_generalisation(result.records, metric=metric, train_len=config.train_len,
                                                chance=chance[metric]) for metric in metrics}
    run.write_json("results.json", doc)
    figures = []
    for metric, fig in drawn.items():
        figures.append(atomic_write(run.file(FIGURE_NAMES[metric]), _png_writer(fig)))
    paragraphs = [_what_ran(result)]
    if config.preset is None:
        preformatted, sections = format_table(result), []
    else:  # the paper and its claims as prose and a list, before the table
        paragraphs.append(_preset_paragraph(config))
        preformatted, sections = None, [_claims_section(verdicts, format_table(result, claims=False))]
    write_report(run.file("report.html"), Report(
        title=f"Which positional encoding generalises to longer sequences? ({config.task})",
        paragraphs=paragraphs, preformatted=preformatted, sections=sections, figures=figures,
        settings=config.to_dict(),
        environment=read_json(run.path / ENVIRONMENT, what=ENVIRONMENT) if (run.path / ENVIRONMENT).is_file() else {}))
    return figures
