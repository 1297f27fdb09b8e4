"""Up-front resource limits: a size that cannot fit is refused before anything is allocated.

A tensor too big for the machine otherwise fails late and loudly: torch's
allocator raises a RuntimeError with a C++ backtrace, numpy a MemoryError, or,
worse, the process grows until the machine swaps. Each estimate here is made
from the sizes alone, before any work, and compared with the memory a run plans for:

* ``ATTNLAB_MEMORY_BUDGET``, when it is set (bytes, or with a unit: ``"4G"``,
  ``"512M"``), in place of what the machine has free, larger or smaller: a shared
  machine's fair share, a cluster node's allocation, and what the test suite sets
  (``tests/conftest.py``) so that no outcome depends on the machine's free memory;
* otherwise what this process may still use now: the least of the machine's
  available memory (Linux's ``MemAvailable``: free memory plus the page cache it
  can reclaim), what its control group (a container's memory limit, cgroup v2's
  ``memory.max`` or v1's ``memory.limit_in_bytes``) leaves, and what its address
  space limit (``RLIMIT_AS``, ``ulimit -v``) leaves beyond what it maps already.

A budget above the machine's free memory is taken at its word: a run it allows may
then fail late, as it would without these checks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

__all__ = ["BUDGET_VARIABLE", "available_memory", "check_memory", "check_tensor", "count_parameters", "format_bytes",
           "memory_budget", "memory_limits"]

#: the environment variable that sets the memory a run plans for, in place of the machine's free memory
BUDGET_VARIABLE = "ATTNLAB_MEMORY_BUDGET"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

#: sizes below this always fit (no need to read /proc on every small model or table)
ALWAYS_FITS = 256 * 2**20


def memory_budget() -> int | None:
    """The bytes ``ATTNLAB_MEMORY_BUDGET`` allows (``"4G"``, ``"512M"``, ``"1000000"``), or None when unset.

    Raises:
        ValueError: naming the variable, for a value that is not a positive size.
    """
    text = os.environ.get(BUDGET_VARIABLE, "").strip()
    if not text:
        return None
    number, unit = text.rstrip("KMGTkmgtBb"), text[len(text.rstrip("KMGTkmgtBb")):].upper().rstrip("B")
    try:
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"{BUDGET_VARIABLE} must be a positive size such as 4G or 512M, got {text!r}")
    return int(value)


def available_memory() -> int:
    """Bytes of memory a run plans for: ``ATTNLAB_MEMORY_BUDGET`` when set, else what this process may use now.

    Without a budget, the least of the machine's available memory, its control group's
    remaining limit and its address-space limit's remaining room (:func:`memory_limits`).
    The budget replaces them, so that a run's refusals do not depend on the machine's load.
    """
    budget = memory_budget()
    return _system_available() if budget is None else budget


#: where the control groups are mounted (cgroup v2 at the root; v1 under memory/)
CGROUP = Path("/sys/fs/cgroup")


def memory_limits() -> dict[str, int]:
    """Bytes this process may still use by each limit that applies, named as :func:`check_memory` says them.

    ``"this machine has available"`` (``MemAvailable``; elsewhere the free or all physical pages);
    ``"its cgroup's memory limit leaves"`` (``memory.max - memory.current``, or v1's
    ``limit_in_bytes - usage_in_bytes``), where a limit is set; ``"its address-space limit
    (RLIMIT_AS) leaves"`` (the soft limit less ``VmSize``), where one is set.
    """
    limits = {"this machine has available": _machine_available()}
    for limit, usage in (("memory.max", "memory.current"),
                         ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            text = (CGROUP / limit).read_text().strip()
            if text != "max" and int(text) < 2**60:  # v1 writes "no limit" as a number near 2**63
                limits["its cgroup's memory limit leaves"] = max(int(text) - int((CGROUP / usage).read_text()), 0)
                break
        except (OSError, ValueError):
            continue
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limits["its address-space limit (RLIMIT_AS) leaves"] = max(soft - _mapped(), 0)
    except (ImportError, OSError, ValueError):
        pass
    return limits


def _mapped() -> int:
    """Bytes of address space this process maps now (``VmSize``); 0 where the system does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _system_available() -> int:
    return min(memory_limits().values())


