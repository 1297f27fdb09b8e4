"""The length-generalisation lab's report from hand-made records: chance, the table's marks and ranges,
a preset's claims, results.json and report.html. No model is trained here.

The chance levels are checked against the guessing formula written out below; the
expected marks, ranges and verdicts are worked out by hand from the records.
"""

import dataclasses
import json
import math

import pytest

from attnlab.labs.lengths import presets
from attnlab.labs.lengths.compare import CompareResult
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.report import chance_level, claim_verdicts, format_table, write_outputs
from attnlab.labs.run_folder import claim

KAZEMNEJAD = ("none", "t5", "alibi", "rotary", "sinusoidal")


def config(**kwargs):
    """A small comparison's settings (the default model sizes; nothing is trained)."""
    return CompareConfig(**{"encodings": ("none", "rotary"), "n_seeds": 2, "train_len": 4, "test_lens": (4, 8),
                            **kwargs})


def records(table, *, metric="sequence_accuracy", others=None):
    """Records from ``{encoding: {length: [value per seed]}}``; ``others`` fills the other accuracy."""
    other = {"sequence_accuracy": "token_accuracy", "token_accuracy": "sequence_accuracy"}[metric]
    out = []
    for enc, by_len in table.items():
        for n, values in by_len.items():
            for seed, v in enumerate(values):
                fill = v if others is None else others[enc][n][seed]
                out.append({"encoding": enc, "seed": seed, "length": n, metric: v, other: fill})
    return out


def body(text):
    """The table's lines after its explanation, split into words: ``{first word: rest}``."""
    lines = text.split("\n\n")[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("encoding "))
    return {line.split()[0]: line.split()[1:] for line in lines[start:]}


# -- chance ----------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "architecture", "n_symbols", "test_lens", "target"), [
    ("reverse", "decoder-only", 10, (4, 8), lambda n: n),
    ("copy", "encoder-only", 2, (4, 6, 9), lambda n: n),
    ("duplicate", "encoder-decoder", 3, (3, 5), lambda n: 2 * n),  # the target is the source twice
])
def test_chance_is_uniform_guessing(task, architecture, n_symbols, test_lens, target):
    c = config(task=task, architecture=architecture, n_symbols=n_symbols, test_lens=test_lens)
    # guessing each of the k symbols with probability 1/k: a token is right with 1/k,
    # a whole target of T symbols with (1/k)**T, averaged over the test lengths
    k = float(n_symbols)
    assert chance_level(c, "token_accuracy") == pytest.approx(1.0 / k, rel=1e-12)
    expected = math.fsum((1.0 / k) ** target(n) for n in test_lens) / len(test_lens)
    assert chance_level(c, "sequence_accuracy") == pytest.approx(expected, rel=1e-12)


def test_the_squares_have_no_chance_level():
    c = config(task="squares", train_len=3, test_lens=(3, 5))
    assert chance_level(c, "mean_squared_error") is None
    with pytest.raises(ValueError, match="metric 'token_accuracy': the squares are scored by mean_squared_error"):
        chance_level(c, "token_accuracy")
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        chance_level(c, "bleu")


def test_the_chance_row_is_per_length():
    c = config(n_symbols=2, test_lens=(4, 8))
    result = CompareResult(c, records({"none": {4: [1.0, 1.0], 8: [0.1, 0.2]},
                                       "rotary": {4: [1.0, 1.0], 8: [0.3, 0.2]}}), seconds=1.0)
    # 2 symbols: a sequence of 4 by chance 1/16 = 6.25%, of 8 1/256 = 0.39%; a token 50%
    assert body(format_table(result))["chance"] == ["6.2", "/", "50", "0.4", "/", "50"]


# -- the table: ranges and marks --------------------------------------------------------


def test_cells_show_mean_and_min_max_range():
    c = config(encodings=("none", "rotary", "alibi"), n_seeds=3)
    seq = {"none": {4: [0.2, 0.5, 0.9], 8: [0.0, 0.0, 0.012]},
           "rotary": {4: [1.0, 1.0, 1.0], 8: [0.0, 0.004, 0.004]},
           "alibi": {4: [0.5, 0.5, 0.5], 8: [0.0, 0.0, 0.0]}}
    tok = {"none": {4: [0.5, 0.6, 0.7], 8: [0.3, 0.3, 0.3]},
           "rotary": {4: [1.0, 1.0, 1.0], 8: [0.2, 0.2, 0.2]},
           "alibi": {4: [0.9, 0.9, 0.9], 8: [0.1, 0.1, 0.1]}}
    text = format_table(CompareResult(c, records(seq, others=tok), seconds=1.0))
    assert "cells: sequence accuracy % mean [min-max over 3 seeds] / token accuracy % mean" in text
    rows = body(text)
    # none at 4: mean 53.3, range 20-90; at 8: mean 0.4 (0.012 / 3), max 1.2 -> 1
    assert rows["none"] == ["53.3", "[20-90]", "/", "60", "0.4", "[0-1]", "/", "30*"]
    # rotary at 8: mean 0.27 -> 0.3, max 0.4 rounds to 0: widened to 1 so that it holds 0.3
    assert rows["rotary"] == ["100.0", "[100-100]", "/", "100*", "0.3", "[0-1]", "/", "20"]
    assert rows["alibi"] == ["50.0", "[50-50]", "/", "90", "0.0", "[0-0]", "/", "10"]


