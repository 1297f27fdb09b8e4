"""Published setups of the length-generalisation literature, scaled to this lab, and their claims checked.

``attnlab compare --preset NAME`` starts from one of :data:`PRESETS`: the paper's
tasks (one comparison each: :mod:`attnlab.labs.lengths.suite`), protocol
(:mod:`attnlab.labs.lengths.protocols`), architecture, encodings, metric and aggregate,
with its sizes and training scaled down to run on two CPU cores in the time the preset
states (every setting can still be overridden on the command line, and ``--quick``
scales it further). The report prints the paper's numbers cell by cell beside the lab's
and says, claim by claim, whether this run reproduced it (:func:`check_claims`). Each
has a ``-full`` version at the paper's size, meant for a cluster (``--ray``).

* ``ruoss2023``: Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
  Generalization of Transformers" (ACL, arXiv:2305.16843; code:
  google-deepmind/randomized_positional_encodings). Chomsky-hierarchy tasks; an
  encoder-only Transformer writes the answer into empty slots; fresh strings of one
  length per step; each scheme against its randomized version; masked token accuracy
  beyond the training length, the best seed (the paper's aggregate) and the mean.
* ``kazemnejad2023``: Kazemnejad et al. 2023, "The Impact of Positional Encoding on
  Length Generalization in Transformers" (NeurIPS, arXiv:2305.19466; code:
  McGill-NLP/length-generalization). Copy, reverse and SCAN; a decoder-only
  Transformer, NoPE against T5's bias, ALiBi, their quarter rotary and absolute
  sinusoids (their "APE"); exact match of the whole answer, the mean of 3 seeds.
* ``abacus2024``: McLeish et al. 2024 (Abacus) and Cho et al. 2024 (position
  coupling): reversed-digit addition, digits numbered by significance beside the
  schemes that number tokens by order.

Published numbers (:mod:`attnlab.labs.lengths.published`, each traced to a table, a
figure caption or the authors' released logs) sit in :attr:`Preset.published`; a cell
no source could be found for is absent, never typed from memory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from attnlab._validate import check_choice
from attnlab.labs.lengths.claims import Claim, Preset, Setting, Verdict, check_runs
from attnlab.labs.lengths.paper_claims import (
    common_worst,
    nope_best,
    ruoss_mean_gain,
    structure_best,
    t5_best_explicit,
)
from attnlab.labs.lengths.published import TABLES

__all__ = ["PRESETS", "Claim", "Preset", "Setting", "Verdict", "check_claims", "format_settings", "preset"]


def _at_paper_size(table: tuple[Setting, ...], changes: dict[str, tuple[str, str]]) -> tuple[Setting, ...]:
    """A preset's settings table with the rows ``changes`` names given a new lab value and status."""
    unknown = set(changes) - {row.what for row in table}
    assert not unknown, f"no such rows: {sorted(unknown)}"
    return tuple(replace(row, lab=changes[row.what][0], status=changes[row.what][1]) if row.what in changes else row
                 for row in table)


# -- Ruoss et al. 2023 -----------------------------------------------------------------

# The paper's schemes (its "relative" is Transformer-XL's), each beside its randomized version.
_RUOSS_ENCODINGS = ("none", "sinusoidal", "random-sinusoidal", "transformer-xl", "random-transformer-xl", "rotary",
                    "random-rotary", "alibi", "random-alibi", "learned", "random-learned")
# The default grid, cut to fit 45 minutes on 2 cores: three of the paper's schemes and their randomized versions
# (rotary, the fourth, cost as much as sinusoidal's pair; it runs with --encodings or in ruoss2023-full).
_RUOSS_DEFAULT = ("sinusoidal", "random-sinusoidal", "transformer-xl", "random-transformer-xl", "alibi",
                  "random-alibi")
_RUOSS_TABLE = TABLES["ruoss2023"]

_RUOSS_CODE = "google-deepmind/randomized_positional_encodings@e8c6474"

