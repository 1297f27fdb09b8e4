"""The squares lab: train a model to complete noisy squares and leave a run folder worth opening.

``attnlab train`` (and ``make run``) call :func:`train_run`; ``attnlab predict`` and
the run figures of ``attnlab plot`` call :func:`load_run`. A run folder (the
contract of :mod:`attnlab.labs.run_folder`: locked while written, resumable after
any kill) holds::

    attnlab-run.json   the folder's kind ("train"), written first
    config.json        every setting of the run (what predict/plot rebuild the model from)
    metrics.jsonl      one line per epoch: epoch, loss, val_loss, lr, seconds, best
    checkpoint.pt      model, optimizer, losses and every random stream, after every epoch
    summary.json       final train and test MSE
    figures/           losses.png, predictions.png, attention-<layer>.png
    report.html        the figures and the metrics on one page

Models (:data:`attnlab.labs.squares.models.SQUARES_MODELS`): ``selfattn-pe`` (the
positional-encoding lab's self-attention encoder-decoder: 3 wide heads, d_model 2,
no residuals, no normalisation, the default), ``gru`` and ``gru-attn`` (the attention
lab's GRU encoder-decoders) and ``transformer`` (the fix: features projected up,
layer norm, residual connections, a small encoder-decoder Transformer). The data:
training squares from data seed 13, test squares from data seed 19 (the labs
evaluate on their training squares by mistake). Training runs through
:func:`attnlab.training.fit`, under the book's :class:`~attnlab.training.Trainer`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab._io import atomic_write, read_text
from attnlab.labs.report import Report, write_report
from attnlab.labs.run_folder import RunFolder, check_claim, claim
from attnlab.labs.squares.config import DEFAULT_WEIGHT_SEED, LAB_WEIGHT_SEEDS, UNSEEDED_LOADER_SEED, SquaresConfig
from attnlab.labs.squares.figures import SquaresTestSet, write_figures
from attnlab.training import Checkpoint, MetricsFile, Trainer
from attnlab.training.distributed import DistributedContext
from attnlab.training.rng import preserved_rng

__all__ = ["CHECKPOINT", "DEFAULT_WEIGHT_SEED", "LAB_WEIGHT_SEEDS", "UNSEEDED_LOADER_SEED", "RunResult",
           "SquaresConfig", "SquaresTestSet", "build_model", "check_train_folder", "load_run", "make_optimizer",
           "predict_corners", "resume_config", "test_squares", "train_run"]

CHECKPOINT = "checkpoint.pt"

@dataclass
class RunResult:
    """What a finished run reports: final losses and where its files are."""

    folder: Path
    train_mse: float  # last epoch's training loss
    test_mse: float  # MSE of the model's own predictions (eval mode) on the test squares
    epochs: int
    files: list[str]


def build_model(config: SquaresConfig) -> nn.Module:
    """The model ``config`` names, its initial weights drawn after ``torch.manual_seed(config.seed)``.

    The seeding happens on a copy of the random state: the caller's global
    streams (torch, CUDA, Python's ``random``) are as they were afterwards.
    """
    with preserved_rng({}):
        torch.manual_seed(config.seed)
        return config.build_model()


def make_optimizer(model: nn.Module, config: SquaresConfig) -> torch.optim.Optimizer:
    """Adam at ``config.lr``, fused: one kernel for every parameter instead of a Python loop over
    them, which at these models' sizes costs more than the forward pass. Same algorithm as the
    labs' ``optim.Adam``; results differ only in the last bits."""
    return torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)


def _data(config: SquaresConfig, shard: tuple[int, int] | None = None) -> Any:
    from attnlab.data import make_loaders

    # The loaders shuffle with their own generator (seeded with train_seed), which the
    # checkpoint saves, so a resumed run sees the same batches as an unbroken one.
    return make_loaders(n_train=config.n_train, n_test=config.n_test, batch_size=config.batch_size,
                        eval_batch_size=config.eval_batch_size, shuffle_seed=config.train_seed,
                        test_draws_global=config.test_draws_global, variable_len=config.variable_len,
                        shard=shard)


def _test_set(data: Any) -> SquaresTestSet:
    dataset = data.test.dataset
    return SquaresTestSet(dataset.source, dataset.target, dataset.directions, getattr(dataset, "source_mask", None))


def test_squares(config: SquaresConfig) -> SquaresTestSet:
    """The run's test squares (data seed 19): given corners, the corners to predict, directions (1 = clockwise),
    and for a ``variable_len`` run the mask of the given corners (see :class:`SquaresTestSet`)."""
    return _test_set(_data(config))


