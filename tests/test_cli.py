"""The attnlab command line: output, files written, and bad input as one line + exit 2."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnlab.cli import FIGURE_NAMES, RUN_FIGURES, main
from attnlab.encodings import fixed_base, sinusoidal

from cli_helpers import cli


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_encode_prints_the_pe_labs_table(capsys):
    code, out, err = run(capsys, "encode", "--d-model", "8", "--max-len", "4", "--round", "4")
    assert code == 0 and err == ""
    # The positional-encoding lab's printed rows, character for character (1.0000 where float32 would show 0.9999).
    assert "[ 0.8415,  0.5403,  0.0998,  0.9950,  0.0100,  1.0000,  0.0010,  1.0000]" in out


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_encode_writes_files(capsys, tmp_path, suffix):
    out_file = tmp_path / f"pe{suffix}"
    code, _, err = run(capsys, "encode", "--d-model", "6", "--max-len", "12", "--layout", "concat",
                       "--out", str(out_file))
    assert code == 0 and "wrote" in err
    data = np.load(out_file) if suffix == ".npy" else np.loadtxt(out_file, delimiter=",")
    np.testing.assert_allclose(data, sinusoidal(12, 6, layout="concat").numpy(), atol=1e-9)
    assert [p.name for p in tmp_path.iterdir()] == [out_file.name]  # no temporary left behind


def test_encode_fixed_base(capsys):
    code, out, _ = run(capsys, "encode", "--encoding", "fixed-base", "--max-len", "2", "--round", "2")
    assert code == 0
    assert "0.95, 0.31, 0.78, 0.62" in out
    torch.testing.assert_close(fixed_base(2)[1, 2:4].round(decimals=2), torch.tensor([0.95, 0.31]))


def test_audit_table_and_json(capsys):
    code, out, _ = run(capsys, "audit", "--encoding", "sinusoidal", "--d-model", "8", "--max-len", "10")
    assert code == 0
    for name in ("bounded", "unique", "shift_invariant", "monotonic", "linear_shift", "precision"):
        assert name in out
    code, out, _ = run(capsys, "audit", "--encoding", "fixed-base", "--max-len", "200", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["encoding"] == "fixed-base"
    unique = [c for c in doc["checks"] if c["name"] == "unique"][0]
    assert unique["verdict"] == "fail"


def test_audit_shows_the_labs_formula_losing_precision(capsys):
    code, out, _ = run(capsys, "audit", "--encoding", "lab-float32", "--d-model", "16",
                       "--max-len", "20000", "--max-positions", "64", "--json")
    assert code == 0
    precision = [c for c in json.loads(out)["checks"] if c["name"] == "precision"][0]
    assert precision["verdict"] == "fail" and precision["value"] > 1e-4


@pytest.mark.parametrize("name", [n for n in FIGURE_NAMES if n not in RUN_FIGURES])  # run ones: test_runs
def test_plot_every_figure(capsys, tmp_path, name):
    out_file = tmp_path / f"{name}.png"
    code, _, err = run(capsys, "plot", name, "--out", str(out_file))
    assert code == 0, err
    assert out_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["encode", "--d-model", "0"], "--d-model"),
        (["encode", "--d-model", "-3"], "--d-model"),
        (["encode", "--max-len", "0"], "--max-len"),
        (["encode", "--d-model", "eight"], "'eight'"),
        (["encode", "--layout", "zigzag"], "zigzag"),
        (["encode", "--out", "/nonexistent-folder/pe.npy"], "/nonexistent-folder"),
        (["encode", "--out", "pe.txt"], "pe.txt"),
        (["audit", "--encoding", "bogus"], "bogus"),
        (["audit", "--bases", "4,x"], "4,x"),
        (["plot", "no-such-figure", "--out", "x.png"], "no-such-figure"),
        (["plot", "columns", "--columns", "99", "--out", "c.png"], "99"),
        (["plot", "shifted", "--delta", "500", "--out", "s.png"], "delta"),
        (["plot", "encoding", "--out", "/nonexistent-folder/x.png"], "/nonexistent-folder"),
        (["plot", "encoding", "--out", "figure.jpg2"], "figure.jpg2"),
        (["frobnicate"], "frobnicate"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors (bad flag values) exit directly
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert words in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.process
def test_console_script_and_module_exit_2_without_traceback(tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    script = os.path.join(os.path.dirname(sys.executable), "attnlab")
    for cmd in ([sys.executable, "-m", "attnlab"], [script]):
        proc = subprocess.run(cmd + ["encode", "--d-model", "0"], capture_output=True, text=True, env=env)
        assert proc.returncode == 2
        assert proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    # One entry point is enough here: both run the same main(), as the bad input above shows.
    proc = subprocess.run([script, "--version"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("attnlab ")


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize(("argv", "message"), [
    (["--teacher-forcing", "0.3"], "--teacher-forcing: the selfattn-pe model has no teacher forcing"),
    (["--model", "transformer", "--teacher-forcing", "0.3"], "the transformer model has no teacher forcing"),
    (["--model", "gru", "--teacher-forcing", "2"], "--teacher-forcing: must be a number from 0 to 1, got 2"),
    (["--model", "gru", "--teacher-forcing", "nan"], "--teacher-forcing: must be a number from 0 to 1, got nan"),
    (["--model", "gru-attn", "--teacher-forcing", "x"], "--teacher-forcing: expected a number from 0 to 1"),
])
def test_teacher_forcing_is_a_probability_for_the_gru_models(capsys, tmp_path, argv, message):
    code, out, err = cli(capsys, "train", *argv, "--out", str(tmp_path / "r"))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.training
def test_teacher_forcing_and_the_test_loaders_draws_are_recorded_in_the_run(capsys, tmp_path):
    code, _, err = cli(capsys, "train", "--model", "gru", "--teacher-forcing", "0", "--no-test-draws-global",
                            "--epochs", "1", "--n-train", "16", "--out", str(tmp_path / "r"), "--no-progress")
    assert code == 0, err
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["teacher_forcing_prob"] == 0.0 and config["test_draws_global"] is False
    assert config["seed"] == 43 and config["train_seed"] == 42  # gru: no lab trains it; the book's set_seed(42)
    code, _, err = cli(capsys, "train", "--out", str(tmp_path / "r"), "--resume", "--teacher-forcing", "0.5")
    assert code == 2 and "--teacher-forcing: saved 0.0, given 0.5" in err
