"""The length-generalisation lab: which positional encoding still works on longer sequences?

``attnlab compare`` answers it on a task, measured: for every encoding (and
seed) it trains the same small model on sequences up to ``train_len`` long,
then decodes greedily test sets at each of ``test_lens`` and scores token and
sequence accuracy (MSE for the squares). The model is a
:class:`attnlab.models.DecoderOnlyTransformer` over ``source + BOS + target``
(``architecture="decoder-only"``, the default, as in the length-generalisation
literature) or the encoder-decoder :class:`attnlab.models.Transformer`.
The folder it writes::

    results.json     the settings, one record per (encoding, seed, length), timings
    accuracy.png     sequence accuracy against length, a line per encoding, min..max band over seeds
    tokens.png       the same for token accuracy (mse.png for the squares)
    report.html      the table and the figures

An application module, like :mod:`attnlab.runs`: it may import every layer.

Fairness: every encoding gets the same model size, data, steps, optimiser and
seeds; only the positional scheme changes. The learned table is given rows for
the longest test length (otherwise it could not be asked at all); rows past the
training length are never trained, and the lab measures what that costs.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnlab._io import atomic_write, check_folder
from attnlab._validate import check_choice, check_finite_float, check_int
from attnlab.data.metrics import mean_squared_error, sequence_accuracy, token_accuracy
from attnlab.data.tasks import (
    BOS,
    PAD,
    TASKS,
    SquaresBatch,
    TaskBatch,
    TaskSets,
    TaskSpec,
    Vocab,
    decoder_only_batch,
    make_task_sets,
    task_loader,
)
from attnlab.models.decoder_only import DecoderOnlyTransformer
from attnlab.models.transformer import ENCODINGS, Transformer
from attnlab.training.rng import preserved_rng

if TYPE_CHECKING:  # matplotlib is imported only when the figures are drawn
    from matplotlib.figure import Figure

__all__ = [
    "ARCHITECTURES", "QUICK", "CompareConfig", "CompareResult", "check_compare_folder", "format_table", "run_compare",
    "summarise",
]


#: the models the lab can train: a causal stack over ``source + BOS + target`` (the default, as in the
#: length-generalisation literature) or the encoder-decoder, where position lives in self-attention only.
ARCHITECTURES = ("decoder-only", "encoder-decoder")


@dataclass(frozen=True)
class CompareConfig:
    """Every setting of a comparison; written to ``results.json``.

    The defaults finish in under 10 minutes on 2 CPU cores; :data:`QUICK` in under one.
    Training lengths are ``min_train_len .. train_len`` (token tasks), so the
    models have seen every length up to ``train_len`` and nothing longer.

    Raises:
        TypeError / ValueError: naming the setting, for an unknown task,
            architecture or encoding, an empty or repeated ``encodings``, an
            empty ``test_lens``, a count or size below 1, a non-positive ``lr``,
            ``min_train_len > train_len``, ``d_model`` not divisible by
            ``n_heads`` (or an odd head size with rotary), ``extras`` that is not
            a JSON-serialisable dict, or lengths the task's data refuses.
    """

    task: str = "reverse"
    encodings: tuple[str, ...] = ENCODINGS
    architecture: str = "decoder-only"
    train_len: int = 8
    test_lens: tuple[int, ...] = (8, 12, 16, 24)
    seeds: int = 3
    epochs: int = 12
    n_train: int = 4096
    n_test: int = 256
    batch_size: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    lr: float = 3e-3
    n_symbols: int = 10
    min_train_len: int = 1
    max_relative_position: int = 8  # Shaw's k: offsets up to it are all seen in training
    extras: dict[str, Any] = field(default_factory=dict)  # free-form notes kept with the results

    def __post_init__(self) -> None:
        check_choice("task", self.task, TASKS)
        check_choice("architecture", self.architecture, ARCHITECTURES)
        for name in ("encodings", "test_lens"):
            value = getattr(self, name)
            # A bare string would be read letter by letter ("unknown encoding 'r'").
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise TypeError(f"{name} must be a tuple, got {value!r} ({type(value).__name__})")
            object.__setattr__(self, name, tuple(value))  # a list (e.g. from results.json) becomes a tuple
        if not self.encodings:
            raise ValueError("encodings is empty: name at least one of " + ", ".join(ENCODINGS))
        for name in self.encodings:
            check_choice("encoding", name, ENCODINGS)
        if len(set(self.encodings)) != len(self.encodings):
            raise ValueError(f"encodings has repeats: {list(self.encodings)}")
        for name in ("train_len", "seeds", "epochs", "n_train", "n_test", "batch_size", "d_model", "n_heads",
                     "n_layers", "n_symbols", "min_train_len", "max_relative_position"):
            check_int(name, getattr(self, name), minimum=1)
        if not self.test_lens:
            raise ValueError("test_lens is empty: give at least one length")
        for length in self.test_lens:
            check_int("test_lens", length, minimum=1)
        check_finite_float("lr", self.lr, positive=True)
        if self.min_train_len > self.train_len:
            raise ValueError(f"min_train_len ({self.min_train_len}) must be <= train_len ({self.train_len})")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        head_dim = self.d_model // self.n_heads
        if "rotary" in self.encodings and head_dim % 2:
            # Otherwise Rotary refuses it only when its model is built, after the others have trained.
            raise ValueError(f"rotary turns features in pairs, so d_model / n_heads must be even, got "
                             f"d_model={self.d_model}, n_heads={self.n_heads} (head dim {head_dim})")
        if not isinstance(self.extras, dict):
            raise TypeError(f"extras must be a dict, got {self.extras!r} ({type(self.extras).__name__})")
        try:
            json.dumps(self.extras)
        except (TypeError, ValueError) as err:
            # Checked now: results.json is written after every model has trained.
            raise TypeError(f"extras must be JSON-serialisable (results.json keeps it), got {self.extras!r}: "
                            f"{err}") from None
        # The data's own checks (e.g. squares needs lengths >= 3) run here too, before any training.
        self.spec()

    def spec(self) -> TaskSpec:
        """The data this comparison trains and tests on."""
        squares = self.task == "squares"
        return TaskSpec(task=self.task, train_len=self.train_len, test_lens=tuple(self.test_lens),
                        n_train=self.n_train, n_test=self.n_test, n_symbols=self.n_symbols,
                        min_train_len=None if squares or self.min_train_len == self.train_len else self.min_train_len)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (tuples as lists), as ``results.json`` records them."""
        d = dataclasses.asdict(self)
        d["encodings"], d["test_lens"] = list(self.encodings), list(self.test_lens)
        return d


