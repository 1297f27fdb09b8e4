"""The dense path's ``[B, H, T, S]`` scores, refused before they are allocated when they cannot fit.

The dense path (:mod:`attnlab.attention.backends.choose`) forms a score-sized tensor whenever
there is a term to add or weights to return: a scheme's bias broadcast to the batch, the
weights. At a length of 60,000 that is tens of gigabytes, which torch's allocator would try
for, and fail late (or the machine would swap). :func:`check_dense_scores` compares
:func:`~attnlab.attention.backends.auto_rule.dense_bytes` with the memory the run plans for
(:mod:`attnlab._limits`: ``ATTNLAB_MEMORY_BUDGET``, else what the machine, its cgroup and the
address-space limit leave; a CUDA device's own free memory there) and names the way out, the
chunked path, whose memory grows as the length.

It reads the call's sizes alone (never the values), and not inside a ``torch.compile`` trace,
where it would be a graph break: a compiled model is called eagerly first, at its sizes.
"""

from __future__ import annotations

import torch

from attnlab._limits import ALWAYS_FITS, check_tensor, memory_budget
from attnlab.attention.backends.auto_rule import dense_bytes
from attnlab.encodings.scheme import bias_dtype

__all__ = ["check_dense_scores"]


def check_dense_scores(*, backend: str, batch: int, heads: int, T: int, S: int, dtype: torch.dtype,
                       device: torch.device, chunked_serves: bool = True) -> None:
    """Refuse a dense call whose ``[B, H, T, S]`` scores (in :func:`bias_dtype` of ``dtype``) cannot fit.

    Args:
        backend: the ``backend`` the caller asked for, for the message.
        batch, heads: ``B`` and ``H`` (query heads).
        T: queries; S: keys.
        dtype: the queries' dtype.
        device: where the scores would be allocated (CUDA: its free memory counts).
        chunked_serves: the chunked path could serve the call (not when the weights are wanted or
            the scheme draws positions per call): the message suggests it, else a shorter length.

    Raises:
        ValueError: naming ``backend``, the length ``T x S``, the bytes and the memory available,
            and suggesting ``backend='chunked'`` (or ``'auto'``).
    """
    if torch.compiler.is_compiling():
        return
    n_bytes = dense_bytes(batch=batch, heads=heads, T=T, S=S, dtype=dtype)
    if n_bytes <= ALWAYS_FITS and memory_budget() is None:
        return
    compute = str(bias_dtype(dtype)).removeprefix("torch.")
    try:
        check_tensor({"B": batch, "H": heads, "T": T, "S": S}, f"the dense path's {compute} scores",
                     itemsize=bias_dtype(dtype).itemsize, device=device)
    except ValueError as err:
        way_out = ("use backend='chunked', whose memory grows as L (or backend='auto', which takes it when the "
                   "scores do not fit)") if chunked_serves else \
            ("only the dense path serves this call (it returns the weights, or its scheme draws positions at "
             "every call): use shorter sequences or a smaller batch")
        raise ValueError(f"backend={backend!r} at length L = {T} queries x {S} keys: {err}; {way_out}") from None
