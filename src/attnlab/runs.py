"""The main job: train a seed model on noisy squares and leave a run folder worth opening.

``attnlab train`` (and ``make run``) call :func:`train_run`. A run folder holds::

    config.json        every setting of the run (what `attnlab predict/plot` rebuild from)
    metrics.jsonl      one line per epoch: epoch, loss, val_loss, lr, seconds
    checkpoint.pt      model, optimizer, losses and RNG state (resumable exactly)
    figures/           losses.png, predictions.png, attention-<layer>.png
    report.html        the figures and the metrics on one page (images embedded)

Models (``MODELS``): ``selfattn-pe`` (seed 000: EncoderPe + DecoderPe, 3 wide
heads, d_model 2, ff_units 10), ``gru`` (seed 003's plain GRU encoder-decoder) and
``gru-attn`` (seed 003's GRU with attention). The data are the seeds' noisy
squares: training squares from seed 13, test squares from seed 19 (the seeds
evaluate on their training squares by mistake). Like every application module
(the CLI), this one may import everything; the library's layers never import it.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab._io import atomic_write, check_folder
from attnlab._validate import check_choice, check_finite_float, check_int
from attnlab.training.rng import preserved_rng

__all__ = [
    "MODELS",
    "RunConfig",
    "RunResult",
    "attention_figures",
    "build_model",
    "check_run_folder",
    "load_run",
    "predict_corners",
    "test_squares",
    "train_run",
]

MODELS = ("selfattn-pe", "gru", "gru-attn")
CHECKPOINT = "checkpoint.pt"
SEEDS_LOADER_SEED = 67280421310721  # torch.Generator().initial_seed(): the seeds' unseeded loader


@dataclass(frozen=True)
class RunConfig:
    """Every setting of a run; written to ``config.json``.

    Defaults are seed 000's configuration: Adam with lr 0.01, 100 epochs,
    batch 16, model initialised after ``torch.manual_seed(43)``, 128 squares.

    Raises:
        TypeError / ValueError: naming the setting, for an unknown model, a count
            or size below 1, a non-positive ``lr`` or a ``teacher_forcing_prob``
            outside [0, 1].
    """

    model: str = "selfattn-pe"  # one of MODELS
    epochs: int = 100  # total epochs (with --resume: train until this many)
    seed: int = 43  # torch.manual_seed before the model is built (its initial weights)
    # Seeds the shuffling, teacher forcing and dropout. The default is the seed of an
    # unseeded torch.Generator(), which is what the seeds' DataLoader shuffles with: the
    # run the seeds' code reports (test MSE 0.017) is this one. This tiny model (d_model 2,
    # no residuals, no norm) is very sensitive to it: see the closing notes / README.
    train_seed: int = SEEDS_LOADER_SEED
    lr: float = 0.01  # Adam learning rate
    batch_size: int = 16
    # Validation batches: the seeds use 16, but evaluation builds no graph, so one batch
    # of the whole (default) test set gives the same batch-weighted loss in an eighth
    # of the calls. Training batches, and so the training itself, are unchanged.
    eval_batch_size: int = 128
    n_train: int = 128  # training squares, generated with data seed 13
    n_test: int = 128  # test squares, generated with data seed 19
    teacher_forcing_prob: float = 0.5  # GRU models only (seed 003)

    def __post_init__(self) -> None:
        check_choice("model", self.model, MODELS)
        check_int("epochs", self.epochs, minimum=1)
        check_int("seed", self.seed)
        check_int("train_seed", self.train_seed)
        check_finite_float("lr", self.lr, positive=True)
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("eval_batch_size", self.eval_batch_size, minimum=1)
        check_int("n_train", self.n_train, minimum=1)
        check_int("n_test", self.n_test, minimum=1)
        p = check_finite_float("teacher_forcing_prob", self.teacher_forcing_prob)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"teacher_forcing_prob must be in [0, 1], got {p}")

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict, as ``config.json`` holds them."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """The config a :meth:`to_dict` dict (e.g. a run's ``config.json``) describes.

        Raises:
            ValueError: naming them, for keys that are not settings; and what the
                class raises for a bad value.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"config has unknown keys {sorted(unknown)}")
        return cls(**d)


@dataclass
class RunResult:
    """What a finished run reports: final losses and where its files are."""

    folder: Path
    train_mse: float  # last epoch's training loss
    test_mse: float  # MSE of the model's own predictions (eval mode) on the test squares
    epochs: int
    files: list[str]


