"""The papers' claims, checked the way each paper aggregates, on hand-made cells and records and on the papers'
own published cells. No model is trained here.

Expected reciprocal ranks and mean gains are worked out by hand below (fractions written out), never
pasted from the code's output.
"""

import pytest

from attnlab.labs.lengths import paper_claims
from attnlab.labs.lengths.claims import (
    COMPETENCE,
    Cell,
    check_preset,
    check_runs,
    published_cells,
    run_cells,
)
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.presets import check_claims, preset
from attnlab.labs.lengths.published import TABLES


def cell(task, encoding, exact=None, tokens=None, trained=1.0):
    return Cell(task, encoding, exact, tokens, trained, seeds=1)


def outcomes(name, cells):
    return [v.outcome for v in check_preset(preset(name), cells)]


# -- Kazemnejad et al.: the mean reciprocal rank over the tasks ------------------------


def test_the_papers_own_cells_reproduce_its_claims():
    # the acc table (exact match of the decoded answer, the metric the paper's figures plot), all 11 tasks
    chosen = preset("kazemnejad2023")
    cells = published_cells(chosen.published, metric=chosen.published_metric)
    assert {c.task for c in cells} == set(TABLES["kazemnejad2023"].tasks())
    verdicts = check_preset(chosen, cells)
    assert [v.outcome for v in verdicts] == ["reproduced"] * 3
    # NoPE first on copy-repeat, copy-repeat-2x, copy-repeat-change, reverse-random-2x, reverse-copy and addition,
    # third on copy-random, copy-random-2x and pcfg-productivity, second on reverse-random and scan:
    # (6 + 3 / 3 + 2 / 2) / 11 = 8 / 11 = 0.727
    assert "none 0.73" in verdicts[0].detail and "over 11 tasks" in verdicts[0].detail


def test_a_per_task_check_would_have_failed_the_papers_own_cells():
    # On copy-random T5 (42.0) and ALiBi (33.1) beat NoPE (30.5): a claim checked task by task fails there,
    # the paper's aggregate does not.
    chosen = preset("kazemnejad2023")
    copy = [c for c in published_cells(chosen.published, metric=chosen.published_metric) if c.task == "copy-random"]
    assert outcomes("kazemnejad2023", copy)[0] == "not reproduced"


def test_on_the_papers_figure_tasks_the_papers_cells_reproduce_its_claims():
    # The preset runs the tasks the paper's figure plots as "Copy" and "Reverse" (copy-repeat, reverse-random-2x):
    # NoPE first on both in the paper's own logs.
    chosen = preset("kazemnejad2023")
    assert chosen.tasks == ("copy-repeat", "reverse-random-2x")
    cells = [c for c in published_cells(chosen.published, metric=chosen.published_metric) if c.task in chosen.tasks]
    assert [v.outcome for v in check_preset(chosen, cells)] == ["reproduced"] * 3


def test_on_copy_random_reverse_random_and_scan_the_papers_cells_rank_t5_first():
    # copy-random, reverse-random and scan are three of the tasks where T5 leads in the paper's own logs:
    # T5 1 / 1 on each; NoPE 1/3, 1/2, 1/2 -> 4/9 = 0.44. A subset of tasks can reverse the paper's aggregate.
    chosen = preset("kazemnejad2023")
    tasks = ("copy-random", "reverse-random", "scan")
    cells = [c for c in published_cells(chosen.published, metric=chosen.published_metric) if c.task in tasks]
    nope, t5, common = check_preset(chosen, cells)
    assert nope.outcome == "not reproduced" and "t5 1.00, none 0.44" in nope.detail
    assert t5.outcome == "reproduced" and common.outcome == "reproduced"


def test_cells_that_contradict_the_paper_do_not_reproduce_it():
    chosen = preset("kazemnejad2023")
    cells = {(c.task, c.encoding): c for c in published_cells(chosen.published, metric=chosen.published_metric)}
    # NoPE's and APE's numbers swapped on every task: NoPE now ranks where APE did, last or next to last
    swapped = [Cell(task, {"none": "sinusoidal", "sinusoidal": "none"}.get(enc, enc), c.exact, c.tokens,
                    published=True) for (task, enc), c in cells.items()]
    nope, t5, common = check_preset(chosen, swapped)
    assert nope.outcome == "contradicted"
    assert common.outcome != "reproduced"  # "APE" now ranks with NoPE's old ranks, above T5
    # and a run where T5 is last everywhere contradicts "T5 best of the explicit"
    last = [cell(t, e, exact=v) for t in ("copy", "reverse") for e, v in
            (("none", 0.5), ("t5", 0.0), ("alibi", 0.3), ("rotary", 0.2), ("sinusoidal", 0.1))]
    assert outcomes("kazemnejad2023", last)[1] == "contradicted"


