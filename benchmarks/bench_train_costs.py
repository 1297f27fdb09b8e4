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

Run: ``python benchmarks/bench_train_costs.py [--epochs 100] [--repeats 3] [--busy 0] [--name NAME]
[--tree NAME=SRC[@OMP] ...]``; writes ``NAME.json`` (default ``train_costs``) in ``results/investigations/``
(``results/latest/`` when ``make bench`` runs it). With
several ``--tree``, their runs are interleaved (tree A, tree B, tree A, ...), so that the machine's load
from elsewhere falls on each alike; e.g. ``--tree base=/work/wt/base/src@1 --tree new=src`` compares an
older commit, on one thread, with this tree.
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
import attnlab.cli
if hasattr(attnlab.cli, "program_start"):  # what the program does first (main() does it too, harmlessly, again)
    attnlab.cli.program_start()
import attnlab.training as training
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


def run_once(args: argparse.Namespace, tree: tuple[str | None, int | None], *, wrapped: bool, folder: Path) -> dict:
    """One ``attnlab train`` in a fresh process: its wall time and (``wrapped``) the phases'.

    ``tree``: ``(src folder for PYTHONPATH or None: this process's, OMP_NUM_THREADS or None)``.
    """
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    src, omp = tree
    if src is not None:
        env["PYTHONPATH"] = src
    if omp is not None:
        env["OMP_NUM_THREADS"] = str(omp)
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


#: what any program pays before it trains with torch.optim: Python, torch, and torch._dynamo (which every
#: torch.optim optimizer imports when it is made and when it steps); timed as fresh processes
FLOOR = {"python": "pass", "import torch": "import torch",
         "import torch + torch._dynamo": "import torch, torch._dynamo",
         "torch + torch._dynamo + matplotlib": "import torch, torch._dynamo, matplotlib.figure, "
                                               "matplotlib.backends.backend_agg"}


def floor(repeats: int) -> dict:
    """Median wall time of each :data:`FLOOR` program, interleaved, from start to exit."""
    times: dict[str, list[float]] = {name: [] for name in FLOOR}
    for _ in range(repeats):
        for name, code in FLOOR.items():
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times[name].append(time.perf_counter() - start)
    return {name: {"median": statistics.median(ts), "all": ts} for name, ts in times.items()}


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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--model", default="selfattn-pe")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="busy loops to run meanwhile")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the child")
    parser.add_argument("--tree", action="append", default=None, metavar="NAME=SRC[@OMP]",
                        help="an attnlab src folder to time (repeatable; the trees' runs are interleaved), with "
                             "OMP_NUM_THREADS after @; default: this process's attnlab")
    parser.add_argument("--flag-threads", type=int, default=None, help="pass --threads N to attnlab train")
    parser.add_argument("--plain", action=argparse.BooleanOptionalAction, default=True,
                        help="also time unwrapped runs, interleaved")
    parser.add_argument("--name", default="train_costs")
    parser.add_argument("--floor", action="store_true",
                        help="also time Python, torch and torch._dynamo's imports alone, interleaved with the runs")
    args = parser.parse_args(argv)
    import attnlab  # where the child's attnlab comes from (PYTHONPATH), recorded

    trees: dict[str, tuple[str | None, int | None]] = {"this": (None, args.threads)}
    if args.tree:
        trees = {}
        for spec in args.tree:
            name, _, rest = spec.partition("=")
            src, _, omp = rest.partition("@")
            trees[name] = (src, int(omp) if omp else args.threads)
    busy = busy_loops(args.busy)
    runs: dict[str, dict[str, list[dict]]] = {name: {"wrapped": [], "plain": []} for name in trees}
    floors: list[dict] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.repeats):
                for name, tree in trees.items():
                    for kind in ("wrapped", "plain") if args.plain else ("wrapped",):
                        result = run_once(args, tree, wrapped=kind == "wrapped", folder=Path(tmp) / f"{name}-{kind}{i}")
                        runs[name][kind].append(result)
                        print(name, kind, json.dumps(result), flush=True)
                if args.floor:
                    floors.append(floor(1))
                    print("floor", json.dumps(floors[-1]), flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    result: dict = {"settings": {**vars(args), "attnlab": str(Path(attnlab.__file__).parent)}, "trees": {}}
    for name, kinds in runs.items():
        result["trees"][name] = {"src": trees[name][0], "omp_num_threads": trees[name][1],
                                 "wrapped": summarise(kinds["wrapped"]), "runs": kinds}
        if kinds["plain"]:
            result["trees"][name]["plain"] = summarise(kinds["plain"])
    if floors:
        result["floor"] = {name: statistics.median(f[name]["median"] for f in floors) for name in FLOOR}
    path = write_result(args.name, result)
    for name, seconds in result.get("floor", {}).items():
        print(f"floor: {name:40s} {seconds:.3f} s")
    for name, tree_result in result["trees"].items():
        s = tree_result["wrapped"]
        print(f"[{name}] wall median {s['wall_median']:.2f} s (training on {s['threads']} threads); phases (s, share):")
        for p in PHASES:
            print(f"  {p:12s} {s['phases_median'][p]:7.3f}  {100 * s['share_median'][p]:5.1f}%")
        if "plain" in tree_result:
            print(f"  plain runs: wall median {tree_result['plain']['wall_median']:.2f} s")
    print(f"written {path}")
    return result


def summary(result: dict) -> list[tuple[str, str, str, str, str, bool | None]]:
    """For ``benchmarks/run.py``'s table: each tree's share of the wall time spent training (target >= 60%)."""
    rows: list[tuple[str, str, str, str, str, bool | None]] = []
    for name, tree in result["trees"].items():
        s = tree["wrapped"]
        share = s["share_median"]["training"]
        rows.append((f"100-epoch attnlab train [{name}]: training's share", f"{100 * share:.0f}%",
                     f"{s['wall_median']:.2f} s wall", "", ">= 60%", share >= 0.6))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