def build_model(config: RunConfig) -> nn.Module:
    """The model a config names, with its initial weights drawn after ``torch.manual_seed(config.seed)``.

    The seeding happens on a copy of the random state: the caller's global
    streams (torch, CUDA, Python's ``random``) are as they were afterwards.
    """
    from attnlab.models import (
        Decoder,
        DecoderAttn,
        DecoderPe,
        Encoder,
        EncoderDecoder,
        EncoderDecoderAttn,
        EncoderDecoderSelfAttn,
        EncoderPe,
    )

    with preserved_rng({}):
        torch.manual_seed(config.seed)
        if config.model == "selfattn-pe":
            encoder = EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
            decoder = DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
            return EncoderDecoderSelfAttn(encoder, decoder, input_len=2, target_len=2)
        if config.model == "gru":
            return EncoderDecoder(Encoder(2, 2), Decoder(2, 2), input_len=2, target_len=2,
                                  teacher_forcing_prob=config.teacher_forcing_prob)
        return EncoderDecoderAttn(Encoder(2, 2), DecoderAttn(2, 2), input_len=2, target_len=2,
                                  teacher_forcing_prob=config.teacher_forcing_prob)


def make_optimizer(model: nn.Module, config: RunConfig) -> torch.optim.Optimizer:
    """Adam at ``config.lr``, fused: one kernel for every parameter instead of a Python loop
    over them, which at this model's size costs more than its forward pass. Same algorithm
    as the seeds' ``optim.Adam``; results differ only in the last bits."""
    return torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)


def _data(config: RunConfig) -> Any:
    from attnlab.data import make_loaders

    # The loaders shuffle with their own generator (seeded with train_seed), which the
    # checkpoint saves, so a resumed run sees the same batches as an unbroken one.
    return make_loaders(n_train=config.n_train, n_test=config.n_test, batch_size=config.batch_size,
                        eval_batch_size=config.eval_batch_size, shuffle_seed=config.train_seed)


def _test_set(data: Any) -> tuple[Tensor, Any]:
    return data.full_test, data.test_directions


