"""Benchmark: one epoch of the default ``attnlab train`` configuration against the seeds' code.

An epoch is what the book's StepByStep does per epoch: every training batch
(forward, MSE, backward, Adam step) and then every validation batch in eval mode
(greedy decoding). attnlab: its model, its Trainer, its loaders. The seeds: the
per-head formulation of ``seed_formulation.py`` driven by the book's loop, written
out below (``model.train()`` / ``model.eval()`` per batch, ``np.mean`` of batch
losses), on a ``TensorDataset`` as the seeds build it. Same data, same batch size,
same initial weights. Target: seeds / attnlab >= 3.

Run: ``python benchmarks/bench_training.py [--repeats R] [--epochs-per-sample E]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness import interleaved, per_unit, write_result
from seed_formulation import build_seed_model


def book_epoch(model: nn.Module, loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
               train_loader: DataLoader, val_loader: DataLoader) -> tuple[float, float]:
    """The book's StepByStep epoch: per-batch train steps, then per-batch validation."""
    losses = []
    for x, y in train_loader:
        model.train()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    val = []
    with torch.no_grad():
        for x, y in val_loader:
            model.eval()
            val.append(loss_fn(model(x), y).item())
    return float(np.mean(losses)), float(np.mean(val))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs-per-sample", type=int, default=10)
    args = parser.parse_args(argv)
    from attnlab.data import make_loaders
    from attnlab.runs import RunConfig, build_model, make_optimizer
    from attnlab.training import Trainer

    config = RunConfig()
    data = make_loaders(n_train=config.n_train, n_test=config.n_test, batch_size=config.batch_size,
                        shuffle_seed=config.train_seed)
    model = build_model(config)
    trainer = Trainer(model, nn.MSELoss(), make_optimizer(model, config), progress=False)
    trainer.set_loaders(data.train, data.test)

    # The seeds' side: their data structures (TensorDataset of the same squares).
    full_train = torch.cat([x for x, _ in data.train])  # [N, 4, 2]
    seed_train = DataLoader(TensorDataset(full_train, full_train[:, 2:]), batch_size=config.batch_size,
                            shuffle=True, generator=torch.Generator().manual_seed(0))
    seed_val = DataLoader(TensorDataset(data.full_test[:, :2], data.full_test[:, 2:]),
                          batch_size=config.batch_size)
    torch.manual_seed(config.seed)
    seed_model = build_seed_model()
    seed_opt = torch.optim.Adam(seed_model.parameters(), lr=config.lr)
    loss_fn = nn.MSELoss()

    # One call trains E epochs, as a user's train(100) does: the trainer's per-call set-up
    # is spread over the epochs as it is in real use.
    e = args.epochs_per_sample
    t = per_unit(interleaved(
        {
            "attnlab": lambda: trainer.train(e),
            "seeds": lambda: [book_epoch(seed_model, loss_fn, seed_opt, seed_train, seed_val) for _ in range(e)],
        },
        repeats=args.repeats,
    ), e)
    speedup = t["seeds"]["median"] / t["attnlab"]["median"]
    print(f"one epoch, default train config: attnlab {t['attnlab']['median'] * 1e3:.1f} ms | "
          f"seeds' code + book loop {t['seeds']['median'] * 1e3:.1f} ms | speed-up {speedup:.2f}x (target >= 3)")
    result = {"description": "one epoch (train + validation) of the default attnlab train configuration",
              "timings_s_per_epoch": t, "speedup_seeds_over_attnlab": speedup}
    path = write_result("training_epoch", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
