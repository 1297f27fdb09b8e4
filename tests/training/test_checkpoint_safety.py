"""Checkpoints that are hostile, broken or foreign: refused with a clear error, never run, nothing lost.

* a pickled payload (``os.system``, ``exec``) is refused by ``Trainer.load_checkpoint``,
  ``read_checkpoint``, ``attnlab predict --run`` and ``attnlab train --resume``, and
  never runs (its marker file is never created);
* truncated, empty, random, text and bit-flipped files give a ValueError naming the
  file (library) or one line on stderr and exit 2 (command line);
* a process killed with SIGKILL in the middle of a save leaves the previous
  checkpoint whole, and its temporary file is never taken for the checkpoint; half a
  line left in ``metrics.jsonl`` by a kill does not stop ``--resume``;
* a checkpoint of another model names the missing, unexpected and mis-shaped keys.

The run folders are real (``train_run``, one epoch on 16 squares), copied before
each test tampers with them.
"""

import builtins
import io
import json
import os
import pickle
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from attnlab.cli import main
from attnlab.labs.squares.train import SquaresConfig, build_model, load_run, make_optimizer, train_run
from attnlab.models import DecoderPe, EncoderDecoderSelfAttn, EncoderPe
from attnlab.training import Trainer, read_checkpoint

from trainer_helpers import make_trainer

