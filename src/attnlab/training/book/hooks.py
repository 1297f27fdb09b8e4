"""Forward and gradient hooks: capturing layer outputs, gradients and parameters by layer name.

Layers are named as ``model.named_modules()`` names them (``"encoder.proj"``,
``"0"`` in an ``nn.Sequential``). The captures are numpy arrays, copied off the
device, concatenated along the first (batch) axis across forward calls.

Hooks stay attached until removed, so they also record during training and
validation passes, not only during :meth:`Trainer.predict`; attach them just
before the pass you want to look at and remove them afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["GradientRecorder", "OutputRecorder", "ParameterRecorder", "main_output", "resolve_layers",
           "to_numpy"]


def resolve_layers(model: nn.Module, layers_to_hook: str | Iterable[str]) -> dict[str, nn.Module]:
    """Map layer names to the model's submodules.

    Args:
        model: the model.
        layers_to_hook: one name or several; ``""`` names the model itself.

    Returns:
        ``{name: module}`` in the order the names were given.

    Raises:
        TypeError: if a name is not a string.
        ValueError: if a name is not a submodule of the model (the book ignored it silently).
    """
    names = [layers_to_hook] if isinstance(layers_to_hook, str) else list(layers_to_hook)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"layers_to_hook must hold layer names (str), got {name!r}")
    modules = dict(model.named_modules())
    unknown = [name for name in names if name not in modules]
    if unknown:
        known = ", ".join(repr(n) for n in list(modules)[1:13])
        missing = ", ".join(map(repr, unknown))
        raise ValueError(f"layers_to_hook: no layer named {missing}; layers include {known}")
    return {name: modules[name] for name in names}


def to_numpy(value: torch.Tensor) -> np.ndarray:
    """A tensor of any shape as a numpy copy on the CPU (bfloat16, which numpy lacks, as float32)."""
    value = value.detach().cpu()
    return (value.float() if value.dtype == torch.bfloat16 else value).numpy().copy()


def main_output(outputs: Any) -> torch.Tensor:
    """The tensor a layer outputs: the output itself, or a tuple's first element.

    ``nn.GRU``/``nn.LSTM`` return ``(out, h)`` and ``nn.MultiheadAttention``
    ``(out, weights)``; the first element is the layer's output proper (for a
    GRU, the hidden state at every step, of which ``h`` is the last).

    Raises:
        TypeError: if there is no tensor there.
    """
    while isinstance(outputs, (tuple, list)) and len(outputs) > 0:
        outputs = outputs[0]
    if not isinstance(outputs, torch.Tensor):
        raise TypeError(f"cannot capture a layer output of type {type(outputs).__name__}")
    return outputs


class OutputRecorder:
    """The default forward hook: appends a layer's output to ``store[name]`` as one numpy array.

    Outputs ``[B, ...]`` from successive calls are concatenated along the first
    axis into ``[sum of B, ...]`` (the batch axis for batch-first layers). For a
    layer returning a tuple, the first element is captured: a batch-first GRU's
    ``out [B, L, F]`` (see :func:`main_output`); the book's hook failed on tuples.
    """

    def __init__(self, store: dict[str, Any], name: str) -> None:
        self.store = store
        self.name = name

    def __call__(self, module: nn.Module, inputs: Any, outputs: Any) -> None:
        values = to_numpy(main_output(outputs))
        previous = self.store.get(self.name)
        self.store[self.name] = values if previous is None else np.concatenate([previous, values])


class GradientRecorder:
    """A tensor hook appending a copy of each gradient of one parameter to a list."""

    def __init__(self, store: list[np.ndarray]) -> None:
        self.store = store

    def __call__(self, grad: torch.Tensor) -> None:
        self.store.append(to_numpy(grad))


class ParameterRecorder:
    """A forward hook appending a copy of a layer's parameters (by name) on every forward pass."""

    def __init__(self, store: dict[str, list[np.ndarray]]) -> None:
        self.store = store

    def __call__(self, module: nn.Module, inputs: Any, outputs: Any) -> None:
        for name, param in module.named_parameters():
            if param.requires_grad:
                self.store.setdefault(name, []).append(to_numpy(param))