def test_mean_reciprocal_rank_by_hand_ties_share_their_ranks():
    cells = [cell("a", "none", 0.5, 0.9), cell("a", "t5", 0.3, 0.8), cell("a", "alibi", 0.3, 0.8),
             cell("b", "t5", 0.9, 0.9), cell("b", "alibi", 0.5, 0.9), cell("b", "none", 0.1, 0.9)]
    mrr, orders, dropped = paper_claims.mean_reciprocal_rank(cells)
    # a: none 1; t5 and alibi tie on both numbers at ranks 2-3 -> (1/2 + 1/3) / 2 = 5/12 each
    # b: t5 1, alibi 1/2, none 1/3
    assert mrr["none"] == pytest.approx((1 + 1 / 3) / 2, rel=1e-12)
    assert mrr["t5"] == pytest.approx((5 / 12 + 1) / 2, rel=1e-12)
    assert mrr["alibi"] == pytest.approx((5 / 12 + 1 / 2) / 2, rel=1e-12)
    assert orders == {"a": "none > t5 = alibi", "b": "t5 > alibi > none"} and dropped == []


def test_token_accuracy_breaks_ties_of_exact_match():
    # beyond training exact match is often 0 for every encoding: the tokens rank them
    cells = [cell("a", "none", 0.0, 0.6), cell("a", "t5", 0.0, 0.7), cell("a", "alibi", 0.0, 0.5)]
    mrr, orders, _ = paper_claims.mean_reciprocal_rank(cells)
    assert orders == {"a": "t5 > none > alibi"}
    assert (mrr["t5"], mrr["none"], mrr["alibi"]) == pytest.approx((1.0, 1 / 2, 1 / 3), rel=1e-12)


def test_a_single_task_says_its_aggregate_is_that_task_alone():
    cells = [cell("copy", e, v) for e, v in (("none", 0.9), ("t5", 0.5), ("alibi", 0.1))]
    verdicts = check_preset(preset("kazemnejad2023"), cells)
    assert verdicts[0].outcome == "reproduced"
    assert all("on the one task run, copy (the paper aggregates over all its tasks)" in v.detail for v in verdicts)


# -- competence before judgement ---------------------------------------------------------


def test_a_ranking_whose_encoding_did_not_learn_is_left_out_and_named():
    good = [cell("copy", e, v) for e, v in (("none", 0.9), ("t5", 0.5), ("alibi", 0.1))]
    # on reverse APE's... here ALiBi's models reached 50% tokens at the training length: not learned
    bad = [cell("reverse", "none", 0.0), cell("reverse", "t5", 0.9), cell("reverse", "alibi", 0.8, trained=0.5)]
    nope, _, _ = check_preset(preset("kazemnejad2023"), good + bad)
    assert nope.outcome == "reproduced"  # copy alone counts
    assert "over 1 of the 2 tasks run (copy)" in nope.detail
    assert "left out, not learned in distribution (token accuracy at the training length): alibi on reverse 50.0%" \
        in nope.detail


def test_a_claim_whose_baselines_did_not_learn_is_not_tested_never_not_reproduced():
    cells = [cell("copy", "none", 0.0, trained=0.3), cell("copy", "t5", 0.9), cell("copy", "alibi", 0.8)]
    verdicts = check_preset(preset("kazemnejad2023"), cells)
    expected = "not tested (did not learn: none on copy 30.0% at the training length)"
    assert [v.outcome for v in verdicts] == [expected] * 3
    # a run with no record at the training length: competence unknown, said so
    unknown = [cell("copy", "none", 0.9, trained=None), cell("copy", "t5", 0.1)]
    assert outcomes("kazemnejad2023", unknown)[0] == ("not tested (competence unknown: no record at the training "
                                                     "length for none on copy)")


def test_competence_is_the_named_threshold():
    assert COMPETENCE == 0.90
    assert Cell("t", "e", 0.0, 0.0, trained=0.90).learned() is True
    assert Cell("t", "e", 0.0, 0.0, trained=0.8999).learned() is False
    assert Cell("t", "e", 0.0, 0.0, trained=None).learned() is None
    assert Cell("t", "e", 0.5, None, published=True).learned() is True  # a paper's own number


# -- Ruoss et al.: the mean gain over tasks and pairs ------------------------------------


def ruoss_cells(gains, *, base=0.5, trained=1.0):
    """Token accuracy beyond training: ``base`` for a scheme, ``base + gain`` for its randomized version."""
    out = []
    for (task, scheme), g in gains.items():
        out += [cell(task, scheme, tokens=base, trained=trained), cell(task, f"random-{scheme}", tokens=base + g)]
    return out


