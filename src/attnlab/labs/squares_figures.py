"""The squares lab's figures: losses, predictions on test squares, one attention map per layer.

Also the data of the report's interactive attention viewer
(:func:`attention_viewer_data`, drawn by :mod:`attnlab.labs.attention_viewer`).

Drawing runs the trained model once on a few test squares (to record its
attention), so this module sits with the lab, not in :mod:`attnlab.plotting`,
whose functions only take data. Every figure is written atomically.

Thread-safe, and no random stream is touched: the models run through
:func:`attnlab.models.inference.run_eval` (eval mode held while any call needs
it; the GRU models' predict path, which draws no teacher-forcing coin), and the
weights are read inside the ``record_attention()`` block that recorded them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor, nn

from attnlab._io import atomic_write
from attnlab._validate import check_int
from attnlab.attention.recording import collect_attention, record_attention
from attnlab.labs.attention_viewer import ViewerData, ViewerLayer
from attnlab.models.inference import run_eval

__all__ = ["attention_figures", "attention_viewer_data", "attention_weights", "layer_kind", "layer_title",
           "write_figures"]

_TITLES = {"encoder.self": "Encoder Self-Attention", "decoder.self": "Decoder Self-Attention",
           "decoder.cross": "Cross-Attention"}
_SOURCE_LABELS = ("Point #1", "Point #2")  # the corners a model is given
_TARGET_LABELS = ("Point #3", "Point #4")  # the corners it predicts


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


def attention_weights(model: nn.Module, inputs: Tensor) -> dict[str, Tensor]:
    """The attention weights of one prediction on ``inputs [B, S, F]``, by layer: ``{name: [B, H, T, S]}``.

    The model runs in eval mode, without grad and without drawing a random number;
    the weights are this call's even while other threads run the same model.
    """
    param = next(model.parameters(), None)
    if param is not None:
        inputs = inputs.to(param.device)
    with record_attention():
        run_eval(model, inputs)
        return collect_attention(model)


def attention_figures(model: nn.Module, full_test: Tensor, directions: Any, n: int = 2) -> dict[str, Any]:
    """One figure per attention layer of ``model``, on the first ``n`` test squares: ``{layer: Figure}``.

    ``full_test`` is the test squares ``[B, 4, 2]``, ``directions`` their ``[B]`` directions.
    The caller's random streams are left as they were (attnlab's models draw nothing
    here), and so is the model's mode.
    """
    from attnlab.plotting import plot_attention

    inputs = full_test[:n, :2]  # [n, 2, 2]: the first two corners
    labels = [f"{'Clockwise' if int(d) else 'Counter-Clockwise'}\nPoint #1: {p[0, 0]:.2f}, {p[0, 1]:.2f}"
              for d, p in zip(directions[:n], inputs, strict=True)]
    figures = {}
    for name in attention_weights(model, inputs):
        fig = plot_attention(model, inputs, labels, ["Point #1", "Point #2"], ["Point #3", "Point #4"],
                             decoder="decoder" in name, self_attn="self_attn" in name, layer=name)
        fig.suptitle(layer_title(name))
        figures[name] = fig
    return figures


def attention_viewer_data(model: nn.Module, full_test: Tensor, directions: Any, n: int = 8) -> ViewerData:
    """Every attention layer's weights on the first ``n`` test squares, for the report's viewer.

    Args:
        model: the trained model (run in eval mode, without grad, drawing no random number).
        full_test: the test squares ``[B, 4, 2]``: the model is given the first two corners.
        directions: their ``[B]`` directions (1 = clockwise), for the squares' labels.
        n: how many squares (at most ``B``).

    Returns:
        A :class:`~attnlab.labs.attention_viewer.ViewerData`; its ``layers`` is empty
        for a model without attention (the attention lab's plain GRU). Rows are
        labelled with the corners the queries predict, columns with what the keys
        hold: the given corners for the encoder and the cross-attention, the
        decoder's inputs (the last given corner, then the predictions) for its
        self-attention.

    Raises:
        TypeError / ValueError: if ``n`` is not an int of at least 1.
    """
    check_int("n", n, minimum=1)
    inputs = full_test[:n, :2]  # [n, 2, 2]: the first two corners
    squares = [f"{'clockwise' if int(d) else 'counter-clockwise'}, Point #1 at ({p[0, 0]:.2f}, {p[0, 1]:.2f})"
               for d, p in zip(directions[:n], inputs, strict=True)]
    keys = {"encoder.self": _SOURCE_LABELS, "decoder.cross": _SOURCE_LABELS,
            "decoder.self": (_SOURCE_LABELS[-1], *_TARGET_LABELS[:-1])}
    queries = {"encoder.self": _SOURCE_LABELS, "decoder.cross": _TARGET_LABELS, "decoder.self": _TARGET_LABELS}
    weights = attention_weights(model, inputs)  # {name: [n, H, T, S]}
    kinds = [layer_kind(name) for name in weights]
    layers, seen = [], dict.fromkeys(kinds, 0)
    for name, kind in zip(weights, kinds, strict=True):
        seen[kind] += 1
        # One layer of a kind is called by its kind; several (a deeper Transformer) are numbered from 1.
        single = kinds.count(kind) == 1
        key, title = (kind, _TITLES[kind]) if single else (f"{kind}.{seen[kind]}", f"{_TITLES[kind]} {seen[kind]}")
        layers.append(ViewerLayer(key=key, name=name, title=title, queries=queries[kind], keys=keys[kind],
                                  weights=weights[name].detach().cpu()))
    return ViewerData(sequences=squares, layers=layers)


def write_figures(
    model: nn.Module,
    losses: list[float],
    val_losses: list[float | None],
    full_test: Tensor,
    directions: Any,
    out: Path,
) -> list[Path]:
    """Losses, predictions on test squares, and one figure per attention layer, written into ``out``.

    Args:
        model: the trained model.
        losses, val_losses: per-epoch losses.
        full_test: the test squares ``[B, 4, 2]``; directions: their ``[B]`` directions.
        out: the folder (it must exist).

    Returns:
        The paths written. The caller's random streams are left as they were (attnlab's
        models draw nothing here).
    """
    from attnlab.plotting import plot_losses, sequence_pred

    written = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        # Every figure here lays itself out (constrained layout), so no bbox_inches="tight":
        # it would draw each figure a second time to measure it (a third of a run's drawing).
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
        written.append(path)

    save(plot_losses(losses, val_losses), "losses.png")
    save(sequence_pred(model, full_test, directions), "predictions.png")
    for name, fig in attention_figures(model, full_test, directions).items():
        save(fig, f"attention-{name.replace('.', '-')}.png")
    return written
