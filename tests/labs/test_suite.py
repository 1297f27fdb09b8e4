"""A preset over several tasks: the aggregates beside the paper's cells, and a whole suite from the command line."""

import json

import pytest

from attnlab.labs.lengths.config import CompareConfig, CompareResult
from attnlab.labs.lengths.presets import preset
from attnlab.labs.lengths.suite import format_suite, suite_rows, suite_verdicts

from cli_helpers import cli


def result(task, scores, *, preset_name="kazemnejad2023", metric="sequence_accuracy", trained=None):
    """A comparison of ``task`` whose records give ``scores[enc]`` (one value per seed) at length 12, and at the
    training length 8 ``trained[enc]`` (one value per seed; 1.0 where not given)."""
    config = CompareConfig(task=task, encodings=tuple(scores), train_len=8, test_lens=(8, 12), d_model=16,
                           n_heads=2, n_layers=1, preset=preset_name,
                           protocol="kazemnejad2023" if preset_name == "kazemnejad2023" else "ruoss2023",
                           architecture="decoder-only" if preset_name == "kazemnejad2023" else "encoder-only")
    records = []
    for enc, values in scores.items():
        for seed, value in enumerate(values):
            at_train = (trained or {}).get(enc, [1.0] * len(values))[seed]
            records.append({"encoding": enc, "seed": seed, "length": 8, "token_accuracy": at_train,
                            "sequence_accuracy": at_train})
            records.append({"encoding": enc, "seed": seed, "length": 12, "token_accuracy": value,
                            "sequence_accuracy": value})
    return CompareResult(config, records, seconds=1.0)


def test_rows_hold_the_mean_the_best_seed_and_the_papers_cell():
    chosen = preset("kazemnejad2023")
    rows = suite_rows([result("copy-random", {"t5-shared": [0.2, 0.6], "none": [0.1, 0.1]})], chosen)
    t5 = next(r for r in rows if r["encoding"] == "t5-shared")
    assert t5["mean"] == pytest.approx(0.4) and t5["best"] == pytest.approx(0.6) and t5["seeds"] == 2
    assert t5["metric"] == "sequence_accuracy" and t5["paper_metric"] == chosen.published_metric == "exact_match"
    assert t5["paper"] == pytest.approx(chosen.published["copy-random", "t5-shared"])  # 41.95, from the authors' logs
    text = format_suite(rows, chosen)
    assert "40.0 (41.9)" in text  # Kazemnejad et al.'s aggregate is the mean over seeds
    assert "the mean over seeds" in text


def test_rows_hold_the_numbers_in_distribution():
    chosen = preset("kazemnejad2023")
    rows = suite_rows([result("copy-random", {"t5-shared": [0.2, 0.6], "none": [0.1, 0.1]},
                              trained={"t5-shared": [1.0, 0.9], "none": [0.5, 0.7]})], chosen)
    t5, none = (next(r for r in rows if r["encoding"] == e) for e in ("t5-shared", "none"))
    # at the training length 8: the metric's mean over seeds and best seed, and token accuracy's mean
    assert (t5["train_len"], t5["train_mean"], t5["train_best"], t5["train_token_accuracy"]) == pytest.approx(
        (8, 0.95, 1.0, 0.95))
    assert t5["learned"] is True and none["learned"] is False  # none: 60% tokens at the training length
    text = format_suite(rows, chosen)
    header = next(line for line in text.splitlines() if line.startswith("encoding"))
    assert header.split() == ["encoding", "copy-random", "L=8", "copy-random", "L>8", "average"]
    # mean in distribution / token accuracy, then beyond (paper); none marked: the claims leave it out
    assert next(line for line in text.splitlines() if line.startswith("t5")).split() == [
        "t5-shared", "95.0", "/", "95", "40.0", "(41.9)", "40.0"]
    assert next(line for line in text.splitlines() if line.startswith("none")).split()[1:4] == ["60.0", "/", "60!"]
    assert "!: token accuracy there below 90%" in text


