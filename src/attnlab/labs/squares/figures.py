"""The squares lab's figures: losses, predictions on test squares, one attention map per layer.

Also the data of the report's interactive attention viewer
(:func:`attention_viewer_data`, drawn by :mod:`attnlab.labs.squares.viewer`).

Drawing runs the trained model once on a few test squares (to record its
attention), so this module sits with the lab, not in :mod:`attnlab.plotting`,
whose functions only take data. Every figure is written atomically.

Thread-safe, and no random stream is touched: the models run through
:func:`attnlab.labs.squares.inference.run_eval` (eval mode held while any call needs
it; the GRU models' predict path, which draws no teacher-forcing coin), and the
weights are read inside the ``record_attention()`` block that recorded them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from attnlab._io import atomic_write
from attnlab._validate import check_int
from attnlab.attention.recording import collect_attention, record_attention
from attnlab.labs.squares.inference import run_eval
from attnlab.labs.squares.viewer import ViewerData, ViewerLayer

__all__ = ["RunFigures", "SquaresTestSet", "attention_figures", "attention_viewer_data", "attention_weights",
           "layer_kind", "layer_title", "predictions_figure", "write_figures", "write_run_figures"]

#: test squares in the predictions figure, the report's viewer and the attention figures
_PREDICTED, _VIEWER, _ATTENTION_FIGURE = 10, 8, 2
_TITLES = {"encoder.self": "Encoder Self-Attention", "decoder.self": "Decoder Self-Attention",
           "decoder.cross": "Cross-Attention"}


class SquaresTestSet(NamedTuple):
    """A run's test squares, as the figures take them.

    Attributes:
        source: float32 ``[N, S, 2]``, the corners a model is given (right-padded
            to ``S = 4`` for the variable-length squares).
        target: float32 ``[N, T, 2]``, the corners it predicts.
        directions: int64 ``[N]``, 1 = clockwise.
        source_mask: bool ``[N, 1, S]``, True on the given corners (variable-length
            squares); None when every square gives its first two.
    """

    source: Tensor
    target: Tensor
    directions: Tensor
    source_mask: Tensor | None = None

    def head(self, n: int) -> SquaresTestSet:
        """The first ``n`` squares (all of them if there are fewer).

        Raises:
            TypeError / ValueError: if ``n`` is not an int of at least 1.
        """
        n = check_int("n", n, minimum=1)
        mask = None if self.source_mask is None else self.source_mask[:n]  # [n, 1, S]
        return SquaresTestSet(self.source[:n], self.target[:n], self.directions[:n], mask)

    @property
    def lengths(self) -> Tensor:
        """How many corners each square gives, int64 ``[N]``."""
        if self.source_mask is None:
            return torch.full((self.source.shape[0],), self.source.shape[1], dtype=torch.long)
        return self.source_mask[:, 0].sum(dim=-1)

    def labels(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Axis labels ``(given corners [S], predicted corners [T])``: ``Point #k`` in the order walked,
        the predicted ones ``Next #k`` when how many corners came before them varies."""
        given = tuple(f"Point #{k}" for k in range(1, self.source.shape[1] + 1))
        first = self.source.shape[1] + 1
        predicted = tuple(f"Point #{first + k}" if self.source_mask is None else f"Next #{k + 1}"
                          for k in range(self.target.shape[1]))
        return given, predicted


def _describe(squares: SquaresTestSet, *, short: bool) -> list[str]:
    """A label per square: its direction, where it starts and (variable lengths) how many corners it gives."""
    labels = []
    for i in range(squares.source.shape[0]):
        direction = "Clockwise" if int(squares.directions[i]) else "Counter-Clockwise"
        x, y = squares.source[i, 0].tolist()
        given = "" if squares.source_mask is None else f", {int(squares.lengths[i])} given"
        if short:
            labels.append(f"{direction}{given}\nPoint #1: {x:.2f}, {y:.2f}")
        else:
            labels.append(f"{direction.lower()}{given}, Point #1 at ({x:.2f}, {y:.2f})")
    return labels


def layer_kind(name: str) -> str:
    """What an attention layer of a squares model is, by its module name.

    Returns:
        ``"encoder.self"``, ``"decoder.self"`` or ``"decoder.cross"`` (the attention
        lab's GRU decoder calls its cross-attention ``decoder.attn``).
    """
    if "cross" in name or name == "decoder.attn":
        return "decoder.cross"
    if "encoder" in name.split(".")[0] or ".encoder" in name:
        return "encoder.self"
    return "decoder.self"


