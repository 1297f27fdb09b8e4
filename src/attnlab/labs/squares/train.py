"""The squares lab: train a model to complete noisy squares and leave a run folder worth opening.

``attnlab train`` (and ``make run``) call :func:`train_run`; ``attnlab predict`` and
the run figures of ``attnlab plot`` call :func:`load_run`. A run folder (the
contract of :mod:`attnlab.labs.run_folder`: locked while written, resumable after
any kill) holds::

    attnlab-run.json   the folder's kind ("train"), written first
    config.json        every setting of the run (what predict/plot rebuild the model from)
    metrics.jsonl      one line per epoch: epoch, loss, val_loss, lr, seconds, best
    checkpoint.pt      model, optimizer, losses and every random stream, after every epoch
                       (flushed to the disk every 10 s and at the end: see CHECKPOINT_SYNC_SECONDS)
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
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from attnlab._io import atomic_write, read_json, read_text
from attnlab._limits import check_memory, count_parameters
from attnlab._validate import check_int
from attnlab.data.squares.square_prefixes import SquarePrefixes
from attnlab.labs.memory_bound import transformer_parameters
from attnlab.labs.report import Report, write_report
from attnlab.labs.run_folder import ENVIRONMENT, RunFolder, claim, environment, run_kind
from attnlab.labs.squares.config import DEFAULT_WEIGHT_SEED, LAB_WEIGHT_SEEDS, UNSEEDED_LOADER_SEED, SquaresConfig
from attnlab.labs.squares.figures import SquaresTestSet, write_run_figures
from attnlab.labs.squares.folder import CHECKPOINT, check_outputs, check_train_folder, read_config, resume_config
from attnlab.labs.squares.history import resumed_lines
from attnlab.labs.squares.models import SIZE_NAMES, squares_model
from attnlab.labs.squares.viewer import ViewerData
from attnlab.training import Checkpoint, MetricsFile, Trainer
from attnlab.training.batches import supervised, to_device
from attnlab.training.checkpoint import guard_optimizer
from attnlab.training.distributed import DistributedContext
from attnlab.training.nonfinite import check_initial_loss
from attnlab.training.rng import preserved_rng
from attnlab.training.threads import intra_op_threads, step_work, threads_for

__all__ = ["CHECKPOINT", "DEFAULT_WEIGHT_SEED", "LAB_WEIGHT_SEEDS", "UNSEEDED_LOADER_SEED", "RunResult",
           "SquaresConfig", "SquaresTestSet", "build_model", "check_model", "check_train_folder", "load_run",
           "make_optimizer", "predict_corners", "resume_config", "run_threads", "test_squares", "train_run"]

_RUN_FIGURES = ("attention", "predictions", "losses")
#: how often a run's per-epoch checkpoint is also flushed to the disk (and always at the end of training)
CHECKPOINT_SYNC_SECONDS = 10.0  # attnlab plot's figures of a run (they call load_run)

@dataclass
class RunResult:
    """What a finished run reports: final losses and where its files are."""

    folder: Path
    train_mse: float  # last epoch's training loss
    test_mse: float  # MSE of the model's own predictions (eval mode) on the test squares
    epochs: int
    files: list[str]


def _model(config: SquaresConfig) -> nn.Module:
    """The model ``config`` names, its weights drawn from torch's global generator."""
    return squares_model(config.model, d_model=config.d_model, n_heads=config.n_heads, n_layers=config.n_layers,
                         ff_units=config.ff_units, teacher_forcing_prob=config.teacher_forcing_prob,
                         input_len=SquarePrefixes.input_len if config.variable_len else 2,
                         encoding=config.encoding, backend=config.backend)


def check_model(config: SquaresConfig) -> None:
    """Refuse, before anything is written, the sizes the model refuses and a model too large for the memory.

    The model is built to count its parameters: for real when it is small, else on the meta
    device, which allocates nothing (:func:`attnlab._limits.count_parameters`); no random
    stream moves.

    Raises:
        ValueError: what the model's constructor raises for a size (naming it), or naming the
            sizes when its parameters, with their gradients and Adam's state, would not fit.
    """
    D, H, L = config.d_model or 2, config.n_heads or 1, config.n_layers or 1
    F = config.ff_units or 4 * D
    # Every model here has at most an encoder and a decoder layer per layer, each at most three
    # attentions of H heads up to D wide (the labs' wide heads) and a feed-forward network.
    bound = transformer_parameters(d_model=D, n_heads=H, head_dim=D, n_layers=L, ff_units=F) + 1024
    n_parameters = count_parameters(lambda: _model(config), bound=bound)
    sizes = ", ".join(f"{name} {getattr(config, name)}" for name in SIZE_NAMES if getattr(config, name) is not None)
    check_memory(f"{sizes}: the model's {n_parameters:,} parameters, with their gradients and Adam's state",
                 n_parameters * 4 * 4)