RUOSS2023_TABLE = (
    Setting("tasks", "reverse-string, duplicate-string (ruoss2023-full: all 15)",
            "the 15 tasks of the Chomsky hierarchy", f"{_RUOSS_CODE} experiments/constants.py (TASK_BUILDERS)",
            "scaled"),
    Setting("encodings", "sinusoidal, Transformer-XL's relative, ALiBi, each beside its randomized version "
            "(rotary with --encodings)",
            "none, sin/cos, relative (Transformer-XL's), rotary, ALiBi, learned, each beside its randomized version",
            f"the paper, Table 1; {_RUOSS_CODE} models/positional_encodings.py:31-41", "scaled"),
    Setting("architecture", "encoder-only, the answer written into empty slots in one pass",
            "transformer_encoder with empty targets", f"{_RUOSS_CODE} experiments/example.py:49, 98", "same"),
    Setting("layers x width x heads", "5 x 64 x 8", "5 x 64 x 8",
            f"{_RUOSS_CODE} experiments/example.py:69-70; models/transformer.py:37-41", "same"),
    Setting("feed-forward", "256, ReLU", "4 x 64 = 256 (widening_factor)", f"{_RUOSS_CODE} models/transformer.py:70",
            "same"),
    Setting("dropout", "0.1 on the embeddings, both residual branches, the attention weights and the feed-forward's "
            "hidden layer", "0.1 on the embeddings and both residual branches",
            f"{_RUOSS_CODE} experiments/example.py:71; models/transformer.py:324-325, 417-420, 430-431", "differs"),
    Setting("layer norm", "before each block (pre-LN), and after the last",
            "after each residual sum (post-LN)", f"{_RUOSS_CODE} models/transformer.py:421, 432", "differs"),
    Setting("embedding init", "torch's (normal, std 1)", "truncated normal, std 0.02",
            f"{_RUOSS_CODE} models/transformer.py:49, 275-277", "differs"),
    Setting("optimiser", "Adam 1e-3, constant, gradient norm clipped at 1.0",
            "optax.adam(1e-3) after clip_by_global_norm(1.0), constant",
            f"{_RUOSS_CODE} experiments/example.py:123; experiments/training.py:62, 222-231", "same"),
    Setting("batch", "32", "128", f"{_RUOSS_CODE} experiments/example.py:30-35", "scaled"),
    Setting("steps", "6,400 (204,800 strings, 1/6 of the reference's)", "10,000 (1,280,000 strings)",
            f"{_RUOSS_CODE} experiments/example.py:116", "scaled"),
    Setting("training lengths", "1-12, one length per step, uniform (the same lengths for every model)",
            "1-40, one length per step, uniform (random.choice)",
            f"{_RUOSS_CODE} experiments/example.py:36-41, 79-81; experiments/curriculum.py:71; training.py:210",
            "scaled"),
    Setting("test lengths", "13-36, 64 strings each (12, the longest training length, in distribution)",
            "41-500 in the paper; the code's example tests 1-100 with 512 strings each",
            f"the paper, section 4; {_RUOSS_CODE} experiments/example.py:127-129", "scaled"),
    Setting("L_max (randomized)", "2048, positions drawn at test time too", "2048 (noise_max_length)",
            f"{_RUOSS_CODE} experiments/example.py:73", "same"),
    Setting("relative encoding", "Transformer-XL's (transformer-xl; Shaw et al.'s is 'relative')",
            "Transformer-XL's", f"{_RUOSS_CODE} models/positional_encodings.py (RELATIVE, NOISY_RELATIVE)", "same"),
    Setting("loss", "cross-entropy summed over a string's outputs, mean over the batch", "the same",
            f"{_RUOSS_CODE} experiments/example.py:104-105", "same"),
    Setting("metric", "masked token accuracy of the output slots", "the same",
            f"{_RUOSS_CODE} experiments/example.py:108-110", "same"),
    Setting("seeds x learning rates", "1 seed, 1 learning rate", "10 seeds x 3 learning rates, the best reported",
            "the paper, section 4 (not verified here)", "scaled"),
)