#: overrides for ``--quick``: one seed, half the data, 640 steps at a higher rate (under a minute on 2 cores).
QUICK: dict[str, Any] = {"seeds": 1, "epochs": 10, "n_train": 2048, "n_test": 128, "lr": 4e-3}


@dataclass
class CompareResult:
    """What :func:`run_compare` measured: ``records`` (one dict per encoding, seed and length)."""

    config: CompareConfig
    records: list[dict[str, Any]]
    seconds: float
    folder: Path | None = None

    @property
    def metric(self) -> str:
        """The headline metric: sequence accuracy, or MSE for the squares."""
        return "mean_squared_error" if self.config.task == "squares" else "sequence_accuracy"


# -- one model ---------------------------------------------------------------------------


#: A model of the lab: what :func:`_build` gives for ``config.architecture``.
_Model = DecoderOnlyTransformer | Transformer


def _build(config: CompareConfig, encoding: str, seed: int) -> _Model:
    """The model for one encoding; its initial weights depend on ``seed`` only (global RNG untouched)."""
    longest = max(config.train_len, *config.test_lens) + 1  # source length or target + EOS
    if config.architecture == "decoder-only":
        longest = 2 * longest  # source, BOS and target in one sequence
    kwargs: dict[str, Any] = dict(d_model=config.d_model, n_heads=config.n_heads, n_layers=config.n_layers,
                                  encoding=encoding, max_len=longest, pad_id=PAD,
                                  max_relative_position=config.max_relative_position)
    kwargs.update({"n_features": 2} if config.task == "squares" else {"vocab_size": Vocab(config.n_symbols).size})
    with preserved_rng({}):  # torch's, CUDA's and Python's streams all come back as they were
        torch.manual_seed(seed)
        if config.architecture == "decoder-only":
            return DecoderOnlyTransformer(**kwargs)
        return Transformer(**kwargs)


