"""Benchmark: one model of ``attnlab compare`` at another commit and now, interleaved, in separate processes.

The length lab's throughput is a model's training (``train_one``: build, train, score).
Each sample trains the same ``(encoding, seed)`` of the same settings in a fresh Python
process, alternately with the other commit's source (``--before SRC``, the ``src`` of a
checkout, put first on ``PYTHONPATH``) and this one's: ``before, now, before, now, ...``, so
that a burst of load from elsewhere hits both sides alike. A sample reports the CPU time
of the training alone (``time.process_time``: one thread, so the load of other
processes inflates it far less than the wall time) and the wall time, the records'
SHA-256 (equal on both sides: the records are unchanged, bit for bit) and
``/proc/loadavg`` when it started. The speed-up is the ratio of the medians.

Settings: ``default`` (``attnlab compare``'s, ``--epochs`` fewer to keep a sample
short: a step costs the same in every epoch), ``quick`` (``--quick``'s) or ``ruoss2023``
(the preset's: encoder-only, fresh strings, 800 steps).

Run: ``python benchmarks/bench_train_one.py --before /path/to/old/src [--settings default]
[--encodings none,rotary] [--repeats 3] [--epochs 4]``; writes ``train_one_<settings>.json`` in
``results/investigations/``. ``make bench`` leaves it out: it needs ``--before``.
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

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"


def _preset_settings(name: str) -> dict:
    """The settings of preset ``name`` in the attnlab on ``sys.path`` (either layout)."""
    try:
        from attnlab.labs.lengths.presets import preset
    except ModuleNotFoundError:  # before the lab became a package (cefd342)
        from attnlab.labs.presets import preset  # type: ignore[no-redef]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in preset(name).settings.items()}


def settings(name: str, *, epochs: int | None, preset_src: str) -> dict:
    """The comparison's settings (a dict for ``CompareConfig``) that ``name`` stands for.

    A preset's settings are read from the attnlab in ``preset_src`` (a preset's settings
    change between commits; both sides must train the same thing).
    """
    if name == "default":
        return {} if epochs is None else {"epochs": epochs}
    if name == "quick":
        return {"n_seeds": 1, "epochs": 10, "n_train": 2048, "n_test": 128, "lr": 4e-3}  # --quick's, both commits
    if name == "ruoss2023":
        command = [sys.executable, str(HERE), "--print-preset", name]
        out = subprocess.run(command, env={**os.environ, "PYTHONPATH": preset_src}, check=True, capture_output=True,
                             text=True).stdout
        return dict(json.loads(out.strip().splitlines()[-1]))
    raise ValueError(f"settings must be default, quick or ruoss2023, got {name!r}")


def child(args: argparse.Namespace) -> None:
    """In a fresh process: train one model and print its timings and records' hash as one JSON line."""
    import torch

    try:
        from attnlab.labs.lengths.config import CompareConfig
        from attnlab.labs.lengths.train import train_one
    except ModuleNotFoundError:  # before the lab became a package (cefd342)
        from attnlab.labs.lengths import CompareConfig  # type: ignore[no-redef]
        from attnlab.labs.lengths_train import train_one  # type: ignore[no-redef]

    overrides = json.loads(args.settings_json)
    config = CompareConfig(**{**overrides, "encodings": (args.encoding,)})
    try:
        from attnlab.labs.lengths.train import task_sets

        sets = task_sets(config)
    except ImportError:  # before the settings stopped building the data
        sets = config.task_sets() if hasattr(config, "task_sets") else None
    if sets is None:  # cefd342
        from attnlab.data.tasks import make_task_sets

        sets = make_task_sets(config.spec())
    torch.manual_seed(0)  # nothing depends on it (train_one seeds itself); the same start on both sides
    cpu, wall = time.process_time(), time.perf_counter()
    result = train_one(config, sets, args.encoding, args.seed)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    digest = hashlib.sha256(json.dumps(result.records, sort_keys=True).encode()).hexdigest()
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "records_sha256": digest,
                      "steps": config.steps_per_model()}))


