"""Run the benchmarks (``make bench``) into ``results/latest/`` and print one table; or rebuild the table alone.

Every ``benchmarks/bench_*.py`` module with a ``main(argv) -> dict`` is discovered and run in name
order with no arguments; each writes its ``<name>.json`` (the script, machine, commit, torch
version, threads, min/median/max per figure) into ``results/latest/`` (``harness.writing_to``),
where a script a person runs directly writes into ``results/investigations/``. A run of every
benchmark (no ``--only``, no ``--skip``) first empties ``latest/``, so the folder holds exactly
what that run produced; with ``--only`` or ``--skip`` each benchmark run replaces just its own
files there. :data:`BY_HAND` names the benchmarks left out, and why.

A new ``bench_<name>.py`` needs no change here to run; for rows in the table, give it a
module-level ``summary(result) -> list[Row]`` or add a function to :data:`SUMMARIES` below (a
benchmark with neither gets one row naming its file). A module that raises is reported as
FAILED and the others still run; the exit status is then 1.

The table is built from the result files in the folder, each given to the summary of the script
its ``script`` field names, so it always describes the folder as it stands; it is printed and
written to ``latest/summary.json`` and, as Markdown, to ``latest/summary.md``. ``--summary``
rebuilds both from the files alone, running nothing (exit status 1 if a summary fails on its file).

Columns: figure, attnlab's value, the peer's value, the ratio, the target, met?

Run: ``python benchmarks/run.py [--only attention,scaling] [--skip training]``, or
``python benchmarks/run.py --summary``; ``--folder DIR`` reads and writes DIR instead of ``results/latest/``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import LATEST, write_result, writing_to  # noqa: E402

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


# Rows for the benchmarks whose modules do not define summary() themselves.
SUMMARIES: dict[str, Callable[[dict], list[Row]]] = {
    "bench_attention": attention_rows,
    "bench_decoding": decoding_rows,
    "bench_scaling": scaling_rows,
    "bench_sinusoidal": sinusoidal_rows,
    "bench_training": training_rows,
}


# Benchmarks that `make bench` leaves out, each needing an argument no default can stand for.
BY_HAND: dict[str, str] = {
    "bench_train_one": "needs --before SRC, the source of the commit to compare with",
}

SUMMARY_FILES = ("summary.json", "summary.md")


def discover() -> list[str]:
    """The benchmark modules' names, ``bench_*`` in this folder, in name order."""
    return sorted(p.stem for p in HERE.glob("bench_*.py"))


def result_files(folder: Path) -> list[tuple[Path, dict]]:
    """The result files in ``folder`` (its JSON files with a ``benchmark`` field, the table's own left out), read."""
    found = []
    for path in sorted(folder.glob("*.json")):
        if path.name in SUMMARY_FILES:
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "benchmark" in doc:
            found.append((path, doc))
    return found


def written_by(doc: dict) -> str | None:
    """The module name of the script a result file says wrote it (``bench_attention``), or None if it does not say."""
    script = doc.get("script")
    return Path(script).stem if script else None


def clear(folder: Path, *, only: str | None = None) -> None:
    """Delete ``folder``'s result files (those of benchmark ``only``, if given) and, for a whole clear, the table."""
    for path, doc in result_files(folder):
        if only is None or written_by(doc) == only:
            path.unlink()
    if only is None:
        for name in SUMMARY_FILES:
            (folder / name).unlink(missing_ok=True)


def table(folder: Path) -> tuple[dict[str, list[Row]], list[str], dict[str, dict]]:
    """The table's rows from ``folder``'s result files by benchmark, the files whose summary failed, each file's source.

    A file that does not say which script wrote it, or names one that is gone, or on which the
    script's summary raises, gives a FAILED row (with the traceback printed) and is listed as failed.
    """
    rows: dict[str, list[Row]] = {}
    failed: list[str] = []
    sources: dict[str, dict] = {}
    for path, doc in result_files(folder):
        machine = doc.get("machine", {})
        sources[path.name] = {"script": doc.get("script"), "commit": machine.get("commit"),
                              "uncommitted_changes": machine.get("uncommitted_changes"), "date": machine.get("date")}
        name = written_by(doc)
        if name is None:
            print(f"{path}: no 'script' field, so no summary applies (written before the harness recorded it)",
                  file=sys.stderr)
            rows.setdefault(path.stem, []).append((path.name, "FAILED: no 'script' field", "", "", "", False))
            failed.append(path.name)
            continue
        try:
            if not (HERE / f"{name}.py").exists():
                raise FileNotFoundError(f"{path.name} was written by {doc['script']}, which no longer exists")
            module = importlib.import_module(name)
            summarise = getattr(module, "summary", None) or SUMMARIES.get(name)
            if summarise is None:
                rows.setdefault(name, []).append((name, f"see {path.name}", "", "", "", None))
            else:
                rows.setdefault(name, []).extend(summarise(doc))
        except Exception:  # report and go on: one stale file or summary must not hide the others
            print(f"summary of {path} failed:", file=sys.stderr)
            traceback.print_exc()
            rows.setdefault(name, []).append((path.name, "FAILED: summary", "", "", "", False))
            failed.append(path.name)
    return rows, failed, sources


