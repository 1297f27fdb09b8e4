"""The length-generalisation lab: `run_compare`, its table and files, its settings, and `attnlab compare`.

Every configuration here is tiny (one layer, d_model 16, one batch per epoch): these
tests check what the lab records and writes, not how well the encodings learn.
"""

# ruff: noqa: NPY002  (the global numpy RNG is what run_compare must leave alone)

import json
import random

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.cli import main
from attnlab.data import BOS, EOS, PAD, Vocab
from attnlab.data.tasks.metrics import sequence_accuracy, token_accuracy
from attnlab.data.tasks.registry import make_task_sets
from attnlab.data.tasks.task import ARCHITECTURES
from attnlab.labs.lengths import compare, sweep
from attnlab.labs.lengths import config as lengths
from attnlab.labs.lengths import train as lengths_train
from attnlab.labs.lengths.compare import CompareResult, run_compare
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.report import format_table, summarise
from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer, Transformer
from attnlab.training import default_device

TINY = dict(encodings=("rotary", "alibi"), n_seeds=1, epochs=1, n_train=64, n_test=16, d_model=16, n_heads=2,
            n_layers=1, train_len=4, test_lens=(4, 6))
TINY_FLAGS = ["--encodings", "rotary,alibi", "--seeds", "1", "--epochs", "1", "--n-train", "64",
              "--train-len", "4", "--test-lens", "4,6", "--no-progress", "--jobs", "1"]  # here: no workers to start
PNG = b"\x89PNG\r\n\x1a\n"


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster here


