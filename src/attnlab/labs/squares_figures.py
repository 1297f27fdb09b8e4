"""The squares lab's figures: losses, predictions on test squares, one attention map per layer.

Drawing runs the trained model once on a few test squares (to record its
attention), so this module sits with the lab, not in :mod:`attnlab.plotting`,
whose functions only take data. Every figure is written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab._io import atomic_write
from attnlab.training.rng import preserved_rng

__all__ = ["attention_figures", "layer_title", "write_figures"]


def layer_title(name: str) -> str:
    """A readable title for an attention layer's name (``"decoder.layer.cross_attn_heads"`` ...)."""
    if "cross" in name or name == "decoder.attn":
        return "Cross-Attention"
    if "encoder" in name.split(".")[0] or ".encoder" in name:
        return "Encoder Self-Attention"
    return "Decoder Self-Attention"


def attention_figures(model: nn.Module, full_test: Tensor, directions: Any, n: int = 2) -> dict[str, Any]:
    """One figure per attention layer of ``model``, on the first ``n`` test squares: ``{layer: Figure}``.

    ``full_test`` is the test squares ``[B, 4, 2]``, ``directions`` their ``[B]`` directions.
    The caller's random streams are left as they were (the attention lab's GRU
    models draw their teacher-forcing coin even in eval mode), and so is the model's mode.
    """
    from attnlab.attention import collect_attention, record_attention
    from attnlab.plotting import plot_attention

    inputs = full_test[:n, :2]  # [n, 2, 2]: the first two corners
    labels = [f"{'Clockwise' if int(d) else 'Counter-Clockwise'}\nPoint #1: {p[0, 0]:.2f}, {p[0, 1]:.2f}"
              for d, p in zip(directions[:n], inputs, strict=True)]
    was_training = model.training
    with preserved_rng({}):
        model.eval()
        try:
            with torch.no_grad(), record_attention():
                model(inputs)
            names = list(collect_attention(model))
        finally:
            model.train(was_training)
        figures = {}
        for name in names:
            fig = plot_attention(model, inputs, labels, ["Point #1", "Point #2"], ["Point #3", "Point #4"],
                                 decoder="decoder" in name, self_attn="self_attn" in name, layer=name)
            fig.suptitle(layer_title(name))
            figures[name] = fig
    return figures


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
        The paths written. The caller's random streams are left as they were.
    """
    from attnlab.plotting import plot_losses, sequence_pred

    written = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        # Every figure here lays itself out (constrained layout), so no bbox_inches="tight":
        # it would draw each figure a second time to measure it (a third of a run's drawing).
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
        written.append(path)

    with preserved_rng({}):
        save(plot_losses(losses, val_losses), "losses.png")
        save(sequence_pred(model, full_test, directions), "predictions.png")
        for name, fig in attention_figures(model, full_test, directions).items():
            save(fig, f"attention-{name.replace('.', '-')}.png")
    return written
