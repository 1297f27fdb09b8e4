"""The run-folder contract, for every command that writes one (attnlab train, attnlab compare).

Refused folders are left byte for byte as they were; one writer at a time (a second is
refused naming the holder's pid, a dead holder's lock is taken over); a run killed at
any moment, before its first checkpoint included, is resumed; a killed comparison
keeps its finished models and `--resume` ends with the records of an unbroken run.
The processes, locks and kills here are real: subprocesses, flock, SIGKILL.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sweep_gate

from attnlab.cli import main
from attnlab.labs.run_folder import LOCK, MARKER, claim, inspect_folder
from attnlab.labs.squares.train import SquaresConfig, train_run
from attnlab.training import Loop

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_COMPARE = ["--encodings", "rotary,alibi,none", "--seeds", "1", "--epochs", "2", "--n-train", "256",
                "--train-len", "4", "--test-lens", "4,6", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
                "--jobs", "1", "--no-progress"]  # in-process: this file tests the folder, not the workers
ENV = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1")


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (symlinks not followed) and a hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def epochs_in(folder: Path) -> list[int]:
    return [json.loads(line)["epoch"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def train_folder(tmp_path_factory):
    """A finished two-epoch train run."""
    folder = tmp_path_factory.mktemp("train") / "run"
    train_run(SquaresConfig(epochs=2), folder, progress=False)
    return folder


# -- folders that are not ours are refused, untouched ----------------------------------------


@pytest.mark.parametrize("case", ["train run", "user folder", "dot", "symlink to files", "empty out"])
def test_compare_refuses_folders_that_are_not_its_own(case, train_folder, tmp_path, monkeypatch, capsys):
    users = tmp_path / "users"
    users.mkdir()
    (users / "thesis.tex").write_text("years of work")
    (users / "data").mkdir()
    (users / "data" / "a.csv").write_text("1,2\n")
    out = {"train run": train_folder, "user folder": users, "dot": ".", "symlink to files": tmp_path / "link",
           "empty out": ""}[case]
    (tmp_path / "link").symlink_to(users, target_is_directory=True)
    monkeypatch.chdir(users)  # "." is the user's folder
    watched = train_folder if case == "train run" else users
    before = snapshot(watched)
    code, stdout, err = cli(capsys, "compare", *TINY_COMPARE, "--out", out)
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and "error: " in err and "--out" in err, err
    words = {"train run": "holds an attnlab train run", "user folder": "not an attnlab run",
             "dot": "not an attnlab run", "symlink to files": "not an attnlab run", "empty out": "is empty"}[case]
    assert words in err
    assert snapshot(watched) == before
    if watched is users:
        assert not (users / LOCK).exists() and not (users / MARKER).exists()


@pytest.mark.training
def test_train_refuses_a_comparison_and_a_users_folder(tmp_path, capsys):
    comparison = tmp_path / "cmp"
    code, _, err = cli(capsys, "compare", *TINY_COMPARE[:-1], "--encodings", "none", "--epochs", "1",
                       "--out", comparison, "--no-progress")
    assert code == 0, err
    before = snapshot(comparison)
    code, _, err = cli(capsys, "train", "--epochs", "1", "--out", comparison, "--no-progress")
    assert code == 2 and "holds an attnlab compare run, not a train run" in err
    code, _, err = cli(capsys, "train", "--epochs", "1", "--out", comparison, "--resume", "--no-progress")
    assert code == 2 and "holds an attnlab compare run" in err
    assert snapshot(comparison) == before


def test_a_symlink_to_a_run_is_judged_like_the_run(train_folder, tmp_path, capsys):
    link = tmp_path / "latest"
    link.symlink_to(train_folder, target_is_directory=True)
    code, _, err = cli(capsys, "train", "--epochs", "1", "--out", link, "--no-progress")
    assert code == 2 and "already holds a train run; add --resume" in err and str(train_folder) in err


# -- one writer at a time ------------------------------------------------------------------------

# The holder holds until the test ends it (or its stdin closes, if the test process dies): never for a fixed
# time that a slow test on a loaded machine could outlast.
HOLDER = """
import sys
from attnlab.labs.run_folder import claim
with claim(sys.argv[1], kind=sys.argv[2], resume=sys.argv[3] == "resume"):
    print("held", flush=True)
    sys.stdin.read()
