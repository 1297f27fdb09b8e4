"""Attention maps: the weights each target position gives each source position, a grid of cells per sequence.

:func:`plot_attention_weights` draws weights it is given, ``[B, H, T, S]``; it
runs no model. To draw a model's weights on some inputs, record them first
(:func:`attnlab.attention.record_attention` and
:func:`attnlab.attention.collect_attention`), or call the book's
:func:`attnlab.compat.chapter9.plot_attention`, which runs the model, records
and calls this function.

The layout and labels are the book's (``plot_attention`` in ``plots/chapter9.py``
of dvgodoy/PyTorchStepByStep). Fixed relative to the book: sequences of one
target step draw (the book's ``squeeze`` broke them), unused panels are hidden,
label counts are checked, and every cell's text is black or white by the
luminance of its own cell (the book compared it with half the largest value).

Shape notation: ``B`` sequences (batch), ``H`` heads, ``T`` target (query)
positions, ``S`` source (key) positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine

from attnlab._validate import check_int
from attnlab.plotting._common import float_array, heatmap, write_weights

__all__ = ["plot_attention_weights"]

_PANEL = 3.0  # inches per attention panel, as the book


class _ConstrainedLayout(ConstrainedLayoutEngine):
    """Constrained layout that lets ``fig.subplots_adjust`` through without a warning.

    The labs add ``fig.suptitle(...)`` and then ``fig.subplots_adjust(top=0.85)``
    to make room for it. Constrained layout already makes that room, so the call
    has nothing to do; this only stops matplotlib from warning about it.
    """

    _adjust_compatible = True


def _grid_figure(figsize: tuple[float, float]) -> Figure:
    fig = Figure(figsize=figsize)
    fig.set_layout_engine(_ConstrainedLayout())
    return fig


def _weights_array(weights: Any) -> np.ndarray:
    """``weights`` as a float64 array ``[B, H, T, S]``; ``[B, T, S]`` is one head."""
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().double()  # bfloat16 has no numpy dtype
    values = float_array(weights, "weights", shape="[B, H, T, S]")
    if values.ndim == 3:
        values = values[:, None]  # [B, T, S] -> [B, 1, T, S]: one head
    if values.ndim != 4 or values.size == 0:
        raise ValueError(f"weights must be a non-empty [B, H, T, S] or [B, T, S] tensor or array, "
                         f"got shape {list(np.shape(weights))}")
    return values


def _labels(name: str, labels: Sequence[Any] | None, n: int, default: str, what: str) -> list[str]:
    if labels is None:
        return [f"{default} #{i}" for i in range(n)]
    if isinstance(labels, str):
        raise TypeError(f"{name} must be a sequence of labels, not a single string {labels!r}")
    labels = [str(v) for v in labels]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} entries but the weights have {n} {what}")
    return labels


def plot_attention_weights(
    weights: Any,
    point_labels: Sequence[Any] | None = None,
    source_labels: Sequence[Any] | None = None,
    target_labels: Sequence[Any] | None = None,
    decoder: bool = False,
    self_attn: bool = False,
    n_cols: int = 5,
) -> Figure:
    """Attention weights as a grid of cells per sequence and head.

    Cell ``(row t, column s)`` is how much target position ``t`` attends to source
    position ``s``, on a gray scale from 0 (black) to 1 (white), with the weight
    written on it.

    Layout: with one head, a panel per sequence, ``n_cols`` to a row, titled with
    its point label; with ``H`` heads, a row per sequence (point labels on the
    left) and a column per head (``Attention Head #k``, from 1).

    Args:
        weights: ``[B, H, T, S]`` (a layer's recorded weights) or ``[B, T, S]``
            (one head), a tensor or an array.
        point_labels: one label per sequence (``Point #i`` by default).
        source_labels: one label per source position, along the top
            (``Input #i`` by default).
        target_labels: one label per target position, down the side
            (``Target #i`` by default).
        decoder: with ``self_attn``, the weights are the decoder's self-attention:
            its sources are the shifted targets, so the source labels become the
            last source label followed by all target labels but the last.
        self_attn: the weights are a self-attention's; for the encoder the
            target labels become the source labels.
        n_cols: panels per row with one head (capped at ``B``).

    Returns:
        The figure, ``3 x 3`` inches per panel; unused panels are hidden.

    Raises:
        TypeError: if ``weights`` does not hold numbers, or a label argument is a
            single string.
        ValueError: naming the value, if ``weights`` is not ``[B, H, T, S]`` or
            ``[B, T, S]``, ``n_cols`` is below 1, or the labels' counts do not match
            the weights (``B`` point labels, ``S`` source, ``T`` target labels).
    """
    n_cols = check_int("n_cols", n_cols, minimum=1)
    values = _weights_array(weights)  # [B, H, T, S]
    n_seq, n_heads, n_tgt, n_src = values.shape

    point_labels = _labels("point_labels", point_labels, n_seq, "Point", "sequences (B)")
    if self_attn and decoder:
        # The decoder attends to its own inputs: the last source point, then the targets but the last.
        target_labels = _labels("target_labels", target_labels, n_tgt, "Target", "target positions (T)")
        if source_labels is not None and len(source_labels) == 0:
            raise ValueError("source_labels is empty; decoder self-attention starts from its last entry")
        last = [str(source_labels[-1])] if source_labels is not None else [f"Input #{n_src - 1}"]
        source_labels = _labels("source_labels", last + target_labels[:-1], n_src, "Input",
                                "source positions (S): decoder self-attention needs S == T")
    elif self_attn:
        source_labels = _labels("source_labels", source_labels, n_src, "Input", "source positions (S)")
        target_labels = _labels("target_labels (= source_labels for encoder self-attention)",
                                source_labels, n_tgt, "Target", "target positions (T)")
    else:
        source_labels = _labels("source_labels", source_labels, n_src, "Input", "source positions (S)")
        target_labels = _labels("target_labels", target_labels, n_tgt, "Target", "target positions (T)")

    if n_heads == 1:
        n_cols = min(n_cols, n_seq)
        n_rows = math.ceil(n_seq / n_cols)
    else:
        n_rows, n_cols = n_seq, n_heads
    fig = _grid_figure((n_cols * _PANEL, n_rows * _PANEL))
    axs = np.atleast_2d(fig.subplots(n_rows, n_cols, squeeze=False))

    fontsize = float(np.clip(_PANEL * 72 * 0.7 / max(n_tgt, n_src) * 0.85 / (0.6 * 4.5), 5.0, 12.0))
    rotate = n_src * max(len(s) for s in source_labels) > 24  # horizontal labels would collide
    for i in range(n_seq):
        for head in range(n_heads):
            ax = axs[i, head] if n_heads > 1 else axs.flat[i]
            first_col = head == 0 if n_heads > 1 else i % n_cols == 0
            _draw_cells(ax, values[i, head], source_labels, target_labels if first_col else None,
                        fontsize=fontsize, rotate=rotate)
            if n_heads == 1:
                ax.set_title(point_labels[i], fontsize=11)
            else:
                if i == 0:
                    ax.set_title(f"Attention Head #{head + 1}", fontsize=12)
                if head == 0:
                    ax.set_ylabel(point_labels[i], fontsize=11)
    for ax in axs.flat[n_seq * n_heads:]:
        ax.set_visible(False)
    return fig


def _draw_cells(
    ax: Axes,
    values: np.ndarray,
    x_labels: Sequence[str],
    y_labels: Sequence[str] | None,
    *,
    fontsize: float,
    rotate: bool,
) -> None:
    """One attention map ``values [T, S]``: gray cells, their values, labels on top and left."""
    mesh = heatmap(ax, values, cmap="gray", vmin=0.0, vmax=1.0, origin="upper")
    mesh.set_edgecolor("0.55")  # thin cell borders: neighbouring equal cells stay distinct
    mesh.set_linewidth(0.5)
    write_weights(ax, mesh, values, fontsize)
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(values.shape[1]), list(x_labels),
                  rotation=90 if rotate else 0)
    ax.set_yticks(np.arange(values.shape[0]), list(y_labels) if y_labels is not None else [])
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False, length=0)
