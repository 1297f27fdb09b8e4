"""Attention figures of the attention lab and the positional-encoding lab: maps, query and keys, alignment.

* :func:`plot_attention`: the weights a model gives each source position, one
  grid of cells per sequence (and per head);
* :func:`query_and_keys`: a query and its keys as arrows on the unit circle, with
  the norms and cosines that make up their dot products;
* :func:`alignment_matrix` (and the book's name :func:`figure9`): a translation's
  word alignment (Bahdanau et al. 2015, figure 3), as the attention lab draws it.

The names and positional arguments are the book's (``plots/chapter9.py`` in
dvgodoy/PyTorchStepByStep), so the labs' notebooks run against attnlab. Fixed
relative to the book:

* ``plot_attention`` reads the weights from attnlab's recording
  (:func:`attnlab.attention.record_attention`) instead of a stashed attribute,
  runs without building a graph, restores every module's train/eval mode (the
  book left the model in eval mode), keeps the model's device (the book dropped
  the GPU index), draws sequences of one target step (the book's ``squeeze`` broke
  them), hides unused panels, and checks label counts;
* ``query_and_keys`` takes any number of keys (the book hard-coded three label
  offsets) and sets its limits so long keys are not cut off;
* every cell's text is black or white by the luminance of its own cell (the book
  compared it with half the largest value).

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
from matplotlib.patches import Circle
from torch import nn

from attnlab._validate import check_int
from attnlab.attention.recording import collect_attention, record_attention
from attnlab.plotting._common import (
    axes_or_new,
    figure_size_inches,
    float_array,
    fmt2,
    heatmap,
    readable_text_color,
    real_array,
    root_figure,
)

__all__ = ["alignment_matrix", "figure9", "plot_attention", "query_and_keys"]

_PANEL = 3.0  # inches per attention panel, as the book
_BOOK_ALIGNMENT = np.array([[0.8, 0.0, 0.0, 0.2],
                            [0.0, 0.0, 0.0, 1.0],
                            [0.0, 0.0, 1.0, 0.0],
                            [0.0, 0.8, 0.0, 0.2]])
_BOOK_SOURCE = ("the", "European", "economic", "zone")
_BOOK_TARGET = ("la", "zone", "économique", "européenne")


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


# -- plot_attention ----------------------------------------------------------------


def _run_and_record(
    model: nn.Module, inputs: torch.Tensor, source_mask: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """Run ``model(inputs)`` in eval mode, without grad, recording; every module's mode comes back.

    Returns the weights recorded by this run only, read inside its own recording
    block: never stale ones from an earlier run, nor another thread's.
    """
    from attnlab.models.inference import run_eval  # plotting is a leaf: models are imported when one runs

    param = next(model.parameters(), None)
    if param is not None:
        inputs = inputs.to(param.device)  # the device itself, GPU index included
        source_mask = None if source_mask is None else source_mask.to(param.device)
    with record_attention():
        run_eval(model, inputs, source_mask=source_mask)
        return collect_attention(model)


def _known(recorded: dict[str, torch.Tensor]) -> str:
    return ", ".join(repr(n) for n in recorded) or "none: no attnlab attention module ran"


def _select_weights(
    model: nn.Module, recorded: dict[str, torch.Tensor], layer: str | None, alphas_attr: str
) -> np.ndarray:
    """The weights to draw, as a float64 array ``[B, H, T, S]``."""
    if layer is not None:
        if not isinstance(layer, str):
            raise TypeError(f"layer must be a module name (str), got {type(layer).__name__}")
        if layer not in recorded:
            raise ValueError(f"unknown layer {layer!r}; recorded layers: {_known(recorded)}")
        return recorded[layer].double().cpu().numpy()
    if not isinstance(alphas_attr, str) or not alphas_attr:
        raise TypeError(f"alphas_attr must be a dotted attribute name (str), got {alphas_attr!r}")

    # The book's 'encoder.layer.self_attn_heads.alphas' names a module and its weights.
    owner, _, attr = alphas_attr.rpartition(".")
    if alphas_attr in recorded:
        return recorded[alphas_attr].double().cpu().numpy()
    if attr in ("alphas", "attn_weights") and owner in recorded:
        return recorded[owner].double().cpu().numpy()

    if alphas_attr == "alphas" and len(recorded) == 1:
        # The only layer there is: the GRU seq2seq model's own alphas [B, T, S] are its decoder's
        # recorded weights, and these are this run's (the attribute is the last caller's, any thread).
        return next(iter(recorded.values())).double().cpu().numpy()

    # Otherwise a plain attribute.
    value: Any = model
    try:
        for part in alphas_attr.split("."):
            value = getattr(value, part)
    except AttributeError:
        raise ValueError(
            f"model has no attribute {alphas_attr!r} (alphas_attr); pass layer= one of the "
            f"recorded layers: {_known(recorded)}"
        ) from None
    if owner not in recorded and hasattr(_owner_module(model, owner), "attn_weights"):
        # An attnlab attention module that did not run: its weights would be stale.
        raise ValueError(f"alphas_attr {alphas_attr!r}: that module did not run; recorded layers: "
                         f"{_known(recorded)}")
    if not isinstance(value, torch.Tensor):
        raise ValueError(
            f"alphas_attr {alphas_attr!r} is not a tensor of weights, got {type(value).__name__}"
        )
    weights = value.detach().double().cpu()
    if weights.dim() == 3:
        return weights.unsqueeze(1).numpy()  # [B, T, S] -> [B, 1, T, S]: one head
    if weights.dim() == 4:
        return weights.transpose(0, 1).numpy()  # the book's [H, B, T, S] -> [B, H, T, S]
    raise ValueError(
        f"alphas_attr {alphas_attr!r} must hold weights [B, T, S] or [H, B, T, S], got {list(weights.shape)}"
    )


def _owner_module(model: nn.Module, name: str) -> Any:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def _labels(name: str, labels: Sequence[Any] | None, n: int, default: str, what: str) -> list[str]:
    if labels is None:
        return [f"{default} #{i}" for i in range(n)]
    if isinstance(labels, str):
        raise TypeError(f"{name} must be a sequence of labels, not a single string {labels!r}")
    labels = [str(v) for v in labels]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} entries but the weights have {n} {what}")
    return labels


def plot_attention(
    model: nn.Module,
    inputs: torch.Tensor,
    point_labels: Sequence[Any] | None = None,
    source_labels: Sequence[Any] | None = None,
    target_labels: Sequence[Any] | None = None,
    decoder: bool = False,
    self_attn: bool = False,
    n_cols: int = 5,
    alphas_attr: str = "alphas",
    *,
    layer: str | None = None,
    source_mask: torch.Tensor | None = None,
) -> Figure:
    """The attention weights of a model on some inputs: a grid of cells per sequence and head.

    Runs ``model(inputs)`` once in eval mode, without grad, inside
    :func:`attnlab.attention.record_attention`, and draws the weights of one
    layer: cell ``(row t, column s)`` is how much target position ``t`` attends to
    source position ``s``, on a gray scale from 0 (black) to 1 (white), with the
    weight written on it. Every module's train/eval mode is restored afterwards.

    The layer is ``layer`` (a name from :func:`attnlab.attention.collect_attention`,
    e.g. ``'encoder.layer.self_attn_heads'``) or else the book's dotted ``alphas_attr``:
    ``'decoder.layer.cross_attn_heads.alphas'`` means that module's recorded
    weights. With the default ``'alphas'`` on a model that recorded exactly one
    layer, that layer is drawn (for ``EncoderDecoderAttn`` the same weights as its
    ``alphas``). Any other plain tensor attribute is read after the run as
    ``[B, T, S]`` (one head) or, as the book's multi-head ``alphas``, ``[H, B, T, S]``.

    From several threads at once on one model, each figure shows its own call's
    weights (recorded per thread); the attention lab's GRU models run through their
    ``predict``, drawing no teacher-forcing coin.

    Layout: with one head, a panel per sequence, ``n_cols`` to a row, titled with
    its point label; with ``H`` heads, a row per sequence (point labels on the
    left) and a column per head (``Attention Head #k``, from 1).

    Args:
        model: an ``nn.Module`` whose attention modules are attnlab's (or that
            keeps its own ``alphas``).
        inputs: what ``model`` takes, e.g. source sequences ``[B, S, F]``; moved to
            the model's device.
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
        alphas_attr: the book's dotted path to the weights (see above).
        layer: a recorded layer name; takes precedence over ``alphas_attr``.
        source_mask: for padded sources, ``[B, 1, S]`` (True on the real steps),
            passed on as ``model(inputs, source_mask=...)``; padded columns then hold weight 0.

    Returns:
        The figure, ``3 x 3`` inches per panel; unused panels are hidden.

    Raises:
        TypeError: if ``model`` is not an ``nn.Module``, ``inputs`` not a tensor,
            or a label argument is a single string.
        ValueError: naming the value, for an unknown ``layer`` or ``alphas_attr``
            (listing the recorded layers), or labels whose count does not match
            the weights (``B`` point labels, ``S`` source, ``T`` target labels).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f"inputs must be a tensor, got {type(inputs).__name__}")
    n_cols = check_int("n_cols", n_cols, minimum=1)

    if source_mask is not None and not isinstance(source_mask, torch.Tensor):
        raise TypeError(f"source_mask must be a tensor [B, 1, S], got {type(source_mask).__name__}")
    recorded = _run_and_record(model, inputs, source_mask)
    weights = _select_weights(model, recorded, layer, alphas_attr)  # [B, H, T, S]
    n_seq, n_heads, n_tgt, n_src = weights.shape

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
            _draw_cells(ax, weights[i, head], source_labels, target_labels if first_col else None,
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


def _write_weights(ax: Axes, mesh: Any, values: np.ndarray, fontsize: float) -> None:
    """Write each weight (2 decimals) on its cell, black or white by that cell's colour.

    The colour is chosen from the value as written, so cells that read the same
    (0.4999 and 0.5001 both read 0.50) get the same colour.
    """
    for (r, c), v in np.ndenumerate(values):
        if np.isfinite(v):
            text = fmt2(v)
            color = readable_text_color(mesh.cmap(mesh.norm(float(text))))
            ax.text(c, r, text, ha="center", va="center", color=color, fontsize=fontsize)


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
    _write_weights(ax, mesh, values, fontsize)
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(values.shape[1]), list(x_labels),
                  rotation=90 if rotate else 0)
    ax.set_yticks(np.arange(values.shape[0]), list(y_labels) if y_labels is not None else [])
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False, length=0)


