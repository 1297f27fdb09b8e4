"""Benchmark: where a second intra-op thread starts to pay for one training step.

A training step (zero_grad, forward, loss, backward, Adam) is timed on 1 and on
2 threads, interleaved (1, 2, 1, 2, ... in one process, ``torch.set_num_threads``
switched between samples), for two families of models:

* the squares models (``attnlab train``): ``selfattn-pe`` and ``gru-attn`` at the
  labs' sizes, and the squares ``transformer`` at widths ``d_model`` 2 to 512, with
  batches of 16 to 256 squares (4 points each);
* the length lab's model (``attnlab compare``'s decoder-only Transformer on the
  reverse task) at widths 32 to 256 and batch x length from 32 x 8 to 128 x 64.

Each case's work per step is ``parameters x tokens`` (tokens = batch x sequence
length), the quantity :func:`attnlab._threads.threads_for` decides by; the ratio
``time(1 thread) / time(2 threads)`` above 1 says the second thread pays. The
machine's load (``/proc/loadavg``) is recorded with every case: on a shared
machine a second thread competes with other work, which this measures too.

Run: ``python benchmarks/bench_threads.py [--repeats 7] [--quick]``; writes ``threads.json``
(``threads_large.json`` with ``--only-large``) in ``results/investigations/`` (``results/latest/``
when ``make bench`` runs it), and prints a table sorted by work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from harness import interleaved, write_result


def loadavg() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def _step_fn(model: nn.Module, loss: Callable[[], torch.Tensor]) -> Callable[[], None]:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()

    return step


def squares_case(model_name: str, batch: int, **sizes: int) -> tuple[Callable[[], None], int, int]:
    """A squares model's training step on ``batch`` random squares: ``(step, parameters, tokens)``."""
    from attnlab.labs.squares.models import squares_model

    torch.manual_seed(0)
    transformer = model_name == "transformer"
    model = squares_model(model_name, teacher_forcing_prob=0.5, input_len=2,
                          encoding="sinusoidal" if transformer else None, backend="auto" if transformer else None,
                          **sizes)
    # In train mode a squares model reads the whole square [B, 4, 2] and predicts corners 3 and 4 [B, 2, 2].
    x, y = torch.randn(batch, 4, 2), torch.randn(batch, 2, 2)
    mse = nn.MSELoss()
    model.train()
    n = sum(p.numel() for p in model.parameters())
    return _step_fn(model, lambda: mse(model(x), y)), n, batch * 4


def lengths_case(d_model: int, batch: int, length: int) -> tuple[Callable[[], None], int, int]:
    """The length lab's decoder-only model on one reverse-task batch: ``(step, parameters, tokens)``."""
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.train import build_model, task_sets

    config = CompareConfig(d_model=d_model, n_heads=4, batch_size=batch, train_len=length, min_train_len=length,
                           test_lens=(length,), n_train=batch, n_test=8, encodings=("sinusoidal",), n_seeds=1)
    sets = task_sets(config)
    torch.manual_seed(0)
    model = build_model(config, "sinusoidal")
    model.train()
    loader, _ = config.protocol_object.batches(config, sets, 0)
    batch_data = next(iter(loader))
    loss_fn = config.protocol_object.loss(config)
    n = sum(p.numel() for p in model.parameters())
    tokens = batch * config.sequence_length(length)
    return _step_fn(model, lambda: loss_fn(model, batch_data)), n, tokens


def measure(step: Callable[[], None], repeats: int) -> dict:
    """Interleaved 1- and 2-thread timings of ``step``, several steps per sample."""
    before = torch.get_num_threads()

    def on(threads: int) -> Callable[[], None]:
        def run() -> None:
            torch.set_num_threads(threads)
            step()
        return run

    step()
    import time
    t0 = time.perf_counter()
    step()
    per = max(1, int(0.05 / max(time.perf_counter() - t0, 1e-6)))  # ~50 ms a sample
    timings = interleaved({"1": on(1), "2": on(2)}, repeats=repeats, warmup=1, per_sample=per)
    torch.set_num_threads(before)
    return timings


