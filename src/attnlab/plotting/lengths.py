"""Length generalisation: how a model's accuracy holds up on sequences longer than it was trained on.

:func:`plot_length_generalisation` draws one line per positional encoding:
the mean over training seeds of a metric against the test length, with a band
from the worst to the best seed, a dashed line at the training length and,
when given, a dotted line at chance level. Left of the training length the
model is tested in distribution; right of it, on lengths it has never seen.
A randomized scheme (``random-X``, Ruoss et al. 2023) is drawn dashed in the
colour of its baseline ``X``, so that each pair reads as one.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from attnlab._validate import check_finite_float, check_int
from attnlab.plotting._common import axes_or_new, root_figure

__all__ = ["plot_length_generalisation"]

_KEYS = ("encoding", "seed", "length")
_LABELS = {"token_accuracy": "token accuracy", "sequence_accuracy": "sequence accuracy",
           "mean_squared_error": "mean squared error", "mse": "mean squared error"}
_MAX_TICKS = 12  # beyond this many test lengths, a tick per length crowds the axis
_RANDOM = "random-"  # the prefix of a randomized scheme's name (encodings/registry.py)
_INSIDE = 8  # up to this many legend entries fit inside the axes; more go to the right of them
_ONE_COLUMN = 16  # up to this many entries fit one column beside the axes
# A colour cycle has 10 colours (matplotlib's default): past that, the next ten lines repeat them
# with another marker, so that no two lines look alike.
_MARKERS = ("o", "s", "^", "D")
_CYCLE = 10


def _records(results: Any, metric: str) -> list[tuple[str, int, int, float]]:
    """``(encoding, seed, length, value)`` per record, every field checked."""
    if isinstance(results, (str, bytes, Mapping)) or not isinstance(results, Sequence):
        raise TypeError(f"results must be a list of dicts (one per encoding, seed and length), "
                        f"got {type(results).__name__}")
    if len(results) == 0:
        raise ValueError("results is empty; need at least one record")
    bounded = metric.endswith("accuracy")
    rows, seen = [], set()
    for i, rec in enumerate(results):
        if not isinstance(rec, Mapping):
            raise TypeError(f"results[{i}] must be a dict, got {type(rec).__name__}: {rec!r}")
        for key in (*_KEYS, metric):
            if key not in rec:
                raise ValueError(f"results[{i}] has no key {key!r} (it has {sorted(rec)}); every record "
                                 f"needs 'encoding', 'seed', 'length' and the metric {metric!r}")
        encoding = rec["encoding"]
        if not isinstance(encoding, str):
            raise TypeError(f"results[{i}]['encoding'] must be a str, got {encoding!r}")
        seed = check_int(f"results[{i}]['seed']", rec["seed"])
        length = check_int(f"results[{i}]['length']", rec["length"], minimum=1)
        raw = rec[metric]
        if isinstance(raw, bool) or not isinstance(raw, numbers.Real) or not math.isfinite(raw):
            raise ValueError(f"results[{i}][{metric!r}] must be a finite number, got {raw!r}")
        value = float(raw)
        if bounded and not 0.0 <= value <= 1.0:
            raise ValueError(f"results[{i}][{metric!r}] is an accuracy and must be in [0, 1], got {raw!r}")
        if (encoding, seed, length) in seen:
            raise ValueError(f"results[{i}] repeats encoding={encoding!r}, seed={seed}, length={length}: "
                             "one record per (encoding, seed, length)")
        seen.add((encoding, seed, length))
        rows.append((encoding, seed, length, value))
    return rows


def _drawing_order(encodings: list[str]) -> list[str]:
    """``encodings`` with each ``random-X`` moved just after its ``X`` (when ``X`` is there too)."""
    paired = {name for name in encodings if name.startswith(_RANDOM) and name[len(_RANDOM):] in encodings}
    order = []
    for name in encodings:
        if name in paired:
            continue
        order.append(name)
        if f"{_RANDOM}{name}" in paired:
            order.append(f"{_RANDOM}{name}")
    return order


def _chance_label(chance: float, accuracy: bool) -> str:
    """``chance (10.0%)`` for an accuracy (``~0%`` when it rounds to nothing), ``chance (0.25)`` otherwise."""
    if not accuracy:
        return f"chance ({chance:.3g})"
    if 0.0 < chance < 5e-4:  # e.g. guessing a whole sequence: 10**-8, essentially 0
        return "chance (~0%)"
    return f"chance ({100 * chance:.1f}%)"


def plot_length_generalisation(
    results: Sequence[Mapping[str, Any]],
    *,
    metric: str = "sequence_accuracy",
    train_len: int | None = None,
    chance: float | None = None,
    ax: Axes | None = None,
) -> Figure:
    """A metric against test length, one line per encoding, a min-max band over seeds.

    ``results`` holds one record per trained model and test length::

        {"encoding": "sinusoidal",     # the positional encoding (one line each)
         "seed": 0,                    # the training seed (the band spans the seeds)
         "length": 16,                 # the test length
         "token_accuracy": 0.93,       # attnlab.data.token_accuracy on that test set
         "sequence_accuracy": 0.41}    # attnlab.data.sequence_accuracy on that test set

    Only ``encoding``, ``seed``, ``length`` and the plotted ``metric`` are
    required; other keys are ignored, so a record may carry other metrics (e.g.
    ``"mean_squared_error"`` for the squares task). At each length, the line
    is the mean over the seeds tested there and the shaded band runs from the
    lowest to the highest seed's value (min..max, not a standard deviation: with
    a handful of seeds it shows every run). Encodings keep the order they first
    appear in and take the axes' colour cycle, except that a randomized scheme
    ``random-X`` is drawn just after ``X``, dashed, in ``X``'s colour (on its own,
    it is dashed in a colour of its own). With more than a few encodings the
    legend moves to the right of the axes (in two columns past 16 entries).

    Args:
        results: the records, a list of dicts as above.
        metric: the key to plot. A metric whose name ends in ``accuracy`` must
            lie in ``[0, 1]`` and gets a ``0..1`` y axis; any other (an error)
            gets a y axis from 0.
        train_len: the training length, marked by a vertical dashed line; none when None.
        chance: the metric's chance level (e.g.
            :func:`attnlab.labs.lengths.report.chance_level`), drawn as a horizontal
            dotted line labelled ``chance (x%)``; none when None.
        ax: axes to draw into; a new figure when None (8x4.5 inches, wider when
            the legend goes beside the axes).

    Returns:
        The figure holding the axes.

    Raises:
        TypeError: naming the record and key, if ``results`` is not a list of
            dicts or a field has the wrong type; if ``metric`` is not a str,
            ``chance`` not a number or ``ax`` not an Axes.
        ValueError: naming the record and key, if ``results`` is empty, a record
            lacks a key, a value is not finite (or an accuracy outside ``[0, 1]``),
            a record repeats an (encoding, seed, length); if ``train_len < 1``; or
            if ``chance`` is not finite (or, for an accuracy, outside ``[0, 1]``).
    """
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a str (a key of the records), got {metric!r}")
    rows = _records(results, metric)
    if train_len is not None:
        train_len = check_int("train_len", train_len, minimum=1)
    accuracy = metric.endswith("accuracy")
    if chance is not None:
        chance = check_finite_float("chance", chance)
        if accuracy and not 0.0 <= chance <= 1.0:
            raise ValueError(f"chance is an accuracy and must be in [0, 1], got {chance!r}")

    encodings = _drawing_order(list(dict.fromkeys(r[0] for r in rows)))
    # Lines, the train length, chance and the band patch: past _INSIDE they would hide the lines.
    n_entries = len(encodings) + 1 + (train_len is not None) + (chance is not None)
    ax = axes_or_new(ax, (8.0, 4.5) if n_entries <= _INSIDE else (11.0, 5.0))
    colours: dict[str, Any] = {}  # a baseline's colour and marker, for its randomized version
    markers: dict[str, str] = {}
    for encoding in encodings:
        by_length: dict[int, list[float]] = {}
        seeds = set()
        for enc, seed, length, value in rows:
            if enc == encoding:
                by_length.setdefault(length, []).append(value)
                seeds.add(seed)
        lengths = np.array(sorted(by_length))  # [n]
        values = [np.array(by_length[length]) for length in lengths]
        mean = np.array([v.mean() for v in values])  # [n]
        label = encoding if len(seeds) == 1 else f"{encoding} ({len(seeds)} seeds)"
        style: dict[str, Any] = {"marker": _MARKERS[len(colours) // _CYCLE % len(_MARKERS)]}
        if encoding.startswith(_RANDOM):
            style["ls"] = "--"
            baseline = encoding[len(_RANDOM):]
            if baseline in colours:  # an explicit colour does not advance the axes' colour cycle
                style["color"], style["marker"] = colours[baseline], markers[baseline]
        (line,) = ax.plot(lengths, mean, ms=4, lw=1.8, label=label, **style)
        if "color" not in style:  # a line that took the next colour of the cycle
            colours[encoding], markers[encoding] = line.get_color(), str(style["marker"])
        ax.fill_between(lengths, [v.min() for v in values], [v.max() for v in values],
                        color=line.get_color(), alpha=0.1 if encoding.startswith(_RANDOM) else 0.2, linewidth=0)

    if train_len is not None:
        ax.axvline(train_len, color="0.35", ls="--", lw=1.2, label=f"train length ({train_len})")
    if chance is not None:
        ax.axhline(chance, color="0.2", ls=":", lw=1.4, label=_chance_label(chance, accuracy))
    all_lengths = sorted({r[2] for r in rows} | ({train_len} if train_len is not None else set()))
    if len(all_lengths) <= _MAX_TICKS:
        ax.set_xticks(all_lengths)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    name = _LABELS.get(metric, metric.replace("_", " "))
    if accuracy:
        ax.set_ylim(-0.03, 1.03)  # a little room, so a line at 0 or 1 is not cut in half
        ax.set_yticks(np.linspace(0.0, 1.0, 6))
    else:
        ax.set_ylim(bottom=0.0)
    ax.grid(True, alpha=0.3)
    ax.set_xlabel("test length")
    ax.set_ylabel(name)
    ax.set_title(f"Length generalisation: {name}")
    # One grey patch explains every band, instead of a band entry per encoding.
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Patch(color="0.5", alpha=0.25, label="min..max over seeds"))
    if len(handles) <= _INSIDE:
        ax.legend(handles=handles, loc="best", fontsize="small")
    else:  # beside the axes, where it hides nothing (constrained layout makes room for it)
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  fontsize="small", ncols=1 if len(handles) <= _ONE_COLUMN else 2)
    return root_figure(ax)
