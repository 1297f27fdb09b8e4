"""The positional-encoding lab's dials: each (sin, cos) pair of an encoding is a hand on a clock face.

A grid with one row per pair and one column per position. In each dial a red
arrow points at the pair's angle for that position, a tick marks angle 0 and a
second tick marks the reference step, and the xlabel is the pair's value
``(sin, cos)``: the encoding itself, two columns at a time.

``encoding_degrees`` draws the lab's fixed bases (4, 5, 7): base ``b`` turns by
``1/b`` of a circle per position. ``exponential_dials`` draws the sinusoidal
encoding, whose pair ``i`` turns ``w_i`` radians per position.

Both keep the book's names and positional arguments. Fixed relative to the book
(``plots/chapter9.py`` in dvgodoy/PyTorchStepByStep): dials are circles (equal
aspect), not ellipses; "Position" is drawn once; the tick labels come from the
rates (the book hard-codes ``10**i``, right only for ``d_model = 8``); no label
reads ``-0.00``; the header and label cells have no visible axes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from attnlab._validate import check_finite_float, check_int
from attnlab.encodings import angle_rates, fixed_base, sinusoidal
from attnlab.plotting._common import fmt2, new_figure

__all__ = ["encoding_degrees", "exponential_dials"]

_CELL = 1.7  # inches per dial


def _positions_label(count: float) -> str:
    """How many positions a pair needs to turn one radian: ``'10'``, ``'21.5'``, ``'464'``."""
    if abs(count - round(count)) <= 1e-9 * max(1.0, count):
        return str(int(round(count)))
    return f"{count:.0f}" if count >= 100 else f"{count:.3g}"


def _draw_dial(
    ax: Axes, sin: float, cos: float, tick_angle: float, tick_label: str, xlabel: str
) -> None:
    """One dial: unit circle, ticks at 0 and ``tick_angle``, red arrow to ``(cos, sin)``."""
    ax.add_patch(Circle((0.0, 0.0), 1.0, fill=False, lw=1.5, color="0.2"))
    ticks = [(0.0, "0")]
    # A tick at a whole turn would sit on the 0 tick and hide it.
    if not math.isclose(math.remainder(tick_angle, 2 * math.pi), 0.0, abs_tol=1e-9):
        ticks.append((tick_angle, tick_label))
    for angle, label in ticks:
        c, s = math.cos(angle), math.sin(angle)
        ax.plot([0.85 * c, 1.15 * c], [0.85 * s, 1.15 * s], color="0.2", lw=1.5)
        ax.text(1.33 * c, 1.33 * s, label, ha="center", va="center", fontsize=9)
    # The arrow stops short of the circle so its head stays visible against it.
    ax.annotate("", xy=(0.9 * cos, 0.9 * sin), xytext=(0.0, 0.0),
                arrowprops=dict(arrowstyle="-|>", color="tab:red", lw=2.2, mutation_scale=14,
                                shrinkA=0, shrinkB=0))
    ax.set_xlim(-1.45, 1.45)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")  # circles, not the book's ellipses
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel(xlabel, fontsize=11, labelpad=2)


def _dial_grid(
    row_labels: Sequence[tuple[str, str]],
    coords: np.ndarray,
    tick_angles: Sequence[float],
    tick_labels: Sequence[str],
    caption: str,
    sine_only_rows: int = 0,
) -> Figure:
    """The grid: header row of positions, label column, one dial per (row, position).

    Args:
        row_labels: per row, a title and a smaller second line.
        coords: ``[n_rows, n_positions, 2]``, the (sin, cos) of each dial.
        tick_angles, tick_labels: the second tick of each row.
        caption: how to read the figure, as sentences separated by two spaces.
        sine_only_rows: how many last rows have no cosine column in the table;
            their xlabel shows only the sine, the value the encoding holds.
    """
    n_rows, n_pos, _ = coords.shape
    width = _CELL * (n_pos + 1.3)
    # One sentence per line when the caption (~0.085 in per 11 pt character) is too wide.
    if 0.085 * len(caption) > 0.95 * width:
        caption = caption.replace("  ", "\n")
    caption_height = 0.25 * (caption.count("\n") + 1) + 0.15  # inches
    fig = new_figure((width, _CELL * (n_rows + 0.45) + caption_height), constrained=False)
    axs = fig.subplots(n_rows + 1, n_pos + 1, squeeze=False,
                       gridspec_kw=dict(width_ratios=[1.3] + [1] * n_pos,
                                        height_ratios=[0.45] + [1] * n_rows))
    fig.subplots_adjust(left=0.01, right=0.99, top=0.99,
                        bottom=(caption_height + 0.15) / fig.get_figheight(),
                        wspace=0.08, hspace=0.3)
    for ax in axs[0, :].tolist() + axs[1:, 0].tolist():
        ax.set_axis_off()  # header and label cells hold text only
    axs[0, 0].text(0.5, 0.3, "Position", ha="center", va="center", fontsize=18,
                   transform=axs[0, 0].transAxes)
    for p in range(n_pos):
        axs[0, p + 1].text(0.5, 0.3, str(p), ha="center", va="center", fontsize=20,
                           transform=axs[0, p + 1].transAxes)
    for r, (title, detail) in enumerate(row_labels):
        label_ax = axs[r + 1, 0]
        label_ax.text(0.5, 0.58, title, ha="center", va="center", fontsize=16,
                      transform=label_ax.transAxes)
        label_ax.text(0.5, 0.32, detail, ha="center", va="center", fontsize=11, color="0.3",
                      transform=label_ax.transAxes)
        for p in range(n_pos):
            sin, cos = coords[r, p]
            has_cos = r < n_rows - sine_only_rows
            xlabel = f"({fmt2(sin)}, {fmt2(cos)})" if has_cos else f"({fmt2(sin)})"
            _draw_dial(axs[r + 1, p + 1], sin, cos, tick_angles[r], tick_labels[r], xlabel)
    fig.text(0.5, 0.05 / fig.get_figheight(), caption, ha="center", va="bottom", fontsize=11,
             color="0.3")
    return fig


def encoding_degrees(dims: int = 3, seqs: Sequence[float] = (4, 5, 7), tot: int = 8) -> Figure:
    """The positional-encoding lab's fixed-base dials: position ``p`` at angle ``2*pi*p/b`` for each base ``b``.

    Args:
        dims: how many bases to draw (rows): the first ``dims`` of ``seqs``.
        seqs: the bases, positions per full turn (positive numbers).
        tot: how many positions to draw (columns ``0 .. tot-1``).

    Returns:
        A figure of ``dims + 1`` rows by ``tot + 1`` columns. The xlabel of a dial
        is its pair of :func:`attnlab.encodings.fixed_base` (base 5, position 1:
        ``(0.95, 0.31)``).

    Raises:
        TypeError: if ``dims``/``tot`` is not an integer or a base not a number.
        ValueError: if ``dims``/``tot`` < 1, ``dims > len(seqs)`` or a base <= 0.
    """
    dims = check_int("dims", dims, minimum=1)
    tot = check_int("tot", tot, minimum=1)
    if isinstance(seqs, (str, bytes)) or not isinstance(seqs, Sequence):
        raise TypeError(f"seqs must be a sequence of bases, got {seqs!r}")
    if dims > len(seqs):
        raise ValueError(f"dims={dims} but seqs names only {len(seqs)} bases: {tuple(seqs)}")
    bases = [check_finite_float(f"seqs[{k}]", b, positive=True) for k, b in enumerate(seqs[:dims])]

    table = fixed_base(tot, bases, dtype=torch.float64).numpy()  # [tot, 2*dims], sin/cos per base
    coords = table.reshape(tot, dims, 2).transpose(1, 0, 2)  # [dims, tot, 2]
    rows = [(f"Base {b:g}", f"(sin, cos), {360 / b:.3g}° / step") for b in bases]
    return _dial_grid(
        rows, coords,
        tick_angles=[2 * math.pi / b for b in bases],
        tick_labels=[f"1/{b:g}" for b in bases],
        caption="Red arrow: angle 2πp/b at position p.  Tick 1/b: where position 1 points.",
    )


def exponential_dials(d_model: int = 8, max_len: int = 10, *, base: float = 10000.0) -> Figure:
    """The positional-encoding lab's dials for the sinusoidal encoding: pair ``i`` at angle ``p * w_i``.

    ``w_i = base ** (-2i / d_model)`` (:func:`attnlab.encodings.angle_rates`). The
    second tick of each row sits at 1 radian and is labelled with the number of
    positions pair ``i`` needs to reach it, ``1 / w_i``: 1, 10, 100, 1000 for
    ``d_model = 8``, computed from the rates for any ``d_model``.

    Args:
        d_model: model dimension ``D``; one row per (sin, cos) pair, ``ceil(D/2)``
            rows (for odd ``D`` the last row is a sine without its cosine column,
            and its label shows just the sine).
        max_len: how many positions to draw (columns ``0 .. max_len-1``).
        base: wavelength scale (10000 in the paper).

    Returns:
        A figure of ``ceil(D/2) + 1`` rows by ``max_len + 1`` columns; the xlabel of
        a dial is its pair in :func:`attnlab.encodings.sinusoidal` (dims 0/1,
        position 1: ``(0.84, 0.54)``).

    Raises:
        TypeError: if a size is not an integer or ``base`` not a number.
        ValueError: if ``d_model`` or ``max_len`` < 1, or ``base <= 0``.
    """
    d_model = check_int("d_model", d_model, minimum=1)
    max_len = check_int("max_len", max_len, minimum=1)
    base = check_finite_float("base", base, positive=True)
    w = angle_rates(d_model, base=base).numpy()  # [ceil(D/2)] radians per position
    table = sinusoidal(max_len, d_model, base=base, dtype=torch.float64).numpy()  # [L, D]

    n_pairs = len(w)
    sines = table[:, 0::2].T  # [n_pairs, L]
    # An odd D has no last cosine column; the dial still needs it to place the arrow.
    cosines = np.cos(np.arange(max_len)[None, :] * w[:, None])  # [n_pairs, L]
    cosines[: d_model // 2] = table[:, 1::2].T
    coords = np.stack((sines, cosines), axis=-1)  # [n_pairs, L, 2]

    rows = []
    for i, rate in enumerate(w):
        name = f"Dims #{2 * i}, #{2 * i + 1}" if 2 * i + 1 < d_model else f"Dim #{2 * i}"
        rows.append((name, f"w = {rate:.3g} rad / step"))
    return _dial_grid(
        rows, coords,
        tick_angles=[1.0] * n_pairs,
        tick_labels=[_positions_label(1.0 / rate) for rate in w],
        caption="Red arrow: angle p·w at position p.  "
                "Tick at 1 radian, labelled with the positions needed to reach it (1/w).",
        sine_only_rows=d_model % 2,
    )
