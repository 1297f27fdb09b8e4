"""Benchmark: one epoch of the default ``attnlab train`` configuration against the labs' code.

An epoch is what the book's StepByStep does per epoch: every training batch
(forward, MSE, backward, Adam step) and then every validation batch in eval mode
(greedy decoding). attnlab: its model, its Trainer, its loaders. The labs: the
per-head formulation of ``lab_formulation.py`` driven by the book's loop, written
out below (``model.train()`` / ``model.eval()`` per batch, ``np.mean`` of batch
losses), on a ``TensorDataset`` as the labs build it. Same data, same training
batch size, same initial weights. Target: labs / attnlab >= 3.

attnlab's default configuration validates the 128 test squares in one batch
(``SquaresConfig.eval_batch_size``; the labs use batches of 16: evaluation keeps
no graph, so the loss is the same and only the number of calls changes). To
show what that choice is worth, a second attnlab trainer validates in batches of
16 like the labs, and the training and validation passes are also timed apart.

Run: ``python benchmarks/bench_training.py [--repeats R] [--epochs-per-sample E]``; writes
``training_epoch.json`` in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from harness import interleaved, per_unit, write_result
from lab_formulation import build_lab_model


def book_epoch(model: nn.Module, loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
               train_loader: DataLoader, val_loader: DataLoader) -> tuple[float, float]:
    """The book's StepByStep epoch: per-batch train steps, then per-batch validation."""
    return lab_train_pass(model, loss_fn, optimizer, train_loader), lab_val_pass(model, loss_fn, val_loader)


def lab_train_pass(model: nn.Module, loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
                    train_loader: DataLoader) -> float:
    """The training half of :func:`book_epoch`."""
    losses = []
    for x, y in train_loader:
        model.train()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return float(np.mean(losses))


def lab_val_pass(model: nn.Module, loss_fn: nn.Module, val_loader: DataLoader) -> float:
    """The validation half of :func:`book_epoch`."""
    val = []
    with torch.no_grad():
        for x, y in val_loader:
            model.eval()
            val.append(loss_fn(model(x), y).item())
    return float(np.mean(val))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs-per-sample", type=int, default=10)
    args = parser.parse_args(argv)
    from attnlab.data import make_loaders
    from attnlab.labs.squares.train import SquaresConfig, build_model, make_optimizer
    from attnlab.training import Trainer

    config = SquaresConfig()

    def attnlab_trainer(eval_batch_size: int) -> tuple[Trainer, object]:
        data = make_loaders(n_train=config.n_train, n_test=config.n_test, batch_size=config.batch_size,
                            eval_batch_size=eval_batch_size, shuffle_seed=config.train_seed)
        model = build_model(config)
        trainer = Trainer(model, nn.MSELoss(), make_optimizer(model, config), progress=False)
        trainer.set_loaders(data.train, data.test)
        return trainer, data

    trainer, data = attnlab_trainer(config.eval_batch_size)
    trainer16, _ = attnlab_trainer(config.batch_size)

    # The labs' side: their data structures (TensorDataset of the same squares).
    full_train = torch.cat([x for x, _ in data.train])  # [N, 4, 2]
    lab_train = DataLoader(TensorDataset(full_train, full_train[:, 2:]), batch_size=config.batch_size,
                            shuffle=True, generator=torch.Generator().manual_seed(0))
    lab_val = DataLoader(TensorDataset(data.full_test[:, :2], data.full_test[:, 2:]),
                          batch_size=config.batch_size)
    torch.manual_seed(config.seed)
    lab_model = build_lab_model()
    lab_opt = torch.optim.Adam(lab_model.parameters(), lr=config.lr)
    loss_fn = nn.MSELoss()

    # One call trains E epochs, as a user's train(100) does: the trainer's per-call set-up
    # is spread over the epochs as it is in real use.
    e = args.epochs_per_sample
    t = per_unit(interleaved(
        {
            "attnlab": lambda: trainer.train(e),
            "attnlab_eval16": lambda: trainer16.train(e),
            "labs": lambda: [book_epoch(lab_model, loss_fn, lab_opt, lab_train, lab_val) for _ in range(e)],
        },
        repeats=args.repeats,
    ), e)
    # The two passes apart (validation in batches of 16 on both sides), in the one training loop.
    loop16 = trainer16._loop([])
    passes = per_unit(interleaved(
        {
            "attnlab_train": lambda: [loop16.run_epoch(True) for _ in range(e)],
            "labs_train": lambda: [lab_train_pass(lab_model, loss_fn, lab_opt, lab_train) for _ in range(e)],
            "attnlab_val16": lambda: [loop16.run_epoch(False) for _ in range(e)],
            "labs_val": lambda: [lab_val_pass(lab_model, loss_fn, lab_val) for _ in range(e)],
        },
        repeats=args.repeats,
    ), e)
    speedup = t["labs"]["median"] / t["attnlab"]["median"]
    same_batching = t["labs"]["median"] / t["attnlab_eval16"]["median"]
    train_pass = passes["labs_train"]["median"] / passes["attnlab_train"]["median"]
    val_pass = passes["labs_val"]["median"] / passes["attnlab_val16"]["median"]
    ms = {name: v["median"] * 1e3 for name, v in t.items()}
    print(f"one epoch, default train config: attnlab {ms['attnlab']:.1f} ms | "
          f"labs' code + book loop {ms['labs']:.1f} ms | speed-up {speedup:.2f}x (target >= 3)")
    print(f"  validating in batches of 16 like the labs: attnlab {ms['attnlab_eval16']:.1f} ms, {same_batching:.2f}x; "
          f"training pass alone {train_pass:.2f}x, validation pass alone {val_pass:.2f}x")
    result = {"description": "one epoch (train + validation) of the default attnlab train configuration",
              "timings_s_per_epoch": t, "timings_s_per_pass": passes, "speedup_labs_over_attnlab": speedup,
              "speedup_with_eval_batch_16": same_batching, "speedup_training_pass": train_pass,
              "speedup_validation_pass_batch_16": val_pass}
    path = write_result("training_epoch", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
