"""Benchmark: building a 1,000,000 x 512 sinusoidal table.

attnlab computes the angles in float64 and casts the table once; the labs
evaluate the whole formula in float32. The issue asks that ours be accurate to
1e-6 (the labs' is off by ~6e-2 at that length) and no slower than twice the
labs' formula. Both are built in this process, interleaved, and compared as a
ratio of medians; the accuracy of each is measured against float64 on a sample
of rows from the start, middle and end of the table.

Run: ``python benchmarks/bench_sinusoidal.py [--max-len N] [--d-model D] [--repeats R]``; writes
``sinusoidal_table.json`` in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from attnlab.encodings import sinusoidal

from harness import interleaved, write_result


def labs_formula(max_len: int, d_model: int) -> torch.Tensor:
    """The labs' table, float32 throughout (the positional-encoding lab, the d2l chapter, the PE walkthrough)."""
    position = torch.arange(0, max_len).float().unsqueeze(1)
    angular_speed = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    encoding = torch.zeros(max_len, d_model)
    encoding[:, 0::2] = torch.sin(angular_speed * position)
    encoding[:, 1::2] = torch.cos(angular_speed * position)
    return encoding


def float64_rows(rows: np.ndarray, d_model: int) -> np.ndarray:
    """Reference rows in float64 (numpy), straight from the paper's formula."""
    angles = rows[:, None].astype(np.float64) / 10000.0 ** (np.arange(0, d_model, 2) / d_model)
    out = np.empty((len(rows), d_model))
    out[:, 0::2], out[:, 1::2] = np.sin(angles), np.cos(angles)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=1_000_000)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    n, d = args.max_len, args.d_model

    timings = interleaved(
        {"attnlab": lambda: sinusoidal(n, d), "labs": lambda: labs_formula(n, d)},
        repeats=args.repeats,
    )
    rows = np.unique(np.r_[0:256, n // 2 : n // 2 + 256, max(0, n - 1024) : n])
    ref = float64_rows(rows, d)
    err_ours = float(np.abs(sinusoidal(n, d)[rows].double().numpy() - ref).max())
    err_labs = float(np.abs(labs_formula(n, d)[rows].double().numpy() - ref).max())
    ratio = timings["attnlab"]["median"] / timings["labs"]["median"]
    result = {
        "description": f"build a {n} x {d} sinusoidal table (float32 result)",
        "timings_s": timings,
        "ratio_attnlab_over_labs": ratio,
        "max_abs_error_vs_float64": {"attnlab": err_ours, "labs": err_labs},
        "targets": {"ratio_at_most": 2.0, "attnlab_error_at_most": 1e-6},
    }
    path = write_result("sinusoidal_table", result)
    t = timings
    print(f"sinusoidal {n} x {d}: attnlab {t['attnlab']['median']:.2f}s "
          f"(min {t['attnlab']['min']:.2f}, max {t['attnlab']['max']:.2f}) | "
          f"labs {t['labs']['median']:.2f}s "
          f"(min {t['labs']['min']:.2f}, max {t['labs']['max']:.2f}) | ratio {ratio:.2f}x (target <= 2)")
    print(f"max abs error vs float64: attnlab {err_ours:.2e} (target <= 1e-6) | labs {err_labs:.2e}")
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