def rng_states():
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def assert_same_rng_states(before, after):
    assert torch.equal(before[0], after[0]), "torch's global RNG moved"
    assert before[1][0] == after[1][0] and np.array_equal(before[1][1], after[1][1]) \
        and before[1][2:] == after[1][2:], "numpy's global RNG moved"
    assert before[2] == after[2], "python's random moved"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny comparison written to a folder, and the global RNG states around it."""
    folder = tmp_path_factory.mktemp("compare") / "tiny"
    torch.manual_seed(1234)
    np.random.seed(1234)
    random.seed(1234)
    before = rng_states()
    result = run_compare(CompareConfig(**TINY), folder, progress=False)
    return result, folder, before, rng_states()


# -- what run_compare writes ---------------------------------------------------------------


def test_results_json_has_a_record_per_encoding_seed_and_length(tiny_run):
    result, folder, _, _ = tiny_run
    doc = json.loads((folder / "results.json").read_text())
    assert doc["metric"] == "sequence_accuracy"
    assert doc["device"] == str(default_device())  # where the models trained: cuda if there is one
    keys = sorted((r["encoding"], r["seed"], r["length"]) for r in doc["records"])
    assert keys == sorted((e, 0, n) for e in ("rotary", "alibi") for n in (4, 6))
    for r in doc["records"]:
        assert set(r) == {"encoding", "seed", "length", "token_accuracy", "sequence_accuracy"}
        assert 0.0 <= r["token_accuracy"] <= 1.0 and 0.0 <= r["sequence_accuracy"] <= 1.0
        # a sequence is right only if all its tokens are, so it cannot score above them
        assert r["sequence_accuracy"] <= r["token_accuracy"]
    assert doc["records"] == result.records
    assert CompareConfig(**doc["config"]) == result.config  # the settings round-trip
    assert set(doc["seconds_per_model"]) == {"rotary/0", "alibi/0"}
    for enc in ("rotary", "alibi"):
        for n in (4, 6):
            [rec] = [r for r in doc["records"] if r["encoding"] == enc and r["length"] == n]
            assert doc["summary"][enc][str(n)] == rec["sequence_accuracy"]  # one seed: the mean is the record


def test_figures_and_report_are_written(tiny_run):
    result, folder, _, _ = tiny_run
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "accuracy.png", "attnlab-run.json", "config.json",
                                                        "environment.json", "models", "report.html", "results.json",
                                                        "tokens.png"]
    # every finished model, saved as it finished: its records and its weights
    assert sorted(p.name for p in (folder / "models").iterdir()) == ["alibi-seed0", "rotary-seed0"]
    assert sorted(p.name for p in (folder / "models" / "rotary-seed0").iterdir()) == ["record.json", "weights.pt"]
    for name in ("accuracy.png", "tokens.png"):
        data = (folder / name).read_bytes()
        assert data[:8] == PNG and len(data) > 5000, name
    report = (folder / "report.html").read_text()
    assert report.count('src="data:image/png;base64,') == 2
    assert 'alt="accuracy"' in report and 'alt="tokens"' in report
    for line in format_table(result).splitlines():  # the table, HTML-escaped as it must be
        assert line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in report
    assert report.rstrip().endswith("</html>")


def test_the_global_random_states_are_left_alone(tiny_run):
    _, _, before, after = tiny_run
    assert_same_rng_states(before, after)


def test_the_same_config_gives_the_same_records(tiny_run):
    result, _, _, _ = tiny_run
    again = run_compare(CompareConfig(**TINY), progress=False)  # no folder: nothing written
    assert again.records == result.records
    assert again.folder is None


@pytest.mark.training
def test_squares_are_scored_by_mse_and_drawn_in_mse_png(tmp_path):
    config = CompareConfig(**{**TINY, "task": "squares", "encodings": ("rotary",), "train_len": 3,
                              "test_lens": (3, 5)})
    result = run_compare(config, tmp_path / "sq", progress=False)
    assert result.metric == "mean_squared_error"
    assert sorted(r["length"] for r in result.records) == [3, 5]
    for r in result.records:
        assert set(r) == {"encoding", "seed", "length", "mean_squared_error"}
        assert np.isfinite(r["mean_squared_error"]) and r["mean_squared_error"] > 0
    files = sorted(p.name for p in (tmp_path / "sq").iterdir())
    assert files == [".lock", "attnlab-run.json", "config.json", "environment.json", "models", "mse.png", "report.html",
                     "results.json"]
    assert (tmp_path / "sq" / "mse.png").read_bytes()[:8] == PNG
    doc = json.loads((tmp_path / "sq" / "results.json").read_text())
    assert doc["metric"] == "mean_squared_error" and doc["records"] == result.records
    assert "MSE" in format_table(result)


# -- the records are right ---------------------------------------------------------------


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_records_equal_the_metrics_of_the_model_the_seed_builds(architecture):
    # With a learning rate of 1e-30 the weights do not move (every Adam step is ~1e-30,
    # far below a float32 ulp of the weights), so the model each record scores is the
    # one its seed builds: rebuilt here with the public API, decoded and scored by hand.
    # The learned table gets rows for the longest input: the longest test length + EOS
    # (encoder-decoder), twice that for the decoder-only model's source + BOS + target.
    config = CompareConfig(**{**TINY, "encodings": ("rotary", "learned"), "n_seeds": 2, "lr": 1e-30,
                              "test_lens": (4, 7), "architecture": architecture})
    result = run_compare(config, progress=False)
    sets = make_task_sets(config.spec())
    preds = {}
    for encoding in ("rotary", "learned"):
        for seed in (0, 1):
            torch.manual_seed(seed)
            kwargs = dict(vocab_size=Vocab(10).size, d_model=16, n_heads=2, n_layers=1, position=encoding,
                          pad_id=PAD, max_relative_position=config.max_relative_position)
            if architecture == "decoder-only":
                model = DecoderOnlyTransformer(max_len=16, **kwargs).eval()
            elif architecture == "encoder-only":
                model = EncoderOnlyTransformer(max_len=14, **kwargs).eval()  # source and slots, no EOS
            else:
                model = Transformer(max_len=8, **kwargs).eval()
            for length in (4, 7):
                batch = sets.tests[length]
                target = batch.target_out
                if architecture == "decoder-only":
                    prompt = torch.cat([batch.source, torch.full_like(batch.source[:, :1], BOS)], dim=1)
                    pred = model.generate(prompt, length + 1, use_cache=False)
                elif architecture == "encoder-only":
                    # the source, then one empty slot (BOS) per target token; scored on the slots, no EOS
                    inputs = torch.cat([batch.source, torch.full_like(batch.source, BOS)], dim=1)
                    pred = model.predict(inputs)[:, length:]
                    target = batch.target_out[:, :length]
                else:
                    pred = model.generate(batch.source, length + 1, start=BOS, use_cache=False)
                preds[encoding, seed, length] = pred
                [rec] = [r for r in result.records
                         if (r["encoding"], r["seed"], r["length"]) == (encoding, seed, length)]
                assert rec["token_accuracy"] == pytest.approx(token_accuracy(pred, target), abs=1e-12)
                assert rec["sequence_accuracy"] == pytest.approx(sequence_accuracy(pred, target), abs=1e-12)
    # and the two seeds really are two different models
    assert not torch.equal(preds["rotary", 0, 7], preds["rotary", 1, 7])
    assert not torch.equal(preds["learned", 0, 7], preds["learned", 1, 7])


class _Stub(nn.Module):
    """A 'model' whose answers are fixed: the copy task's target, with ``wrong`` tokens changed.

    It answers as either architecture is asked: ``generate(source, steps, start=BOS)``
    (encoder-decoder) or ``generate(source + [BOS], steps)`` (decoder-only).
    """

    def __init__(self, wrong: str) -> None:
        super().__init__()
        self.wrong = wrong
        self.weight = nn.Parameter(torch.zeros(()))  # something for the optimiser to train

    def forward(self, source, target_in=None):
        shape = source.shape if target_in is None else target_in.shape
        return torch.zeros(*shape, Vocab(10).size) + self.weight  # [B, T, V]

    def generate(self, source, steps, start=None):
        if start is None:  # decoder-only: the prompt is the source and BOS
            assert (source[:, -1] == BOS).all()
            source = source[:, :-1]
        else:
            assert start == BOS
        assert steps == source.shape[1] + 1  # the target and its EOS
        pred = torch.cat([source, torch.full_like(source[:, :1], EOS)], dim=1)  # [N, L + 1]: copy, then EOS
        if self.wrong == "everything but EOS":
            pred[:, :-1] = PAD
        elif self.wrong == "the last token":
            pred[:, -2] = torch.where(pred[:, -2] == 3, 4, 3)  # another symbol
        elif self.wrong == "half the sequences":
            pred[::2, 0] = torch.where(pred[::2, 0] == 3, 4, 3)
        return pred


@pytest.mark.parametrize("architecture", ["decoder-only", "encoder-decoder"])
@pytest.mark.parametrize("wrong, token, sequence", [
    ("nothing", lambda n: 1.0, 1.0),
    ("everything but EOS", lambda n: 1 / (n + 1), 0.0),
    ("the last token", lambda n: n / (n + 1), 0.0),
    ("half the sequences", lambda n: 1 - 8 / (16 * (n + 1)), 0.5),  # 8 of 16 rows lose one of n + 1 tokens
])
def test_records_of_models_known_to_be_right_or_wrong(wrong, token, sequence, architecture, monkeypatch):
    monkeypatch.setattr(lengths_train, "build_model", lambda config, encoding: _Stub(wrong))
    config = CompareConfig(**{**TINY, "task": "copy", "test_lens": (4, 6, 9), "architecture": architecture})
    result = run_compare(config, progress=False)
    assert len(result.records) == 6
    for r in result.records:
        assert r["token_accuracy"] == pytest.approx(token(r["length"]), abs=1e-12), r
        assert r["sequence_accuracy"] == pytest.approx(sequence, abs=1e-12), r


class _SlotStub(nn.Module):
    """An encoder-only 'model' that writes the duplicate task's answer into the slots, ``wrong`` ones changed."""

    def __init__(self, wrong: str) -> None:
        super().__init__()
        self.wrong = wrong
        self.weight = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        tokens = x.clone()  # [N, L]: training batches get their own tokens back (the loss needs only a shape)
        n = x.shape[1] // 3
        if x.shape[1] == 3 * n and (x[:, n:] == BOS).all():  # a test set: n tokens, then 2n empty slots
            answer = torch.cat([x[:, :n], x[:, :n]], dim=1)  # [N, 2n]: ww
            if self.wrong == "the last token":
                answer[:, -1] = torch.where(answer[:, -1] == 3, 4, 3)
            elif self.wrong == "half the sequences":
                answer[::2, 0] = torch.where(answer[::2, 0] == 3, 4, 3)
            tokens[:, n:] = answer
        return nn.functional.one_hot(tokens, Vocab(2).size).float() + self.weight  # [N, L, V]