def test_one_seed_shows_no_range():
    c = config(n_seeds=1)
    text = format_table(CompareResult(c, records({"none": {4: [0.5], 8: [0.25]}, "rotary": {4: [0.75], 8: [0.0]}}),
                                      seconds=1.0))
    assert "cells: sequence accuracy % / token accuracy % (one seed)" in text
    rows = body(text)
    assert rows["none"] == ["50.0", "/", "50", "25.0", "/", "25*"]  # the mark ends the cell
    assert rows["rotary"] == ["75.0", "/", "75*", "0.0", "/", "0"]
    assert not any("[" in cell for row in rows.values() for cell in row)


def test_the_best_encoding_per_length_is_marked_and_ties_are_all_marked():
    c = config(encodings=("none", "rotary", "alibi", "t5"), n_seeds=1, test_lens=(4, 8, 12, 16))
    seq = {"none": {4: [1.0], 8: [0.5], 12: [0.1], 16: [0.5004]},
           "rotary": {4: [1.0], 8: [0.5], 12: [0.1], 16: [0.5001]},  # 50.0 as printed, like none's 50.04
           "alibi": {4: [1.0], 8: [0.25], 12: [0.1], 16: [0.3]},
           "t5": {4: [1.0], 8: [0.0], 12: [0.1], 16: [0.0]}}
    tok = {"none": {4: [1.0], 8: [0.9], 12: [0.6], 16: [0.9]},
           "rotary": {4: [1.0], 8: [0.9], 12: [0.8], 16: [0.9]},
           "alibi": {4: [1.0], 8: [0.9], 12: [0.8], 16: [0.9]},
           "t5": {4: [1.0], 8: [0.5], 12: [0.2], 16: [0.5]}}
    text = format_table(CompareResult(c, records(seq, others=tok), seconds=1.0))
    assert "*: the best encoding at that length, as printed (ties all marked; none where all are equal)" in text
    marked = {enc: [cell.endswith("*") for cell in row if cell != "/" and not cell.startswith("[")][1::2]
              for enc, row in body(text).items() if enc not in ("encoding", "chance")}
    # token means after each sequence mean: the flags are on those (the last word of a cell)
    # L=4: everyone ties -> no mark; L=8: none and rotary tie on 50.0% and 90 -> both;
    # L=12: every sequence ties at 10.0%, tokens break it: rotary and alibi on 80;
    # L=16: 50.04% and 50.01% both print 50.0 (and 90) -> a tie, both marked
    assert marked == {"none": [False, True, False, True], "rotary": [False, True, True, True],
                      "alibi": [False, False, True, False], "t5": [False, False, False, False]}


def test_the_squares_mark_the_lowest_error():
    c = config(task="squares", encodings=("none", "rotary"), train_len=3, test_lens=(3, 5))
    mse = [{"encoding": enc, "seed": s, "length": n, "mean_squared_error": v}
           for enc, n, vals in [("none", 3, (0.5, 0.25)), ("none", 5, (2.0, 1.0)),
                                ("rotary", 3, (0.5, 0.25)), ("rotary", 5, (1.0, 1.0))]
           for s, v in enumerate(vals)]
    rows = body(format_table(CompareResult(c, mse, seconds=1.0)))
    assert rows["none"] == ["0.375", "[0.25-0.5]", "1.5", "[1-2]"]
    assert rows["rotary"] == ["0.375", "[0.25-0.5]", "1", "[1-1]*"]  # a tie at 3 (no mark), the lower at 5
    assert "chance" not in rows


# -- a preset run: its metric, L>N, the paper's numbers, the claims ---------------------


def kazemnejad(test_lens=(4, 8), encodings=KAZEMNEJAD):
    return config(preset="kazemnejad2023", task="copy", encodings=encodings, test_lens=test_lens)


