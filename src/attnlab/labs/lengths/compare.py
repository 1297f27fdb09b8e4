"""The comparison: every ``(encoding, seed)`` model of the length-generalisation lab, in a run folder.

:func:`run_compare` trains the models of a :class:`~attnlab.labs.lengths.config.CompareConfig`
(each through :func:`~attnlab.labs.lengths.train.train_one`; here, in local worker
processes or on a Ray cluster: :mod:`attnlab.labs.lengths.sweep`) and keeps each as soon as
it comes back, from this process alone. The run folder (the contract of
:mod:`attnlab.labs.run_folder`)::

    attnlab-run.json     the folder's kind ("compare"), written first
    config.json          the settings
    models/ENC-seedK/    each finished model: record.json (its records, size, time), weights.pt
    results.json         every record, once all models are done; then the figures and report.html
                         (see :mod:`attnlab.labs.lengths.report`)

The models of one encoding train ``group_size`` seeds at a time as one computation
(:func:`~attnlab.labs.lengths.train.train_seeds`), each with the records it gets alone;
a group is what a worker or a Ray task takes. A comparison killed at any moment keeps
every finished model; ``resume`` trains only the missing ones (grouped in turn). Each
model depends only on the settings, its encoding and its seed (its weights, its
batches), so the records of a resumed comparison are bit-identical to an unbroken one's.

A run is all-or-nothing: the sizes each scheme refuses
(:func:`~attnlab.labs.lengths.train.check_models`), each encoding's first step on one batch (a loss
that is not finite at the initial weights, a path the device cannot train on:
:func:`~attnlab.labs.lengths.train.check_first_steps`), everything a resume reads (the settings,
every saved model, :mod:`attnlab.labs.lengths.saved`) and every path it writes (no link below
the folder, no folder where a file goes) are checked before anything in the folder is written,
so a refused run leaves the folder, ``results.json`` included, as it was. Every write goes
through :meth:`~attnlab.labs.run_folder.RunFolder.file`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import torch

from attnlab._validate import check_int
from attnlab.labs.lengths import sweep
from attnlab.labs.lengths.config import CompareConfig, CompareResult
from attnlab.labs.lengths.report import output_names, write_outputs
from attnlab.labs.lengths.saved import MODELS, check_model_record, model_name, read_config, saved_models
from attnlab.labs.lengths.train import ModelResult, check_first_steps, check_models
from attnlab.labs.run_folder import ENVIRONMENT, RunFolder, check_claim, check_files, claim, environment
from attnlab.training.checkpoint import write_checkpoint

__all__ = ["CompareResult", "check_compare", "check_compare_folder", "groups", "resume_config", "run_compare"]


# -- the run folder ----------------------------------------------------------------------


def _save_model(run: RunFolder | None, config: CompareConfig, result: ModelResult) -> dict[str, Any]:
    """Check a trained model's record, then save it: weights first, then the record (a model folder with a
    record.json is a finished model). Returns the record.

    It is checked by the validator a resume reads it with, so what is saved can always be resumed.
    """
    doc = {"encoding": result.encoding, "seed": result.seed, "seconds": result.seconds,
           "n_parameters": result.n_parameters, "records": result.records}
    name = model_name(result.encoding, result.seed)
    check_model_record(doc, config=config, encoding=result.encoding, seed=result.seed, what=f"the record of {name}")
    if run is not None:
        # Through a file object, as train's checkpoints: a full disk is an OSError (one line), where
        # torch.save to a path raises a RuntimeError from C++.
        write_checkpoint(run.file(MODELS, name, "weights.pt"), result.state_dict)
        run.write_json(f"{MODELS}/{name}/record.json", doc)
    return doc


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
    return _resumed(check_compare_folder(folder, resume=True), given, shown=folder)


def _resumed(path: Path, given: dict[str, Any], *, shown: str | os.PathLike[str]) -> CompareConfig:
    """:func:`resume_config` of the resolved folder ``path`` (``shown``: as the user named it)."""
    saved = read_config(path)
    given = {k: v for k, v in given.items() if v is not None}
    if saved is None:  # killed before its config was written
        return CompareConfig(**given)
    config = dataclasses.replace(saved, **given)
    if config != saved:
        diff = ", ".join(f"{k}: saved {v!r}, given {getattr(config, k)!r}"
                         for k, v in saved.to_dict().items() if config.to_dict()[k] != v)
        raise ValueError(f"--resume: the comparison in {str(shown)!r} was made with other settings ({diff})")
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

    Where the models train (:mod:`attnlab.labs.lengths.sweep`): in this process (``jobs=1``), in
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
        ValueError: for sizes a scheme refuses, a folder the contract refuses, a comparison of
            other settings (``resume``), a saved model that is unreadable or invalid, a link below
            the folder (all checked before anything is written: :func:`check_compare`),
            ``jobs`` below 1, or both ``jobs > 1`` and ``ray_address``.
        TypeError: if ``progress`` is not None, True or False.
        ModuleNotFoundError: for ``ray_address`` without Ray installed (naming the extra).
        ConnectionError: if no Ray cluster answers at ``ray_address`` (before any training).
        ChildProcessError: if a worker process died, or a Ray task failed after its retries
            (the finished models are kept).
    """
    from attnlab.training.callbacks import check_progress

    check_progress(progress)
    jobs = check_int("jobs", jobs, minimum=1)
    if ray_address is not None and jobs > 1:
        raise ValueError(f"jobs={jobs} and ray_address={ray_address!r}: choose local workers or a Ray cluster")
    from attnlab.training import default_device

    where = str(torch.device(device) if device is not None else default_device())
    place = partial(_executor, jobs=jobs, ray_address=ray_address, device=where)
    if folder is None:
        check_models(config)
        check_first_steps(config, device=where)
        return _compare(config, None, progress, announce, {}, place, where)
    check_compare(config, folder, resume=resume)  # all of it, before anything in the folder is written
    check_first_steps(config, device=where)  # one batch through each fresh model: its first step's faults
    if ray_address is not None:
        sweep.connect_ray(ray_address)  # an unreachable cluster is named before the folder is touched
    with claim(folder, kind="compare", resume=resume) as run:
        done = _checked(config, run.path, resume=resume, shown=folder)  # again, under the lock: another
        # writer may have been there in between
        run.write_json("config.json", config.to_dict())
        run.write_json(ENVIRONMENT, environment(device=where, threads=config.threads if config.threads is not None
                                                else "per model, by the thread rule (attnlab.training.threads)"))
        return _compare(config, run, progress, announce, done, place, where)


