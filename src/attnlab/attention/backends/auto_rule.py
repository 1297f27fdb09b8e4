"""The CPU rule of ``backend="auto"``: the dense path while its scores fit a byte budget and it is the faster.

The rule is stated in :mod:`attnlab.attention.backends.choose` (rule 3), the
timings behind it in BENCHMARKS.md ("Dense or chunked attention on the CPU"); here are its constants and its
two functions, pure arithmetic on the call's sizes (no timing, no free memory),
so the path a call takes is the same on every machine with the same thread count.
"""

from __future__ import annotations

import torch

from attnlab._validate import check_int
from attnlab.encodings.scheme import bias_dtype

__all__ = ["CUDA_DENSE_SCORES", "DENSE_MEMORY_BUDGET", "DENSE_SCORES", "DENSE_SCORES_THREADED", "dense_bytes",
           "dense_fits"]

# Scores per head past which the chunked path is faster than the dense one on the CPU, on one thread
# and on more (BENCHMARKS.md, "Dense or chunked attention on the CPU").
DENSE_SCORES = 2**16
DENSE_SCORES_THREADED = 2**22
# Bytes of the dense path's [B, H, T, S] scores that backend="auto" allows on the CPU: a fixed budget.
DENSE_MEMORY_BUDGET = 2**30
# On CUDA, the count FlexAttention takes over from (not timed on a GPU).
CUDA_DENSE_SCORES = 2**20


def dense_bytes(*, batch: int, heads: int, T: int, S: int, dtype: torch.dtype) -> int:
    """Bytes of the ``[B, H, T, S]`` scores the dense path holds at least once, in the compute dtype.

    The term broadcast to the batch once a mask is added, or the weights: ``B * H * T * S``
    times the size of the dtype scores are computed in (float32 for half-precision inputs).

    Example:
        >>> dense_bytes(batch=4, heads=8, T=2048, S=2048, dtype=torch.float32) // 2**20  # MiB
        512
    """
    return batch * heads * T * S * bias_dtype(dtype).itemsize


def dense_fits(*, batch: int, heads: int, T: int, S: int, dtype: torch.dtype, threads: int = 1,
               memory_budget: int = DENSE_MEMORY_BUDGET) -> bool:
    """The CPU rule of ``backend="auto"`` (module docstring, rule 3): True for the dense path, False for chunked.

    Args:
        batch, heads: ``B`` and ``H`` (query heads).
        T: queries; S: keys.
        dtype: the queries' dtype.
        threads: torch's intra-op threads (:func:`torch.get_num_threads`): the crossover differs.
        memory_budget: the most bytes of :func:`dense_bytes` allowed (:data:`DENSE_MEMORY_BUDGET`).

    Example:
        >>> dense_fits(batch=4, heads=8, T=256, S=256, dtype=torch.float32)  # one thread, at the crossover
        True
        >>> dense_fits(batch=1, heads=8, T=512, S=512, dtype=torch.float32)  # one thread, past it
        False
        >>> dense_fits(batch=4, heads=8, T=2048, S=2048, dtype=torch.float32, threads=2)  # 512 MiB
        True
        >>> dense_fits(batch=16, heads=8, T=1024, S=1024, dtype=torch.float32, threads=2)  # 512 MiB: fits
        True
        >>> dense_fits(batch=64, heads=8, T=1024, S=1024, dtype=torch.float32, threads=2)  # 2 GiB: over budget
        False
    """
    memory_budget = check_int("memory_budget", memory_budget, minimum=0)
    threads = check_int("threads", threads, minimum=1)
    crossover = DENSE_SCORES if threads == 1 else DENSE_SCORES_THREADED
    return T * S <= crossover and dense_bytes(batch=batch, heads=heads, T=T, S=S, dtype=dtype) <= memory_budget