RUOSS2023 = Preset(
    name="ruoss2023",
    paper="Ruoss et al. 2023, Randomized Positional Encodings Boost Length Generalization of Transformers "
          "(ACL, arXiv:2305.16843)",
    settings={
        "task": "reverse-string", "architecture": "encoder-only", "protocol": "ruoss2023",
        "encodings": _RUOSS_DEFAULT,
        "train_len": 12, "min_train_len": 1, "test_lens": tuple(range(12, 37)), "n_seeds": 1,
        "d_model": 64, "n_heads": 8, "n_layers": 5, "ff_units": 256, "dropout": 0.1, "lr": 1e-3,
        "batch_size": 32, "n_train": 204_800, "epochs": 1, "n_test": 64, "l_max": 2048,
    },
    quick={"train_len": 8, "test_lens": tuple(range(8, 25)), "n_train": 102_400, "n_test": 32,
           "encodings": ("sinusoidal", "random-sinusoidal")},
    paper_setup={"tasks": "the 15 of the Chomsky hierarchy", "train lengths": "1-40, a fresh batch of one length "
                 "per step", "test lengths": "41-500, every one", "layers x width x heads": "5 x 64 x 8",
                 "steps x batch": "10,000 x 128 (the code's defaults)", "L_max": "2048",
                 "aggregate": "the best of 10 seeds x 3 learning rates"},
    scaled="the reference code's model, optimiser, dropout and L_max; 2 tasks of the paper's 15 (reverse string, "
           "duplicate string) and 3 of its 6 schemes (sinusoidal, Transformer-XL's relative, ALiBi, each beside its "
           "randomized version); train lengths 1-12 (paper 1-40), test lengths 13-36 (paper 41-500); "
           "6,400 fresh batches of 32 (the code: 10,000 of 128, so 1/6 of the strings); one seed and one learning rate "
           "(paper: the best of 10 seeds x 3 rates)",
    metric="token_accuracy",
    claims=(
        Claim("Randomized positions increase test accuracy by 12.0% on average (over every task and scheme)",
              "abstract", ruoss_mean_gain),
    ),
    published=dict(_RUOSS_TABLE.cells),
    published_source=_RUOSS_TABLE.source,
    published_metric=_RUOSS_TABLE.metric,
    tasks=("reverse-string", "duplicate-string"),
    aggregate="best",
    cost="about 35 minutes on 2 CPU cores (12 models of 250,000 parameters, 6,400 steps each: 66 core-minutes of "
         "CPU, measured); --quick about 5 (4 models, 10 core-minutes)",
    protocol_table=RUOSS2023_TABLE,
)

RUOSS2023_FULL = replace(
    RUOSS2023, name="ruoss2023-full",
    settings={**RUOSS2023.settings, "encodings": _RUOSS_ENCODINGS, "train_len": 40,
              "test_lens": (40, *range(41, 501)), "batch_size": 128, "n_train": 1_280_000, "n_seeds": 10,
              "n_test": 512},
    quick=RUOSS2023.quick,
    scaled="the paper's sizes, lengths and steps (one learning rate, 1e-3, of the paper's three)",
    tasks=("even-pairs", "modular-arithmetic", "parity-check", "cycle-navigation", "stack-manipulation",
           "reverse-string", "modular-arithmetic-brackets", "solve-equation", "duplicate-string", "missing-duplicate",
           "odds-first", "binary-addition", "binary-multiplication", "compute-sqrt", "bucket-sort"),
    cost="15 tasks x 11 encodings x 10 seeds = 1,650 models of 10,000 steps, tested at 460 lengths up to 1,000 "
         "tokens: GPU-days; meant for --ray",
    protocol_table=_at_paper_size(RUOSS2023_TABLE, {
        "tasks": ("the 15 tasks of the Chomsky hierarchy", "same"),
        "encodings": ("none, sinusoidal, Transformer-XL's relative, rotary, ALiBi, learned, each beside its "
                      "randomized version", "same"),
        "batch": ("128", "same"),
        "steps": ("10,000 (1,280,000 strings)", "same"),
        "training lengths": ("1-40, one length per step, uniform (the same lengths for every model)", "same"),
        "test lengths": ("41-500, 512 strings each (40 in distribution)", "same"),
        "seeds x learning rates": ("10 seeds, 1 learning rate (1e-3)", "scaled")}),
)


# -- Kazemnejad et al. 2023 ------------------------------------------------------------

_KAZEMNEJAD_TABLE = TABLES["kazemnejad2023"]

_KAZEMNEJAD_CODE = "McGill-NLP/length-generalization@40f8a44"

