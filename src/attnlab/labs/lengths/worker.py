"""What a worker process of a comparison runs: one group of models, the settings in, plain data out.

A local worker (:func:`local_task`, started by :func:`attnlab.labs.lengths.sweep.local_workers`)
or a Ray task (:func:`ray_task`) is handed a group ``(encoding, seeds)`` and the settings as a
dict; it trains the group with :func:`~attnlab.labs.lengths.train.train_seeds` and sends back
each model's result as plain data (:func:`pack`: the weights as ``torch.save`` bytes, no
tensors shared between processes). It rebuilds the task's data itself (it is generated from
the seeds in the settings) once per process, instead of receiving it.

This is all a worker process imports of the lab: the settings and the train module, so that
a worker starts small (no run folder, report or sweep code).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import torch

from attnlab import _workers
from attnlab.data.tasks import TaskSets
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.train import ModelResult, task_sets, train_seeds

__all__ = ["local_task", "pack", "ray_task", "unpack"]

#: how often (in training steps) a worker reports its progress to the driver's bar
REPORT_EVERY = 10


class _QueueBar:
    """A progress bar in a worker (:func:`train_seeds`'): it sends its steps to the driver's bar, now and then."""

    def __init__(self, send: Callable[[int], None]) -> None:
        self.n = 0
        self._send = send
        self._unsent = 0

    def update(self, steps: int) -> None:
        self.n += steps
        self._unsent += steps
        if self._unsent >= REPORT_EVERY:
            self.flush()

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        del text, refresh  # the driver shows which runs are under way, not each worker's loss

    def flush(self) -> None:
        if self._unsent:
            self._send(self._unsent)
            self._unsent = 0


_worker_sets: dict[str, TaskSets] = {}  # one task's data per worker process, built on its first run


def _sets_for(config: CompareConfig) -> TaskSets:
    key = repr((config.spec(), config.protocol_object.builds_training_set))
    if key not in _worker_sets:
        _worker_sets.clear()
        _worker_sets[key] = task_sets(config)
    return _worker_sets[key]


def pack(result: ModelResult) -> dict[str, Any]:
    """A finished run as plain data: its weights as ``torch.save`` bytes (no tensors shared between processes)."""
    buffer = io.BytesIO()
    torch.save(result.state_dict, buffer)
    return {"encoding": result.encoding, "seed": result.seed, "records": result.records,
            "weights": buffer.getvalue(), "seconds": result.seconds, "n_parameters": result.n_parameters}


def unpack(packed: dict[str, Any]) -> ModelResult:
    """The :class:`ModelResult` :func:`pack` made, back in the driver."""
    state = torch.load(io.BytesIO(packed["weights"]), weights_only=True)
    return ModelResult(packed["encoding"], packed["seed"], packed["records"], state, packed["seconds"],
                       packed["n_parameters"])


def _train_packed(
    config_dict: dict[str, Any], encoding: str, seeds: tuple[int, ...], device: str, send: Callable[[int], None]
) -> list[dict[str, Any]]:
    """Train one group in a worker: the settings as a dict in, each model's result as plain data out."""
    config = CompareConfig.from_dict(config_dict)
    bar = _QueueBar(send)
    results = train_seeds(config, _sets_for(config), encoding, seeds, bar=bar, device=device)
    bar.flush()
    return [pack(result) for result in results]


def local_task(config_dict: dict[str, Any], encoding: str, seeds: tuple[int, ...],
               device: str) -> list[dict[str, Any]]:
    """One group in a local worker process; its steps go to the driver's bar through the worker's queue."""
    return _train_packed(config_dict, encoding, seeds, device, _workers.report)


def ray_task(config_dict: dict[str, Any], encoding: str, seeds: tuple[int, ...],
             device: str) -> list[dict[str, Any]]:
    """One group as a Ray task; its steps are counted when it returns."""
    return _train_packed(config_dict, encoding, seeds, device, lambda steps: None)
