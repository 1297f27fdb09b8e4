"""The book's interface: histories, to(), set_loaders, count_parameters, modes, argument checks."""

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import attnlab.training as training
from attnlab.encodings import PositionScheme
from attnlab.training import StepByStep, Trainer

from trainer_helpers import MLP, make_data, make_trainer


def test_stepbystep_is_trainer_and_exports():
    assert StepByStep is Trainer
    assert {"Trainer", "StepByStep", "lr_range_test"} <= set(training.__all__)
    for name in training.__all__:
        assert hasattr(training, name)


def test_histories_grow_per_epoch_and_loss_falls(trainer):
    trainer.train(3)
    assert trainer.total_epochs == 3
    assert len(trainer.losses) == len(trainer.val_losses) == 3
    assert all(type(v) is float for v in trainer.losses + trainer.val_losses)
    trainer.train(5)
    assert trainer.total_epochs == 8 and len(trainer.losses) == 8
    assert trainer.losses[-1] < trainer.losses[0]
    assert trainer.val_losses[-1] < trainer.val_losses[0]
    assert trainer.learning_rates == []  # as the book: filled only by a scheduler


def test_no_val_loader_gives_none_val_losses():
    trainer = make_trainer(val=False)
    trainer.train(2)
    assert trainer.val_losses == [None, None]
    assert trainer.best_val_loss is None


def test_count_parameters_counts_trainable_only():
    trainer = make_trainer()
    assert trainer.count_parameters() == 3 * 8 + 8 + 8 + 1
    trainer.model.net[0].weight.requires_grad_(False)
    assert trainer.count_parameters() == 8 + 8 + 1


def test_to_and_device():
    trainer = make_trainer()
    assert trainer.device == torch.device("cpu")
    assert trainer.to("cpu") is trainer
    assert next(trainer.model.parameters()).device.type == "cpu"
    with pytest.raises(ValueError, match="device 'nonsense'"):
        trainer.to("nonsense")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_to_unavailable_device_falls_back_with_a_warning():
    trainer = make_trainer()
    with pytest.warns(RuntimeWarning, match="could not move the model to cuda"):
        trainer.to("cuda")
    assert trainer.device.type == "cpu"


def test_set_loaders_stores_and_checks():
    trainer = make_trainer()
    x, y = make_data(8)
    batches = [(x[:4], y[:4]), (x[4:], y[4:])]  # any iterable of (x, y) pairs works
    trainer.set_loaders(batches)
    assert trainer.train_loader is batches and trainer.val_loader is None
    trainer.train(1)
    with pytest.raises(TypeError, match="train_loader"):
        trainer.set_loaders(3)
    with pytest.raises(TypeError, match="val_loader"):
        trainer.set_loaders(batches, 3.0)


def test_train_restores_modes_and_leaves_no_gradients(trainer):
    trainer.model.eval()
    trainer.model.net[2].train()  # a deliberately mixed setting survives
    trainer.train(1)
    assert not trainer.model.training and trainer.model.net[2].training
    assert all(p.grad is None for p in trainer.model.parameters())


def test_train_uses_train_mode_then_eval_mode_for_validation():
    modes = []

    class Spy(MLP):
        def forward(self, x):
            modes.append((self.training, torch.is_grad_enabled()))
            return super().forward(x)

    torch.manual_seed(0)
    model = Spy()
    trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.01), progress=False)
    x, y = make_data(8)
    trainer.set_loaders([(x, y)], [(x, y)])
    trainer.train(1)
    assert modes == [(True, True), (False, False)]


def test_integer_inputs_train_unchanged():
    # Token ids go to the model as integers: nothing casts batches to float.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 1))
    trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), progress=False)
    x = torch.randint(0, 10, (12, 2), generator=torch.Generator().manual_seed(0))
    trainer.set_loaders(DataLoader(TensorDataset(x, torch.randn(12, 1)), batch_size=4))
    trainer.train(2)
    assert len(trainer.losses) == 2


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"n_epochs": 0}, ValueError, "n_epochs must be positive, got 0"),
    ({"n_epochs": -2}, ValueError, "n_epochs must be positive, got -2"),
    ({"n_epochs": 1.5}, TypeError, "n_epochs must be an integer"),
    ({"n_epochs": 1, "seed": -1}, ValueError, "seed must be >= 0"),
    ({"n_epochs": 1, "early_stopping": 0}, ValueError, "early_stopping must be positive"),
    ({"n_epochs": 1, "min_delta": -0.1}, ValueError, "min_delta must be >= 0"),
    ({"n_epochs": 1, "on_epoch_end": 3}, TypeError, "on_epoch_end must be callable"),
    ({"n_epochs": 1, "keep_best": "/no/such/folder/best.pt"}, ValueError, "keep_best"),
])
def test_train_argument_errors_name_the_argument(trainer, kwargs, error, match):
    with pytest.raises(error, match=match):
        trainer.train(**kwargs)
    assert trainer.total_epochs == 0


