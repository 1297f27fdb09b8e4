"""Gradient clipping by value, by norm and during backprop; switching settings no longer conflicts."""

import pytest
import torch
from torch import nn

from attnlab.training import Trainer


def _one_step_trainer():
    # SGD with lr=1 and no momentum: each parameter moves by exactly minus its (clipped) gradient.
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=1.0), progress=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 3, generator=g)
    trainer.set_loaders([(x, 100.0 * torch.ones(16, 1))])  # huge errors, huge gradients
    return trainer


def _step(trainer):
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    trainer.train(1)
    after = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    return before - after  # the gradient that was applied


def test_unclipped_gradients_are_large():
    assert _step(_one_step_trainer()).abs().max() > 10


def test_clip_by_value():
    trainer = _one_step_trainer()
    trainer.set_clip_grad_value(0.5)
    assert trainer.clipping == {"mode": "value", "clip_value": 0.5}
    assert _step(trainer).abs().max() == pytest.approx(0.5)


def test_clip_by_norm():
    trainer = _one_step_trainer()
    trainer.set_clip_grad_norm(1.0)
    assert _step(trainer).norm().item() == pytest.approx(1.0, rel=1e-5)


def test_clip_during_backprop():
    trainer = _one_step_trainer()
    trainer.set_clip_backprop(0.25)
    assert _step(trainer).abs().max() == pytest.approx(0.25)


def test_backprop_after_value_clipping_works():
    # The book called .append on its value-clipping lambda here: AttributeError.
    trainer = _one_step_trainer()
    trainer.set_clip_grad_value(0.5)
    trainer.set_clip_backprop(0.1)
    assert _step(trainer).abs().max() == pytest.approx(0.1)


def test_norm_after_backprop_removes_the_hooks():
    # The book lost the hook handles here: the backprop clamp stayed on forever.
    trainer = _one_step_trainer()
    trainer.set_clip_backprop(0.01)
    trainer.set_clip_grad_norm(1000.0)
    assert _step(trainer).abs().max() > 10 * 0.01


def test_remove_clip_removes_everything():
    trainer = _one_step_trainer()
    trainer.set_clip_backprop(0.01)
    trainer.remove_clip()
    assert trainer.clipping is None
    assert _step(trainer).abs().max() > 10


@pytest.mark.parametrize(("method", "args", "error", "match"), [
    ("set_clip_grad_value", (0,), ValueError, "clip_value must be positive, got 0.0"),
    ("set_clip_grad_value", ("big",), TypeError, "clip_value must be a number"),
    ("set_clip_grad_norm", (-1.0,), ValueError, "max_norm must be positive"),
    ("set_clip_grad_norm", (1.0, 0), ValueError, "norm_type must be positive"),
    ("set_clip_backprop", (float("inf"),), ValueError, "clip_value must be finite"),
])
def test_bad_clip_values(method, args, error, match):
    with pytest.raises(error, match=match):
        getattr(_one_step_trainer(), method)(*args)


def test_infinity_norm_is_allowed():
    trainer = _one_step_trainer()
    trainer.set_clip_grad_norm(0.5, norm_type=float("inf"))
    assert _step(trainer).abs().max() == pytest.approx(0.5, rel=1e-5)