@pytest.mark.parametrize("wrong, token, sequence", [
    ("nothing", lambda n: 1.0, 1.0),
    ("the last token", lambda n: (2 * n - 1) / (2 * n), 0.0),
    ("half the sequences", lambda n: 1 - 8 / (16 * 2 * n), 0.5),  # 8 of 16 rows lose one of 2n tokens
])
def test_encoder_only_records_of_models_known_to_be_right_or_wrong(wrong, token, sequence, monkeypatch):
    # The slots hold the target and nothing else: no EOS is scored (Ruoss et al.'s masked accuracy).
    monkeypatch.setattr(lengths_train, "build_model", lambda config, encoding: _SlotStub(wrong))
    config = CompareConfig(**{**TINY, "task": "duplicate", "n_symbols": 2, "test_lens": (4, 6, 9),
                              "architecture": "encoder-only"})
    result = run_compare(config, progress=False)
    assert len(result.records) == 6
    for r in result.records:
        assert r["token_accuracy"] == pytest.approx(token(r["length"]), abs=1e-12), r
        assert r["sequence_accuracy"] == pytest.approx(sequence, abs=1e-12), r


def test_a_learned_table_is_sized_for_the_longest_test_length():
    # Trained at length 4, asked at 9: the lab gives the table rows for it (untrained ones).
    config = CompareConfig(**{**TINY, "encodings": ("learned",), "test_lens": (4, 9)})
    result = run_compare(config, progress=False)
    assert sorted(r["length"] for r in result.records) == [4, 9]
    assert all(0.0 <= r["token_accuracy"] <= 1.0 for r in result.records)
    # the same table without the room refuses length 9 (Transformer's own check)
    model = Transformer(vocab_size=Vocab(10).size, d_model=16, n_heads=2, n_layers=1, position="learned", max_len=5)
    with pytest.raises(ValueError, match="max_len=5"):
        model.generate(make_task_sets(config.spec()).tests[9].source, 10, start=BOS)


