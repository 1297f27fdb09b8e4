"""The book's figures that run a model: ``plot_attention`` and ``sequence_pred`` of ``plots/chapter9.py``.

The positional-encoding lab and the attention lab (dvgodoy/PyTorchStepByStep)
draw a model's attention and predictions by handing the figure the model (or
the trainer): ``plot_attention(model, inputs, ...)``,
``sequence_pred(sbs, full_test, test_directions)``. :mod:`attnlab.plotting`
takes data only, so these two keep the book's names and positional arguments
for code copied from the labs: they run the model once and pass what it gives
to the data-only figures, :func:`attnlab.plotting.plot_attention_weights` and
:func:`attnlab.plotting.plot_sequence_pred`::

    from attnlab.compat.chapter9 import plot_attention, sequence_pred

Fixed relative to the book: the model runs without building a graph, in eval
mode held by :func:`attnlab._eval_mode.evaluating` (every module's train/eval
flag comes back, also when several threads draw with one model at once; the
book left the model in eval mode), on the model's own device (the book dropped
the GPU index); the attention weights come from attnlab's recording
(:func:`attnlab.attention.record_attention`), read inside the block that
recorded them, never a stashed attribute another call overwrote. The attention
lab's GRU models predict through their ``predict``, which draws no
teacher-forcing coin.

Shape notation: ``B`` sequences, ``H`` heads, ``T`` target (query) positions,
``S`` source (key) positions, ``N`` squares, ``F`` features.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor, nn

from attnlab._eval_mode import evaluating
from attnlab._validate import check_int
from attnlab.attention.recording import collect_attention, record_attention
from attnlab.models.labs.gru_seq2seq import EncoderDecoder
from attnlab.plotting.attention_maps import plot_attention_weights
from attnlab.plotting.squares import direction_array, plot_sequence_pred, prediction_array, square_array

__all__ = ["plot_attention", "sequence_pred"]

_GIVEN = 2  # the corners a squares model is given


def _run_eval(model: nn.Module, inputs: Tensor, source_mask: Tensor | None) -> Any:
    """``model(inputs)`` in eval mode, without grad; the GRU models through ``predict`` (no coin drawn)."""
    with evaluating(model), torch.no_grad():
        if isinstance(model, EncoderDecoder):
            return model.predict(inputs, source_mask)
        return model(inputs) if source_mask is None else model(inputs, source_mask=source_mask)


# -- plot_attention ----------------------------------------------------------------


def _run_and_record(model: nn.Module, inputs: Tensor, source_mask: Tensor | None) -> dict[str, Tensor]:
    """Run ``model(inputs)`` once, recording; the weights of this run only, ``{layer: [B, H, T, S]}``.

    The weights are read inside the run's own recording block: never stale ones
    from an earlier run, nor another thread's.
    """
    param = next(model.parameters(), None)
    if param is not None:
        inputs = inputs.to(param.device)  # the device itself, GPU index included
        source_mask = None if source_mask is None else source_mask.to(param.device)
    with record_attention():
        _run_eval(model, inputs, source_mask)
        return collect_attention(model)


def _known(recorded: dict[str, Tensor]) -> str:
    return ", ".join(repr(n) for n in recorded) or "none: no attnlab attention module ran"


def _owner_module(model: nn.Module, name: str) -> Any:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def _select_weights(model: nn.Module, recorded: dict[str, Tensor], layer: str | None, alphas_attr: str) -> np.ndarray:
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
    if not isinstance(value, Tensor):
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


def plot_attention(
    model: nn.Module,
    inputs: Tensor,
    point_labels: Sequence[Any] | None = None,
    source_labels: Sequence[Any] | None = None,
    target_labels: Sequence[Any] | None = None,
    decoder: bool = False,
    self_attn: bool = False,
    n_cols: int = 5,
    alphas_attr: str = "alphas",
    *,
    layer: str | None = None,
    source_mask: Tensor | None = None,
) -> Figure:
    """The attention weights of a model on some inputs (the book's ``plot_attention``).

    Runs ``model(inputs)`` once in eval mode, without grad, inside
    :func:`attnlab.attention.record_attention`, and draws the weights of one
    layer with :func:`attnlab.plotting.plot_attention_weights` (see there for the
    cells and the layout). Every module's train/eval mode is restored afterwards.

    The layer is ``layer`` (a name from :func:`attnlab.attention.collect_attention`,
    e.g. ``'encoder.layer.self_attn_heads'``) or else the book's dotted ``alphas_attr``:
    ``'decoder.layer.cross_attn_heads.alphas'`` means that module's recorded
    weights. With the default ``'alphas'`` on a model that recorded exactly one
    layer, that layer is drawn (for ``EncoderDecoderAttn`` the same weights as its
    ``alphas``). Any other plain tensor attribute is read after the run as
    ``[B, T, S]`` (one head) or, as the book's multi-head ``alphas``, ``[H, B, T, S]``.

    From several threads at once on one model, each figure shows its own call's
    weights (recorded per thread).

    Args:
        model: an ``nn.Module`` whose attention modules are attnlab's (or that
            keeps its own ``alphas``).
        inputs: what ``model`` takes, e.g. source sequences ``[B, S, F]``; moved to
            the model's device.
        point_labels: one label per sequence (``Point #i`` by default).
        source_labels: one label per source position (``Input #i`` by default).
        target_labels: one label per target position (``Target #i`` by default).
        decoder: with ``self_attn``, the weights are the decoder's self-attention
            (its sources are the shifted targets).
        self_attn: the weights are a self-attention's.
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
    if not isinstance(inputs, Tensor):
        raise TypeError(f"inputs must be a tensor, got {type(inputs).__name__}")
    n_cols = check_int("n_cols", n_cols, minimum=1)
    if source_mask is not None and not isinstance(source_mask, Tensor):
        raise TypeError(f"source_mask must be a tensor [B, 1, S], got {type(source_mask).__name__}")
    recorded = _run_and_record(model, inputs, source_mask)
    weights = _select_weights(model, recorded, layer, alphas_attr)  # [B, H, T, S]
    return plot_attention_weights(weights, point_labels, source_labels, target_labels,
                                  decoder=decoder, self_attn=self_attn, n_cols=n_cols)


# -- sequence_pred -----------------------------------------------------------------


def _model_device(model: nn.Module) -> torch.device | None:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return None


def _model_dtype(model: nn.Module) -> torch.dtype:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


def _run(predict: Any, source: np.ndarray, device: Any) -> Any:
    """``predict(source [n, S, F])`` without grad; an ``nn.Module`` in eval mode, every module's mode restored."""
    if isinstance(predict, nn.Module):
        device = device if device is not None else _model_device(predict)
        return _run_eval(predict, torch.as_tensor(source, dtype=_model_dtype(predict), device=device), None)
    inputs = torch.as_tensor(source, dtype=torch.float32, device=device)
    with torch.no_grad():
        return predict(inputs)


def _predictions(model_or_predictions: Any, squares: np.ndarray, n: int, device: Any) -> np.ndarray:
    """The predicted corners 3 and 4 of the first ``n`` squares ``[N, 4, 2]``, float64 ``[n, T, 2]``."""
    obj = model_or_predictions
    name = "model_or_predictions"
    if isinstance(obj, (Tensor, np.ndarray, list, tuple)):
        return prediction_array(obj, squares.shape[0], name)[:n]
    if not isinstance(obj, nn.Module) and hasattr(obj, "model"):  # the book's StepByStep, attnlab's Trainer
        if device is None and _model_device(obj.model) is None:
            device = getattr(obj, "device", None)
        obj = obj.model
    if not callable(obj):
        raise TypeError(f"{name} must be a model (callable or nn.Module), an object with .model (a trainer), "
                        f"or predictions [N, 2, 2]; got {type(obj).__name__}")
    out = _run(obj, squares[:n, :_GIVEN], device)
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}: the model must return a tensor [B, 2, 2], got {type(out).__name__}")
    preds = out.detach().cpu().double().numpy()
    if preds.shape != (n, 2, 2):
        raise ValueError(f"{name}: the model returned shape {list(preds.shape)} for sources "
                         f"[{n}, 2, 2]; expected the 2 next corners [{n}, 2, 2]")
    return preds


def sequence_pred(
    model_or_predictions: Any,
    X: Any,
    directions: Any | None = None,
    n_rows: int = 2,
    n_cols: int = 5,
    *,
    device: torch.device | str | None = None,
) -> Figure:
    """A model's predicted corners against the true squares (the book's ``sequence_pred``).

    With a model, it runs once on the first two corners of the drawn squares,
    ``X[:n, :2]``, on the model's device, without grad; an ``nn.Module`` runs in
    eval mode, and every submodule's train/eval mode is restored afterwards (after
    the last call, when several threads draw with one model at once). The
    attention lab's GRU models predict without drawing their teacher-forcing coin.
    The figure is :func:`attnlab.plotting.plot_sequence_pred`'s (see there).

    Args:
        model_or_predictions: what to draw as predictions: an ``nn.Module`` or
            any callable ``[B, 2, 2] -> [B, 2, 2]``; an object with ``.model``
            (the book passes its ``StepByStep``; attnlab's ``Trainer`` works too);
            or the predictions themselves, ``[N, 2, 2]`` (tensor or array).
        X: the full squares ``[N, 4, 2]``, e.g. ``make_loaders().full_test``.
        directions: ``[N]``, 1 = clockwise, 0 = counter-clockwise; the panels are
            titled ``Clockwise`` / ``Counter-Clockwise``, untitled when None.
        n_rows: rows of panels.
        n_cols: panels per row; the first ``min(N, n_rows * n_cols)`` squares are drawn.
        device: where to run the model; by default the device of its parameters
            (else the trainer's ``.device``, else the CPU).

    Returns:
        The figure, ``4 x 4`` inches per panel (the book's 20x8 inches for 2x5).

    Raises:
        TypeError: if ``model_or_predictions`` is none of the above, or the model
            does not return a tensor.
        ValueError: naming the argument, if ``X`` is not ``[N, 4, 2]``, the
            predictions (given or returned) are not ``[N, 2, 2]``, ``directions``
            is not ``N`` zeros and ones, or ``n_rows``/``n_cols`` is below 1.
    """
    n_rows = check_int("n_rows", n_rows, minimum=1)
    n_cols = check_int("n_cols", n_cols, minimum=1)
    squares = square_array(X)  # [N, 4, 2]
    dirs = direction_array(directions, squares.shape[0])  # [N] or None
    n = min(squares.shape[0], n_rows * n_cols)
    preds = _predictions(model_or_predictions, squares, n, device)  # [n, 2, 2]
    return plot_sequence_pred(preds, squares[:n], None if dirs is None else dirs[:n], n_rows, n_cols)