def _loss(model: _Model, batch: TaskBatch | SquaresBatch, config: CompareConfig) -> torch.Tensor:
    if config.architecture == "decoder-only":
        if isinstance(batch, SquaresBatch):  # config.task == "squares"
            # The walk continues itself; the loss is on the corners after the given ones.
            n_given = batch.source.shape[1]
            pred = model(batch.full[:, :-1])[:, n_given - 1:]  # [B, T, 2]
            return F.mse_loss(pred, batch.target)
        inputs, labels = decoder_only_batch(batch)  # [B, 2S + 1] each
        logits = model(inputs)  # [B, 2S + 1, V]
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
    if isinstance(batch, SquaresBatch):
        # Decoder inputs: the target shifted right, starting from the last given corner (seed 000's way).
        target_in = torch.cat([batch.source[:, -1:], batch.target[:, :-1]], dim=1)  # [B, T, 2]
        return F.mse_loss(model(batch.source, target_in), batch.target)
    logits = model(batch.source, batch.target_in)  # [B, T, V]
    return F.cross_entropy(logits.flatten(0, 1), batch.target_out.flatten(), ignore_index=PAD)


def _predict(model: _Model, batch: TaskBatch | SquaresBatch, config: CompareConfig) -> torch.Tensor:
    """Greedy (cached) predictions for a test set of one length: ``[N, T]`` tokens or ``[N, T, 2]`` corners."""
    # The architecture, not the model's class, decides how to call it (the tests pass stand-ins).
    if config.architecture == "decoder-only":
        gpt = cast(DecoderOnlyTransformer, model)
        if isinstance(batch, SquaresBatch):  # config.task == "squares"
            return gpt.generate(batch.source, batch.target.shape[1])
        prompt = decoder_only_batch(batch)[0][:, : batch.source.shape[1] + 1]  # source + BOS: [N, S + 1]
        return gpt.generate(prompt, batch.target_out.shape[1])  # the target and EOS
    seq2seq = cast(Transformer, model)
    if isinstance(batch, SquaresBatch):
        return seq2seq.generate(batch.source, batch.target.shape[1], start=batch.source[:, -1:])
    return seq2seq.generate(batch.source, batch.target_out.shape[1], start=BOS)


def _schedule(total_steps: int) -> Callable[[int], float]:
    """Linear warm-up over 5% of the steps, then cosine decay to 10%: the same for every encoding."""
    warmup = max(1, total_steps // 20)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def _train(model: _Model, config: CompareConfig, sets: TaskSets, seed: int,
           on_step: Callable[[float], None]) -> None:
    loader = task_loader(sets.train, config.batch_size, shuffle=True, seed=seed)
    total = config.epochs * len(loader)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(total))
    model.train()
    for _ in range(config.epochs):
        for batch in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = _loss(model, batch, config)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            on_step(float(loss.detach()))
    model.eval()


def _evaluate(model: _Model, config: CompareConfig, sets: TaskSets, encoding: str,
              seed: int) -> list[dict[str, Any]]:
    """One record per test length: greedy decoding (cached) of the whole test set."""
    records = []
    for length, batch in sorted(sets.tests.items()):
        pred = _predict(model, batch, config)
        if isinstance(batch, SquaresBatch):  # config.task == "squares"
            scores = {"mean_squared_error": mean_squared_error(pred, batch.target)}
        else:
            scores = {"token_accuracy": token_accuracy(pred, batch.target_out, pad=PAD),
                      "sequence_accuracy": sequence_accuracy(pred, batch.target_out, pad=PAD)}
        records.append({"encoding": encoding, "seed": seed, "length": int(length), **scores})
    return records