KAZEMNEJAD2023_TABLE = (
    Setting("tasks", "copy-repeat, reverse-random-2x: the paper's figure's Copy and Reverse (kazemnejad2023-full: "
            "and copy-random, reverse-random, SCAN)",
            "10 tasks in 17 variants; its figure plots copy-repeat (rsc) as Copy and reverse-random-2x (mc2x) as "
            "Reverse", "the paper, Figure 3 and appendix C; the authors' released logs", "scaled"),
    Setting("architecture", "decoder-only, pre-LN LayerNorm, ReLU feed-forward, scores scaled by 1/sqrt(Dh)",
            "decoder-only T5 stack: pre-RMSNorm, ReLU feed-forward, unscaled scores",
            f"{_KAZEMNEJAD_CODE} src/models/custom_t5_decoder_only.py", "differs"),
    Setting("layers x width x heads", "4 x 64 x 4, feed-forward 256 (about 0.2M parameters)",
            "12 x 768 x 12, feed-forward 3072 (t5-base, about 110M)",
            f"{_KAZEMNEJAD_CODE} configs/models/t5_base.jsonnet", "scaled"),
    Setting("dropout", "0 (with 0.1 a model this small does not learn the tasks in these steps: NoPE 84.5% of "
            "copy-random's tokens at length 20)", "0.1 (t5-base's dropout_rate)",
            f"{_KAZEMNEJAD_CODE} configs/models/t5_base.jsonnet", "scaled"),
    Setting("optimiser", "AdamW 3e-3, weight decay 0.05, gradient norm clipped at 1.0",
            "AdamW 3e-5, weight decay 0.05, clipped at 1.0 (the Hugging Face trainer's default)",
            f"{_KAZEMNEJAD_CODE} configs/trainer/base_model.jsonnet:19-20", "scaled"),
    Setting("schedule", "linear warm-up over 6% of the steps, linear decay to 0",
            "warm-up ratio 0.06, polynomial decay (power 1, to 1e-7)",
            f"{_KAZEMNEJAD_CODE} configs/trainer/default.jsonnet:18, 20", "same"),
    Setting("steps x batch", "3,126 x 64 (2 passes over the training set; copy-repeat 1,563, one pass: its "
            "6,052-token output layer makes a step 4 times as long)", "40,000 x 64",
            f"{_KAZEMNEJAD_CODE} configs/trainer/base_model.jsonnet:5, 10", "scaled"),
    Setting("training data", "100,000 examples, lengths 2-20", "100,000 examples (and 15,000 for validation)",
            f"{_KAZEMNEJAD_CODE} scripts/dataset_builders/make_copy_dataset.py:203-224; the released run logs "
            "(num_train_samples 100000)", "same"),
    Setting("test lengths", "21-40, 64 examples each (20, the longest training length, in distribution)",
            "21-40, 10,000 examples in all", "the paper, section 4", "scaled"),
    Setting("prompt", "the task's constant words before the input, a separator before the answer",
            "'Copy: ...' / 'Reverse: ...' then '[SEP]' and the answer",
            f"{_KAZEMNEJAD_CODE} src/data/data_instance_processor/copy_instance_processor.py", "same"),
    Setting("T5 bias", "one table shared by every layer (t5-shared)", "one table in layer 0, shared by all layers",
            f"{_KAZEMNEJAD_CODE} src/models/custom_t5_decoder_only.py", "same"),
    Setting("rotary", "a quarter of each head's features (rotary-quarter)", "rotary_dim = 0.25 x head size",
            f"{_KAZEMNEJAD_CODE} src/models/custom_t5_decoder_only.py", "same"),
    Setting("metric", "exact match of the greedy answer", "exact match of the decoded string (acc, what the "
            "figures plot)", f"{_KAZEMNEJAD_CODE} src/analyzers/seq2seq_analyzer.py", "same"),
    Setting("seeds", "1", "3, the mean reported", "the paper, section 4", "scaled"),
)

