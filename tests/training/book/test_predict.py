"""predict: no graph, batched, integer inputs kept, train/eval mode restored, numpy out."""

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.training import Trainer

from trainer_helpers import MLP


class Recorder(MLP):
    """Records, per forward call, the batch size, grad mode and train mode."""

    def __init__(self):
        super().__init__(dropout=0.5)
        self.calls = []

    def forward(self, x):
        self.calls.append((len(x), torch.is_grad_enabled(), self.training))
        return super().forward(x)


def _trainer(model):
    return Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), progress=False)


def test_no_graph_eval_mode_numpy_out():
    model = Recorder()
    trainer = _trainer(model)
    x = torch.randn(5, 3)
    out = trainer.predict(x)
    assert isinstance(out, np.ndarray) and out.shape == (5, 1) and out.dtype == np.float32
    assert model.calls == [(5, False, False)]
    assert model.training  # restored: the model was in train mode before
    with torch.no_grad():
        model.eval()
        np.testing.assert_array_equal(out, model(x).numpy())  # dropout off: deterministic


def test_eval_mode_is_restored_too():
    model = Recorder()
    model.eval()
    model.net[2].train()
    _trainer(model).predict(torch.randn(2, 3))
    assert not model.training and model.net[2].training  # the book always left train mode on


def test_batched_in_chunks_of_batch_size():
    model = Recorder()
    trainer = _trainer(model)
    x = torch.randn(10, 3)
    out = trainer.predict(x, batch_size=4)
    assert [c[0] for c in model.calls] == [4, 4, 2]
    np.testing.assert_allclose(out, trainer.predict(x), rtol=1e-6)
    assert trainer.predict(x[:0]).shape == (0, 1)


def test_integer_inputs_are_not_cast_to_float():
    # The book's .float() turned token ids into floats, which nn.Embedding refuses.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 2))
    out = _trainer(model).predict(torch.tensor([[1, 2], [3, 9]]))
    assert out.shape == (2, 2)


def test_numpy_float64_input_is_cast_to_the_model_dtype():
    out = _trainer(MLP()).predict(np.random.default_rng(0).normal(size=(3, 3)))
    assert out.dtype == np.float32 and out.shape == (3, 1)


def test_tuple_outputs_become_tuples_of_arrays():
    torch.manual_seed(0)
    gru = nn.GRU(3, 4, batch_first=True)
    trainer = _trainer(gru)
    x = torch.randn(4, 5, 3)
    out, h = trainer.predict(x)
    assert out.shape == (4, 5, 4) and h.shape == (1, 4, 4)
    # h [layers, B, F] has no leading batch axis: chunks of it cannot be joined.
    with pytest.raises(ValueError, match="no leading batch axis"):
        trainer.predict(x, batch_size=2)


def test_bad_arguments():
    trainer = _trainer(MLP())
    with pytest.raises(ValueError, match="batch_size must be positive, got 0"):
        trainer.predict(torch.randn(2, 3), batch_size=0)
    with pytest.raises(ValueError, match="batch axis"):
        trainer.predict(torch.tensor(1.0))
    with pytest.raises(TypeError, match="x must be a tensor"):
        trainer.predict("abc")
