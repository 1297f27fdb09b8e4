"""Benchmark: self-attention with each positional scheme at long lengths, memory and time.

``MultiHeadAttention(8, 512, position=scheme)`` on one sequence (B=1, D=512,
H=8, Dh=64, causal, projections included) at L = 4096 and 16384, forward only
(under ``torch.no_grad``) and forward + backward (``out.sum().backward()``, the
input requiring grad), for no position (the fused kernel: the peer every ratio
is against), rotary, ALiBi, T5's buckets and Shaw's relative vectors (keys and
values), each on the path ``backend="auto"`` picks (on the CPU at these lengths:
chunked for the bias schemes, see ``attnlab.attention.backends.choose``), plus
FlexAttention forced for ALiBi and T5 in the forward pass (``--flex``; its
compile time reported apart as ``first_call_s``).

Time: per (L, mode, threads) one subprocess (``torch.set_num_threads``) builds
every scheme, calls each once (the warm-up: a compile lands there), then times
them round-robin, ``--repeats`` rounds (none, alibi, t5, ... then again, the
order rotated each round), so a burst of load from the other work on the machine
hits every scheme alike. A figure is the median over the rounds; its ratio is
the median over the rounds of its time over no position's in the same round, given with the
quartiles of those paired ratios. ``/proc/loadavg`` (1-minute) is recorded at every round.
At L=4096 on one thread, at load 2-3, the paired ratio of one round spreads by about ±0.1 around
its median: three or five rounds (as this script once took) land anywhere from 1.0x to 1.5x, which
is how two honest timings came to disagree; fifteen settle within a few hundredths from one run to
the next. The forward pass's input requiring grad or not, and handing freed memory back to the
system before each call (:func:`_release`), moved the figure by less than that spread
(BENCHMARKS.md, "Chunked attention against no position: one method").

Memory: each (scheme, path, L, mode) in a fresh subprocess: after a warm-up
call at the same L, VmHWM is reset to the current RSS and the figure is VmHWM
minus that RSS (the activations, saved tensors, gradients and workspace of one
call, not the weights or the input). Target: every scheme at most 2x the
no-position figure at the same L and mode.

Agreement (``--agreement``): at L=4096, each scheme's output and input gradient
on the ``auto`` path against the dense path, max abs difference, and every
parameter's gradient against the dense path in float64 (relative to its
largest entry), next to the dense float32 path's own.

Crossover (``--crossover``): the rule of ``backend="auto"`` on the CPU
(``attnlab.attention.backends.choose``) rests on where the chunked path
becomes faster than the dense one; this mode times both, interleaved, for ALiBi
and T5 at B=1 and B=4, H=8, over ``--crossover-lengths``, and writes
``long_context_crossover<tag>.json`` in ``results/investigations/``.

``--omp-passive`` runs the measured processes with ``OMP_WAIT_POLICY=PASSIVE``:
with OpenMP's default, a thread that reaches the end of an operation spins for
its sibling, and on a machine loaded by other work the spinning thread takes the
core the sibling needs; the chunked path, a few hundred operations per call
where the fused kernel is one, lost 8x on two threads at load 7 to that.

Run: ``python benchmarks/bench_long_context.py [--lengths 4096,16384] [--schemes ...] [--threads 1,2] [--tag TAG]``;
writes ``long_context<tag>.json`` in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from attnlab.attention import MultiHeadAttention
from attnlab.encodings import ALiBi, Rotary, ShawRelative, T5RelativeBias

from harness import peak_rss_kb, reset_peak_rss, write_result

B, D, H = 1, 512, 8
DH = D // H
SCHEMES = ("none", "rotary", "alibi", "t5", "shaw")
MB = 2**20


def scheme(name: str):  # type: ignore[no-untyped-def]
    """A fresh scheme by name (None for no position)."""
    return {"none": lambda: None, "rotary": lambda: Rotary(DH), "alibi": lambda: ALiBi(H),
            "t5": lambda: T5RelativeBias(H, bidirectional=False),
            "shaw": lambda: ShawRelative(DH, max_relative_position=16)}[name]()


def build(name: str, backend: str, L: int, batch: int = B) -> tuple[MultiHeadAttention, torch.Tensor]:
    torch.manual_seed(0)
    mha = MultiHeadAttention(H, D, position=scheme(name), backend=backend)
    x = torch.randn(batch, L, D)
    return mha, x


def call(mha: MultiHeadAttention, x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "forward":
        with torch.no_grad():
            return mha(x, is_causal=True)
    x = x.detach().requires_grad_(True)
    out = mha(x, is_causal=True)
    out.sum().backward()
    assert x.grad is not None
    return x.grad


def _release() -> None:
    """Hand freed memory back to the system: glibc keeps freed blocks, and the next call would reuse them unseen."""
    gc.collect()
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def load1() -> float:
    """The 1-minute load average (the machine is shared: every timing notes it)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def memory_child(name: str, backend: str, L: int, mode: str) -> dict:
    """In a fresh process: the first call's time, then the peak extra RSS of one more call."""
    mha, x = build(name, backend, L)
    t0 = time.perf_counter()
    call(mha, x, mode)  # warm-up at the full length: a FlexAttention compile lands here
    first = time.perf_counter() - t0
    mha.zero_grad(set_to_none=True)
    _release()
    base = reset_peak_rss()
    out = call(mha, x, mode)
    extra = max(peak_rss_kb() - base, 0) / 1024
    return {"extra_peak_mb": extra, "first_call_s": first, "finite": bool(torch.isfinite(out).all())}