def test_train_needs_loaders_and_batches():
    trainer = make_trainer()
    trainer.train_loader = None
    with pytest.raises(ValueError, match="set_loaders"):
        trainer.train(1)
    trainer.set_loaders([])
    with pytest.raises(ValueError, match="train_loader yielded no batches"):
        trainer.train(1)
    x, y = make_data(4)
    trainer.set_loaders([(x, y, y)])
    with pytest.raises(TypeError, match=r"pair \(x, y\)"):
        trainer.train(1)


def test_non_scalar_loss_is_refused():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    trainer = Trainer(model, nn.MSELoss(reduction="none"), torch.optim.SGD(model.parameters(), lr=0.1),
                      progress=False)
    trainer.set_loaders([make_data(4)])
    with pytest.raises(ValueError, match="scalar"):
        trainer.train(1)


def test_constructor_checks_types():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="model"):
        Trainer("model", nn.MSELoss(), opt)
    with pytest.raises(TypeError, match="loss_fn"):
        Trainer(model, 3, opt)
    with pytest.raises(TypeError, match="optimizer"):
        Trainer(model, nn.MSELoss(), "sgd")
    with pytest.raises(TypeError, match="progress"):
        Trainer(model, nn.MSELoss(), opt, progress="yes")
    assert "Linear" in repr(Trainer(model, nn.MSELoss(), opt))


def test_a_diverging_loss_stops_training_with_a_clear_error():
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=1e6))
    x = torch.randn(64, 2) * 100
    trainer.set_loaders(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                                    batch_size=8))
    with pytest.raises(FloatingPointError, match=r"training loss is (nan|inf) in epoch \d+: training diverged "
                                                 r"\(lr=1e\+06\)"):
        trainer.train(20)
    # the diverged epoch is not recorded
    assert len(trainer.losses) == trainer.total_epochs and all(math.isfinite(v) for v in trainer.losses)


# -- a loss that is not finite before any step: named where it starts, not blamed on the learning rate -----

class _NaNBias(PositionScheme):
    """A score term of NaN, as a scheme with a bug would give."""

    adds_score = True

    def bias_at(self, q, *, q_pos, k_pos, k=None):
        return torch.full((1, 1, q.shape[2], k_pos.shape[-1]), float("nan"))


class _InfTable(nn.Module):
    """An input table that adds inf."""

    @classmethod
    def for_model(cls, sizes):
        return cls()

    def forward(self, h, *, offset=0, position_ids=None):
        return h + float("inf")


def _sequence_trainer(position, *, x=None, lr=1e-3):
    from attnlab.models import DecoderOnlyTransformer

    torch.manual_seed(0)
    model = DecoderOnlyTransformer(n_features=2, d_model=8, n_heads=2, n_layers=1, position=position)
    trainer = Trainer(model, nn.MSELoss(), torch.optim.Adam(model.parameters(), lr=lr), progress=False)
    x = torch.randn(16, 5, 2) if x is None else x
    trainer.set_loaders(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x), batch_size=8))
    return trainer


@pytest.mark.bad_input("tracebacks and messages")
@pytest.mark.parametrize(("position", "x", "origin"), [
    (_NaNBias, None, r"layers\.0\.self_attn's position scheme _NaNBias gives non-finite values"),
    (_InfTable, None, r"its input table _InfTable gives non-finite values"),
    ("alibi", torch.full((16, 5, 2), float("nan")), r"the batch's inputs hold NaN or inf; check the data"),
    ("rotary", torch.full((16, 5, 2), float("inf")), r"the batch's inputs hold NaN or inf"),
])
def test_a_loss_bad_before_any_step_names_where_it_starts_not_the_learning_rate(position, x, origin):
    trainer = _sequence_trainer(position, x=x)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with pytest.raises(FloatingPointError, match=r"the training loss is nan at the first step of epoch 1: the loss "
                                                 r"is nan on the first batch with the model's initial weights, "
                                                 rf"before any step, so the learning rate is not the cause: {origin}"):
        trainer.train(2)
    # Refused before the step: the weights are the initial ones, not NaN.
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


def test_checking_a_finite_first_loss_changes_no_number(monkeypatch):
    # The check reads the first loss, and nothing else: the run's losses are those of a run without it.
    from attnlab.training.loop import Loop

    checked = _sequence_trainer("alibi")
    checked.train(2)
    monkeypatch.setattr(Loop, "_check_first_step", lambda self, loss, batch: None)
    unchecked = _sequence_trainer("alibi")
    unchecked.train(2)
    assert checked.losses == unchecked.losses and all(math.isfinite(v) for v in checked.losses)
