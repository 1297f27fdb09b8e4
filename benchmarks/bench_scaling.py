"""Benchmark: self-attention time and peak memory as the length grows (memory linear in L).

Self-attention forward + backward (``out.sum().backward()``, the input requiring
grad) at L = 256, 1024, 4096, 16384 with B=1, D=512, H=8 (Dh=64), three
implementations sharing one set of weights (outputs asserted equal first):

* ``attnlab``: ``MultiHeadAttention(x)``;
* ``bare``: the same fused q/k/v projection, a bare ``F.scaled_dot_product_attention``
  on the projected q, k, v, and the same output projection (torch's fused kernel
  with nothing of attnlab's around it);
* ``explicit``: the same projections around ``textbook.explicit_attention``,
  ``softmax(q k^T / sqrt(Dh)) v``, which materialises ``[B, H, L, L]``.

Time: median (min, max) per forward + backward, interleaved A/B/A/B in this
process; fewer repeats at the larger lengths (one L=16384 call takes seconds).
Memory: the peak extra resident memory of one forward + backward, each
(implementation, length) in a fresh subprocess so no peak leaks into the next:
after a warm-up call at L=64, VmHWM is reset to the current RSS (``/proc/self/clear_refs``)
and the figure is VmHWM minus that RSS, i.e. activations, saved tensors, gradients
and kernel workspace, not the weights or the input.

The explicit softmax keeps three ``[B, H, L, L]`` float32 buffers alive at its peak
(see ``explicit_attention``); it is estimated as ``3 * B*H*L*L*4`` bytes plus what
the bare fused call needs at the same L, and skipped where that estimate exceeds
``--max-gb`` (8 GB: L=16384 would need ~25 GB), its figures then the estimate.
Targets: attnlab / bare peak memory <= 2 at L=16384; explicit / bare > 100 there.

Run: ``python benchmarks/bench_scaling.py [--lengths 256,1024,4096,16384] [--repeats R] [--max-gb G]``; writes
``scaling.json`` in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.attention import MultiHeadAttention

from harness import interleaved, peak_rss_kb, reset_peak_rss, write_result
from textbook import EXPLICIT_PEAK_BUFFERS, explicit_attention

B, D, H = 1, 512, 8
IMPLS = ("attnlab", "bare", "explicit")
MB = 2**20


def build(L: int) -> tuple[MultiHeadAttention, Tensor]:
    torch.manual_seed(0)
    mha = MultiHeadAttention(H, D)
    x = torch.randn(B, L, D, requires_grad=True)
    return mha, x


def forward(which: str, mha: MultiHeadAttention, x: Tensor) -> Tensor:
    """Self-attention of ``x [B, L, D]`` by one of :data:`IMPLS`, all with ``mha``'s weights."""
    if which == "attnlab":
        return mha(x)  # self-attention
    Bx, L, _ = x.shape
    qkv = F.linear(x, mha.in_proj.weight, mha.in_proj.bias)  # [B, L, 3 * D], rows q | k | v
    q, k, v = qkv.view(Bx, L, 3, H, D // H).permute(2, 0, 3, 1, 4).unbind(0)  # each [B, H, L, Dh]
    attend = F.scaled_dot_product_attention if which == "bare" else explicit_attention
    out = attend(q, k, v)  # [B, H, L, Dh]
    return mha.linear_out(out.transpose(1, 2).reshape(Bx, L, D))  # [B, L, D]


def step(which: str, mha: MultiHeadAttention, x: Tensor) -> Callable[[], None]:
    def run() -> None:
        forward(which, mha, x).sum().backward()

    return run


def explicit_estimate_mb(L: int, bare_mb: float) -> float:
    """What the explicit softmax's forward + backward would add: its ``[B, H, L, L]`` buffers + the rest."""
    return EXPLICIT_PEAK_BUFFERS * B * H * L * L * 4 / MB + bare_mb


def peak_child(which: str, L: int) -> dict:
    """In a fresh process: the peak extra RSS (MB) and time of one forward + backward."""
    mha, x = build(L)
    warm_x = torch.randn(B, 64, D, requires_grad=True)
    step(which, mha, warm_x)()  # kernels, thread pool and allocator initialised before the baseline
    mha.zero_grad(set_to_none=True)
    del warm_x
    base = reset_peak_rss()
    t0 = time.perf_counter()
    step(which, mha, x)()
    seconds = time.perf_counter() - t0
    extra = max(peak_rss_kb() - base, 0) / 1024
    return {"extra_peak_mb": extra, "seconds": seconds, "finite": bool(torch.isfinite(x.grad).all())}


def measure_peak(which: str, L: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--peak", which, str(L)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def check_agree(L: int = 256) -> float:
    mha, x = build(L)
    with torch.no_grad():
        outs = {which: forward(which, mha, x) for which in IMPLS}
    diff = max(float((outs[w] - outs["attnlab"]).abs().max()) for w in IMPLS)
    assert diff < 1e-5, f"implementations disagree by {diff} at L={L}"
    return diff


def schedule(L: int, repeats: int) -> dict:
    """Repeats per length: a 16384 forward + backward takes ~10 s on two cores."""
    if L <= 256:
        return {"repeats": repeats, "per_sample": 10, "warmup": 1}
    if L <= 1024:
        return {"repeats": repeats, "per_sample": 2, "warmup": 1}
    if L <= 4096:
        return {"repeats": max(2, repeats - 2), "per_sample": 1, "warmup": 1}
    return {"repeats": 2, "per_sample": 1, "warmup": 0}  # kernels already warm from the smaller lengths


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,1024,4096,16384")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-gb", type=float, default=8.0, help="skip explicit configurations needing more")
    parser.add_argument("--peak", nargs=2, metavar=("IMPL", "L"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peak:
        print(json.dumps(peak_child(args.peak[0], int(args.peak[1]))))
        return {}
    lengths = [int(n) for n in args.lengths.split(",")]
    max_diff = check_agree()
    rows: dict[str, dict] = {}
    for L in lengths:
        memory = {which: measure_peak(which, L) for which in ("attnlab", "bare")}
        bare_mb = memory["bare"]["extra_peak_mb"]
        estimate = explicit_estimate_mb(L, bare_mb)
        run_explicit = estimate <= args.max_gb * 1024
        if run_explicit:
            memory["explicit"] = measure_peak("explicit", L)
        impls = IMPLS if run_explicit else IMPLS[:2]
        mha, x = build(L)
        plan = schedule(L, args.repeats)
        t = interleaved({w: step(w, mha, x) for w in impls}, **plan)
        del mha, x
        ms = {w: t[w]["median"] * 1e3 for w in impls}
        explicit_mb = memory["explicit"]["extra_peak_mb"] if run_explicit else estimate
        row = {
            "timings_s": t,
            "peak": memory,
            "extra_peak_mb": {"attnlab": memory["attnlab"]["extra_peak_mb"], "bare": bare_mb,
                              "explicit": explicit_mb},
            "explicit_measured": run_explicit,
            "explicit_estimate_mb": estimate,
            "memory_attnlab_over_bare": memory["attnlab"]["extra_peak_mb"] / max(bare_mb, 1e-9),
            "memory_explicit_over_bare": explicit_mb / max(bare_mb, 1e-9),
            "time_attnlab_over_bare": t["attnlab"]["median"] / t["bare"]["median"],
        }
        if run_explicit:
            row["time_explicit_over_bare"] = t["explicit"]["median"] / t["bare"]["median"]
        rows[str(L)] = row
        explicit_txt = (f"explicit {ms['explicit']:8.1f} ms, +{explicit_mb:7.0f} MB (estimate {estimate:.0f})"
                        if run_explicit else
                        f"explicit skipped: would need {explicit_mb / 1024:.1f} GB")
        print(f"L={L:5d}: attnlab {ms['attnlab']:8.1f} ms, +{row['extra_peak_mb']['attnlab']:6.0f} MB | "
              f"bare {ms['bare']:8.1f} ms, +{bare_mb:6.0f} MB | {explicit_txt} | "
              f"memory attnlab/bare {row['memory_attnlab_over_bare']:.2f}, "
              f"explicit/bare {row['memory_explicit_over_bare']:.0f}{'' if run_explicit else ' (analytic)'}")
    result: dict = {
        "description": f"self-attention forward + backward, B={B} D={D} H={H}: time and peak extra memory",
        "config": {"B": B, "D": D, "H": H, "lengths": lengths, "max_gb": args.max_gb,
                   "explicit_peak_buffers": EXPLICIT_PEAK_BUFFERS},
        "max_abs_diff_at_256": max_diff,
        "lengths": rows,
    }
    top = str(max(lengths))
    if top in rows:
        r = rows[top]
        result["top_length"] = int(top)
        result["memory_attnlab_over_bare_at_top"] = r["memory_attnlab_over_bare"]
        result["memory_explicit_over_bare_at_top"] = r["memory_explicit_over_bare"]
        result["explicit_at_top_measured"] = r["explicit_measured"]
        print(f"L={top}: peak memory attnlab / bare {r['memory_attnlab_over_bare']:.2f} (target <= 2), "
              f"explicit / bare {r['memory_explicit_over_bare']:.0f}"
              f"{'' if r['explicit_measured'] else ' (explicit estimated, not run)'} (target > 100)")
    path = write_result("scaling", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
