"""A train run folder is all-or-nothing (issue 27): resume, predict and plot read it, train writes it.

* **Data loss.** Whatever ``train --resume`` reads (the checkpoint, ``metrics.jsonl``) is checked
  before anything is written: a checkpoint that cannot be read is an error, never a fresh start;
  a history that does not agree with the checkpoint's own is refused, never merged; a missing
  one is rebuilt from the checkpoint, with a message.
* **Writes outside the run folder.** Nothing is written through a link: a linked ``figures``
  folder is refused before training, a link at a file's name is replaced, its target untouched.
* **Tracebacks and messages.** One line, naming the flag and the value, exit 2; Ctrl-C at any
  moment of ``attnlab train``: one line and status 130.

Each refusal leaves the run folder byte for byte as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import attnlab
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

DATA_LOSS, OUTSIDE, MESSAGES = "data loss", "writes outside the run folder", "tracebacks and messages"
RESUME = ["train", "--resume", "--epochs", "3", "--no-progress", "--out"]
PREDICT = ["predict", "--points", "1,1 1,-1", "--run"]
# The subprocesses import the attnlab this test imports (its src folder, whatever PYTHONPATH chose).
ENV = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONPATH=str(Path(attnlab.__file__).parents[1]))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One run of 2 epochs, trained once for the module; tests copy it (:func:`copy_run`)."""
    folder = tmp_path_factory.mktemp("train-folder") / "ok"
    assert main(["train", "--epochs", "2", "--out", str(folder), "--no-progress"]) == 0
    return folder


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run, ``tmp_path/run``."""
    dest = tmp_path / "run"
    shutil.copytree(trained, dest, symlinks=True)
    return dest


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry below ``folder``, links not followed: a file's hash, a link's target, a folder's mark."""
    state = {}
    for path in sorted(folder.rglob("*")):
        if path.name == ".lock":  # the contract's own lock, taken by every writer
            continue
        name = str(path.relative_to(folder))
        if path.is_symlink():
            state[name] = "-> " + os.readlink(path)
        elif path.is_file():
            state[name] = hashlib.sha256(path.read_bytes()).hexdigest() + f" {path.stat().st_mtime_ns}"
        else:
            state[name] = "folder"
    return state


def refused(capsys, argv, match: str, *, unchanged: Path | None = None) -> str:
    """``attnlab ARGV`` exits 2 with one line on stderr matching ``match``, nothing on stdout, and
    ``unchanged`` (a folder) as it was; returns the line."""
    before = snapshot(unchanged) if unchanged is not None else None
    code, out, err = cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2, err[-2000:]
    assert out == "", out
    assert len(lines) == 1, err[-2000:]
    assert re.search(match, lines[0]), lines[0]
    if unchanged is not None:
        assert snapshot(unchanged) == before
    return lines[0]


def epochs(folder: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


def metric_lines(folder: Path) -> list[str]:
    return (folder / "metrics.jsonl").read_text().splitlines()


def write_lines(folder: Path, lines: list[str]) -> None:
    (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))


# -- data loss: a checkpoint that cannot be read is an error, never a fresh start -------------------


@pytest.mark.training
@pytest.mark.bad_input(DATA_LOSS)
@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_resume_refuses_a_checkpoint_link_it_cannot_follow(run, tmp_path, capsys, link):
    # The example: exit 0, training restarted from epoch 1 and metrics.jsonl rewritten.
    (run / "checkpoint.pt").unlink()
    (run / "checkpoint.pt").symlink_to(tmp_path / "gone.pt" if link == "dangling" else "checkpoint.pt")
    what = r"which does not exist" if link == "dangling" else r"symbolic link loop"
    line = refused(capsys, [*RESUME, run], rf"checkpoint .*checkpoint\.pt.* {what}", unchanged=run)
    assert "Errno" not in line


@pytest.mark.training
@pytest.mark.bad_input(DATA_LOSS)
def test_resume_refuses_a_missing_checkpoint_once_the_run_has_made_progress(run, capsys):
    # metrics.jsonl records two epochs: the run was not killed before its first checkpoint, so starting
    # again from epoch 1 would replace its history.
    (run / "checkpoint.pt").unlink()
    refused(capsys, [*RESUME, run], r"metrics\.jsonl.* 2 epochs.*no checkpoint", unchanged=run)


