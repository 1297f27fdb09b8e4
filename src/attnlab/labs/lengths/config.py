"""The length-generalisation lab's settings: :class:`CompareConfig`, what ``config.json`` holds.

``attnlab compare`` answers which positional encoding still works on longer sequences,
measured: for every encoding and random seed it trains the same small model on sequences
up to ``train_len`` long, then decodes greedily the test sets at each of ``test_lens`` and
scores token and sequence accuracy (MSE for the squares). The model is a
:class:`~attnlab.models.DecoderOnlyTransformer` over ``source + BOS + target``
(``architecture="decoder-only"``, the default, as Kazemnejad et al. 2023), an
:class:`~attnlab.models.EncoderOnlyTransformer` that writes the target into empty
slots after the source in one pass (``"encoder-only"``, as Ruoss et al. 2023), or
the encoder-decoder :class:`~attnlab.models.Transformer`.

The settings are data: they are checked once, when the config is made, and build
nothing. Each encoding's name is resolved there once (what it declares: an input table,
drawn positions, positions from the task), and the task's rules are looked up once.
What the run allocates is counted from them (:mod:`attnlab.labs.lengths.costs`);
:mod:`attnlab.labs.lengths.train` builds the models and the data, and checks the sizes
each scheme refuses; :mod:`attnlab.labs.lengths.compare` runs the sweep in a run folder.

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, cast

from attnlab._validate import check_choice, check_float32, check_int, check_keys, check_probability
from attnlab.attention.backends.choose import BACKENDS
from attnlab.catalog import PROTOCOLS
from attnlab.data.tasks import TASKS, Task, TaskSpec, task_named
from attnlab.encodings.registry import (
    DEFAULT_ENCODINGS,
    ENCODINGS,
    Buildable,
    Position,
    Randomized,
    resolve,
    spec_name,
)
from attnlab.encodings.scheme import PositionScheme
from attnlab.labs.lengths.costs import costs
from attnlab.labs.lengths.protocols import Protocol, protocol_named
from attnlab.labs.memory_bound import check_costs

__all__ = ["QUICK", "CompareConfig", "CompareResult"]


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
            ``min_train_len > train_len``, ``d_model`` not divisible by ``n_heads``,
            ``extras`` that is not a JSON-serialisable dict, lengths the task's data
            refuses (:meth:`~attnlab.data.tasks.task.Task.check_spec`: below its shortest, a test length
            SCAN has no command of), an ``n_symbols`` for a task whose vocabulary is fixed, the squares
            with the encoder-only architecture, an ``l_max`` below
            the longest sequence a randomized scheme must place, or a run too large for
            the memory (:mod:`attnlab.labs.lengths.costs`). The sizes a scheme refuses
            (an odd head size with rotary) are checked where the models are built
            (:func:`attnlab.labs.lengths.train.check_models`).
    """

    task: str = "reverse"
    # Names, "module:Class" or scheme classes; kept as the names that rebuild them in a worker or a resume.
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
    dropout: float = 0.0  # after the embeddings, in attention and in the feed-forward network, in training only
    lr: float = 3e-3
    # The alphabet of the tasks the lab sizes (copy, reverse, duplicate, sort); None: 10 for them, recorded resolved.
    # The other tasks' vocabularies are fixed: they refuse a size, and record None.
    n_symbols: int | None = None
    # The shortest training length (tasks trained at several); 0: the task's own shortest (1 for most, 3 for
    # addition), recorded resolved.
    min_train_len: int = 0
    max_relative_position: int = 8  # Shaw's k: offsets up to it are all seen in training
    # The randomized schemes draw positions from [0, l_max); None: 4 x the longest sequence a model reads
    # (Ruoss et al. use 2048 for tests up to 500). Recorded resolved, so results say what was used.
    l_max: int | None = None
    preset: str | None = None  # the published setup these settings start from (attnlab.labs.lengths.presets), if any
    extras: dict[str, Any] = field(default_factory=dict)  # free-form notes kept with the results
    backend: str = "auto"  # the path of every self-attention with a scheme (attnlab.attention.backends.choose)
    # How the models train and what the headline is (attnlab.labs.lengths.protocols): "fixed" (a padded set,
    # epochs), "ruoss2023" (a fresh batch of one length per step: epochs x n_train strings, no set built),
    # "kazemnejad2023" (a fixed set, exact match, their quarter rotary).
    protocol: str = "fixed"
    # Intra-op threads each model computes on (--threads); None: attnlab.training.threads' rule, by the work of a
    # step (one thread at the lab's sizes). Never by --jobs: the records are the same whatever the workers.
    threads: int | None = None
    # Models of one encoding trained together as one batched computation (attnlab.models.grouped), group_size
    # seeds at a time: each model's records are the ones it gets alone. 1: one model at a time.
    group_size: int = 1

    def __post_init__(self) -> None:
        check_choice("task", self.task, TASKS)
        if self.threads is not None:
            check_int("threads", self.threads, minimum=1)
        check_int("group_size", self.group_size, minimum=1)
        self.task_object.check_architecture(self.architecture)
        if self.group_size > 1 and self.architecture == "encoder-decoder":
            raise ValueError(f"group_size {self.group_size}: a group trains decoder-only or encoder-only models, "
                             "not the encoder-decoder (use group_size 1)")
        check_choice("protocol", self.protocol, PROTOCOLS)
        if not self.protocol_object.builds_training_set and not self.task_object.draws_fresh:
            raise ValueError(f"protocol {self.protocol!r} draws fresh strings at every step, and the {self.task} task "
                             "is a fixed set (use --protocol fixed or kazemnejad2023)")
        if self.preset is not None:
            from attnlab.labs.lengths.presets import preset

            preset(self.preset)  # an unknown name: ValueError listing the known ones
        for name in ("encodings", "test_lens"):
            value = getattr(self, name)
            # A bare string would be read letter by letter ("unknown encoding 'r'").
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise TypeError(f"{name} must be a tuple, got {value!r} ({type(value).__name__})")
            object.__setattr__(self, name, tuple(value))  # a list (e.g. from config.json) becomes a tuple
        if not self.encodings:
            raise ValueError("encodings is empty: name at least one of " + ", ".join(ENCODINGS))
        # A class becomes the name another process rebuilds it from; the protocol's own version of a scheme
        # (Kazemnejad et al.'s rotary turns a quarter of each head) is recorded as what ran.
        names = [e if isinstance(e, str) else spec_name(cast(Position, e)) for e in self.encodings]
        renames = self.protocol_object.renames
        object.__setattr__(self, "encodings", tuple(renames.get(e, e) for e in names))
        for encoding in self.encodings:
            self.scheme(encoding)  # resolved now: an unknown name or a module that does not import is refused here
        check_choice("backend", self.backend, BACKENDS)
        if len(set(self.encodings)) != len(self.encodings):
            raise ValueError(f"encodings has repeats: {list(self.encodings)}")
        for name in ("train_len", "n_seeds", "epochs", "n_train", "n_test", "batch_size", "d_model", "n_heads",
                     "n_layers"):
            check_int(name, getattr(self, name), minimum=1)
        if type(self.min_train_len) is int and self.min_train_len == 0:  # unset
            # The task's shortest, within train_len (a train_len below it is refused by the task, naming train_len);
            # 1 where every training sequence has train_len (the field is then not used).
            shortest = self.task_object.shortest if self.task_object.variable_lengths else 1
            object.__setattr__(self, "min_train_len", min(shortest, self.train_len))
        check_int("min_train_len", self.min_train_len, minimum=1)
        if not self.test_lens:
            raise ValueError("test_lens is empty: give at least one length")
        for length in self.test_lens:
            check_int("test_lens", length, minimum=1)
        if self.min_train_len > self.train_len:
            raise ValueError(f"min_train_len ({self.min_train_len}) must be <= train_len ({self.train_len})")
        object.__setattr__(self, "n_symbols", self.task_object.check_symbols(self.n_symbols))
        # The data's own checks (lengths the task is defined at, SCAN's lengths), before anything measures a length.
        self.task_object.check_spec(self.spec())
        check_float32("lr", self.lr, positive=True)  # the parameters it updates are float32
        check_probability("dropout", self.dropout)
        self._resolve_l_max()
        n_models = len(self.encodings) * self.n_seeds
        if n_models > MAX_MODELS:
            raise ValueError(f"n_seeds {self.n_seeds}: {len(self.encodings)} encodings x {self.n_seeds} seeds "
                             f"= {n_models} models; at most {MAX_MODELS} in one comparison")
        if not isinstance(self.extras, dict):
            raise TypeError(f"extras must be a dict, got {self.extras!r} ({type(self.extras).__name__})")
        try:
            json.dumps(self.extras)
        except (TypeError, ValueError) as err:
            raise TypeError(f"extras must be JSON-serialisable (results.json keeps it), got {self.extras!r}: "
                            f"{err}") from None
        # What the run allocates, from the settings alone: refused before anything is built or written.
        if self.ff_units is not None:
            check_int("ff_units", self.ff_units, minimum=1)
        check_costs(costs(self))
        self._check_positions()

    def _check_positions(self) -> None:
        """What the encodings declare, checked against the task and the sizes (nothing is built)."""
        check_int("max_relative_position", self.max_relative_position, minimum=1)
        for encoding in self.encodings:
            rule = self.task_positions(encoding)
            if rule is not None and rule not in self.task_object.position_rules:
                raise ValueError(f"encoding {encoding!r} takes its positions from the task, and the {self.task} task "
                                 "has none (the arithmetic tasks have: reversed-addition, reversed-multiplication)")
            if rule is not None and self.architecture == "encoder-decoder":
                raise ValueError(f"encoding {encoding!r} takes its positions from the task: give it a decoder-only "
                                 "or encoder-only architecture")
            built = self.scheme(encoding)
            declared = built.scheme if isinstance(built, Randomized) else built
            if getattr(declared, "causal_only", False) and self.architecture != "decoder-only":
                raise ValueError(f"encoding {encoding!r} is defined for causal attention only; the {self.architecture} "
                                 "model attends both ways (in its encoder): use a decoder-only model")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")

    # -- what the settings name, looked up once -----------------------------------------------

    @cached_property
    def task_object(self) -> Task:
        """The task (:mod:`attnlab.data.tasks.task`): its data, layouts, loss, decoding and metrics; one per config."""
        return task_named(self.task)

    @property
    def protocol_object(self) -> Protocol:
        """How the models train and what the headline is (:mod:`attnlab.labs.lengths.protocols`)."""
        return protocol_named(self.protocol)

    @cached_property
    def _schemes(self) -> dict[str, Buildable]:
        """Each encoding resolved once (:func:`attnlab.encodings.registry.resolve`): what it builds, unbuilt."""
        return {encoding: resolve(encoding) for encoding in self.encodings}

    def scheme(self, encoding: str) -> Buildable:
        """What ``encoding`` (one of :attr:`encodings`) builds: its class, or its randomized version."""
        return self._schemes[encoding]

    def is_input_table(self, encoding: str) -> bool:
        """``encoding`` is a table added to the embeddings, not a scheme inside attention (its class says)."""
        built = self._schemes[encoding]
        return isinstance(built, type) and not issubclass(built, PositionScheme)

    def draws_positions(self, encoding: str) -> bool:
        """``encoding`` draws its positions anew at every call (a randomized scheme or table), as it declares."""
        built = self._schemes[encoding]
        return isinstance(built, Randomized) or bool(getattr(built, "draws_positions", False))

    def task_positions(self, encoding: str) -> str | None:
        """The rule by which the task numbers the tokens for ``encoding`` (``"abacus"``, ``"coupling"``), or None."""
        return getattr(self._schemes[encoding], "task_positions", None)

    # -- what follows from the settings ------------------------------------------------------------

    @property
    def metric(self) -> str:
        """The headline metric: the protocol's for a token task (the paper's), the squares' MSE otherwise."""
        metrics = self.task_object.metrics
        return self.protocol_object.metric if self.protocol_object.metric in metrics else metrics[0]

    def spec(self) -> TaskSpec:
        """The data this comparison trains and tests on."""
        mixed = self.task_object.variable_lengths and self.min_train_len != self.train_len
        return TaskSpec(task=self.task, train_len=self.train_len, test_lens=tuple(self.test_lens),
                        n_train=self.n_train, n_test=self.n_test, n_symbols=self.n_symbols,
                        min_train_len=self.min_train_len if mixed else None)

    def sequence_length(self, length: int) -> int:
        """The longest sequence a model reads for a source of ``length`` (the task's layout for the architecture)."""
        return self.task_object.sequence_length(length, self.architecture)

    def _resolve_l_max(self) -> None:
        """``l_max`` as given, or 4 x the longest sequence; at least that sequence when a scheme draws from it."""
        longest = self.sequence_length(max(self.train_len, *self.test_lens))
        if self.l_max is None:
            object.__setattr__(self, "l_max", 4 * longest)
            return
        check_int("l_max", self.l_max, minimum=1)
        randomized = [name for name in self.encodings if self.draws_positions(name)]
        if randomized and self.l_max < longest:
            raise ValueError(f"l_max {self.l_max} is below the longest sequence the models read ({longest} tokens "
                             f"at test length {max(self.test_lens)}): {', '.join(randomized)} draw that many "
                             f"distinct positions from [0, l_max); give l_max >= {longest}")

    def runs(self) -> list[tuple[str, int]]:
        """Every ``(encoding, seed)`` to train, in the order the records are kept."""
        return [(encoding, seed) for encoding in self.encodings for seed in range(self.n_seeds)]

    def steps_per_model(self) -> int:
        """Optimizer steps each model takes (the protocol's count)."""
        return self.protocol_object.steps(self)

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

        A saved ``n_symbols`` of 10 for a task whose vocabulary is fixed is read as None: 10 is
        the default such a task never used, and a ``config.json`` may hold it.

        Raises:
            ValueError: naming them, for missing keys and keys that are not settings; and
                what the class raises.
        """
        fields = check_keys("config", d, [f.name for f in dataclasses.fields(cls)], complete=True)
        task = fields["task"]
        if fields["n_symbols"] == 10 and isinstance(task, str) and task in TASKS and not task_named(task).takes_symbols:
            fields = {**fields, "n_symbols": None}
        return cls(**fields)


#: overrides for ``--quick``: one seed, half the data, 640 steps at a higher rate (under a minute on 2 cores).
QUICK: dict[str, Any] = {"n_seeds": 1, "epochs": 10, "n_train": 2048, "n_test": 128, "lr": 4e-3}


@dataclass
class CompareResult:
    """What :func:`run_compare` measured: ``records`` (one dict per encoding, seed and length)."""

    config: CompareConfig
    records: list[dict[str, Any]]
    seconds: float
    folder: Path | None = None
    seconds_per_model: dict[str, float] = field(default_factory=dict)
    parameters_per_model: dict[str, int] = field(default_factory=dict)
    device: str = "cpu"  # where the models trained (this call's; a resumed comparison's earlier ones may differ)

    @property
    def metric(self) -> str:
        """The headline metric: the protocol's (sequence or token accuracy), or MSE for the squares."""
        return self.config.metric
