"""The epoch loss is the mean over samples: batch means weighted by batch size (the book: unweighted)."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from attnlab.training import Trainer


def _frozen_trainer(x, y, batch_size):
    # lr=0: the model never changes, so every epoch's loss is the dataset loss of the same model.
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.0), progress=False)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size)
    trainer.set_loaders(loader, loader)
    return trainer


def test_short_last_batch_counts_less():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(9, 3, generator=g), torch.randn(9, 1, generator=g)
    y[-1] += 50.0  # the lone sample of the short last batch has a huge error
    trainer = _frozen_trainer(x, y, batch_size=8)  # batches of 8 and 1
    trainer.train(1)
    with torch.no_grad():
        per_sample = ((trainer.model(x) - y) ** 2).squeeze(1)
    full_mean = per_sample.double().mean().item()
    book_mean = (per_sample[:8].double().mean().item() + per_sample[8].item()) / 2
    assert trainer.losses[0] == pytest.approx(full_mean, rel=1e-6)
    assert trainer.val_losses[0] == pytest.approx(full_mean, rel=1e-6)
    assert abs(trainer.losses[0] - book_mean) > 0.1 * book_mean  # the book's unweighted mean is far off


def test_equal_batches_match_the_plain_mean():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)
    trainer = _frozen_trainer(x, y, batch_size=4)
    trainer.train(1)
    with torch.no_grad():
        expected = nn.functional.mse_loss(trainer.model(x), y).item()
    assert trainer.val_losses[0] == pytest.approx(expected, rel=1e-6)
