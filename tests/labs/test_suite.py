"""A preset over several tasks: the aggregates beside the paper's cells, and a whole suite from the command line."""

import json

import pytest

from attnlab.labs.lengths.config import CompareConfig, CompareResult
from attnlab.labs.lengths.presets import preset
from attnlab.labs.lengths.suite import format_suite, suite_rows

from cli_helpers import cli


def result(task, scores, *, preset_name="kazemnejad2023", metric="sequence_accuracy"):
    """A comparison of ``task`` whose records give ``scores[enc]`` (one value per seed) at length 12, 1.0 at 8."""
    config = CompareConfig(task=task, encodings=tuple(scores), train_len=8, test_lens=(8, 12), d_model=16,
                           n_heads=2, n_layers=1, preset=preset_name,
                           protocol="kazemnejad2023" if preset_name == "kazemnejad2023" else "ruoss2023",
                           architecture="decoder-only" if preset_name == "kazemnejad2023" else "encoder-only")
    records = []
    for enc, values in scores.items():
        for seed, value in enumerate(values):
            records.append({"encoding": enc, "seed": seed, "length": 8, metric: 1.0, "token_accuracy": 1.0,
                            "sequence_accuracy": 1.0})
            records.append({"encoding": enc, "seed": seed, "length": 12, "token_accuracy": value,
                            "sequence_accuracy": value})
    return CompareResult(config, records, seconds=1.0)


def test_rows_hold_the_mean_the_best_seed_and_the_papers_cell():
    chosen = preset("kazemnejad2023")
    rows = suite_rows([result("copy-random", {"t5": [0.2, 0.6], "none": [0.1, 0.1]})], chosen)
    t5 = next(r for r in rows if r["encoding"] == "t5")
    assert t5["mean"] == pytest.approx(0.4) and t5["best"] == pytest.approx(0.6) and t5["seeds"] == 2
    assert t5["metric"] == "sequence_accuracy" and t5["paper_metric"] == chosen.published_metric
    assert t5["paper"] == pytest.approx(chosen.published["copy-random", "t5"])  # 54.9, from the authors' logs
    text = format_suite(rows, chosen)
    assert "40.0 (54.9)" in text  # Kazemnejad et al.'s aggregate is the mean over seeds
    assert "the mean over seeds" in text


def test_ruoss_aggregate_is_the_best_seed_and_the_average_is_over_tasks():
    chosen = preset("ruoss2023")
    rows = suite_rows([result("even-pairs", {"rotary": [0.5, 0.7]}, preset_name="ruoss2023"),
                       result("reverse-string", {"rotary": [0.6, 0.9]}, preset_name="ruoss2023")], chosen)
    assert all(r["metric"] == "token_accuracy" for r in rows)
    line = next(line for line in format_suite(rows, chosen).splitlines() if line.startswith("rotary"))
    assert line.split() == ["rotary", "70.0", "90.0", "80.0"]  # best seed per task, then their average
    assert "the best seed" in format_suite(rows, chosen)


@pytest.mark.training
def test_a_preset_of_several_tasks_runs_each_in_its_own_folder(capsys, tmp_path):
    out_dir = tmp_path / "kaz"
    code, out, err = cli(capsys, "compare", "--preset", "kazemnejad2023", "--encodings", "none,t5", "--seeds", "1",
                         "--epochs", "1", "--n-train", "32", "--n-test", "4", "--d-model", "8", "--n-heads", "2",
                         "--n-layers", "1", "--out", str(out_dir), "--jobs", "1", "--no-progress")
    assert code == 0, err
    assert "preset kazemnejad2023: 3 tasks (copy-random, reverse-random, scan), 6 models" in out
    suite = json.loads((out_dir / "suite.json").read_text())
    assert suite["tasks"] == ["copy-random", "reverse-random", "scan"] and suite["aggregate"] == "mean"
    assert {(r["task"], r["encoding"]) for r in suite["rows"]} == {
        (t, e) for t in suite["tasks"] for e in ("none", "t5")}
    assert all(r["metric"] == "sequence_accuracy" and r["paper"] is not None for r in suite["rows"])
    scan = json.loads((out_dir / "tasks" / "scan" / "results.json").read_text())
    assert scan["config"]["train_len"] == 25 and scan["config"]["protocol"] == "kazemnejad2023"  # SCAN's own split
    assert (out_dir / "suite.txt").read_text().startswith("preset kazemnejad2023")
    page = (out_dir / "report.html").read_text()
    assert "tasks/scan/report.html" in page and "copy-random" in page
