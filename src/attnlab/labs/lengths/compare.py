"""The comparison: every ``(encoding, seed)`` model of the length-generalisation lab, in a run folder.

:func:`run_compare` trains the models of a :class:`~attnlab.labs.lengths.config.CompareConfig`
(each through :func:`~attnlab.labs.lengths.train.train_one`; here, in local worker
processes or on a Ray cluster: :mod:`attnlab.labs.sweep`) and keeps each as soon as
it comes back, from this process alone. The run folder (the contract of
:mod:`attnlab.labs.run_folder`)::

    attnlab-run.json     the folder's kind ("compare"), written first
    config.json          the settings
    models/ENC-seedK/    each finished model: record.json (its records, size, time), weights.pt
    results.json         every record, once all models are done; then the figures and report.html
                         (see :mod:`attnlab.labs.lengths.report`)

A comparison killed at any moment keeps every finished model; ``resume`` trains
only the missing ones. Each model depends only on the settings, its encoding and
its seed (its weights, its batches), so the records of a resumed comparison are
bit-identical to an unbroken one's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import torch

from attnlab._io import atomic_write, read_text
from attnlab._validate import check_int
from attnlab.encodings.registry import import_location
from attnlab.labs import sweep
from attnlab.labs.lengths.config import CompareConfig, CompareResult
from attnlab.labs.lengths.report import write_outputs
from attnlab.labs.lengths.train import ModelResult
from attnlab.labs.run_folder import RunFolder, check_claim, claim
from attnlab.labs.sweep import connect_ray

__all__ = ["CompareResult", "check_compare_folder", "resume_config", "run_compare"]


# -- the run folder ----------------------------------------------------------------------


def _model_folder(folder: Path, encoding: str, seed: int) -> Path:
    return folder / "models" / f"{encoding}-seed{seed}"


def _save_model(folder: Path, result: ModelResult) -> None:
    """Weights first, then the record: a model folder with a record.json is a finished model."""
    path = _model_folder(folder, result.encoding, result.seed)
    path.mkdir(parents=True, exist_ok=True)
    atomic_write(path / "weights.pt", lambda tmp: torch.save(result.state_dict, tmp))
    doc = {"encoding": result.encoding, "seed": result.seed, "seconds": result.seconds,
           "n_parameters": result.n_parameters, "records": result.records}
    atomic_write(path / "record.json", lambda tmp: tmp.write_text(json.dumps(doc, indent=2) + "\n"))


def _saved_model(folder: Path, encoding: str, seed: int) -> dict[str, Any] | None:
    path = _model_folder(folder, encoding, seed) / "record.json"
    if not os.path.lexists(path):
        return None
    text = read_text(path, what="record.json")
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
            raise ValueError("no records")
    except ValueError as err:
        raise ValueError(f"--resume: {str(path)!r} is unreadable ({err}); delete it to train that model again") \
            from None
    return doc


def _read_config(folder: Path) -> CompareConfig | None:
    """The folder's settings: ``config.json`` (or, in a folder an older attnlab wrote, ``results.json``'s)."""
    path = folder / "config.json"
    legacy = not os.path.lexists(path)
    if legacy:
        path = folder / "results.json"
        if not os.path.lexists(path):
            return None
    text = read_text(path, what=path.name)  # a FIFO or a device is refused unopened, bad UTF-8 named
    try:
        doc = json.loads(text)
        if legacy:  # an older attnlab called n_seeds "seeds"
            doc = {("n_seeds" if k == "seeds" else k): v for k, v in doc["config"].items()}
        _check_imports(folder, doc)
        return CompareConfig.from_dict(doc)
    except (ValueError, TypeError, KeyError) as err:
        raise ValueError(f"--resume {str(folder)!r}: {path.name} is unreadable: {err}") from None


def _check_imports(folder: Path, doc: Any) -> None:
    """Refuse a saved ``"module:Class"`` encoding whose module would be imported from inside the run folder.

    Resuming imports the modules a config names (their code runs): from the environment
    only, never from a folder that came with the results.
    """
    encodings = doc.get("encodings") if isinstance(doc, dict) else None
    for encoding in encodings if isinstance(encodings, list) else []:
        where = import_location(encoding) if isinstance(encoding, str) else None
        if where is not None and where.resolve().is_relative_to(folder.resolve()):
            raise ValueError(f"--resume {str(folder)!r}: encoding {encoding!r} would be imported from {str(where)!r}, "
                             "inside the run folder; attnlab imports a scheme's module from the environment only "
                             "(install it, or put it on PYTHONPATH outside the folder)")


def check_compare_folder(folder: str | os.PathLike[str], *, resume: bool = False) -> Path:
    """Check, writing nothing, that a comparison can be written (or resumed) in ``folder``; returns it resolved.

    Raises:
        ValueError: naming ``--out`` and the folder, for a folder the run-folder
            contract refuses (see :mod:`attnlab.labs.run_folder`).
    """
    return check_claim(folder, kind="compare", resume=resume)


def resume_config(folder: str | os.PathLike[str], given: dict[str, Any]) -> CompareConfig:
    """The settings of the comparison in ``folder``, which ``given`` ones (None: not given) must agree with.

    Raises:
        ValueError: naming the settings that differ, for an unreadable config, or a
            folder that holds no comparison.
    """
    saved = _read_config(check_compare_folder(folder, resume=True))
    given = {k: v for k, v in given.items() if v is not None}
    if saved is None:  # killed before its config was written
        return CompareConfig(**given)
    config = dataclasses.replace(saved, **given)
    if config != saved:
        diff = ", ".join(f"{k}: saved {v!r}, given {getattr(config, k)!r}"
                         for k, v in saved.to_dict().items() if config.to_dict()[k] != v)
        raise ValueError(f"--resume: the comparison in {str(folder)!r} was made with other settings ({diff})")
    return config


def run_compare(
    config: CompareConfig,
    folder: str | os.PathLike[str] | None = None,
    *,
    resume: bool = False,
    progress: bool | None = None,
    announce: Callable[[], None] | None = None,
    jobs: int = 1,
    ray_address: str | None = None,
    device: torch.device | str | None = None,
) -> CompareResult:
    """Train one model per encoding and seed, score every test length, and write the folder.

    Where the models train (:mod:`attnlab.labs.sweep`): in this process (``jobs=1``), in
    ``jobs`` local worker processes, or as tasks on the Ray cluster at ``ray_address``.
    The records are the same, bit for bit, wherever they train; results are saved by
    this process alone, each as it comes back.

    Args:
        config: the settings.
        folder: the run folder (see the module's doc): new, empty, or (``resume``)
            a comparison of the same settings. None writes nothing.
        resume: train only the models ``folder`` does not hold yet; a complete
            folder has its results, figures and report written again.
        progress: one bar over all the models' training steps (None: when stderr is a terminal).
        announce: called once everything is checked (the folder, the saved models), just
            before the first model trains; the command line says what it is doing there.
        jobs: local worker processes (1: train here, one model after another).
        ray_address: train on this Ray cluster instead (``ray.init``'s address: ``auto``,
            ``ray://host:port``, or ``local`` for a private instance on this machine).
        device: where each model trains; None: cuda if available, else mps, else cpu.
            Recorded in ``results.json``; not a setting (a comparison may resume elsewhere).

    Returns:
        The :class:`CompareResult`.

    Raises:
        ValueError: for a folder the contract refuses (checked before any training),
            a comparison of other settings (``resume``), a saved model that is unreadable,
            ``jobs`` below 1, or both ``jobs > 1`` and ``ray_address``.
        TypeError: if ``progress`` is not None, True or False.
        ModuleNotFoundError: for ``ray_address`` without Ray installed (naming the extra).
        ConnectionError: if no Ray cluster answers at ``ray_address`` (before any training).
        ChildProcessError: if a worker process died, or a Ray task failed after its retries
            (the finished models are kept).
    """
    from attnlab.training.progress import check_progress

    check_progress(progress)
    jobs = check_int("jobs", jobs, minimum=1)
    if ray_address is not None and jobs > 1:
        raise ValueError(f"jobs={jobs} and ray_address={ray_address!r}: choose local workers or a Ray cluster")
    from attnlab.training import default_device

    where = str(torch.device(device) if device is not None else default_device())
    place = partial(_executor, jobs=jobs, ray_address=ray_address, device=where)
    if folder is None:
        return _compare(config, None, progress, announce, {}, place, where)
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if resume:
        resume_config(folder, config.to_dict())  # refuses other settings, naming the differences
        path = check_compare_folder(folder, resume=True)
        # Every saved model is read before the folder is touched: an unreadable one is named
        # while the folder is still as it was.
        for encoding, seed in config.runs():
            saved = _saved_model(path, encoding, seed)
            if saved is not None:
                done[encoding, seed] = saved
    else:
        check_compare_folder(folder)
    if ray_address is not None:
        connect_ray(ray_address)  # an unreachable cluster is named before the folder is touched
    with claim(folder, kind="compare", resume=resume) as run:
        run.write_json("config.json", config.to_dict())
        return _compare(config, run, progress, announce, done, place, where)


def _executor(config: CompareConfig, todo: list[tuple[str, int]], bar: Any, *, jobs: int,
              ray_address: str | None, device: str) -> Iterator[ModelResult]:
    """The runs ``todo``, trained where the caller asked, in the order they finish."""
    if ray_address is not None:
        connect_ray(ray_address)
        return sweep.ray_tasks(config, todo, bar, address=ray_address, device=device)
    if jobs > 1 and len(todo) > 1:  # one model left: no worker to start
        return sweep.local_workers(config, todo, bar, jobs=jobs, device=device)
    return sweep.in_process(config, todo, bar, device=device)


def _compare(config: CompareConfig, run: RunFolder | None, progress: bool | None,
             announce: Callable[[], None] | None, done: dict[tuple[str, int], dict[str, Any]],
             place: Callable[..., Iterator[ModelResult]], device: str) -> CompareResult:
    """Train the models not in ``done`` (the saved ones, by ``(encoding, seed)``) and write the outputs."""
    from tqdm import tqdm

    from attnlab.training.progress import progress_enabled

    start = time.perf_counter()
    todo = [key for key in config.runs() if key not in done]
    if announce is not None:
        announce()
    with tqdm(total=config.steps_per_model() * len(todo), desc=f"compare {config.task}", unit="step",
              disable=not progress_enabled(progress), dynamic_ncols=True, leave=True) as bar:
        for result in place(config, todo, bar):
            encoding, seed = result.encoding, result.seed
            if run is not None:
                _save_model(run.path, result)
            done[encoding, seed] = {"records": result.records, "seconds": result.seconds,
                                    "n_parameters": result.n_parameters}
    records = [r for key in config.runs() for r in done[key]["records"]]
    timings = {f"{encoding}/{seed}": float(done[encoding, seed]["seconds"]) for encoding, seed in config.runs()}
    sizes = {f"{encoding}/{seed}": int(done[encoding, seed].get("n_parameters", 0)) for encoding, seed in config.runs()}
    compared = CompareResult(config, records, time.perf_counter() - start, None if run is None else run.path, timings,
                             sizes, device)
    if run is not None:
        write_outputs(run, compared)
    return compared
