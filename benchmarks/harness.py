"""Timing helpers shared by the benchmark scripts.

The machines these run on are shared and noisy, so every comparison is a ratio
between two implementations measured in the same process, interleaved A/B/A/B
so that a burst of load from elsewhere hits both sides alike. Each figure is
reported as min / median / max over the repeats; the ratio uses medians.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


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


def machine() -> dict:
    """What the numbers were taken on."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cuda": torch.cuda.is_available(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_result(name: str, payload: dict) -> Path:
    """Write ``results/<name>.json`` atomically (temp file, then rename)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {"benchmark": name, "machine": machine(), **payload}
    fd, tmp = tempfile.mkstemp(dir=RESULTS, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path
