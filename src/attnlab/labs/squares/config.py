"""The squares lab's settings: :class:`SquaresConfig`, what ``config.json`` holds.

Its defaults are the labs' procedure, so that ``attnlab train`` trains as the
positional-encoding lab and the attention lab do (their seeds, the book's
``set_seed(42)``, their loaders' random draws); every setting is checked when the
config is made, and nothing is built: the model, and the sizes it refuses, are
:mod:`attnlab.labs.squares.train`'s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from attnlab._limits import check_memory
from attnlab._validate import (
    check_bool,
    check_choice,
    check_finite_float,
    check_float32,
    check_int,
    check_keys,
    check_seed,
)
from attnlab.labs.squares.models import SIZE_NAMES, SQUARES_MODELS, squares_sizes

__all__ = ["DEFAULT_WEIGHT_SEED", "LAB_WEIGHT_SEEDS", "UNSEEDED_LOADER_SEED", "SquaresConfig"]

#: ``torch.Generator().initial_seed()``: what a DataLoader given an unseeded generator shuffles with
#: (``--train-seed`` of a run that skips the book's ``set_seed(42)``).
UNSEEDED_LOADER_SEED = 67280421310721
#: the seed each lab sets before building its model: the positional-encoding lab's
#: ``torch.manual_seed(43)``, the attention lab's ``torch.manual_seed(23)``
LAB_WEIGHT_SEEDS = {"selfattn-pe": 43, "gru-attn": 23}
#: the initial-weights seed of the models no lab trains (gru, transformer)
DEFAULT_WEIGHT_SEED = 43
#: the kinds of device a squares run trains on
DEVICE_TYPES = ("cpu", "cuda", "mps")
#: memory one square takes while the data is made (numpy's float64 draws and the float32 tensors), rounded up
_BYTES_PER_SQUARE = 256


@dataclass(frozen=True)
class SquaresConfig:
    """Every setting of a squares run; written to ``config.json``.

    Defaults are the labs' procedure: Adam with lr 0.01, 100 epochs, batches of
    16 from 128 squares; the model initialised after ``torch.manual_seed(seed)``
    (the lab's own seed for its model: 43 for ``selfattn-pe``, 23 for ``gru-attn``),
    then, as the book's ``StepByStep.train(n_epochs, seed=42)`` does,
    ``set_seed(train_seed=42)`` before the first epoch: torch's and Python's
    generators and the training loader's, all to 42; and a test loader that draws
    from torch's global generator at every validation pass, as the labs' does.
    The sizes (``d_model``, ``n_heads``, ``n_layers``, ``ff_units``) left None take the
    model's defaults (:func:`attnlab.labs.squares.models.squares_sizes`) and are stored
    resolved; a size the model does not have must stay None. ``device`` None is
    :func:`attnlab.training.default_device` (cuda, else mps, else cpu), stored as
    its name; it records where the run trained, not where it must run: a resume
    may train on another device, and ``predict``/``plot`` load the weights on CPU.

    Raises:
        TypeError / ValueError: naming the setting, for an unknown model, a count
            or size below 1, a size the model does not have, a non-positive ``lr`` or
            a ``teacher_forcing_prob`` outside [0, 1], ``threads`` below 1, a ``device`` that is not a
            cpu, cuda or mps device name (whether this machine has it is not checked), or an ``encoding``
            that takes its positions from the task (abacus, coupling: the squares have none). The sizes the
            model itself refuses (``d_model`` not divisible by ``n_heads``), and a model too large for
            the memory, are refused where it is built (:func:`attnlab.labs.squares.train.check_model`).
    """

    model: str = "selfattn-pe"  # one of SQUARES_MODELS
    epochs: int = 100  # total epochs (with --resume: train until this many)
    # torch.manual_seed before the model is built (its initial weights); None: the lab's
    # own for that model (LAB_WEIGHT_SEEDS), stored resolved.
    seed: int | None = None
    # Seeds the shuffling, teacher forcing and dropout before the first epoch, as the
    # book's set_seed(42) does. The positional-encoding lab's tiny model is very
    # sensitive to it (see the README).
    train_seed: int = 42
    lr: float = 0.01  # Adam learning rate
    batch_size: int = 16
    # Validation batches, the labs' 16: the GRU models draw a teacher-forcing coin per
    # step in every forward, validation's included, so the batch count moves the coins.
    eval_batch_size: int = 16
    n_train: int = 128  # training squares, generated with data seed 13
    n_test: int = 128  # test squares, generated with data seed 19
    teacher_forcing_prob: float = 0.5  # GRU models only (the attention lab)
    # The labs' test loader has no generator: each validation pass draws one number from
    # torch's global generator, which moves the GRU models' later coin flips. True does the
    # same, so the attention lab's run is matched epoch by epoch; False gives the test
    # loader a generator of its own (validation then changes nothing in training).
    test_draws_global: bool = True
    # Squares of 2 to 4 given corners (the book's variable_len generator), right-padded and
    # masked; the model predicts the two corners that follow (attnlab.data.SquarePrefixes).
    variable_len: bool = False
    d_model: int | None = None
    n_heads: int | None = None
    n_layers: int | None = None
    ff_units: int | None = None
    # Where the run trains ("cpu", "cuda", "cuda:1", "mps"); None: the default device, stored resolved.
    device: str | None = None
    # The transformer model's positional encoding (a name or "module:Class") and attention path; None for the
    # other models, which have no such choice; stored resolved ("sinusoidal", "auto") for the transformer.
    encoding: str | None = None
    backend: str | None = None
    # Intra-op threads the run computes on (--threads); None: attnlab.training.threads' rule, by the work of a step
    # (one thread for every model here at the labs' sizes). Like device, it says how the run trained, and a resume
    # may use another.
    threads: int | None = None

    def __post_init__(self) -> None:
        defaults = squares_sizes(check_choice("model", self.model, SQUARES_MODELS))
        for name in SIZE_NAMES:
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, defaults.get(name))
            elif name not in defaults:
                has = ", ".join(defaults)
                raise ValueError(f"{name}: the {self.model} model has no such size (its sizes: {has})")
            else:
                check_int(name, value, minimum=1)
        check_int("epochs", self.epochs, minimum=1)
        if self.threads is not None:
            check_int("threads", self.threads, minimum=1)
        object.__setattr__(self, "device", _device_name(self.device))
        self._resolve_position()
        if self.seed is None:
            object.__setattr__(self, "seed", LAB_WEIGHT_SEEDS.get(self.model, DEFAULT_WEIGHT_SEED))
        check_seed("seed", self.seed)
        check_bool("test_draws_global", self.test_draws_global)
        check_bool("variable_len", self.variable_len)
        check_seed("train_seed", self.train_seed)
        if self.train_seed < 0:  # it also seeds the training loader's generator, which takes no negative seed
            raise ValueError(f"train_seed must be >= 0 (it seeds the loaders' shuffling), got {self.train_seed}")
        check_float32("lr", self.lr, positive=True)  # the parameters it updates are float32
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("eval_batch_size", self.eval_batch_size, minimum=1)
        for name in ("n_train", "n_test"):
            n = check_int(name, getattr(self, name), minimum=1)
            check_memory(f"{name} {n}: the squares", n * _BYTES_PER_SQUARE)
        p = check_finite_float("teacher_forcing_prob", self.teacher_forcing_prob)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"teacher_forcing_prob must be in [0, 1], got {p}")

    def _resolve_position(self) -> None:
        """The transformer's ``encoding`` and ``backend`` resolved; refused for a model that has no such choice."""
        if self.model != "transformer":
            for name in ("encoding", "backend"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} {getattr(self, name)!r}: the {self.model} model has no choice of "
                                     "encoding or backend (the transformer model has)")
            return
        from attnlab.attention.backends.choose import BACKENDS  # here: the config module stays light to import
        from attnlab.encodings.registry import spec_name, task_positions

        # None means the default; an empty or blank name is a mistake (it used to train sinusoidal, recorded as such).
        for name in ("encoding", "backend"):
            value = getattr(self, name)
            if isinstance(value, str) and not value.strip():
                raise ValueError(f"{name} must name one (or be left out for the default), got {value!r}")
        encoding = spec_name(self.encoding if self.encoding is not None else "sinusoidal")
        object.__setattr__(self, "encoding", encoding)
        # The points have no task structure to number them by: refused with the settings, before a run folder exists.
        rule = task_positions(encoding)
        if rule is not None:
            raise ValueError(f"encoding {encoding!r} takes its positions from the task ({rule!r}: each digit's "
                             "place in its number), and the squares have none; use one that numbers the points in "
                             "order (sinusoidal, rotary, alibi, ...)")
        backend = self.backend if self.backend is not None else "auto"
        object.__setattr__(self, "backend", check_choice("backend", backend, BACKENDS))

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict, as ``config.json`` holds them."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SquaresConfig:
        """The config a :meth:`to_dict` dict (e.g. a run's ``config.json``) describes.

        The dict must hold every setting, the sizes resolved as :meth:`to_dict`
        writes them: a run's settings are never filled in with today's defaults.

        Raises:
            ValueError: naming them, for missing keys, keys that are not settings, and
                a size left null that the model has; and what the class raises for a bad value.
        """
        config = cls(**check_keys("config", d, [f.name for f in dataclasses.fields(cls)], complete=True))
        if d["seed"] is None:
            raise ValueError("config has 'seed' null (a run's config holds its seed resolved)")
        for name in SIZE_NAMES:
            if d[name] is None and getattr(config, name) is not None:
                raise ValueError(f"config has {name!r} null, but the {config.model} model has that size "
                                 "(a run's config holds its sizes resolved)")
        return config


def _device_name(device: Any) -> str:
    """``device`` as a device's name (``"cpu"``, ``"cuda:1"``); None: the default device's."""
    if device is None:
        from attnlab.training import default_device  # here: the config module stays light to import

        return str(default_device())
    if not isinstance(device, str):
        raise TypeError(f"device must be a device name such as 'cpu' or 'cuda', got {type(device).__name__}")
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device {device!r} is not a device name (cpu, cuda, cuda:N or mps)") from None
    if parsed.type not in DEVICE_TYPES:
        raise ValueError(f"device {device!r}: squares runs train on {', '.join(DEVICE_TYPES)}, not {parsed.type}")
    return "cpu" if parsed.type == "cpu" else str(parsed)