def sample(src: str, args: argparse.Namespace, encoding: str) -> dict:
    """One model trained in a fresh process on ``src``'s attnlab, with the load when it started."""
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    env = {**os.environ, "PYTHONPATH": src}
    command = [sys.executable, str(HERE), "--child", "--settings-json", json.dumps(args.resolved),
               "--encoding", encoding, "--seed", str(args.seed)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return {**json.loads(out.strip().splitlines()[-1]), "loadavg_1min": float(load)}


def summarize(samples: list[dict], key: str) -> dict:
    values = [s[key] for s in samples]
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the other commit's src folder (e.g. a worktree's src)")
    parser.add_argument("--now", default=str(SRC), help="this side's src folder (default: this checkout's)")
    parser.add_argument("--settings", default="default", choices=("default", "quick", "ruoss2023"))
    parser.add_argument("--encodings", default=None, help="comma-separated (default: the settings' own)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=None, help="default settings only: fewer epochs per sample")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset-from", default="before", choices=("before", "now"),
                        help="ruoss2023: whose preset settings both sides train (default: the other commit's)")
    parser.add_argument("--encoding", help=argparse.SUPPRESS)
    parser.add_argument("--settings-json", help=argparse.SUPPRESS)
    parser.add_argument("--print-preset", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.print_preset:
        print(json.dumps(_preset_settings(args.print_preset)))
        return {}
    if args.child:
        child(args)
        return {}
    if not args.before:
        parser.error("--before SRC is required (the src folder of the commit to compare with)")
    if args.epochs is not None and args.settings != "default":
        parser.error("--epochs is for the default settings only")
    sys.path.insert(0, str(SRC))
    from attnlab.labs.lengths.config import CompareConfig

    args.resolved = settings(args.settings, epochs=args.epochs,
                             preset_src=args.before if args.preset_from == "before" else args.now)
    config = CompareConfig(**args.resolved)
    encodings = args.encodings.split(",") if args.encodings else list(config.encodings)
    rows, all_before, all_now = {}, [], []
    for encoding in encodings:
        before, now = [], []
        for _ in range(args.repeats):
            before.append(sample(args.before, args, encoding))
            now.append(sample(args.now, args, encoding))
        all_before += before
        all_now += now
        rows[encoding] = {
            "before_cpu_s": summarize(before, "cpu_s"), "now_cpu_s": summarize(now, "cpu_s"),
            "before_wall_s": summarize(before, "wall_s"), "now_wall_s": summarize(now, "wall_s"),
            "speedup_cpu": statistics.median(s["cpu_s"] for s in before) / statistics.median(s["cpu_s"] for s in now),
            "speedup_wall": (statistics.median(s["wall_s"] for s in before)
                             / statistics.median(s["wall_s"] for s in now)),
            "records_identical": len({s["records_sha256"] for s in before + now}) == 1,
            "loadavg_1min": [s["loadavg_1min"] for s in before + now],
        }
        r = rows[encoding]
        print(f"{encoding:18s} cpu {r['before_cpu_s']['median']:6.2f} s -> {r['now_cpu_s']['median']:6.2f} s "
              f"({r['speedup_cpu']:.2f}x)  wall {r['before_wall_s']['median']:6.2f} -> "
              f"{r['now_wall_s']['median']:6.2f} s ({r['speedup_wall']:.2f}x)  same records: "
              f"{r['records_identical']}  load {min(r['loadavg_1min']):.1f}-{max(r['loadavg_1min']):.1f}",
              flush=True)
    sum_before = sum(rows[e]["before_cpu_s"]["median"] for e in encodings)
    sum_now = sum(rows[e]["now_cpu_s"]["median"] for e in encodings)
    payload = {
        "settings": args.settings, "resolved_settings": args.resolved, "epochs": args.epochs, "before": args.before,
        "now": args.now, "repeats": args.repeats,
        "steps_per_model": config.steps_per_model(), "models": rows,
        "speedup_cpu_all": sum_before / sum_now,
        "records_identical_all": all(r["records_identical"] for r in rows.values()),
        "loadavg_1min_range": [min(s["loadavg_1min"] for s in all_before + all_now),
                               max(s["loadavg_1min"] for s in all_before + all_now)],
    }
    from harness import write_result

    write_result(f"train_one_{args.settings}", payload)
    print(f"all: cpu {sum_before:.1f} s -> {sum_now:.1f} s ({payload['speedup_cpu_all']:.2f}x), records identical: "
          f"{payload['records_identical_all']}")
    return payload


if __name__ == "__main__":
    main()
