"""Benchmark: attnlab's attention against its peers, as ratios measured in one process.

1. ``mha``: MultiHeadAttention forward + backward at B=32, T=S=128, D=256, H=8
   against ``nn.MultiheadAttention`` (need_weights=False, batch-first). Target:
   attnlab / torch <= 1.1. In the same interleaved group, with the same weights
   (outputs and input gradients asserted equal first): the textbook per-head loop
   of ``textbook.py`` (reported as textbook / attnlab), and square float32
   ``torch.mm`` at 1024, 2048 and 4096, whose best GFLOP/s is the machine's
   ceiling. Achieved GFLOP/s = :func:`mha_flops` / median time; target: attnlab
   at >= 50% of the ceiling (nn.MultiheadAttention's fraction for context).
2. ``lab_step``: one training step (forward, MSE, backward, Adam) of the
   positional-encoding lab's self-attention encoder-decoder at its own size (B=16,
   L=2+2, D=2, H=3 wide heads), attnlab's model against the labs' per-head
   formulation written out in ``lab_formulation.py``. Target: labs / attnlab >= 2.
3. ``long``: self-attention without weights at L=16384, D=512, H=8, B=1; peak
   extra memory of ``attend`` against a bare ``F.scaled_dot_product_attention``
   call, each measured in a fresh subprocess (peak RSS, VmHWM, above the RSS
   just before the call).
   Target: attnlab / bare <= 2. The explicit softmax (``textbook.explicit_attention``)
   needs B*H*L*L*4 bytes for the scores (8.6 GB) and as much again for the weights;
   it is measured the same way, once, when the machine has that much memory
   available (an estimate is reported otherwise). Target: explicit / bare > 100.
   (``bench_scaling.py`` does the same with projections and backward, at several
   lengths, explicit softmax included where it fits.)

Run: ``python benchmarks/bench_attention.py [--only mha,lab_step,long] [--repeats R]``; writes
``attention.json`` in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

from attnlab.attention import MultiHeadAttention

from harness import interleaved, write_result
from textbook import TextbookMHA

HERE = Path(__file__).resolve().parent


def mha_flops(B: int, T: int, S: int, D: int, H: int, *, flash_recompute: bool = True) -> int:
    """Floating-point operations of one multi-head attention forward + backward (a multiply-add is 2).

    Counted analytically, matmuls only (softmax, scaling, bias adds and the
    reshapes are O(B*H*T*S) or O(B*T*D) and left out)::

        forward   projections   2*B*T*D*D (q) + 2*B*S*D*D (k) + 2*B*S*D*D (v) + 2*B*T*D*D (out)
                  attention     2*B*H*T*S*Dh (q k^T) + 2*B*H*T*S*Dh (weights v)
        backward  2 x forward   every matmul's backward is two matmuls of its size
                                (gradient of each operand; the input x requires grad too)
        + flash recompute       2*B*H*T*S*Dh: the fused (flash) backward recomputes q k^T
                                from the saved log-sum-exp instead of keeping the weights

    total = 3 * forward + 2*B*H*T*S*Dh; without the recompute (``flash_recompute=False``,
    the explicit softmax, which keeps the weights) total = 3 * forward.
    """
    Dh = D // H
    projections = 2 * B * T * D * D + 2 * B * S * D * D + 2 * B * S * D * D + 2 * B * T * D * D
    scores = 2 * B * H * T * S * Dh  # q k^T, and as much again for weights @ v
    forward = projections + 2 * scores
    return 3 * forward + (scores if flash_recompute else 0)


MM_SIZES = {1024: 16, 2048: 2, 4096: 1}  # square float32 torch.mm sizes -> calls per timed sample


def bench_mha(repeats: int) -> dict:
    B, T, D, H = 32, 128, 256, 8
    torch.manual_seed(0)
    peer = nn.MultiheadAttention(D, H, batch_first=True)
    ours = MultiHeadAttention.from_torch(peer)
    textbook = TextbookMHA.from_attnlab(ours)
    x = torch.randn(B, T, D, requires_grad=True)

    # Same weights, same outputs and input gradients, before anything is timed.
    outs, grads = [], []
    for fn in (lambda: ours(x, x, x), lambda: peer(x, x, x, need_weights=False)[0], lambda: textbook(x, x, x)):
        x.grad = None
        out = fn()
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append(x.grad.clone())
    x.grad = None
    for name, out, grad in zip(("nn.MultiheadAttention", "textbook"), outs[1:], grads[1:], strict=True):
        assert torch.allclose(out, outs[0], atol=1e-5, rtol=1e-4), f"{name} output differs from attnlab's"
        assert torch.allclose(grad, grads[0], atol=1e-4, rtol=1e-4), f"{name} input gradient differs"
    max_diff = float((outs[2] - outs[0]).abs().max())

    def run_peer() -> None:
        out, _ = peer(x, x, x, need_weights=False)
        out.sum().backward()

    def run_ours() -> None:
        ours(x, x, x).sum().backward()

    def run_textbook() -> None:
        textbook(x, x, x).sum().backward()

    fns = {"attnlab": run_ours, "torch": run_peer, "textbook": run_textbook}
    counts = dict.fromkeys(fns, 10)
    for n, calls in MM_SIZES.items():
        a, b = torch.randn(n, n), torch.randn(n, n)
        fns[f"mm{n}"] = lambda a=a, b=b: torch.mm(a, b)
        counts[f"mm{n}"] = calls
    t = interleaved(fns, repeats=repeats, per_sample=counts)

    flops = mha_flops(B, T, T, D, H)
    flops_explicit = mha_flops(B, T, T, D, H, flash_recompute=False)
    gflops = {name: flops / t[name]["median"] / 1e9 for name in ("attnlab", "torch")}
    gflops["textbook"] = flops_explicit / t["textbook"]["median"] / 1e9
    mm_gflops = {n: 2 * n**3 / t[f"mm{n}"]["median"] / 1e9 for n in MM_SIZES}
    ceiling = max(mm_gflops.values())
    fraction = {name: g / ceiling for name, g in gflops.items()}
    ratio = t["attnlab"]["median"] / t["torch"]["median"]
    speedup = t["textbook"]["median"] / t["attnlab"]["median"]
    ms = {name: t[name]["median"] * 1e3 for name in fns}
    print(f"mha fwd+bwd B={B} T=S={T} D={D} H={H}: attnlab {ms['attnlab']:.2f} ms | "
          f"nn.MultiheadAttention {ms['torch']:.2f} ms | ratio {ratio:.3f} (target <= 1.1)")
    print(f"  textbook per-head loop {ms['textbook']:.2f} ms (same outputs, max diff {max_diff:.1e}) | "
          f"textbook / attnlab {speedup:.2f}x")
    print(f"  {flops / 1e9:.2f} GFLOP per fwd+bwd (flash, with the recompute; "
          f"{flops_explicit / 1e9:.2f} for the explicit textbook): attnlab {gflops['attnlab']:.0f} GFLOP/s, "
          f"nn.MultiheadAttention {gflops['torch']:.0f}, textbook {gflops['textbook']:.0f}")
    print("  torch.mm ceiling: " + ", ".join(f"{n}^3 {g:.0f}" for n, g in mm_gflops.items())
          + f" GFLOP/s -> {ceiling:.0f}; attnlab {fraction['attnlab']:.0%} of it (target >= 50%), "
          f"nn.MultiheadAttention {fraction['torch']:.0%}, textbook {fraction['textbook']:.0%}")
    return {
        "config": dict(B=B, T=T, S=T, D=D, H=H),
        "timings_s": t,
        "ratio_attnlab_over_torch": ratio,
        "speedup_textbook_over_attnlab": speedup,
        "textbook_max_abs_diff": max_diff,
        "flops": {"fused_with_recompute": flops, "explicit": flops_explicit,
                  "formula": "3 * (4*B*(T+S)*D*D + 4*B*H*T*S*Dh) + 2*B*H*T*S*Dh (the recompute; explicit: none)"},
        "gflops": gflops,
        "mm_gflops": {str(n): g for n, g in mm_gflops.items()},
        "mm_ceiling_gflops": ceiling,
        "fraction_of_mm": fraction,
    }


def bench_lab_step(repeats: int) -> dict:
    from attnlab.models import DecoderPe, EncoderDecoderSelfAttn, EncoderPe

    from lab_formulation import build_lab_model

    def ours_model() -> nn.Module:
        torch.manual_seed(43)
        enc = EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
        dec = DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
        return EncoderDecoderSelfAttn(enc, dec, input_len=2, target_len=2)

    def lab_model() -> nn.Module:
        torch.manual_seed(43)
        return build_lab_model()

    g = torch.Generator().manual_seed(0)
    X = torch.randn(16, 4, 2, generator=g)
    y = X[:, 2:]
    steps = {}
    for name, make in (("attnlab", ours_model), ("labs", lab_model)):
        model = make().train()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        loss_fn = nn.MSELoss()

        def step(model=model, opt=opt, loss_fn=loss_fn) -> None:
            loss = loss_fn(model(X), y)
            loss.backward()
            opt.step()
            opt.zero_grad()

        steps[name] = step
    t = interleaved(steps, repeats=repeats, per_sample=50)
    speedup = t["labs"]["median"] / t["attnlab"]["median"]
    print(f"PE lab model train step B=16 L=2+2 D=2 H=3: attnlab {t['attnlab']['median'] * 1e3:.3f} ms | "
          f"labs' per-head loop {t['labs']['median'] * 1e3:.3f} ms | speed-up {speedup:.2f}x (target >= 2)")
    return {"config": dict(B=16, L=4, D=2, H=3), "timings_s": t, "speedup_labs_over_attnlab": speedup}


_PEAK_SCRIPT = r"""
import json, sys, torch, torch.nn.functional as F
which, L, D, H = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
q = torch.randn(1, H, L, D // H); k = torch.randn(1, H, L, D // H); v = torch.randn(1, H, L, D // H)
if which == "attnlab":
    from attnlab.attention import attend
    fn = lambda: attend(q, k, v)[0]
elif which == "explicit":
    from textbook import explicit_attention
    fn = lambda: explicit_attention(q, k, v)
else:
    fn = lambda: F.scaled_dot_product_attention(q, k, v)
def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
with torch.no_grad():
    fn()  # warm-up: allocator and kernels initialised before the baseline
    # Reset this process's peak RSS (VmHWM) to its current RSS, so the peak is this call's.
    # (ru_maxrss would not do: Linux carries it over from the parent across fork + exec.)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status_kb("VmRSS")
    import time; t0 = time.perf_counter(); out = fn(); dt = time.perf_counter() - t0
extra = max(status_kb("VmHWM") - base, 0) / 1024
print(json.dumps({"extra_peak_mb": extra, "seconds": dt, "finite": bool(torch.isfinite(out).all())}))
"""


def _mem_available_gb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def _peak(which: str, L: int, D: int, H: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, which, str(L), str(D), str(H)],
                          capture_output=True, text=True, check=True, cwd=HERE)
    return json.loads(proc.stdout)


def bench_long(L: int = 16384, D: int = 512, H: int = 8) -> dict:
    results: dict[str, list[dict]] = {}
    for which in ("attnlab", "bare_sdpa", "attnlab", "bare_sdpa"):
        results.setdefault(which, []).append(_peak(which, L, D, H))
    # The explicit softmax holds the scores and the weights, two [B, H, L, L] float32 buffers, at
    # its forward peak (17 GB at L=16384): run once, and only where the machine has that to spare.
    explicit_gb = 2 * H * L * L * 4 / 2**30
    available_gb = _mem_available_gb()
    if available_gb > 1.15 * explicit_gb + 1:
        results["explicit"] = [_peak("explicit", L, D, H)]
    summary = {w: {"extra_peak_mb": min(r["extra_peak_mb"] for r in rs),
                   "seconds": min(r["seconds"] for r in rs), "runs": rs} for w, rs in results.items()}
    bare_mb = max(summary["bare_sdpa"]["extra_peak_mb"], 1e-9)
    ratio = summary["attnlab"]["extra_peak_mb"] / bare_mb
    measured = "explicit" in summary
    explicit_mb = summary["explicit"]["extra_peak_mb"] if measured else explicit_gb * 1024
    explicit_ratio = explicit_mb / bare_mb
    inputs_mb = 3 * L * D * 4 / 2**20
    ours, bare = summary["attnlab"], summary["bare_sdpa"]
    print(f"self-attention L={L} D={D} H={H} B=1, no weights: attnlab +{ours['extra_peak_mb']:.0f} MB "
          f"({ours['seconds']:.1f} s) | bare SDPA +{bare['extra_peak_mb']:.0f} MB "
          f"({bare['seconds']:.1f} s) | ratio {ratio:.2f} (target <= 2); q/k/v themselves {inputs_mb:.0f} MB")
    print(f"  explicit softmax +{explicit_mb / 1024:.1f} GB "
          + (f"(measured, {summary['explicit']['seconds']:.1f} s)" if measured else
             f"(estimated: {available_gb:.1f} GB available, not run)")
          + f" = {explicit_ratio:.0f}x the bare fused call (target > 100x)")
    return {"config": dict(L=L, D=D, H=H, B=1), "peak": summary, "ratio_attnlab_over_bare": ratio,
            "explicit_softmax_estimate_gb": explicit_gb, "explicit_measured": measured,
            "ratio_explicit_over_bare": explicit_ratio}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mha,lab_step,long")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    chosen = set(args.only.split(","))
    result = {}
    if "mha" in chosen:
        result["mha"] = bench_mha(args.repeats)
    if "lab_step" in chosen:
        result["lab_step"] = bench_lab_step(args.repeats)
    if "long" in chosen:
        result["long"] = bench_long()
    path = write_result("attention", {"description": __doc__.splitlines()[0], **result})
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
