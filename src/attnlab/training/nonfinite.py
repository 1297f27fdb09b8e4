"""A loss that is not finite before any step: where in the model it starts, named, instead of blaming the rate.

A training loss of NaN or inf after some steps is divergence, and the learning rate is the first
suspect. A loss that is already NaN on the first batch, with the model's initial weights, before
any update, is not: something in the model's forward (a position scheme whose term is NaN, an
input table that adds inf) or the data makes it. :func:`nonfinite_origin` finds the module where
it starts: the first module, in the order the forward pass finishes them, whose tensor inputs are
finite and whose output is not (a module fed a NaN passes it on; the one that made it is named).
A module that holds a position scheme (``position``) is named with it, a model's input table as such.

:func:`check_initial_loss` is the cheap pre-flight the labs run before they write a run folder:
one forward pass of one batch with the freshly built model, on a copy of the random state (no
stream moves, so the run's numbers are what they would be without it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.encodings.scheme import PositionScheme

__all__ = ["INPUTS", "check_initial_loss", "describe_nonfinite", "nonfinite_origin"]

#: what :func:`nonfinite_origin` names when no module made the value: it came in with the batch
INPUTS = "the batch's inputs"


def _finite(values: Iterable[Any]) -> bool:
    """Whether every floating tensor in ``values`` (nested in tuples, lists and dicts) is finite."""
    for value in values:
        if isinstance(value, Tensor):
            if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all()):
                return False
        elif isinstance(value, (tuple, list)):
            if not _finite(value):
                return False
        elif isinstance(value, dict) and not _finite(value.values()):
            return False
    return True


def _named(model: nn.Module, name: str, module: nn.Module) -> str:
    """How a module is named in a message: by its position scheme or as the input table where it is one."""
    position = getattr(module, "position", None)
    if isinstance(position, PositionScheme):
        return f"{name or 'the model'}'s position scheme {type(position).__name__}"
    if any(getattr(owner, "input_position", None) is module for owner in model.modules()):
        return f"its input table {type(module).__name__}"
    return f"{name or 'the model'} ({type(module).__name__})"


def nonfinite_origin(model: nn.Module, forward: Callable[[], Any]) -> str | None:
    """Run ``forward()`` (a pass through ``model``) and name the module where a non-finite value starts.

    Every module's output is checked as the pass finishes it (forward hooks, removed after), so
    this costs a pass and a read of every activation: it is for a loss already known to be bad.
    What ``forward`` raises is raised.

    Returns:
        ``"layers.0.self_attn's position scheme Sandwich"``, ``"its input table MyTable"``,
        ``"layers.1.ffn.0 (Linear)"``, ``"the batch's inputs"`` (no module made it: it came in with
        them); None when every module's output is finite (the loss itself, or the data's targets,
        is then where it starts).
    """
    names = {module: name for name, module in model.named_modules()}
    found: list[str] = []
    passed_on: list[bool] = []  # some module's output was not finite, though none made it so

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if found or _finite([output]):
            return
        if _finite(args) and _finite(kwargs.values()):
            found.append(_named(model, names.get(module, ""), module))
        else:
            passed_on.append(True)

    handles = [module.register_forward_hook(hook, with_kwargs=True) for module in model.modules()]
    try:
        with torch.no_grad():
            forward()
    finally:
        for handle in handles:
            handle.remove()
    if found:
        return found[0]
    return INPUTS if passed_on else None


def describe_nonfinite(loss: float, origin: str | None) -> str:
    """The message for a loss of ``loss`` with the model's initial weights, before any step, from ``origin``."""
    if origin == INPUTS:
        where = "the batch's inputs hold NaN or inf; check the data"
    elif origin is not None:
        where = f"{origin} gives non-finite values"
    else:
        where = "every module's output is finite, so the loss or the data's targets make it"
    return (f"the loss is {loss} on the first batch with the model's initial weights, before any step, so the "
            f"learning rate is not the cause: {where}")


def check_initial_loss(model: nn.Module, loss_of: Callable[[], Tensor], *, what: str, record: bool = False) -> None:
    """Refuse a model whose loss on one batch is not finite with its initial weights: the labs' pre-flight.

    ``loss_of()`` computes the loss of one batch through ``model``, in training mode, as the first
    step would; nothing is stepped. Autograd records only with ``record``: what only a recording
    call refuses (a path without a backward pass on this device, as ``backend="flex"`` on the CPU)
    is refused then too. Without it the probe is cheaper and is no training step (a scheme that
    watches for its first training step does not see one). It runs on a copy of torch's random
    state (every device's), so no stream moves.

    Raises:
        ValueError: ``"{what}: the loss is nan on the first batch ... : layers.0.self_attn's position
            scheme NanBias gives non-finite values"`` (:func:`nonfinite_origin`).
    """
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        was_training = model.training
        model.train()
        try:
            with torch.set_grad_enabled(record):
                loss = loss_of()
                value = float(loss.detach().float().mean()) if isinstance(loss, Tensor) else float(loss)
                if value == value and abs(value) != float("inf"):
                    return
                origin = nonfinite_origin(model, loss_of)
        finally:
            model.train(was_training)
    raise ValueError(f"{what}: {describe_nonfinite(value, origin)}")
