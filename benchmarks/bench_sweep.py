"""Benchmark: the default ``attnlab compare`` sweep at ``--jobs 1``, ``--jobs 2`` and on Ray (``--ray local``).

Same settings, same process, one after another: the sweep in this process (one model
after another), then in 2 local worker processes, then as Ray tasks on a private
Ray instance started here. The records must be identical (each model computes on one
thread wherever it runs); the figure is the wall time of each, and the speed-up of
``--jobs 2`` over ``--jobs 1``. Target on a 2-core machine: >= 1.7x. Ray's overhead
per task is reported as (Ray's time - ``--jobs 2``'s) / models, with as many Ray CPUs.

The default sweep (7 encodings x 3 seeds, reverse, 12 epochs) takes several minutes
per mode; ``--quick`` runs ``attnlab compare --quick``'s settings instead.

Run: ``python benchmarks/bench_sweep.py [--quick] [--no-ray]``.
"""

from __future__ import annotations

import argparse
import time

from harness import write_result


def main(argv: list[str] | None = None) -> dict:
    from attnlab.labs.lengths.compare import run_compare
    from attnlab.labs.lengths.config import QUICK, CompareConfig
    from attnlab.labs.sweep import connect_ray, cpu_count

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="attnlab compare --quick's settings")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray measurement")
    args = parser.parse_args(argv)
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
