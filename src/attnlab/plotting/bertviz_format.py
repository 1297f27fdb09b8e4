"""Recorded attention weights in bertviz's format, for its head view and model view.

bertviz (Vig 2019, https://github.com/jessevig/bertviz) draws attention from
what Hugging Face models return with ``output_attentions=True``: one tensor per
layer, ``[1, H, T, S]`` (a batch of one), and one token label per position.
attnlab records weights as ``{layer name: [B, H, T, S]}``
(:func:`attnlab.attention.collect_attention`,
:func:`attnlab.labs.squares.figures.attention_weights`); :func:`to_bertviz` turns
those into the keyword arguments of ``bertviz.head_view`` / ``bertviz.model_view``::

    weights = attention_weights(model, inputs)                   # {name: [B, H, T, S]}
    head_view(**to_bertviz(encoder_attention=[weights["encoder.layer.self_attn_heads"]],
                           decoder_attention=[weights["decoder.layer.self_attn_heads"]],
                           cross_attention=[weights["decoder.layer.cross_attn_heads"]],
                           encoder_tokens=["Point #1", "Point #2"],
                           decoder_tokens=["Point #2", "Point #3"]))

Which recorded layer is an encoder's, a decoder's or a cross-attention is the
caller's to say (module names do not tell reliably: the attention lab's GRU
decoder calls its cross-attention ``attn``). bertviz stacks the layers of each
kind into one tensor and offers one layer menu for all kinds, so every layer of a
kind must have the same head count and lengths, and every kind the same number
of layers: anything else is refused here, naming the layer, instead of failing
inside bertviz. Nothing here imports bertviz or runs a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab._validate import check_int

__all__ = ["to_bertviz"]

#: Layers as recorded (``{name: [B, H, T, S]}``, in layer order) or as a sequence of ``[B, H, T, S]``.
Layers = Mapping[str, Any] | Sequence[Any]


def _named_layers(argument: str, layers: Layers) -> list[tuple[str, Tensor]]:
    """``layers`` as ``[(label, weights [B, H, T, S])]``; labels name the layer in messages."""
    if isinstance(layers, Mapping):
        items = [(f"{argument}[{name!r}]", value) for name, value in layers.items()]
    elif isinstance(layers, Sequence) and not isinstance(layers, (str, bytes)):
        items = [(f"{argument}[{i}]", value) for i, value in enumerate(layers)]
    else:
        raise TypeError(f"{argument} must be a mapping {{layer name: weights}} or a sequence of weights, "
                        f"got {type(layers).__name__}")
    if not items:
        raise ValueError(f"{argument} is empty: give at least one layer's weights [B, H, T, S]")
    named = []
    for label, value in items:
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, Tensor):
            raise TypeError(f"{label} must be a tensor of weights [B, H, T, S], got {type(value).__name__}")
        if value.dim() != 4 or not value.is_floating_point():
            raise ValueError(f"{label} must be floating-point weights [B, H, T, S], got {value.dtype} "
                             f"of shape {list(value.shape)}")
        named.append((label, value))
    return named


def _tokens(argument: str, tokens: Any, length: int, what: str) -> list[str]:
    """``tokens`` as a list of ``length`` strings (one per position of ``what``)."""
    if tokens is None:
        raise ValueError(f"{argument} is required with {what}")
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise TypeError(f"{argument} must be a sequence of labels, one per position, got {type(tokens).__name__}")
    if len(tokens) != length:
        raise ValueError(f"{argument} has {len(tokens)} labels, but {what} has {length} positions")
    return [str(token) for token in tokens]


def _kind(argument: str, layers: Layers, example: int) -> tuple[Tensor, ...]:
    """One kind of layers as bertviz takes it: a tuple of ``[1, H, T, S]``, one per layer.

    Every layer must have the first one's head count and lengths (bertviz stacks them).
    """
    named = _named_layers(argument, layers)
    first_label, first = named[0]
    heads, t, s = first.shape[1:]
    picked = []
    for label, weights in named:
        b, h, t_, s_ = weights.shape
        if h != heads:
            raise ValueError(f"{label} has {h} heads, but {first_label} has {heads}: bertviz needs "
                             "every layer of a kind to have the same number of heads")
        if (t_, s_) != (t, s):
            raise ValueError(f"{label} attends from {t_} to {s_} positions, but {first_label} from {t} to {s}: "
                             "bertviz needs every layer of a kind to have the same lengths")
        if example >= b:
            raise ValueError(f"example {example} is out of range: {label} holds a batch of {b}")
        # bertviz takes a batch of one: [1, H, T, S], on the CPU, float32, no graph.
        picked.append(weights[example:example + 1].detach().to("cpu", torch.float32))
    return tuple(picked)


def _lengths(layers: tuple[Tensor, ...]) -> tuple[int, int]:
    """The query and key lengths ``(T, S)`` of one kind's layers."""
    return layers[0].shape[2], layers[0].shape[3]


