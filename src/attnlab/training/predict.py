"""Prediction in batches, for the book's ``Trainer.predict``: eval mode, no graph, numpy out.

The book's ``predict`` built a graph and forced train mode afterwards. Here every
module's mode is restored, nothing is recorded for autograd, long inputs run in
chunks, and integer inputs (token ids) keep their dtype.

Several threads may predict with one model at once: the model is held in eval
mode while any of them needs it (:func:`attnlab._eval_mode.evaluating`) and
everything else a call needs stays in the call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnlab._eval_mode import evaluating
from attnlab._validate import check_int

__all__ = ["predict_numpy"]


def _float_dtype(model: nn.Module) -> torch.dtype:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.get_default_dtype()


def predict_numpy(model: nn.Module, x: Any, *, device: torch.device, batch_size: int = 1024) -> Any:
    """``model``'s output for ``x [B, ...]`` as numpy, in eval mode, chunk by chunk, without a graph.

    See :meth:`attnlab.training.Trainer.predict`, which calls it with the trainer's model and device.

    Raises:
        TypeError: if ``x`` cannot become a tensor, or the output is not a tensor
            or a tuple of tensors.
        ValueError: if ``x`` has no batch axis or ``batch_size`` < 1, or if ``x``
            spans several chunks and an output has no leading batch axis.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    try:
        x = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"x must be a tensor or array-like, got {type(x).__name__} ({exc})") from exc
    if x.dim() == 0:
        raise ValueError(f"x must have a batch axis, got a scalar {x.item()!r}")
    if x.is_floating_point():
        x = x.to(_float_dtype(model))
    chunks = x.split(batch_size) if len(x) else (x,)
    with evaluating(model), torch.no_grad():
        outputs = [model(chunk.to(device)) for chunk in chunks]
    return _concat_numpy(outputs, [len(chunk) for chunk in chunks])


def _concat_numpy(outputs: list[Any], sizes: list[int]) -> Any:
    """Join per-chunk outputs along the batch axis, as numpy (a tuple of arrays for tuple outputs)."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        joinable = all(o.dim() > 0 and o.shape[0] == n for o, n in zip(outputs, sizes, strict=True))
        if len(outputs) > 1 and not joinable:
            # e.g. a GRU's h [layers, B, F]: joining chunks along its first axis would be wrong.
            raise ValueError("the model's output has no leading batch axis, so chunks cannot be joined; "
                             "pass a batch_size of at least len(x)")
        out = (torch.cat(outputs) if len(outputs) > 1 else first).detach().cpu()
        return (out.float() if out.dtype == torch.bfloat16 else out).numpy()
    if isinstance(first, (tuple, list)):
        return tuple(_concat_numpy([o[i] for o in outputs], sizes) for i in range(len(first)))
    raise TypeError(f"predict needs a model returning a tensor (or a tuple of them), "
                    f"got {type(first).__name__}")