KAZEMNEJAD2023 = Preset(
    name="kazemnejad2023",
    paper="Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization in Transformers "
          "(NeurIPS, arXiv:2305.19466)",
    settings={
        "task": "copy-repeat", "architecture": "decoder-only", "protocol": "kazemnejad2023",
        "encodings": ("none", "t5-shared", "alibi", "rotary-quarter", "sinusoidal"),
        "train_len": 20, "min_train_len": 2, "test_lens": tuple(range(20, 41)), "n_seeds": 1,
        # The paper's dropout (0.1) keeps a model this small from learning the tasks in 3,126 steps (measured: NoPE
        # 84.5% of copy-random's tokens at length 20 with 0.1; copy-repeat 100% at 20 and 86% exact at 30 without).
        "d_model": 64, "n_heads": 4, "n_layers": 4, "ff_units": 256, "dropout": 0.0, "lr": 3e-3,
        "batch_size": 64, "n_train": 100_000, "epochs": 2, "n_test": 64,
    },
    quick={"n_seeds": 1, "train_len": 10, "test_lens": tuple(range(10, 21)), "n_train": 32_000, "epochs": 2,
           "n_test": 64, "encodings": ("none", "t5")},
    paper_setup={"train lengths": "2-20 (SCAN: up to 22 actions)", "test lengths": "21-40 (SCAN: 24-48)",
                 "model": "decoder-only, T5-base sizes, ~110M parameters", "training": "40,000 steps of 64, AdamW 3e-5",
                 "vocabulary": "100 random tokens (copy, reverse)", "rotary": "a quarter of each head's features",
                 "seeds": "3 (mean reported)"},
    scaled="the paper's lengths, data, prompt, optimiser and schedule; a model 500 times smaller (4 layers x 64, "
           "about 0.2M parameters against ~110M) at a learning rate 100 times higher (3e-3), without dropout (paper "
           "0.1); 3,126 steps of 64 (copy-repeat 1,563; paper 40,000); 2 of the paper's 17 task variants (its figure's "
           "Copy and Reverse); 1 seed (paper 3); 64 test examples per length",
    metric="sequence_accuracy",
    claims=(
        Claim("NoPE outperforms the explicit positional encodings (T5's bias, ALiBi, rotary, APE): the highest "
              "mean reciprocal rank over the tasks", "abstract; Figure 1", nope_best),
        Claim("T5's relative bias is the best of the explicit encodings (mean reciprocal rank)",
              "section 4; Figure 1", t5_best_explicit),
        Claim("The most commonly used encodings (ALiBi, rotary, APE) are not suited for length generalization: "
              "each ranks below NoPE and T5 (mean reciprocal rank)", "abstract; Figure 1", common_worst),
    ),
    # Their rotary is the quarter rotary and their T5 bias one shared table: their numbers sit beside the lab's
    # rotary-quarter and t5-shared.
    published={(task, {"rotary": "rotary-quarter", "t5": "t5-shared"}.get(enc, enc)): v
               for (task, enc), v in _KAZEMNEJAD_TABLE.cells.items()},
    published_source=_KAZEMNEJAD_TABLE.source,
    published_metric=_KAZEMNEJAD_TABLE.metric,
    # The tasks the paper's figure plots as "Copy" and "Reverse". Its claims aggregate over tasks (a mean
    # reciprocal rank), and which tasks are run decides what the paper's own cells say: on these NoPE leads, on
    # copy-random, reverse-random and SCAN T5 does.
    tasks=("copy-repeat", "reverse-random-2x"),
    # Their SCAN split: answers of up to 25 actions train, 26-48 test (no command has 23, 29, 31, ...).
    per_task={"scan": {"train_len": 25, "min_train_len": 1, "test_lens": (25, 26, 28, 30, 32, 36, 40, 48),
                       "n_train": 17_774, "epochs": 4},
              # copy-repeat's 6,052-token vocabulary (the reference's) makes its output layer 60 times the others':
              # one pass over the data (1,563 steps) learns it in distribution
              "copy-repeat": {"epochs": 1}},
    quick_per_task={"scan": {"n_train": 4096, "test_lens": (25, 26, 28, 32, 40)}, "copy-repeat": {"epochs": 2}},
    cost="about 50 minutes on 2 CPU cores (10 models: 94 core-minutes, measured partly beside other work); --quick "
         "about 5 (4 models)",
    protocol_table=KAZEMNEJAD2023_TABLE,
)