def layer_title(name: str) -> str:
    """A readable title for an attention layer's name (``"decoder.layer.cross_attn_heads"`` ...)."""
    return _TITLES[layer_kind(name)]


def attention_weights(model: nn.Module, inputs: Tensor, source_mask: Tensor | None = None) -> dict[str, Tensor]:
    """The attention weights of one prediction on ``inputs [B, S, F]``, by layer: ``{name: [B, H, T, S]}``.

    ``source_mask [B, 1, S]`` (True on the real steps) goes with padded inputs. The model
    runs in eval mode, without grad and without drawing a random number; the weights
    are this call's even while other threads run the same model.
    """
    param = next(model.parameters(), None)
    if param is not None:
        inputs = inputs.to(param.device)
        source_mask = None if source_mask is None else source_mask.to(param.device)
    with record_attention():
        run_eval(model, inputs, source_mask=source_mask)
        return collect_attention(model)


def attention_figures(model: nn.Module, squares: SquaresTestSet, n: int = 2) -> dict[str, Any]:
    """One figure per attention layer of ``model``, on the first ``n`` test squares: ``{layer: Figure}``.

    The caller's random streams are left as they were (attnlab's models draw nothing
    here), and so is the model's mode.

    Raises:
        TypeError / ValueError: if ``n`` is not an int of at least 1.
    """
    squares = squares.head(n)
    return _attention_figures(attention_weights(model, squares.source, squares.source_mask), squares)


def _attention_figures(weights: dict[str, Tensor], squares: SquaresTestSet) -> dict[str, Any]:
    """The figures of :func:`attention_figures` from the layers' ``weights`` ``{name: [n, H, T, S]}`` on ``squares``."""
    from attnlab.plotting import plot_attention_weights

    given, predicted = squares.labels()
    labels = _describe(squares, short=True)
    figures = {}
    for name, layer in weights.items():
        fig = plot_attention_weights(layer, labels, list(given), list(predicted),
                                     decoder="decoder" in name, self_attn="self_attn" in name)
        fig.suptitle(layer_title(name))
        figures[name] = fig
    return figures


def attention_viewer_data(model: nn.Module, squares: SquaresTestSet, n: int = 8) -> ViewerData:
    """Every attention layer's weights on the first ``n`` test squares, for the report's viewer.

    Args:
        model: the trained model (run in eval mode, without grad, drawing no random number).
        squares: the test squares; the model is given their ``source`` (and ``source_mask``).
        n: how many squares (at most ``N``).

    Returns:
        A :class:`~attnlab.labs.squares.viewer.ViewerData`; its ``layers`` is empty
        for a model without attention (the attention lab's plain GRU). Rows are
        labelled with the corners the queries predict, columns with what the keys
        hold: the given corners for the encoder and the cross-attention (a padded
        column holds weight 0), the decoder's inputs (the last given corner, then
        the predictions) for its self-attention.

    Raises:
        TypeError / ValueError: if ``n`` is not an int of at least 1.
    """
    squares = squares.head(n)
    return _viewer_data(attention_weights(model, squares.source, squares.source_mask), squares)


def _viewer_data(weights: dict[str, Tensor], squares: SquaresTestSet) -> ViewerData:
    """:func:`attention_viewer_data` from the layers' ``weights`` ``{name: [n, H, T, S]}`` on ``squares``."""
    given, predicted = squares.labels()
    last_given = given[-1] if squares.source_mask is None else "Last given"
    keys = {"encoder.self": given, "decoder.cross": given, "decoder.self": (last_given, *predicted[:-1])}
    queries = {"encoder.self": given, "decoder.cross": predicted, "decoder.self": predicted}
    kinds = [layer_kind(name) for name in weights]
    layers, seen = [], dict.fromkeys(kinds, 0)
    for name, kind in zip(weights, kinds, strict=True):
        seen[kind] += 1
        # One layer of a kind is called by its kind; several (a deeper Transformer) are numbered from 1.
        single = kinds.count(kind) == 1
        key, title = (kind, _TITLES[kind]) if single else (f"{kind}.{seen[kind]}", f"{_TITLES[kind]} {seen[kind]}")
        layers.append(ViewerLayer(key=key, name=name, title=title, queries=queries[kind], keys=keys[kind],
                                  weights=weights[name].detach().cpu()))
    return ViewerData(sequences=_describe(squares, short=False), layers=layers)