# -- the comparison ----------------------------------------------------------------------


def run_compare(
    config: CompareConfig,
    folder: str | os.PathLike[str] | None = None,
    *,
    progress: bool | None = None,
) -> CompareResult:
    """Train one model per encoding and seed, score every test length, and write the folder.

    Args:
        config: the settings.
        folder: where to write ``results.json``, the figures and ``report.html``
            (created if missing; its parent must exist). None writes nothing.
        progress: one bar over all the models' training steps (None: when stderr is a terminal).

    Returns:
        The :class:`CompareResult`.

    Raises:
        ValueError: if ``folder``'s parent does not exist or is a file, ``folder``
            is a file or cannot be created, checked before any training.
        TypeError: if ``progress`` is not None, True or False.
    """
    from tqdm import tqdm

    from attnlab.training.progress import check_progress, progress_enabled

    check_progress(progress)
    out = None if folder is None else _prepare_folder(folder)
    sets = make_task_sets(config.spec())
    steps_per_model = config.epochs * math.ceil(config.n_train / config.batch_size)
    runs = [(encoding, seed) for encoding in config.encodings for seed in range(config.seeds)]
    records: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    start = time.perf_counter()
    with tqdm(total=steps_per_model * len(runs), desc=f"compare {config.task}", unit="step",
              disable=not progress_enabled(progress), dynamic_ncols=True, leave=True) as bar:
        for encoding, seed in runs:
            bar.set_postfix_str(f"{encoding}, seed {seed}", refresh=False)
            model = _build(config, encoding, seed)
            began = time.perf_counter()

            def on_step(loss: float, label: str = f"{encoding}, seed {seed}") -> None:
                bar.update(1)
                if bar.n % 50 == 0:
                    bar.set_postfix_str(f"{label}, loss {loss:.3f}", refresh=False)

            _train(model, config, sets, seed, on_step)
            records.extend(_evaluate(model, config, sets, encoding, seed))
            timings[f"{encoding}/{seed}"] = time.perf_counter() - began
    result = CompareResult(config, records, time.perf_counter() - start, out)
    if out is not None:
        _write_outputs(out, result, timings)
    return result


def check_compare_folder(folder: str | os.PathLike[str]) -> Path:
    """``folder`` as a Path, once it is known that it can be created (or written) there; creates nothing.

    Raises:
        ValueError: naming ``--out`` and the path, if ``folder`` is a file, its
            parent does not exist or is not a folder, nothing can be written there,
            or it already holds a comparison's ``results.json``.
    """
    path = check_folder(folder, name="--out")
    if (path / "results.json").exists():
        # A comparison takes minutes: another one's results are not overwritten silently.
        raise ValueError(f"--out {str(path)!r} already holds a comparison (results.json); choose another folder")
    return path


def _prepare_folder(folder: str | os.PathLike[str]) -> Path:
    path = check_compare_folder(folder)
    try:
        path.mkdir(exist_ok=True)
    except OSError as err:  # e.g. a parent that takes no new folders (/proc)
        raise ValueError(f"--out {str(path)!r} cannot be created: {err.strerror or err}") from None
    return path


def summarise(records: list[dict[str, Any]], metric: str) -> dict[str, dict[int, tuple[float, float, float]]]:
    """``{encoding: {length: (mean, min, max)}}`` of ``metric`` over seeds."""
    grouped: dict[str, dict[int, list[float]]] = {}
    for r in records:
        grouped.setdefault(r["encoding"], {}).setdefault(r["length"], []).append(float(r[metric]))
    return {enc: {length: (sum(v) / len(v), min(v), max(v)) for length, v in sorted(by_len.items())}
            for enc, by_len in grouped.items()}


