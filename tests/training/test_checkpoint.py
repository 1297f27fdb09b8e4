"""Checkpoints: exact resume, plain data, atomic writes, clear errors on bad files and other models."""

import os

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.training import Trainer, read_checkpoint
from attnlab.training.checkpoint import FORMAT

from trainer_helpers import MLP, make_trainer


def _with_scheduler(trainer):
    trainer.set_lr_scheduler(torch.optim.lr_scheduler.StepLR(trainer.optimizer, step_size=2, gamma=0.5))
    trainer.set_clip_grad_norm(5.0)
    return trainer


def test_resume_is_bitwise_identical_to_a_straight_run(tmp_path):
    # Dropout (torch's global generator), a shuffled loader with its own generator, Adam's
    # moments and a scheduler: all must continue as if the run had never stopped.
    straight = _with_scheduler(make_trainer())
    straight.train(6)

    first = _with_scheduler(make_trainer())
    first.train(3)
    path = first.save_checkpoint(tmp_path / "run.pt")
    torch.manual_seed(2024)  # whatever happens in between must not matter
    torch.rand(100)

    # A fresh model with other weights, a fresh optimizer, scheduler and loaders.
    resumed = _with_scheduler(make_trainer(model_seed=99, shuffle_seed=5))
    resumed.remove_clip()  # restored from the checkpoint
    resumed.load_checkpoint(path)
    assert resumed.clipping == {"mode": "norm", "max_norm": 5.0, "norm_type": 2.0}
    resumed.train(3)

    assert resumed.total_epochs == 6
    assert resumed.losses == straight.losses
    assert resumed.val_losses == straight.val_losses
    assert resumed.learning_rates == straight.learning_rates
    for a, b in zip(resumed.model.parameters(), straight.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_checkpoint_is_plain_data_with_the_documented_keys(tmp_path):
    trainer = _with_scheduler(make_trainer())
    trainer.train(2)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    state = torch.load(path, weights_only=True, map_location="cpu")
    assert state["format"] == FORMAT and state["version"] == 1
    assert set(state) == {"format", "version", "epoch", "model_state_dict", "optimizer_state_dict", "loss",
                          "val_loss", "learning_rates", "optimizer_class", "scheduler_class",
                          "scheduler_state_dict", "best_val_loss", "best_epoch", "clipping", "rng"}
    assert state["epoch"] == 2
    assert all(type(v) is float for v in state["loss"] + state["val_loss"])
    assert state["loss"] == trainer.losses
    assert state["scheduler_class"] == "StepLR" and state["scheduler_state_dict"]["last_epoch"] == 2
    assert state["best_epoch"] in (1, 2) and type(state["best_val_loss"]) is float
    assert set(state["rng"]) == {"torch", "cuda", "python", "loaders"}
    assert len(state["rng"]["loaders"]["train"]) == 1  # the train loader's generator
    assert read_checkpoint(path)["epoch"] == 2


def test_numpy_losses_are_saved_as_floats(tmp_path):
    trainer = make_trainer()
    trainer.train(1)
    trainer.losses = [np.float64(v) for v in trainer.losses]  # what the book's histories held
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    state = torch.load(path, weights_only=True)
    assert type(state["loss"][0]) is float


@pytest.mark.parametrize("scheduler", ["onecycle", "cyclic", "plateau", "warm", "lambda"])
def test_every_scheduler_state_loads_weights_only(tmp_path, scheduler):
    trainer = make_trainer(optimizer="momentum")
    s = torch.optim.lr_scheduler
    make = {
        "onecycle": lambda o: s.OneCycleLR(o, max_lr=0.1, total_steps=100),
        "cyclic": lambda o: s.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3),
        "plateau": lambda o: s.ReduceLROnPlateau(o, patience=1),
        "warm": lambda o: s.CosineAnnealingWarmRestarts(o, T_0=2),
        "lambda": lambda o: s.LambdaLR(o, lambda epoch: 0.9 ** epoch),
    }[scheduler]
    trainer.set_lr_scheduler(make(trainer.optimizer))
    trainer.train(2)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    torch.load(path, weights_only=True)
    other = make_trainer(optimizer="momentum")
    other.set_lr_scheduler(make(other.optimizer))
    other.load_checkpoint(path)
    assert other.scheduler.state_dict()["last_epoch"] == trainer.scheduler.state_dict()["last_epoch"]


def test_a_failed_save_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    trainer = make_trainer()
    trainer.train(1)
    path = tmp_path / "c.pt"
    trainer.save_checkpoint(path)
    good = path.read_bytes()
    trainer.train(1)

    real_save = torch.save

    def crash_midway(obj, f, *args, **kwargs):
        import io
        buffer = io.BytesIO()
        real_save(obj, buffer)
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        trainer.save_checkpoint(path)
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["c.pt"]  # no temporary file left behind
    assert read_checkpoint(path)["epoch"] == 1


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        make_trainer().load_checkpoint(tmp_path / "nope.pt")