def time_child(runs: list[str], L: int, mode: str, threads: int, repeats: int, batch: int = B) -> dict:
    """In one process on ``threads`` threads: every ``name:backend`` in ``runs`` timed round-robin."""
    torch.set_num_threads(threads)
    built = {run: build(*run.split(":"), L, batch) for run in runs}
    first = {}
    for run, (mha, x) in built.items():
        t0 = time.perf_counter()
        call(mha, x, mode)
        first[run] = time.perf_counter() - t0
        mha.zero_grad(set_to_none=True)
    times: dict[str, list[float]] = {run: [] for run in runs}
    loads = [load1()]
    for r in range(repeats):
        order = runs[r % len(runs):] + runs[: r % len(runs)]  # rotated: no scheme always runs first
        for run in order:
            mha, x = built[run]
            _release()
            t0 = time.perf_counter()
            call(mha, x, mode)
            times[run].append(time.perf_counter() - t0)
            mha.zero_grad(set_to_none=True)
        loads.append(load1())
    return {run: {"median": statistics.median(ts), "min": min(ts), "max": max(ts), "repeats": len(ts), "all": ts,
                  "first_call_s": first[run], "loadavg_1min": loads} for run, ts in times.items()}


def paired_ratios(times: list[float], none: list[float]) -> dict:
    """Each round's time over no position's in the same round: their quartiles (the figure is the median)."""
    ratios = sorted(t / n for t, n in zip(times, none, strict=True))
    return {"q1": ratios[len(ratios) // 4], "median": statistics.median(ratios), "q3": ratios[(3 * len(ratios)) // 4]}


OMP_PASSIVE = False  # --omp-passive: the children run with OMP_WAIT_POLICY=PASSIVE


def spawn(*args: str) -> dict:
    env = dict(os.environ)
    if OMP_PASSIVE:
        env["OMP_WAIT_POLICY"] = "PASSIVE"  # read once, when OpenMP starts: only a fresh process takes it
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def agreement(name: str, L: int) -> dict:
    """The ``auto`` path against the dense one, forward + backward, and both against the dense path in float64."""
    results = {}
    for backend, dtype in (("auto", torch.float32), ("dense", torch.float32), ("dense", torch.float64)):
        mha, x = build(name, backend, L)
        mha, x = mha.to(dtype), x.to(dtype).requires_grad_(True)
        out = mha(x, is_causal=True)
        out.sum().backward()
        results[backend, dtype] = (out.detach(), x.grad, {n: p.grad.double() for n, p in mha.named_parameters()})
    out_a, grad_a, params_a = results["auto", torch.float32]
    out_d, grad_d, params_d = results["dense", torch.float32]
    exact = results["dense", torch.float64][2]

    def param_error(params: dict) -> float:
        return max(float((params[n] - g).abs().max() / g.abs().max().clamp_min(1e-12)) for n, g in exact.items())

    return {"output": float((out_a - out_d).abs().max()), "input_grad": float((grad_a - grad_d).abs().max()),
            "param_grad_relative_to_float64": param_error(params_a),
            "dense_param_grad_relative_to_float64": param_error(params_d)}


def crossover(lengths: list[int], threads: list[int], repeats: int) -> dict:
    """Dense against chunked for ALiBi and T5, interleaved in one process per (B, L, mode, threads)."""
    rows = {}
    for t in threads:
        for batch in (1, 4):
            for L in lengths:
                if batch * H * L * L * 4 > 2**30 * 1.5:
                    continue  # the dense path would not fit beside the other work on a shared machine
                for mode in ("forward", "backward"):
                    runs = [f"{n}:{b}" for n in ("alibi", "t5") for b in ("dense", "chunked")]
                    res = spawn("--time-child", ",".join(runs), str(L), mode, str(t), str(repeats), str(batch))
                    for n in ("alibi", "t5"):
                        d, c = res[f"{n}:dense"], res[f"{n}:chunked"]
                        key = f"B={batch} L={L} {mode} {n} threads={t}"
                        rows[key] = {"dense_s": d["median"], "chunked_s": c["median"],
                                     "chunked_over_dense": c["median"] / d["median"],
                                     "dense_bytes": batch * H * L * L * 4, "loadavg_1min": d["loadavg_1min"]}
                        print(f"{key:40s} dense {d['median']:7.3f} s  chunked {c['median']:7.3f} s  "
                              f"chunked/dense {rows[key]['chunked_over_dense']:5.2f}  "
                              f"load {min(d['loadavg_1min']):.1f}-{max(d['loadavg_1min']):.1f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096,16384")
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument("--modes", default="forward,backward")
    parser.add_argument("--threads", default="1,2", help="torch threads of the timed calls, comma-separated")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds per timing (median taken)")
    parser.add_argument("--flex", action="store_true", help="add forced FlexAttention rows (forward) for ALiBi, T5")
    parser.add_argument("--no-memory", action="store_true", help="time only")
    parser.add_argument("--agreement", action="store_true", help="check auto vs dense at L=4096")
    parser.add_argument("--crossover", action="store_true", help="time dense vs chunked (the auto rule)")
    parser.add_argument("--crossover-lengths", default="1024,2048,3072,4096")
    parser.add_argument("--omp-passive", action="store_true",
                        help="run the measured processes with OMP_WAIT_POLICY=PASSIVE (threads that wait sleep "
                             "instead of spinning: on a loaded machine a spinning thread takes the core its "
                             "sibling needs)")
    parser.add_argument("--tag", default="", help="suffix of the results file (long_context<tag>.json)")
    parser.add_argument("--memory-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--time-child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        name, backend, L, mode = args.memory_child
        print(json.dumps(memory_child(name, backend, int(L), mode)))
        return {}
    if args.time_child:
        runs, L, mode, threads, repeats, *batch = args.time_child
        print(json.dumps(time_child(runs.split(","), int(L), mode, int(threads), int(repeats),
                                    int(batch[0]) if batch else B)))
        return {}
    threads = [int(t) for t in args.threads.split(",")]
    global OMP_PASSIVE
    OMP_PASSIVE = args.omp_passive
    if args.crossover:
        rows = crossover([int(n) for n in args.crossover_lengths.split(",")], threads, args.repeats)
        result = {"description": f"dense vs chunked attention with ALiBi and T5, H={H} D={D}, causal, "
                                 "forward and forward+backward: medians of interleaved calls", "rows": rows}
        print(f"wrote {write_result('long_context_crossover' + args.tag, result)}")
        return result
    lengths = [int(n) for n in args.lengths.split(",")]
    names = [n for n in args.schemes.split(",") if n]
    if "none" not in names:
        names.insert(0, "none")
    modes = args.modes.split(",")
    timing: dict[str, dict] = {}
    memory: dict[str, dict] = {}
    for L in lengths:
        for mode in modes:
            runs = [f"{n}:auto" for n in names]
            if mode == "forward" and args.flex:
                runs += [f"{n}:flex" for n in ("alibi", "t5") if n in names]
            for t in threads:
                res = spawn("--time-child", ",".join(runs), str(L), mode, str(t), str(args.repeats))
                for run, r in res.items():
                    name, backend = run.split(":")
                    key = f"L={L} {mode} {name} {backend} threads={t}"
                    paired = paired_ratios(r["all"], res["none:auto"]["all"])
                    timing[key] = {**r, "time_over_none": paired["median"], "paired_over_none": paired}
                    loads = r["loadavg_1min"]
                    print(f"{key:42s} {r['median']:7.2f} s ({timing[key]['time_over_none']:5.2f}x none)  "
                          f"first call {r['first_call_s']:6.1f} s  load {min(loads):.1f}-{max(loads):.1f}",
                          flush=True)
            if args.no_memory:
                continue
            mem = {run: spawn("--memory-child", *run.split(":"), str(L), mode) for run in runs}
            base_mb = mem["none:auto"]["extra_peak_mb"]
            for run, r in mem.items():
                name, backend = run.split(":")
                key = f"L={L} {mode} {name} {backend}"
                memory[key] = {**r, "memory_over_none": r["extra_peak_mb"] / max(base_mb, 1e-9)}
                print(f"{key:42s} +{r['extra_peak_mb']:7.0f} MB ({memory[key]['memory_over_none']:5.2f}x none)",
                      flush=True)
    agree: dict[str, dict] = {}
    if args.agreement:
        for name in names:
            if name != "none":
                agree[name] = agreement(name, 4096)
                print(f"L=4096 auto vs dense, {name}: {agree[name]}", flush=True)
    result = {
        "description": f"self-attention with positional schemes at long lengths, B={B} D={D} H={H}, causal: "
                       "time (median of interleaved rounds, per thread count) and peak extra memory, "
                       "as ratios to no position in the same run",
        "config": {"B": B, "D": D, "H": H, "lengths": lengths, "schemes": names, "modes": modes,
                   "threads": threads, "repeats": args.repeats, "omp_wait_policy_passive": args.omp_passive},
        "timing": timing,
        "memory": memory,
        "agreement_at_4096": agree,
        "worst_memory_over_none": max((r["memory_over_none"] for r in memory.values()), default=0.0),
    }
    print(f"wrote {write_result('long_context' + args.tag, result)}")
    return result


def summary(r: dict) -> list[tuple[str, str, str, str, str, bool | None]]:
    """The rows of ``benchmarks/run.py``'s table: each scheme's time and memory against no position."""
    rows: list[tuple[str, str, str, str, str, bool | None]] = []
    for key, row in r.get("timing", {}).items():
        L, mode, name, backend, threads = key.split(" ")
        if name == "none":
            continue
        target = 1.25 if mode == "forward" else 1.3
        ratio = row["time_over_none"]
        check = ratio <= target if name in ("alibi", "t5") and backend == "auto" else None
        rows.append((f"{name} {L} {'fwd' if mode == 'forward' else 'fwd+bwd'} {backend} {threads} time",
                     f"{row['median']:.2f} s", f"{row['median'] / ratio:.2f} s no position", f"{ratio:.2f}x",
                     f"<= {target}x" if check is not None else "", check))
    for key, row in r.get("memory", {}).items():
        if key.split(" ")[2] == "none":
            continue
        ratio = row["memory_over_none"]
        rows.append((f"{key} peak memory", f"{row['extra_peak_mb']:.0f} MB",
                     f"{row['extra_peak_mb'] / ratio:.0f} MB no position", f"{ratio:.2f}x", "<= 2x", ratio <= 2))
    for name, agree in r.get("agreement_at_4096", {}).items():
        worst = max(agree["output"], agree["input_grad"])
        rows.append((f"{name} L=4096 output, input grad vs dense", f"{worst:.1e}", "dense path", "", "<= 1e-5",
                     worst <= 1e-5))
    return rows


if __name__ == "__main__":
    main()