def _test_mse(model: nn.Module, source: Tensor, target: Tensor) -> float:
    """MSE of the model's own (free-running, eval-mode) predictions; restores the mode."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            pred = model(source)  # [N, T, F]
        return float(torch.nn.functional.mse_loss(pred, target))
    finally:
        model.train(was_training)


def _write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=2) + "\n"))


def train_run(
    config: RunConfig,
    folder: str | os.PathLike[str],
    *,
    resume: bool = False,
    progress: bool | None = None,
) -> RunResult:
    """Train ``config``'s model and write (or, with ``resume``, continue) the run folder.

    The run seeds and draws from torch's and Python's global random streams (as
    the seeds' code does), on a copy of them: the caller's streams are as they
    were afterwards, so the run's results do not depend on what ran before it,
    nor does what runs after depend on the run. numpy's global stream is never used.

    Args:
        config: the run's settings.
        folder: the run folder. Without ``resume`` it must not already hold a run
            (nothing is overwritten); with ``resume`` it must, and its config must
            match ``config`` except for ``epochs``.
        resume: continue from ``folder/checkpoint.pt`` until ``config.epochs`` in
            total; the losses continue exactly as if the run had never stopped.
        progress: show a progress bar (None: only on a terminal).

    Returns:
        A :class:`RunResult`.

    Raises:
        ValueError: for a folder that already holds a run (without ``resume``), one
            that holds none or another configuration (with ``resume``), a
            checkpoint already past ``config.epochs``, or one that is unreadable or
            does not fit the model (naming the file, and the mismatched keys).
    """
    with preserved_rng({}):
        return _train_run(config, Path(folder), resume=resume, progress=progress)


def _read_config(folder: Path, flag: str) -> RunConfig:
    """The run's ``config.json``; ValueError naming ``flag`` and the folder if it is missing or unreadable."""
    path = folder / "config.json"
    if not path.is_file():
        raise ValueError(f"{flag} {str(folder)!r} is not a run folder (no config.json)")
    try:
        return RunConfig.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, AttributeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{flag} {str(folder)!r}: config.json is unreadable: {err}") from None


def _metric_lines(path: Path, epochs: int) -> list[str]:
    """The lines of ``metrics.jsonl`` for epochs 1 to ``epochs``, the ones a checkpoint knows of.

    A crash after the last checkpoint may have left later lines, and a crash while
    a line was written half a last line: both are dropped.

    Raises:
        ValueError: naming the file and the line, for any other line that is not a record.
    """
    lines = path.read_text().splitlines() if path.exists() else []
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


def check_run_folder(config: RunConfig, folder: str | os.PathLike[str], *, resume: bool = False) -> Path:
    """Check, before anything is trained or printed, that ``folder`` can take this run.

    A new run needs a folder that is empty or can be created (missing parents
    are created too); ``resume`` needs a run of the same settings with a checkpoint.
    Creates nothing.

    Returns:
        ``folder`` as a Path.

    Raises:
        ValueError: naming ``--out`` / ``--resume`` and the folder, if it is a
            file, cannot be written, already holds files (new run), or holds no
            checkpoint or a run of other settings (resume).
    """
    path = check_folder(folder, name="--out", parents=True)
    if resume:
        if not (path / CHECKPOINT).exists():
            raise ValueError(f"--resume: {str(path)!r} holds no checkpoint ({CHECKPOINT}) to resume from")
        saved = _read_config(path, "--resume")
        if dataclasses.replace(saved, epochs=config.epochs) != config:
            diff = {k: (v, getattr(config, k)) for k, v in saved.to_dict().items()
                    if k != "epochs" and getattr(config, k) != v}
            raise ValueError(f"--resume: the run in {str(path)!r} was made with other settings: {diff}")
    elif path.exists() and any(path.iterdir()):
        raise ValueError(f"--out {str(path)!r} already holds files; choose another folder or --resume")
    return path


def _train_run(config: RunConfig, folder: Path, *, resume: bool, progress: bool | None) -> RunResult:
    from attnlab.training import Trainer

    checkpoint = folder / CHECKPOINT
    check_run_folder(config, folder, resume=resume)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "figures").mkdir(exist_ok=True)

    data = _data(config)
    train_loader, test_loader = data.train, data.test
    model = build_model(config)
    optimizer = make_optimizer(model, config)
    trainer = Trainer(model, nn.MSELoss(), optimizer, progress=progress)
    trainer.set_loaders(train_loader, test_loader)
    metrics_path = folder / "metrics.jsonl"
    if resume:
        trainer.load_checkpoint(checkpoint)
        if trainer.total_epochs > config.epochs:
            raise ValueError(
                f"--epochs {config.epochs}: the run in {str(folder)!r} already has {trainer.total_epochs} epochs"
            )
        kept = _metric_lines(metrics_path, trainer.total_epochs)
        atomic_write(metrics_path, lambda tmp: tmp.write_text("".join(ln + "\n" for ln in kept)))
    else:
        _write_json(folder / "config.json", config.to_dict())
        metrics_path.write_text("")

    def log_epoch(_: Any, record: dict[str, Any]) -> None:
        with metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        # A checkpoint at every epoch's end (atomic, a few ms here): a run that is killed,
        # interrupted or diverges later can be resumed from its last whole epoch.
        trainer.save_checkpoint(checkpoint)

    remaining = config.epochs - trainer.total_epochs
    if remaining > 0:
        trainer.train(remaining, seed=None if resume else config.train_seed, on_epoch_end=log_epoch)
    else:
        trainer.save_checkpoint(checkpoint)

    full_test, test_directions = _test_set(data)
    source, target = full_test[:, :2], full_test[:, 2:]
    test_mse = _test_mse(model, source, target)
    figures = write_figures(model, trainer.losses, trainer.val_losses, full_test, test_directions,
                            folder / "figures")
    summary = {"train_mse": trainer.losses[-1], "test_mse": test_mse, "epochs": trainer.total_epochs}
    _write_json(folder / "summary.json", summary)
    write_report(folder, config, summary, figures)
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return RunResult(folder, trainer.losses[-1], test_mse, trainer.total_epochs, files)


def test_squares(config: RunConfig) -> tuple[Tensor, Any]:
    """The run's test squares ``[N, 4, 2]`` (data seed 19) and their directions ``[N]`` (1 = clockwise)."""
    return _test_set(_data(config))


def attention_figures(model: nn.Module, full_test: Tensor, directions: Any, n: int = 2) -> dict[str, Any]:
    """One figure per attention layer of ``model``, on the first ``n`` test squares: ``{layer: Figure}``.

    ``full_test`` is the test squares ``[B, 4, 2]``, ``directions`` their ``[B]`` directions.

    The caller's random streams are left as they were (seed 003's GRU models draw
    their teacher-forcing coin even in eval mode).
    """
    with preserved_rng({}):
        return _attention_figures(model, full_test, directions, n)


def _attention_figures(model: nn.Module, full_test: Tensor, directions: Any, n: int) -> dict[str, Any]:
    from attnlab.attention import collect_attention, record_attention
    from attnlab.plotting import plot_attention

    inputs = full_test[:n, :2]  # [n, 2, 2]: the first two corners
    labels = [f"{'Clockwise' if int(d) else 'Counter-Clockwise'}\nPoint #1: {p[0, 0]:.2f}, {p[0, 1]:.2f}"
              for d, p in zip(directions[:n], inputs, strict=True)]
    was_training = model.training
    model.eval()
    with torch.no_grad(), record_attention():
        model(inputs)
    model.train(was_training)
    figures = {}
    for name in collect_attention(model):
        fig = plot_attention(model, inputs, labels, ["Point #1", "Point #2"], ["Point #3", "Point #4"],
                             decoder=name.startswith("decoder"), self_attn="self_attn" in name, layer=name)
        fig.suptitle(_layer_title(name))
        figures[name] = fig
    return figures