def to_bertviz(
    attention: Layers | None = None,
    tokens: Sequence[str] | None = None,
    *,
    encoder_attention: Layers | None = None,
    decoder_attention: Layers | None = None,
    cross_attention: Layers | None = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    example: int = 0,
) -> dict[str, Any]:
    """Attention weights and their token labels as the keyword arguments of bertviz's views.

    Either a self-attention model's ``attention`` with its ``tokens``, or an
    encoder-decoder model's ``encoder_attention`` (encoder self-attention, over the
    encoder tokens), ``decoder_attention`` (decoder self-attention, over the decoder
    tokens) and ``cross_attention`` (decoder tokens attending to encoder tokens), any
    of the three. Each is the layers of that kind, in order: the dict
    :func:`attnlab.attention.collect_attention` returns (or a part of it), or a
    sequence of weights ``[B, H, T, S]``.

    Args:
        attention: a self-attention model's layers, each ``[B, H, L, L]``.
        tokens: one label per position ``L``.
        encoder_attention: encoder self-attention layers, each ``[B, H, S, S]``.
        decoder_attention: decoder self-attention layers, each ``[B, H, T, T]``.
        cross_attention: cross-attention layers, each ``[B, H, T, S]``.
        encoder_tokens: one label per encoder position ``S``.
        decoder_tokens: one label per decoder position ``T``.
        example: which sequence of the batch to show (bertviz shows one).

    Returns:
        ``{"attention": (layer [1, H, L, L], ...), "tokens": [...]}``, or the
        encoder-decoder keys given (``encoder_attention``, ``decoder_attention``,
        ``cross_attention`` as tuples of ``[1, H, T, S]``, and ``encoder_tokens`` /
        ``decoder_tokens``): ``bertviz.head_view(**result)`` and
        ``bertviz.model_view(**result)`` take it as it is. The tensors are float32
        copies on the CPU, detached.

    Raises:
        TypeError: for layers that are not a mapping or sequence of tensors, or tokens
            that are not a sequence of labels.
        ValueError: naming the argument, for no layers, or both the self-attention and
            the encoder-decoder arguments; for weights that are not ``[B, H, T, S]``,
            layers of one kind with different head counts or lengths, kinds with
            different numbers of layers; for token lists whose length is not the
            number of positions, and an ``example`` outside the batch.
    """
    example = check_int("example", example, minimum=0)
    encoder_decoder: dict[str, Layers | None] = {"encoder_attention": encoder_attention,
                                                 "decoder_attention": decoder_attention,
                                                 "cross_attention": cross_attention}
    given = {name: layers for name, layers in encoder_decoder.items() if layers is not None}
    if attention is not None:
        labelled = {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}
        extra = list(given) + [name for name, v in labelled.items() if v is not None]
        if extra:
            raise ValueError(f"attention (a self-attention model's) cannot be given with {', '.join(extra)} "
                             "(an encoder-decoder model's)")
        if tokens is None:
            raise ValueError("tokens is required with attention: one label per position")
        layers = _kind("attention", attention, example)
        t, s = _lengths(layers)
        if t != s:
            raise ValueError(f"attention must be self-attention [B, H, L, L], got {t} queries and {s} keys")
        return {"attention": layers, "tokens": _tokens("tokens", tokens, s, "attention")}
    if not given:
        raise ValueError("give attention (with tokens), or any of encoder_attention, decoder_attention, "
                         "cross_attention (with encoder_tokens / decoder_tokens)")
    if tokens is not None:
        raise ValueError("tokens goes with attention; an encoder-decoder model's labels are encoder_tokens "
                         "and decoder_tokens")

    result: dict[str, Any] = {name: _kind(name, layers, example) for name, layers in given.items()}
    # The lengths every kind must agree on: S, the encoder's positions, and T, the decoder's.
    sizes: dict[str, dict[str, int]] = {"S": {}, "T": {}}
    for name, (row, col) in {"encoder_attention": ("S", "S"), "decoder_attention": ("T", "T"),
                             "cross_attention": ("T", "S")}.items():
        if name in result:
            t, s = _lengths(result[name])
            if row == col and t != s:
                raise ValueError(f"{name} must be self-attention [B, H, L, L], got {t} queries and {s} keys")
            sizes[row][name], sizes[col][name] = t, s
    for axis, found in sizes.items():
        if len(set(found.values())) > 1:
            shown = ", ".join(f"{name} {n}" for name, n in found.items())
            what = "encoder (S)" if axis == "S" else "decoder (T)"
            raise ValueError(f"the {what} lengths differ between kinds: {shown}")
    counts = {name: len(result[name]) for name in given}
    if len(set(counts.values())) > 1:
        shown = ", ".join(f"{name} {n}" for name, n in counts.items())
        raise ValueError(f"every kind must have the same number of layers (bertviz has one layer menu for all), "
                         f"got {shown}")
    for axis, argument, labels in (("S", "encoder_tokens", encoder_tokens), ("T", "decoder_tokens", decoder_tokens)):
        if sizes[axis]:
            name, n = next(iter(sizes[axis].items()))
            result[argument] = _tokens(argument, labels, n, name)
    return result