def _machine_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def format_bytes(n: float) -> str:
    """``n`` bytes for people: ``'40.0 GB'``, ``'312 MB'``, ``'7.3e+06 TB'``."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            value = n / size
            return f"{value:.3g} {unit}" if value < 1e6 else f"{value:.2g} {unit}"
    return f"{n / 1e3:.3g} kB"


def check_memory(what: str | Callable[[], str], n_bytes: int) -> None:
    """Refuse ``n_bytes`` if they exceed the memory available now.

    Args:
        what: the sizes responsible, named as the caller's arguments with their
            values (``"max_len 100000 x d_model 100000"``) and what they make
            (``"the float32 table"``), e.g. ``"n_train 10**12: the squares"``; or a function
            that gives it, called only to refuse (code torch.compile traces must not format a
            size it traces symbolically: that fixes the size the graph holds for).
        n_bytes: the estimate.

    Raises:
        ValueError: ``"{what} need(s) 40.0 GB, more than the 21.3 GB available"``.
    """
    if n_bytes <= ALWAYS_FITS and memory_budget() is None:
        return
    available = available_memory()
    if n_bytes > available:
        what = what if isinstance(what, str) else what()
        raise ValueError(f"{what} would need {format_bytes(n_bytes)}, more than the {format_bytes(available)} "
                         f"{_bound_by(available)}")


def _bound_by(available: int) -> str:
    """What sets ``available``: the budget, or the limit (:func:`memory_limits`) that binds."""
    if memory_budget() == available:
        return f"available ({BUDGET_VARIABLE}={os.environ[BUDGET_VARIABLE].strip()})"
    limits = memory_limits()
    return next((name for name, value in limits.items() if value == available), "this machine has available")


def check_tensor(sizes: Mapping[str, int], what: str, *, itemsize: int = 4, copies: int = 1,
                 device: torch.device | str | None = None) -> None:
    """Refuse a tensor (or ``copies`` of it) of the named sizes before it is allocated, if it cannot fit.

    The one check every function that allocates from a size its caller gives makes first
    (tables, masks, embeddings, decoding caches): the message names each size as the
    caller's argument, with its value, so a raw allocator error never reaches the user.

    Args:
        sizes: the caller's arguments that set the shape, with their values, in order
            (``{"max_len": 10**12, "d_model": 8}``); their product is the number of elements.
        what: what the tensor is (``"the float32 table"``).
        itemsize: bytes per element.
        copies: how many such tensors live at once (a float64 scratch, gradients, ...).
        device: where it is allocated. A CUDA device's own free memory is what counts there;
            anything else (the CPU, ``None``, ``meta``) is held to :func:`available_memory`.

    Raises:
        ValueError: ``"max_len 1000000000000 x d_model 8: the float32 table would need 32 TB, more than ..."``.

    Example:
        >>> try:
        ...     check_tensor({"n_queries": 10**12, "n_keys": 10**12}, "the bool mask", itemsize=1)
        ... except ValueError as err:
        ...     print(str(err).split(",")[0])
        n_queries 1000000000000 x n_keys 1000000000000: the bool mask would need 1e+12 TB
    """
    n_bytes = itemsize * copies
    for value in sizes.values():
        n_bytes *= max(int(value), 0)
    named = " x ".join(f"{name} {value}" for name, value in sizes.items())
    if device is not None and torch.device(device).type == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        if n_bytes > free:
            raise ValueError(f"{named}: {what} would need {format_bytes(n_bytes)}, more than the "
                             f"{format_bytes(free)} free on {device}")
        return
    check_memory(f"{named}: {what}", n_bytes)


#: a model that cannot have more parameters than this is built for real to be counted (a few milliseconds)
_BUILD_FOR_REAL = 4_000_000


def count_parameters(build: Callable[[], nn.Module], *, bound: int) -> int:
    """How many parameters the model ``build()`` makes, without building one that could not fit.

    ``bound`` is an upper estimate of its parameters from its sizes. Below
    4,000,000 the model is built for real, on a copy of torch's random state, so no
    stream moves; above, on the meta device, which allocates nothing. The meta
    device is not used for every model because its first use in a process imports
    a second's worth of torch (TorchDynamo), on every ``attnlab train``.
    """
    if bound <= _BUILD_FOR_REAL:
        with torch.random.fork_rng(devices=[]):
            return sum(p.numel() for p in build().parameters())
    with torch.device("meta"):
        return sum(p.numel() for p in build().parameters())
