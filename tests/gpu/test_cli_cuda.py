"""``attnlab train`` and ``attnlab compare`` with ``--device cuda``: complete folders, finite records, near the CPU's.

Tiny runs (2 epochs of 32 squares; one-layer models on 64 sequences), each checked as the CPU
suite checks its own (every file of the folder, the device recorded, every number finite), then
against its golden: the same command with ``--device cpu``, run beside it in the test. Both
compute in float32; they differ in the kernels' order of summation (and CUDA's atomic adds), a
relative 1e-7 per operation, which a few optimizer steps on these small models carry to about
1e-5 of a loss. ``REL`` allows 1e-3, still far below what a real difference does: a step not
taken, a batch seen twice, a wrong mask (each moves these losses by percents).

The checking functions take the device; ``python -m pytest tests/gpu`` runs them on the CUDA
GPU, and they were run with ``device="cpu"`` while writing them (no GPU there). On the CPU they
cost a few seconds per run (start-up, figures, report), too much for ``make test``'s budget.
"""

from __future__ import annotations

import json
import math

import pytest

from cli_helpers import cli

REL = 1e-3

TRAIN = ["--epochs", "2", "--n-train", "32", "--no-progress"]
TRAIN_MODELS = {
    "selfattn-pe": [],  # the positional-encoding lab's model, `make run`'s
    "transformer-alibi": ["--model", "transformer", "--encoding", "alibi"],  # a bias scheme (dense at this length)
}
TRAIN_FILES = [".lock", "attnlab-run.json", "checkpoint.pt", "config.json", "environment.json", "figures",
               "metrics.jsonl", "report.html", "summary.json"]

COMPARE = ["--encodings", "rotary,alibi,t5", "--seeds", "1", "--epochs", "1", "--n-train", "64", "--d-model", "16",
           "--n-heads", "2", "--n-layers", "1", "--no-progress"]
COMPARE_TASKS = {  # task flags, the files written
    "squares": (["--task", "squares", "--train-len", "3", "--test-lens", "3,5"],
                [".lock", "attnlab-run.json", "config.json", "environment.json", "models", "mse.png", "report.html",
                 "results.json"]),
    "reverse": (["--task", "reverse", "--train-len", "4", "--test-lens", "4,6"],
                [".lock", "accuracy.png", "attnlab-run.json", "config.json", "environment.json", "models",
                 "report.html", "results.json", "tokens.png"]),
}


def near(got: float, ref: float, what: str) -> None:
    assert math.isfinite(got) and abs(got - ref) <= REL * abs(ref), f"{what}: {got} against the CPU's {ref}"


def train_records(capsys, folder, *, device: str, flags: list[str]) -> list[dict]:
    """``attnlab train --device DEVICE FLAGS`` into ``folder``: the run's folder checked, its metrics returned."""
    code, out, err = cli(capsys, "train", *flags, *TRAIN, "--device", device, "--out", str(folder))
    assert code == 0 and err == "", err
    assert f"run folder: {folder}" in out
    assert sorted(p.name for p in folder.iterdir()) == TRAIN_FILES
    assert not [p for p in folder.rglob("*") if ".tmp" in p.name]
    figures = sorted(p.name for p in (folder / "figures").iterdir())
    assert {"losses.png", "predictions.png"} <= set(figures), figures
    assert all((folder / "figures" / name).stat().st_size > 5000 for name in figures)
    assert json.loads((folder / "config.json").read_text())["device"] == device
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["epochs"] == 2 and math.isfinite(summary["train_mse"]) and math.isfinite(summary["test_mse"])
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["val_loss"]) for r in records), records
    assert records[-1]["loss"] == summary["train_mse"]
    return records


