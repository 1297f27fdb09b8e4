"""Benchmark: G models trained as one grouped computation against G single-model steps, per model-step.

One ruoss2023-like model (:class:`attnlab.models.EncoderOnlyTransformer`, 5 layers, d_model 64,
8 heads, ff 256, a vocabulary of 5, batches of 32 sequences of 25 tokens, ``--encoding``
sinusoidal by default). A training step is the lab's (:func:`attnlab.labs.lengths.train.train_one`
through :func:`attnlab.training.fit`): loss, backward, norm clipping at 1.0, Adam
(``foreach=True``) and a ``LambdaLR`` step. For each ``G``:

* ``sequential``: ``G`` models, one such step each, one after another (what ``G`` runs in one
  process do);
* ``grouped``: one :func:`attnlab.training.grouped.group_step` of a
  :class:`~attnlab.models.grouped.ModelGroup` of the same ``G`` models.

Both in this process, on one thread (``torch.set_num_threads(1)``, as the lab trains at these
sizes), interleaved (A, B, A, B, ...), wall time per call, median of the repeats; the figure
compared is model-steps per second, and ``speedup = grouped / sequential``; ``models_per_hour``
is that rate over the ruoss2023 preset's 6,400 steps per model (training only, no evaluation).
``--dropout 0.1`` (the preset's) trains with dropout at every site, each member drawing its own masks.

Run: ``python benchmarks/bench_grouped.py [--groups 1 4 16] [--repeats 5] [--encoding sinusoidal]
[--dropout 0.1] [--device cpu|cuda] [--name grouped_cpu]``; it writes ``<name>.json`` (default
``grouped_<device type>``) in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from harness import interleaved, write_result

V, BATCH, LENGTH = 5, 32, 25
STEPS_PER_MODEL = 6_400  # the ruoss2023 preset's
SIZES = {"vocab_size": V, "d_model": 64, "n_heads": 8, "n_layers": 5, "ff_units": 256, "max_len": 64}


def _schedule(step: int) -> float:
    """The lab's shape (warm-up, then cosine decay) over 1000 steps."""
    return (step + 1) / 50 if step < 50 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - 50) / 950)))


def _loss(logits: torch.Tensor, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), batch[1].flatten())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sequential(models: list, batches: list, device: torch.device) -> Callable[[], None]:
    """One lab step of each model in turn."""
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-3, foreach=True) for m in models]
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, _schedule) for o in optimizers]
    params = [list(m.parameters()) for m in models]

    def step() -> None:
        for model, optimizer, scheduler, ps, batch in zip(models, optimizers, schedulers, params, batches,
                                                                 strict=True):
            optimizer.zero_grad(set_to_none=True)
            _loss(model(batch[0]), batch).backward()
            torch.nn.utils.clip_grad_norm_(ps, 1.0)
            optimizer.step()
            scheduler.step()
        _sync(device)

    return step


def _grouped(models: list, batches: list, device: torch.device) -> Callable[[], None]:
    """One grouped step of all the models."""
    from attnlab.models.grouped import ModelGroup
    from attnlab.training.grouped import GroupAdam, MemberInputs, group_step

    # Each member's own stream for its dropout masks (what ModelGroup.build makes).
    group = ModelGroup(models, streams=[torch.Generator().manual_seed(g) for g in range(len(models))]).train()
    adam = GroupAdam(group.parameters(), lrs=[1e-3] * len(models))
    count = [0]

    def step() -> None:
        group_step(group, adam, batches, inputs=lambda b: MemberInputs(b[0]), loss=_loss,
                   factor=_schedule(count[0]), clip=1.0)
        count[0] += 1
        _sync(device)

    return step


def main(argv: list[str] | None = None) -> dict:
    from attnlab.models import EncoderOnlyTransformer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--encoding", default="sinusoidal")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--note", default=None, help="recorded with the settings (e.g. the machine's load)")
    parser.add_argument("--name", default=None, help="result file name (default grouped_<device type>)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(1)
    results = []
    for G in args.groups:
        g = torch.Generator().manual_seed(G)
        batches = [(torch.randint(1, V, (BATCH, LENGTH), generator=g).to(device),
                    torch.randint(1, V, (BATCH, LENGTH), generator=g).to(device)) for _ in range(G)]

        def models(G: int = G) -> list:
            out = []
            for seed in range(G):
                torch.manual_seed(seed)
                out.append(EncoderOnlyTransformer(**SIZES, position=args.encoding, dropout=args.dropout).to(device))
            return out

        timings = interleaved({"sequential": _sequential(models(), batches, device),
                               "grouped": _grouped(models(), batches, device)},
                              repeats=args.repeats, warmup=2)
        rates = {name: G / t["median"] for name, t in timings.items()}  # model-steps per second
        per_hour = {name: 3600 * rate / STEPS_PER_MODEL for name, rate in rates.items()}
        row = {"G": G, "seconds_per_call": timings, "model_steps_per_second": rates, "models_per_hour": per_hour,
               "speedup": rates["grouped"] / rates["sequential"]}
        print(f"G={G:3d}  sequential {rates['sequential']:8.1f}  grouped {rates['grouped']:8.1f} model-steps/s  "
              f"({per_hour['sequential']:.1f} vs {per_hour['grouped']:.1f} models/hour)  "
              f"speedup {row['speedup']:.2f}x", flush=True)
        results.append(row)
    payload = {"settings": {**SIZES, "encoding": args.encoding, "dropout": args.dropout, "batch": BATCH,
                            "length": LENGTH, "device": str(device), "threads": torch.get_num_threads(),
                            "repeats": args.repeats, "steps_per_model": STEPS_PER_MODEL, "note": args.note},
               "results": results}
    path = write_result(args.name or f"grouped_{device.type}", payload)
    print(f"wrote {path}")
    return payload


if __name__ == "__main__":
    main()