def test_ruoss_aggregate_is_the_best_seed_and_the_average_is_over_tasks():
    chosen = preset("ruoss2023")
    rows = suite_rows([result("even-pairs", {"rotary": [0.5, 0.7]}, preset_name="ruoss2023",
                              trained={"rotary": [1.0, 0.96]}),
                       result("reverse-string", {"rotary": [0.6, 0.9]}, preset_name="ruoss2023")], chosen)
    assert all(r["metric"] == "token_accuracy" for r in rows)
    line = next(line for line in format_suite(rows, chosen).splitlines() if line.startswith("rotary"))
    # per task: in distribution the mean over seeds / the best seed (token accuracy is the metric), then the best
    # seed beyond; then the average over tasks of the best seeds
    assert line.split() == ["rotary", "98.0", "/", "100.0", "70.0", "100.0", "/", "100.0", "90.0", "80.0"]
    assert "the best seed" in format_suite(rows, chosen)


def test_a_suite_checks_the_claims_over_all_its_tasks():
    chosen = preset("kazemnejad2023")
    encodings = ("none", "t5", "alibi")
    copy = result("copy-random", dict(zip(encodings, ([0.9], [0.5], [0.1]), strict=True)))
    reverse = result("reverse-random", dict(zip(encodings, ([0.5], [0.9], [0.1]), strict=True)))
    # NoPE 1 and 1/2, T5 1/2 and 1: the same MRR, 0.75: NoPE is not above T5 over the two tasks
    verdicts = suite_verdicts([copy, reverse], chosen)
    assert [v.outcome for v in verdicts] == ["not reproduced", "reproduced", "reproduced"]
    assert "over 2 tasks (copy-random, reverse-random)" in verdicts[0].detail
    text = format_suite(suite_rows([copy, reverse], chosen), chosen, verdicts=verdicts)
    assert "Claims, over the 2 tasks of the suite, each aggregated as its paper does:" in text
    assert "  not reproduced: NoPE outperforms the explicit positional encodings" in text
    # one task whose T5 did not learn: the claims resting on it are not tested
    untrained = result("copy-random", dict(zip(encodings, ([0.9], [0.5], [0.1]), strict=True)),
                       trained={"t5": [0.2]})
    assert suite_verdicts([untrained], chosen)[1].outcome == ("not tested (did not learn: t5 on copy-random 20.0% "
                                                              "at the training length)")


def chosen_table(name):
    return preset(name).protocol_table


@pytest.mark.training
def test_a_preset_of_several_tasks_runs_each_in_its_own_folder(capsys, tmp_path):
    out_dir = tmp_path / "kaz"
    code, out, err = cli(capsys, "compare", "--preset", "kazemnejad2023", "--encodings", "none,t5", "--seeds", "1",
                         "--epochs", "1", "--n-train", "32", "--n-test", "4", "--d-model", "8", "--n-heads", "2",
                         "--n-layers", "1", "--out", str(out_dir), "--jobs", "1", "--no-progress")
    assert code == 0, err
    assert "preset kazemnejad2023: 2 tasks (copy-repeat, reverse-random-2x), 4 models" in out
    assert "attnlab compare --preset kazemnejad2023 --settings" in out
    suite = json.loads((out_dir / "suite.json").read_text())
    assert suite["tasks"] == ["copy-repeat", "reverse-random-2x"] and suite["aggregate"] == "mean"
    # t5 runs as their T5, one table shared by every layer
    assert {(r["task"], r["encoding"]) for r in suite["rows"]} == {
        (t, e) for t in suite["tasks"] for e in ("none", "t5-shared")}
    assert all(r["metric"] == "sequence_accuracy" and r["paper"] is not None for r in suite["rows"])
    # the numbers in distribution beside them, and the claims over the two tasks
    assert all({"train_len", "train_mean", "train_best", "train_token_accuracy", "learned"} <= set(r)
               for r in suite["rows"])
    assert suite["competence"] == 0.9 and len(suite["claims"]) == 3
    assert all(set(c) == {"claim", "outcome", "detail"} for c in suite["claims"])
    assert "Claims, over the 2 tasks of the suite" in out
    # the preset's settings table, beside the paper's, in the files
    assert [row["what"] for row in suite["settings_table"]] == [r.what for r in chosen_table("kazemnejad2023")]
    assert "lab:   AdamW 3e-3" in (out_dir / "suite.txt").read_text()
    assert (out_dir / "suite.txt").read_text().startswith("preset kazemnejad2023")
    page = (out_dir / "report.html").read_text()
    assert "tasks/reverse-random-2x/report.html" in page and "copy-repeat" in page
    assert "The preset&#x27;s settings beside the paper&#x27;s" in page or "The preset's settings beside" in page