def check_compare(config: CompareConfig, folder: str | os.PathLike[str], *,
                  resume: bool) -> dict[tuple[str, int], dict[str, Any]]:
    """Check, writing nothing, everything :func:`run_compare` of ``config`` in ``folder`` reads and writes.

    The sizes each scheme refuses (:func:`~attnlab.labs.lengths.train.check_models`), the folder
    (:func:`check_compare_folder`), the saved settings (``resume``: those of ``config``), every
    finished model (:func:`attnlab.labs.lengths.saved.saved_models`), and every path the
    comparison writes: no link below the folder, no folder where a file goes.

    Returns:
        The finished models, ``{(encoding, seed): record}``: what a resume does not train.

    Raises:
        ValueError: naming the first problem, and the path.
    """
    check_models(config)
    return _checked(config, check_compare_folder(folder, resume=resume), resume=resume, shown=folder)


def _checked(config: CompareConfig, path: Path, *, resume: bool,
             shown: str | os.PathLike[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """:func:`check_compare` on the resolved folder ``path`` (its lock not probed: the caller may hold it)."""
    if resume:
        _resumed(path, config.to_dict(), shown=shown)  # refuses other settings, naming the differences
    done = saved_models(config, path)  # a fresh run reuses only a folder without models: refuses links there
    todo = [model_name(e, s) for e, s in config.runs() if (e, s) not in done]
    check_files(path, [("config.json",), *((name,) for name in output_names(config)),
                       *((MODELS, name, file) for name in todo for file in ("weights.pt", "record.json"))])
    return done


def groups(config: CompareConfig, todo: list[tuple[str, int]]) -> list[tuple[str, tuple[int, ...]]]:
    """The runs ``todo`` as groups ``(encoding, seeds)``: each encoding's seeds, ``config.group_size`` at a time.

    Example:
        >>> config = CompareConfig(encodings=("alibi", "rotary"), n_seeds=5, group_size=2)
        >>> groups(config, [key for key in config.runs() if key != ("alibi", 1)])
        [('alibi', (0, 2)), ('alibi', (3, 4)), ('rotary', (0, 1)), ('rotary', (2, 3)), ('rotary', (4,))]
    """
    seeds: dict[str, list[int]] = {}
    for encoding, seed in todo:
        seeds.setdefault(encoding, []).append(seed)
    size = config.group_size
    return [(encoding, tuple(own[i:i + size])) for encoding, own in seeds.items() for i in range(0, len(own), size)]


def _executor(config: CompareConfig, todo: list[tuple[str, int]], bar: Any, *, jobs: int,
              ray_address: str | None, device: str) -> Iterator[ModelResult]:
    """The runs ``todo``, trained in groups (:func:`groups`) where the caller asked, in the order they finish."""
    work = groups(config, todo)
    if ray_address is not None:
        sweep.connect_ray(ray_address)
        return sweep.ray_tasks(config, work, bar, address=ray_address, device=device)
    if jobs > 1 and len(work) > 1:  # one group left: no worker to start
        return sweep.local_workers(config, work, bar, jobs=jobs, device=device)
    return sweep.in_process(config, work, bar, device=device)


def _compare(config: CompareConfig, run: RunFolder | None, progress: bool | None,
             announce: Callable[[], None] | None, done: dict[tuple[str, int], dict[str, Any]],
             place: Callable[..., Iterator[ModelResult]], device: str) -> CompareResult:
    """Train the models not in ``done`` (the saved ones, by ``(encoding, seed)``) and write the outputs."""
    from tqdm import tqdm

    from attnlab.training.callbacks import progress_enabled

    start = time.perf_counter()
    todo = [key for key in config.runs() if key not in done]
    if announce is not None:
        announce()
    with tqdm(total=config.steps_per_model() * len(todo), desc=f"compare {config.task}", unit="step",
              disable=not progress_enabled(progress), dynamic_ncols=True, leave=True) as bar:
        for result in place(config, todo, bar):
            done[result.encoding, result.seed] = _save_model(run, config, result)
    records = [r for key in config.runs() for r in done[key]["records"]]
    timings = {f"{encoding}/{seed}": float(done[encoding, seed]["seconds"]) for encoding, seed in config.runs()}
    sizes = {f"{encoding}/{seed}": int(done[encoding, seed].get("n_parameters", 0)) for encoding, seed in config.runs()}
    compared = CompareResult(config, records, time.perf_counter() - start, None if run is None else run.path, timings,
                             sizes, device)
    if run is not None:
        write_outputs(run, compared)
    return compared
