"""Random-number state: seeding a run, and saving and restoring it so a resumed run continues exactly.

A training run draws random numbers from three places: torch's global
generator (dropout, weight noise, and the per-epoch seed a ``DataLoader`` draws
when it has no generator of its own), the CUDA generators on a GPU, and the
loaders' own ``torch.Generator`` (shuffling, when the loader was given
``generator=``). Python's :mod:`random` is saved too, for models and datasets
that use it. numpy's global generator is neither seeded nor saved: the trainer
never draws from it, and touching it would change code that is not ours.

The state is kept as plain data (byte tensors, ints, lists) so that checkpoints
load with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn

import torch

__all__ = ["check_rng_state", "get_rng_state", "loader_generators", "preserved_rng", "seed_all",
           "set_rng_state"]


def loader_generators(loader: Any) -> list[torch.Generator]:
    """The ``torch.Generator`` objects that drive a loader's shuffling, without duplicates.

    ``DataLoader(..., shuffle=True, generator=g)`` keeps ``g`` both as
    ``loader.generator`` and as ``loader.sampler.generator``; a loader built on
    ``batch_sampler=BatchSampler(RandomSampler(..., generator=g))`` keeps it one
    level deeper. All three places are looked at; each generator is listed once.

    Args:
        loader: a ``DataLoader``, any iterable of batches, or None.

    Returns:
        The generators, in a fixed order (empty for None or a plain iterable).
    """
    if loader is None:
        return []
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    candidates = (
        getattr(loader, "generator", None),
        getattr(sampler, "generator", None),
        getattr(getattr(batch_sampler, "sampler", None), "generator", None),
    )
    found: list[torch.Generator] = []
    for generator in candidates:
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


def seed_all(seed: int, loader: Any = None) -> None:
    """Seed torch (CPU and every CUDA device), Python's ``random`` and ``loader``'s generators.

    cudnn flags are left alone (the book switched them globally); for bitwise
    reproducible GPU runs call ``torch.use_deterministic_algorithms(True)`` yourself.
    """
    torch.manual_seed(seed)
    random.seed(seed)
    for generator in loader_generators(loader):
        generator.manual_seed(seed)


def get_rng_state(loaders: Mapping[str, Any]) -> dict[str, Any]:
    """Snapshot every random stream a training run draws from.

    Args:
        loaders: the loaders whose generators are saved, by name (``"train"``, ``"val"``).

    Returns:
        ``{"torch": ByteTensor, "cuda": [ByteTensor, ...], "python": [version,
        [int, ...], gauss_next], "loaders": {name: [ByteTensor, ...]}}``, plain data only.
    """
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
        "python": [version, list(internal), gauss_next],
        "loaders": {name: [g.get_state() for g in loader_generators(loader)]
                    for name, loader in loaders.items()},
    }


#: bytes of a CUDA generator's state: its Philox seed and offset, 8 bytes each (torch >= 1.13)
CUDA_STATE_BYTES = 16
#: Python's ``random.getstate()``: version 3, the Mersenne Twister's 624 32-bit words and its position
PYTHON_STATE_VERSION, PYTHON_STATE_WORDS = 3, 624


def _byte_state(value: Any, n_bytes: int, whose: str) -> str | None:
    """What is wrong with ``value`` as a generator state of ``n_bytes`` bytes (None if nothing).

    torch's setters read the state as raw bytes; they check the count but not every layout,
    so a state is refused here unless it is exactly what a getter returns.
    """
    if not isinstance(value, torch.Tensor):
        return f"a {type(value).__name__}, not a byte tensor"
    if value.dtype != torch.uint8 or value.dim() != 1 or value.layout != torch.strided or not value.is_contiguous():
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}, not a contiguous 1-D byte tensor"
    if value.numel() != n_bytes:
        return f"{value.numel()} bytes, where {whose} state is {n_bytes}"
    return None


def _python_state(value: Any) -> tuple[str, str] | None:
    """``(sub-entry, problem)`` for a malformed ``random.getstate()`` layout, None if it is right."""
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        return "", "not [version, words, gauss_next]"
    version, words, gauss_next = value
    if type(version) is not int or version != PYTHON_STATE_VERSION:
        return "[0]", f"{version!r} is not version {PYTHON_STATE_VERSION}"
    if not isinstance(words, (list, tuple)) or len(words) != PYTHON_STATE_WORDS + 1:
        count = f"{len(words)} ints" if isinstance(words, (list, tuple)) else f"a {type(words).__name__}"
        return "[1]", f"{count}, not {PYTHON_STATE_WORDS + 1} (the generator's words and its position)"
    for i, word in enumerate(words[:-1]):
        if type(word) is not int or not 0 <= word < 2**32:
            return f"[1][{i}]", f"{word!r} is not an int in [0, 2**32)"
    position = words[-1]
    if type(position) is not int or not 0 <= position <= PYTHON_STATE_WORDS:
        return f"[1][{PYTHON_STATE_WORDS}]", f"{position!r} is not a position in [0, {PYTHON_STATE_WORDS}]"
    if gauss_next is not None and type(gauss_next) is not float:
        return "[2]", f"{gauss_next!r} is not None or a float"
    return None


def check_rng_state(state: Any, where: str) -> None:
    """Check a :func:`get_rng_state` snapshot, types and sizes, before anything is restored.

    torch's CPU state must be exactly ``torch.get_rng_state().numel()`` bytes, each
    CUDA state 16 (or what this machine's CUDA generator says), each loader's
    generator state as long as a ``torch.Generator().get_state()``; Python's state is
    version 3 with 624 words in ``[0, 2**32)``, a position in ``[0, 624]`` and
    ``gauss_next`` None or a float.

    Raises:
        ValueError: ``"{where}: the random-number state rng[...]: ..."``, naming the first
            entry that is wrong and how.
    """

    def refuse(entry: str, problem: str) -> NoReturn:
        raise ValueError(f"{where}: the random-number state rng{entry}: {problem}")

    if not isinstance(state, dict):
        refuse("", f"a {type(state).__name__}, not a dict")
    for key in ("torch", "cuda", "python", "loaders"):
        if key not in state:
            refuse("", f"lacks {key!r}")
    for key in state:
        if key not in ("torch", "cuda", "python", "loaders"):
            refuse("", f"unknown key {key!r}")
    problem = _byte_state(state["torch"], torch.get_rng_state().numel(), "torch's CPU generator")
    if problem:
        refuse("['torch']", problem)
    if not isinstance(state["cuda"], list):
        refuse("['cuda']", f"a {type(state['cuda']).__name__}, not a list")
    cuda_bytes = torch.cuda.get_rng_state().numel() if torch.cuda.is_available() else CUDA_STATE_BYTES
    for i, cuda_state in enumerate(state["cuda"]):
        problem = _byte_state(cuda_state, cuda_bytes, "a CUDA generator's")
        if problem:
            refuse(f"['cuda'][{i}]", problem)
    wrong = _python_state(state["python"])
    if wrong:
        refuse(f"['python']{wrong[0]}", wrong[1])
    loaders = state["loaders"]
    if not isinstance(loaders, dict):
        refuse("['loaders']", f"a {type(loaders).__name__}, not a dict")
    generator_bytes = torch.Generator().get_state().numel()
    for name, states in loaders.items():
        if not isinstance(name, str) or not isinstance(states, list):
            refuse(f"['loaders'][{name!r}]", "not a list of generator states under a loader's name")
        for i, generator_state in enumerate(states):
            problem = _byte_state(generator_state, generator_bytes, "a torch.Generator's")
            if problem:
                refuse(f"['loaders'][{name!r}][{i}]", problem)


def set_rng_state(state: dict[str, Any], loaders: Mapping[str, Any]) -> None:
    """Restore a :func:`get_rng_state` snapshot.

    CUDA states are restored only on a machine with the same number of CUDA
    devices. A loader whose generators do not match the snapshot (one was given
    ``generator=``, the other not) cannot be restored; that is warned about,
    since the resumed run will then shuffle differently.

    Args:
        state: the snapshot.
        loaders: the loaders to restore, by the names used when saving.
    """
    # map_location may have put the byte tensors on a GPU; the setters want CPU tensors.
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = state["cuda"]
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    for name, loader in loaders.items():
        saved = state["loaders"].get(name, [])
        generators = loader_generators(loader)
        if len(saved) != len(generators):
            warnings.warn(
                f"the {name} loader has {len(generators)} shuffling generator(s) but the checkpoint saved "
                f"{len(saved)}; its shuffling is not restored (build the loader with generator= as before)",
                RuntimeWarning,
                stacklevel=3,
            )
            continue
        for generator, generator_state in zip(generators, saved, strict=True):
            generator.set_state(generator_state.cpu())


@contextmanager
def preserved_rng(loaders: Mapping[str, Any]) -> Iterator[None]:
    """Run a block without changing any random stream as seen by the code that follows it."""
    state = get_rng_state(loaders)
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # same loaders, so nothing to warn about
            set_rng_state(state, loaders)
