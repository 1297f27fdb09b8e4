"""What train() reports: TensorBoard steps, the progress bar, the per-epoch callback, plot_losses."""

import json
import math
import sys

import pytest
import torch

import attnlab.plotting
from attnlab.training.callbacks import progress_enabled

from trainer_helpers import make_trainer


class FakeWriter:
    def __init__(self):
        self.scalars, self.flushes, self.closed = [], 0, False

    def add_scalars(self, tag, values, global_step):
        self.scalars.append((tag, dict(values), global_step))

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closed = True

    def add_graph(self, model, x):
        self.graph = (model, x.shape)


def test_tensorboard_steps_continue_across_calls(trainer):
    writer = FakeWriter()
    trainer.set_tensorboard("run", writer=writer)
    trainer.train(2)
    trainer.train(2)
    # The book logged at the local epoch, so the second call overwrote steps 0 and 1.
    assert [step for _, _, step in writer.scalars] == [1, 2, 3, 4]
    expected = {"training": trainer.losses[2], "validation": trainer.val_losses[2]}
    assert writer.scalars[2] == ("loss", expected, 3)
    assert writer.flushes == 2 and not writer.closed  # the book closed it after every call
    trainer.close()
    assert writer.closed and trainer.writer is None


def test_add_graph_traces_the_first_training_batch(trainer):
    writer = FakeWriter()
    trainer.add_graph()  # no writer: nothing to do
    trainer.set_tensorboard("run", writer=writer)
    trainer.add_graph()
    assert writer.graph == (trainer.model, torch.Size([8, 3]))


def test_automatic_progress_follows_the_terminal(monkeypatch):
    class Tty:
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Tty())
    assert progress_enabled(None) and not progress_enabled(False)


def test_tensorboard_without_the_package_says_what_to_install(trainer, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were missing
    with pytest.raises(ImportError, match="'tensorboard' package"):
        trainer.set_tensorboard("run", folder=tmp_path)
    assert trainer.writer is None


def test_progress_bar_shows_losses_when_forced(capsys):
    trainer = make_trainer(progress=True)
    trainer.train(2)
    err = capsys.readouterr().err
    assert "2/2" in err and "loss=" in err and "val_loss=" in err


@pytest.mark.parametrize("progress", [False, None])  # None: stderr is captured, not a terminal
def test_progress_bar_off(capsys, progress):
    trainer = make_trainer(progress=progress)
    trainer.train(2)
    assert capsys.readouterr().err == ""


def test_on_epoch_end_records_are_json_lines(trainer, tmp_path):
    path = tmp_path / "metrics.jsonl"

    def append(t, record):
        assert t is trainer
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")

    trainer.set_lr_scheduler(torch.optim.lr_scheduler.StepLR(trainer.optimizer, step_size=1, gamma=0.5))
    trainer.train(2, on_epoch_end=append)
    trainer.train(1, on_epoch_end=append)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert [r["loss"] for r in records] == trainer.losses
    assert [r["val_loss"] for r in records] == trainer.val_losses
    assert [r["lr"] for r in records] == [0.05, 0.025, 0.0125]  # the rate each epoch trained with
    assert all(r["seconds"] > 0 for r in records)
    assert set(records[0]) == {"epoch", "loss", "val_loss", "lr", "seconds", "best"}


def test_plot_losses_goes_through_attnlab_plotting(trainer, monkeypatch):
    calls = []

    def fake_plot_losses(losses, val_losses=None, *, ax=None, log=True):
        calls.append((losses, val_losses, ax, log))
        return "figure"

    monkeypatch.setattr(attnlab.plotting, "plot_losses", fake_plot_losses, raising=False)
    trainer.train(2)
    assert trainer.plot_losses(log=False) == "figure"
    assert calls == [(trainer.losses, trainer.val_losses, None, False)]

    no_val = make_trainer(val=False)
    no_val.train(1)
    no_val.set_loaders(no_val.train_loader, trainer.val_loader)
    no_val.train(1)
    no_val.plot_losses()
    assert math.isnan(calls[-1][1][0]) and calls[-1][1][1] == no_val.val_losses[1]


def test_plot_losses_missing_says_so(trainer, monkeypatch):
    monkeypatch.delattr(attnlab.plotting, "plot_losses", raising=False)
    with pytest.raises(ImportError, match="plot_losses"):
        trainer.plot_losses()


@pytest.mark.skipif(not hasattr(attnlab.plotting, "plot_losses"), reason="plotting.plot_losses not there yet")
def test_plot_losses_returns_a_figure(trainer):
    from matplotlib.figure import Figure

    trainer.train(2)
    assert isinstance(trainer.plot_losses(), Figure)