def build_model(config: SquaresConfig) -> nn.Module:
    """The model ``config`` names, its initial weights drawn after ``torch.manual_seed(config.seed)``.

    The seeding happens on a copy of the random state: the caller's global
    streams (torch, CUDA, Python's ``random``) are as they were afterwards.
    """
    with preserved_rng({}):
        torch.manual_seed(config.seed)
        return _model(config)


def make_optimizer(model: nn.Module, config: SquaresConfig) -> torch.optim.Optimizer:
    """Adam at ``config.lr``, fused: one kernel for every parameter instead of a Python loop over
    them, which at these models' sizes costs more than the forward pass. Same algorithm as the
    labs' ``optim.Adam``; results differ only in the last bits. Its ``load_state_dict`` checks a state
    against the parameters first (:func:`attnlab.training.checkpoint.guard_optimizer`): the fused kernel
    trusts each state's size."""
    return guard_optimizer(torch.optim.Adam(model.parameters(), lr=config.lr, fused=True))


def run_threads(config: SquaresConfig, model: nn.Module, *, squares: int | None = None,
                threads: int | None = None) -> int:
    """The intra-op threads ``config``'s model computes on: ``threads`` if given (``--threads``), else the rule
    of :mod:`attnlab.training.threads` for a step on ``squares`` squares (None: a training batch), each ``S + 2``
    points (``S`` = 2 given corners, 4 padded ones for ``variable_len``; 2 predicted).

    Raises:
        TypeError / ValueError: if ``threads`` or ``squares`` is given and not an int of at least 1.
    """
    if threads is not None:
        return check_int("threads", threads, minimum=1)
    squares = config.batch_size if squares is None else check_int("squares", squares, minimum=1)
    points = (4 if config.variable_len else 2) + 2
    return threads_for(work=step_work(model, tokens=squares * points))


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


def train_run(
    config: SquaresConfig,
    folder: str | os.PathLike[str],
    *,
    resume: bool = False,
    progress: bool | None = None,
    announce: Callable[[], None] | None = None,
    distributed: DistributedContext | None = None,
    note: Callable[[str], None] | None = None,
) -> RunResult:
    """Train ``config``'s model and write (or, with ``resume``, continue) the run folder.

    Under torchrun (``distributed`` active) every rank calls this with the same
    config and folder: each trains its share of every batch (``config.batch_size``
    is the global batch), and only rank 0 checks, locks and writes the folder; the
    other ranks write nothing and only read the checkpoint to resume.

    All or nothing: the data, the model and the trainer are built before the folder
    is made, and everything read from the folder (the checkpoint, ``metrics.jsonl``,
    the folders to write into) is checked before anything in it is written.

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
            Its ``metrics.jsonl`` must agree with the checkpoint (see
            :mod:`attnlab.labs.squares.history`); a missing one is rebuilt from it.
        progress: show a progress bar (None: only on a terminal).
        announce: called once everything is checked (the folder, the checkpoint, the
            metrics), just before training; the command line says what it is doing there.
        distributed: this process's :class:`~attnlab.training.distributed.DistributedContext`
            under torchrun; None: one process on ``config.device``.
        note: called with a message for the user (a history rebuilt); None: a ``RuntimeWarning``.

    Returns:
        A :class:`RunResult` (on ranks other than 0: the losses only, ``test_mse`` NaN, no files).

    Raises:
        ValueError: for a folder the contract refuses (naming it; another process
            writing it: naming its pid), a run of other settings, a checkpoint
            already past ``config.epochs``, or one that is unreadable (a link that
            leads nowhere included) or does not fit the model (naming the file and
            the mismatched keys), a history the checkpoint does not hold, a link or a
            file where the run writes its figures; under torchrun, a
            ``config.batch_size`` the number of processes does not divide.
    """
    if distributed is None:
        distributed = DistributedContext(device=torch.device(str(config.device)))
    distributed.per_rank_batch(config.batch_size)  # refused before anything is written
    if not distributed.is_main:
        # Neither checked nor claimed here: probing the lock rank 0 holds would fail, and only rank 0 writes.
        with preserved_rng({}):
            built = _build(config, progress=False, distributed=distributed)
            with intra_op_threads(run_threads(config, built.model, threads=config.threads)):
                return _train(config, RunFolder(Path(folder).expanduser().resolve(), "train", resume), built,
                              announce=None, note=None, distributed=distributed)
    check_train_folder(config, folder, resume=resume)
    with preserved_rng({}):
        # Whatever the settings alone can refuse (the loaders' seeds, the sizes) is refused before the folder is made.
        built = _build(config, progress=progress, distributed=distributed)
        threads = run_threads(config, built.model, threads=config.threads)
        with intra_op_threads(threads), claim(folder, kind="train", resume=resume) as run:
            return _train(config, run, built, announce=announce, note=note, distributed=distributed)


