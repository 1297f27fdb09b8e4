"""The benchmarks' result files and their table: ``benchmarks/harness.py`` and ``benchmarks/run.py --summary``.

``benchmarks/results/latest/summary.md`` is the table ``make bench`` printed. Rebuilt from the
committed result files beside it, running nothing, it must come out the same: so a summary
function cannot rot against the files it reads, and a result file cannot be committed without
its table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
LATEST = BENCHMARKS / "results" / "latest"

pytestmark = pytest.mark.process  # run.py and a probe script, each in a fresh interpreter


def python(*args: str) -> subprocess.CompletedProcess[str]:
    """Run this interpreter on ``args`` from the repository's root, with this tree's ``src`` first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                      if p))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def results_copy(folder: Path) -> list[Path]:
    """Copy the committed result files of ``latest/`` (not its table) into ``folder``; return the copies."""
    copies = [Path(shutil.copy(path, folder)) for path in sorted(LATEST.glob("*.json")) if path.name != "summary.json"]
    assert copies, f"no result files in {LATEST}"
    return copies


def test_summary_rebuilds_the_committed_table_from_the_committed_results(tmp_path):
    results_copy(tmp_path)
    done = python(str(BENCHMARKS / "run.py"), "--summary", "--folder", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "summary.md").read_text() == (LATEST / "summary.md").read_text(), (
        "benchmarks/results/latest/summary.md is not what its result files give: "
        "python benchmarks/run.py --summary")
    table = json.loads((tmp_path / "summary.json").read_text())
    assert table["failed"] == [] and table["ran"] == []
    assert set(table["sources"]) == {p.name for p in LATEST.glob("*.json")} - {"summary.json"}


@pytest.mark.parametrize(("name", "drop", "says"), [
    ("threads.json", "rows", "FAILED: summary"),  # a file its script's summary cannot read
    ("decoding.json", "script", "FAILED: no 'script' field"),  # a file that does not say who wrote it
])
def test_summary_fails_on_a_result_file_it_cannot_summarise(tmp_path, name, drop, says):
    results_copy(tmp_path)
    doc = json.loads((tmp_path / name).read_text())
    del doc[drop]
    (tmp_path / name).write_text(json.dumps(doc))
    done = python(str(BENCHMARKS / "run.py"), "--summary", "--folder", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert says in (tmp_path / "summary.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["failed"] == [name]


def test_write_result_names_the_script_and_the_commit_and_goes_where_it_is_sent(tmp_path):
    script = tmp_path / "bench_probe.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        "import harness\n"
        "assert harness.destination() == harness.INVESTIGATIONS\n"
        "with harness.writing_to(sys.argv[1]):\n"
        "    print(harness.write_result('probe', {'figure': 1.0}))\n"
        "assert harness.destination() == harness.INVESTIGATIONS\n")
    done = python(str(script), str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert doc["benchmark"] == "probe" and doc["script"] == "bench_probe.py" and doc["figure"] == 1.0
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert doc["machine"]["commit"] == head.stdout.strip()
    assert isinstance(doc["machine"]["uncommitted_changes"], bool)


GPU_CASES = ["attention", "bias", "rotary", "decoding", "lab"]


def test_gpu_script_runs_every_case_at_tiny_sizes_on_the_cpu(tmp_path):
    """``benchmarks/gpu.py`` (``make bench-gpu``) at toy sizes on the CPU: every case checks and times without error.

    The GPU's numbers come from a GPU; this keeps the script from rotting where there is none. Written to
    ``tmp_path``, never to the tracked ``benchmarks/results/gpu/``.
    """
    done = python(str(BENCHMARKS / "gpu.py"), "--device", "cpu", "--tiny", "--repeats", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "gpu.json").read_text())
    assert list(doc["cases"]) == GPU_CASES
    for name, case in doc["cases"].items():
        assert case["status"] == "ok", (name, case.get("error"), case.get("traceback"))
        assert case["checks"] and all(check["ok"] is not False for check in case["checks"]), (name, case["checks"])
        timed = [row for row in case["rows"] if row["timing"] is not None]
        assert timed and all(row["timing"]["repeats"] == 2 and row["timing"]["median_s"] > 0 for row in timed), name
        assert all(row["peak_mib"] is None for row in timed)  # no memory figure on the CPU
        assert [t for t in case["targets"] if t["value"] is not None] or name == "rotary", name
    ours = {row["impl"] for case in doc["cases"].values() for row in case["rows"] if row.get("ours")}
    assert {"attnlab MultiHeadAttention", "attnlab ALiBi", "attnlab Sandwich (README's user scheme)",
            "attnlab Rotary (half)", "attnlab generate (KV cache)", "one model", "group of 4"} <= ours
    machine = doc["machine"]
    assert machine["torch"] and machine["date"] and machine["gpu"] is None and "commit" in machine
    md = (tmp_path / "gpu.md").read_text()
    assert md.startswith("# attnlab on the GPU") and "## Targets" in md and "tiny sizes" in md
    assert all(case["title"] in md for case in doc["cases"].values())


def test_gpu_script_past_its_budget_records_what_it_skipped(tmp_path):
    done = python(str(BENCHMARKS / "gpu.py"), "--device", "cpu", "--tiny", "--cases", "attention,lab",
                  "--budget-s", "0", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "gpu.json").read_text())
    assert {name: case["status"] for name, case in doc["cases"].items()} == {"attention": "skipped", "lab": "skipped"}
    assert all("time budget" in case["reason"] for case in doc["cases"].values())
    assert "time budget" in (tmp_path / "gpu.md").read_text()