# -- summarise and format_table, from hand-written records -------------------------------

HAND = [  # two seeds, two lengths; means / extremes worked out by hand in the tests below
    {"encoding": "rotary", "seed": 0, "length": 4, "sequence_accuracy": 1.0, "token_accuracy": 1.0},
    {"encoding": "rotary", "seed": 1, "length": 4, "sequence_accuracy": 0.5, "token_accuracy": 0.9},
    {"encoding": "rotary", "seed": 0, "length": 8, "sequence_accuracy": 0.25, "token_accuracy": 0.5},
    {"encoding": "rotary", "seed": 1, "length": 8, "sequence_accuracy": 0.0, "token_accuracy": 0.3},
    {"encoding": "alibi", "seed": 0, "length": 4, "sequence_accuracy": 1.0, "token_accuracy": 1.0},
    {"encoding": "alibi", "seed": 1, "length": 4, "sequence_accuracy": 1.0, "token_accuracy": 1.0},
    {"encoding": "alibi", "seed": 0, "length": 8, "sequence_accuracy": 0.5, "token_accuracy": 0.8},
    {"encoding": "alibi", "seed": 1, "length": 8, "sequence_accuracy": 0.7, "token_accuracy": 0.9},
]


def test_summarise_gives_mean_min_and_max_over_seeds():
    records = HAND[::-1]  # order does not matter
    assert summarise(records, "sequence_accuracy") == {
        "rotary": {4: (0.75, 0.5, 1.0), 8: (0.125, 0.0, 0.25)},
        "alibi": {4: (1.0, 1.0, 1.0), 8: (pytest.approx(0.6), 0.5, 0.7)},
    }
    tokens = summarise(records, "token_accuracy")
    assert tokens["rotary"][4] == (pytest.approx(0.95), 0.9, 1.0)
    assert tokens["alibi"][8] == (pytest.approx(0.85), 0.8, 0.9)
    assert list(tokens["rotary"]) == [4, 8]  # lengths in order