@pytest.mark.training
@pytest.mark.bad_input(DATA_LOSS)
def test_resume_refuses_a_checkpoint_that_is_a_folder(run, capsys):
    (run / "checkpoint.pt").unlink()
    (run / "checkpoint.pt").mkdir()
    refused(capsys, [*RESUME, run], r"checkpoint .* is a folder", unchanged=run)


@pytest.mark.training
@pytest.mark.bad_input(DATA_LOSS)
def test_resume_refuses_a_checkpoint_whose_losses_are_not_one_per_epoch(run, capsys):
    # A history shorter than its epoch count: merged with metrics.jsonl it would lose (or invent) epochs.
    import torch

    from attnlab.training.checkpoint import write_checkpoint

    state = torch.load(run / "checkpoint.pt", weights_only=True)
    state["loss"] = state["loss"][:1]
    write_checkpoint(run / "checkpoint.pt", state)
    for argv in (RESUME, PREDICT):
        refused(capsys, [*argv, run], r"checkpoint .* holds 2 epochs but 1 losses", unchanged=run)


# -- data loss: metrics.jsonl agrees with the checkpoint, or the resume is refused -----------------


@pytest.mark.training
@pytest.mark.bad_input(DATA_LOSS)
@pytest.mark.parametrize(("damage", "match"), [
    # the two examples: they ended as epochs 1, 3 (here) and 1, 2, 1, 2, 3, with exit 0
    ("missing middle", r"metrics\.jsonl.* holds epochs? 1, but checkpoint\.pt holds 2"),
    ("duplicated block", r"metrics\.jsonl.* line 3 is epoch 1, expected 3"),
    # older checkpoint than metrics: more than the one line a kill between the two writes leaves
    ("checkpoint older", r"metrics\.jsonl.* line 4 is epoch 4; checkpoint\.pt holds 2 epochs"),
    # a line whose loss is not the checkpoint's (another run's history, or an edited one)
    ("another loss", r"metrics\.jsonl.* line 2 \(epoch 2\) has loss nan, but checkpoint\.pt has 0\.9"),
    # a record that is not a record, in the middle
    ("not a record", r"metrics\.jsonl.* line 1 is not an epoch record"),
])
def test_resume_refuses_a_history_the_checkpoint_does_not_hold(run, capsys, damage, match):
    one, two = metric_lines(run)
    record = json.loads(two)
    if damage == "missing middle":
        lines = [one]
    elif damage == "duplicated block":
        lines = [one, two, one, two]
    elif damage == "checkpoint older":
        lines = [one, two, json.dumps({**record, "epoch": 3}), json.dumps({**record, "epoch": 4})]
    elif damage == "another loss":
        lines = [one, json.dumps({**record, "loss": float("nan")})]
    else:
        lines = ["[1, 2]", two]
    write_lines(run, lines)
    refused(capsys, [*RESUME, run], match, unchanged=run)


@pytest.mark.training
@pytest.mark.bad_input(DATA_LOSS)
def test_a_missing_history_is_rebuilt_from_the_checkpoint_with_a_message(run, trained, capsys):
    (run / "metrics.jsonl").unlink()
    code, out, err = cli(capsys, *RESUME, run)
    assert code == 0, err
    assert re.search(r"metrics\.jsonl.*rebuilt epochs 1 to 2 from checkpoint\.pt", err), err
    assert epochs(run) == [1, 2, 3]
    rebuilt = [json.loads(line) for line in metric_lines(run)[:2]]
    saved = [json.loads(line) for line in metric_lines(trained)]
    for key in ("epoch", "loss", "val_loss", "lr", "best"):
        assert [r[key] for r in rebuilt] == [s[key] for s in saved], key


@pytest.mark.training
@pytest.mark.bad_input(DATA_LOSS)
def test_the_line_a_kill_between_metrics_and_checkpoint_leaves_is_dropped(run, trained, capsys):
    # Not damage: the next epoch's line (its checkpoint never written), then half a line.
    one, two = metric_lines(run)
    write_lines(run, [one, two, json.dumps({**json.loads(two), "epoch": 3})])
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"epoch": 4, "lo')
    code, _, err = cli(capsys, *RESUME, run)
    assert code == 0, err
    assert epochs(run) == [1, 2, 3]
    assert metric_lines(run)[:2] == metric_lines(trained)


