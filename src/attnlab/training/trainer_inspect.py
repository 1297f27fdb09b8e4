"""Looking inside a training run: the trainer's hooks and its TensorBoard log (the book's ``StepByStep``).

:class:`TrainerInspection` holds the methods of :class:`~attnlab.training.Trainer`
that watch a model rather than train it: forward hooks capturing layer outputs
(``attach_hooks``, ``remove_hooks``), captured gradients and parameters
(``capture_gradients``, ``capture_parameters``; the recorders are in
:mod:`.hooks`), and TensorBoard (``set_tensorboard``, ``add_graph``, ``close``).
``Trainer`` inherits them; the trainer's attributes they use are declared here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from attnlab.training.batches import unpack_batch
from attnlab.training.hooks import GradientRecorder, OutputRecorder, ParameterRecorder, resolve_layers
from attnlab.training.tensorboard import make_summary_writer

__all__ = ["TrainerInspection"]


class TrainerInspection:
    """The hooks and TensorBoard methods of :class:`~attnlab.training.Trainer`."""

    model: nn.Module
    device: torch.device
    train_loader: Iterable[Any] | None
    writer: Any
    visualization: dict[str, Any]
    handles: dict[str, Any]
    _gradients: dict[str, dict[str, list[Any]]]
    _parameters: dict[str, dict[str, list[Any]]]

    # -- hooks ---------------------------------------------------------------------

    def attach_hooks(self, layers_to_hook: str | Iterable[str],
                     hook_fn: Callable[..., Any] | None = None) -> None:
        """Attach forward hooks to the named layers, replacing earlier :meth:`attach_hooks` hooks.

        The default hook stores each layer's outputs, as numpy, concatenated along
        the batch axis, in ``self.visualization[name]``; for layers returning a
        tuple (``nn.GRU``'s ``(out, h)``) the first element (see :class:`.hooks.OutputRecorder`).

        Args:
            layers_to_hook: a layer name or names from ``model.named_modules()``.
            hook_fn: a custom ``hook_fn(module, inputs, outputs)`` to register instead.

        Raises:
            TypeError, ValueError: for names that are not strings or not layers of the model.
        """
        layers = resolve_layers(self.model, layers_to_hook)
        for name in list(self.visualization):
            handle = self.handles.pop(name, None)
            if handle is not None:
                handle.remove()
        self.visualization = {}
        for name, layer in layers.items():
            self.visualization[name] = None
            hook = OutputRecorder(self.visualization, name) if hook_fn is None else hook_fn
            self.handles[name] = layer.register_forward_hook(hook)

    def remove_hooks(self) -> None:
        """Remove every hook from :meth:`attach_hooks`, :meth:`capture_gradients` and
        :meth:`capture_parameters` (the captured values are kept)."""
        for handle in self.handles.values():
            handle.remove()
        self.handles = {}

    def capture_gradients(self, layers_to_hook: str | Iterable[str]) -> None:
        """Record every gradient of the named layers' trainable parameters, as numpy copies,
        in ``self._gradients[layer][param_name]`` (a list, one entry per backward)."""
        for name, layer in resolve_layers(self.model, layers_to_hook).items():
            self._gradients[name] = {}
            for pname, param in layer.named_parameters():
                if param.requires_grad:
                    self._gradients[name][pname] = []
                    key = f"{name}.{pname}.grad"
                    if key in self.handles:
                        self.handles.pop(key).remove()
                    self.handles[key] = param.register_hook(GradientRecorder(self._gradients[name][pname]))

    def capture_parameters(self, layers_to_hook: str | Iterable[str]) -> None:
        """Record the named layers' trainable parameters, as numpy copies, on every forward pass,
        in ``self._parameters[layer][param_name]`` (unlike the book, ``visualization`` is left alone)."""
        for name, layer in resolve_layers(self.model, layers_to_hook).items():
            self._parameters[name] = {}
            key = f"{name}.params"
            if key in self.handles:
                self.handles.pop(key).remove()
            self.handles[key] = layer.register_forward_hook(ParameterRecorder(self._parameters[name]))

    # -- TensorBoard ---------------------------------------------------------------

    def set_tensorboard(self, name: str, folder: str | os.PathLike[str] = "runs", *,
                        writer: Any = None) -> None:
        """Log losses to TensorBoard under ``{folder}/{name}_{timestamp}``, or to ``writer``.

        Args:
            name: run name.
            folder: parent folder of the run.
            writer: an object with ``add_scalars``, ``flush`` and ``close`` (a
                ``SummaryWriter`` or a stand-in); when given, nothing is imported.

        Raises:
            ImportError: if ``writer`` is None and ``tensorboard`` is not installed.
        """
        self.writer = writer if writer is not None else make_summary_writer(name, folder)

    def add_graph(self) -> None:
        """Add the model's graph, traced on the first training batch, to TensorBoard (as the book)."""
        if self.train_loader is not None and self.writer is not None:
            x, _ = unpack_batch(next(iter(self.train_loader)), self.device)
            self.writer.add_graph(self.model, x)

    def close(self) -> None:
        """Close the TensorBoard writer, if any (``train`` only flushes it)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
