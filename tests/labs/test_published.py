"""The published tables: their structure, their names, and spot values checked against the sources' own numbers."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from attnlab import catalog
from attnlab.labs.lengths import presets, published
from attnlab.labs.lengths.published import TABLES, PublishedTable, published_cell

# every encoding a table may name: attnlab's schemes, its randomized ones, and the papers' own ones
_ENCODINGS = set(catalog.SCHEMES) | set(catalog.RANDOMIZED) | set(published.EXTRA_ENCODINGS)


def _mean4(*seeds: float) -> float:
    """The mean over seeds, rounded as the tables round (4 decimals)."""
    return round(sum(seeds) / len(seeds), 4)


def test_the_four_papers_are_there() -> None:
    assert {"ruoss2023", "kazemnejad2023", "mcleish2024", "cho2024"} <= set(TABLES)


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_says_what_its_numbers_are(name: str) -> None:
    table = TABLES[name]
    for text in (table.citation, table.source, table.aggregate, table.lengths):
        assert text.strip()
    assert table.metric in published.METRICS
    assert table.value_kind in published.VALUE_KINDS


@pytest.mark.parametrize("name", list(TABLES))
def test_every_cell_is_a_fraction_with_known_names(name: str) -> None:
    for (task, encoding), value in TABLES[name].cells.items():
        assert task in published.TASKS, task
        assert encoding in _ENCODINGS, encoding
        assert 0.0 <= value <= 1.0, (task, encoding, value)


@pytest.mark.parametrize("name", list(TABLES))
def test_every_task_of_every_table_is_a_catalog_task_or_a_documented_extra(name: str) -> None:
    # a table's task names are what `attnlab compare --task` takes, so that a run finds its cells
    for task in TABLES[name].tasks():
        assert task in catalog.TASKS or task in published.EXTRA_TASKS, (name, task)


def test_the_extra_tasks_are_not_catalog_tasks_and_are_table_tasks() -> None:
    assert not set(published.EXTRA_TASKS) & set(catalog.TASKS)
    assert set(published.EXTRA_TASKS) <= set(published.TASKS)
    assert set(published.TASKS) - set(published.EXTRA_TASKS) <= set(catalog.TASKS)


# the tables each preset's published cells come from, and how the preset names the tables' encodings
_PRESET_TABLES = {"ruoss2023": ("ruoss2023",), "kazemnejad2023": ("kazemnejad2023",),
                  "abacus2024": ("mcleish2024", "cho2024")}
_PRESET_NAMES = {"kazemnejad2023": {"rotary": "rotary-quarter", "t5": "t5-shared"}}


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_every_preset_task_with_a_published_number_finds_it_through_the_preset(name: str) -> None:
    chosen = presets.preset(name)
    base = name.removesuffix("-full")
    rename = _PRESET_NAMES.get(base, {})
    for task in {*chosen.tasks, *catalog.TASKS}:
        for table in _PRESET_TABLES[base]:
            for (cell_task, enc), value in TABLES[table].cells.items():
                if cell_task == task:
                    assert chosen.published[task, rename.get(enc, enc)] == value, (name, task, enc)
    assert all(task in catalog.TASKS or task in published.EXTRA_TASKS for task, _ in chosen.published), name


def test_the_kazemnejad_preset_compares_against_the_plotted_metric() -> None:
    # exact match of the decoded answer (the acc table), not the token-level seq_acc table
    chosen = presets.preset("kazemnejad2023")
    assert chosen.published_source == TABLES["kazemnejad2023"].source
    assert chosen.published["copy-random", "none"] == published_cell("kazemnejad2023", "copy-random", "none") == 0.3054
    assert chosen.published["copy-random", "t5-shared"] == 0.4195  # 0.5489 in the seqacc table
    # `--preset kazemnejad2023 --task copy-repeat-change` finds its number: the catalog's name for rdc
    assert chosen.published["copy-repeat-change", "none"] == 0.9672
    assert chosen.published["reverse-copy", "t5-shared"] == 0.1400
    assert "kazemnejad2023-seqacc" in TABLES  # kept for reference


def test_the_extra_encodings_are_not_attnlab_schemes() -> None:
    # a paper's name that attnlab already has would be two names for one scheme
    assert not set(published.EXTRA_ENCODINGS) & (set(catalog.SCHEMES) | set(catalog.RANDOMIZED))


def test_the_task_lists_do_not_overlap() -> None:
    assert len(published.TASKS) == len(set(published.TASKS))
    assert len(published.CHOMSKY_TASKS) == 15


def test_kazemnejad_is_a_full_grid_of_five_encodings() -> None:
    for name in ("kazemnejad2023", "kazemnejad2023-seqacc"):
        table = TABLES[name]
        assert table.encodings() == ("none", "t5", "alibi", "rotary", "sinusoidal")
        assert len(table.cells) == 5 * len(table.tasks())


def test_kazemnejad_spot_values_are_the_seed_means_of_the_logs() -> None:
    # per-seed sum__pred/test_acc_overall of the best_run_seed_exp runs (seeds 256788, 234054, 146317), read from
    # McGill-NLP/length-generalization results/sanity_check.jsonl and results/classic.jsonl
    assert published_cell("kazemnejad2023", "copy-random", "t5") == _mean4(0.435, 0.4082, 0.4154)
    assert published_cell("kazemnejad2023", "reverse-random", "none") == _mean4(0.2187, 0.2355, 0.236)
    assert published_cell("kazemnejad2023", "scan", "rotary") == _mean4(0.3052, 0.2105, 0.3329)
    # addition, no scratchpad: notebooks/plot_aggregate_final.ipynb, cell 24's printed table (No PE row; seeds
    # 146317, 234054, 256788)
    assert published_cell("kazemnejad2023", "addition", "none") == _mean4(0.0694, 0.0726, 0.1115)


def test_kazemnejad_seqacc_holds_the_issues_copy_numbers() -> None:
    # sum__pred/test_seq_acc of the copy cmc_tr20_ts40 runs (sanity_check.jsonl); the issue quoted 54.9 and 1.5
    assert published_cell("kazemnejad2023-seqacc", "copy-random", "t5") == _mean4(0.5692, 0.5342, 0.5433)
    assert round(100 * published_cell("kazemnejad2023-seqacc", "copy-random", "t5"), 1) == 54.9
    assert round(100 * published_cell("kazemnejad2023-seqacc", "copy-random", "rotary"), 1) == 1.5
    # where the two metrics agree in the logs (reverse, SCAN), the tables agree cell for cell
    seqacc = TABLES["kazemnejad2023-seqacc"].cells
    for key, value in TABLES["kazemnejad2023"].cells.items():
        if key[0] in ("reverse-random", "reverse-random-2x", "reverse-copy", "scan", "pcfg-productivity"):
            assert seqacc[key] == value, key


def test_the_arithmetic_headlines() -> None:
    # McLeish et al.'s abstract: "up to 99% accuracy on 100 digit addition problems"
    assert published_cell("mcleish2024", "reversed-addition", "abacus") == 0.99
    assert TABLES["mcleish2024"].value_kind == "approximate"
    # Cho et al.'s Figure 1 caption: "more than 95% exact-match accuracy for up to 200-digit additions"
    assert published_cell("cho2024", "reversed-addition", "coupling") == 0.95
    assert TABLES["cho2024"].value_kind == "lower_bound"


def test_ruoss_has_no_cells_until_table_1_is_read() -> None:
    assert TABLES["ruoss2023"].cells == {}
    assert published_cell("ruoss2023", "duplicate-string", "random-rotary") is None


def test_a_cell_the_paper_does_not_have_is_none() -> None:
    assert published_cell("kazemnejad2023", "copy-random", "fire") is None
    assert published_cell(TABLES["cho2024"], "reversed-multiplication", "coupling") is None


def test_published_cell_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="table must be one of"):
        published_cell("ruoss", "scan", "none")
    with pytest.raises(TypeError, match="table"):
        published_cell(3, "scan", "none")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="encoding"):
        published_cell("kazemnejad2023", "scan", None)  # type: ignore[arg-type]


def _table(**changes: object) -> PublishedTable:
    fields: dict[str, object] = {"citation": "c", "source": "s", "metric": "exact_match", "aggregate": "a",
                                 "lengths": "l", "cells": {("scan", "none"): 0.5}}
    fields.update(changes)
    return PublishedTable(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("changes", "error", "match"), [
    ({"cells": {("scan", "none"): 54.9}}, ValueError, "fraction"),  # a percent
    ({"cells": {("scan", "none"): float("nan")}}, ValueError, "fraction"),
    ({"cells": {("scan", "none"): True}}, ValueError, "fraction"),
    ({"cells": {("copy", "none"): 0.5}}, ValueError, "task 'copy'"),
    ({"cells": {"scan": 0.5}}, ValueError, "pairs"),
    ({"cells": [("scan", 0.5)]}, TypeError, "mapping"),
    ({"metric": "accuracy"}, ValueError, "metric"),
    ({"value_kind": "upper"}, ValueError, "value_kind"),
    ({"source": " "}, ValueError, "source"),
])
def test_a_table_rejects_what_it_cannot_mean(changes: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _table(**changes)


def test_cells_are_read_only_and_copied() -> None:
    given = {("scan", "none"): 0.5}
    table = _table(cells=given)
    given[("scan", "t5")] = 0.7
    assert ("scan", "t5") not in table.cells
    with pytest.raises(TypeError):
        table.cells[("scan", "t5")] = 0.7  # type: ignore[index]


def test_the_module_imports_only_the_standard_library() -> None:
    # the command line lists tables without torch: every import of the module's own source must be stdlib
    tree = ast.parse(Path(published.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    assert roots, "the parse found no import at all"
    assert roots <= set(sys.stdlib_module_names) | {"__future__"}, roots - set(sys.stdlib_module_names)