def write_figures(
    model: nn.Module,
    losses: list[float],
    val_losses: list[float | None],
    full_test: Tensor,
    directions: Any,
    out: Path,
) -> list[Path]:
    """Losses, predictions on test squares, and one figure per attention layer; returns the paths.

    The caller's random streams are left as they were.
    """
    with preserved_rng({}):
        return _write_figures(model, losses, val_losses, full_test, directions, out)


def _write_figures(model: nn.Module, losses: list[float], val_losses: list[float | None], full_test: Tensor,
                   directions: Any, out: Path) -> list[Path]:
    from attnlab.plotting import plot_losses, sequence_pred

    written = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, bbox_inches="tight"))
        written.append(path)

    save(plot_losses(losses, val_losses), "losses.png")
    save(sequence_pred(model, full_test, directions), "predictions.png")
    for name, fig in attention_figures(model, full_test, directions).items():
        save(fig, f"attention-{name.replace('.', '-')}.png")
    return written


def _layer_title(name: str) -> str:
    if "cross" in name or name == "decoder.attn":
        return "Cross-Attention"
    if name.startswith("encoder"):
        return "Encoder Self-Attention"
    return "Decoder Self-Attention"


def write_report(folder: Path, config: RunConfig, summary: dict[str, Any], figures: list[Path]) -> Path:
    """A self-contained report.html: settings, final metrics, per-epoch table, every figure inline."""
    rows = [json.loads(ln) for ln in (folder / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    esc = html.escape

    def img(path: Path) -> str:
        data = base64.b64encode(path.read_bytes()).decode()
        return (f'<figure><img alt="{esc(path.stem)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(path.stem)}</figcaption></figure>")

    def fmt(v: Any) -> str:
        return "" if v is None else (f"{v:.5f}" if isinstance(v, float) else esc(str(v)))

    settings = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in config.to_dict().items())
    table = "".join(
        f"<tr><td>{r['epoch']}</td><td>{fmt(r.get('loss'))}</td><td>{fmt(r.get('val_loss'))}</td></tr>"
        for r in rows
    )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>attnlab run: {esc(config.model)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ padding: .2em .8em; border-bottom: 1px solid #ddd; }}
th {{ text-align: left; }} figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; }}
.metric {{ font-size: 1.4em; margin-right: 2em; }} details {{ margin: 1em 0; }}
</style></head><body>
<h1>attnlab run: {esc(config.model)}</h1>
<p><span class="metric">train MSE <b>{summary['train_mse']:.4f}</b></span>
<span class="metric">test MSE <b>{summary['test_mse']:.4f}</b></span>
<span class="metric">epochs <b>{summary['epochs']}</b></span></p>
<p>Test MSE: the model's own free-running predictions of corners 3 and 4 of {config.n_test} test
squares (data seed 19), which it never trained on.</p>
{''.join(img(p) for p in figures)}
<h2>Settings</h2><table>{settings}</table>
<details><summary>Losses per epoch</summary><table><tr><th>epoch</th><th>train</th><th>validation</th></tr>
{table}</table></details>
</body></html>
"""
    path = folder / "report.html"
    atomic_write(path, lambda tmp: tmp.write_text(page))
    return path


def load_run(folder: str | os.PathLike[str]) -> tuple[RunConfig, nn.Module, dict[str, Any]]:
    """Rebuild a run's model from its folder: ``(config, model in eval mode, checkpoint dict)``.

    Raises:
        ValueError: if the folder, its config or its checkpoint is missing or
            unreadable, or if the checkpoint does not fit the config's model
            (naming the missing, unexpected and shape-mismatched keys).
        FileNotFoundError: if the folder has a config but no checkpoint.
    """
    from attnlab.training import read_checkpoint
    from attnlab.training.checkpoint import check_state_dict

    folder = Path(folder)
    config = _read_config(folder, "--run")
    path = folder / CHECKPOINT
    state = read_checkpoint(path)
    model = build_model(config)
    # A checkpoint from another model (another config, a copied file) is named, with the
    # mismatched keys, instead of torch's multi-line RuntimeError.
    check_state_dict(model.state_dict(), state["model_state_dict"], what=f"{config.model} model", where=str(path))
    model.load_state_dict(state["model_state_dict"])
    return config, model.eval(), state


def predict_corners(model: nn.Module, points: Tensor) -> Tensor:
    """The model's corners 3 and 4 for first corners ``points [B, 2, 2]``: ``[B, 2, 2]``.

    The caller's random streams are left as they were (seed 003's GRU models draw
    their teacher-forcing coin even in eval mode).
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), preserved_rng({}):
            return model(points)
    finally:
        model.train(was_training)