def _test_mse(model: nn.Module, squares: SquaresTestSet) -> float:
    """MSE of the model's own (free-running, eval-mode) predictions ``[N, 2, 2]``; restores the mode."""
    predicted = predict_corners(model, squares.source, source_mask=squares.source_mask)
    return float(torch.nn.functional.mse_loss(predicted, squares.target))


def _read_config(folder: Path, flag: str) -> SquaresConfig | None:
    """The run's ``config.json`` (None if the run was killed before writing it).

    Raises:
        ValueError: naming ``flag`` and the folder, if it is unreadable.
    """
    path = folder / "config.json"
    if not os.path.lexists(path):
        return None
    text = read_text(path, what="config.json")  # a FIFO or a device is refused unopened, bad UTF-8 named
    try:
        return SquaresConfig.from_dict(json.loads(text))
    except (ValueError, TypeError, AttributeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{flag} {str(folder)!r}: config.json is unreadable: {err}") from None


def resume_config(folder: str | os.PathLike[str], given: dict[str, Any]) -> SquaresConfig:
    """The config to resume the run in ``folder`` with: its saved settings, ``given`` ones on top.

    Only ``epochs`` (train until that many) and ``device`` (where this session trains)
    may differ from the saved settings.

    Args:
        folder: the run folder.
        given: settings given on the command line, ``{name: value}`` (None values ignored).

    Raises:
        ValueError: naming them, for given settings that differ from the saved run's,
            an unreadable ``config.json``, or a folder that holds no squares run.
    """
    given = {k: v for k, v in given.items() if v is not None}
    saved = _read_config(check_claim(folder, kind="train", resume=True), "--resume")
    if saved is None:  # killed before its config was written: the given settings are the run's
        return SquaresConfig(**given)
    config = dataclasses.replace(saved, **given)
    diff = {k: (v, getattr(config, k)) for k, v in saved.to_dict().items()
            if k not in ("epochs", "device") and getattr(config, k) != v}
    if diff:
        shown = ", ".join(f"{k}: saved {a!r}, given {b!r}" for k, (a, b) in diff.items())
        raise ValueError(f"--resume: the run in {str(folder)!r} was made with other settings ({shown})")
    return config


def check_train_folder(config: SquaresConfig, folder: str | os.PathLike[str], *, resume: bool = False) -> Path:
    """Check, writing nothing, that ``folder`` can take this run (see :mod:`attnlab.labs.run_folder`).

    Returns:
        The folder, resolved.

    Raises:
        ValueError: naming ``--out`` / ``--resume`` and the folder, for a folder the
            contract refuses, and (resume) a run of other settings.
    """
    path = check_claim(folder, kind="train", resume=resume)
    if resume:
        resume_config(path, config.to_dict())  # refuses other settings (but epochs), naming the differences
    return path


def _metric_lines(path: Path, epochs: int) -> list[str]:
    """The lines of ``metrics.jsonl`` for epochs 1 to ``epochs``, the ones the checkpoint knows of.

    A kill after the last checkpoint may have left later lines, and a kill while a
    line was written half a last line: both are dropped.

    Raises:
        ValueError: naming the file and the line, for any other line that is not a record.
    """
    lines = read_text(path, what="metrics.jsonl").splitlines() if os.path.lexists(path) else []
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            epoch = json.loads(line)["epoch"]
            if not isinstance(epoch, int):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            if number == len(lines):
                break  # half a line: the process died while writing it
            raise ValueError(f"--resume: {str(path)!r} line {number} is not an epoch record: {line[:60]!r}") from None
        if epoch <= epochs:
            kept.append(line)
    return kept


def train_run(
    config: SquaresConfig,
    folder: str | os.PathLike[str],
    *,
    resume: bool = False,
    progress: bool | None = None,
    announce: Callable[[], None] | None = None,
    distributed: DistributedContext | None = None,
) -> RunResult:
    """Train ``config``'s model and write (or, with ``resume``, continue) the run folder.

    Under torchrun (``distributed`` active) every rank calls this with the same
    config and folder: each trains its share of every batch (``config.batch_size``
    is the global batch), and only rank 0 checks, locks and writes the folder; the
    other ranks write nothing and only read the checkpoint to resume.

    The run seeds and draws from torch's and Python's global random streams (as
    the labs' code does), on a copy of them: the caller's streams are as they
    were afterwards. numpy's global stream is never used.

    Args:
        config: the run's settings.
        folder: the run folder: new, empty, or (``resume``) a squares run of the
            same settings but ``epochs`` (see :mod:`attnlab.labs.run_folder`).
        resume: continue from ``folder/checkpoint.pt`` until ``config.epochs`` in
            total; the losses continue exactly as if the run had never stopped. A
            run killed before its first checkpoint starts again from epoch 0.
        progress: show a progress bar (None: only on a terminal).
        announce: called once everything is checked (the folder, the checkpoint, the
            metrics), just before training; the command line says what it is doing there.
        distributed: this process's :class:`~attnlab.training.distributed.DistributedContext`
            under torchrun; None: one process on ``config.device``.

    Returns:
        A :class:`RunResult` (on ranks other than 0: the losses only, ``test_mse`` NaN, no files).

    Raises:
        ValueError: for a folder the contract refuses (naming it; another process
            writing it: naming its pid), a run of other settings, a checkpoint
            already past ``config.epochs``, or one that is unreadable or does not
            fit the model (naming the file and the mismatched keys); under torchrun,
            a ``config.batch_size`` the number of processes does not divide.
    """
    if distributed is None:
        distributed = DistributedContext(device=torch.device(str(config.device)))
    distributed.per_rank_batch(config.batch_size)  # refused before anything is written
    if not distributed.is_main:
        # Neither checked nor claimed here: probing the lock rank 0 holds would fail, and only rank 0 writes.
        with preserved_rng({}):
            return _train(config, RunFolder(Path(folder).expanduser().resolve(), "train", resume), progress=False,
                          announce=None, distributed=distributed)
    check_train_folder(config, folder, resume=resume)
    with preserved_rng({}), claim(folder, kind="train", resume=resume) as run:
        return _train(config, run, progress=progress, announce=announce, distributed=distributed)


def _train(config: SquaresConfig, run: RunFolder, *, progress: bool | None,
           announce: Callable[[], None] | None, distributed: DistributedContext) -> RunResult:
    """Train and (rank 0 only) write the folder; ``run`` is claimed on rank 0 and only read elsewhere."""
    folder = run.path
    main = distributed.is_main
    checkpoint, metrics = folder / CHECKPOINT, folder / "metrics.jsonl"
    data = _data(config, shard=distributed.shard)
    model = build_model(config)  # the same weights on every rank: seeded
    if distributed.active and config.model == "gru-attn":
        # The attention lab's attention never uses its linear_value: DDP must be told to expect unused parameters.
        distributed = dataclasses.replace(distributed, find_unused_parameters=True)
    trainer = Trainer(model, nn.MSELoss(), make_optimizer(model, config), progress=progress,
                      device=distributed.device, distributed=distributed if distributed.active else None)
    trainer.set_loaders(data.train, data.test)
    # Every rank reads the checkpoint: rank 0's random streams, which are every rank's (they draw alike).
    resumed = run.resumed and checkpoint.exists()
    if resumed:
        trainer.load_checkpoint(checkpoint)
        if trainer.total_epochs > config.epochs:
            raise ValueError(
                f"--epochs {config.epochs}: the run in {str(folder)!r} already has {trainer.total_epochs} epochs")
    if main:
        kept = _metric_lines(metrics, trainer.total_epochs) if resumed else []
        if announce is not None:
            announce()
        atomic_write(metrics, lambda tmp: tmp.write_text("".join(line + "\n" for line in kept)))
        run.write_json("config.json", config.to_dict())
        (folder / "figures").mkdir(exist_ok=True)

    remaining = config.epochs - trainer.total_epochs
    if remaining > 0:
        # The metrics line first, then the checkpoint: a kill between them leaves a line the
        # checkpoint does not know of, which the next resume drops.
        writers = [MetricsFile(metrics), Checkpoint(checkpoint, trainer.state_dict)] if main else []
        trainer.train(remaining, seed=None if resumed else config.train_seed, callbacks=writers)
    elif main:
        trainer.save_checkpoint(checkpoint)
    if not main:
        return RunResult(folder, trainer.losses[-1], float("nan"), trainer.total_epochs, [])

    squares = _test_set(data)
    test_mse = _test_mse(model, squares)
    figures = write_figures(model, trainer.losses, trainer.val_losses, squares, folder / "figures")
    summary = {"train_mse": trainer.losses[-1], "test_mse": test_mse, "epochs": trainer.total_epochs}
    run.write_json("summary.json", summary)
    _write_report(run, config, summary, figures, model=model, squares=squares)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    return RunResult(folder, trainer.losses[-1], test_mse, trainer.total_epochs, files)


def _write_report(run: RunFolder, config: SquaresConfig, summary: dict[str, Any], figures: list[Path], *,
                  model: nn.Module, squares: SquaresTestSet) -> None:
    """``report.html``: the numbers, the figures, an interactive view of every attention map, the settings."""
    from attnlab.labs.report import Html
    from attnlab.labs.squares.figures import attention_viewer_data
    from attnlab.labs.squares.viewer import render_viewer

    metrics = read_text(run.path / "metrics.jsonl", what="metrics.jsonl")
    rows = [json.loads(line) for line in metrics.splitlines() if line.strip()]
    predicted = ("the two corners that follow the 2 to 4 corners each square gives (padded and masked)"
                 if config.variable_len else "corners 3 and 4")
    paragraphs = [f"Test MSE: the model's own free-running predictions of {predicted} of {config.n_test} "
                  "test squares (data seed 19), which it never trained on."]
    viewer = attention_viewer_data(model, squares)
    if viewer.layers:
        sections = [Html(render_viewer(viewer))]
    else:
        sections = []
        paragraphs.append(f"The {config.model} model has no attention layer, so this report has no attention maps "
                          "and no attention viewer.")
    write_report(run.path / "report.html", Report(
        title=f"attnlab run: {config.model}",
        headline={"train MSE": summary["train_mse"], "test MSE": summary["test_mse"], "epochs": summary["epochs"]},
        paragraphs=paragraphs, figures=figures, sections=sections, settings=config.to_dict(),
        table_title="Losses per epoch", table_header=["epoch", "train", "validation"],
        table_rows=[[r["epoch"], r.get("loss"), r.get("val_loss")] for r in rows]))


def load_run(folder: str | os.PathLike[str]) -> tuple[SquaresConfig, nn.Module, dict[str, Any]]:
    """Rebuild a run's model from its folder: ``(config, model in eval mode, checkpoint dict)``.

    Raises:
        ValueError: if the folder, its config or its checkpoint is missing or
            unreadable (a FIFO, a device, a compressed or oversized archive...), or if
            the checkpoint does not fit the config's model and optimizer (naming the
            missing, unexpected and shape-mismatched keys, or the first entry of the
            wrong shape, dtype or type).
        FileNotFoundError: if the folder has a config but no checkpoint.
    """
    from attnlab.training.checkpoint import read_checkpoint
    from attnlab.training.checkpoint_checks import check_fits, max_checkpoint_bytes

    folder = Path(folder)
    config = _read_config(folder, "--run")
    if config is None:
        raise ValueError(f"--run {str(folder)!r} is not a run folder (no config.json)")
    path = folder / CHECKPOINT
    model = build_model(config)
    optimizer = make_optimizer(model, config)
    # Bounded by what this model can need, so a decompression bomb is refused before it is inflated; and
    # checked whole, as `train --resume` checks it, so a checkpoint from another model (another config,
    # a copied file) is named with the mismatched keys instead of torch's multi-line RuntimeError.
    state = read_checkpoint(path, max_bytes=max_checkpoint_bytes(model, optimizer))
    check_fits(state, model=model, optimizer=optimizer, scheduler=None, where=str(path),
               model_name=f"{config.model} model")
    model.load_state_dict(state["model_state_dict"])
    return config, model.eval(), state


def predict_corners(model: nn.Module, points: Tensor, *, source_mask: Tensor | None = None) -> Tensor:
    """The model's corners 3 and 4 for first corners ``points [B, 2, 2]``: ``[B, 2, 2]``.

    A model of a ``variable_len`` run takes 2 to 4 corners right-padded, ``points [B, 4, 2]``,
    with ``source_mask [B, 1, 4]`` (True on the given corners), and gives the two that follow.

    Safe from several threads at once on one model: the model is held in eval mode
    while any call needs it (every module's mode comes back after the last one),
    and attnlab's squares models predict without drawing a random number (the
    attention lab's GRU models through their ``predict``, which skips the
    teacher-forcing coin their ``forward`` draws even in eval mode), so the
    caller's random streams are left alone without being saved and restored.
    Another model is run inside :func:`attnlab.training.rng.preserved_rng`, which
    is not thread-safe.
    """
    from attnlab.labs.squares.inference import SQUARES_CLASSES, run_eval

    if isinstance(model, SQUARES_CLASSES):
        return run_eval(model, points, source_mask=source_mask)
    with preserved_rng({}):
        return run_eval(model, points, source_mask=source_mask)
