"""The published numbers of the length-generalisation papers, each traced to where it was read.

A :class:`PublishedTable` is one paper's table as data: the accuracy per ``(task,
encoding)`` cell, in 0-1 (fractions, not percent), with what the number is (the
metric, how seeds and lengths were aggregated, the train and test lengths) and the
exact place it was read. :data:`TABLES` holds them by name and :func:`published_cell`
looks one cell up, ``None`` where the paper has no number.

Every number below was read from its source, never typed from memory:

* ``kazemnejad2023``: computed from the authors' released run logs (the repository
  McGill-NLP/length-generalization, commit 40f8a44): the mean over the paper's three
  seeds of each run's logged test accuracy (exact match of the decoded answer), the
  quantity the paper's own plotting notebooks read and its figures plot: the table the
  ``kazemnejad2023`` preset compares against. ``kazemnejad2023-seqacc`` is the same
  runs' token-level sequence accuracy, kept for reference.
* ``mcleish2024`` and ``cho2024``: the headline number of the abstract or of a figure
  caption; their per-length curves are figures, which could not be read as numbers.
* ``ruoss2023``: the paper's Table 1 could not be read where this module was written
  (the stored copies of the paper were cut before it), so the table has no cells yet;
  its notes say what is known and from where.

Names: encodings use attnlab's scheme names (:data:`attnlab.catalog.SCHEMES`, the
``random-`` prefix for Ruoss et al.'s randomized versions) and, for schemes attnlab
does not have, the names in :data:`EXTRA_ENCODINGS`; tasks are the names in :data:`TASKS`, which are
:data:`attnlab.catalog.TASKS`' names (what ``attnlab compare --task`` takes) but for :data:`EXTRA_TASKS`.

This module imports only the standard library: the command line can list the tables
without importing torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["ARITHMETIC_TASKS", "CHOMSKY_TASKS", "EXTRA_ENCODINGS", "EXTRA_TASKS", "KAZEMNEJAD_TASKS", "METRICS",
           "TABLES", "TASKS", "VALUE_KINDS", "PublishedTable", "published_cell"]

#: the 15 tasks of Deletang et al. 2023 that Ruoss et al. 2023 report (regular, context-free, context-sensitive).
CHOMSKY_TASKS: tuple[str, ...] = (
    "even-pairs", "modular-arithmetic", "parity-check", "cycle-navigation",
    "stack-manipulation", "reverse-string", "modular-arithmetic-brackets", "solve-equation",
    "duplicate-string", "missing-duplicate", "odds-first", "binary-addition", "binary-multiplication",
    "compute-sqrt", "bucket-sort",
)
#: Kazemnejad et al.'s tasks, named by what the model does (their data split in brackets):
#: copy-repeat (rsc: one token repeated, so the model counts), copy-repeat-2x (rsc2x: the repeat written twice),
#: copy-repeat-change (rdc: "replace a with b", one token repeated), copy-random (cmc: tokens drawn from 100),
#: copy-random-2x (cmc2x: the copy written twice), reverse-random (mc), reverse-random-2x (mc2x: the reversal twice),
#: reverse-copy (mcrv: the reversal, then the input again), scan (SCAN's length split, by output length),
#: pcfg-productivity (PCFG's productivity split, by number of functions), addition (most significant digit first).
KAZEMNEJAD_TASKS: tuple[str, ...] = (
    "copy-repeat", "copy-repeat-2x", "copy-repeat-change", "copy-random", "copy-random-2x",
    "reverse-random", "reverse-random-2x", "reverse-copy", "scan", "pcfg-productivity", "addition",
)
#: integer arithmetic written least significant digit first (the answer at least; see each table's notes).
ARITHMETIC_TASKS: tuple[str, ...] = ("reversed-addition", "reversed-multiplication")
#: every task name a table may use.
TASKS: tuple[str, ...] = CHOMSKY_TASKS + KAZEMNEJAD_TASKS + ARITHMETIC_TASKS
#: the tables' tasks that ``attnlab compare --task`` does not run (yet): PCFG's productivity split. Every other
#: name in :data:`TASKS` is one of :data:`attnlab.catalog.TASKS`, so that a preset run finds its published cells.
EXTRA_TASKS: tuple[str, ...] = ("pcfg-productivity",)

#: the papers' encodings that attnlab has no scheme for: none now. Ruoss et al.'s "relative" (Transformer-XL's, not
#: Shaw et al.'s clipped vectors, attnlab's "relative") is attnlab's "transformer-xl" and "random-transformer-xl",
#: McLeish et al.'s Abacus embeddings its "abacus", Cho et al.'s position coupling its "coupling".
EXTRA_ENCODINGS: tuple[str, ...] = ()

#: token_accuracy: the fraction of output tokens right; exact_match: the fraction of answers right in full.
METRICS: tuple[str, ...] = ("token_accuracy", "exact_match")
#: value: the number as published (rounded as the source rounds it); approximate: a rounded headline ("up to 99%");
#: lower_bound: the source says "more than" this.
VALUE_KINDS: tuple[str, ...] = ("value", "approximate", "lower_bound")


@dataclass(frozen=True)
class PublishedTable:
    """One paper's published numbers, and what they are.

    Attributes:
        citation: the paper (authors, year, title, venue, arXiv id).
        source: where each number was read: a table or figure of the paper, or a file of the authors' release.
        metric: one of :data:`METRICS`.
        aggregate: in words, how one cell comes from runs: seeds, learning rates, test lengths.
        lengths: the training lengths and the test lengths the numbers are at.
        cells: ``{(task, encoding): value in 0-1}`` (read-only; empty where nothing could be traced).
        notes: the protocol (steps, batch, model), caveats, and the paper's other numbers worth knowing.
        value_kind: one of :data:`VALUE_KINDS`, for every cell of the table.

    Raises:
        ValueError: if a text field is empty, ``metric`` or ``value_kind`` is not a known one, a key of ``cells``
            is not a ``(task, encoding)`` pair with a task in :data:`TASKS`, or a value is not a fraction in [0, 1].
        TypeError: if ``cells`` is not a mapping.
    """

    citation: str
    source: str
    metric: str
    aggregate: str
    lengths: str
    cells: Mapping[tuple[str, str], float]
    notes: str = ""
    value_kind: str = "value"

    def __post_init__(self) -> None:
        for name in ("citation", "source", "aggregate", "lengths"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if self.value_kind not in VALUE_KINDS:
            raise ValueError(f"value_kind must be one of {VALUE_KINDS}, got {self.value_kind!r}")
        if not isinstance(self.cells, Mapping):
            raise TypeError(f"cells must be a mapping (task, encoding) -> value, got {type(self.cells).__name__}")
        for key, value in self.cells.items():
            if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)):
                raise ValueError(f"cells keys must be (task, encoding) pairs of strings, got {key!r}")
            if key[0] not in TASKS:
                raise ValueError(f"cells task {key[0]!r} is not one of attnlab.labs.lengths.published.TASKS")
            # bool is an int; a percent (54.9) or a NaN is the mistake this catches
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0 \
                    or math.isnan(value):
                raise ValueError(f"cells[{key!r}] must be a fraction in [0, 1], got {value!r}")
        # frozen is not enough: a dict would still take new cells, so the table holds a read-only view of a copy
        object.__setattr__(self, "cells", MappingProxyType(dict(self.cells)))

    def tasks(self) -> tuple[str, ...]:
        """The tasks with at least one cell, in :data:`TASKS` order."""
        present = {task for task, _ in self.cells}
        return tuple(t for t in TASKS if t in present)

    def encodings(self) -> tuple[str, ...]:
        """The encodings with at least one cell, in the order the table lists them."""
        return tuple(dict.fromkeys(enc for _, enc in self.cells))


def _grid(encodings: tuple[str, ...], rows: dict[str, tuple[float, ...]]) -> dict[tuple[str, str], float]:
    """``{(task, encoding): value}`` from one row of values per task, in the order of ``encodings``."""
    cells = {}
    for task, values in rows.items():
        if len(values) != len(encodings):
            raise ValueError(f"row {task!r} has {len(values)} values for {len(encodings)} encodings")
        cells.update({(task, enc): v for enc, v in zip(encodings, values, strict=True)})
    return cells


# -- Ruoss et al. 2023 -----------------------------------------------------------------

RUOSS2023 = PublishedTable(
    citation="Ruoss, Deletang, Genewein, Grau-Moya, Csordas, Bennani, Legg, Veness 2023, Randomized Positional "
             "Encodings Boost Length Generalization of Transformers (ACL 2023, arXiv:2305.16843)",
    source="Table 1 of arXiv:2305.16843 (the main results: 15 tasks x none, sin/cos, relative (Transformer-XL), "
           "RoPE, ALiBi, learned, and the randomized version of each); not yet read into this table",
    metric="token_accuracy",
    aggregate="not traced here: the aggregate is stated in the caption of Table 1 and in the experimental-setup "
              "section, which could not be read where this table was written",
    lengths="not traced from the paper; the released example (google-deepmind/randomized_positional_encodings "
            "@e8c6474, experiments/example.py) trains on lengths 1-40 (sequence_length=40, a uniform curriculum "
            "over 1..40) and evaluates every length 1-100 (max_range_test_length=100)",
    cells={},
    notes="No cells: the stored copies of the paper that could be searched (ar5iv, a SPIQA LaTeX dump, paper "
          "summaries) hold only the pages' beginnings, and no repository holds the table (the released repository's "
          "README has no results, its overview.png is the method's diagram); fill the cells from Table 1 of the PDF "
          "(percent / 100), with the caption's aggregate. Traced from the released code (@e8c6474): the metric is "
          "the per-token accuracy of the output, masked to the answer tokens (experiments/example.py accuracy_fn: "
          "sum(mask * accuracy) / sum(mask)), averaged per test length (experiments/range_evaluation.py: 512 "
          "sequences per length in sub-batches of 64); the example's defaults are an encoder-only Transformer, 5 "
          "layers, width 64, dropout 0.1, NOISY_RELATIVE with noise_max_length 2048, batch 128, 10,000 steps, "
          "learning rate 1e-3, seed 0 (defaults of one example, not necessarily the paper's runs). The randomized "
          "encodings draw sorted positions from [0, noise_max_length) with no training/evaluation switch "
          "(models/positional_encodings.py noisy_fixed_positional_encodings), so positions are randomized at "
          "test time too, as the authors confirm in the repository's issue #1 ('Yes, we also randomize at test "
          "time'). Encoding names for the cells: none, sinusoidal, transformer-xl, rotary, alibi, learned, and "
          "random-<each>. The abstract's headline: 'increasing test accuracy by 12.0% on average' over 6000 "
          "models and 15 tasks.",
)


# -- Kazemnejad et al. 2023 ------------------------------------------------------------

_KAZEMNEJAD_CITATION = ("Kazemnejad, Padhi, Natesan Ramamurthy, Das, Reddy 2023, The Impact of Positional Encoding "
                        "on Length Generalization in Transformers (NeurIPS 2023, arXiv:2305.19466)")
# their APE is pe_abs_sin (sinusoidal), their NoPE pe_none
_KAZEMNEJAD_ENCODINGS = ("none", "t5", "alibi", "rotary", "sinusoidal")
_KAZEMNEJAD_LENGTHS = (
    "copy-* and reverse-*: trained on lengths up to 20 (the validation split holds 2-20), tested on 21-40, 500 "
    "examples per length (10,000); scan: trained on outputs of at most 25 actions, tested on SCAN's length-split "
    "examples with 26-48 (3,136); pcfg-productivity: trained on at most 8 functions, tested on 9-35 (11,333); "
    "addition: trained with both operands of at most 8 digits, tested where either has 9-16 digits")
_KAZEMNEJAD_PROTOCOL = (
    "One setting for every encoding (the logged configs, as the paper's Appendix D.2 lists them): a decoder-only "
    "model of T5-base's sizes (109,607,040 trainable parameters logged), AdamW, learning rate 3e-5 (the paper "
    "found no difference over 1e-5, 3e-5, 5e-5), weight decay 0.05, batch 64, polynomial decay with 6% warm-up, "
    "40,000 steps (pcfg-productivity: 60,000; 100,000 for none), greedy decoding; 100,000 training examples per "
    "task. Seeds 146317, 234054, 256788. Figure 1's mean "
    "reciprocal rank over the 17 no-scratchpad dataset splits and 3 seeds (notebooks/plot_aggregate_final.ipynb, "
    "cell 24 output): none 0.686928, t5 0.549020, alibi 0.502288, rotary 0.329739, sinusoidal 0.215359; each "
    "split and seed is one ranking of the five encodings by output_acc over the whole test set (cell 16: pandas "
    "rank, method 'first'), the reciprocal ranks averaged per encoding, the pcfg productivity split and SCAN's "
    "len_tr25_ts48 split left out (cells 23-24). The paper's section 4 (read in a section-by-section transcript, "
    "viktor-shcherb/msc_thesis, references/2023-12-positional-encoding-length-generalization) reports, after Liang "
    "et al. 2022, the encodings' mean ranking against each other over all tasks and scenarios (Figures 1 and 2), "
    "and says that in most extrapolation scenarios T5's bias outperforms the other explicit encodings, ALiBi sits "
    "in the middle and APE and rotary generalise poorly. The "
    "paper's Figure 3 plots copy-repeat as 'Copy' and reverse-random-2x as 'Reverse' "
    "(notebooks/plot_showcase_final.ipynb, main_show_conf).")

KAZEMNEJAD2023 = PublishedTable(
    citation=_KAZEMNEJAD_CITATION,
    source="the authors' released run logs, McGill-NLP/length-generalization @40f8a44: results/sanity_check.jsonl "
           "(copy-*, reverse-*) and results/classic.jsonl (scan: split mdlen_tr25_ts48; pcfg-productivity: split "
           "md_productivity), field sum__pred/test_acc_overall of the three job_type 'best_run_seed_exp' runs of "
           "each run_group; addition (s2s_addition, len_tr8_ts16, no scratchpad): the per-seed values printed in "
           "notebooks/plot_aggregate_final.ipynb, cell 24 output (the table behind Figure 1)",
    metric="exact_match",
    aggregate="mean over 3 seeds (one run each, one learning rate) of the fraction of test answers whose decoded "
              "string equals the reference (src/analyzers/seq2seq_analyzer.py: pooled over every test example; "
              "copy and reverse have the same number per length, so this is also the mean over lengths 21-40); "
              "the quantity the paper's figures plot (the notebooks' 'output_acc'); rounded to 4 decimals",
    lengths=_KAZEMNEJAD_LENGTHS,
    cells=_grid(_KAZEMNEJAD_ENCODINGS, {
        #                       none    t5      alibi   rotary  sinusoidal
        "copy-repeat":         (0.9856, 0.7712, 0.2893, 0.0002, 0.0000),
        "copy-repeat-2x":      (0.9736, 0.5577, 0.1936, 0.0000, 0.0000),
        "copy-repeat-change":  (0.9672, 0.9390, 0.1697, 0.0157, 0.0000),
        "copy-random":         (0.3054, 0.4195, 0.3310, 0.0114, 0.0277),
        "copy-random-2x":      (0.4307, 0.5239, 0.5692, 0.0427, 0.0395),
        "reverse-random":      (0.2301, 0.2423, 0.1709, 0.0774, 0.0230),
        "reverse-random-2x":   (0.4732, 0.4484, 0.1947, 0.0534, 0.0110),
        "reverse-copy":        (0.1822, 0.1400, 0.1152, 0.0000, 0.0002),
        "scan":                (0.7973, 0.7985, 0.4381, 0.2829, 0.0569),
        "pcfg-productivity":   (0.4332, 0.4388, 0.4281, 0.4387, 0.3665),
        "addition":            (0.0845, 0.0721, 0.0775, 0.0004, 0.0044),
    }),
    notes=_KAZEMNEJAD_PROTOCOL + " The math tasks other than addition (sorting, summation, parity, polynomial "
          "evaluation, LEGO) are in results/scratchpad_f.jsonl, which the stored snapshot lacks (over 4 MiB).",
)

KAZEMNEJAD2023_SEQACC = PublishedTable(
    citation=_KAZEMNEJAD_CITATION,
    source="the same runs as kazemnejad2023 (McGill-NLP/length-generalization @40f8a44, results/sanity_check.jsonl "
           "and results/classic.jsonl), field sum__pred/test_seq_acc",
    metric="exact_match",
    aggregate="mean over the same 3 seeds of the trainer's sequence accuracy: the fraction of generated test "
              "answers whose token ids all equal the reference's (src/data/s2s_dl_factory.py "
              "padded_sequence_accuracy), pooled over the test set; rounded to 4 decimals",
    lengths=_KAZEMNEJAD_LENGTHS,
    cells=_grid(_KAZEMNEJAD_ENCODINGS, {
        #                       none    t5      alibi   rotary  sinusoidal
        "copy-repeat":         (0.9898, 0.7742, 0.2901, 0.0002, 0.0000),
        "copy-repeat-2x":      (0.9784, 0.5611, 0.1950, 0.0000, 0.0000),
        "copy-repeat-change":  (0.9672, 0.9390, 0.1697, 0.0157, 0.0000),
        "copy-random":         (0.3930, 0.5489, 0.4271, 0.0154, 0.0337),
        "copy-random-2x":      (0.4307, 0.5239, 0.5692, 0.0427, 0.0395),
        "reverse-random":      (0.2301, 0.2423, 0.1709, 0.0774, 0.0230),
        "reverse-random-2x":   (0.4732, 0.4484, 0.1947, 0.0534, 0.0110),
        "reverse-copy":        (0.1822, 0.1400, 0.1152, 0.0000, 0.0002),
        "scan":                (0.7973, 0.7985, 0.4381, 0.2829, 0.0569),
        "pcfg-productivity":   (0.4332, 0.4388, 0.4281, 0.4387, 0.3665),
    }),
    notes="Token-level exact match, closer to attnlab's sequence_accuracy than the string match of kazemnejad2023. "
          "The two agree except on copy-repeat, copy-repeat-2x and copy-random (by up to 13 points, t5 on "
          "copy-random); the logs do not say why. These copy-random values are the ones the issue quoted "
          "(t5 54.9, alibi 42.7, none 39.3, sinusoidal 3.4, rotary 1.5). " + _KAZEMNEJAD_PROTOCOL,
)


# -- McLeish et al. 2024 ---------------------------------------------------------------

MCLEISH2024 = PublishedTable(
    citation="McLeish, Bansal, Stein, Jain, Kirchenbauer, Bartoldson, Kailkhura, Bhatele, Geiping, Schwarzschild, "
             "Goldstein 2024, Transformers Can Do Arithmetic with the Right Embeddings (NeurIPS 2024, "
             "arXiv:2405.17399)",
    source="the abstract: 'training on only 20 digit numbers with a single GPU for one day, we can reach "
           "state-of-the-art performance, achieving up to 99% accuracy on 100 digit addition problems'",
    metric="exact_match",
    aggregate="the best model's accuracy on 100-digit additions ('up to 99%'); accuracy counts an answer right "
              "only if every token up to EOS equals the reference (mcleish7/arithmetic @86022a5, "
              "arithmetic_eval_quicker.py)",
    lengths="trained on additions of operands with 1-20 digits; tested on 100-digit operands",
    cells={("reversed-addition", "abacus"): 0.99},
    value_kind="approximate",
    notes="The abstract does not say which model reaches 99% (the paper combines Abacus embeddings with input "
          "injection and looped, recurrent layers); the per-length results for Abacus, FIRE, NoPE and RoPE are "
          "figures (accuracy grids over operand lengths), not read as numbers here. From the released shells "
          "(shells/addition_ff.sh): the data '+_bucket_method_n_20_m_20_20000000_p_00_reverse_all' (20M examples, "
          "operands up to 20 digits, operands and answer written least significant digit first), 16 layers, "
          "width 1024, feed-forward 2048, learning rate 1e-4, a 24-hour budget, loss masked before '='; encodings "
          "compared there: NoPE, FIRE, Abacus, Abacus + FIRE, Abacus + RoPE. README: the addition evaluation is a "
          "100 x 100 grid of operand lengths, then operand lengths 100-160.",
)


# -- Cho et al. 2024 -------------------------------------------------------------------

CHO2024 = PublishedTable(
    citation="Cho, Cha, Awasthi, Bhojanapalli, Gupta, Yun 2024, Position Coupling: Improving Length Generalization "
             "of Arithmetic Transformers Using Task Structure (NeurIPS 2024, arXiv:2405.20671)",
    source="the caption of Figure 1: 'With our proposed position coupling, we achieve more than 95% exact-match "
           "accuracy for up to 200-digit additions with decoder-only Transformers trained on up to 30-digit "
           "additions' (markers: medians over experiments)",
    metric="exact_match",
    aggregate="median over runs (Figure 3's caption: median over 8 runs; the released eval script runs seeds 0-3 x "
              "data seeds 0-1) of the exact-match accuracy at each operand length; the value is a lower bound for "
              "every operand length up to 200",
    lengths="trained on operands of 1-30 digits; tested on operand lengths up to 200 (the released eval script: "
            "5-200 in steps of 5)",
    cells={("reversed-addition", "coupling"): 0.95},
    value_kind="lower_bound",
    notes="The input format: the answer reversed (least significant digit first), the operands zero-padded to the "
          "same length, as in Lee et al. 2024; the operands are not reversed (configs/task/addition_coupled.yaml: "
          "reverse_input False, reverse_output True, padding True). The abstract: trained on 1- to 30-digit "
          "additions, 'can generalize up to 200-digit additions (6.67x of the trained length)'. The baselines of "
          "Figure 1 (NoPE, APE with a random start, index hinting) are curves, not read as numbers here. From the "
          "released scripts (HanseulJo/position-coupling @b9cad94, scripts/addition/run_coupling.sh, "
          "eval_coupling.sh): 1 layer, 4 heads, width 1024, feed-forward 2048, RMSNorm, gated GELU, learned "
          "absolute embeddings over the coupled position IDs (max position 202 at evaluation), 100,000 training "
          "examples, batch 1000, 50,000 steps, learning rate 1e-4, no weight decay; the NoPE baseline "
          "(run_NoPE.sh): 6 layers, 8 heads, 1M examples, learning rate 3e-5.",
)


#: the tables by name.
TABLES: Mapping[str, PublishedTable] = MappingProxyType({
    "ruoss2023": RUOSS2023,
    "kazemnejad2023": KAZEMNEJAD2023,
    "kazemnejad2023-seqacc": KAZEMNEJAD2023_SEQACC,
    "mcleish2024": MCLEISH2024,
    "cho2024": CHO2024,
})


def published_cell(table: str | PublishedTable, task: str, encoding: str) -> float | None:
    """The published value of one cell, or ``None`` where the paper has no number for it.

    Args:
        table: a name in :data:`TABLES` or a :class:`PublishedTable`.
        task: a task name (see :data:`TASKS`).
        encoding: an encoding name (attnlab's, or one of :data:`EXTRA_ENCODINGS`).

    Returns:
        The value in 0-1 (read the table's ``value_kind``: a lower bound is not a value), or ``None``.

    Raises:
        ValueError: if ``table`` is a name not in :data:`TABLES`.
        TypeError: if ``table`` is neither, or ``task`` or ``encoding`` is not a string.
    """
    if isinstance(table, str):
        if table not in TABLES:
            raise ValueError(f"table must be one of {tuple(TABLES)}, got {table!r}")
        table = TABLES[table]
    elif not isinstance(table, PublishedTable):
        raise TypeError(f"table must be a table name or a PublishedTable, got {type(table).__name__}")
    for name, value in (("task", task), ("encoding", encoding)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    return table.cells.get((task, encoding))
