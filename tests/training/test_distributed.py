"""Data-parallel training under torchrun: real processes (gloo on CPU), compared with one process.

Two torchrun runs of ``attnlab train`` (2 processes, the selfattn-pe model, 64 squares,
global batch 16): 2 epochs, then ``--resume`` to 4. The reference is a plain training
loop written here (no attnlab training code), in this process, over the same global
batches: a ``DistributedSampler`` with one replica and the same seed, whose permutation
the two ranks split ``rank::2``. selfattn-pe draws no random number in training (no
dropout, no teacher forcing), so the only randomness is the shuffle and the initial
weights; the DDP run must match the reference epoch by epoch. (The GRU models match
too: their teacher-forcing coin is one draw per decoding step from torch's global
generator, which every rank seeds alike, so every rank flips the one process's coins;
they are left out here to keep the test short.)
"""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import BatchSampler, DistributedSampler

from attnlab.data import make_loaders
from attnlab.data.squares.loaders import SquareSequences
from attnlab.labs.squares.train import SquaresConfig, build_model, load_run, make_optimizer
from attnlab.training import Loop, supervised
from attnlab.training.distributed import DistributedContext, set_sampler_epoch

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                       reason="this torch build has no gloo backend for CPU data-parallel training"),
]

N_TRAIN, BATCH, TRAIN_SEED = 64, 16, 42
ARGS = ["--model", "selfattn-pe", "--n-train", str(N_TRAIN), "--batch-size", str(BATCH), "--no-progress"]


def _torchrun(cwd, logs, *argv):
    """``torchrun --nproc_per_node 2 -m attnlab train ARGV`` in ``cwd``; each rank's stdout/stderr under ``logs``."""
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", TMPDIR=str(cwd.parent / "tmp"))
    # --standalone: torchrun finds a free port itself (a port chosen here could be taken before it binds it)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "--log-dir", str(logs), "--redirects", "3",
           "-m", "attnlab", "train", *argv]
    # The timeout only bounds a hang: two ranks training on a loaded machine may take minutes.
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {rank: {name: next(logs.rglob(f"attempt_0/{rank}/{name}.log")).read_text()
                   for name in ("stdout", "stderr")} for rank in (0, 1)}


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """The run folder after 2 epochs and after ``--resume`` to 4, with each torchrun's per-rank output."""
    base = tmp_path_factory.mktemp("ddp")
    work, tmp = base / "work", base / "tmp"
    work.mkdir()
    tmp.mkdir()
    first = _torchrun(work, base / "logs1", *ARGS, "--epochs", "2", "--out", "run")
    after_two = (work / "run" / "metrics.jsonl").read_text()
    second = _torchrun(work, base / "logs2", *ARGS, "--epochs", "4", "--out", "run", "--resume")
    return {"work": work, "folder": work / "run", "after_two": after_two, "outputs": [first, second]}


def _records(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _reference(epochs):
    """Per-epoch ``(train, validation)`` mean losses of one process over the same global batches."""
    config = SquaresConfig(model="selfattn-pe", epochs=epochs, n_train=N_TRAIN, batch_size=BATCH, device="cpu")
    model = build_model(config)  # the run's initial weights: torch.manual_seed(43), then the model
    optimizer = make_optimizer(model, config)
    train = SquareSequences(N_TRAIN, 13, inputs="full")
    test = SquareSequences(128, 19, inputs="source")
    sampler = DistributedSampler(train, num_replicas=1, rank=0, shuffle=True, seed=TRAIN_SEED)
    mse = nn.MSELoss()
    losses, val_losses = [], []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = count = 0.0
        for indices in BatchSampler(sampler, BATCH, drop_last=False):
            x, y = train[indices]
            optimizer.zero_grad()
            loss = mse(model(x), y)
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(indices), count + len(indices)
        losses.append(total / count)
        model.eval()
        total = count = 0.0
        with torch.no_grad():
            for start in range(0, len(test), 16):
                x, y = test[list(range(start, min(start + 16, len(test))))]
                total, count = total + mse(model(x), y).item() * len(x), count + len(x)
        val_losses.append(total / count)
    return losses, val_losses


def test_a_torchrun_run_equals_one_process_resumes_writes_once_and_loads_alone(ddp_run):
    """One test for the one DDP run: under xdist's work stealing, tests sharing a module fixture
    can land on both workers, and each worker would then pay for the two torchrun launches."""
    _losses_equal_one_process_and_resume_continues(ddp_run)
    _only_rank_zero_wrote_anything(ddp_run)
    _the_ddp_checkpoint_loads_in_one_process(ddp_run)


def _losses_equal_one_process_and_resume_continues(ddp_run):
    losses, val_losses = _reference(4)
    first = _records(ddp_run["after_two"])
    records = _records((ddp_run["folder"] / "metrics.jsonl").read_text())
    assert [r["epoch"] for r in first] == [1, 2] and [r["epoch"] for r in records] == [1, 2, 3, 4]
    # 2 epochs, then resumed to 4 under torchrun: the 4 epochs one process trains straight.
    for got in (first, records):
        n = len(got)
        diff = max(abs(r["loss"] - ref) for r, ref in zip(got, losses[:n], strict=True))
        val_diff = max(abs(r["val_loss"] - ref) for r, ref in zip(got, val_losses[:n], strict=True))
        print(f"{n} epochs: max |DDP - one process| train {diff:.2e}, validation {val_diff:.2e}")
        assert diff < 1e-6 and val_diff < 1e-6, (diff, val_diff, got, losses)
    assert losses[0] != losses[2]  # the epochs shuffle differently (an epoch-blind sampler would repeat them)


def _only_rank_zero_wrote_anything(ddp_run):
    folder, work = ddp_run["folder"], ddp_run["work"]
    assert sorted(p.name for p in work.iterdir()) == ["run"]  # nothing else created where the ranks ran
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "attnlab-run.json", "checkpoint.pt", "config.json",
                                                        "environment.json", "figures", "metrics.jsonl", "report.html",
                                                        "summary.json"]
    assert not [p for p in folder.rglob("*") if ".tmp" in p.name]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["epochs"] == 4
    assert json.loads((folder / "config.json").read_text())["device"] == "cpu"
    for outputs in ddp_run["outputs"]:
        assert outputs[1]["stdout"] == ""  # rank 1 printed nothing
        assert "training selfattn-pe" in outputs[0]["stdout"] and "run folder: run" in outputs[0]["stdout"]
        assert outputs[0]["stderr"] == outputs[1]["stderr"] == ""  # no error, no warning (DDP's included)


