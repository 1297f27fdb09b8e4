"""The labs' training procedure written out, and a default ``attnlab train`` run: epoch losses side by side.

Shared by ``tests/labs/test_lab_parity.py`` (the first epochs) and ``benchmarks/lab_parity.py`` (the
labs' 100 epochs, ``--check``). The labs build their model after ``torch.manual_seed(43)`` (the
positional-encoding lab) or ``torch.manual_seed(23)`` (the attention lab's GRU with attention), then
train with the book's ``StepByStep.train(100)``, whose ``seed=42`` calls ``set_seed(42)``: torch's,
numpy's and Python's generators and the training loader's, all to 42. Their test loader has no
generator of its own, so every validation pass draws one number from torch's global generator. The
procedure below is the labs' (their classes, copied verbatim into ``lab_code.py``; the book's loop
written out), with one fix the labs' own text calls for: the test set is the seed-19 squares (the
labs build it from the training points).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

from attnlab.labs.squares.train import SquaresConfig, train_run

from lab_code import (
    Attention,
    DecoderAttn,
    DecoderPe,
    Encoder,
    EncoderDecoderAttn,
    EncoderDecoderSelfAttn,
    EncoderPe,
    generate_sequences,
)

assert Attention  # the GRU decoder's attention, used through DecoderAttn

MODELS = ("selfattn-pe", "gru-attn")  # the positional-encoding lab's model, the attention lab's


def labs_procedure(model_name: str, *, epochs: int, fused: bool = False) -> tuple[list[float], list[float]]:
    """The labs' training, epoch by epoch: ``(training losses, validation losses)``, each ``[epochs]``, as
    StepByStep records them. ``fused=True`` swaps the labs' Adam for ``optim.Adam(fused=True)``: the same
    optimiser with its float32 sums in another order, to show how far rounding alone moves the losses."""
    if model_name not in MODELS:
        raise ValueError(f"model_name must be one of {MODELS}, got {model_name!r}")
    if model_name == "selfattn-pe":
        torch.manual_seed(43)
        model: nn.Module = EncoderDecoderSelfAttn(EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2),
                                                  DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2),
                                                  input_len=2, target_len=2)
    else:
        torch.manual_seed(23)
        model = EncoderDecoderAttn(Encoder(n_features=2, hidden_dim=2), DecoderAttn(n_features=2, hidden_dim=2),
                                   input_len=2, target_len=2, teacher_forcing_prob=0.5)
    return train_as_the_labs(model, epochs=epochs, fused=fused)


def train_as_the_labs(model: nn.Module, *, epochs: int, fused: bool = False) -> tuple[list[float], list[float]]:
    """Train ``model`` (built after its lab's seed) on the labs' squares as StepByStep.train does:
    ``(training losses, validation losses)``, each ``[epochs]``. The data draws no global random number,
    so building the model before or after it is the same."""
    points, _ = generate_sequences()
    full_train = torch.as_tensor(np.array(points)).float()
    target_train = full_train[:, 2:]
    test_points, _ = generate_sequences(seed=19)
    full_test = torch.as_tensor(np.array(test_points)).float()
    generator = torch.Generator()
    train_loader = DataLoader(TensorDataset(full_train, target_train), batch_size=16, shuffle=True,
                              generator=generator)
    test_loader = DataLoader(TensorDataset(full_test[:, :2], full_test[:, 2:]), batch_size=16)
    loss_fn = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=0.01, fused=fused)
    # StepByStep.train(n_epochs, seed=42) -> set_seed(42)
    torch.manual_seed(42)
    np.random.seed(42)  # noqa: NPY002 (the book's set_seed, as the labs run it)
    random.seed(42)
    train_loader.sampler.generator.manual_seed(42)
    losses, val_losses = [], []
    for _ in range(epochs):
        model.train()
        batch_losses = []
        for x, y in train_loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            batch_losses.append(loss.item())
        losses.append(float(np.mean(batch_losses)))
        with torch.no_grad():
            model.eval()
            val_losses.append(float(np.mean([loss_fn(model(x), y).item() for x, y in test_loader])))
    return losses, val_losses


def attnlab_train(model_name: str, *, epochs: int, folder: Path) -> tuple[list[float], list[float]]:
    """A default ``attnlab train --model MODEL --epochs N`` run's per-epoch ``(training, validation)`` losses,
    each ``[epochs]``, from the ``metrics.jsonl`` it writes into ``folder``."""
    result = train_run(SquaresConfig(model=model_name, epochs=epochs), folder, progress=False)
    if model_name == "gru-attn":  # its one attention layer is drawn (the 100-epoch run ends at test MSE 0.089)
        assert "figures/attention-decoder-attn.png" in result.files
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows], [r["val_loss"] for r in rows]


def max_diffs(ours: list[float], theirs: list[float]) -> np.ndarray:
    """``|ours - theirs|`` per epoch, ``[epochs]`` (the two lists must be as long)."""
    if len(ours) != len(theirs):
        raise ValueError(f"ours has {len(ours)} epochs, theirs {len(theirs)}")
    return np.abs(np.array(ours) - np.array(theirs))