def test_format_table_shows_the_means_in_percent():
    config = CompareConfig(encodings=("rotary", "alibi"), n_seeds=2, train_len=4, test_lens=(8, 4))
    lines = format_table(CompareResult(config, HAND[::-1], seconds=1.0)).splitlines()
    assert lines[0] == "reverse, decoder-only: trained on lengths up to 4"
    assert lines[1] == "cells: sequence accuracy % mean [min-max over 2 seeds] / token accuracy % mean"
    assert lines[2].startswith("*: the best encoding at that length")
    assert lines[4].split() == ["encoding", "L=4", "(train)", "L=8"]  # lengths sorted, training one marked
    # sequence mean [min-max] / token mean; alibi is best at both lengths
    assert lines[5].split() == ["rotary", "75.0", "[50-100]", "/", "95", "12.5", "[0-25]", "/", "40"]
    assert lines[6].split() == ["alibi", "100.0", "[100-100]", "/", "100*", "60.0", "[50-70]", "/", "85*"]
    assert lines[7].split() == ["chance", "~0", "/", "10", "~0", "/", "10"]  # 10 symbols: 0.1**4, 0.1**8; 0.1
    assert len(lines) == 8
    assert len({len(line) for line in lines[4:]}) == 1  # columns line up


def test_format_table_of_the_squares_shows_mse():
    config = CompareConfig(task="squares", encodings=("t5",), n_seeds=2, train_len=3, test_lens=(3, 6))
    records = [{"encoding": "t5", "seed": s, "length": n, "mean_squared_error": v}
               for s, n, v in [(0, 3, 0.5), (1, 3, 0.25), (0, 6, 2.0), (1, 6, 1.0)]]
    lines = format_table(CompareResult(config, records, seconds=1.0)).splitlines()
    assert lines[:2] == ["squares: trained on lengths up to 3", "cells: test MSE mean [min-max over 2 seeds]"]
    assert lines[4].split() == ["t5", "0.375", "[0.25-0.5]", "1.5", "[1-2]"]  # one encoding: no mark, no chance
    assert len(lines) == 5


