"""Batches: moving ``(x, y)`` batches to a device, counting their samples, and the loss of a batch.

The trainer knows nothing about the task. A batch is a pair ``(x, y)``: ``x`` is
what the model takes (``model(x)``) and ``y`` what the loss compares its output
with (``loss_fn(model(x), y)``). Either may be a tensor or a tuple, list or dict
of tensors; everything is moved to the device as it is, with no dtype change
(integer token ids stay integers). :func:`supervised` turns the book's
``loss_fn(model(x), y)`` into the loss of a batch, as :func:`attnlab.training.fit` takes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["BatchLoss", "batch_size", "count_samples", "supervised", "to_device", "unpack_batch"]

#: ``loss(model, batch) -> scalar tensor``, the mean loss over the batch's samples.
BatchLoss = Callable[[nn.Module, Any], Tensor]


def to_device(obj: Any, device: torch.device) -> Any:
    """``obj`` with every tensor in it moved to ``device`` (tuples, lists and dicts are walked)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {key: to_device(value, device) for key, value in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple keeps its type and field names
        return type(obj)(*(to_device(value, device) for value in obj))
    if isinstance(obj, (list, tuple)):
        moved = [to_device(value, device) for value in obj]
        return type(obj)(moved) if type(obj) in (list, tuple) else moved
    return obj


def unpack_batch(batch: Any, device: torch.device | None) -> tuple[Any, Any]:
    """Split a loader's batch into ``(x, y)``, moved to ``device`` (None: left where they are).

    Raises:
        TypeError: if the batch is not a pair.
    """
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        kind = f"a {type(batch).__name__}"
        if isinstance(batch, (list, tuple)):
            kind += f" of length {len(batch)}"
        raise TypeError(f"each batch must be a pair (x, y), got {kind}")
    if device is None:
        return batch[0], batch[1]
    return to_device(batch[0], device), to_device(batch[1], device)


def _first_tensor(obj: Any) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    for value in values:
        found = _first_tensor(value)
        if found is not None:
            return found
    return None


def batch_size(x: Any, y: Any) -> int:
    """Number of samples in a batch: the first dimension of ``y`` (or of ``x`` if ``y`` holds no tensor).

    Raises:
        TypeError: if neither holds a tensor with a batch dimension.
    """
    for part in (y, x):
        tensor = _first_tensor(part)
        if tensor is not None and tensor.dim() > 0:
            return int(tensor.shape[0])
    raise TypeError("cannot tell the batch size: neither x nor y holds a tensor with a batch dimension")


def count_samples(batch: Any) -> int:
    """Number of samples in any batch: :func:`batch_size` of an ``(x, y)`` pair, else its first tensor's
    first dimension.

    Raises:
        TypeError: if the batch holds no tensor with a batch dimension.
    """
    if isinstance(batch, (list, tuple)) and len(batch) == 2 and not hasattr(batch, "_fields"):
        return batch_size(batch[0], batch[1])
    tensor = _first_tensor(batch)
    if tensor is None or tensor.dim() == 0:
        raise TypeError("cannot tell the batch size: the batch holds no tensor with a batch dimension")
    return int(tensor.shape[0])


def supervised(loss_fn: Callable[[Any, Any], Tensor]) -> BatchLoss:
    """The book's convention: each batch is ``(x, y)`` and its loss ``loss_fn(model(x), y)``.

    An ``x`` that is a dict holds the model's keyword arguments: ``model(**x)``
    (e.g. ``{"X": ..., "source_mask": ...}`` from :class:`attnlab.data.SquarePrefixes`).

    Raises:
        TypeError: if ``loss_fn`` is not callable; when called, if a batch is not a pair.
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")

    def loss(model: nn.Module, batch: Any) -> Tensor:
        x, y = unpack_batch(batch, None)
        return loss_fn(model(**x) if isinstance(x, Mapping) else model(x), y)

    return loss