def check_train(capsys, tmp_path, *, device: str, model: str) -> None:
    """A run on ``device`` near the same run on the CPU, then resumed on the CPU for one more epoch."""
    flags = TRAIN_MODELS[model]
    got = train_records(capsys, tmp_path / device, device=device, flags=flags)
    ref = train_records(capsys, tmp_path / "cpu-golden", device="cpu", flags=flags)
    for g, r in zip(got, ref, strict=True):
        near(g["loss"], r["loss"], f"epoch {g['epoch']} loss")
        near(g["val_loss"], r["val_loss"], f"epoch {g['epoch']} val_loss")
    # The checkpoint written on `device` (its optimizer state there) resumes on the CPU.
    folder = tmp_path / device
    code, _, err = cli(capsys, "train", "--out", str(folder), "--resume", "--epochs", "3", "--device", "cpu",
                       "--no-progress")
    assert code == 0, err
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3] and math.isfinite(records[-1]["loss"])
    assert json.loads((folder / "config.json").read_text())["device"] == "cpu"


def compare_records(capsys, folder, *, device: str, task: str, jobs: int) -> list[dict]:
    """``attnlab compare --device DEVICE`` on ``task`` into ``folder``: its folder checked, its records returned."""
    flags, files = COMPARE_TASKS[task]
    code, out, err = cli(capsys, "compare", *COMPARE, *flags, "--jobs", str(jobs), "--device", device,
                         "--out", str(folder))
    assert code == 0, err
    assert out.splitlines()[-1].startswith("3 models in "), out
    assert sorted(p.name for p in folder.iterdir()) == files
    assert sorted(p.name for p in (folder / "models").iterdir()) == ["alibi-seed0", "rotary-seed0", "t5-seed0"]
    doc = json.loads((folder / "results.json").read_text())
    assert doc["device"] == device
    lengths = [int(n) for n in flags[flags.index("--test-lens") + 1].split(",")]
    assert sorted((r["encoding"], r["length"]) for r in doc["records"]) == sorted(
        (e, n) for e in ("rotary", "alibi", "t5") for n in lengths)
    for r in doc["records"]:
        if task == "squares":
            assert math.isfinite(r["mean_squared_error"]) and r["mean_squared_error"] > 0, r
        else:
            assert 0.0 <= r["sequence_accuracy"] <= r["token_accuracy"] <= 1.0, r
    return sorted(doc["records"], key=lambda r: (r["encoding"], r["length"]))


def check_compare_squares(capsys, tmp_path, *, device: str) -> None:
    """The squares comparison on ``device`` in this process and in 2 workers: each near the CPU's MSE."""
    ref = compare_records(capsys, tmp_path / "cpu-golden", device="cpu", task="squares", jobs=1)
    for jobs in (1, 2):  # 2: spawned worker processes, each opening the device on its own
        got = compare_records(capsys, tmp_path / f"{device}-{jobs}", device=device, task="squares", jobs=jobs)
        for g, r in zip(got, ref, strict=True):
            near(g["mean_squared_error"], r["mean_squared_error"], f"{g['encoding']} at {g['length']}, jobs {jobs}")


@pytest.mark.cuda
@pytest.mark.training
@pytest.mark.parametrize("model", sorted(TRAIN_MODELS))
def test_train_on_cuda_writes_a_complete_run_near_the_cpus(capsys, tmp_path, model):
    check_train(capsys, tmp_path, device="cuda", model=model)


@pytest.mark.cuda
@pytest.mark.training
@pytest.mark.process  # compare's pool of workers, one per core
def test_compare_on_cuda_writes_complete_results_near_the_cpus(capsys, tmp_path):
    check_compare_squares(capsys, tmp_path, device="cuda")


@pytest.mark.cuda
@pytest.mark.training
@pytest.mark.process  # compare's pool of workers, one per core
def test_compare_on_cuda_scores_a_token_task(capsys, tmp_path):
    """Accuracies have no loose golden (one token flipped moves them by a step): checked for range only."""
    compare_records(capsys, tmp_path / "cuda", device="cuda", task="reverse", jobs=1)