# beyond training (length 8), exact match: none worst, t5 best, the rest level
MIXED = {"none": [0.0, 0.0], "t5": [0.6, 0.5], "alibi": [0.1, 0.1], "rotary": [0.1, 0.1], "sinusoidal": [0.1, 0.1]}


def preset_records(beyond):
    return records({enc: {4: [1.0, 1.0], 8: v} for enc, v in beyond.items()})


def claim_lines(text):
    return [line.strip() for line in text.split("Claims, on ")[1].splitlines()[1:]]


def test_a_preset_run_prints_each_claim_with_its_outcome():
    result = CompareResult(kazemnejad(), preset_records(MIXED), seconds=1.0)
    text = format_table(result)
    claims = [c.text for c in presets.KAZEMNEJAD2023.claims]
    # ranked on the one task by exact match beyond training: t5 first, alibi, rotary and sinusoidal level (they
    # share ranks 2-4, (1/2 + 1/3 + 1/4) / 3 = 0.36 each), none last (1/5): NoPE's MRR the lowest:
    # contradicted; T5's above every other explicit one: reproduced; the common ones above NoPE but below T5:
    # not reproduced
    lines = claim_lines(text)
    assert len(lines) == 3
    for line, outcome, words in zip(lines, ("contradicted", "reproduced", "not reproduced"), claims, strict=True):
        assert line.startswith(f"{outcome}: {words} — "), line
    # the detail: the lab's numbers behind the outcome, and over what they are aggregated
    assert "mean reciprocal rank on the one task run, copy (the paper aggregates over all its tasks): t5 1.00, " \
           "alibi 0.36, rotary 0.36, sinusoidal 0.36, none 0.20" in lines[1]
    assert "copy t5 > alibi = rotary = sinusoidal > none" in lines[1]
    assert "Claims, on sequence accuracy beyond the training length (the mean over seeds of the mean over the " \
           "lengths), on this task alone; models below 90% token accuracy at the training length are left out" in text
    assert f"Preset kazemnejad2023: {presets.KAZEMNEJAD2023.paper}."[:60] in text
    assert "The paper's setup: train lengths 2-20 (SCAN: up to 22 actions); test lengths 21-40" in text
    assert "This run: decoder-only, 2 layers x 64 wide x 4 heads; train lengths 1-4; tests at 4, 8" in text


def test_level_encodings_reproduce_nothing():
    level = {enc: [0.2, 0.2] for enc in KAZEMNEJAD}  # every difference within the margin: no claim holds
    lines = claim_lines(format_table(CompareResult(kazemnejad(), preset_records(level), seconds=1.0)))
    assert [line.split(":")[0] for line in lines] == ["not reproduced"] * 3


def test_claims_need_a_test_length_beyond_training():
    result = CompareResult(kazemnejad(test_lens=(4,)), records({enc: {4: [1.0, 1.0]} for enc in KAZEMNEJAD}),
                           seconds=1.0)
    verdicts = claim_verdicts(result)
    assert [v.outcome for v in verdicts] == ["not tested"] * 3
    assert all("no test length exceeds train_len 4" in v.detail for v in verdicts)
    text = format_table(result)
    assert claim_lines(text)[0].startswith("not tested: NoPE outperforms")
    assert "L>4" not in text  # no longer test length: no column of them


def test_a_run_whose_models_did_not_learn_judges_no_claim():
    # token accuracy 50% at the training length for every encoding: no verdict on generalisation
    result = CompareResult(kazemnejad(), records({enc: {4: [0.5, 0.5], 8: v} for enc, v in MIXED.items()}),
                           seconds=1.0)
    verdicts = claim_verdicts(result)
    named = "not tested (did not learn: none on copy 50.0%, t5 on copy 50.0%"
    assert all(v.outcome.startswith(named) for v in verdicts)
    assert not any("not reproduced" in v.outcome or v.outcome == "contradicted" for v in verdicts)
    assert claim_lines(format_table(result))[0].startswith("not tested (did not learn: ")


def test_a_run_without_the_encodings_a_claim_needs_does_not_test_it():
    result = CompareResult(kazemnejad(encodings=("alibi", "rotary")),
                           preset_records({"alibi": [0.1, 0.1], "rotary": [0.0, 0.0]}), seconds=1.0)
    assert [v.outcome for v in claim_verdicts(result)] == ["not tested"] * 3
    assert claim_verdicts(CompareResult(config(), preset_records({"none": [0, 0], "rotary": [0, 0]}), 1.0)) == []


