"""The length-generalisation lab: which positional encoding still works on longer sequences?

``attnlab compare`` answers it on a task, measured: for every encoding and
random seed it trains the same small model on sequences up to ``train_len``
long, then decodes greedily the test sets at each of ``test_lens`` and scores
token and sequence accuracy (MSE for the squares). The model is a
:class:`~attnlab.models.DecoderOnlyTransformer` over ``source + BOS + target``
(``architecture="decoder-only"``, the default, as Kazemnejad et al. 2023), an
:class:`~attnlab.models.EncoderOnlyTransformer` that writes the target into empty
slots after the source in one pass (``"encoder-only"``, as Ruoss et al. 2023), or
the encoder-decoder :class:`~attnlab.models.Transformer`.

This module holds the settings (:class:`CompareConfig`) and one model's
experiment (:func:`train_one`: build, train through :func:`attnlab.training.fit`,
score); :mod:`attnlab.labs.compare` runs the sweep over encodings and seeds in a
run folder, and :mod:`attnlab.labs.lengths_report` shows the results.

Fairness: every encoding gets the same model size, data, steps, optimiser and
seeds; only the positional scheme changes. The learned table is given rows for
the longest test length (otherwise it could not be asked at all); rows past the
training length are never trained, and the lab measures what that costs. The
randomized schemes (``random-*``, Ruoss et al. 2023) draw their positions from
``[0, l_max)`` in training and at test time alike, as the paper's code does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnlab._limits import check_memory, count_parameters
from attnlab._validate import check_choice, check_float32, check_int, check_keys
from attnlab.data.layouts import decoder_only_batch, encoder_only_batch
from attnlab.data.metrics import mean_squared_error, sequence_accuracy, token_accuracy
from attnlab.data.task_loader import task_loader
from attnlab.data.tasks import (
    BOS,
    PAD,
    TASKS,
    TOKEN_TASKS,
    SquaresBatch,
    TaskBatch,
    TaskSets,
    TaskSpec,
    Vocab,
    target_length,
)
from attnlab.encodings.registry import DEFAULT_ENCODINGS, ENCODINGS, RANDOMIZED
from attnlab.models import DecoderOnlyTransformer, Transformer
from attnlab.models.builders import ARCHITECTURES, sequence_model_class
from attnlab.training import Callback, fit
from attnlab.training.clipping import GradientClipping
from attnlab.training.rng import preserved_rng

__all__ = ["QUICK", "CompareConfig", "ModelResult", "evaluate", "train_one"]


#: models one comparison may train (encodings x seeds): past it, a typo, not an experiment
MAX_MODELS = 10_000


@dataclass(frozen=True)
class CompareConfig:
    """Every setting of a comparison; written to ``config.json`` and ``results.json``.

    The defaults finish in about 5 minutes on 2 CPU cores; :data:`QUICK` in under one.
    Training lengths are ``min_train_len .. train_len`` (token tasks), so the
    models have seen every length up to ``train_len`` and nothing longer. Models
    are trained at random seeds ``0 .. n_seeds - 1``.

    Raises:
        TypeError / ValueError: naming the setting, for an unknown task,
            architecture or encoding, an empty or repeated ``encodings``, an
            empty ``test_lens``, a count or size below 1, a non-positive ``lr``,
            ``min_train_len > train_len``, sizes the model refuses (``d_model`` not
            divisible by ``n_heads``, an odd head size with rotary), ``extras`` that is
            not a JSON-serialisable dict, lengths the task's data refuses, the squares
            with the encoder-only architecture, or an ``l_max`` below the longest
            sequence a randomized scheme must place.
    """

    task: str = "reverse"
    encodings: tuple[str, ...] = DEFAULT_ENCODINGS
    architecture: str = "decoder-only"
    train_len: int = 8
    test_lens: tuple[int, ...] = (8, 12, 16, 24)
    n_seeds: int = 3
    epochs: int = 12
    n_train: int = 4096
    n_test: int = 256
    batch_size: int = 32
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    ff_units: int | None = None  # None: 4 * d_model
    lr: float = 3e-3
    n_symbols: int = 10
    min_train_len: int = 1
    max_relative_position: int = 8  # Shaw's k: offsets up to it are all seen in training
    # The randomized schemes draw positions from [0, l_max); None: 4 x the longest sequence a model reads
    # (Ruoss et al. use 2048 for tests up to 500). Recorded resolved, so results say what was used.
    l_max: int | None = None
    preset: str | None = None  # the published setup these settings start from (attnlab.labs.presets), if any
    extras: dict[str, Any] = field(default_factory=dict)  # free-form notes kept with the results

    def __post_init__(self) -> None:
        check_choice("task", self.task, TASKS)
        check_choice("architecture", self.architecture, ARCHITECTURES)
        if self.preset is not None:
            from attnlab.labs.presets import preset

            preset(self.preset)  # an unknown name: ValueError listing the known ones
        if self.architecture == "encoder-only" and self.task == "squares":
            raise ValueError("architecture 'encoder-only' takes the token tasks "
                             f"({', '.join(TOKEN_TASKS)}): the squares are decoded corner by corner")
        for name in ("encodings", "test_lens"):
            value = getattr(self, name)
            # A bare string would be read letter by letter ("unknown encoding 'r'").
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise TypeError(f"{name} must be a tuple, got {value!r} ({type(value).__name__})")
            object.__setattr__(self, name, tuple(value))  # a list (e.g. from config.json) becomes a tuple
        if not self.encodings:
            raise ValueError("encodings is empty: name at least one of " + ", ".join(ENCODINGS))
        for name in self.encodings:
            check_choice("encoding", name, ENCODINGS)
        if len(set(self.encodings)) != len(self.encodings):
            raise ValueError(f"encodings has repeats: {list(self.encodings)}")
        for name in ("train_len", "n_seeds", "epochs", "n_train", "n_test", "batch_size", "n_symbols",
                     "min_train_len"):
            check_int(name, getattr(self, name), minimum=1)
        if not self.test_lens:
            raise ValueError("test_lens is empty: give at least one length")
        for length in self.test_lens:
            check_int("test_lens", length, minimum=1)
        check_float32("lr", self.lr, positive=True)  # the parameters it updates are float32
        self._resolve_l_max()
        n_models = len(self.encodings) * self.n_seeds
        if n_models > MAX_MODELS:
            raise ValueError(f"n_seeds {self.n_seeds}: {len(self.encodings)} encodings x {self.n_seeds} seeds "
                             f"= {n_models} models; at most {MAX_MODELS} in one comparison")
        if self.min_train_len > self.train_len:
            raise ValueError(f"min_train_len ({self.min_train_len}) must be <= train_len ({self.train_len})")
        if not isinstance(self.extras, dict):
            raise TypeError(f"extras must be a dict, got {self.extras!r} ({type(self.extras).__name__})")
        try:
            json.dumps(self.extras)
        except (TypeError, ValueError) as err:
            raise TypeError(f"extras must be JSON-serialisable (results.json keeps it), got {self.extras!r}: "
                            f"{err}") from None
        # The data's own checks (e.g. squares needs lengths >= 3) and the models' (their sizes,
        # checked by the layers that use them) run now, before any training: each model is
        # built once (for real when small, else on the meta device), allocating nothing that
        # could not fit and moving no random stream (attnlab._limits.count_parameters).
        self.spec()
        D, L, F = self.d_model, self.n_layers, self.ff_units or 4 * self.d_model
        # Attentions, feed-forward networks, and tables up to the longest test length (with room for
        # the vocabulary and the decoder-only layout's doubled sequence): a bound from the sizes alone.
        rows = max(4 * max(self.test_lens), self.l_max or 0)  # a learned table's rows (l_max for random-learned)
        bound = 2 * L * (12 * D * D + 2 * D * F + 16 * D) + D * (rows + 256)
        n_parameters = max(count_parameters(partial(self.build_model, encoding), bound=bound)
                           for encoding in self.encodings)
        sizes = ", ".join(f"{name} {getattr(self, name)}" for name in ("d_model", "n_heads", "n_layers", "ff_units")
                          if getattr(self, name) is not None)
        check_memory(f"{sizes}: the model's {n_parameters:,} parameters, with their gradients and Adam's state",
                     n_parameters * 4 * 4)
        self._check_memory()

    def _check_memory(self) -> None:
        """Refuse data and evaluations that cannot fit, from the sizes alone (estimates rounded up)."""
        row = 8 * 4  # int64 tokens, a few copies of each while the sets are made
        check_memory(f"n_train {self.n_train} x train_len {self.train_len}: the training set",
                     self.n_train * (self.sequence_length(self.train_len) + 2) * row)
        longest = max(self.test_lens)
        S = self.sequence_length(longest) + 1  # the longest sequence a test decodes over
        # One test set is decoded at once: its scores [n_test, H, S, S] on the first step, then a cache.
        check_memory(f"test_lens {longest} (n_test {self.n_test}): decoding the longest test set",
                     self.n_test * (self.n_heads * S * S * 4 * 2 + self.n_layers * 2 * S * self.d_model * 4)
                     + len(self.test_lens) * self.n_test * (S + 2) * row)

    def spec(self) -> TaskSpec:
        """The data this comparison trains and tests on."""
        squares = self.task == "squares"
        return TaskSpec(task=self.task, train_len=self.train_len, test_lens=tuple(self.test_lens),
                        n_train=self.n_train, n_test=self.n_test, n_symbols=self.n_symbols,
                        min_train_len=None if squares or self.min_train_len == self.train_len else self.min_train_len)

    def sequence_length(self, length: int) -> int:
        """The longest sequence a model reads for a source of ``length`` (corners, for the squares).

        Decoder-only: source, BOS, target and EOS in one sequence; encoder-only: the
        source and one slot per target token; encoder-decoder: the longer of source
        and target + EOS.
        """
        if self.task == "squares":
            return length
        target = target_length(self.task, length)
        if self.architecture == "decoder-only":
            return length + target + 1
        if self.architecture == "encoder-only":
            return length + target
        return max(length, target + 1)

    def _resolve_l_max(self) -> None:
        """``l_max`` as given, or 4 x the longest sequence; at least that sequence when a scheme draws from it."""
        longest = self.sequence_length(max(self.train_len, *self.test_lens))
        if self.l_max is None:
            object.__setattr__(self, "l_max", 4 * longest)
            return
        check_int("l_max", self.l_max, minimum=1)
        randomized = [name for name in self.encodings if name in RANDOMIZED]
        if randomized and self.l_max < longest:
            raise ValueError(f"l_max {self.l_max} is below the longest sequence the models read ({longest} tokens "
                             f"at test length {max(self.test_lens)}): {', '.join(randomized)} draw that many "
                             f"distinct positions from [0, l_max); give l_max >= {longest}")

    def build_model(self, encoding: str) -> DecoderOnlyTransformer | Transformer:
        """The model for one encoding, its weights drawn from torch's global generator (see :func:`train_one`)."""
        # Rows for the longest sequence (+1 for a decoder-only model's rows past its last input: as before).
        longest = self.sequence_length(max(self.train_len, *self.test_lens)) + (self.architecture == "decoder-only")
        if encoding in RANDOMIZED:
            assert self.l_max is not None  # resolved in __post_init__
            longest = self.l_max  # the positions are drawn from [0, l_max)
        squares = self.task == "squares"
        model_class = sequence_model_class(self.architecture)
        model = model_class(vocab_size=None if squares else Vocab(self.n_symbols).size,
                            n_features=2 if squares else None, d_model=self.d_model, n_heads=self.n_heads,
                            n_layers=self.n_layers, ff_units=self.ff_units, encoding=encoding, max_len=longest,
                            max_relative_position=self.max_relative_position, pad_id=PAD)
        return cast(DecoderOnlyTransformer | Transformer, model)

    def runs(self) -> list[tuple[str, int]]:
        """Every ``(encoding, seed)`` to train, in the order the records are kept."""
        return [(encoding, seed) for encoding in self.encodings for seed in range(self.n_seeds)]

    def steps_per_model(self) -> int:
        """Optimizer steps each model takes."""
        return self.epochs * math.ceil(self.n_train / self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (tuples as lists), as ``results.json`` records them."""
        d = dataclasses.asdict(self)
        d["encodings"], d["test_lens"] = list(self.encodings), list(self.test_lens)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompareConfig:
        """The config a :meth:`to_dict` dict describes.

        The dict must hold every setting: a comparison's settings are never filled in
        with today's defaults.

        Raises:
            ValueError: naming them, for missing keys and keys that are not settings; and
                what the class raises.
        """
        return cls(**check_keys("config", d, [f.name for f in dataclasses.fields(cls)], complete=True))


#: overrides for ``--quick``: one seed, half the data, 640 steps at a higher rate (under a minute on 2 cores).
QUICK: dict[str, Any] = {"n_seeds": 1, "epochs": 10, "n_train": 2048, "n_test": 128, "lr": 4e-3}


@dataclass
class ModelResult:
    """One trained model: its records (one per test length), its weights, size and training time.

    ``state_dict`` maps each parameter name to its tensor, of the parameter's own shape (e.g. ``[D, D]``).
    """

    encoding: str
    seed: int
    records: list[dict[str, Any]]
    state_dict: dict[str, torch.Tensor]
    seconds: float
    n_parameters: int


# -- one model ---------------------------------------------------------------------------


def _loss(config: CompareConfig) -> Callable[[nn.Module, Any], torch.Tensor]:
    """The batch loss :func:`fit` calls: next-element prediction (decoder-only), the slots (encoder-only)
    or teacher forcing (encoder-decoder)."""

    def loss(model: nn.Module, batch: TaskBatch | SquaresBatch) -> torch.Tensor:
        if config.architecture == "encoder-only":
            inputs, labels = encoder_only_batch(cast(TaskBatch, batch))  # [B, S + M] each
            logits = model(inputs)  # [B, S + M, V]: scored on the slots only (labels PAD elsewhere)
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        if config.architecture == "decoder-only":
            if isinstance(batch, SquaresBatch):
                # The walk continues itself; the loss is on the corners after the given ones.
                n_given = batch.source.shape[1]
                pred = model(batch.full[:, :-1])[:, n_given - 1:]  # [B, T, 2]
                return F.mse_loss(pred, batch.target)
            inputs, labels = decoder_only_batch(batch)  # [B, S + T] each
            logits = model(inputs)  # [B, S + T, V]
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        if isinstance(batch, SquaresBatch):
            # Decoder inputs: the target shifted right, starting from the last given corner.
            target_in = torch.cat([batch.source[:, -1:], batch.target[:, :-1]], dim=1)  # [B, T, 2]
            return F.mse_loss(model(batch.source, target_in), batch.target)
        logits = model(batch.source, batch.target_in)  # [B, T, V]
        return F.cross_entropy(logits.flatten(0, 1), batch.target_out.flatten(), ignore_index=PAD)

    return loss


def _predict(model: nn.Module, batch: TaskBatch | SquaresBatch, config: CompareConfig) -> torch.Tensor:
    """Predictions for a test set of one length: ``[N, T]`` tokens or ``[N, T, 2]`` corners.

    Greedy decoding (cached where the scheme allows), or the slots of one pass
    (encoder-only: ``[N, M]``, the target without EOS).
    """
    # The architecture, not the model's class, decides how to call it (the tests pass stand-ins).
    if config.architecture == "encoder-only":
        inputs = encoder_only_batch(cast(TaskBatch, batch))[0]  # [N, S + M]
        S = batch.source.shape[1]  # every row of a test set has this length, so the slots line up
        return model(inputs)[:, S:].argmax(-1)  # [N, M]
    if config.architecture == "decoder-only":
        gpt = cast(DecoderOnlyTransformer, model)
        if isinstance(batch, SquaresBatch):
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


def evaluate(model: nn.Module, config: CompareConfig, sets: TaskSets, encoding: str,
             seed: int) -> list[dict[str, Any]]:
    """One record per test length: the whole test set predicted (:func:`_predict`) and scored on the CPU."""
    model.eval()
    device = next(model.parameters()).device
    records = []
    for length, batch in sorted(sets.tests.items()):
        pred = _predict(model, batch.to(device), config).cpu()
        if isinstance(batch, SquaresBatch):
            scores = {"mean_squared_error": mean_squared_error(pred, batch.target)}
        else:
            target = batch.target_out
            if config.architecture == "encoder-only":  # no EOS: the slots hold the target only
                target = encoder_only_batch(batch)[1][:, batch.source.shape[1]:]  # [N, M]
            scores = {"token_accuracy": token_accuracy(pred, target, pad=PAD),
                      "sequence_accuracy": sequence_accuracy(pred, target, pad=PAD)}
        records.append({"encoding": encoding, "seed": seed, "length": int(length), **scores})
    return records


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one intra-op thread; torch's thread count comes back after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def train_one(config: CompareConfig, sets: TaskSets, encoding: str, seed: int, *,
              callbacks: Sequence[Callback] = (), device: torch.device | str = "cpu") -> ModelResult:
    """Train and score the model of one ``(encoding, seed)``; it depends on nothing else.

    Its initial weights are drawn after ``torch.manual_seed(seed)`` and its batches
    shuffled by a generator seeded with ``seed``, on a copy of the global random
    state: what ran before does not change it, and it changes nothing after. It
    computes on one thread (torch's thread count is restored after): a float sum's
    order depends on how many threads split it, and the records must not depend on
    how many runs share the machine (:mod:`attnlab.labs.sweep`).

    Args:
        config: the comparison's settings.
        sets: its data (:func:`attnlab.data.tasks.make_task_sets` of ``config.spec()``).
        encoding: one of ``config.encodings``.
        seed: the random seed.
        callbacks: passed to :func:`fit` (e.g. a progress bar).
        device: where the model trains (the initial weights are drawn on the CPU, so they
            are the same on every device); the data is moved there batch by batch.

    Returns:
        A :class:`ModelResult`.
    """
    began = time.perf_counter()
    with one_thread(), preserved_rng({}):  # torch's, CUDA's and Python's streams all come back as they were
        torch.manual_seed(seed)
        model = config.build_model(encoding).to(device)
        loader = task_loader(sets.train, config.batch_size, shuffle=True, seed=seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config.epochs * len(loader)))
        clipping = GradientClipping()
        clipping.set_norm(1.0)
        fit(model, optimizer, loader, epochs=config.epochs, loss=_loss(config), scheduler=scheduler,
            scheduler_interval="batch", clipping=clipping, callbacks=callbacks)
        records = evaluate(model, config, sets, encoding, seed)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    n_parameters = sum(p.numel() for p in model.parameters())
    return ModelResult(encoding, seed, records, state, time.perf_counter() - began, n_parameters)
