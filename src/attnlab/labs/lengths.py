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
experiment (:func:`attnlab.labs.lengths_train.train_one`: build, train through :func:`attnlab.training.fit`,
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from attnlab._limits import check_memory, count_parameters
from attnlab._validate import check_choice, check_float32, check_int, check_keys
from attnlab.data.tasks import (
    PAD,
    TASKS,
    TOKEN_TASKS,
    TaskSpec,
    Vocab,
    target_length,
)
from attnlab.encodings.registry import DEFAULT_ENCODINGS, ENCODINGS, RANDOMIZED
from attnlab.models import DecoderOnlyTransformer, Transformer
from attnlab.models.builders import ARCHITECTURES, sequence_model_class

__all__ = ["QUICK", "CompareConfig"]


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
        """The model for one encoding, its weights drawn from torch's global generator (see ``train_one``)."""
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