"""


def hold(folder: Path, kind: str, resume: bool = False) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), kind, "resume" if resume else "new"],
                            env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held", proc.stderr.read()
    return proc


@pytest.mark.process
@pytest.mark.bad_input("machine independence")
def test_a_second_writer_is_refused_naming_the_holders_pid(train_folder, tmp_path, capsys):
    holder = hold(train_folder, "train", resume=True)
    try:
        before = snapshot(train_folder)
        code, out, err = cli(capsys, "train", "--out", train_folder, "--epochs", "3", "--resume", "--no-progress")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert f"is being written by another attnlab process (pid {holder.pid})" in err
        assert snapshot(train_folder) == before  # no epoch written twice, nothing written at all
    finally:
        holder.kill()
        holder.wait()
    # Two compares on one new folder: the second is refused while the first writes.
    new = tmp_path / "new"
    holder = hold(new, "compare")
    try:
        code, out, err = cli(capsys, "compare", *TINY_COMPARE, "--out", new)
        assert code == 2 and out == "" and f"(pid {holder.pid})" in err
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.process
def test_the_lock_of_a_killed_writer_is_taken_over(tmp_path, capsys):
    folder = tmp_path / "run"
    holder = hold(folder, "train")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (folder / LOCK).read_text().strip() == str(holder.pid)  # the dead writer's pid is still written there
    code, _, err = cli(capsys, "train", "--epochs", "2", "--out", folder, "--no-progress")
    assert code == 0, err
    assert epochs_in(folder) == [1, 2]
    with claim(folder, kind="train", resume=True):  # and it was released at the end
        assert (folder / LOCK).read_text().strip() == str(os.getpid())


@pytest.mark.training
def test_an_interrupted_writer_leaves_no_temporary_file_behind(tmp_path):
    # Ctrl-C inside tempfile.mkstemp (the file made, its name not yet returned) escapes
    # atomic_write's own clean-up; the folder's holder removes it before letting go.
    folder = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt), claim(folder, kind="train", resume=False):
        (folder / "models").mkdir()
        (folder / "models" / ".record.json.k3x9q_1a.tmp.json").write_text('{"half": ')
        (folder / ".config.json.x8d2mm0z.tmp.json").write_text("")
        raise KeyboardInterrupt
    assert sorted(p.name for p in folder.rglob("*")) == sorted([LOCK, MARKER, "models"])


# -- every state is resumable ---------------------------------------------------------------------


@pytest.mark.training
def test_a_train_run_killed_before_its_first_checkpoint_is_resumed_or_reused(train_folder, tmp_path, capsys,
                                                                              monkeypatch):
    run_one_epoch = Loop.run_one_epoch

    def killed(self):
        raise KeyboardInterrupt  # in the first epoch: no checkpoint yet

    monkeypatch.setattr(Loop, "run_one_epoch", killed)
    for folder in (tmp_path / "a", tmp_path / "b"):
        with pytest.raises(KeyboardInterrupt):
            train_run(SquaresConfig(epochs=3), folder, progress=False)
        assert not (folder / "checkpoint.pt").exists() and (folder / MARKER).exists()
    monkeypatch.setattr(Loop, "run_one_epoch", run_one_epoch)
    # --resume continues it from epoch 0, with its saved settings (until --epochs) ...
    code, _, err = cli(capsys, "train", "--out", tmp_path / "a", "--resume", "--epochs", "2", "--no-progress")
    assert code == 0, err
    assert epochs_in(tmp_path / "a") == [1, 2]
    losses = [(tmp_path / "a" / "metrics.jsonl"), (train_folder / "metrics.jsonl")]
    assert [[json.loads(x)["loss"] for x in p.read_text().splitlines()] for p in losses][0] == \
        [json.loads(x)["loss"] for x in losses[1].read_text().splitlines()]  # an unbroken run's, bit for bit
    # ... and a fresh run may reuse it, since it had made no progress.
    code, _, err = cli(capsys, "train", "--out", tmp_path / "b", "--epochs", "1", "--no-progress")
    assert code == 0, err
    assert epochs_in(tmp_path / "b") == [1]


@pytest.mark.training
def test_a_kill_between_the_metrics_line_and_the_checkpoint_never_doubles_an_epoch(tmp_path, monkeypatch):
    from attnlab.training import callbacks

    save = callbacks.Checkpoint.on_epoch_end

    def dies_in_epoch_3(self, loop, record):
        if record["epoch"] == 3:
            raise KeyboardInterrupt  # the metrics line of epoch 3 is written, its checkpoint is not
        save(self, loop, record)

    monkeypatch.setattr(callbacks.Checkpoint, "on_epoch_end", dies_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        train_run(SquaresConfig(epochs=5), tmp_path / "r", progress=False)
    assert epochs_in(tmp_path / "r") == [1, 2, 3]
    # a killed save left its temporary file behind: the next writer removes it
    (tmp_path / "r" / ".checkpoint.pt.x1y2z3.tmp.pt").write_bytes(b"half a checkpoint")
    monkeypatch.setattr(callbacks.Checkpoint, "on_epoch_end", save)
    train_run(SquaresConfig(epochs=5), tmp_path / "r", resume=True, progress=False)
    assert epochs_in(tmp_path / "r") == [1, 2, 3, 4, 5]
    assert not list((tmp_path / "r").glob(".*.tmp*"))


def _records(folder: Path) -> list[dict]:
    return json.loads((folder / "results.json").read_text())["records"]


@pytest.mark.process
@pytest.mark.bad_input("machine independence")
def test_a_killed_comparison_keeps_its_models_and_resumes_to_the_unbroken_records(tmp_path, capsys):
    # The last model is the gated scheme's (tests/sweep_gate.py): the kill comes while it is held mid-training,
    # after the first two are saved, on any machine (not only when the last model is slow enough).
    flags = [f"rotary,alibi,{sweep_gate.NAME}" if flag == "rotary,alibi,none" else flag for flag in TINY_COMPARE]
    code, _, err = cli(capsys, "compare", *flags, "--out", tmp_path / "unbroken")  # one thread, as below
    assert code == 0, err

    killed, started = tmp_path / "killed", tmp_path / "started"
    started.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "compare", *flags, "--out", str(killed)],
                            env=sweep_gate.env(started=started, gate=tmp_path / "gate"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sweep_gate.wait_until(lambda: sweep_gate.started(started) == {proc.pid}, "the last model held", proc=proc)
    proc.send_signal(signal.SIGKILL)  # mid-run: after its first two models, before its last
    proc.wait()
    kept = sorted(p.parent.name for p in killed.glob("models/*/record.json"))
    assert kept == ["alibi-seed0", "rotary-seed0"] and not (killed / "results.json").exists(), kept
    state = inspect_folder(killed)
    assert state.kind == "compare" and state.started

    # a fresh compare refuses it; --resume (with no settings: the saved ones) trains only what is missing
    code, _, err = cli(capsys, "compare", *flags, "--out", killed)
    assert code == 2 and "already holds a compare run; add --resume" in err
    before = {name: (killed / "models" / name / "record.json").read_bytes() for name in kept}
    code, _, err = cli(capsys, "compare", "--resume", "--out", killed, "--jobs", "1", "--no-progress")
    assert code == 0, err
    assert {name: (killed / "models" / name / "record.json").read_bytes() for name in kept} == before
    assert _records(killed) == _records(tmp_path / "unbroken")  # bit for bit
    assert (killed / "report.html").exists() and (killed / "accuracy.png").exists()


@pytest.mark.training
def test_the_outputs_of_a_comparison_can_always_be_written_again(tmp_path, capsys):
    folder = tmp_path / "cmp"
    flags = [*TINY_COMPARE[:-1], "--encodings", "none", "--epochs", "1", "--no-progress"]
    code, _, err = cli(capsys, "compare", *flags, "--out", folder)
    assert code == 0, err
    records = _records(folder)
    for name in ("results.json", "report.html", "accuracy.png", "tokens.png"):
        (folder / name).unlink()  # e.g. a full disk while they were written
    code, _, err = cli(capsys, "compare", "--resume", "--out", folder, "--jobs", "1", "--no-progress")
    assert code == 0, err
    assert _records(folder) == records
    assert all((folder / name).exists() for name in ("report.html", "accuracy.png", "tokens.png"))
    # settings that differ from the saved ones are named, and nothing is written
    before = snapshot(folder)
    code, _, err = cli(capsys, "compare", "--resume", "--out", folder, "--d-model", "32", "--no-progress")
    assert code == 2 and "--d-model: saved 16, given 32" in err
    assert snapshot(folder) == before
