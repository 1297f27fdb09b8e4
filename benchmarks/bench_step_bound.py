"""Benchmark: what bounds a training step of the length lab, arithmetic or per-operator overhead?

For one model of ``attnlab compare`` (the default settings, or the ruoss2023 preset's), in
this process, on one thread, interleaved (A, B, A, B, ...), CPU time
(``time.process_time``, robust to other processes' load) per call, median of the repeats:

* forward + backward on a training batch of ``batch_size`` rows, and on 1 row of it: the
  1-row step is nearly all per-operator overhead (the same operators on tiny tensors), so
  ``1 - one_row / batch`` is the share of the step that more work per operator (batching
  the seeds, compiling) could never remove;
* Adam's update: per-tensor loop (torch's CPU default), ``foreach=True`` (what the lab
  uses: the same numbers, bit for bit) and ``fused=True`` (rounds differently);
* gradient clipping by norm.

``/proc/loadavg`` is recorded before and after.

Run: ``python benchmarks/bench_step_bound.py [--settings default|ruoss2023] [--encoding rotary]
[--repeats 5]``; writes ``step_bound_<settings>_<encoding>.json`` in ``results/investigations/``
(``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from harness import write_result


def _load() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main(argv: list[str] | None = None) -> dict:
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.presets import preset
    from attnlab.labs.lengths.train import build_model, task_sets

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="default", choices=("default", "ruoss2023"))
    parser.add_argument("--encoding", default="rotary")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50, help="calls per timed sample")
    args = parser.parse_args(argv)
    settings = {} if args.settings == "default" else dict(preset("ruoss2023").settings)
    config = CompareConfig(**{**settings, "encodings": (args.encoding,)})
    torch.set_num_threads(1)  # as the lab trains (attnlab.training.threads' rule at these sizes)
    torch.manual_seed(0)
    model = build_model(config, args.encoding).train()
    loader, _ = config.protocol_object.batches(config, task_sets(config), 0)
    batches = iter(loader)
    batch = next(batches)
    if args.settings == "ruoss2023":  # one length per step, 1 to train_len: take a batch of the longest
        batch = next(b for b in batches if b[0].shape[1] == config.train_len)
    one_row = type(batch)(*(None if t is None else t[:1] for t in batch))
    loss = config.protocol_object.loss(config)
    params = list(model.parameters())

    def step(b: object) -> None:
        model.zero_grad(set_to_none=True)
        loss(model, b).backward()

    step(batch)  # gradients for the optimizers and the clipping below
    optimizers = {name: torch.optim.Adam(params, lr=config.lr, **kw)
                  for name, kw in (("adam_per_tensor", {"foreach": False}), ("adam_foreach", {"foreach": True}),
                                   ("adam_fused", {"fused": True}))}
    calls = {
        "fwd_bwd_batch": lambda: step(batch), "fwd_bwd_one_row": lambda: step(one_row),
        **{name: opt.step for name, opt in optimizers.items()},
        "clip_norm": lambda: nn.utils.clip_grad_norm_(params, 1.0),
    }
    load_before = _load()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, fn in calls.items():
            start = time.process_time()
            for _ in range(args.calls):
                fn()
            times[name].append((time.process_time() - start) / args.calls * 1e3)
    ms = {name: statistics.median(t) for name, t in times.items()}
    payload = {
        "settings": args.settings, "encoding": args.encoding, "batch_shape": list(batch[0].shape),
        "median_cpu_ms": ms, "overhead_share_of_fwd_bwd": ms["fwd_bwd_one_row"] / ms["fwd_bwd_batch"],
        "loadavg_1min": [load_before, _load()],
    }
    write_result(f"step_bound_{args.settings}_{args.encoding}", payload)
    for name, value in ms.items():
        print(f"{name:18s} {value:7.3f} ms CPU")
    print(f"one row / batch: {payload['overhead_share_of_fwd_bwd']:.2f} (load {payload['loadavg_1min']})")
    return payload


if __name__ == "__main__":
    main()