def write_table(folder: Path, rows: list[Row], *, failed: list[str], sources: dict[str, dict], ran: list[str]) -> None:
    """Print the table and write it to ``folder``'s ``summary.md`` (Markdown) and ``summary.json``."""
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
    markdown = folder / "summary.md"
    tmp = markdown.with_suffix(".tmp")
    tmp.write_text("\n".join(md) + "\n")  # the table BENCHMARKS.md shows, ready to paste
    tmp.replace(markdown)
    with writing_to(folder):
        write_result("summary", {
            "description": "make bench: one row per figure, from the result files in this folder",
            "columns": ["figure", "attnlab", "peer", "ratio", "target", "met"],
            "rows": [list(row) for row in rows],
            "failed": failed,
            "ran": ran,
            "sources": sources,
        })


def run(name: str, folder: Path) -> bool:
    """Run benchmark ``name`` with no arguments, its files replacing its earlier ones in ``folder``; True if it did."""
    print(f"== {name}", flush=True)
    t0 = time.perf_counter()
    clear(folder, only=name)
    try:
        module = importlib.import_module(name)
        main_fn = getattr(module, "main", None)
        if not callable(main_fn):
            raise TypeError(f"{name} has no main(argv)")
        with writing_to(folder):
            main_fn([])
        if not any(written_by(doc) == name for _, doc in result_files(folder)):
            raise RuntimeError(f"{name} wrote no result file")
        ok = True
    except (Exception, SystemExit):  # SystemExit too (an argparse error): one benchmark must not end make bench
        traceback.print_exc()
        ok = False
    print(f"({name}: {time.perf_counter() - t0:.0f} s)\n", flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated names to run (attention, scaling, ...)")
    parser.add_argument("--skip", default="", help="comma-separated names to leave out")
    parser.add_argument("--summary", action="store_true",
                        help="rebuild summary.md and summary.json from the folder's result files; run nothing")
    parser.add_argument("--folder", type=Path, default=LATEST, help="where results go and are read (results/latest/)")
    args = parser.parse_args(argv)
    known = discover()
    only = [f"bench_{n}" for n in args.only.split(",") if n]
    skip = [f"bench_{n}" for n in args.skip.split(",") if n]
    for name in only + skip:
        if name not in known:
            parser.error(f"no benchmark {name.removeprefix('bench_')!r}: one of "
                         + ", ".join(n.removeprefix("bench_") for n in known))
    for name in only:
        if name in BY_HAND:
            parser.error(f"{name} is run by hand, not by run.py: it {BY_HAND[name]}")
    if args.summary and (only or skip):
        parser.error("--summary runs nothing: leave out --only and --skip")
    folder = args.folder
    if args.summary and not folder.is_dir():
        parser.error(f"no folder {folder}")

    ran: list[str] = []
    broken: list[str] = []
    if not args.summary:
        folder.mkdir(parents=True, exist_ok=True)
        if not only and not skip:
            clear(folder)  # a whole run: the folder is to hold exactly what this run writes
        for name in known:
            if (only and name not in only) or name in skip:
                continue
            if name in BY_HAND:
                print(f"== {name}: left out, it {BY_HAND[name]}\n")
                continue
            ran.append(name)
            if not run(name, folder):
                broken.append(name)

    by_benchmark, failed, sources = table(folder)
    rows: list[Row] = []
    for name in sorted(set(by_benchmark) | set(broken)):
        if name in broken:
            rows.append((name, "FAILED", "", "", "", False))
        rows.extend(by_benchmark.get(name, []))
    write_table(folder, rows, failed=broken + failed, sources=sources, ran=ran)
    return 1 if broken or failed else 0


if __name__ == "__main__":
    sys.exit(main())