def _the_ddp_checkpoint_loads_in_one_process(ddp_run):
    config, model, state = load_run(ddp_run["folder"])
    assert not [k for k in state["model_state_dict"] if k.startswith("module.")]
    assert state["epoch"] == 4 and config.batch_size == BATCH and not model.training


def test_the_ranks_batches_together_are_one_processs_batches():
    single = DistributedSampler(range(N_TRAIN), num_replicas=1, rank=0, shuffle=True, seed=TRAIN_SEED)
    ranks = [make_loaders(n_train=N_TRAIN, batch_size=BATCH, shuffle_seed=TRAIN_SEED, shard=(r, 2)).train
             for r in (0, 1)]
    full = ranks[0].dataset.full
    for epoch in (0, 1):
        single.set_epoch(epoch)
        for loader in ranks:
            set_sampler_epoch(loader, epoch)
        expected = list(BatchSampler(single, BATCH, drop_last=False))
        assert len(expected) == N_TRAIN // BATCH
        for (a, _), (b, _), indices in zip(ranks[0], ranks[1], expected, strict=True):
            assert a.shape[0] == b.shape[0] == BATCH // 2
            # Rank r holds positions r::2 of the one-process batch: interleaved, they are that batch.
            union = torch.stack([a, b], dim=1).flatten(0, 1)  # [B, 4, 2]
            assert torch.equal(union, full[indices])


@pytest.mark.bad_input("numbers")
def test_a_global_batch_the_ranks_cannot_share_is_refused():
    with pytest.raises(ValueError, match="batch_size 15 is not divisible by the 2 processes"):
        make_loaders(n_train=N_TRAIN, batch_size=15, shard=(0, 2))
    with pytest.raises(ValueError, match="batch_size 15 is not divisible by the 2 processes"):
        DistributedContext(rank=1, world_size=2).per_rank_batch(15)
    with pytest.raises(ValueError, match="shard rank must be at most 1"):
        make_loaders(n_train=N_TRAIN, batch_size=16, shard=(2, 2))


@pytest.mark.bad_input("config files")
@pytest.mark.parametrize(("environ", "device", "message"), [
    ({"WORLD_SIZE": "2"}, "cpu", "RANK is not set: start data-parallel training with torchrun"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "x"}, "cpu", "LOCAL_RANK must be a whole number, got 'x'"),
    ({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0"}, "cpu", r"RANK \(2\) must be below WORLD_SIZE \(2\)"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, "cpu", "MASTER_ADDR is not set"),
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "mps",
     "data-parallel training runs on cpu .gloo. or cuda .nccl., not mps"),
])
def test_a_broken_torchrun_environment_is_named(environ, device, message):
    with pytest.raises(ValueError, match=message):
        DistributedContext.from_env(device=device, environ=environ)


def test_without_torchrun_nothing_is_set_up():
    for environ in ({}, {"WORLD_SIZE": "1", "RANK": "0"}):
        context = DistributedContext.from_env(device="cpu", environ=environ)
        assert (context.active, context.is_main, context.shard, context.world_size) == (False, True, None, 1)
    model = nn.Linear(2, 1)
    values = torch.tensor([1.0, 2.0])
    assert context.wrap(model) is model and context.all_reduce_sum(values) is values
    assert context.broadcast_object({"a": 1}) == {"a": 1} and not dist.is_initialized()


def test_the_loop_refuses_an_unwrapped_model_with_several_processes():
    model = nn.Linear(2, 1)
    loader = [(torch.zeros(4, 2), torch.zeros(4, 1))]
    with pytest.raises(ValueError, match="model: with 2 processes the model must be wrapped by distributed.wrap"):
        Loop(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, loss=supervised(nn.MSELoss()),
             distributed=DistributedContext(rank=0, world_size=2))
    with pytest.raises(TypeError, match="distributed must be a DistributedContext"):
        Loop(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, loss=supervised(nn.MSELoss()),
             distributed="gloo")
