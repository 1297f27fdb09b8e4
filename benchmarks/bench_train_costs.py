"""Benchmark: where the wall time of a whole ``attnlab train`` goes.

One ``attnlab train --epochs E`` is run in a fresh Python process (the way a user
runs it), and its wall time, from starting the interpreter to the process's
exit, is split into:

* imports: starting Python and importing attnlab's command line and what
  ``attnlab train`` imports before it starts (torch, the lab);
* setup: everything else inside ``attnlab.cli.main`` (parsing, the data, the
  model, the folder's checks and its small files, the test MSE);
* training: :meth:`attnlab.training.Trainer.train`, without its checkpoint and
  metrics callbacks;
* checkpoints: writing ``checkpoint.pt`` (the ``Checkpoint`` callback's hooks and
  ``Trainer.save_checkpoint``);
* metrics: appending the ``metrics.jsonl`` lines;
* figures: ``write_figures`` (the PNGs, with the imports only they need);
* report: ``report.html``;
* exit: from ``main`` returning to the process being gone (interpreter teardown).

The split is made by wrapping those functions with timers in the child process
(a few microseconds per call, against ~10-100 ms per epoch); a plain, unwrapped
``python -m attnlab train`` of the same run is timed alongside (interleaved) to
show the wrapping costs nothing visible. It works on any attnlab tree that has
these names (so on an older commit too: ``PYTHONPATH=/path/to/old/src``).

``--busy N`` starts N busy loops (``while True: pass`` processes) for the
duration, the "loaded machine" of issue 28; ``--threads N`` sets
``OMP_NUM_THREADS`` for the child (what an older attnlab without ``--threads``
can be told), ``--flag-threads N`` passes ``--threads N`` to ``attnlab train``.
The load average (``/proc/loadavg``) is recorded before and after every run.

Run: ``python benchmarks/bench_train_costs.py [--epochs 100] [--repeats 3] [--busy 0] [--name NAME]``;
writes ``benchmarks/results/NAME.json`` (default ``train_costs``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import write_result

# The child: wraps the phases' functions with timers, runs attnlab's command line, prints the times as JSON.
CHILD = r"""
import json, sys, time
T_START = float(sys.argv[1])
import importlib
import attnlab.cli, attnlab.training as training
try:  # the squares lab's runner: a package today, one module at older commits (cefd342)
    run_mod = importlib.import_module("attnlab.labs.squares.train")
except ImportError:
    run_mod = importlib.import_module("attnlab.labs.squares")
import attnlab.training.callbacks as callbacks
T_IMPORTED = time.time()
spent = {"training": 0.0, "checkpoints": 0.0, "metrics": 0.0, "figures": 0.0, "report": 0.0}
inner = {"callbacks": 0.0}

def wrap(owner, name, bucket, *, inside_training=False):
    original = getattr(owner, name, None)
    if original is None:
        return
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t0
            spent[bucket] += dt
            if inside_training:
                inner["callbacks"] += dt
    setattr(owner, name, timed)

for cls_name, bucket in (("Checkpoint", "checkpoints"), ("MetricsFile", "metrics")):
    cls = getattr(callbacks, cls_name)
    for hook in ("on_fit_start", "on_epoch_end", "on_fit_end"):
        if hook in vars(cls):
            wrap(cls, hook, bucket, inside_training=True)
wrap(training.Trainer, "save_checkpoint", "checkpoints")
for name in ("write_figures", "write_run_figures"):
    wrap(run_mod, name, "figures")
wrap(run_mod, "_write_report", "report")
train = training.Trainer.train
threads_seen = []
def timed_train(*args, **kwargs):
    import torch
    threads_seen.append(torch.get_num_threads())  # what the run trains on (restored when it returns)
    inner["callbacks"] = 0.0
    t0 = time.perf_counter()
    try:
        return train(*args, **kwargs)
    finally:
        spent["training"] += time.perf_counter() - t0 - inner["callbacks"]