HERE = Path(__file__).resolve().parent
RUN = SquaresConfig(epochs=1, n_train=16)  # what `attnlab train --epochs 1 --n-train 16` writes
RESUME_FLAGS = ["--epochs", "2", "--n-train", "16", "--no-progress"]  # matches RUN, one epoch more
POINTS = ["--points", "-1,-1 -1,1"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster here


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A real run folder of the positional-encoding lab's model (selfattn-pe)."""
    folder = tmp_path_factory.mktemp("runs") / "selfattn"
    train_run(RUN, folder, progress=False)
    return folder


@pytest.fixture
def run_copy(run_folder, tmp_path):
    """A copy of the run folder, for a test to tamper with."""
    return Path(shutil.copytree(run_folder, tmp_path / "run"))


def cli(capsys, *argv):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(folder):
    """Every file under ``folder`` and its bytes."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_one_line_exit_2(code, err, *words):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, (word, err)


def assert_refused_by_the_cli(capsys, folder, *words):
    """`predict --run` and `train --resume` on ``folder``: one line, exit 2, every file as it was."""
    before = snapshot(folder)
    code, out, err = cli(capsys, "predict", "--run", folder, *POINTS)
    assert out == ""
    assert_one_line_exit_2(code, err, "attnlab predict: error:", *words)
    code, _, err = cli(capsys, "train", "--out", folder, "--resume", *RESUME_FLAGS)
    assert_one_line_exit_2(code, err, "attnlab train: error:", *words)
    assert snapshot(folder) == before


def assert_trainer_untouched(trainer, params):
    assert trainer.total_epochs == 0 and trainer.losses == []
    assert all(torch.equal(a, b) for a, b in zip(params, trainer.model.parameters(), strict=True))


# -- 1. pickled payloads ---------------------------------------------------------------------


class ShellPayload:
    """Unpickling this runs ``os.system("touch MARKER")``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


class ExecPayload:
    """Unpickling this runs ``exec("open(MARKER, 'w').close()")``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",)


PAYLOADS = {"os.system": ShellPayload, "exec": ExecPayload}


def write_hostile(path, how, payload, trainer=None):
    """A file carrying ``payload``, written the way ``how`` says."""
    if how == "inside-a-real-checkpoint":  # every key right, one entry a payload
        state = (trainer or make_trainer()).state_dict()
        state["loss"] = [payload]
        torch.save(state, path)
    elif how == "torch.save":
        torch.save({"format": "attnlab.trainer.checkpoint", "model_state_dict": payload}, path)
    elif how == "raw-pickle":
        path.write_bytes(pickle.dumps(payload, protocol=4))
    else:  # protocol 0: text opcodes, no binary header
        path.write_bytes(pickle.dumps({"epoch": payload}, protocol=0))
    return path


HOW = ["inside-a-real-checkpoint", "torch.save", "raw-pickle", "raw-pickle-protocol-0"]


@pytest.mark.process
@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_the_payloads_are_live(tmp_path, kind):
    # Without this, the refusals below could pass because the payload does nothing.
    marker = tmp_path / "PWNED"
    pickle.loads(pickle.dumps(PAYLOADS[kind](marker)))  # noqa: S301 (on purpose: our own payload)
    assert marker.exists()


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_the_library_refuses_a_payload_without_running_it(tmp_path, kind, how):
    marker = tmp_path / "PWNED"
    path = write_hostile(tmp_path / "evil.pt", how, PAYLOADS[kind](marker))
    trainer = make_trainer(model_seed=5)
    params = [p.clone() for p in trainer.model.parameters()]
    with pytest.raises(ValueError, match=r"checkpoint '.*evil\.pt' cannot be read") as info:
        trainer.load_checkpoint(path)
    message = str(info.value)
    if how.startswith("raw-pickle"):
        assert "not the zip archive torch.save writes" in message  # refused before any unpickling
    else:
        assert "pickled objects beyond plain data" in message and "refused without running them" in message
        assert ("(posix.system)" if kind == "os.system" else "(exec)") in message  # what it would have run
    assert "weights_only" not in message  # torch's advice to load it unsafely is not passed on
    with pytest.raises(ValueError, match=r"evil\.pt"):
        read_checkpoint(path)
    assert not marker.exists()
    assert_trainer_untouched(trainer, params)


@pytest.mark.training
@pytest.mark.parametrize("how", ["inside-a-real-checkpoint", "raw-pickle"])
def test_the_cli_refuses_a_payload_without_running_it(run_copy, tmp_path, capsys, how):
    marker = tmp_path / "PWNED"
    checkpoint = run_copy / "checkpoint.pt"
    write_hostile(checkpoint, how, ShellPayload(marker))
    assert_refused_by_the_cli(capsys, run_copy, str(checkpoint), "cannot be read")
    assert not marker.exists()
    with pytest.raises(ValueError, match="checkpoint.pt"):
        load_run(run_copy)
    assert not marker.exists()


@pytest.mark.process
def test_a_fresh_process_refuses_a_payload_in_one_line(run_copy, tmp_path):
    marker = tmp_path / "PWNED"
    write_hostile(run_copy / "checkpoint.pt", "inside-a-real-checkpoint", ExecPayload(marker))
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "attnlab", "predict", "--run", str(run_copy), *POINTS],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert_one_line_exit_2(proc.returncode, proc.stderr, "checkpoint.pt", "(exec)")
    assert not marker.exists()


# -- 2. truncated and corrupt files ------------------------------------------------------------


def _flip_a_weight_byte(data, trainer):
    """``data`` with one bit flipped inside the bytes of a model weight (a silent corruption)."""
    weight = trainer.model.state_dict()["net.0.weight"].numpy().tobytes()
    at = bytes(data).find(weight)
    assert at > 0
    data = bytearray(data)
    data[at + 5] ^= 0x10
    return bytes(data)


def _not_a_torch_zip():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", "a zip archive, but not one torch.save wrote")
    return buffer.getvalue()


BROKEN = {  # name -> (bytes of a real checkpoint -> broken bytes, words of the error)
    "half": (lambda data, _: data[: len(data) // 2], "truncated or corrupt"),
    "first-100-bytes": (lambda data, _: data[:100], "truncated or corrupt"),
    "all-but-last-byte": (lambda data, _: data[:-1], "truncated or corrupt"),
    "empty": (lambda data, _: b"", "empty (0 bytes)"),
    "random-bytes": (lambda data, _: random.Random(0).randbytes(4096), "not the zip archive"),
    "text": (lambda data, _: b"epoch: 3\nloss: 0.25\n", "not the zip archive"),
    "bit-flip-in-a-weight": (_flip_a_weight_byte, "do not match their checksum"),
    "zip-without-torch-data": (lambda data, _: _not_a_torch_zip(), "truncated or corrupt"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_library_names_a_broken_file(tmp_path, name):
    breaker, words = BROKEN[name]
    trainer = make_trainer()
    trainer.train(1)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    path.write_bytes(breaker(path.read_bytes(), trainer))
    fresh = make_trainer(model_seed=5)
    params = [p.clone() for p in fresh.model.parameters()]
    with pytest.raises(ValueError) as info:
        fresh.load_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"checkpoint {str(path)!r} cannot be read: ") and words in message, message
    assert "\n" not in message and len(message) < 300, message
    assert_trainer_untouched(fresh, params)


@pytest.mark.training
@pytest.mark.parametrize("name", ["half", "empty", "random-bytes", "text"])
def test_the_cli_names_a_broken_file(run_copy, capsys, name):
    breaker, words = BROKEN[name]
    checkpoint = run_copy / "checkpoint.pt"
    checkpoint.write_bytes(breaker(checkpoint.read_bytes(), None))
    assert_refused_by_the_cli(capsys, run_copy, str(checkpoint), words)


# -- 3. killed in the middle of a save ------------------------------------------------------


SLOW_SAVE = r"""
import io, json, os, sys, time
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[2])
from trainer_helpers import make_trainer