class _Built(NamedTuple):
    """What a run trains with: its loaders, model and trainer."""

    data: Any
    model: nn.Module
    trainer: Trainer


def _build(config: SquaresConfig, *, progress: bool | None, distributed: DistributedContext) -> _Built:
    """The run's data, model (the same weights on every rank: seeded) and trainer; nothing is written."""
    check_model(config)
    data = _data(config, shard=distributed.shard)
    model = build_model(config)
    if distributed.active and config.model == "gru-attn":
        # The attention lab's attention never uses its linear_value: DDP must be told to expect unused parameters.
        distributed = dataclasses.replace(distributed, find_unused_parameters=True)
    trainer = Trainer(model, nn.MSELoss(), make_optimizer(model, config), progress=progress,
                      device=distributed.device, distributed=distributed if distributed.active else None)
    trainer.set_loaders(data.train, data.test)
    check_first_step(config, model, data.train)
    return _Built(data, model, trainer)


#: squares of the one batch :func:`check_first_step` runs through the fresh model
PROBE_ROWS = 2


def check_first_step(config: SquaresConfig, model: nn.Module, loader: Any) -> None:
    """Run the training set's first squares through the freshly built ``model``, as its first step would.

    What only a forward pass shows is refused before the run folder is claimed: a loss that is
    NaN or inf with the initial weights, named by where it starts (:func:`check_initial_loss`),
    and a path the device cannot train on (``backend="flex"`` without a FlexAttention backward
    there). The rows are read from the dataset itself, not drawn from the loader (whose shuffling
    generator must not move), and the pass runs on a copy of the random state.

    Raises:
        ValueError: naming the encoding (or model) and what its first step raised or where its loss
            stops being finite.
    """
    dataset = loader.dataset
    indices = list(range(min(len(dataset), PROBE_ROWS)))
    # As the loader fetches: a batch of indices at once where its sampler yields batches, else row by row.
    rows = dataset[indices] if loader.batch_size is None else [dataset[i] for i in indices]
    device = next(model.parameters()).device
    batch = to_device(loader.collate_fn(rows), device)
    loss = supervised(nn.MSELoss())
    what = f"encoding {config.encoding or 'sinusoidal'!r}" if config.model == "transformer" else \
        f"model {config.model!r}"
    # Recording autograd is what surfaces a forced FlexAttention path the device has no backward for.
    check_initial_loss(model, lambda: loss(model, batch), what=what, record=config.backend == "flex")


def _train(config: SquaresConfig, run: RunFolder, built: _Built, *, announce: Callable[[], None] | None,
           note: Callable[[str], None] | None, distributed: DistributedContext) -> RunResult:
    """Train and (rank 0 only) write the folder; ``run`` is claimed on rank 0 and only read elsewhere."""
    folder = run.path
    main = distributed.is_main
    data, model, trainer = built
    checkpoint = folder / CHECKPOINT
    # Every rank reads the checkpoint: rank 0's random streams, which are every rank's (they draw alike).
    # Whatever stands at its name is one (a link that leads nowhere too): read, or refused, never taken
    # for the missing checkpoint of a run killed before its first.
    resumed = run.resumed and os.path.lexists(checkpoint)
    if resumed:
        trainer.load_checkpoint(checkpoint)
        if trainer.total_epochs > config.epochs:
            raise ValueError(
                f"--epochs {config.epochs}: the run in {str(folder)!r} already has {trainer.total_epochs} epochs")
    if main:
        kept, rebuilt = ([], None) if not run.resumed else resumed_lines(
            folder / "metrics.jsonl", trainer.history if resumed else None, lr=config.lr, checkpoint=CHECKPOINT)
        check_outputs(folder)
        # Everything is checked: from here on the folder is written.
        if rebuilt is not None:
            if note is None:
                warnings.warn(rebuilt, RuntimeWarning, stacklevel=3)
            else:
                note(rebuilt)
        if announce is not None:
            announce()
        metrics = atomic_write(run.file("metrics.jsonl"), lambda tmp: tmp.write_text("".join(f"{x}\n" for x in kept)))
        run.write_json("config.json", config.to_dict())
        run.write_json(ENVIRONMENT, environment(device=trainer.device, threads=torch.get_num_threads()))
        figures_folder = run.folder("figures")

    remaining = config.epochs - trainer.total_epochs
    if remaining > 0:
        # The metrics line first, then the checkpoint: a kill between them leaves a line the
        # checkpoint does not know of, which the next resume drops.
        # A checkpoint every epoch, flushed to the disk every 10 s and at the end: a killed process leaves its
        # last epoch's checkpoint whatever the flushing (it is renamed into place whole), which only a power
        # loss could take back; flushing each one was most of a small model's checkpoint (17% of a run).
        writers = [MetricsFile(metrics), Checkpoint(run.file(CHECKPOINT), trainer.state_dict,
                                                    sync_every=CHECKPOINT_SYNC_SECONDS)] if main else []
        trainer.train(remaining, seed=None if resumed else config.train_seed, callbacks=writers,
                      threads=torch.get_num_threads())  # the run's threads, chosen (and recorded) above
    elif main:
        trainer.save_checkpoint(run.file(CHECKPOINT))
    if not main:
        return RunResult(folder, trainer.losses[-1], float("nan"), trainer.total_epochs, [])

    squares = _test_set(data)
    test_mse = _test_mse(model, squares)
    figures = write_run_figures(model, trainer.losses, trainer.val_losses, squares, figures_folder)
    summary = {"train_mse": trainer.losses[-1], "test_mse": test_mse, "epochs": trainer.total_epochs}
    run.write_json("summary.json", summary)
    _write_report(run, config, summary, figures.paths, viewer=figures.viewer)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    return RunResult(folder, trainer.losses[-1], test_mse, trainer.total_epochs, files)


