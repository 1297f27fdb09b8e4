"""Benchmark: self-attention with each positional scheme at long lengths, memory and time.

``MultiHeadAttention(8, 512, position=scheme)`` on one sequence (B=1, D=512,
H=8, Dh=64) at L = 4096 and 16384, forward only (under ``torch.no_grad``) and
forward + backward (``out.sum().backward()``, the input requiring grad), for
no position (the fused kernel: the peer every ratio is against), rotary,
ALiBi, T5's buckets and Shaw's relative vectors (keys and values), each on the
path ``backend="auto"`` picks (on the CPU: chunked for the bias schemes, see
``attnlab.attention.backends.choose``), plus FlexAttention forced for ALiBi and T5
in the forward pass (its compile time reported apart).

Memory: each (scheme, path, L, mode) in a fresh subprocess: after a warm-up at
L=64, VmHWM is reset to the current RSS and the figure is VmHWM minus that RSS
(the activations, saved tensors, gradients and workspace of one call, not the
weights or the input). Target: every scheme at most 2x the no-position figure
at the same L and mode.

Time: the same subprocess times the call after a warm-up call at the same L
(so a compile lands in the warm-up, reported as ``first_call_s``); ratios are
against the no-position call, measured in its own subprocess in the same run.

Agreement: at L=4096 (where the dense path fits), each scheme's output and
input gradient on the ``auto`` path against the dense path, max abs difference,
and every parameter's gradient against the dense path in float64, max abs
difference relative to its largest entry, next to the dense float32 path's own
(target 1e-5 in float32).

Run: ``python benchmarks/bench_long_context.py [--lengths 4096,16384] [--schemes ...]``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
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


def build(name: str, backend: str, L: int) -> tuple[MultiHeadAttention, torch.Tensor]:
    torch.manual_seed(0)
    mha = MultiHeadAttention(H, D, position=scheme(name), backend=backend)
    x = torch.randn(B, L, D)
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


def child(name: str, backend: str, L: int, mode: str) -> dict:
    """In a fresh process: the first call's time, then the peak extra RSS and time of one more call."""
    mha, x = build(name, backend, L)
    t0 = time.perf_counter()
    call(mha, x, mode)  # warm-up at the full length: a FlexAttention compile lands here
    first = time.perf_counter() - t0
    mha.zero_grad(set_to_none=True)
    # Hand the warm-up's freed memory back to the system first: glibc keeps freed blocks in
    # its heap, and the measured call would reuse them unseen.
    gc.collect()
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    base = reset_peak_rss()
    t0 = time.perf_counter()
    out = call(mha, x, mode)
    seconds = time.perf_counter() - t0
    extra = max(peak_rss_kb() - base, 0) / 1024
    return {"extra_peak_mb": extra, "seconds": seconds, "first_call_s": first,
            "finite": bool(torch.isfinite(out).all())}


MMAP_THRESHOLD: int | None = None  # --mmap-threshold: glibc's MALLOC_MMAP_THRESHOLD_ for the children


def run_child(name: str, backend: str, L: int, mode: str) -> dict:
    env = dict(os.environ)
    if MMAP_THRESHOLD is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    proc = subprocess.run([sys.executable, __file__, "--child", name, backend, str(L), mode],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def agreement(name: str, L: int) -> dict:
    """The ``auto`` path against the dense one, forward + backward, and both against the dense path in float64.

    Outputs and input gradients: max abs difference, ``auto`` vs dense (float32).
    Parameter gradients (the projections' and the scheme's, such as T5's table,
    whose far buckets sum millions of terms): max abs difference from the float64
    gradient over that gradient's largest entry, for ``auto`` and for dense float32.
    """
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096,16384")
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument("--modes", default="forward,backward")
    parser.add_argument("--no-flex", action="store_true", help="skip the forced FlexAttention rows")
    parser.add_argument("--mmap-threshold", type=int, default=None,
                        help="run the measured processes with glibc's MALLOC_MMAP_THRESHOLD_ set to this many bytes "
                             "(a fixed threshold: freed blocks above it go back to the system at once)")
    parser.add_argument("--child", nargs=4, metavar=("SCHEME", "BACKEND", "L", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, backend, L, mode = args.child
        print(json.dumps(child(name, backend, int(L), mode)))
        return {}
    global MMAP_THRESHOLD
    MMAP_THRESHOLD = args.mmap_threshold
    lengths = [int(n) for n in args.lengths.split(",")]
    names = [n for n in args.schemes.split(",") if n]
    modes = args.modes.split(",")
    rows: dict[str, dict] = {}
    for L in lengths:
        for mode in modes:
            base = run_child("none", "auto", L, mode)
            runs = {("none", "auto"): base}
            for name in names:
                if name != "none":
                    runs[(name, "auto")] = run_child(name, "auto", L, mode)
            if mode == "forward" and not args.no_flex:
                for name in ("alibi", "t5"):
                    if name in names:
                        runs[(name, "flex")] = run_child(name, "flex", L, mode)
            for (name, backend), r in runs.items():
                key = f"L={L} {mode} {name} {backend}"
                rows[key] = {**r, "memory_over_none": r["extra_peak_mb"] / max(base["extra_peak_mb"], 1e-9),
                             "time_over_none": r["seconds"] / base["seconds"]}
                print(f"{key:32s} +{r['extra_peak_mb']:7.0f} MB ({rows[key]['memory_over_none']:5.2f}x none)  "
                      f"{r['seconds']:7.2f} s ({rows[key]['time_over_none']:5.2f}x none)  "
                      f"first call {r['first_call_s']:6.1f} s", flush=True)
    agree: dict[str, dict] = {}
    if 4096 in lengths:
        for name in names:
            if name != "none":
                agree[name] = agreement(name, 4096)
                print(f"L=4096 auto vs dense, {name}: output {agree[name]['output']:.1e}, "
                      f"input grad {agree[name]['input_grad']:.1e}, "
                      f"parameter grads vs float64 {agree[name]['param_grad_relative_to_float64']:.1e} of their size "
                      f"(dense float32: {agree[name]['dense_param_grad_relative_to_float64']:.1e})", flush=True)
    worst = max((r["memory_over_none"] for r in rows.values()), default=0.0)
    result = {
        "description": f"self-attention with positional schemes at long lengths, B={B} D={D} H={H}: "
                       "peak extra memory and time, as ratios to no position",
        "config": {"B": B, "D": D, "H": H, "lengths": lengths, "schemes": names, "modes": modes,
                   "malloc_mmap_threshold": args.mmap_threshold},
        "rows": rows,
        "agreement_at_4096": agree,
        "worst_memory_over_none": worst,
    }
    print(f"worst memory ratio to no position: {worst:.2f} (target <= 2)")
    path = write_result("long_context" if args.mmap_threshold is None else "long_context_mmap", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
