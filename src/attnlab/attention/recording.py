"""Recording attention weights only when someone asks for them.

The fused attention kernels never form the ``[B, H, T, S]`` weight matrix, and
that is where their speed and their linear memory come from. So attnlab's
modules compute weights only when asked: per call with ``need_weights=True``,
or for everything run inside ``with record_attention():``, which makes every
attention module keep its last weights in ``.attn_weights`` (``[B, H, T, S]``,
detached). :func:`collect_attention` gathers them from a whole model, by layer.

Example:
    >>> import torch
    >>> from attnlab.attention import MultiHeadAttention
    >>> mha = MultiHeadAttention(2, 4)
    >>> x = torch.randn(1, 3, 4)
    >>> with record_attention():
    ...     _ = mha(x, x, x)
    >>> {name: list(w.shape) for name, w in collect_attention(mha).items()}
    {'': [1, 2, 3, 3]}
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor, nn

__all__ = ["collect_attention", "is_recording", "record_attention"]

_RECORDING: contextvars.ContextVar[bool] = contextvars.ContextVar("attnlab_record_attention", default=False)


@contextmanager
def record_attention(enabled: bool = True) -> Iterator[None]:
    """Within this block every attnlab attention module keeps its weights in ``.attn_weights``."""
    token = _RECORDING.set(bool(enabled))
    try:
        yield
    finally:
        _RECORDING.reset(token)


def is_recording() -> bool:
    """True inside :func:`record_attention`."""
    return _RECORDING.get()


def collect_attention(model: nn.Module) -> dict[str, Tensor]:
    """The last recorded weights of every attention module in ``model``, by module name.

    Returns:
        ``{name: weights [B, H, T, S]}`` in module order, for the modules that have
        recorded something (names as in ``model.named_modules()``; the model itself is ``''``).
    """
    found = {}
    for name, module in model.named_modules():
        weights = getattr(module, "attn_weights", None)
        if isinstance(weights, Tensor):
            found[name] = weights
    return found