training.Trainer.train = timed_train
t0 = time.perf_counter()
sys.argv = ["attnlab", *sys.argv[2:]]  # run as the program runs: main() reads them
status = attnlab.cli.main()
in_main = time.perf_counter() - t0
spent["setup"] = in_main - sum(spent.values())
spent["imports"] = T_IMPORTED - T_START
print("BENCH " + json.dumps({"status": status, "spent": spent, "threads": threads_seen[0],
                              "t_end": time.time()}), flush=True)
"""

PHASES = ("imports", "setup", "training", "checkpoints", "metrics", "figures", "report", "exit")


def loadavg() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_once(args: argparse.Namespace, *, wrapped: bool, folder: Path) -> dict:
    """One ``attnlab train`` in a fresh process: its wall time and (``wrapped``) the phases'."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    if args.threads is not None:
        env["OMP_NUM_THREADS"] = str(args.threads)
    train_args = ["train", "--model", args.model, "--epochs", str(args.epochs), "--out", str(folder),
                  "--device", "cpu"]
    if args.flag_threads is not None:
        train_args += ["--threads", str(args.flag_threads)]
    load_before = loadavg()
    start = time.time()
    if wrapped:
        cmd = [sys.executable, "-c", CHILD, repr(start), *train_args]
    else:
        cmd = [sys.executable, "-m", "attnlab", *train_args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    end = time.time()
    if done.returncode != 0:
        raise SystemExit(f"attnlab train failed ({done.returncode}):\n{done.stderr}")
    result = {"wall": end - start, "load_before": load_before, "load_after": loadavg()}
    if wrapped:
        line = next(x for x in done.stdout.splitlines() if x.startswith("BENCH "))
        report = json.loads(line[len("BENCH "):])
        spent = report["spent"]
        spent["exit"] = end - report["t_end"]
        result.update(phases=spent, threads=report["threads"],
                      share={name: spent[name] / result["wall"] for name in spent})
    return result


def busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` processes spinning forever (the loaded machine); the caller stops them."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def summarise(runs: list[dict]) -> dict:
    """Median wall time and phases over ``runs``."""
    out = {"wall_median": statistics.median(r["wall"] for r in runs), "walls": [r["wall"] for r in runs],
           "loads": [(r["load_before"], r["load_after"]) for r in runs]}
    if "phases" in runs[0]:
        out["phases_median"] = {p: statistics.median(r["phases"][p] for r in runs) for p in PHASES}
        out["share_median"] = {p: statistics.median(r["share"][p] for r in runs) for p in PHASES}
        out["threads"] = runs[0]["threads"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--model", default="selfattn-pe")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="busy loops to run meanwhile")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the child")
    parser.add_argument("--flag-threads", type=int, default=None, help="pass --threads N to attnlab train")
    parser.add_argument("--plain", action=argparse.BooleanOptionalAction, default=True,
                        help="also time unwrapped runs, interleaved")
    parser.add_argument("--name", default="train_costs")
    args = parser.parse_args()
    import attnlab  # where the child's attnlab comes from (PYTHONPATH), recorded

    busy = busy_loops(args.busy)
    runs: dict[str, list[dict]] = {"wrapped": [], "plain": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.repeats):
                runs["wrapped"].append(run_once(args, wrapped=True, folder=Path(tmp) / f"w{i}"))
                print("wrapped", json.dumps(runs["wrapped"][-1]), flush=True)
                if args.plain:
                    runs["plain"].append(run_once(args, wrapped=False, folder=Path(tmp) / f"p{i}"))
                    print("plain", json.dumps(runs["plain"][-1]), flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    result = {"settings": {**vars(args), "attnlab": str(Path(attnlab.__file__).parent)},
              "wrapped": summarise(runs["wrapped"]), "runs": runs}
    if runs["plain"]:
        result["plain"] = summarise(runs["plain"])
    path = write_result(args.name, result)
    s = result["wrapped"]
    print(f"wall median {s['wall_median']:.2f} s (threads {s['threads']}); phases (s, share):")
    for p in PHASES:
        print(f"  {p:12s} {s['phases_median'][p]:7.3f}  {100 * s['share_median'][p]:5.1f}%")
    if runs["plain"]:
        print(f"plain runs: wall median {result['plain']['wall_median']:.2f} s")
    print(f"written {path}")


if __name__ == "__main__":
    main()