def format_table(result: CompareResult) -> str:
    """A plain-text table: a row per encoding, a column per test length (mean over seeds).

    Token tasks show ``sequence / token`` accuracy in percent; the squares show MSE.
    """
    config = result.config
    lengths = sorted(set(config.test_lens))
    squares = config.task == "squares"
    seq = summarise(result.records, result.metric)
    tok = None if squares else summarise(result.records, "token_accuracy")
    header = f"{'encoding':12s}" + "".join(
        f"{f'L={n}' + (' (train)' if n == config.train_len else ''):>16s}" for n in lengths)
    lines = [header]
    for enc in config.encodings:
        cells = []
        for n in lengths:
            if squares:
                cells.append(f"{seq[enc][n][0]:16.4f}")
            else:
                assert tok is not None
                cells.append(f"{100 * seq[enc][n][0]:9.1f} / {100 * tok[enc][n][0]:4.0f}")
        lines.append(f"{enc:12s}" + "".join(cells))
    what = ("test MSE (mean over seeds)" if squares else
            "sequence / token accuracy, % (mean over seeds)")
    return f"{config.task}: {what}; trained on lengths up to {config.train_len}\n" + "\n".join(lines)


def _png_writer(fig: Figure) -> Callable[[Path], None]:
    """A callback for :func:`attnlab._io.atomic_write` that saves ``fig`` as a PNG."""

    def write(tmp: Path) -> None:
        fig.savefig(tmp, dpi=100, bbox_inches="tight", format="png")

    return write


def _write_outputs(folder: Path, result: CompareResult, timings: dict[str, float]) -> None:
    from attnlab.plotting import plot_length_generalisation

    config = result.config
    doc = {"config": config.to_dict(), "metric": result.metric, "seconds": result.seconds,
           "seconds_per_model": timings, "records": result.records,
           "summary": {enc: {str(n): v[0] for n, v in by_len.items()}
                       for enc, by_len in summarise(result.records, result.metric).items()}}
    atomic_write(folder / "results.json", lambda tmp: tmp.write_text(json.dumps(doc, indent=2) + "\n"))
    figures = []
    metrics = ["mean_squared_error"] if config.task == "squares" else ["sequence_accuracy", "token_accuracy"]
    names = {"sequence_accuracy": "accuracy.png", "token_accuracy": "tokens.png", "mean_squared_error": "mse.png"}
    for metric in metrics:
        fig = plot_length_generalisation(result.records, metric=metric, train_len=config.train_len)
        path = folder / names[metric]
        atomic_write(path, _png_writer(fig))
        figures.append(path)
    esc = html.escape
    images = "".join(
        f'<figure><img alt="{esc(p.stem)}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        f"</figure>" for p in figures)
    settings = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in config.to_dict().items())
    layers = (f"{config.n_layers} layers" if config.architecture == "decoder-only"
              else f"{config.n_layers}+{config.n_layers} layers")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>attnlab compare: {esc(config.task)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ padding: .2em .8em; border-bottom: 1px solid #ddd; }}
th {{ text-align: left; }} img {{ max-width: 100%; }} pre {{ background: #f6f6f6; padding: 1em; }}
</style></head><body>
<h1>Which positional encoding generalises to longer sequences? ({esc(config.task)})</h1>
<p>Each encoding trains the same {esc(config.architecture)} Transformer ({layers}, d_model {config.d_model},
{config.n_heads} heads) on lengths {config.min_train_len if config.task != "squares" else config.train_len}
to {config.train_len}, {config.seeds} seed(s), then decodes greedily test sets at lengths
{", ".join(map(str, config.test_lens))}. Total time {result.seconds:.0f} s.</p>
<pre>{esc(format_table(result))}</pre>
{images}
<h2>Settings</h2><table>{settings}</table>
</body></html>
"""
    atomic_write(folder / "report.html", lambda tmp: tmp.write_text(page))