KAZEMNEJAD2023_FULL = replace(
    KAZEMNEJAD2023, name="kazemnejad2023-full",
    settings={**KAZEMNEJAD2023.settings, "d_model": 768, "n_heads": 12, "n_layers": 12, "ff_units": 3072,
              "lr": 3e-5, "epochs": 26, "n_seeds": 3, "n_test": 500, "dropout": 0.1},
    per_task={"scan": KAZEMNEJAD2023.per_task["scan"]},
    tasks=("copy-repeat", "reverse-random-2x", "copy-random", "reverse-random", "scan"),
    scaled="the paper's model sizes, data, steps and seeds, on 5 of its 17 task variants",
    cost="5 tasks x 5 encodings x 3 seeds = 75 models of ~110M parameters and 40,000 steps: GPU-days; meant for "
         "--ray",
    protocol_table=_at_paper_size(KAZEMNEJAD2023_TABLE, {
        "tasks": ("copy-repeat, reverse-random-2x, copy-random, reverse-random, SCAN (length split)", "scaled"),
        "layers x width x heads": ("12 x 768 x 12, feed-forward 3072", "same"),
        "optimiser": ("AdamW 3e-5, weight decay 0.05, gradient norm clipped at 1.0", "same"),
        "steps x batch": ("40,000 x 64 (26 passes)", "same"),
        "test lengths": ("21-40, 500 examples each (20 in distribution)", "same"),
        "seeds": ("3, the mean reported", "same"),
        "dropout": ("0.1", "same")}),
)


# -- McLeish et al. 2024 and Cho et al. 2024: arithmetic ------------------------------------

_MCLEISH, _CHO = TABLES["mcleish2024"], TABLES["cho2024"]

_MCLEISH_CODE = "mcleish7/arithmetic@86022a5"

ABACUS2024_TABLE = (
    Setting("task", "addition, digits least significant first, operands and answer zero-padded",
            "addition, all digits reversed (McLeish); answer reversed, operands zero-padded (Cho)",
            f"{_MCLEISH_CODE} shells/addition_ff.sh; Cho et al.'s scripts (HanseulJo/position-coupling)", "same"),
    Setting("layers x width x heads", "2 x 64 x 4, feed-forward 256",
            "16 x 1024 x 16, feed-forward 2048 (McLeish); 1 x 1024 x 4 (Cho)",
            f"{_MCLEISH_CODE} cramming/config/arch; Cho et al. 2024, appendix", "scaled"),
    Setting("training data", "64,000 fixed sums, operands of 1-10 digits",
            "20M sums, operands of 1-20 digits (McLeish); 100,000, 1-30 digits (Cho)",
            f"{_MCLEISH_CODE} shells/addition_ff.sh", "scaled"),
    Setting("steps x batch", "2,000 x 64", "24 GPU-hours (McLeish); 50,000 x 1,000 (Cho)",
            f"{_MCLEISH_CODE} shells/addition_ff.sh; Cho et al. 2024, appendix", "scaled"),
    Setting("optimiser", "Adam 3e-3, 5% warm-up, cosine decay to 10%", "AdamW 1e-4 (both)",
            f"{_MCLEISH_CODE} cramming/config/train; Cho et al. 2024, appendix", "differs"),
    Setting("Abacus offset", "one offset per batch, uniform over 0-100", "one offset per batch, max_abacus_len 100",
            f"{_MCLEISH_CODE} abacus.py", "same"),
    Setting("test lengths", "10-30 digits (3x the training length)",
            "up to 100 digits (McLeish, 5x); up to 200 (Cho, 6.7x)", "the papers' length figures", "scaled"),
    Setting("metric", "exact match of the answer, mean of 3 seeds", "exact match (McLeish: each model; Cho: median "
            "of 8 runs)", "the papers' figures", "same"),
)

