"""Benchmark: attnlab's attention against its peers, as ratios measured in one process.

1. ``mha``: MultiHeadAttention forward + backward at B=32, T=S=128, D=256, H=8
   against ``nn.MultiheadAttention`` (need_weights=False, batch-first). Target:
   attnlab / torch <= 1.1.
2. ``seed_step``: one training step (forward, MSE, backward, Adam) of seed 000's
   self-attention encoder-decoder at its own size (B=16, L=2+2, D=2, H=3 wide
   heads), attnlab's model against the seeds' per-head formulation written out in
   ``seed_formulation.py``. Target: seeds / attnlab >= 2.
3. ``long``: self-attention without weights at L=16384, D=512, H=8, B=1; peak
   extra memory of ``attend`` against a bare ``F.scaled_dot_product_attention``
   call, each measured in a fresh subprocess (peak RSS, VmHWM, above the RSS
   just before the call).
   Target: attnlab / bare <= 2. The explicit softmax would need B*H*L*L*4 bytes
   for the scores alone (8.6 GB) and as much again for the weights; it is reported,
   not run.

Run: ``python benchmarks/bench_attention.py [--only mha,seed_step,long] [--repeats R]``.
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

HERE = Path(__file__).resolve().parent


def bench_mha(repeats: int) -> dict:
    B, T, D, H = 32, 128, 256, 8
    torch.manual_seed(0)
    peer = nn.MultiheadAttention(D, H, batch_first=True)
    ours = MultiHeadAttention.from_torch(peer)
    x = torch.randn(B, T, D, requires_grad=True)

    def run_peer() -> None:
        out, _ = peer(x, x, x, need_weights=False)
        out.sum().backward()

    def run_ours() -> None:
        ours(x, x, x).sum().backward()

    t = interleaved({"attnlab": run_ours, "torch": run_peer}, repeats=repeats, per_sample=10)
    ratio = t["attnlab"]["median"] / t["torch"]["median"]
    print(f"mha fwd+bwd B={B} T=S={T} D={D} H={H}: attnlab {t['attnlab']['median'] * 1e3:.2f} ms | "
          f"nn.MultiheadAttention {t['torch']['median'] * 1e3:.2f} ms | ratio {ratio:.3f} (target <= 1.1)")
    return {"config": dict(B=B, T=T, S=T, D=D, H=H), "timings_s": t, "ratio_attnlab_over_torch": ratio}


def bench_seed_step(repeats: int) -> dict:
    from attnlab.models import DecoderPe, EncoderDecoderSelfAttn, EncoderPe

    from seed_formulation import build_seed_model

    def ours_model() -> nn.Module:
        torch.manual_seed(43)
        enc = EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
        dec = DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
        return EncoderDecoderSelfAttn(enc, dec, input_len=2, target_len=2)

    def seed_model() -> nn.Module:
        torch.manual_seed(43)
        return build_seed_model()

    g = torch.Generator().manual_seed(0)
    X = torch.randn(16, 4, 2, generator=g)
    y = X[:, 2:]
    steps = {}
    for name, make in (("attnlab", ours_model), ("seeds", seed_model)):
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
    speedup = t["seeds"]["median"] / t["attnlab"]["median"]
    print(f"seed model train step B=16 L=2+2 D=2 H=3: attnlab {t['attnlab']['median'] * 1e3:.3f} ms | "
          f"seeds' per-head loop {t['seeds']['median'] * 1e3:.3f} ms | speed-up {speedup:.2f}x (target >= 2)")
    return {"config": dict(B=16, L=4, D=2, H=3), "timings_s": t, "speedup_seeds_over_attnlab": speedup}


_PEAK_SCRIPT = r"""
import json, sys, torch, torch.nn.functional as F
which, L, D, H = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
q = torch.randn(1, H, L, D // H); k = torch.randn(1, H, L, D // H); v = torch.randn(1, H, L, D // H)
if which == "attnlab":
    from attnlab.attention import attend
    fn = lambda: attend(q, k, v)[0]
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


def bench_long(L: int = 16384, D: int = 512, H: int = 8) -> dict:
    results = {}
    for which in ("attnlab", "bare_sdpa", "attnlab", "bare_sdpa"):
        proc = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, which, str(L), str(D), str(H)],
                              capture_output=True, text=True, check=True, cwd=HERE)
        results.setdefault(which, []).append(json.loads(proc.stdout))
    summary = {w: {"extra_peak_mb": min(r["extra_peak_mb"] for r in rs),
                   "seconds": min(r["seconds"] for r in rs), "runs": rs} for w, rs in results.items()}
    ratio = summary["attnlab"]["extra_peak_mb"] / max(summary["bare_sdpa"]["extra_peak_mb"], 1e-9)
    inputs_mb = 3 * L * D * 4 / 2**20
    explicit_gb = 2 * H * L * L * 4 / 2**30
    ours, bare = summary["attnlab"], summary["bare_sdpa"]
    print(f"self-attention L={L} D={D} H={H} B=1, no weights: attnlab +{ours['extra_peak_mb']:.0f} MB "
          f"({ours['seconds']:.1f} s) | bare SDPA +{bare['extra_peak_mb']:.0f} MB "
          f"({bare['seconds']:.1f} s) | ratio {ratio:.2f} (target <= 2); "
          f"q/k/v themselves {inputs_mb:.0f} MB; explicit softmax would need ~{explicit_gb:.0f} GB")
    return {"config": dict(L=L, D=D, H=H, B=1), "peak": summary, "ratio_attnlab_over_bare": ratio,
            "explicit_softmax_estimate_gb": explicit_gb}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mha,seed_step,long")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    chosen = set(args.only.split(","))
    result = {}
    if "mha" in chosen:
        result["mha"] = bench_mha(args.repeats)
    if "seed_step" in chosen:
        result["seed_step"] = bench_seed_step(args.repeats)
    if "long" in chosen:
        result["long"] = bench_long()
    path = write_result("attention", {"description": __doc__.splitlines()[0], **result})
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