def predictions_figure(model: nn.Module, squares: SquaresTestSet) -> Any:
    """The model's predictions on the first 10 test squares: :func:`attnlab.plotting.plot_sequence_pred` for
    the labs' squares, :func:`attnlab.plotting.prefix_pred` for the variable-length ones."""
    squares = squares.head(_PREDICTED)
    return _predictions_figure(_run(model, squares), squares)


def _run(model: nn.Module, squares: SquaresTestSet) -> Tensor:
    """The model's predictions ``[n, T, 2]`` for ``squares`` (on the model's device; fed in its dtype, as the
    book's figure fed it)."""
    param = next(model.parameters(), None)
    device = None if param is None else param.device
    if squares.source_mask is None:
        source = squares.source if param is None else squares.source.to(device, param.dtype)  # [n, 2, 2]
        return run_eval(model, source)  # [n, 2, 2]
    return run_eval(model, squares.source.to(device), source_mask=squares.source_mask.to(device))


def _predictions_figure(predicted: Tensor, squares: SquaresTestSet) -> Any:
    """:func:`predictions_figure` from the model's predictions ``[n, T, 2]`` on ``squares``."""
    from attnlab.plotting import plot_sequence_pred, prefix_pred

    if squares.source_mask is None:
        return plot_sequence_pred(predicted.cpu(), torch.cat([squares.source, squares.target], dim=1),
                                  squares.directions)
    return prefix_pred(predicted.cpu(), squares.source, squares.lengths, squares.target, squares.directions)


class RunFigures(NamedTuple):
    """What :func:`write_run_figures` leaves: the files written and the report viewer's data."""

    paths: list[Path]
    viewer: ViewerData


def write_run_figures(
    model: nn.Module,
    losses: list[float],
    val_losses: list[float | None],
    squares: SquaresTestSet,
    out: Path,
) -> RunFigures:
    """A run's figures in one pass: the files of :func:`write_figures` and :func:`attention_viewer_data`'s data.

    The model runs twice on the first 10 test squares (before: four times): once for the
    predictions figure, once recording its attention, whose weights the viewer takes for
    the first 8 squares and the attention figures for the first 2 (the same numbers as
    running it on 8 or 2: each square is computed alone). Each figure is drawn once,
    straight into its PNG.

    Returns:
        :class:`RunFigures`. The caller's random streams are left as they were.
    """
    from attnlab.plotting import plot_losses

    first = squares.head(_PREDICTED)
    predicted = _run(model, first)  # [10, T, 2]
    # Recorded in a run of its own: recording takes another attention path (the weights kept), whose
    # predictions can differ from the plain path's in the last bits, and the figure shows the plain path's.
    weights = attention_weights(model, first.source, first.source_mask)  # {name: [10, H, T, S]}
    paths = [_save(plot_losses(losses, val_losses), out / "losses.png"),
             _save(_predictions_figure(predicted, first), out / "predictions.png")]
    few = squares.head(_ATTENTION_FIGURE)
    figures = _attention_figures({name: w[:len(few.source)] for name, w in weights.items()}, few)
    paths += [_save(fig, out / f"attention-{name.replace('.', '-')}.png") for name, fig in figures.items()]
    shown = squares.head(_VIEWER)
    viewer = _viewer_data({name: w[:len(shown.source)] for name, w in weights.items()}, shown)
    return RunFigures(paths, viewer)


def _save(fig: Any, path: Path) -> Path:
    """Write ``fig`` (a stand-alone Figure, which pyplot does not hold) to ``path`` as a PNG at 100 dpi, atomically."""
    # Every figure here lays itself out (constrained layout), so no bbox_inches="tight":
    # it would draw each figure a second time to measure it (a third of a run's drawing).
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    return path


def write_figures(
    model: nn.Module,
    losses: list[float],
    val_losses: list[float | None],
    squares: SquaresTestSet,
    out: Path,
) -> list[Path]:
    """Losses, predictions on test squares, and one figure per attention layer, written into ``out``.

    Args:
        model: the trained model.
        losses, val_losses: per-epoch losses.
        squares: the test squares.
        out: the folder (it must exist).

    Returns:
        The paths written. The caller's random streams are left as they were (attnlab's
        models draw nothing here). A run draws its figures with :func:`write_run_figures`,
        which runs the model once for them all and for the report's viewer.
    """
    from attnlab.plotting import plot_losses

    written = [_save(plot_losses(losses, val_losses), out / "losses.png"),
               _save(predictions_figure(model, squares), out / "predictions.png")]
    for name, fig in attention_figures(model, squares).items():
        written.append(_save(fig, out / f"attention-{name.replace('.', '-')}.png"))
    return written