# -- CompareConfig refuses bad settings, naming them -------------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    ({"task": "division"}, ValueError,
     r"unknown task 'division'; known: 'copy', 'reverse', 'duplicate', 'sort', 'squares', 'scan', 'even-pairs'"),
    ({"encodings": ("rotary", "wavelet")}, ValueError,
     r"unknown encoding 'wavelet'; known: 'sinusoidal', 'learned', 'relative', 't5', 'rotary', 'alibi', 'none'"),
    ({"encodings": ("alibi", "rotary", "alibi")}, ValueError, r"encodings has repeats: \['alibi', 'rotary', 'alibi'\]"),
    ({"encodings": ()}, ValueError, "encodings is empty: name at least one of sinusoidal, learned"),
    ({"encodings": "rotary"}, TypeError, "encodings must be a tuple, got 'rotary'"),
    ({"n_seeds": 0}, ValueError, "seeds must be positive, got 0"),
    ({"epochs": -1}, ValueError, "epochs must be positive, got -1"),
    ({"n_train": 0}, ValueError, "n_train must be positive, got 0"),
    ({"d_model": -16}, ValueError, "d_model must be positive, got -16"),
    ({"n_heads": 0}, ValueError, "n_heads must be positive, got 0"),
    ({"train_len": 0}, ValueError, "train_len must be positive, got 0"),
    ({"batch_size": 2.5}, TypeError, r"batch_size must be an integer, got 2.5 \(float\)"),
    ({"test_lens": (4, 0)}, ValueError, "test_lens must be positive, got 0"),
    ({"test_lens": ()}, ValueError, "test_lens is empty"),
    ({"test_lens": (4, 4)}, ValueError, r"test_lens must be a non-empty list of distinct lengths, got \[4, 4\]"),
    ({"d_model": 16, "n_heads": 3}, ValueError, r"d_model \(16\) must be divisible by n_heads \(3\)"),
    ({"min_train_len": 5}, ValueError, r"min_train_len \(5\) must be <= train_len \(4\)"),
    ({"lr": 0.0}, ValueError, "lr must be positive, got 0.0"),
    ({"lr": -1e-3}, ValueError, "lr must be positive, got -0.001"),
    ({"lr": float("nan")}, ValueError, "lr must be finite, got nan"),
    ({"lr": "0.01"}, TypeError, r"lr must be a number, got '0.01' \(str\)"),
    ({"task": "squares", "train_len": 2}, ValueError, "train_len must be >= 3, got 2"),
    ({"extras": {"note": object()}}, TypeError, "extras must be JSON-serialisable"),
])
def test_bad_settings_name_the_argument_and_value(kwargs, error, match):
    with pytest.raises(error, match=match):
        CompareConfig(**{**TINY, **kwargs})


def test_odd_heads_are_refused_only_where_rotary_needs_them(tmp_path):
    # The settings build nothing: the size a scheme refuses is refused where the models are built, before the
    # run folder is claimed.
    config = CompareConfig(**{**TINY, "d_model": 6, "n_heads": 2})  # rotary, alibi: head_dim 3
    with pytest.raises(ValueError, match=r"head_dim must be even to rotate every feature, got head_dim=3"):
        lengths_train.check_models(config)
    with pytest.raises(ValueError, match=r"head_dim must be even to rotate every feature, got head_dim=3"):
        run_compare(config, tmp_path / "run", progress=False)
    assert list(tmp_path.iterdir()) == []  # nothing written
    lengths_train.check_models(CompareConfig(**{**TINY, "encodings": ("alibi", "t5"), "d_model": 6, "n_heads": 2}))


def test_bad_folders_are_refused_before_any_training(tmp_path, monkeypatch):
    monkeypatch.setattr(lengths_train, "train_one", lambda *a, **k: pytest.fail("trained before checking the folder"))
    monkeypatch.setattr(sweep, "train_seeds", lambda *a, **k: pytest.fail("trained before checking the folder"))
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    config = CompareConfig(**TINY)
    for folder, words in [(a_file, "is a file, not a folder"), (a_file / "x", "is not a folder"),
                          (users, "holds files that are not an attnlab run")]:
        with pytest.raises(ValueError, match=words):
            run_compare(config, folder, progress=False)
    with pytest.raises(TypeError, match="progress"):
        run_compare(config, tmp_path / "new", progress="yes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "users"] and a_file.read_text() == "keep me"
    assert [p.name for p in users.iterdir()] == ["notes.txt"]


# -- the command line ----------------------------------------------------------------------


def cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's own errors exit directly
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.training
def test_cli_compare_prints_the_table_and_writes_the_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "compare", *TINY_FLAGS, "--out", "runs_x")
    assert code == 0, err
    assert err == ""
    folder = tmp_path / "runs_x"
    assert {"results.json", "accuracy.png", "tokens.png", "report.html"} <= {p.name for p in folder.iterdir()}
    doc = json.loads((folder / "results.json").read_text())
    config = CompareConfig(**doc["config"])
    assert (config.encodings, config.n_seeds, config.epochs, config.n_train, config.train_len, config.test_lens) == (
        ("rotary", "alibi"), 1, 1, 64, 4, (4, 6))
    table = format_table(CompareResult(config, doc["records"], doc["seconds"]))
    assert table in out  # the table printed is the one of the records written
    lines = out.splitlines()
    assert lines[0].startswith("comparing 2 encodings x 1 seed(s) on reverse")
    assert lines[-1].startswith("2 models in ") and "results.json" in lines[-1]