def test_truncated_file_names_the_path(tmp_path):
    trainer = make_trainer()
    trainer.train(1)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"c\.pt.*cannot be read"):
        make_trainer().load_checkpoint(path)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match=r"c\.pt.*cannot be read"):
        make_trainer().load_checkpoint(path)


def test_pickled_objects_are_refused(tmp_path):
    # The book's checkpoints hold numpy floats: readable only by unpickling arbitrary objects.
    path = tmp_path / "book.pt"
    model = MLP()
    torch.save({"epoch": 1, "model_state_dict": model.state_dict(), "loss": [np.float64(0.5)]}, path)
    with pytest.raises(ValueError, match=r"book\.pt.*pickled objects"):
        make_trainer().load_checkpoint(path)


def test_other_torch_files_are_not_checkpoints(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(MLP().state_dict(), path)
    with pytest.raises(ValueError, match=r"weights\.pt.*not an attnlab checkpoint"):
        make_trainer().load_checkpoint(path)
    with pytest.raises(ValueError, match="is a folder"):
        make_trainer().load_checkpoint(tmp_path)


def test_a_newer_version_is_refused(tmp_path):
    trainer = make_trainer()
    state = trainer.state_dict()
    state["version"] = 99
    path = tmp_path / "new.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match="version 99"):
        trainer.load_checkpoint(path)


def test_another_model_names_the_mismatched_keys(tmp_path):
    trainer = make_trainer()
    trainer.train(1)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    torch.manual_seed(0)
    other_model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
    other = Trainer(other_model, nn.MSELoss(), torch.optim.Adam(other_model.parameters()), progress=False)
    before = [p.clone() for p in other_model.parameters()]
    with pytest.raises(ValueError, match=r"missing keys 0\.weight.*unexpected keys net\.0\.weight") as info:
        other.load_checkpoint(path)
    assert "c.pt" in str(info.value)
    assert all(torch.equal(a, b) for a, b in zip(before, other_model.parameters(), strict=True))  # untouched
    assert other.total_epochs == 0

    wider = make_trainer()
    wider.model.net[0] = nn.Linear(3, 5)
    wider.model.net[3] = nn.Linear(5, 1)
    with pytest.raises(ValueError, match=r"shape mismatches.*net\.0\.weight \(8, 3\) vs \(5, 3\)"):
        wider.load_checkpoint(path)


def test_another_optimizer_or_scheduler_is_refused(tmp_path):
    trainer = _with_scheduler(make_trainer())
    trainer.train(1)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    sgd = make_trainer(optimizer="sgd")
    with pytest.raises(ValueError, match="Adam optimizer.*SGD"):
        sgd.load_checkpoint(path)
    other = make_trainer()
    other.set_lr_scheduler(torch.optim.lr_scheduler.ExponentialLR(other.optimizer, 0.9))
    with pytest.raises(ValueError, match="StepLR scheduler.*ExponentialLR"):
        other.load_checkpoint(path)
    bare = make_trainer()
    with pytest.warns(RuntimeWarning, match="StepLR scheduler but the trainer none"):
        bare.load_checkpoint(path)


def test_load_keeps_the_mode_and_can_skip_rng(tmp_path):
    trainer = make_trainer()
    trainer.train(1)
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    other = make_trainer()
    other.model.eval()
    state = torch.get_rng_state()
    other.load_checkpoint(path, restore_rng=False)
    assert not other.model.training  # the book forced train mode
    assert torch.equal(torch.get_rng_state(), state)
    assert other.losses == trainer.losses


def test_save_into_a_missing_folder_names_it(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        make_trainer().save_checkpoint(tmp_path / "missing" / "c.pt")


@pytest.mark.parametrize(("key", "value", "match"), [
    ("loss", ["0.5"], "loss histories are malformed"),
    ("epoch", -1, "epoch count"),
    ("clipping", {"mode": "sometimes"}, "unknown clipping setting"),
    ("rng", {"torch": 3}, "random-number state"),
])
def test_malformed_entries_are_refused_before_anything_changes(tmp_path, key, value, match):
    trainer = make_trainer()
    trainer.train(1)
    state = trainer.state_dict()
    state[key] = value
    path = tmp_path / "bad.pt"
    torch.save(state, path)
    fresh = make_trainer(model_seed=5)
    before = [p.clone() for p in fresh.model.parameters()]
    with pytest.raises(ValueError, match=match):
        fresh.load_checkpoint(path)
    assert all(torch.equal(a, b) for a, b in zip(before, fresh.model.parameters(), strict=True))
    assert fresh.losses == [] and fresh.total_epochs == 0


def test_state_holding_objects_is_refused_at_save(tmp_path):
    trainer = make_trainer()
    trainer.best_val_loss = object()
    with pytest.raises(TypeError, match=r"checkpoint\['best_val_loss'\] is of type object"):
        trainer.save_checkpoint(tmp_path / "c.pt")
    assert not (tmp_path / "c.pt").exists()
