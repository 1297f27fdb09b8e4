"""Train/eval mode, held and given back: the one place every layer of attnlab changes a model's mode.

The train/eval flag lives on every module, not on the model, and a caller may
have frozen a submodule on purpose (a BatchNorm kept in eval mode). So neither
helper here calls ``model.train(flag)`` to undo its change: each one saves every
module's own flag and puts it back.

* :func:`preserved_modes`: whatever the block does to the modes (the training
  loop switches between train and eval every epoch), every module's flag comes
  back on exit;
* :func:`evaluating`: the model is held in eval mode for as long as any call
  needs it, from any number of threads: the first call in saves the flags and
  switches to eval, the last one out restores them. One call switching the model
  back to train mode in the middle of another's prediction (what saving and
  restoring the flags per call does, from two threads) cannot happen.

This module sits on the ground floor (it imports nothing from attnlab beyond
``_validate``), so that ``training``, ``labs``, ``compat`` and the models'
inference helpers all use the same two without importing one another.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["evaluating", "preserved_modes"]

_LOCK = threading.Lock()
# model -> (calls holding it in eval mode, every module's flag before the first of them)
_HELD: dict[nn.Module, tuple[int, list[tuple[nn.Module, bool]]]] = {}


def _check_module(model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


@contextmanager
def preserved_modes(model: nn.Module) -> Iterator[None]:
    """Restore the train/eval flag of every submodule of ``model`` on exit.

    ``model.train(flag)`` alone would overwrite submodules a caller froze on
    purpose (a BatchNorm kept in eval mode), so each module's own flag is kept.

    Raises:
        TypeError: if ``model`` is not an ``nn.Module``.
    """
    _check_module(model)
    modes = [(module, module.training) for module in model.modules()]
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Hold ``model`` in eval mode for the block; every module's own flag comes back after the last holder.

    Safe from several threads at once on one model (the flags are saved by the
    first call in and restored by the last one out). A submodule a caller froze
    in eval mode keeps its flag.

    Raises:
        TypeError: if ``model`` is not an ``nn.Module``.
    """
    _check_module(model)
    with _LOCK:
        holders, modes = _HELD.get(model, (0, []))
        if holders == 0:
            modes = [(module, module.training) for module in model.modules()]
            model.eval()
        _HELD[model] = (holders + 1, modes)
    try:
        yield model
    finally:
        with _LOCK:
            holders, modes = _HELD.pop(model)
            if holders > 1:
                _HELD[model] = (holders - 1, modes)
            else:
                for module, training in modes:
                    module.training = training