# -- writes outside the run folder ------------------------------------------------------------------


@pytest.mark.training
@pytest.mark.bad_input(OUTSIDE)
def test_a_linked_figures_folder_is_refused_before_training(run, tmp_path, capsys):
    # The example: five PNGs written into the link's target.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(run / "figures")
    (run / "figures").symlink_to(elsewhere)
    refused(capsys, [*RESUME, run], r"'figures' .* is a symbolic link", unchanged=run)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.training
@pytest.mark.bad_input(OUTSIDE)
def test_a_figures_link_into_the_run_folder_itself_is_refused_too(run, capsys):
    shutil.rmtree(run / "figures")
    (run / "figures").symlink_to(".")
    refused(capsys, [*RESUME, run], r"'figures' .* is a symbolic link", unchanged=run)


@pytest.mark.training
@pytest.mark.bad_input(OUTSIDE)
def test_a_file_in_place_of_the_figures_folder_is_refused_before_training(run, capsys):
    shutil.rmtree(run / "figures")
    (run / "figures").write_text("not a folder")
    refused(capsys, [*RESUME, run], r"'figures' .* is not a folder", unchanged=run)


@pytest.mark.training
@pytest.mark.bad_input(OUTSIDE)
def test_a_linked_figures_folder_is_refused_on_a_fresh_run_too(trained, tmp_path, capsys):
    # A run killed before its first checkpoint is reused by a fresh run: its figures link is refused.
    folder, elsewhere = tmp_path / "fresh", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    shutil.copy(trained / "attnlab-run.json", folder)
    (folder / "figures").symlink_to(elsewhere)
    refused(capsys, ["train", "--epochs", "1", "--no-progress", "--out", folder], r"'figures' .* symbolic link",
            unchanged=folder)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.training
@pytest.mark.bad_input(OUTSIDE)
@pytest.mark.parametrize("name", ["report.html", "summary.json", "figures/losses.png", "figures/predictions.png"])
def test_a_folder_where_the_run_writes_a_file_is_refused_before_training(run, capsys, name):
    # It would have failed after training, with the checkpoint and metrics already moved on.
    (run / name).unlink()
    (run / name).mkdir()
    (run / name / "keep.txt").write_text("a user's file")
    refused(capsys, [*RESUME, run], rf"'{re.escape(name)}' in .* is a folder where the run writes a file",
            unchanged=run)


@pytest.mark.training
@pytest.mark.bad_input(OUTSIDE)
def test_a_users_own_folder_in_figures_is_left_alone(run, capsys):
    (run / "figures" / "old").mkdir()
    (run / "figures" / "old" / "keep.png").write_bytes(b"a user's figure")
    code, _, err = cli(capsys, *RESUME, run)
    assert code == 0, err
    assert (run / "figures" / "old" / "keep.png").read_bytes() == b"a user's figure"


@pytest.mark.training
@pytest.mark.bad_input(OUTSIDE)
@pytest.mark.parametrize("name", ["report.html", "summary.json", "config.json", "metrics.jsonl", "checkpoint.pt",
                                  "figures/losses.png"])
def test_a_link_at_a_files_name_is_replaced_never_written_through(run, tmp_path, capsys, name):
    # The target is a copy of the file (so the resume reads what it should): it must stay as it was.
    target = tmp_path / "outside" / Path(name).name
    target.parent.mkdir()
    shutil.copy(run / name, target)
    before = target.read_bytes()
    (run / name).unlink()
    (run / name).symlink_to(target)
    code, _, err = cli(capsys, *RESUME, run)
    assert code == 0, err
    assert target.read_bytes() == before
    assert not (run / name).is_symlink() and (run / name).is_file()
    assert epochs(run) == [1, 2, 3]


# -- tracebacks and messages ------------------------------------------------------------------------


@pytest.mark.bad_input(MESSAGES)
def test_predict_names_a_config_nested_too_deeply(run, capsys):
    (run / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, [*PREDICT, run], r"config\.json.* nested too deeply", unchanged=run)