torch.set_num_threads(1)
folder = Path(sys.argv[1])
trainer = make_trainer()
trainer.train(1)
trainer.save_checkpoint(folder / "c.pt")
(folder / "first.pt").write_bytes((folder / "c.pt").read_bytes())
trainer.train(1)
(folder / "losses.json").write_text(json.dumps(trainer.losses))
real_save = torch.save

def slow_save(obj, f, *args, **kwargs):
    buffer = io.BytesIO()
    real_save(obj, buffer, *args, **kwargs)
    data = buffer.getvalue()
    f.write(data[: len(data) // 2])
    f.flush()
    os.fsync(f.fileno())
    (folder / "saving.part").write_text(f.name)
    os.replace(folder / "saving.part", folder / "saving")  # half the new checkpoint is on disk
    time.sleep(600)  # SIGKILL arrives here
    f.write(data[len(data) // 2 :])

torch.save = slow_save
trainer.save_checkpoint(folder / "c.pt")
"""

SAVE_LOOP = r"""
import os, sys, time
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[2])
from trainer_helpers import make_trainer

torch.set_num_threads(1)
folder = Path(sys.argv[1])
trainer = make_trainer()
trainer.model.register_buffer("ballast", torch.ones(2_000_000))  # 8 MB: each save takes a while
trainer.train(1)
trainer.save_checkpoint(folder / "c.pt")
(folder / "ready").write_text("")
while not (folder / "go").exists():  # started early, beside the other test's child; saves when told
    time.sleep(0.01)
while True:
    trainer.train(1)
    (folder / "started.part").write_text(str(trainer.total_epochs))
    os.replace(folder / "started.part", folder / "started")
    trainer.save_checkpoint(folder / "c.pt")
"""


@pytest.fixture(scope="module")
def savers(tmp_path_factory):
    """Both children, started together (each spends seconds importing torch): {script: (process, folder)}."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    children = {}
    for name, script in (("slow", SLOW_SAVE), ("loop", SAVE_LOOP)):
        folder = tmp_path_factory.mktemp(name)
        proc = subprocess.Popen([sys.executable, "-c", script, str(folder), str(HERE)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        children[name] = proc, folder
    yield children
    for proc, _ in children.values():  # only ours, by their own handles
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _wait_until(proc, condition, what, timeout=600.0, pause=0.02):
    """Poll ``condition()`` until true; fail (with the child's stderr) if the child dies or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the child exited ({proc.returncode}) before {what}: {proc.stderr.read().decode()}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout} s")
        time.sleep(pause)


def _kill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=600) == -signal.SIGKILL


def _temporaries(folder):
    return sorted(p for p in folder.iterdir() if p.name.startswith(".c.pt."))


def test_sigkill_mid_save_leaves_the_previous_checkpoint(savers):
    proc, tmp_path = savers["slow"]
    _wait_until(proc, (tmp_path / "saving").exists, "save in progress")
    temporary = Path((tmp_path / "saving").read_text())
    assert temporary.exists() and _temporaries(tmp_path) == [temporary]  # atomic_write's, beside c.pt
    _kill(proc)

    # The checkpoint is the first one, byte for byte, and loads.
    checkpoint = tmp_path / "c.pt"
    assert checkpoint.read_bytes() == (tmp_path / "first.pt").read_bytes()
    assert read_checkpoint(checkpoint)["epoch"] == 1
    # The dead process's half-written temporary is left over, and is not a checkpoint.
    assert _temporaries(tmp_path) == [temporary]
    assert 0 < temporary.stat().st_size
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_checkpoint(temporary)
    # Resuming from it continues exactly as the killed process did.
    resumed = make_trainer(model_seed=99)
    resumed.load_checkpoint(checkpoint)
    resumed.train(1)
    assert resumed.losses == json.loads((tmp_path / "losses.json").read_text())
    # A later save goes through, and the leftover is never mistaken for it.
    resumed.save_checkpoint(checkpoint)
    assert read_checkpoint(checkpoint)["epoch"] == 2
    assert _temporaries(tmp_path) == [temporary]


def test_sigkill_during_real_saves_leaves_a_whole_checkpoint(savers):
    # No patching: the real writer, killed as soon as one of its temporary files is seen.
    proc, tmp_path = savers["loop"]
    _wait_until(proc, (tmp_path / "ready").exists, "first checkpoint")
    (tmp_path / "go").write_text("")
    _wait_until(proc, lambda: bool(_temporaries(tmp_path)), "save in progress", pause=0.0005)
    _kill(proc)

    started = int((tmp_path / "started").read_text())  # the save the kill interrupted
    state = read_checkpoint(tmp_path / "c.pt")
    assert state["epoch"] in (started - 1, started)  # the previous one, or the new one if it was renamed
    assert torch.equal(state["model_state_dict"]["ballast"], torch.ones(2_000_000))  # whole, not a prefix
    trainer = make_trainer()
    trainer.model.register_buffer("ballast", torch.zeros(2_000_000))
    trainer.load_checkpoint(tmp_path / "c.pt")
    assert trainer.total_epochs == state["epoch"]
    assert len(_temporaries(tmp_path)) <= 1


@pytest.mark.training
def test_resume_drops_half_a_metrics_line_left_by_a_kill(run_copy, capsys):
    # Killed while appending an epoch's line to metrics.jsonl: the next --resume goes on.
    metrics = run_copy / "metrics.jsonl"
    with metrics.open("a") as f:
        f.write('{"epoch": 2, "loss": 0.12')
    code, _, err = cli(capsys, "train", "--out", run_copy, "--resume", *RESUME_FLAGS)
    assert code == 0, err
    assert [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()] == [1, 2]


@pytest.mark.training
def test_resume_refuses_a_damaged_metrics_line_in_one_line(run_copy, capsys):
    metrics = run_copy / "metrics.jsonl"
    metrics.write_text("not json\n" + metrics.read_text())
    before = snapshot(run_copy)
    code, _, err = cli(capsys, "train", "--out", run_copy, "--resume", *RESUME_FLAGS)
    assert_one_line_exit_2(code, err, "metrics.jsonl", "line 1")
    assert snapshot(run_copy) == before


# -- 4. another model's checkpoint ----------------------------------------------------------


def _checkpoint_of(model, path):
    """A real checkpoint of ``model`` (with Adam, as the runs use)."""
    trainer = Trainer(model, nn.MSELoss(), torch.optim.Adam(model.parameters()), device="cpu", progress=False)
    return trainer.save_checkpoint(path)


def _wider_selfattn():
    """The positional-encoding lab's model class with other sizes: same keys, other shapes."""
    return EncoderDecoderSelfAttn(EncoderPe(n_heads=2, d_model=4, ff_units=6, n_features=2),
                                  DecoderPe(n_heads=2, d_model=4, ff_units=6, n_features=2),
                                  input_len=2, target_len=2)


FOREIGN = {  # name -> (model whose checkpoint is loaded into a selfattn-pe run, words of the error)
    "gru-class": (lambda: build_model(SquaresConfig(model="gru")),
                  ["missing keys encoder.pe.pe, encoder.layer.self_attn_heads.linear_out.weight",
                   "unexpected keys encoder.basic_rnn.weight_ih_l0"]),
    "other-sizes": (_wider_selfattn, ["shape mismatches", "encoder.layer.ffn.0.weight (6, 4) vs (10, 2)"]),
}


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_the_library_names_the_mismatched_keys(tmp_path, name):
    build, words = FOREIGN[name]
    path = _checkpoint_of(build(), tmp_path / "other.pt")
    model = build_model(RUN)
    trainer = Trainer(model, nn.MSELoss(), make_optimizer(model, RUN), device="cpu", progress=False)
    params = [p.clone() for p in model.parameters()]
    with pytest.raises(ValueError) as info:
        trainer.load_checkpoint(path)
    message = str(info.value)
    assert f"checkpoint {str(path)!r} does not fit this model" in message
    for word in words:
        assert word in message, (word, message)
    assert_trainer_untouched(trainer, params)


@pytest.mark.training
@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_the_cli_names_the_mismatched_keys(run_copy, capsys, name):
    build, words = FOREIGN[name]
    checkpoint = _checkpoint_of(build(), run_copy / "checkpoint.pt")
    with pytest.raises(ValueError, match="does not fit this selfattn-pe model") as info:
        load_run(run_copy)  # the library call behind predict and plot
    for word in words:
        assert word in str(info.value)
    assert_refused_by_the_cli(capsys, run_copy, str(checkpoint), "does not fit", *words)


# The squares lab's fused Adam trusts each state's size: a crafted state loaded through torch's own
# load_state_dict (not attnlab's checkpoint reader) wrote past the end of a one-element exp_avg (SIGSEGV).
# The optimizer make_optimizer builds checks any state it loads. In a subprocess: without the check it crashes.
_CRAFTED = textwrap.dedent("""
    import sys, torch
    from attnlab.labs.squares.config import SquaresConfig
    from attnlab.labs.squares.train import build_model, make_optimizer
    config = SquaresConfig()
    model = build_model(config)
    opt = make_optimizer(model, config)
    state = opt.state_dict()
    params = state["param_groups"][0]["params"]
    case = sys.argv[1]
    if case == "short":
        state["state"] = {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(1), "exp_avg_sq": torch.zeros(1)}
                          for i in params}
    elif case == "long":
        big = torch.zeros(10**4)
        state["state"] = {i: {"step": torch.tensor(1.0), "exp_avg": big, "exp_avg_sq": big} for i in params}
    elif case == "dtype":
        shapes = [p.shape for p in model.parameters()]
        state["state"] = {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(s, dtype=torch.float64),
                              "exp_avg_sq": torch.zeros(s, dtype=torch.float64)} for i, s in zip(params, shapes)}
    elif case == "groups":
        state["param_groups"][0]["params"] = params[:1]
    try:
        opt.load_state_dict(state)
    except ValueError as err:
        print("refused:", err)
    else:
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        print("loaded and stepped")
""")


@pytest.mark.process
@pytest.mark.bad_input("memory safety")
@pytest.mark.parametrize(("case", "named"), [
    ("short", r"\['exp_avg'\]: shape \(1,\) does not fit parameter 0's"),
    ("long", r"\['exp_avg'\]: shape \(10000,\) does not fit parameter 0's"),
    ("dtype", r"exp_avg"),
    ("groups", r"parameter groups of sizes \[1\] do not fit"),
])
def test_a_crafted_optimizer_state_is_refused_wherever_it_is_loaded(case, named):
    proc = subprocess.run([sys.executable, "-c", _CRAFTED, case], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # no crash
    assert proc.stdout.startswith("refused:") and re.search(named, proc.stdout), proc.stdout
