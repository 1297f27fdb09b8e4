"""Recording attention weights only when someone asks for them.

The fused attention kernels never form the ``[B, H, T, S]`` weight matrix, and
that is where their speed and their linear memory come from. So attnlab's
modules compute weights only when asked: per call with ``need_weights=True``,
or for everything run inside ``with record_attention():``.

Each ``record_attention()`` block has its own store of weights, by module, held
in a :mod:`contextvars` variable: every thread (and every asyncio task) sees
only the weights recorded by its own calls, so two threads that run one model
at once never get each other's. :func:`collect_attention` called inside the
block reads that store. The modules also keep their last weights in
``.attn_weights`` (``[B, H, T, S]``, detached), the labs' stateful way, which is
what :func:`collect_attention` reads outside a block; those attributes are the
last writer's, whichever thread it was, so read them only from single-threaded code.

Example:
    >>> import torch
    >>> from attnlab.attention import MultiHeadAttention
    >>> mha = MultiHeadAttention(2, 4)
    >>> x = torch.randn(1, 3, 4)
    >>> with record_attention():
    ...     _ = mha(x)
    ...     {name: list(w.shape) for name, w in collect_attention(mha).items()}
    {'': [1, 2, 3, 3]}
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from attnlab._validate import check_bool

__all__ = ["collect_attention", "is_recording", "record", "record_attention"]

# The weights recorded in the innermost record_attention() block of this context, by module; None outside.
_STORE: contextvars.ContextVar[dict[nn.Module, Tensor] | None] = contextvars.ContextVar(
    "attnlab_recorded_attention", default=None
)


@contextmanager
def record_attention(enabled: bool = True) -> Iterator[None]:
    """Within this block every attnlab attention module records its weights ``[B, H, T, S]``.

    The block's weights are this context's (this thread's) only: read them with
    :func:`collect_attention` inside the block. The modules' ``.attn_weights`` are
    set too, for the labs' code that reads them afterwards (not thread-safe).
    ``enabled=False`` turns recording off inside an outer block.
    """
    token = _STORE.set({} if check_bool("enabled", enabled) else None)
    try:
        yield
    finally:
        _STORE.reset(token)


def is_recording() -> bool:
    """True inside :func:`record_attention`; always False in code torch.compile or torch.export traces.

    A recording is Python objects kept per call, which a compiled graph cannot keep (and dynamo
    cannot read a context variable): a compiled model records nothing, so draw the weights from
    the model run uncompiled.
    """
    if torch.compiler.is_compiling():
        return False
    return _STORE.get() is not None


def record(module: nn.Module, weights: Tensor) -> None:
    """Keep ``weights [B, H, T, S]`` (detached) as ``module``'s in this context's block; nothing outside one."""
    store = _STORE.get()
    if store is not None:
        store[module] = weights


def collect_attention(model: nn.Module) -> dict[str, Tensor]:
    """The recorded weights of every attention module in ``model``, by module name.

    Inside a :func:`record_attention` block: the weights this block recorded (in
    this thread), so concurrent calls on the same model never mix. Outside: the
    last weights the modules kept in ``.attn_weights`` (the labs' stateful way).

    Returns:
        ``{name: weights [B, H, T, S]}`` in module order, for the modules that have
        recorded something (names as in ``model.named_modules()``; the model itself is ``''``).
    """
    store = _STORE.get()
    found = {}
    for name, module in model.named_modules():
        weights = store.get(module) if store is not None else getattr(module, "attn_weights", None)
        if isinstance(weights, Tensor):
            found[name] = weights
    return found
