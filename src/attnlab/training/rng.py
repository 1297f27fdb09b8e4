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
from typing import Any

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


def check_rng_state(state: Any, where: str) -> None:
    """Check the layout :func:`get_rng_state` writes, before anything is restored.

    Raises:
        ValueError: naming ``where`` and the first thing that is wrong.
    """

    def byte_tensor(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.dtype == torch.uint8

    ok = (
        isinstance(state, dict)
        and byte_tensor(state.get("torch"))
        and isinstance(state.get("cuda"), list)
        and all(byte_tensor(t) for t in state["cuda"])
        and isinstance(state.get("python"), list)
        and len(state["python"]) == 3
        and isinstance(state["python"][0], int)
        and isinstance(state["python"][1], list)
        and all(isinstance(i, int) for i in state["python"][1])
        and isinstance(state.get("loaders"), dict)
        and all(isinstance(v, list) and all(byte_tensor(t) for t in v) for v in state["loaders"].values())
    )
    if not ok:
        raise ValueError(f"{where}: the random-number state 'rng' is malformed")


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