# the paper's headline, +12.0 points on average, spread unevenly over 4 tasks and 2 schemes (and one loss)
HEADLINE = {("even-pairs", "rotary"): 0.30, ("even-pairs", "alibi"): 0.10, ("reverse-string", "rotary"): 0.20,
            ("reverse-string", "alibi"): -0.04, ("duplicate-string", "rotary"): 0.16,
            ("duplicate-string", "alibi"): 0.04, ("missing-duplicate", "rotary"): 0.12,
            ("missing-duplicate", "alibi"): 0.08}


def test_the_papers_headline_gain_reproduces_its_claim():
    # Table 1 of Ruoss et al. could not be read here (published.TABLES['ruoss2023'] has no cells): these cells
    # are built from the abstract's +12.0 points: (0.30 + 0.10 + 0.20 - 0.04 + 0.16 + 0.04 + 0.12 + 0.08) / 8
    assert TABLES["ruoss2023"].cells == {}
    assert sum(HEADLINE.values()) / len(HEADLINE) == pytest.approx(0.12, abs=1e-12)
    [verdict] = check_preset(preset("ruoss2023"), ruoss_cells(HEADLINE))
    assert verdict.outcome == "reproduced"
    assert "mean gain +12.0 points over 8 pair(s) over 4 tasks" in verdict.detail
    # the per-pair view: each scheme's mean over the tasks, then task by task
    assert "random-rotary vs rotary +19.5 points (even-pairs +30.0, reverse-string +20.0" in verdict.detail
    assert "random-alibi vs alibi +4.5 points" in verdict.detail


@pytest.mark.parametrize("shift, outcome", [
    (-0.17, "contradicted"),  # a mean gain of -5 points
    (-0.12, "not reproduced"),  # 0
    (-0.07, "partly reproduced (the direction, not the size)"),  # +5
])
def test_gains_that_contradict_the_paper_do_not_reproduce_it(shift, outcome):
    gains = {k: g + shift for k, g in HEADLINE.items()}
    assert outcomes("ruoss2023", ruoss_cells(gains)) == [outcome]


def test_a_pair_whose_baseline_did_not_learn_is_left_out():
    cells = ruoss_cells({("even-pairs", "rotary"): 0.12})
    cells += ruoss_cells({("even-pairs", "alibi"): -0.30}, trained=0.4)  # alibi never learned even-pairs
    [verdict] = check_preset(preset("ruoss2023"), cells)
    assert verdict.outcome == "reproduced" and "over 1 pair(s) on the one task run, even-pairs" in verdict.detail
    assert "alibi on even-pairs 40.0%" in verdict.detail
    only_bad = ruoss_cells({("even-pairs", "alibi"): 0.3}, trained=0.4)
    assert outcomes("ruoss2023", only_bad) == ["not tested (did not learn: alibi on even-pairs 40.0% at the "
                                               "training length)"]


def test_a_randomized_scheme_that_did_not_learn_still_counts():
    # the claim is about the randomized scheme: its failing is evidence, not a reason to look away
    cells = [cell("even-pairs", "rotary", tokens=0.8), cell("even-pairs", "random-rotary", tokens=0.5, trained=0.3)]
    assert outcomes("ruoss2023", cells) == ["contradicted"]


def test_ruoss_without_pairs_is_not_tested():
    assert outcomes("ruoss2023", [cell("even-pairs", "rotary", tokens=0.5)]) == ["not tested"]


# -- abacus: over the tasks -----------------------------------------------------------------


def test_abacus_aggregates_over_its_tasks():
    cells = [cell(t, e, exact=v, tokens=v) for t, row in
             (("reversed-addition", {"abacus": 0.9, "coupling": 0.8, "rotary": 0.1}),
              ("reversed-multiplication", {"abacus": 0.3, "coupling": 0.6, "rotary": 0.4})) for e, v in row.items()]
    # abacus (0.9 + 0.3) / 2 = 0.60, coupling 0.70, rotary 0.25: coupling beats rotary over the two tasks
    [verdict] = check_preset(preset("abacus2024"), cells)
    assert verdict.outcome == "reproduced" and "over 2 tasks" in verdict.detail
    assert "coupling 70.0% exact" in verdict.detail
    worse = [Cell(c.task, c.encoding, c.exact, c.tokens, c.trained) if c.encoding != "rotary"
             else Cell(c.task, c.encoding, 0.95, 0.95, 1.0) for c in cells]
    assert outcomes("abacus2024", worse) == ["contradicted"]


