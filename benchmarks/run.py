"""Run every benchmark (``make bench``) and print a summary table.

Each script under benchmarks/ writes its own ``results/<name>.json`` (machine,
torch version, threads, min/median/max per figure); this runner calls them in
turn and prints one line per comparison with its target.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_attention  # noqa: E402
import bench_sinusoidal  # noqa: E402
import bench_training  # noqa: E402


def main() -> None:
    rows = []
    r = bench_sinusoidal.main([])
    rows.append(("sinusoidal 1e6 x 512 build", "attnlab / seeds' float32 formula",
                 f"{r['ratio_attnlab_over_seeds']:.2f}x", "<= 2x"))
    a = bench_attention.main([])
    rows.append(("MHA fwd+bwd B32 T128 D256 H8", "attnlab / nn.MultiheadAttention",
                 f"{a['mha']['ratio_attnlab_over_torch']:.2f}x", "<= 1.1x"))
    rows.append(("seed model train step", "seeds' head loop / attnlab",
                 f"{a['seed_step']['speedup_seeds_over_attnlab']:.2f}x", ">= 2x"))
    rows.append(("self-attn L=16384 peak memory", "attnlab / bare SDPA",
                 f"{a['long']['ratio_attnlab_over_bare']:.2f}x", "<= 2x"))
    t = bench_training.main([])
    rows.append(("default train epoch", "seeds' code + book loop / attnlab",
                 f"{t['speedup_seeds_over_attnlab']:.2f}x", ">= 3x"))
    print()
    print(f"{'benchmark':32} {'comparison':36} {'ratio':>8} {'target':>8}")
    for row in rows:
        print(f"{row[0]:32} {row[1]:36} {row[2]:>8} {row[3]:>8}")


if __name__ == "__main__":
    main()
