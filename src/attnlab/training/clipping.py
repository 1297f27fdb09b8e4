"""Gradient clipping: one setting at a time, by value, by norm, or during backpropagation.

The book kept the setting in one attribute that was a lambda for value/norm
clipping and a list of hook handles for backprop clipping, so switching from
one to the other either crashed (``.append`` on a lambda) or lost the handles
(hooks that could never be removed). Here every ``set_*`` first removes the
previous setting, hooks included, and the setting is plain data that a
checkpoint can carry.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from torch import nn

from attnlab._validate import check_finite_float

__all__ = ["GradientClipping"]


def _clamp_grad(grad: torch.Tensor, clip_value: float) -> torch.Tensor:
    return grad.clamp(-clip_value, clip_value)


class GradientClipping:
    """The clipping applied to a model's gradients during training.

    Modes (``config["mode"]``):

    * ``"value"``: after ``backward()``, every gradient element is clamped to
      ``[-clip_value, clip_value]`` (``nn.utils.clip_grad_value_``);
    * ``"norm"``: after ``backward()``, all gradients are scaled together so their
      ``norm_type``-norm is at most ``max_norm`` (``nn.utils.clip_grad_norm_``);
    * ``"backprop"``: a hook on every trainable parameter clamps its gradient as
      it is computed, before it is accumulated into ``.grad``.

    Attributes:
        config: the setting as plain data, or None when nothing is clipped.
    """

    def __init__(self) -> None:
        self.config: dict[str, Any] | None = None
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def set_value(self, clip_value: float) -> None:
        """Clip every gradient element to ``[-clip_value, clip_value]`` after backward.

        Raises:
            TypeError, ValueError: if ``clip_value`` is not a positive finite number.
        """
        clip_value = check_finite_float("clip_value", clip_value, positive=True)
        self.remove()
        self.config = {"mode": "value", "clip_value": clip_value}

    def set_norm(self, max_norm: float, norm_type: float = 2.0) -> None:
        """Rescale all gradients so their joint ``norm_type``-norm is at most ``max_norm``.

        Raises:
            TypeError, ValueError: if ``max_norm`` is not positive and finite, or
                ``norm_type`` is not positive (``float('inf')`` is allowed).
        """
        max_norm = check_finite_float("max_norm", max_norm, positive=True)
        if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)):
            raise TypeError(f"norm_type must be a number, got {norm_type!r}")
        if math.isnan(norm_type) or norm_type <= 0:
            raise ValueError(f"norm_type must be positive (or inf), got {norm_type}")
        self.remove()
        self.config = {"mode": "norm", "max_norm": max_norm, "norm_type": float(norm_type)}

    def set_backprop(self, model: nn.Module, clip_value: float) -> None:
        """Clamp each parameter's gradient to ``[-clip_value, clip_value]`` as backward computes it.

        Raises:
            TypeError, ValueError: if ``clip_value`` is not a positive finite number.
        """
        clip_value = check_finite_float("clip_value", clip_value, positive=True)
        self.remove()
        for param in model.parameters():
            if param.requires_grad:
                self._handles.append(param.register_hook(partial(_clamp_grad, clip_value=clip_value)))
        self.config = {"mode": "backprop", "clip_value": clip_value}

    def remove(self) -> None:
        """Stop clipping, removing any backprop hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.config = None

    def restore(self, model: nn.Module, config: dict[str, Any] | None) -> None:
        """Apply a setting saved as ``config`` (None removes clipping).

        Raises:
            ValueError: if ``config`` is not a setting this class writes.
        """
        if config is None:
            self.remove()
        elif not isinstance(config, dict) or config.get("mode") not in ("value", "norm", "backprop"):
            raise ValueError(f"unknown clipping setting {config!r}")
        elif config["mode"] == "value":
            self.set_value(config["clip_value"])
        elif config["mode"] == "norm":
            self.set_norm(config["max_norm"], config["norm_type"])
        else:
            self.set_backprop(model, config["clip_value"])

    def after_backward(self, model: nn.Module, *, params: list[nn.Parameter] | None = None) -> None:
        """Clip the accumulated gradients (value and norm modes); called between backward and step.

        ``params``: ``model``'s parameters, listed once by a caller that steps many times (walking the
        modules at every step costs more than the clipping of a small model); None: listed here.
        """
        if self.config is None or self.config["mode"] == "backprop":
            return
        params = [p for p in (model.parameters() if params is None else params) if p.grad is not None]
        if self.config["mode"] == "value":
            nn.utils.clip_grad_value_(params, self.config["clip_value"])
        else:
            nn.utils.clip_grad_norm_(params, self.config["max_norm"], norm_type=self.config["norm_type"])
