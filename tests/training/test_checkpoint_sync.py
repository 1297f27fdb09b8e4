"""Cheaper checkpoints (issue 28): written every epoch, flushed to the disk only now and then, resumed exactly.

``Checkpoint(sync_every=S)`` flushes (``fsync``) the first write of a fit, then one at least
``S`` seconds after the last flushed one, and the last one when the fit ends; every write
is renamed into place whole, so a killed process leaves the last epoch's checkpoint.
``attnlab train`` flushes every 10 s. A run killed (SIGKILL) at the end of every epoch
resumes to the unbroken run's numbers, bit for bit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import attnlab
from attnlab.cli import main
from attnlab.training import Checkpoint, Trainer, read_checkpoint
from attnlab.training.checkpoint import write_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

ENV = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONPATH=str(Path(attnlab.__file__).parents[1]))


@pytest.fixture
def fsyncs(monkeypatch):
    """The file descriptors ``os.fsync`` is called on (the real fsync still runs), as the files' names."""
    names: list[str] = []
    fsync = os.fsync

    def counted(fd):
        names.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return fsync(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return names


def _trainer() -> Trainer:
    model = nn.Linear(2, 1)
    x, y = torch.randn(16, 2), torch.randn(16, 1)
    trainer = Trainer(model, nn.MSELoss(), torch.optim.Adam(model.parameters(), lr=0.01), progress=False)
    trainer.set_loaders(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8))
    return trainer


def _synced(names: list[str], folder: Path) -> list[str]:
    """Which fsyncs were of a checkpoint's bytes (its temporary file, or the file itself) and which of the folder."""
    return ["folder" if name == folder.name else "file" for name in names]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the descriptors' names from /proc")
def test_sync_every_flushes_the_first_write_and_the_last(tmp_path, fsyncs):
    trainer = _trainer()
    path = tmp_path / "c.pt"
    trainer.train(4, callbacks=[Checkpoint(path, trainer.state_dict, sync_every=3600.0)])
    # The first epoch's write flushed (file, then folder), the next three not, the last one flushed at the end.
    assert _synced(fsyncs, tmp_path) == ["file", "folder", "file", "folder"]
    assert read_checkpoint(path)["epoch"] == 4
    fsyncs.clear()
    trainer.train(2, callbacks=[Checkpoint(path, trainer.state_dict)])  # the default: every write flushed
    assert _synced(fsyncs, tmp_path) == ["file", "folder"] * 2


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the descriptors' names from /proc")
def test_an_unsynced_write_is_whole_and_is_flushed_when_training_raises(tmp_path, fsyncs):
    trainer = _trainer()
    path = tmp_path / "c.pt"
    write_checkpoint(path, trainer.state_dict(), sync=False)
    assert fsyncs == [] and read_checkpoint(path)["epoch"] == 0

    def stop(_trainer, record):
        if record["epoch"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer.train(5, on_epoch_end=stop, callbacks=[Checkpoint(path, trainer.state_dict, sync_every=3600.0)])
    # on_epoch_end ran before the checkpoint of epoch 3: the last written is epoch 2's, flushed on the way out.
    assert read_checkpoint(path)["epoch"] == 2
    assert _synced(fsyncs, tmp_path) == ["file", "folder", "file", "folder"]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "1"])
def test_sync_every_is_checked(tmp_path, bad):
    with pytest.raises((TypeError, ValueError), match="sync_every"):
        Checkpoint(tmp_path / "c.pt", dict, sync_every=bad)


# -- attnlab train killed at the end of every epoch -----------------------------------------------

# `attnlab train` as the program runs it, SIGKILLed as soon as epoch KILL_AT's checkpoint is renamed into place
# (unflushed: only the first epoch's is flushed in a run this short).
KILLED = textwrap.dedent("""
    import os, signal, sys
    from attnlab.training import callbacks
    kill_at = int(sys.argv[1])
    write = callbacks.Checkpoint.on_epoch_end

    def then_die(self, loop, record):
        write(self, loop, record)
        if record["epoch"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    callbacks.Checkpoint.on_epoch_end = then_die
    from attnlab.cli import main
    sys.exit(main(sys.argv[2:]))
""")
EPOCHS = 4


def _losses(folder: Path) -> list[tuple[float, float]]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [(json.loads(line)["loss"], json.loads(line)["val_loss"]) for line in lines]


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("unbroken") / "r"
    assert main(["train", "--epochs", str(EPOCHS), "--device", "cpu", "--no-progress", "--out", str(folder)]) == 0
    return folder


@pytest.mark.process
@pytest.mark.parametrize("kill_at", range(1, EPOCHS))
def test_a_run_killed_after_any_epoch_resumes_to_the_unbroken_runs_numbers(tmp_path, unbroken, kill_at):
    folder = tmp_path / "r"
    done = subprocess.run([sys.executable, "-c", KILLED, str(kill_at), "train", "--epochs", str(EPOCHS), "--device",
                           "cpu", "--no-progress", "--out", str(folder)], env=ENV, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert read_checkpoint(folder / "checkpoint.pt")["epoch"] == kill_at
    assert main(["train", "--resume", "--epochs", str(EPOCHS), "--no-progress", "--out", str(folder)]) == 0
    assert _losses(folder) == _losses(unbroken)
    resumed, whole = read_checkpoint(folder / "checkpoint.pt"), read_checkpoint(unbroken / "checkpoint.pt")
    for name, tensor in whole["model_state_dict"].items():
        assert torch.equal(resumed["model_state_dict"][name], tensor), name
    assert json.loads((folder / "summary.json").read_text()) == json.loads((unbroken / "summary.json").read_text())