def test_a_preset_table_shows_its_metric_and_the_mean_beyond_training():
    text = format_table(CompareResult(kazemnejad(test_lens=(4, 8, 12)), records(
        {enc: {4: [1.0, 1.0], 8: [v, v], 12: [0.0, v / 2]} for enc, v in
         [("none", 0.4), ("t5", 0.2), ("alibi", 0.0), ("rotary", 0.0), ("sinusoidal", 0.0)]}), seconds=1.0))
    assert "copy, decoder-only, preset kazemnejad2023: trained on lengths up to 4" in text
    assert "cells: sequence accuracy % mean [min-max over 2 seeds]\n" in text  # the preset's metric alone
    rows = body(text)
    assert rows["encoding"] == ["L=4", "(train)", "L=8", "L=12", "L>4"]
    # at the training length, token accuracy after the slash: whether the models learned the task
    # none beyond 4: seed 0 (0.4 + 0) / 2 = 0.2, seed 1 (0.4 + 0.2) / 2 = 0.3 -> 25.0 [20-30]
    assert rows["none"] == ["100.0", "[100-100]", "/", "100", "40.0", "[40-40]*", "10.0", "[0-20]*", "25.0",
                            "[20-30]*"]
    assert "(train): / token accuracy % mean, the models learned the task where at least 90%" in text
    assert rows["t5"][-2:] == ["12.5", "[10-15]"]
    assert "paper" not in text.split("\n\n")[0]  # nothing published: no column, no noise


def test_published_numbers_are_printed_beside_the_lab_s(monkeypatch):
    known = dataclasses.replace(presets.KAZEMNEJAD2023, published={("copy", "none"): 0.581, ("reverse", "t5"): 0.9})
    monkeypatch.setitem(presets.PRESETS, "kazemnejad2023", known)
    rows = body(format_table(CompareResult(kazemnejad(), preset_records(MIXED), seconds=1.0)))
    assert rows["encoding"][-2:] == ["L>4", "paper"]
    assert rows["none"][-1] == "58.1"  # copy's number for none, and no other: t5's is for reverse
    assert rows["t5"][-2:] == ["55.0", "[50-60]*"]


# -- the run folder: results.json and report.html ----------------------------------------


@pytest.mark.training
def test_results_json_has_chance_and_claims(tmp_path):
    result = CompareResult(kazemnejad(), preset_records(MIXED), seconds=1.0,
                           seconds_per_model={f"{e}/{s}": 1.0 for e in KAZEMNEJAD for s in (0, 1)})
    with claim(tmp_path / "run", kind="compare", resume=False) as run:
        figures = write_outputs(run, result)
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    # 10 symbols; exact match of 4 or 8 symbols by chance: 1e-4, 1e-8, averaged
    assert doc["chance"] == {"sequence_accuracy": pytest.approx((1e-4 + 1e-8) / 2, rel=1e-12),
                             "token_accuracy": pytest.approx(0.1, rel=1e-12)}
    assert [c["outcome"] for c in doc["claims"]] == ["contradicted", "reproduced", "not reproduced"]
    assert [c["claim"] for c in doc["claims"]] == [c.text for c in presets.KAZEMNEJAD2023.claims]
    assert all(set(c) == {"claim", "outcome", "detail"} and c["detail"] for c in doc["claims"])
    assert [p.name for p in figures] == ["accuracy.png", "tokens.png"]
    report = (tmp_path / "run" / "report.html").read_text()
    assert "These settings start from the preset kazemnejad2023" in report
    assert "<li><b>contradicted</b>: NoPE outperforms the explicit positional encodings" in report
    assert report.index("<ul>") < report.index("<pre>") < report.index('alt="accuracy"')  # list, table, figures
    assert "L=4 (train)" in report


@pytest.mark.training
def test_results_json_of_a_run_without_preset(tmp_path):
    c = config(architecture="encoder-only", n_symbols=4)
    seq = {"none": {4: [1.0, 0.9], 8: [0.1, 0.0]}, "rotary": {4: [1.0, 1.0], 8: [0.0, 0.0]}}
    result = CompareResult(c, records(seq), seconds=1.0,
                           seconds_per_model={f"{e}/{s}": 1.0 for e in ("none", "rotary") for s in (0, 1)})
    with claim(tmp_path / "run", kind="compare", resume=False) as run:
        write_outputs(run, result)
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    assert doc["chance"] == {"sequence_accuracy": pytest.approx((0.25**4 + 0.25**8) / 2, rel=1e-12),
                             "token_accuracy": 0.25}
    assert "claims" not in doc
    report = (tmp_path / "run" / "report.html").read_text()
    assert "encoder-only Transformer (2 layers) that writes the answer into empty slots" in report
    assert "2+2 layers" not in report
    for line in format_table(result).splitlines():
        assert line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in report
