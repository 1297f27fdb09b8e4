"""How many intra-op threads a model computes on: chosen by the work of one step, the one rule attnlab uses.

torch's default is one thread per core, whatever the model. For the labs'
models a step is a few hundred small kernels of a few microseconds each, and a
second thread only adds the cost of waking it and waiting for it; on a shared
machine each kernel also waits for a core, and a step can slow down a hundredfold.

The rule (:func:`threads_for`): one thread while a step's work, ``parameters x
tokens`` (tokens = batch x sequence length: about a sixth of the step's
floating-point operations), is below :data:`TWO_THREADS_FROM` (1e11); from there on,
every core this process may run on. It is applied by ``attnlab train``,
``predict``, ``plot`` (the run figures) and ``compare``'s runs, wherever they run
(:func:`intra_op_threads`); ``--threads N`` overrides it.

Why 1e11: it is where a second thread first paid on a loaded 2-core machine; on a
quiet one it pays from about 5e7, but wins at most 2x there, while below 1e11 it
lost up to 50x on a loaded one (``benchmarks/bench_threads.py``; BENCHMARKS.md,
"Threads"). Being a function of the work and the core count only, the choice never
depends on the machine's load or on how many runs share it, so ``compare --jobs N``
keeps giving ``--jobs 1``'s records.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from attnlab._validate import check_int

__all__ = ["MAX_THREADS", "TWO_THREADS_FROM", "cores", "fit_threads", "intra_op_threads", "loader_tokens", "step_work",
           "threads_for"]

#: work per step (parameters x tokens) from which the cores are used: where a second thread first pays on a
#: loaded machine (see the module docstring)
TWO_THREADS_FROM = 10**11

#: the most intra-op threads attnlab asks torch for: far past any machine's cores, and refused above, since
#: torch.set_num_threads takes a C int and a million threads fail in the OpenMP runtime with a SystemError
MAX_THREADS = 1024


def cores() -> int:
    """The cores this process may run on (its affinity, where the system tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def step_work(model: nn.Module, *, tokens: int) -> int:
    """The work of one step of ``model`` on ``tokens`` tokens (batch x sequence length): ``parameters x tokens``.

    Raises:
        TypeError / ValueError: if ``model`` is not a module or ``tokens`` is not an int of at least 1.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    tokens = check_int("tokens", tokens, minimum=1)
    return sum(p.numel() for p in model.parameters()) * tokens


def threads_for(*, work: int, available: int | None = None) -> int:
    """The intra-op threads for a step of ``work`` (see :func:`step_work`): the rule of this module.

    One thread below :data:`TWO_THREADS_FROM`; from it on, all ``available`` cores.

    Args:
        work: parameters x tokens of one step, at least 0.
        available: the cores to use from the boundary on; None: :func:`cores`.

    Raises:
        TypeError / ValueError: naming the argument, for a negative ``work`` or ``available`` below 1.
    """
    work = check_int("work", work, minimum=0)
    available = cores() if available is None else check_int("available", available, minimum=1)
    return 1 if work < TWO_THREADS_FROM else available


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Run the block on ``threads`` intra-op threads; torch's own count comes back after.

    Raises:
        TypeError / ValueError: if ``threads`` is not an int from 1 to :data:`MAX_THREADS`.
    """
    threads = check_int("threads", threads, minimum=1, maximum=MAX_THREADS)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def loader_tokens(loader: Any) -> int:
    """Tokens (samples x positions) in one batch of ``loader``, read without drawing a batch: a ``DataLoader``'s
    ``batch_size`` times the first dimension of its dataset's first example's first tensor (1 if it has none).

    Nothing is iterated: a loader that shuffles from torch's global generator draws its order when a pass
    starts, and the training's numbers must not depend on whether threads were chosen.
    """
    batch = getattr(loader, "batch_size", None)
    dataset = getattr(loader, "dataset", None)
    length = 1
    try:
        first = dataset[0] if dataset is not None else None
        while isinstance(first, (tuple, list)) and first:
            first = first[0]
        if isinstance(first, torch.Tensor) and first.ndim >= 1:
            length = int(first.shape[0])
    except Exception:  # a dataset that cannot be indexed (iterable, or lazy): its length is unknown
        length = 1
    return max(1, int(batch) if isinstance(batch, int) else 1) * max(1, length)


def fit_threads(model: nn.Module, loader: Any, device: torch.device, threads: int | None) -> int | None:
    """The intra-op threads :func:`attnlab.training.fit` trains on: ``threads`` when given, else this module's
    rule for a step of ``model`` on one batch of ``loader`` (:func:`loader_tokens`); None on an accelerator,
    where torch's own count stays (its CPU threads only feed the device).
    """
    if threads is not None:
        return check_int("threads", threads, minimum=1, maximum=MAX_THREADS)
    if device.type != "cpu":
        return None
    return threads_for(work=step_work(model, tokens=loader_tokens(loader)))