# -- query_and_keys ----------------------------------------------------------------


def _vectors(name: str, value: Any, *, single: bool) -> np.ndarray:
    """``value`` as float64 ``[2]`` (single) or ``[n, 2]``; ValueError unless 2-D vectors."""
    arr = float_array(value, name)
    if arr.ndim == 0 or arr.shape[-1] != 2 or (single and arr.size != 2) or arr.size == 0:
        want = "a 2-D vector (2 numbers)" if single else "2-D vectors, shape [n, 2]"
        raise ValueError(f"{name} must be {want}, got shape {list(arr.shape)}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    return arr.reshape(2) if single else arr.reshape(-1, 2)


_LABEL_PT = 10.0  # font size of the arrow labels
_LABEL_GAP_PT = 7.0  # gap between an arrow's head and its label


def _arrow(ax: Axes, tip: np.ndarray, color: str, label: str, *, zorder: int = 3) -> tuple[float, float]:
    """An arrow from the origin to ``tip``, labelled just beyond its head.

    A nearly horizontal arrow gets its label beside the head, any other above or
    below it (centred), so labels of arrows pointing left do not run into the
    axis. Returns the label's reach ``(x, y)`` in inches beyond the tip, for the limits.
    """
    ax.annotate("", xy=tuple(tip), xytext=(0.0, 0.0),
                arrowprops=dict(arrowstyle="-|>", color=color, lw=2, shrinkA=0, shrinkB=0,
                                mutation_scale=14),
                zorder=zorder)
    norm = float(np.hypot(*tip))
    ux, uy = (tip / norm) if norm > 0 else (0.0, 1.0)
    gap = _LABEL_GAP_PT / 72
    if abs(ux) > 0.9:  # beside the head
        ha, va = ("left" if ux > 0 else "right"), "center"
        offset = (np.sign(ux) * _LABEL_GAP_PT, 0.0)
    else:  # above or below the head
        ha, va = "center", ("bottom" if uy > 0 else "top")
        offset = (0.0, np.sign(uy) * _LABEL_GAP_PT)
    text = ax.annotate(label, xy=tuple(tip), xytext=offset, textcoords="offset points",
                       ha=ha, va=va, color=color, fontsize=_LABEL_PT, zorder=zorder + 1)
    box = text.get_window_extent()  # pixels; the size does not depend on the limits
    width, height = box.width / ax.figure.dpi, box.height / ax.figure.dpi  # inches
    reach = (gap + width, height / 2) if va == "center" else (width / 2, gap + height)
    return reach


def _square_limit(ax: Axes, tips: list[np.ndarray], reaches: list[tuple[float, float]]) -> float:
    """Half-width of square limits that hold the unit circle, every arrow and its label.

    A label reaching ``r`` inches past a tip at ``|x|`` needs ``lim >= |x| + r * 2 lim / A``
    for axes ``A`` inches wide, i.e. ``lim >= |x| / (1 - 2 r / A)``.
    """
    fig_w, fig_h = figure_size_inches(ax.figure)
    box = ax.get_position()
    size = 0.9 * min(box.width * fig_w, box.height * fig_h)  # inches, after layout (roughly)
    lim = 1.1
    for tip, reach in zip(tips, reaches, strict=True):
        for coord, r in zip(np.abs(tip), reach, strict=True):
            room = max(1.0 - 2.0 * (r + 0.08) / size, 0.25)
            lim = max(lim, (coord + 0.02) / room)
    return lim


def query_and_keys(q: Any, ks: Any, result: Any | None = None, ax: Axes | None = None) -> Figure:
    """A query and its keys as arrows, with the pieces of their dot products (the attention lab).

    ``Q . K_i = ||Q|| ||K_i|| cos(theta_i)``: the query arrow (red) is labelled with
    its norm, each key (black) with its norm and its cosine with the query, so
    the figure shows why the key pointing the query's way scores highest. The
    context vector (green), the weighted average of the values, is drawn when
    ``result`` is given. The unit circle gives the scale.

    Args:
        q: the query, 2 numbers (e.g. ``[2]`` or the attention lab's ``[1, 1, 2]``).
        ks: the keys ``[n, 2]`` (or ``[1, n, 2]``), any number of them.
        result: the context vector, 2 numbers; not drawn when None (the course
            notebook passes it positionally as ``context``).
        ax: axes to draw into; a new 5x5-inch figure is made when None.

    Returns:
        The figure holding ``ax``.

    Raises:
        TypeError: if a vector is not numeric or ``ax`` is not an Axes.
        ValueError: if a vector is not 2-D (only the plane can be drawn) or not finite.
    """
    q_vec = _vectors("q", q, single=True)
    keys = _vectors("ks", ks, single=False)
    context = None if result is None else _vectors("result", result, single=True)
    ax = axes_or_new(ax, (5.0, 5.0))

    norm_q = float(np.linalg.norm(q_vec))
    tips, reaches = [], []
    ax.add_patch(Circle((0.0, 0.0), 1.0, fill=False, color="0.45", lw=1.5, zorder=1))
    ax.axhline(0.0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0.0, color="0.85", lw=0.8, zorder=0)
    for i, k in enumerate(keys):
        norm_k = float(np.linalg.norm(k))
        cos = float(q_vec @ k) / (norm_q * norm_k) if norm_q > 0 and norm_k > 0 else float("nan")
        cos_text = fmt2(cos) if math.isfinite(cos) else "undefined"
        label = f"$||K_{{{i}}}||={fmt2(norm_k)}$\n$\\cos\\theta_{{{i}}}={cos_text}$"
        tips.append(k)
        reaches.append(_arrow(ax, k, "black", label))
    tips.append(q_vec)
    reaches.append(_arrow(ax, q_vec, "red", f"$||Q||={fmt2(norm_q)}$", zorder=4))
    if context is not None:
        tips.append(context)
        reaches.append(_arrow(ax, context, "green", "Context Vector", zorder=5))

    lim = _square_limit(ax, tips, reaches)
    reach = max(float(np.abs(t).max()) for t in tips)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ticks = [-1.0, 0.0, 1.0] if reach < 2 else None
    if ticks is not None:
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
    ax.set_xlabel("$x_0$")
    ax.set_ylabel("$x_1$")
    ax.set_title("Query and Keys")
    return root_figure(ax)


# -- alignment_matrix / figure9 ----------------------------------------------------


def alignment_matrix(
    weights: Any | None = None,
    source_tokens: Sequence[Any] | None = None,
    target_tokens: Sequence[Any] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """A word alignment as a matrix of attention weights (the attention lab's ``figure9``).

    By default the book's illustration of Bahdanau et al. (2015, figure 3): the
    English "the European economic zone" translated to French "la zone économique
    européenne", where the adjectives swap places and each French word attends to
    the English words it comes from. Row ``t`` (target word), column ``s`` (source
    word), gray from 0 (black) to 1 (white), each weight written on its cell.

    Args:
        weights: ``[T, S]`` tensor or array; the book's 4x4 alignment when None.
        source_tokens: ``S`` labels for the columns, written on top and rotated;
            the book's English words (with the book's weights), else ``0 .. S-1``.
        target_tokens: ``T`` labels for the rows; the book's French words (with the
            book's weights), else ``0 .. T-1``.
        ax: axes to draw into; a new figure is made when None.

    Returns:
        The figure holding ``ax``.

    Raises:
        TypeError: if ``weights`` is not numeric, or a token list is a single string.
        ValueError: if ``weights`` is not 2-D, or a token list does not have ``S``/``T`` entries.
    """
    if weights is None:
        values = _BOOK_ALIGNMENT
        default_src, default_tgt = list(_BOOK_SOURCE), list(_BOOK_TARGET)
    else:
        values = real_array(weights, "weights", ndim=2, shape="[T, S]")
        default_src = [str(s) for s in range(values.shape[1])]
        default_tgt = [str(t) for t in range(values.shape[0])]
    n_tgt, n_src = values.shape
    src = _tokens("source_tokens", source_tokens, default_src, n_src, "S")
    tgt = _tokens("target_tokens", target_tokens, default_tgt, n_tgt, "T")

    width, height = float(np.clip(0.9 * n_src + 1.6, 3.5, 12)), float(np.clip(0.9 * n_tgt + 1.6, 3.5, 12))
    ax = axes_or_new(ax, (width, height))
    mesh = heatmap(ax, values, cmap="gray", vmin=0.0, vmax=1.0, origin="upper")
    mesh.set_edgecolor("0.55")
    mesh.set_linewidth(0.5)
    cell = min((width - 1.6) / n_src, (height - 1.6) / n_tgt) * 72  # points, roughly
    _write_weights(ax, mesh, values, float(np.clip(cell * 0.85 / 2.7, 5.0, 12.0)))
    ax.set_aspect("equal")
    ax.set_xticks(np.arange(n_src), src, rotation=90 if max(map(len, src)) > 3 else 0)
    ax.set_yticks(np.arange(n_tgt), tgt)
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False, length=0)
    ax.set_xlabel("Source")
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("Target")
    return root_figure(ax)


def _tokens(name: str, tokens: Sequence[Any] | None, default: list[str], n: int, dim: str) -> list[str]:
    if tokens is None:
        return default
    if isinstance(tokens, str):
        raise TypeError(f"{name} must be a sequence of tokens, not a single string {tokens!r}")
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(f"{name} has {len(tokens)} entries but weights has {dim}={n}")
    return tokens


def figure9() -> Figure:
    """The attention lab's ``figure9()``: the book's English-to-French alignment (:func:`alignment_matrix`).

    Returns:
        The figure.
    """
    return alignment_matrix()
