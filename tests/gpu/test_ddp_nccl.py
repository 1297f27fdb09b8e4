"""Data-parallel ``attnlab train --device cuda`` under torchrun (nccl), against one process on the same GPU.

As tests/training/test_distributed.py does with gloo on the CPU: ``torchrun --standalone
--nproc_per_node N -m attnlab train`` (the selfattn-pe model, 64 squares, global batch 16),
2 epochs, then ``--resume`` to 3, against one process on the same device, 3 epochs straight.
With 2 ranks the reference is a plain training loop written here (no attnlab training code),
over the same global batches: a ``DistributedSampler`` with one replica and the same seed,
whose permutation the ranks split ``rank::2`` (the CPU test's reference, on the device). With
one rank it is ``attnlab train`` in one process: ``WORLD_SIZE=1`` is a single process, which
shuffles with its loader's own generator. Two ranks need two GPUs (each rank takes ``cuda:LOCAL_RANK``, and
nccl refuses two ranks on one GPU); on a machine with one GPU the test runs with one rank, which
is torchrun's environment with ``WORLD_SIZE=1``: attnlab then trains as a single process and
joins no process group (:meth:`attnlab.training.distributed.DistributedContext.from_env`), so
nccl itself is exercised only by the 2-rank case, skipped with the reason below 2 GPUs.

The tolerance: the CPU test finds the ranks equal to one process to 6e-8 (float32, the
gradients averaged by gloo in a fixed order). nccl's ring all-reduce sums in its own order, and
CUDA's kernels may add atomically; each is a relative 1e-7 per step, over 12 steps: ``REL``
allows 1e-4, far below what a rank training on the wrong shard or an unaveraged gradient
gives (percents of these losses).

:func:`check_ddp` takes the device; it was run with ``device="cpu"`` (gloo) while writing it
(no GPU there); two torchrun launches cost too much time for ``make test``, which already runs
the CPU one in tests/training/test_distributed.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import BatchSampler, DistributedSampler

from attnlab.data.squares.loaders import SquareSequences
from attnlab.labs.squares.train import SquaresConfig, build_model, load_run, make_optimizer

REL = 1e-4
N_TRAIN, BATCH, TRAIN_SEED = 64, 16, 42
ARGS = ["--model", "selfattn-pe", "--n-train", str(N_TRAIN), "--batch-size", str(BATCH), "--no-progress"]
RUN_FILES = [".lock", "attnlab-run.json", "checkpoint.pt", "config.json", "environment.json", "figures",
             "metrics.jsonl", "report.html", "summary.json"]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def _env(tmp) -> dict[str, str]:
    return dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", TMPDIR=str(tmp))


def _torchrun(cwd, logs, nproc: int, *argv: str) -> dict[int, dict[str, str]]:
    """``torchrun --nproc_per_node NPROC -m attnlab train ARGV`` in ``cwd``; each rank's stdout and stderr."""
    # --standalone: torchrun finds a free port itself (a port chosen here could be taken before it binds it)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "--log-dir", str(logs), "--redirects", "3", "-m", "attnlab", "train", *argv]
    # The timeout only bounds a hang (nccl waiting on a rank that died).
    proc = subprocess.run(cmd, cwd=cwd, env=_env(cwd.parent), capture_output=True, text=True, timeout=900)
    # A rank's traceback is in its own log (--redirects), not in torchrun's output: both go in the message.
    ranks = "".join(f"\n--- {path.relative_to(logs)}\n{path.read_text()[-4000:]}"
                    for path in sorted(logs.rglob("*.log")))
    assert proc.returncode == 0, proc.stdout + proc.stderr + ranks
    return {rank: {name: next(logs.rglob(f"attempt_0/{rank}/{name}.log")).read_text()
                   for name in ("stdout", "stderr")} for rank in range(nproc)}


def _records(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]


