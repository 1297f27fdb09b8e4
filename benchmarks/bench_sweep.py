"""Benchmark: the default ``attnlab compare`` sweep at ``--jobs 1``, ``--jobs 2`` and on Ray (``--ray local``).

Same settings, same process, one after another: the sweep in this process (one model
after another), then in 2 local worker processes, then as Ray tasks on a private
Ray instance started here. The records must be identical (each model computes on one
thread wherever it runs); the figure is the wall time of each, and the speed-up of
``--jobs 2`` over ``--jobs 1``. Target on a 2-core machine: >= 1.7x. Ray's overhead
per task is reported as (Ray's time - ``--jobs 2``'s) / models, with as many Ray CPUs.

The default sweep (7 encodings x 3 seeds, reverse, 12 epochs) takes several minutes
per mode; ``--quick`` runs ``attnlab compare --quick``'s settings instead.

Run: ``python benchmarks/bench_sweep.py [--quick] [--no-ray]``; writes ``sweep.json`` in
``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).

Against another commit (``--before SRC``, the ``src`` of a checkout): each sweep runs in a
fresh process on one side's source, ``before, now, before, now, ...`` (``--repeats``),
at ``--jobs 2``; ``--jobs-1`` adds one sweep at ``--jobs 1`` on this side. It reports every
sweep's wall time and ``/proc/loadavg`` when it started, the speed-up of the medians, and
whether the records are identical (SHA-256 of the records) on both sides and at both
``--jobs``. ``--settings ruoss2023`` trains the ruoss2023 preset's settings as the other
commit defines them (``--preset-from now``: as this one does; a preset's settings change
between commits, and both sides must train the same thing): ``python
benchmarks/bench_sweep.py --before /path/to/old/src --settings default``; it writes
``sweep_vs_before_<settings>.json`` in ``results/investigations/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import write_result

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"


def child(settings_json: str, jobs: int) -> None:
    """In a fresh process: one whole sweep on the attnlab of ``PYTHONPATH``; prints its time and records' hash."""
    from attnlab.labs import CompareConfig, run_compare  # both layouts export them here

    config = CompareConfig(**json.loads(settings_json))
    start = time.perf_counter()
    result = run_compare(config, progress=False, device="cpu", jobs=jobs)
    seconds = time.perf_counter() - start
    digest = hashlib.sha256(json.dumps(result.records, sort_keys=True).encode()).hexdigest()
    print(json.dumps({"seconds": seconds, "records_sha256": digest,
                      "models": len(config.encodings) * config.n_seeds}))


def _sweep(src: str, settings: dict, jobs: int, side: str) -> dict:
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    command = [sys.executable, str(HERE), "--child", json.dumps(settings), "--jobs", str(jobs)]
    out = subprocess.run(command, env={**os.environ, "PYTHONPATH": src}, check=True, capture_output=True,
                         text=True).stdout
    run = {**json.loads(out.strip().splitlines()[-1]), "side": side, "jobs": jobs, "loadavg_1min": load}
    print(f"{side} --jobs {jobs}: {run['seconds']:.1f} s (load {load:.1f})", flush=True)
    return run


def against(args: argparse.Namespace) -> dict:
    """Whole sweeps at ``args.before`` and ``args.now``, interleaved; see the module's doc."""
    from bench_train_one import settings

    chosen = "quick" if args.quick else args.settings
    resolved = settings(chosen, epochs=None, preset_src=args.before if args.preset_from == "before" else args.now)
    runs = []
    for _ in range(args.repeats):
        runs.append(_sweep(args.before, resolved, 2, "before"))
        runs.append(_sweep(args.now, resolved, 2, "now"))
    if args.jobs_1:
        runs.append(_sweep(args.now, resolved, 1, "now"))
    before = statistics.median(r["seconds"] for r in runs if r["side"] == "before")
    now = statistics.median(r["seconds"] for r in runs if r["side"] == "now" and r["jobs"] == 2)
    payload = {
        "settings": chosen, "resolved_settings": resolved, "before": args.before, "now": args.now,
        "models": runs[0]["models"], "runs": runs, "median_seconds_before_jobs2": before,
        "median_seconds_now_jobs2": now, "speedup": before / now,
        "records_identical": len({r["records_sha256"] for r in runs}) == 1,
    }
    write_result(f"sweep_vs_before_{chosen}", payload)
    print(f"{chosen}: {before:.1f} s -> {now:.1f} s at --jobs 2 ({payload['speedup']:.2f}x); records identical "
          f"(both sides, every --jobs): {payload['records_identical']}")
    return payload


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="attnlab compare --quick's settings")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray measurement")
    parser.add_argument("--before", help="the other commit's src folder: compare whole sweeps with it")
    parser.add_argument("--now", default=str(SRC), help="this side's src folder (default: this checkout's)")
    parser.add_argument("--settings", default="default", choices=("default", "quick", "ruoss2023"))
    parser.add_argument("--preset-from", default="before", choices=("before", "now"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--jobs-1", action="store_true", help="with --before: one more sweep at --jobs 1, now")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child, args.jobs)
        return {}
    if args.before:
        return against(args)
    from attnlab.labs.lengths.compare import run_compare
    from attnlab.labs.lengths.config import QUICK, CompareConfig
    from attnlab.labs.lengths.sweep import connect_ray, cpu_count

    config = CompareConfig(**(QUICK if args.quick else {}))
    jobs = min(2, cpu_count())
    timings, records = {}, {}
    modes = [("jobs 1", {}), (f"jobs {jobs}", {"jobs": jobs})]
    if not args.no_ray:
        modes.append(("ray local", {"ray_address": "local"}))
    for name, where in modes:
        if "ray_address" in where:
            connect_ray("local")  # Ray's start-up is not part of the sweep's time
        start = time.perf_counter()
        result = run_compare(config, progress=False, device="cpu", **where)
        timings[name] = time.perf_counter() - start
        records[name] = result.records
        print(f"{name}: {timings[name]:.1f} s", flush=True)
    same = all(r == records["jobs 1"] for r in records.values())
    n_models = len(config.runs())
    payload = {
        "settings": "quick" if args.quick else "default", "models": n_models, "cores": cpu_count(),
        "seconds": timings, "records_identical": same,
        "speedup_jobs": timings["jobs 1"] / timings[f"jobs {jobs}"], "target_speedup": 1.7,
    }
    if "ray local" in timings:
        payload["ray_overhead_per_task_s"] = (timings["ray local"] - timings[f"jobs {jobs}"]) / n_models
    write_result("sweep", payload)
    print(payload)
    return payload


def summary(result: dict) -> list[tuple[str, str, str, str, str, bool | None]]:
    """Rows for ``benchmarks/run.py``'s table: the speed-up of local workers, and Ray's overhead per task."""
    seconds = result["seconds"]
    jobs = next(name for name in seconds if name.startswith("jobs ") and name != "jobs 1")
    rows: list[tuple[str, str, str, str, str, bool | None]] = [
        (f"compare sweep, {jobs} vs jobs 1 ({result['models']} models)", f"{seconds[jobs]:.0f} s",
         f"{seconds['jobs 1']:.0f} s", f"{result['speedup_jobs']:.2f}x", ">= 1.7x",
         result["speedup_jobs"] >= 1.7 and result["records_identical"])]
    if "ray_overhead_per_task_s" in result:
        rows.append(("compare sweep on Ray (local), overhead per task", f"{seconds['ray local']:.0f} s",
                     f"{seconds[jobs]:.0f} s", f"{result['ray_overhead_per_task_s']:+.2f} s/task", "", None))
    return rows


if __name__ == "__main__":
    main()