def cases(quick: bool, large: bool) -> list[tuple[str, Callable[[], tuple[Callable[[], None], int, int]]]]:
    """Every case: a label and how to build it."""
    out: list[tuple[str, Callable[[], tuple[Callable[[], None], int, int]]]] = [
        ("squares selfattn-pe (lab) B16", lambda: squares_case("selfattn-pe", 16)),
        ("squares gru-attn (lab) B16", lambda: squares_case("gru-attn", 16)),
    ]
    widths = (2, 32, 128, 512) if quick else (2, 8, 32, 64, 128, 256, 512)
    for d in widths:
        for b in ((16, 256) if quick else (16, 64, 256)):
            out.append((f"squares transformer d{d} B{b}",
                        lambda d=d, b=b: squares_case("transformer", b, d_model=d, n_heads=2 if d >= 2 else 1)))
    for d in ((32, 128) if quick else (32, 64, 128, 256)):
        for b, length in (((32, 8), (128, 64)) if quick else ((32, 8), (32, 32), (128, 16), (128, 64))):
            out.append((f"lengths decoder d{d} B{b} L{length}", lambda d=d, b=b, length=length:
                        lengths_case(d, b, length)))
    if large:  # the high end, where a second thread may start to pay
        out += [("squares transformer d512 B1024", lambda: squares_case("transformer", 1024, d_model=512, n_heads=2)),
                ("squares transformer d1024 B1024",
                 lambda: squares_case("transformer", 1024, d_model=1024, n_heads=2)),
                ("lengths decoder d256 B128 L64", lambda: lengths_case(256, 128, 64)),
                ("lengths decoder d512 B128 L64", lambda: lengths_case(512, 128, 64))]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer widths and batches")
    parser.add_argument("--large", action="store_true", help="add four cases of 1e10 to 1e11 work per step")
    parser.add_argument("--only-large", action="store_true", help="only those four")
    args = parser.parse_args(argv)
    rows = []
    todo = cases(args.quick, args.large or args.only_large)
    if args.only_large:
        todo = todo[-4:]
    for label, build in todo:
        step, n_params, tokens = build()
        load = loadavg()
        t = measure(step, args.repeats)
        ratio = t["1"]["median"] / t["2"]["median"]
        row = {"case": label, "parameters": n_params, "tokens": tokens, "work": n_params * tokens,
               "one_thread_s": t["1"], "two_threads_s": t["2"], "speedup_2_threads": ratio,
               "load_before": load, "load_after": loadavg()}
        rows.append(row)
        print(f"{label:38s} work {n_params * tokens:>12,d}  1t {1e3 * t['1']['median']:8.2f} ms  "
              f"2t {1e3 * t['2']['median']:8.2f} ms  x{ratio:5.2f}  load {load:.1f}", flush=True)
    rows.sort(key=lambda r: r["work"])
    result = {"settings": vars(args), "rows": rows}
    path = write_result("threads_large" if args.only_large else "threads", result)
    print(f"written {path}")
    return result


def summary(result: dict) -> list[tuple[str, str, str, str, str, bool | None]]:
    """For ``benchmarks/run.py``'s table: the labs' model, and the largest step where one thread still won."""
    rows = result["rows"]
    lab = next((r for r in rows if r["case"].startswith("squares selfattn-pe")), None)
    won = [r for r in rows if r["speedup_2_threads"] < 1]
    largest = max(won, key=lambda r: r["work"]) if won else None
    out: list[tuple[str, str, str, str, str, bool | None]] = []
    if lab is not None:
        out.append(("PE lab train step, 1 vs 2 threads", f"{1e3 * lab['one_thread_s']['median']:.2f} ms",
                    f"{1e3 * lab['two_threads_s']['median']:.2f} ms on 2",
                    f"{1 / lab['speedup_2_threads']:.1f}x faster", "1 thread (the rule)", lab["speedup_2_threads"] < 1))
    if largest is not None:
        out.append((f"largest step 1 thread won: {largest['case']}", f"work {largest['work']:.1e}",
                    "rule's boundary 1e11", f"{1 / largest['speedup_2_threads']:.2f}x", "< 1e11",
                    largest["work"] < 1e11))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