@pytest.mark.training
@pytest.mark.bad_input(MESSAGES)
def test_resume_names_a_metrics_line_nested_too_deeply(run, capsys):
    one, two = metric_lines(run)
    write_lines(run, ["[" * 100_000 + "]" * 100_000, two])
    refused(capsys, [*RESUME, run], r"metrics\.jsonl.* line 1 is not an epoch record", unchanged=run)


@pytest.mark.bad_input(MESSAGES)
@pytest.mark.parametrize("argv", [PREDICT, ["plot", "losses", "--out", "losses.png", "--run"],
                                  ["plot", "attention", "--out", "attention.png", "--run"]])
def test_predict_and_plot_name_a_comparison_folder_as_one(tmp_path, capsys, monkeypatch, argv):
    folder = tmp_path / "cmp"
    folder.mkdir()
    (folder / "attnlab-run.json").write_text(json.dumps({"kind": "compare", "attnlab": "0.0.0"}))
    (folder / "config.json").write_text(json.dumps({"encodings": ["rotary"], "seeds": [1]}))
    monkeypatch.chdir(tmp_path)
    refused(capsys, [*argv, folder], r"holds an attnlab compare run; .*read a train run", unchanged=folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp"]


@pytest.mark.bad_input(MESSAGES)
@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_predict_and_plot_name_a_checkpoint_link_they_cannot_follow(run, tmp_path, capsys, monkeypatch, link):
    (run / "checkpoint.pt").unlink()
    (run / "checkpoint.pt").symlink_to(tmp_path / "gone.pt" if link == "dangling" else "checkpoint.pt")
    what = r"which does not exist" if link == "dangling" else r"symbolic link loop"
    monkeypatch.chdir(tmp_path)
    for argv in (PREDICT, ["plot", "losses", "--out", "losses.png", "--run"]):
        line = refused(capsys, [*argv, run], rf"checkpoint .* {what}", unchanged=run)
        assert "Errno" not in line and "Too many levels" not in line


@pytest.mark.bad_input(MESSAGES)
def test_predict_names_a_dangling_config_link(run, tmp_path, capsys):
    (run / "config.json").unlink()
    (run / "config.json").symlink_to(tmp_path / "gone.json")
    refused(capsys, [*PREDICT, run], r"config\.json .* symbolic link to .*gone\.json.*which does not exist",
            unchanged=run)


@pytest.mark.bad_input(MESSAGES)
def test_resume_names_a_dangling_config_link(run, tmp_path, capsys):
    (run / "config.json").unlink()
    (run / "config.json").symlink_to(tmp_path / "gone.json")
    refused(capsys, [*RESUME, run], r"config\.json .* symbolic link to .*gone\.json.*which does not exist",
            unchanged=run)


@pytest.mark.bad_input(MESSAGES)
def test_plot_predictions_names_a_config_nested_too_deeply(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (run / "config.json").write_text("{\"a\": " * 50_000 + "1" + "}" * 50_000)
    refused(capsys, ["plot", "predictions", "--out", "p.png", "--run", run], r"config\.json.* nested too deeply",
            unchanged=run)
    assert not (tmp_path / "p.png").exists()


@pytest.mark.bad_input(MESSAGES)
def test_resume_with_a_negative_train_seed_names_the_flag(run, capsys):
    line = refused(capsys, [*RESUME, run, "--train-seed", "-1"], r"--train-seed: saved 42, given -1", unchanged=run)
    assert "shuffle_seed" not in line


@pytest.mark.bad_input(MESSAGES)
@pytest.mark.parametrize("seed", ["-1", str(-(2**63))])
def test_a_negative_train_seed_is_named_and_leaves_no_folder(tmp_path, capsys, monkeypatch, seed):
    monkeypatch.chdir(tmp_path)
    line = refused(capsys, ["train", "--epochs", "1", "--no-progress", "--out", "r", "--train-seed", seed],
                   rf"--train-seed.*{re.escape(seed)}")
    assert "shuffle_seed" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.bad_input(MESSAGES)
def test_a_train_seed_the_loaders_refuse_leaves_no_folder_from_python(tmp_path):
    # Whatever the config alone can refuse is refused before the folder is made: here by the config itself.
    from attnlab.labs.squares.train import SquaresConfig

    with pytest.raises(ValueError, match=r"train_seed.*-1"):
        SquaresConfig(train_seed=-1, epochs=1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.bad_input(MESSAGES)
@pytest.mark.parametrize(("given", "match"), [
    (["--model", "gru"], r"--model: saved 'selfattn-pe', given 'gru'"),
    (["--model", "transformer", "--n-layers", "2"], r"--model: saved 'selfattn-pe', given 'transformer'"),
    (["--model", "gru", "--d-model", "4"], r"--model: saved 'selfattn-pe', given 'gru'"),
])
def test_resume_with_another_model_names_the_model(run, capsys, given, match):
    line = refused(capsys, [*RESUME, run, *given], rf"was made with other settings \({match}", unchanged=run)
    assert "--n-heads" not in line


# -- Ctrl-C at any moment of `attnlab train` ------------------------------------------------------------

# When the signal is sent: as an import ends (-X importtime prints a line then: a readiness condition,
# whatever the machine's load), then after a delay. The command line's modules; numpy, imported from
# inside torch's C++ initialisation (where pybind11 aborted on an interrupt); torch; and moments over
# the model's building and the first epochs.
# Each moment is a fresh process, about 6 s of the suite on 2 cores: delays of 0.05, 0.2 and 1.0 s
# after attnlab.cli were dropped, as they land, like 0.5 s, inside torch's import.
MOMENTS = [("attnlab.cli", 0.0), ("torch._opaque_base", 0.0), ("torch", 0.0), ("attnlab.cli", 0.5),
           ("attnlab.cli", 2.0)]


def _start_train(folder: Path, *, importtime: bool) -> subprocess.Popen:
    # -X importtime prints a line as each import ends: the readiness condition, whatever the machine's load.
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.Popen([sys.executable, *flags, "-m", "attnlab", "train", "--epochs", "3",
                             "--no-progress", "--out", str(folder)], env=ENV, cwd=folder.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_line(stream, pattern: str) -> list[str]:
    seen = []
    for line in stream:
        seen.append(line)
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"never printed {pattern!r}: {''.join(seen)[-2000:]}")


def _check_interrupted(proc: subprocess.Popen, early: list[str], folder: Path) -> None:
    out, rest = proc.communicate(timeout=600)
    err = [line for line in [*early, *rest.splitlines(keepends=True)] if not line.startswith("import time:")]
    text = "".join(err)
    assert proc.returncode in (130, 0), (proc.returncode, text[-3000:])  # 0: it finished before the signal
    assert "Traceback" not in text and "terminate called" not in text, text[-3000:]
    if proc.returncode == 130:
        assert len(err) == 1 and "interrupted" in err[0], text[-3000:]
    else:
        assert err == [], text[-3000:]
    # Whatever it left is a run that --resume continues (or nothing at all).
    if folder.exists():
        assert not [p for p in folder.rglob(".*") if p.name != ".lock"]  # no half-written file


@pytest.mark.process
@pytest.mark.bad_input(MESSAGES)
@pytest.mark.parametrize(("imported", "delay"), MOMENTS)
def test_ctrl_c_early_in_train_is_one_line_and_status_130(tmp_path, imported, delay):
    folder = tmp_path / "r"
    proc = _start_train(folder, importtime=True)
    try:
        early = _wait_for_line(proc.stderr, rf"\| +{re.escape(imported)}$")
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _check_interrupted(proc, early, folder)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.process
@pytest.mark.bad_input(MESSAGES)
def test_ctrl_c_while_training_is_one_line_and_the_run_resumes(tmp_path, capsys):
    folder = tmp_path / "r"
    proc = _start_train(folder, importtime=False)  # stderr is not read until the end: it must stay short
    try:
        _wait_for_line(proc.stdout, r"^training ")  # the run is checked and about to train
        proc.send_signal(signal.SIGINT)
        _check_interrupted(proc, [], folder)
    finally:
        proc.kill()
        proc.wait()
    code, _, err = cli(capsys, *RESUME, folder)
    assert code == 0, err
    assert epochs(folder) == [1, 2, 3]
