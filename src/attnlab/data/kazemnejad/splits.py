"""The tasks and data of Kazemnejad et al. 2023, by name, with the paper's lengths and data sizes.

Kazemnejad et al. 2023 ("The Impact of Positional Encoding on Length
Generalization in Transformers", NeurIPS; code: McGill-NLP/length-generalization)
train decoder-only Transformers on short examples of each task and test them on
longer ones. :data:`KAZEMNEJAD_TASKS` names the generators of their primitive
tasks (:mod:`attnlab.data.kazemnejad.primitive`) and of three of their mathematical ones
(:mod:`attnlab.data.kazemnejad.mathematical`); SCAN is :mod:`attnlab.data.scan`.
:data:`KAZEMNEJAD_DATA` records, per task, the split the paper ran: its lengths
and sizes, with the repository file each number comes from.

How the repository builds and scores an example (read from its code):

* every builder draws ``int(1.15 * n_train / n_lengths)`` examples per training
  length (or operand-length pair), shuffles them and keeps the first ``n_train``
  for training, the rest for validation (scripts/dataset_builders/make_*_dataset.py);
  the runs then score half the validation set (``validation_portion: 0.5`` in
  configs/t5_dec_base.jsonnet);
* the model reads ``prompt + "[SEP] " + answer + EOS`` (``""`` instead of
  ``"[SEP] "`` for addition and sort: configs/data/*.jsonnet,
  ``decoder_only_input_output_sep_token``) as T5 sentencepiece tokens, with no BOS,
  and is trained on the answer and the EOS only (src/data/s2s_dl_factory.py,
  ``_get_tokenize_function_for_decoder_only``). The prompt's fixed words open every
  example (``"Copy: "``, ``"Reverse: "``, ``"Solve: "``, ...); the generators here
  write them as tokens of their own by default (:mod:`attnlab.data.tasks.prompts`;
  ``prompt=False`` leaves them out), and the lab's ``BOS`` stands where the answer
  starts (the reference's ``[SEP]`` for copy, reverse and SCAN);
* an answer is decoded greedily up to EOS (or ``generation_max_length``) and detokenised without
  special tokens (src/runtime/seq2seq_runtime.py), then scored by exact match
  (src/analyzers/seq2seq_analyzer.py averages it per length). For copy, reverse and
  SCAN the whole text after ``[SEP]`` must equal the gold answer
  (``IdentityDataInstanceProcessor.is_prediction_correct``): the EOS itself is not
  compared, but an answer that runs on past the gold one is wrong. For addition,
  sort and summation a regular expression reads the number or list after ``"The
  answer is"`` / ``"The sorted list is ["`` and compares it with the gold one; text
  after it is not checked (``extract_answer_from_final_output`` in
  src/data/data_instance_processor/addition_instance_processor.py and the others).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.data.kazemnejad.mathematical import Addition, SortTokens, Summation
from attnlab.data.kazemnejad.primitive import (
    CopyRandom,
    CopyRandom2x,
    CopyRepeat,
    CopyRepeat2x,
    CopyRepeatChange,
    KazemnejadTask,
    ReverseCopy,
    ReverseRandom,
    ReverseRandom2x,
)

__all__ = ["KAZEMNEJAD_DATA", "KAZEMNEJAD_TASKS", "KazemnejadSplit"]

#: the generators by name: ``KAZEMNEJAD_TASKS["copy-random"]()`` draws the paper's "Copy" examples.
KAZEMNEJAD_TASKS: dict[str, type[KazemnejadTask]] = {
    cls.name: cls
    for cls in (
        CopyRandom, CopyRepeat, CopyRepeatChange, CopyRandom2x, CopyRepeat2x,
        ReverseRandom, ReverseRandom2x, ReverseCopy, Addition, SortTokens, Summation,
    )
}  # fmt: skip


@dataclass(frozen=True)
class KazemnejadSplit:
    """One task's data in the paper: where it is in the repository, its lengths, its sizes.

    Attributes:
        task: the name in :data:`KAZEMNEJAD_TASKS` (``"scan"`` for SCAN, :mod:`attnlab.data.scan`).
        paper_name: the name the paper's figures give it.
        dataset: the repository's dataset name (``configs/data/<dataset>.jsonnet``).
        split: the repository's split name (``data/<dataset>/<split>/``).
        length_unit: what the paper's lengths count.
        train_lengths: the training lengths, in ``length_unit``.
        test_lengths: the test lengths, in ``length_unit``.
        n_train: training examples, or None where the repository does not record it.
        n_valid: validation examples held out of training (the runs score half of them), or None.
        n_test: test examples, or None.
        n_test_per_length: test examples per test length (per operand-length pair for addition), or None.
        vocab_size: the tokens an example draws from: the builder's token list for copy, reverse
            and sort, the digits (10) for addition, 1..9 for summation, the command words for SCAN
            (the prompt's words not counted).
        sources: the repository files the numbers come from.
        note: how a number was derived where the files do not state it outright.
    """

    task: str
    paper_name: str
    dataset: str
    split: str
    length_unit: str
    train_lengths: tuple[int, ...]
    test_lengths: tuple[int, ...]
    n_train: int | None
    n_valid: int | None
    n_test: int | None
    n_test_per_length: int | None
    vocab_size: int
    sources: tuple[str, ...]
    note: str = ""


_COPY_SOURCES = (
    "scripts/dataset_builders/make_copy_dataset.py",
    "results/sanity_check.jsonl",
    "src/common/wandb_utils.py",
)
_REVERSE_SOURCES = (
    "scripts/dataset_builders/make_reverse_dataset.py",
    "results/sanity_check.jsonl",
    "src/common/wandb_utils.py",
)
_COPY_NOTE = (
    "sanity_check.jsonl: sum__num_train_samples 100000, sum__pred/test_num_samples 10000, "
    "per-length scores pred/valid_acc_2..20 and pred/test_acc_21..40; 19 training lengths give "
    "int(115000 / 19) = 6052 examples per length, 114,988 in all, so 14,988 validation examples "
    "(the logged pred/valid_num_samples 7494 is half of them)."
)


def _primitive(task: str, dataset: str, split: str, sources: tuple[str, ...], note: str = "") -> KazemnejadSplit:
    cls = KAZEMNEJAD_TASKS[task]
    return KazemnejadSplit(
        task=task, paper_name=cls.paper_name, dataset=dataset, split=split,
        length_unit="tokens copied or reversed",
        train_lengths=tuple(range(2, 21)), test_lengths=tuple(range(21, 41)),
        n_train=100_000, n_valid=14_988 if task != "copy-repeat-change" else 14_114,
        n_test=10_000, n_test_per_length=500,
        vocab_size=cls().body_size, sources=sources, note=note or _COPY_NOTE,
    )  # fmt: skip


#: the paper's split of each task, by task name.
KAZEMNEJAD_DATA: dict[str, KazemnejadSplit] = {
    s.task: s
    for s in (
        _primitive("copy-random", "s2s_copy", "cmc_tr20_ts40", _COPY_SOURCES),
        _primitive(
            "copy-repeat", "s2s_copy", "rsc_tr20_ts40", _COPY_SOURCES,
            _COPY_NOTE + " One example per token and length: the first 6052 tokens of the builder's list.",
        ),
        _primitive(
            "copy-repeat-change", "s2s_copy", "rdc_tr20_ts40", _COPY_SOURCES,
            "int((1 + sqrt(1 + 4 * 6052)) / 2) = 78 tokens, 78 * 77 = 6006 ordered pairs per length, "
            "114,114 in all: 100,000 train and 14,114 validation (pred/valid_num_samples 7057 is half); "
            "test: 500 pairs sampled per length 21..40. The generator's input is 2 symbols longer than "
            "the paper's length (t and u).",
        ),
        _primitive("copy-random-2x", "s2s_copy", "cmc2x_tr20_ts40", _COPY_SOURCES),
        _primitive(
            "copy-repeat-2x", "s2s_copy", "rsc2x_tr20_ts40", _COPY_SOURCES,
            _COPY_NOTE + " One example per token and length: the first 6052 tokens of the builder's list.",
        ),
        _primitive("reverse-random", "s2s_reverse", "mc_tr20_ts40", _REVERSE_SOURCES),
        _primitive("reverse-random-2x", "s2s_reverse", "mc2x_tr20_ts40", _REVERSE_SOURCES),
        _primitive("reverse-copy", "s2s_reverse", "mcrv_tr20_ts40", _REVERSE_SOURCES),
        KazemnejadSplit(
            task="addition", paper_name="Addition", dataset="s2s_addition", split="len_tr8_ts16",
            length_unit="digits of the longer operand (training: every pair (ka, kb) of 1..8 x 1..8; "
            "test: every pair of 1..16 x 1..16 with max(ka, kb) >= 9; Addition.train_bins / test_bins)",
            train_lengths=tuple(range(1, 9)), test_lengths=tuple(range(9, 17)),
            n_train=100_000, n_valid=14_944, n_test=9_984, n_test_per_length=52, vocab_size=10,
            sources=(
                "scripts/dataset_builders/make_addition_dataset.py",
                "results/scratch_for_attn_classic_for_attn_sanityCh_for_attn.jsonl",
                "src/data/data_instance_processor/addition_instance_processor.py",
            ),
            note="Logged: sum__num_train_samples 100000, sum__pred/test_num_samples 9984, pred/valid_num_samples "
            "7472, per-pair scores pred/valid_acc_1-by-1..8-by-8 and pred/test_acc_1-by-9..16-by-16. 64 training "
            "pairs give int(115000 / 64) = 1796 per pair, 114,944 in all (14,944 validation); the 192 test pairs "
            "get int(10000 / 192) = 52 each, 9,984.",
        ),
        KazemnejadSplit(
            task="kz-sort", paper_name="Sort (Single Token)", dataset="s2s_sort", split="len_sngd_tr8_ts16",
            length_unit="tokens sorted", train_lengths=tuple(range(4, 9)), test_lengths=tuple(range(9, 17)),
            n_train=None, n_valid=None, n_test=None, n_test_per_length=None, vocab_size=50,
            sources=(
                "scripts/dataset_builders/make_sort_dataset.py",
                "src/data/data_instance_processor/sort_instance_processor.py",
                "notebooks/plot_aggregate_final.ipynb",
            ),
            note="The split's name says trained up to 8 and tested up to 16 (the builder tests from 9); its "
            "run logs are not in the repository's snapshot (results/scratchpad_f.jsonl is not stored), so the "
            "shortest training length (4 is the builder's default --train_min) and the sizes are not recorded. "
            "Every logged split of these builders used 100,000 training examples.",
        ),
        KazemnejadSplit(
            task="summation", paper_name="Summation", dataset="s2s_sum", split="len_tr8_ts16",
            length_unit="digits summed", train_lengths=tuple(range(4, 9)), test_lengths=tuple(range(9, 17)),
            n_train=None, n_valid=None, n_test=None, n_test_per_length=None, vocab_size=9,
            sources=(
                "scripts/dataset_builders/make_sum_dataset.py",
                "src/data/data_instance_processor/sum_instance_processor.py",
                "configs/data/s2s_sum.jsonnet",
            ),
            note="As for kz-sort: lengths from the split's name and the builder's defaults; sizes not recorded. "
            "The digits are drawn from 1..9 (np.random.randint(1, 10)).",
        ),
        KazemnejadSplit(
            task="scan", paper_name="SCAN", dataset="scan", split="mdlen_tr25_ts48",
            length_unit="actions in the answer",
            train_lengths=(*range(1, 23), 24, 25), test_lengths=(26, 27, 28, 30, 32, 33, 36, 40, 48),
            n_train=15_997, n_valid=1_777, n_test=3_136, n_test_per_length=None, vocab_size=13,
            sources=(
                "scripts/dataset_builders/make_scan_dataset.py",
                "results/classic.jsonl",
                "src/data/data_instance_processor/scan_instance_processor.py",
            ),
            note="SCAN's 'length' split (train + test, 20,910 commands) re-split at 25 actions: 17,774 short "
            "commands, a tenth (1,777) held out for validation (pred/valid_num_samples 888 is half), 3,136 long "
            "ones; classic.jsonl logs sum__num_train_samples 15997 and sum__pred/test_num_samples 3136. "
            "mdlen_ prefixes every command with 'Solve: ' (processor scan_bos); no command has 23, 29, 31, "
            "34, 35, 37..39 or 41..47 actions. vocab_size counts command words (6 actions).",
        ),
    )
}  # fmt: skip