def test_abacus_leaves_out_what_did_not_learn():
    cells = [cell("reversed-addition", "abacus", 0.2, 0.2, trained=0.5), cell("reversed-addition", "rotary", 0.1, 0.1)]
    assert outcomes("abacus2024", cells) == ["not tested (did not learn: abacus on reversed-addition 50.0% at the "
                                             "training length)"]
    # the papers' own cells name no scheme that numbers tokens by order: nothing to compare with
    chosen = preset("abacus2024")
    assert outcomes("abacus2024", published_cells(chosen.published, metric=chosen.published_metric)) == ["not tested"]


# -- from records: the cells of a comparison ---------------------------------------------------


def records(table, train_len=8, longer=(12, 16)):
    """``{encoding: [(tokens at train_len, tokens beyond, exact beyond) per seed]}`` as records."""
    out = []
    for enc, seeds in table.items():
        for seed, (trained, tokens, exact) in enumerate(seeds):
            if trained is not None:
                out.append({"encoding": enc, "seed": seed, "length": train_len, "token_accuracy": trained,
                            "sequence_accuracy": trained})
            out += [{"encoding": enc, "seed": seed, "length": n, "token_accuracy": tokens,
                     "sequence_accuracy": exact} for n in longer]
    return out


CONFIG = CompareConfig(task="copy", train_len=8, test_lens=(8, 12, 16), encodings=("none", "t5"), d_model=16,
                       n_heads=2, n_layers=1)


def test_run_cells_take_the_mean_over_seeds_and_the_training_length():
    cells = run_cells(records({"none": [(1.0, 0.5, 0.2), (0.8, 0.3, 0.0)]}), CONFIG, metric="sequence_accuracy",
                      aggregate="mean")
    [c] = cells
    assert (c.task, c.encoding, c.seeds) == ("copy", "none", 2)
    assert (c.exact, c.tokens, c.trained) == pytest.approx((0.1, 0.4, 0.9), rel=1e-12)
    assert c.learned() is True  # the mean over seeds: 90%


def test_the_best_seed_is_the_best_of_those_that_learned():
    # seed 1 scores best beyond training but never learned the task: seed 0 is the claims' best seed
    table = {"rotary": [(0.95, 0.6, 0.0), (0.5, 0.9, 0.0)], "alibi": [(0.4, 0.7, 0.0), (0.6, 0.8, 0.0)]}
    cells = {c.encoding: c for c in run_cells(records(table), CONFIG, metric="token_accuracy", aggregate="best")}
    assert (cells["rotary"].tokens, cells["rotary"].trained) == (0.6, 0.95)
    # no seed learned: the best of all, which then says it did not learn
    assert (cells["alibi"].tokens, cells["alibi"].trained) == (0.8, 0.6) and cells["alibi"].learned() is False


def test_a_run_without_its_training_length_has_unknown_competence():
    cells = run_cells(records({"none": [(None, 0.5, 0.2)]}), CONFIG, metric="sequence_accuracy", aggregate="mean")
    assert cells[0].trained is None and cells[0].learned() is None


def test_run_cells_reject_what_they_cannot_mean():
    with pytest.raises(ValueError, match="aggregate must be 'mean' or 'best', got 'median'"):
        run_cells([], CONFIG, metric="token_accuracy", aggregate="median")
    with pytest.raises(ValueError, match="no test length exceeds train_len 8"):
        run_cells(records({"none": [(1.0, 0.5, 0.2)]}, longer=()), CONFIG, metric="token_accuracy", aggregate="mean")
    with pytest.raises(ValueError, match="metric must be 'exact_match' or 'token_accuracy', got 'bleu'"):
        published_cells({}, metric="bleu")


def test_check_claims_aggregates_over_every_comparison_of_a_suite():
    # two tasks: NoPE first on copy, T5 first on reverse; NoPE second on reverse with ALiBi third:
    # none (1 + 1/2) / 2 = 0.75, t5 (1/2 + 1) / 2 = 0.75: a tie, NoPE not above T5 -> not reproduced
    copy = records({"none": [(1.0, 0.9, 0.8)], "t5": [(1.0, 0.5, 0.4)], "alibi": [(1.0, 0.2, 0.1)]})
    reverse = records({"none": [(1.0, 0.5, 0.4)], "t5": [(1.0, 0.9, 0.8)], "alibi": [(1.0, 0.2, 0.1)]})
    config = CompareConfig(task="reverse", train_len=8, test_lens=(8, 12, 16), encodings=("none", "t5", "alibi"),
                           d_model=16, n_heads=2, n_layers=1)
    verdicts = check_claims("kazemnejad2023", [(copy, CONFIG), (reverse, config)])
    assert verdicts[0].outcome == "not reproduced" and "over 2 tasks (copy, reverse)" in verdicts[0].detail
    assert check_runs(preset("kazemnejad2023"), [(copy, CONFIG)])[0].outcome == "reproduced"
