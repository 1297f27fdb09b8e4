"""Timing helpers and the result files shared by the benchmark scripts.

The machines these run on are shared and noisy, so every comparison is a ratio
between two implementations measured in the same process, interleaved A/B/A/B
so that a burst of load from elsewhere hits both sides alike. Each figure is
reported as min / median / max over the repeats; the ratio uses medians.

Where a result goes: :func:`write_result` writes into ``results/investigations/``
(a script a person runs directly, with whatever flags), unless the caller is
inside :func:`writing_to`: ``benchmarks/run.py`` (``make bench``) sends every
benchmark it runs to ``results/latest/`` that way. Each file names the script
that wrote it and the commit it was run on.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
LATEST = RESULTS / "latest"  # what `make bench` produced, rewritten whole by it
INVESTIGATIONS = RESULTS / "investigations"  # direct runs: one-off comparisons, loaded/quiet variants

_destination = INVESTIGATIONS


def interleaved(
    fns: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1,
    per_sample: int | dict[str, int] = 1,
) -> dict:
    """Time each callable ``repeats`` times, round-robin; return per-name min/median/max seconds.

    Each timed sample calls a function ``per_sample`` times (so short calls stay well
    above the timer's noise) and the figures are per call. ``per_sample`` may be a
    dict giving each name its own count (names left out get 1).
    """
    counts = per_sample if isinstance(per_sample, dict) else dict.fromkeys(fns, per_sample)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            n = counts.get(name, 1)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append((time.perf_counter() - t0) / n)
    return {
        name: {"min": min(ts), "median": statistics.median(ts), "max": max(ts), "repeats": len(ts)}
        for name, ts in times.items()
    }


def per_unit(timings: dict, units: int) -> dict:
    """Divide every figure of :func:`interleaved`'s result by ``units`` (e.g. epochs per call)."""
    return {name: {k: (v / units if k != "repeats" else v) for k, v in t.items()} for name, t in timings.items()}


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak_rss() -> int:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux); return that RSS in kB.

    ``ru_maxrss`` would not do: Linux carries it over from the parent across fork + exec.
    """
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kb("VmRSS")


def peak_rss_kb() -> int:
    """This process's peak RSS (VmHWM) in kB since start or the last :func:`reset_peak_rss`."""
    return _status_kb("VmHWM")


def _git(*args: str) -> str | None:
    """``git args`` in the repository's root, its output stripped; None where git or the repository is missing."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> dict:
    """The commit the code ran at (``git rev-parse HEAD``) and whether the tree differed from it.

    ``uncommitted_changes`` counts modified and untracked files outside ``benchmarks/results/``:
    the result files are left out because ``make bench`` changes them itself as it goes, so
    every benchmark after the first would otherwise see a changed tree. Both are None outside
    a git checkout.
    """
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--", ".", ":(exclude)benchmarks/results") if sha else None
    return {"commit": sha, "uncommitted_changes": None if status is None else bool(status)}


def machine() -> dict:
    """What the numbers were taken on, and at which commit."""
    return {
        **commit(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cuda": torch.cuda.is_available(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


@contextmanager
def writing_to(folder: Path) -> Iterator[None]:
    """Send every :func:`write_result` inside the block to ``folder`` (``benchmarks/run.py``: ``results/latest/``)."""
    global _destination
    before, _destination = _destination, Path(folder)
    try:
        yield
    finally:
        _destination = before


def destination() -> Path:
    """The folder :func:`write_result` writes into now: ``results/investigations/`` unless inside :func:`writing_to`."""
    return _destination


def write_result(name: str, payload: dict) -> Path:
    """Write ``<name>.json`` into :func:`destination` atomically (temp file, then rename); return its path.

    The file holds ``benchmark`` (the name), ``script`` (the file of the module that called this,
    relative to the repository; None from an interactive session: ``run.py --summary`` summarises a
    file with that script's ``summary``), ``machine`` (with the commit) and the payload.
    """
    caller = sys._getframe(1).f_globals.get("__file__")  # None from an interactive session
    script = None
    if caller is not None:
        source = Path(caller).resolve()
        script = source.relative_to(ROOT).as_posix() if source.is_relative_to(ROOT) else source.name
    folder = _destination
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    doc = {"benchmark": name, "script": script, "machine": machine(), **payload}
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path
