"""Run every benchmark (``make bench``) and print one summary table.

Every ``benchmarks/bench_*.py`` module with a ``main(argv) -> dict`` is discovered
and run in name order (each writes its own ``results/<name>.json``: machine, torch
version, threads, min/median/max per figure). A new ``bench_<name>.py`` needs no
change here to run; for rows in the table, give it a module-level
``summary(result) -> list[Row]`` or add a function to :data:`SUMMARIES` below
(a benchmark with neither gets one row pointing at its results file). A module
that raises is reported as FAILED and the others still run; the exit status is
then 1. The table is also written to ``results/summary.json`` and, as Markdown, to ``results/summary.md``.

Columns: figure, attnlab's value, the peer's value, the ratio, the target, met?

Run: ``python benchmarks/run.py [--only attention,scaling] [--skip training]``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import RESULTS, write_result  # noqa: E402

Row = tuple[str, str, str, str, str, bool | None]  # figure, attnlab, peer, ratio, target, met (None: no target)


def _ms(timing: dict) -> str:
    return f"{timing['median'] * 1e3:.2f} ms"


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 100 else f"{seconds:.0f} s"


def sinusoidal_rows(r: dict) -> list[Row]:
    t, err = r["timings_s"], r["max_abs_error_vs_float64"]
    ratio = r["ratio_attnlab_over_labs"]
    return [
        ("sinusoidal 1e6x512 build time", _s(t["attnlab"]["median"]), f"{_s(t['labs']['median'])} labs",
         f"{ratio:.2f}x", "<= 2x", ratio <= 2),
        ("sinusoidal max error vs float64", f"{err['attnlab']:.1e}", f"{err['labs']:.1e} labs", "",
         "<= 1e-6", err["attnlab"] <= 1e-6),
    ]


def attention_rows(r: dict) -> list[Row]:
    rows: list[Row] = []
    if "mha" in r:
        m, t = r["mha"], r["mha"]["timings_s"]
        rows.append(("MHA fwd+bwd B32 T128 D256 H8", _ms(t["attnlab"]), f"{_ms(t['torch'])} nn.MHA",
                     f"{m['ratio_attnlab_over_torch']:.2f}x", "<= 1.1x", m["ratio_attnlab_over_torch"] <= 1.1))
        if "textbook" in t:
            rows.append(("  vs textbook per-head loop", _ms(t["attnlab"]), f"{_ms(t['textbook'])} textbook",
                         f"{m['speedup_textbook_over_attnlab']:.2f}x faster", "", None))
        if "gflops" in m:
            g, f, ceiling = m["gflops"], m["fraction_of_mm"], m["mm_ceiling_gflops"]
            rows.append(("  GFLOP/s, fraction of torch.mm", f"{g['attnlab']:.0f} GFLOP/s",
                         f"{ceiling:.0f} GFLOP/s mm", f"{f['attnlab']:.0%}", ">= 50%", f["attnlab"] >= 0.5))
            rows.append(("  nn.MHA GFLOP/s (context)", "", f"{g['torch']:.0f} GFLOP/s nn.MHA",
                         f"{f['torch']:.0%}", "", None))
    if "lab_step" in r:
        s, t = r["lab_step"], r["lab_step"]["timings_s"]
        rows.append(("PE lab model train step", _ms(t["attnlab"]), f"{_ms(t['labs'])} labs' loop",
                     f"{s['speedup_labs_over_attnlab']:.2f}x faster", ">= 2x", s["speedup_labs_over_attnlab"] >= 2))
    if "long" in r:
        p, ratio = r["long"]["peak"], r["long"]["ratio_attnlab_over_bare"]
        rows.append(("attend L=16384 fwd, peak memory", f"{p['attnlab']['extra_peak_mb']:.0f} MB",
                     f"{p['bare_sdpa']['extra_peak_mb']:.0f} MB bare SDPA", f"{ratio:.2f}x", "<= 2x", ratio <= 2))
        if "ratio_explicit_over_bare" in r["long"]:
            x, measured = r["long"]["ratio_explicit_over_bare"], r["long"]["explicit_measured"]
            explicit_mb = (p["explicit"]["extra_peak_mb"] if measured
                           else r["long"]["explicit_softmax_estimate_gb"] * 1024)
            rows.append(("  explicit softmax L=16384 fwd memory",
                         f"{explicit_mb / 1024:.1f} GB" + ("" if measured else " (est.)"),
                         f"{p['bare_sdpa']['extra_peak_mb']:.0f} MB bare SDPA", f"{x:.0f}x", "> 100x", x > 100))
    return rows


def scaling_rows(r: dict) -> list[Row]:
    rows: list[Row] = []
    top = str(r.get("top_length", ""))
    for L, row in r["lengths"].items():
        t, mem = row["timings_s"], row["extra_peak_mb"]
        at_top = L == top
        ratio = row["memory_attnlab_over_bare"]
        rows.append((f"self-attn L={L} fwd+bwd time", _ms(t["attnlab"]), f"{_ms(t['bare'])} bare SDPA",
                     f"{row['time_attnlab_over_bare']:.2f}x", "", None))
        rows.append((f"self-attn L={L} peak memory", f"{mem['attnlab']:.0f} MB", f"{mem['bare']:.0f} MB bare SDPA",
                     f"{ratio:.2f}x", "<= 2x" if at_top else "", ratio <= 2 if at_top else None))
        measured = row["explicit_measured"]
        explicit = (f"{mem['explicit']:.0f} MB" if measured else
                    f"skipped: would need {mem['explicit'] / 1024:.1f} GB")
        x = row["memory_explicit_over_bare"]
        rows.append((f"  explicit softmax L={L} memory", explicit, f"{mem['bare']:.0f} MB bare SDPA",
                     (f"{x:.1f}x" if x < 10 else f"{x:.0f}x") + ("" if measured else " (est.)"),
                     "> 100x" if at_top and measured else "", x > 100 if at_top and measured else None))
        if measured:
            rows.append((f"  explicit softmax L={L} time", _ms(t["explicit"]), f"{_ms(t['bare'])} bare SDPA",
                         f"{row['time_explicit_over_bare']:.2f}x", "", None))
    return rows


def training_rows(r: dict) -> list[Row]:
    t, s = r["timings_s_per_epoch"], r["speedup_labs_over_attnlab"]
    return [("default train epoch", _ms(t["attnlab"]), f"{_ms(t['labs'])} labs + book loop",
             f"{s:.2f}x faster", ">= 3x", s >= 3)]


def decoding_rows(r: dict) -> list[Row]:
    rows: list[Row] = []
    lengths = r.get("lengths", {})
    if "speedup_at_256" in r:
        t = lengths["256"]["timings_s"]
        rows.append(("greedy decode T=256, KV cache", _ms(t["cached"]), f"{_ms(t['full'])} full recompute",
                     f"{r['speedup_at_256']:.1f}x faster", ">= 10x", r["speedup_at_256"] >= 10))
    if "cached_step_growth_256_over_32" in r:
        g = r["cached_step_growth_256_over_32"]
        per_step = {T: lengths[T]["ms_per_step"]["cached"] for T in ("256", "32")}
        rows.append(("  cached ms/step, T=256 vs T=32", f"{per_step['256']:.3f} ms", f"{per_step['32']:.3f} ms at 32",
                     f"{g:.2f}x", "<= 1.5x", g <= 1.5))
    return rows


def long_context_rows(r: dict) -> list[Row]:
    rows: list[Row] = []
    for key, row in r["rows"].items():
        L, mode, name, backend = key.split(" ")
        if name == "none":
            continue
        label = f"{name} {L} {'fwd' if mode == 'forward' else 'fwd+bwd'}" + (" (flex)" if backend == "flex" else "")
        ratio = row["memory_over_none"]
        rows.append((f"{label} peak memory", f"{row['extra_peak_mb']:.0f} MB",
                     f"{row['extra_peak_mb'] / ratio:.0f} MB no position", f"{ratio:.2f}x", "<= 2x", ratio <= 2))
        compile_note = f", first call {_s(row['first_call_s'])}" if backend == "flex" else ""
        rows.append((f"  {label} time", _s(row["seconds"]) + compile_note,
                     f"{_s(row['seconds'] / row['time_over_none'])} no position",
                     f"{row['time_over_none']:.2f}x", "", None))
    for name, agree in r.get("agreement_at_4096", {}).items():
        worst = max(agree["output"], agree["input_grad"])
        rows.append((f"{name} L=4096 output, input grad vs dense", f"{worst:.1e}", "dense path", "", "<= 1e-5",
                     worst <= 1e-5))
        ours, dense = agree["param_grad_relative_to_float64"], agree["dense_param_grad_relative_to_float64"]
        rows.append((f"  {name} parameter grads vs float64", f"{ours:.1e} of their size", f"{dense:.1e} dense float32",
                     "", "<= 1e-5", ours <= 1e-5))
    return rows


# Rows for the benchmarks whose modules do not define summary() themselves.
SUMMARIES: dict[str, Callable[[dict], list[Row]]] = {
    "bench_attention": attention_rows,
    "bench_decoding": decoding_rows,
    "bench_long_context": long_context_rows,
    "bench_scaling": scaling_rows,
    "bench_sinusoidal": sinusoidal_rows,
    "bench_training": training_rows,
}


def discover() -> list[str]:
    return sorted(p.stem for p in HERE.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated names (attention, scaling, ...)")
    parser.add_argument("--skip", default="", help="comma-separated names to leave out")
    args = parser.parse_args(argv)
    only = {f"bench_{n}" for n in args.only.split(",") if n}
    skip = {f"bench_{n}" for n in args.skip.split(",") if n}
    rows: list[Row] = []
    failed = []
    for name in discover():
        if (only and name not in only) or name in skip:
            continue
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(name)
            main_fn = getattr(module, "main", None)
            if not callable(main_fn):
                print(f"{name}: no main(argv), skipped")
                continue
            result = main_fn([])
            summarise = getattr(module, "summary", None) or SUMMARIES.get(name)
            if summarise is None:
                rows.append((name, "see results/", "", "", "", None))
            else:
                rows.extend(summarise(result))
        except Exception:  # report and go on: one broken benchmark must not hide the others
            traceback.print_exc()
            failed.append(name)
            rows.append((name, "FAILED", "", "", "", False))
        print(f"({name}: {time.perf_counter() - t0:.0f} s)\n", flush=True)

    header: Row = ("figure", "attnlab", "peer", "ratio", "target", None)
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(5)]
    print(" | ".join(h.ljust(w) for h, w in zip(header[:5], widths, strict=True)) + " | met?")
    print("-+-".join("-" * w for w in widths) + "-+-----")
    for row in rows:
        met = "" if row[5] is None else ("yes" if row[5] else "NO")
        print(" | ".join(str(c).ljust(w) for c, w in zip(row[:5], widths, strict=True)) + f" | {met}")
    md = ["| figure | attnlab | peer | ratio | target | met? |", "|---|---|---|---|---|---|"]
    for row in rows:
        met = "" if row[5] is None else ("yes" if row[5] else "**no**")
        md.append("| " + " | ".join(str(c).strip() for c in row[:5]) + f" | {met} |")
    markdown = RESULTS / "summary.md"
    tmp = markdown.with_suffix(".tmp")
    tmp.write_text("\n".join(md) + "\n")  # the table BENCHMARKS.md shows, ready to paste
    tmp.replace(markdown)
    write_result("summary", {
        "description": "make bench: one row per figure",
        "columns": ["figure", "attnlab", "peer", "ratio", "target", "met"],
        "rows": [list(row) for row in rows],
        "failed": failed,
        "selection": {"only": sorted(only), "skip": sorted(skip)},
    })
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
