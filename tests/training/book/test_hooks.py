"""Forward hooks (tensor and GRU tuple outputs), gradient and parameter capture, removal."""

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.training import Trainer

from trainer_helpers import MLP


def _trainer(model):
    return Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), progress=False)


def test_default_hook_captures_outputs_and_concatenates_calls():
    trainer = _trainer(MLP())
    trainer.attach_hooks(["net.0", "net.3"])
    x = torch.randn(5, 3)
    trainer.predict(x)
    assert trainer.visualization["net.0"].shape == (5, 8)
    with torch.no_grad():
        np.testing.assert_allclose(trainer.visualization["net.0"], trainer.model.net[0](x).numpy(), rtol=1e-6)
    trainer.predict(x[:2])
    assert trainer.visualization["net.3"].shape == (7, 1)


def test_gru_tuple_outputs_are_captured():
    # The book's default hook called .detach() on the (out, h) tuple: AttributeError.
    class Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(3, 4, batch_first=True)
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            out, _ = self.gru(x)
            return self.head(out[:, -1])

    trainer = _trainer(Seq())
    trainer.attach_hooks("gru")
    trainer.predict(torch.randn(2, 6, 3))
    trainer.predict(torch.randn(3, 6, 3))
    out = trainer.visualization["gru"]  # the first element of (out, h): every step's hidden state
    assert out.shape == (5, 6, 4)  # concatenated along the batch
    with torch.no_grad():
        x = torch.randn(1, 6, 3)
        trainer.predict(x)
        expected = trainer.model.gru(x)[0].numpy()
        np.testing.assert_allclose(trainer.visualization["gru"][-1:], expected, rtol=1e-6)


def test_hooks_are_removable_and_reattaching_replaces():
    trainer = _trainer(MLP())
    trainer.attach_hooks(["net.0"])
    trainer.attach_hooks(["net.1"])  # replaces, does not leak the first hook
    assert list(trainer.visualization) == ["net.1"]
    trainer.predict(torch.randn(2, 3))
    assert "net.0" not in trainer.visualization
    trainer.remove_hooks()
    assert trainer.handles == {}
    captured = trainer.visualization["net.1"].copy()
    trainer.predict(torch.randn(2, 3))
    np.testing.assert_array_equal(trainer.visualization["net.1"], captured)
    assert not trainer.model.net[1]._forward_hooks


def test_custom_hook_fn():
    seen = []
    trainer = _trainer(MLP())
    trainer.attach_hooks(["net.1"], hook_fn=lambda layer, inputs, outputs: seen.append(tuple(outputs.shape)))
    trainer.predict(torch.randn(4, 3))
    assert seen == [(4, 8)]


def test_unknown_layer_is_named():
    trainer = _trainer(MLP())
    with pytest.raises(ValueError, match="no layer named 'net.9'"):
        trainer.attach_hooks(["net.0", "net.9"])
    with pytest.raises(TypeError, match="layer names"):
        trainer.attach_hooks([0])


def test_capture_gradients_and_parameters():
    torch.manual_seed(0)
    model = MLP(dropout=0.0)
    trainer = _trainer(model)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)
    trainer.set_loaders([(x[:4], y[:4]), (x[4:], y[4:])])
    trainer.attach_hooks(["net.0"])
    trainer.capture_gradients("net.3")
    trainer.capture_parameters(["net.3"])
    trainer.train(1)
    grads = trainer._gradients["net.3"]["weight"]
    params = trainer._parameters["net.3"]["weight"]
    assert len(grads) == 2 and grads[0].shape == (1, 8)
    assert len(params) == 2
    # SGD: the second batch saw the weights after the first step.
    np.testing.assert_allclose(params[1], params[0] - 0.1 * grads[0], rtol=1e-5, atol=1e-7)
    assert trainer.visualization["net.0"].shape == (8, 8)  # capture_parameters left it alone
    trainer.remove_hooks()
    trainer.train(1)
    assert len(trainer._gradients["net.3"]["weight"]) == 2