def _write_report(run: RunFolder, config: SquaresConfig, summary: dict[str, Any], figures: list[Path], *,
                  viewer: ViewerData) -> None:
    """``report.html``: the numbers, the figures, an interactive view of every attention map, the settings."""
    from attnlab.labs.report import Html
    from attnlab.labs.squares.viewer import render_viewer

    metrics = read_text(run.path / "metrics.jsonl", what="metrics.jsonl")
    rows = [json.loads(line) for line in metrics.splitlines() if line.strip()]
    predicted = ("the two corners that follow the 2 to 4 corners each square gives (padded and masked)"
                 if config.variable_len else "corners 3 and 4")
    paragraphs = [f"Test MSE: the model's own free-running predictions of {predicted} of {config.n_test} "
                  "test squares (data seed 19), which it never trained on."]
    if viewer.layers:
        sections = [Html(render_viewer(viewer))]
    else:
        sections = []
        paragraphs.append(f"The {config.model} model has no attention layer, so this report has no attention maps "
                          "and no attention viewer.")
    write_report(run.file("report.html"), Report(
        title=f"attnlab run: {config.model}",
        headline={"train MSE": summary["train_mse"], "test MSE": summary["test_mse"], "epochs": summary["epochs"]},
        paragraphs=paragraphs, figures=figures, sections=sections, settings=config.to_dict(),
        environment=read_json(run.path / ENVIRONMENT, what=ENVIRONMENT) if (run.path / ENVIRONMENT).is_file() else {},
        table_title="Losses per epoch", table_header=["epoch", "train", "validation"],
        table_rows=[[r["epoch"], r.get("loss"), r.get("val_loss")] for r in rows]))


def load_run(folder: str | os.PathLike[str]) -> tuple[SquaresConfig, nn.Module, dict[str, Any]]:
    """Rebuild a run's model from its folder: ``(config, model in eval mode, checkpoint dict)``.

    Raises:
        ValueError: if the folder holds another kind of run (a comparison); if the
            folder, its config or its checkpoint is missing or unreadable (a FIFO, a
            device, a link that leads nowhere, a compressed or oversized archive...); if
            the checkpoint does not fit the config's model and optimizer (naming the
            missing, unexpected and shape-mismatched keys, or the first entry of the
            wrong shape, dtype or type).
        FileNotFoundError: if the folder has a config but no checkpoint.
    """
    from attnlab.training.checkpoint import check_fits, max_checkpoint_bytes, read_checkpoint

    folder = Path(folder)
    kind = run_kind(folder) if folder.is_dir() else None
    if kind not in (None, "train"):  # its config.json is another kind of run's: say so, not which keys it lacks
        raise ValueError(f"--run {str(folder)!r} holds an attnlab {kind} run; predict and the run figures "
                         f"(plot {', '.join(_RUN_FIGURES)}) read a train run (attnlab train --out)")
    config = read_config(folder, "--run")
    if config is None:
        raise ValueError(f"--run {str(folder)!r} is not a run folder (no config.json)")
    path = folder / CHECKPOINT
    check_model(config)
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

    The inputs may sit on another device than the model (a run trained with ``--device cuda``
    scored on CPU test squares): they are moved to the model's, and the corners come back on
    ``points``' device.
    """
    from attnlab.labs.squares.inference import SQUARES_CLASSES, run_eval

    weights = next(model.parameters(), None)
    device = points.device if weights is None else weights.device
    inputs = points.to(device)
    mask = None if source_mask is None else source_mask.to(device)
    if isinstance(model, SQUARES_CLASSES):
        return run_eval(model, inputs, source_mask=mask).to(points.device)
    with preserved_rng({}):
        return run_eval(model, inputs, source_mask=mask).to(points.device)
