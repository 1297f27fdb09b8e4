"""What the length-generalisation lab shows: summaries, the plain-text table, results.json, figures, report.

Everything here is computed from records (``{"encoding", "seed", "length", metric...}``),
so a comparison's outputs can always be written again from what its folder saved.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab._io import atomic_write
from attnlab.labs.compare import CompareResult
from attnlab.labs.report import Report, write_report
from attnlab.labs.run_folder import RunFolder

if TYPE_CHECKING:  # matplotlib is imported only when the figures are drawn
    from matplotlib.figure import Figure

__all__ = ["FIGURE_NAMES", "format_table", "summarise", "write_outputs"]

#: the file each metric's figure is written to.
FIGURE_NAMES = {"sequence_accuracy": "accuracy.png", "token_accuracy": "tokens.png", "mean_squared_error": "mse.png"}


def summarise(records: list[dict[str, Any]], metric: str) -> dict[str, dict[int, tuple[float, float, float]]]:
    """``{encoding: {length: (mean, min, max)}}`` of ``metric`` over seeds."""
    grouped: dict[str, dict[int, list[float]]] = {}
    for r in records:
        grouped.setdefault(r["encoding"], {}).setdefault(r["length"], []).append(float(r[metric]))
    return {enc: {length: (sum(v) / len(v), min(v), max(v)) for length, v in sorted(by_len.items())}
            for enc, by_len in grouped.items()}


def format_table(result: CompareResult) -> str:
    """A plain-text table: a row per encoding, a column per test length (mean over seeds).

    Token tasks show ``sequence / token`` accuracy in percent; the squares show MSE.
    """
    config = result.config
    lengths = sorted(set(config.test_lens))
    squares = config.task == "squares"
    seq = summarise(result.records, result.metric)
    tok = None if squares else summarise(result.records, "token_accuracy")
    header = f"{'encoding':12s}" + "".join(
        f"{f'L={n}' + (' (train)' if n == config.train_len else ''):>16s}" for n in lengths)
    lines = [header]
    for enc in config.encodings:
        cells = []
        for n in lengths:
            if tok is None:
                cells.append(f"{seq[enc][n][0]:16.4f}")
            else:
                cells.append(f"{100 * seq[enc][n][0]:9.1f} / {100 * tok[enc][n][0]:4.0f}")
        lines.append(f"{enc:12s}" + "".join(cells))
    what = "test MSE (mean over seeds)" if squares else "sequence / token accuracy, % (mean over seeds)"
    return f"{config.task}: {what}; trained on lengths up to {config.train_len}\n" + "\n".join(lines)


def _png_writer(fig: Figure) -> Callable[[Path], None]:
    """A callback for :func:`attnlab._io.atomic_write` that saves ``fig`` as a PNG."""

    def write(tmp: Path) -> None:
        fig.savefig(tmp, dpi=100, bbox_inches="tight", format="png")

    return write


def write_outputs(run: RunFolder, result: CompareResult) -> list[Path]:
    """Write ``results.json``, a figure per metric and ``report.html`` into the run folder; returns the figures."""
    from attnlab.plotting import plot_length_generalisation

    config = result.config
    run.write_json("results.json", {
        "config": config.to_dict(), "device": result.device, "metric": result.metric, "seconds": result.seconds,
        "seconds_per_model": result.seconds_per_model, "parameters_per_model": result.parameters_per_model,
        "records": result.records,
        "summary": {enc: {str(n): v[0] for n, v in by_len.items()}
                    for enc, by_len in summarise(result.records, result.metric).items()}})
    metrics = ["mean_squared_error"] if config.task == "squares" else ["sequence_accuracy", "token_accuracy"]
    figures = []
    for metric in metrics:
        fig = plot_length_generalisation(result.records, metric=metric, train_len=config.train_len)
        path = run.path / FIGURE_NAMES[metric]
        atomic_write(path, _png_writer(fig))
        figures.append(path)
    layers = (f"{config.n_layers} layers" if config.architecture == "decoder-only"
              else f"{config.n_layers}+{config.n_layers} layers")
    first = config.min_train_len if config.task != "squares" else config.train_len
    training = sum(result.seconds_per_model.values())
    write_report(run.path / "report.html", Report(
        title=f"Which positional encoding generalises to longer sequences? ({config.task})",
        paragraphs=[f"Each encoding trains the same {config.architecture} Transformer ({layers}, d_model "
                    f"{config.d_model}, {config.n_heads} heads) on lengths {first} to {config.train_len}, at "
                    f"{config.n_seeds} random seed(s), then decodes greedily the test sets at lengths "
                    f"{', '.join(map(str, config.test_lens))}. Training and scoring took {training:.0f} s "
                    f"in all ({len(result.seconds_per_model)} models)."],
        preformatted=format_table(result), figures=figures, settings=config.to_dict()))
    return figures
