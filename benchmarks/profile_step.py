"""Profile one training step and one validation batch of the default ``attnlab train`` configuration.

Prints, for the positional-encoding lab's model at batch 16: the time of a training step (forward,
MSE, backward, Adam) split into its parts, the time of one validation batch
(greedy decoding), the number of autograd nodes one step records, the number of
operators torch dispatches, and torch.profiler's table of the operators that cost
most. It is the tool behind the "before/after" figures in BENCHMARKS.md: run it
on two commits (``git worktree add /tmp/before <commit>``, then
``python benchmarks/profile_step.py`` in each) on a quiet machine.

Run: ``python benchmarks/profile_step.py [--steps N] [--table-rows R]``.
"""

from __future__ import annotations

import argparse
import collections
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile


def autograd_nodes(loss: torch.Tensor) -> collections.Counter:
    """Count the backward graph's nodes by type."""
    seen, counts, stack = set(), collections.Counter(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        counts[type(node).__name__] += 1
        stack.extend(fn for fn, _ in node.next_functions)
    return counts


def per_call_us(fn, n: int) -> float:
    for _ in range(max(10, n // 10)):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--table-rows", type=int, default=15)
    args = parser.parse_args(argv)
    from attnlab.data import make_loaders
    from attnlab.labs.squares.train import SquaresConfig, build_model

    config = SquaresConfig()
    data = make_loaders(n_train=config.n_train, n_test=config.n_test, batch_size=config.batch_size,
                        shuffle_seed=config.train_seed)
    model = build_model(config)
    try:
        from attnlab.labs.squares.train import make_optimizer
    except ImportError:  # commits before the fused Adam: the "before" side of BENCHMARKS.md
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    else:
        optimizer = make_optimizer(model, config)
    x, y = next(iter(data.train))
    source, target = next(iter(data.test))
    loss_fn = nn.MSELoss()

    def forward() -> torch.Tensor:
        model.train()
        return loss_fn(model(x), y)

    def forward_backward() -> None:
        forward().backward()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        forward().backward()
        optimizer.step()

    def validate() -> None:
        model.eval()
        with torch.no_grad():
            loss_fn(model(source), target)

    n = args.steps
    times = {"forward": per_call_us(forward, n), "forward+backward": per_call_us(forward_backward, n),
             "train step": per_call_us(step, n), "validation batch": per_call_us(validate, n)}
    nodes = autograd_nodes(forward())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(100):
            step()
    ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"positional-encoding lab's model, batch {config.batch_size}")
    for name, us in times.items():
        print(f"  {name:18s} {us:8.1f} us")
    kinds = ", ".join(f"{k} {v}" for k, v in nodes.most_common())
    print(f"  autograd nodes per step: {sum(nodes.values())}  ({kinds})")
    print(f"  aten operators per step: {ops / 100:.0f}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.table_rows))
    return {"times_us": times, "autograd_nodes": sum(nodes.values()), "aten_ops_per_step": ops / 100}


if __name__ == "__main__":
    main()
