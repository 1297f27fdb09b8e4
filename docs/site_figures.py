"""The topic pages' figures, drawn by attnlab's own plotting functions when the site is built.

    python docs/site_figures.py OUT_FOLDER        # what docs/build.py does before MkDocs runs

Each figure is drawn from data, never by running a model: the length lab's figures from the runs
committed under ``benchmarks/results/lengths/PRESET/`` (the files the README's tables are generated
from), the others from attnlab's tables and the attention lab's own numbers. A page shows one as
``![alternative text](figures/NAME.png)``; :data:`FIGURES` names each file with its alternative
text, which the pages repeat (``tests/test_docs_pages.py`` checks that they do).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = ROOT / "benchmarks" / "results" / "lengths"


def _task_results(preset: str) -> dict[str, dict[str, Any]]:
    """Each task's ``results.json`` of a preset's committed run, in the suite's order."""
    suite = json.loads((LENGTHS / preset / "suite.json").read_text())
    return {task: json.loads((LENGTHS / preset / "tasks" / task / "results.json").read_text())
            for task in suite["tasks"]}


def _length_lab(preset: str, metric: str) -> Any:
    """A preset's committed run: ``metric`` against test length, a panel per task, a line per encoding."""
    from matplotlib.figure import Figure

    from attnlab.plotting import plot_length_generalisation

    tasks = _task_results(preset)
    fig = Figure(figsize=(6.5 * len(tasks), 4.5), layout="constrained")
    for ax, (task, result) in zip(fig.subplots(1, len(tasks), squeeze=False)[0], tasks.items(), strict=True):
        plot_length_generalisation(result["records"], metric=metric, train_len=result["config"]["train_len"],
                                   chance=result["chance"].get(metric) if isinstance(result.get("chance"), dict)
                                   else None, ax=ax)
        ax.set_title(f"{preset}: {task}")
    return fig


def sinusoidal_table() -> Any:
    """The sinusoidal table of 64 positions by 128 columns in the ``[sin | cos]`` layout: each column a
    sinusoid of position, slower to the right of each half."""
    from attnlab.encodings import sinusoidal
    from attnlab.plotting import plot_encoding

    return plot_encoding(sinusoidal(64, 128, layout="concat"), title='sinusoidal(64, 128, layout="concat")')


def alibi_weights() -> Any:
    """Causal attention with no content (every score 0): without positions each query spreads its weight
    evenly over its past; ALiBi's bias pulls it towards the nearest keys, more in a head with a steeper slope."""
    import torch

    from attnlab.attention import attend, causal_mask
    from attnlab.encodings import ALiBi
    from attnlab.plotting import plot_attention_weights

    length, heads = 6, (0, 3)  # ALiBi(8)'s first and fourth heads: slopes 1/2 and 1/16
    q = k = v = torch.zeros(1, 8, length, 8)  # [B, H, L, Dh]: no content, only positions
    bias = ALiBi(8).bias(q, length)  # [1, H, T, S] or [H, T, S]
    _, plain = attend(q, k, v, mask=causal_mask(length), need_weights=True)
    _, alibi = attend(q, k, v, mask=causal_mask(length), bias=bias, need_weights=True)
    weights = torch.cat([plain[:, list(heads)], alibi[:, list(heads)]])  # [2, 2, T, S]
    labels = [f"p{i}" for i in range(length)]
    return plot_attention_weights(weights, point_labels=["no position", "ALiBi"], source_labels=labels,
                                  target_labels=labels)


def query_and_keys_figure() -> Any:
    """The attention lab's query, its three keys and the context vector (the lab's own numbers)."""
    import torch

    from attnlab.attention import attend
    from attnlab.plotting import query_and_keys

    q = torch.tensor([0.55, 0.95])
    k = torch.tensor([[0.65, 0.2], [0.85, -0.4], [-0.95, -0.75]])
    context, _ = attend(q.view(1, 1, 1, 2), k.view(1, 1, 3, 2), k.view(1, 1, 3, 2), scale=1.0)
    return query_and_keys(q, k, context.flatten())


#: ``file name: (drawing function, alternative text)``.
FIGURES: dict[str, tuple[Callable[[], Any], str]] = {
    "length-lab-ruoss2023.png": (
        lambda: _length_lab("ruoss2023", "token_accuracy"),
        "Token accuracy against test length in the committed ruoss2023 run, one panel for reverse string and "
        "one for duplicate string: every encoding is near 100 percent up to the training length 12 and falls "
        "beyond it, the randomized encodings (dashed) less than their baselines"),
    "length-lab-kazemnejad2023.png": (
        lambda: _length_lab("kazemnejad2023", "sequence_accuracy"),
        "Exact-match accuracy against test length in the committed kazemnejad2023 run, one panel for "
        "copy-repeat and one for reverse-random-2x: every encoding solves the training lengths up to 20; "
        "beyond them the quarter rotary keeps the most"),
    "encodings-sinusoidal.png": (
        sinusoidal_table,
        "Heatmap of the sinusoidal table, 64 positions by 128 columns, from -1 to 1, the sines in its left half "
        "and the cosines in its right: in each half the first columns oscillate fast with position and the "
        "columns further right ever more slowly"),
    "encodings-alibi.png": (
        alibi_weights,
        "Attention weights of six causal positions with no content, two heads each: without positions every "
        "query spreads its weight evenly over the keys up to itself; with ALiBi the weight gathers on the "
        "nearest keys, more in the head with the steeper slope"),
    "attention-query-and-keys.png": (
        query_and_keys_figure,
        "The attention lab's query as a red arrow, its three keys as black arrows labelled with their norms "
        "and cosines with the query, and the context vector in green, on the unit circle"),
}


def draw(folder: Path) -> list[Path]:
    """Every figure of :data:`FIGURES` saved as a PNG into ``folder`` (made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (function, _) in FIGURES.items():
        fig = function()
        fig.savefig(folder / name, dpi=100)
        written.append(folder / name)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python docs/site_figures.py OUT_FOLDER", file=sys.stderr)
        sys.exit(2)
    for path in draw(Path(sys.argv[1])):
        print(path)