def reference_losses(epochs: int, *, device: str) -> list[tuple[float, float]]:
    """Per-epoch ``(train, validation)`` mean losses of one process on ``device`` over the ranks' global batches."""
    config = SquaresConfig(model="selfattn-pe", epochs=epochs, n_train=N_TRAIN, batch_size=BATCH, device=device)
    model = build_model(config).to(device)  # the run's initial weights: torch.manual_seed(43), then the model
    optimizer = make_optimizer(model, config)
    train = SquareSequences(N_TRAIN, 13, inputs="full")
    test = SquareSequences(128, 19, inputs="source")
    sampler = DistributedSampler(train, num_replicas=1, rank=0, shuffle=True, seed=TRAIN_SEED)
    mse = nn.MSELoss()
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = count = 0.0
        for indices in BatchSampler(sampler, BATCH, drop_last=False):
            x, y = (t.to(device) for t in train[indices])
            optimizer.zero_grad()
            loss = mse(model(x), y)
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(indices), count + len(indices)
        model.eval()
        val_total = val_count = 0.0
        with torch.no_grad():
            for start in range(0, len(test), 16):
                x, y = (t.to(device) for t in test[list(range(start, min(start + 16, len(test))))])
                val_total, val_count = val_total + mse(model(x), y).item() * len(x), val_count + len(x)
        losses.append((total / count, val_total / val_count))
    return losses


def check_ddp(tmp_path, *, device: str, nproc: int) -> None:
    """``nproc`` ranks on ``device``, 2 epochs then resumed to 3, equal one process's 3 epochs to ``REL``."""
    work, one = tmp_path / "work", tmp_path / "one"
    work.mkdir()
    one.mkdir()
    args = [*ARGS, "--device", device]
    outputs = [_torchrun(work, tmp_path / "logs1", nproc, *args, "--epochs", "2", "--out", "run"),
               _torchrun(work, tmp_path / "logs2", nproc, *args, "--epochs", "3", "--out", "run", "--resume")]
    if nproc == 1:
        single = subprocess.run([sys.executable, "-m", "attnlab", "train", *args, "--epochs", "3", "--out", "run"],
                                cwd=one, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
        assert single.returncode == 0, single.stderr
        ref = [(r["loss"], r["val_loss"]) for r in _records(one / "run")]
    else:
        ref = reference_losses(3, device=device)

    folder = work / "run"
    got = _records(folder)
    assert [r["epoch"] for r in got] == [1, 2, 3]
    for g, (loss, val_loss) in zip(got, ref, strict=True):
        for key, r in (("loss", loss), ("val_loss", val_loss)):
            assert math.isfinite(g[key]) and abs(g[key] - r) <= REL * abs(r), (key, got, ref)
    assert ref[0][0] != ref[2][0]  # the epochs differ (an epoch-blind sampler would repeat them)

    # Only rank 0 wrote or printed anything, and no rank complained.
    assert sorted(p.name for p in work.iterdir()) == ["run"]
    assert sorted(p.name for p in folder.iterdir()) == RUN_FILES
    assert not [p for p in folder.rglob("*") if ".tmp" in p.name]
    assert torch.device(json.loads((folder / "config.json").read_text())["device"]).type == torch.device(device).type
    for ranks in outputs:
        assert "training selfattn-pe" in ranks[0]["stdout"] and "run folder: run" in ranks[0]["stdout"]
        assert all(ranks[rank]["stdout"] == "" for rank in range(1, nproc))
        assert all(ranks[rank]["stderr"] == "" for rank in range(nproc)), ranks  # no error, no warning

    # The checkpoint holds the plain model (no DDP prefix) and loads in this process.
    _, _, state = load_run(folder)
    assert state["epoch"] == 3 and not [k for k in state["model_state_dict"] if k.startswith("module.")]


@pytest.mark.cuda
@pytest.mark.process  # torchrun
@pytest.mark.training
@pytest.mark.parametrize("nproc", [
    pytest.param(1, id="1-rank"),
    pytest.param(2, id="2-ranks-nccl", marks=pytest.mark.skipif(
        GPUS < 2, reason=f"2 ranks with nccl need 2 CUDA GPUs, one per rank; this machine has {GPUS}")),
])
def test_torchrun_on_cuda_equals_one_process_and_resumes(tmp_path, nproc):
    check_ddp(tmp_path, device="cuda", nproc=nproc)