def test_cli_compare_default_test_lengths_follow_the_training_length(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run(config, folder, resume=False, progress=None, announce=None, jobs=1, ray_address=None, device=None):
        seen["config"] = config
        raise ValueError("stop here")  # the settings are all this test wants

    monkeypatch.setattr(compare, "run_compare", fake_run)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "compare", "--train-len", "6", "--quick", "--out", "x")
    assert code == 2 and "stop here" in err
    config = seen["config"]
    assert config.test_lens == (6, 9, 12, 18)  # 1, 1.5, 2 and 3 times --train-len
    assert (config.n_seeds, config.n_train, config.epochs) == (lengths.QUICK["n_seeds"], lengths.QUICK["n_train"],
                                                             lengths.QUICK["epochs"])


@pytest.mark.parametrize("flags, words", [
    (["--task", "division"], "division"),
    (["--encodings", "rotary,wavelet"], "wavelet"),
    (["--encodings", "rotary,rotary"], "repeats"),
    (["--encodings", ","], "encodings is empty"),
    (["--test-lens", "4,x"], "4,x"),
    (["--test-lens", "4,0"], "--test-lens must be positive, got 0"),
    (["--seeds", "0"], "--seeds"),
    (["--epochs", "-1"], "--epochs"),
    (["--n-train", "many"], "'many'"),
    (["--task", "squares", "--train-len", "2"], "--train-len must be >= 3, got 2"),
    (["--out", "a_file"], "'a_file' is a file"),
    (["--jobs", "0"], "--jobs"),
    (["--ray", "127.0.0.1:1", "--out", "new"], "--ray '127.0.0.1:1': no Ray cluster answers there"),
    (["--ray", "local", "--jobs", "2", "--out", "new"], "choose local workers or a Ray cluster"),
    (["--device", "tpu", "--out", "new"], "--device 'tpu'"),
    pytest.param(["--device", "cuda", "--out", "new"], "--device cuda: CUDA is not available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    (["--out", "a_file/x"], "'a_file/x'"),
    ([], "'old' holds files that are not an attnlab run"),  # a folder without the marker is not overwritten
])
def test_cli_bad_input_is_one_line_and_exit_2(flags, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("keep me")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.json").write_text("{}")
    argv = [*TINY_FLAGS, "--out", "old", *flags]  # the last --out wins
    code, out, err = cli(capsys, "compare", *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("attnlab compare: error:"), err
    assert words in err and "Traceback" not in err
    # nothing created, nothing lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "old"]
    assert (tmp_path / "a_file").read_text() == "keep me"
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["results.json"]
    assert (tmp_path / "old" / "results.json").read_text() == "{}"


def test_cli_more_jobs_than_cores_is_allowed_with_a_warning_line(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake_run(config, folder, resume=False, progress=None, announce=None, jobs=1, ray_address=None, device=None):
        seen.update(jobs=jobs, device=device)
        raise ValueError("stop here")

    monkeypatch.setattr(compare, "run_compare", fake_run)
    monkeypatch.setattr(sweep, "cpu_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "compare", *TINY_FLAGS, "--jobs", "3", "--device", "cpu", "--out", "x")
    lines = err.splitlines()
    assert lines[0] == ("attnlab compare: warning: --jobs 3 is more than the 2 cores this process may use; "
                        "the workers will share them")
    assert seen == {"jobs": 3, "device": torch.device("cpu")} and code == 2 and "stop here" in lines[1]
