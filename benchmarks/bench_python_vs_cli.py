"""Benchmark: the README's Python example against the command line, for the same run, on a loaded machine.

The README trains the attention lab's GRU with attention twice over: as ``attnlab train --model
gru-attn`` and as a Python block through :class:`attnlab.training.Trainer`. Both must take the
same time: the Trainer applies the command line's thread rule (``attnlab.training.threads``),
which on a machine busy with other work is what decides the time (torch's default, one thread
per core, waits on the busy cores at every operation).

Each run is a fresh process, as a user starts it: the Python block (read from the README, found
by its first line, so the figure is of the block the README shows) run by ``python -c``, and
``python -m attnlab train --model gru-attn`` with the block's epochs. They alternate, ``--repeats``
rounds, while ``--busy N`` busy loops (``while True: pass`` processes) load the machine. Wall and
CPU seconds (the child's user + system, from ``os.wait4``) are recorded per run, with the
1-minute load average before each; the figure is the ratio of the medians, Python over the
command line. Target: at most 1.5x.

Run: ``python benchmarks/bench_python_vs_cli.py [--busy 2] [--repeats 3] [--epochs 100]``; writes
``python_vs_cli.json`` in ``results/investigations/``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_train_costs import busy_loops

from harness import write_result

ROOT = Path(__file__).resolve().parent.parent
FIRST_LINE = "# The attention lab's run through attnlab's Trainer"
TARGET = 1.5


def readme_block(readme: Path = ROOT / "README.md") -> str:
    """The README's Python block that starts with :data:`FIRST_LINE`.

    Raises:
        ValueError: when the README has no such block.
    """
    for block in re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.S):
        if block.startswith(FIRST_LINE):
            return str(block)
    raise ValueError(f"{readme} has no Python block starting with {FIRST_LINE!r}")


def with_epochs(block: str, epochs: int) -> str:
    """``block`` with its ``EPOCHS = ...`` line set to ``epochs``."""
    changed, n = re.subn(r"^EPOCHS = \d+", f"EPOCHS = {epochs}", block, flags=re.M)
    if n != 1:
        raise ValueError("the README's block has no `EPOCHS = N` line")
    return changed


def timed(argv: list[str], *, cwd: Path, env: dict[str, str]) -> dict:
    """Run ``argv`` to its end; its wall and CPU seconds, the load before, and its last line of output."""
    load = float(Path("/proc/loadavg").read_text().split()[0]) if Path("/proc/loadavg").exists() else None
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(argv[:4])} ... exited {process.returncode}:\n{output[-2000:]}")
    lines = output.strip().splitlines()
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "load_before": load,
            "last_line": lines[-1] if lines else ""}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=2, help="busy loops to run meanwhile")
    parser.add_argument("--name", default="python_vs_cli")
    args = parser.parse_args(argv)
    code = with_epochs(readme_block(), args.epochs)
    env = dict(os.environ, MPLBACKEND="Agg")
    runs: dict[str, list[dict]] = {"python": [], "cli": []}
    busy = busy_loops(args.busy)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.repeats):
                runs["python"].append(timed([sys.executable, "-c", code], cwd=Path(tmp), env=env))
                runs["cli"].append(timed([sys.executable, "-m", "attnlab", "train", "--model", "gru-attn",
                                          "--epochs", str(args.epochs), "--out", str(Path(tmp) / f"run{i}"),
                                          "--no-progress"], cwd=Path(tmp), env=env))
                print(f"round {i + 1}: python {runs['python'][-1]['wall']:.1f} s, "
                      f"command line {runs['cli'][-1]['wall']:.1f} s", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    medians = {name: {"wall": statistics.median(r["wall"] for r in rs), "cpu": statistics.median(r["cpu"] for r in rs)}
               for name, rs in runs.items()}
    ratio = medians["python"]["wall"] / medians["cli"]["wall"]
    result = {"settings": vars(args), "runs": runs, "medians": medians, "ratio": ratio, "target": TARGET,
              "met": ratio <= TARGET}
    path = write_result(args.name, result)
    print(f"Python block {medians['python']['wall']:.1f} s wall ({medians['python']['cpu']:.1f} s CPU), command line "
          f"{medians['cli']['wall']:.1f} s ({medians['cli']['cpu']:.1f} s CPU): {ratio:.2f}x "
          f"({'within' if result['met'] else 'past'} {TARGET}x), {args.busy} busy loops")
    print(f"written {path}")
    return result


if __name__ == "__main__":
    main()