ABACUS2024 = Preset(
    name="abacus2024",
    paper="McLeish et al. 2024, Transformers Can Do Arithmetic with the Right Embeddings (NeurIPS, arXiv:2405.17399); "
          "Cho et al. 2024, Position Coupling (NeurIPS, arXiv:2405.20671)",
    settings={
        "task": "reversed-addition", "architecture": "decoder-only", "protocol": "fixed",
        "encodings": ("coupling", "abacus", "none", "fire", "random-fire", "rotary", "alibi"),
        "train_len": 10, "min_train_len": 1, "test_lens": (10, 15, 20, 25, 30), "n_seeds": 3,
        "d_model": 64, "n_heads": 4, "n_layers": 2, "ff_units": 256, "lr": 3e-3,
        "batch_size": 64, "n_train": 64_000, "epochs": 2, "n_test": 128,
    },
    quick={"n_seeds": 1, "train_len": 6, "test_lens": (6, 9, 12, 18), "encodings": ("coupling", "abacus", "none",
                                                                                 "fire")},
    paper_setup={"task": "addition, operands and answer written least significant digit first",
                 "train digits": "up to 20 (McLeish), up to 30 (Cho)", "test digits": "up to 100 (McLeish), 200 (Cho)",
                 "model": "16 layers x 1024 (McLeish); 1 layer x 1024, 4 heads (Cho)",
                 "training": "20M examples, a day on one GPU (McLeish); 50,000 steps of 1,000 (Cho)"},
    scaled="operands of up to 10 digits in training, tested to 30 (3x, as the papers' 5x and 6.7x); 2 layers x 64, "
           "2,000 steps of 64 on one fixed set of 64,000 sums; the operands and answer zero-padded to the longer "
           "operand, as Cho et al.; Abacus with no scheme inside attention (the papers also pair it with FIRE)",
    metric="sequence_accuracy",
    claims=(
        Claim("Numbering each digit by its significance (Abacus, position coupling) generalises to longer additions "
              "than any scheme that numbers the tokens by their order", "abstracts", structure_best),
    ),
    published={**_MCLEISH.cells, **_CHO.cells},
    published_source=f"{_MCLEISH.source}; {_CHO.source}",
    published_metric=_MCLEISH.metric,
    tasks=("reversed-addition",),
    cost="about 12 minutes on 2 CPU cores (21 models); --quick about 2 (4 models)",
    protocol_table=ABACUS2024_TABLE,
)

ABACUS2024_FULL = replace(
    ABACUS2024, name="abacus2024-full",
    settings={**ABACUS2024.settings, "train_len": 20, "test_lens": (20, 40, 60, 80, 100), "d_model": 1024,
              "n_heads": 16, "n_layers": 16, "ff_units": 4096, "lr": 1e-4, "n_train": 20_000_000, "epochs": 1,
              "batch_size": 1024},
    scaled="McLeish et al.'s sizes and data (Adam at 1e-4)",
    protocol_table=_at_paper_size(ABACUS2024_TABLE, {
        "layers x width x heads": ("16 x 1024 x 16, feed-forward 4096", "same"),
        "training data": ("20M sums, operands of 1-20 digits", "same"),
        "steps x batch": ("20,000 x 1,024", "scaled"),
        "optimiser": ("Adam 1e-4, 5% warm-up, cosine decay to 10%", "differs"),
        "test lengths": ("20-100 digits", "same")}),
    cost="21 models of ~200M parameters on 20M sums: GPU-days; meant for --ray",
)


#: the presets by name.
PRESETS: dict[str, Preset] = {p.name: p for p in (RUOSS2023, RUOSS2023_FULL, KAZEMNEJAD2023, KAZEMNEJAD2023_FULL,
                                                  ABACUS2024, ABACUS2024_FULL)}


def preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        ValueError: for an unknown name (listing the known ones).
    """
    return PRESETS[check_choice("preset", name, tuple(PRESETS))]


def format_settings(name: str) -> str:
    """Preset ``name``'s settings table as text: each setting, the lab's value beside the paper's, and the source.

    A row scaled here is marked ``~`` and one that differs ``!=``; the same, ``=``.

    Raises:
        ValueError: for an unknown preset name.
    """
    chosen = preset(name)
    if not chosen.protocol_table:
        return f"Preset {chosen.name}: no settings table"
    marks = {"same": "=", "scaled": "~", "differs": "!="}
    lines = [f"Preset {chosen.name}: {chosen.paper}", "(= the paper's; ~ scaled here; != different)"]
    for row in chosen.protocol_table:
        lines += [f"{marks[row.status]:>2} {row.what}", f"     lab:   {row.lab}", f"     paper: {row.paper}",
                  f"     from:  {row.source}"]
    return "\n".join(lines)


def check_claims(name: str, runs: list[tuple[list[dict[str, Any]], Any]]) -> list[Verdict]:
    """The verdict on each claim of preset ``name`` over comparisons ``[(records, config), ...]``, one per task
    (one comparison: the claims aggregate over its task alone), each aggregated as the paper does
    (:mod:`attnlab.labs.lengths.paper_claims`).

    Raises:
        ValueError: for an unknown preset, or a run with no test length above its training length.
    """
    return check_runs(preset(name), runs)
