"""Tiny models and data for the trainer tests: CPU only, a few hundred parameters, milliseconds per epoch."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from attnlab.training import Trainer


class MLP(nn.Module):
    """3 -> 8 -> 1 with dropout: draws from torch's global generator in train mode."""

    def __init__(self, dropout=0.2, hidden=8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)


def make_data(n=40, seed=0):
    """``x [n, 3]``, ``y [n, 1]`` from a seeded generator (a noisy linear target)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def make_loaders(n=40, batch_size=8, shuffle_seed=123, val=True):
    """A shuffled train loader with its own generator and (optionally) an unshuffled val loader."""
    x, y = make_data(n, seed=0)
    train = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                       generator=torch.Generator().manual_seed(shuffle_seed))
    if not val:
        return train, None
    xv, yv = make_data(16, seed=1)
    return train, DataLoader(TensorDataset(xv, yv), batch_size=batch_size)


def make_trainer(*, model_seed=0, lr=0.05, optimizer="adam", dropout=0.2, val=True, n=40, batch_size=8,
                 shuffle_seed=123, **kwargs):
    """A Trainer over a fresh MLP, optimizer and loaders; progress off, CPU."""
    torch.manual_seed(model_seed)
    model = MLP(dropout)
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9 if optimizer == "momentum" else 0.0)
    kwargs.setdefault("progress", False)
    trainer = Trainer(model, nn.MSELoss(), opt, device="cpu", **kwargs)
    trainer.set_loaders(*make_loaders(n, batch_size, shuffle_seed, val))
    return trainer

