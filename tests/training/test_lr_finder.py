"""lr_range_test: honours step_mode, restores everything, leaves no gradients, returns a Figure."""

import math

import pytest
import torch
from matplotlib.figure import Figure

from attnlab.training import make_lr_fn

from trainer_helpers import make_trainer


def test_linear_ramp_is_linear_and_exp_ramp_geometric(trainer):
    # The book always ramped exponentially; "linear" only changed the axis scale.
    start = trainer.optimizer.param_groups[0]["lr"]
    linear, _ = trainer.lr_range_test(trainer.train_loader, end_lr=1.0, num_iter=10, step_mode="linear")
    steps = [b - a for a, b in zip(linear["lr"][:-1], linear["lr"][1:], strict=True)]
    assert linear["lr"][0] == pytest.approx(start)
    assert steps == pytest.approx([(1.0 - start) / 10] * 9)
    exp, _ = trainer.lr_range_test(trainer.train_loader, end_lr=1.0, num_iter=10, step_mode="exp")
    ratios = [b / a for a, b in zip(exp["lr"][:-1], exp["lr"][1:], strict=True)]
    assert ratios == pytest.approx([(1.0 / start) ** 0.1] * 9)
    assert len(exp["loss"]) == 10 and all(type(v) is float for v in exp["loss"])


def test_make_lr_fn_matches_the_book():
    assert make_lr_fn(0.01, 1.0, 4, "exp")(2) == pytest.approx(math.sqrt(100))
    assert make_lr_fn(0.01, 1.0, 4, "linear")(2) == pytest.approx(1 + 2 * 99 / 4)


def test_everything_is_restored_and_no_gradient_is_left(trainer):
    trainer.train(1)  # Adam has state now
    trainer.model.eval()
    model_before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    opt_before = trainer.optimizer.state_dict()
    exp_avg_before = [s["exp_avg"].clone() for s in trainer.optimizer.state.values()]
    lr_before = trainer.optimizer.param_groups[0]["lr"]
    rng_before = torch.get_rng_state()
    gen_before = trainer.train_loader.generator.get_state()

    # num_iter > batches per epoch (5): the loader is cycled.
    tracking, fig = trainer.lr_range_test(trainer.train_loader, end_lr=10.0, num_iter=12)

    assert len(tracking["lr"]) == 12
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(v, model_before[k])
    assert trainer.optimizer.param_groups[0]["lr"] == lr_before
    assert [s["exp_avg"] for s in trainer.optimizer.state.values()][0].equal(exp_avg_before[0])
    assert trainer.optimizer.state_dict()["param_groups"] == opt_before["param_groups"]
    assert all(p.grad is None or not p.grad.any() for p in trainer.model.parameters())  # book: stale grads
    assert not trainer.model.training  # mode restored
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert torch.equal(trainer.train_loader.generator.get_state(), gen_before)
    assert isinstance(fig, Figure)


def test_later_training_is_unaffected(trainer):
    other = make_trainer()
    trainer.lr_range_test(trainer.train_loader, end_lr=1.0, num_iter=7)
    trainer.train(2)
    other.train(2)
    assert trainer.losses == other.losses


def test_fresh_optimizer_state_is_cleared_again(trainer):
    trainer.lr_range_test(trainer.train_loader, end_lr=1.0, num_iter=3)
    assert len(trainer.optimizer.state) == 0


def test_draws_into_a_given_axes(trainer):
    fig = Figure()
    ax = fig.subplots()
    tracking, returned = trainer.lr_range_test(trainer.train_loader, end_lr=1.0, num_iter=5, ax=ax)
    assert returned is fig
    assert ax.get_xscale() == "log"
    assert list(ax.lines[0].get_xdata()) == tracking["lr"]
    _, fig = trainer.lr_range_test(trainer.train_loader, end_lr=1.0, num_iter=5, step_mode="linear")
    assert fig.axes[0].get_xscale() == "linear"


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"step_mode": "cosine"}, ValueError, "unknown step_mode 'cosine'"),
    ({"num_iter": 0}, ValueError, "num_iter must be positive"),
    ({"alpha": 0.0}, ValueError, "alpha must be in"),
    ({"alpha": 1.5}, ValueError, "alpha must be in"),
    ({"end_lr": 0.01}, ValueError, "end_lr must exceed"),
    ({"end_lr": -1.0}, ValueError, "end_lr must be positive"),
    ({"ax": "axes"}, TypeError, "ax must be"),
])
def test_bad_arguments(trainer, kwargs, error, match):
    args = {"end_lr": 1.0, "num_iter": 3} | kwargs
    with pytest.raises(error, match=match):
        trainer.lr_range_test(trainer.train_loader, **args)


def test_empty_loader_raises_instead_of_looping(trainer):
    with pytest.raises(ValueError, match="no batches"):
        trainer.lr_range_test([], end_lr=1.0, num_iter=3)
