"""Where a comparison's models train: in this process, in ``N`` local worker processes, or as Ray tasks.

A comparison is a list of independent runs, one per ``(encoding, seed)``
(:func:`~attnlab.labs.lengths.train.train_one`): each is seeded on its own and depends
on nothing else, so they can run anywhere and in any order. The unit an executor hands
out is a group, ``(encoding, seeds)``: the models of one encoding at those seeds, trained
together (:func:`~attnlab.labs.lengths.train.train_seeds`; a group of one seed is a run),
each with the records it gets alone. This module only decides *where*; what to do with a
finished model (save it in the run folder, as it returns, by this process alone) stays
with :mod:`attnlab.labs.lengths.compare`. Each executor is a generator of
:class:`~attnlab.labs.lengths.train.ModelResult` in the order the groups finish (a group's
models one after another):

* :func:`in_process`: one after another, here;
* :func:`local_workers`: ``jobs`` processes of :mod:`concurrent.futures` (started
  with ``spawn``: a fresh interpreter, safe with torch's threads and CUDA), which
  die with this process however it ends (:mod:`attnlab._workers`);
* :func:`ray_tasks`: one Ray task per group on an existing cluster (``ray.init(address)``),
  retried by Ray when the worker running it dies.

The rule for threads: every run computes on one thread, wherever it runs
(:func:`~attnlab.labs.lengths.train.train_one` sets it). A float sum's order depends on
how many threads split it, so a run's records would otherwise depend on how many
runs share the machine, and ``--jobs N`` could not give ``--jobs 1``'s records bit
for bit. The cores are used by training as many models at once as there are
cores instead: ``attnlab compare`` starts one worker per core by default. A sweep
of fewer models than cores leaves cores idle (one model alone trains on one core).

What a worker process runs is :mod:`attnlab.labs.lengths.worker`: it rebuilds the task's data
itself (it is generated from the seeds in the settings) instead of receiving it, and sends back
the weights as bytes.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

import torch

from attnlab import _workers
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.train import ModelResult, task_sets, train_seeds
from attnlab.labs.lengths.worker import local_task, ray_task, unpack

__all__ = ["connect_ray", "cpu_count", "in_process", "local_workers", "ray_tasks"]

Group = tuple[str, tuple[int, ...]]  # (encoding, seeds): the models trained together


def cpu_count() -> int:
    """The cores this process may run on (its affinity, where the system tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


# -- in this process ---------------------------------------------------------------------


def in_process(config: CompareConfig, todo: Sequence[Group], bar: Any, *,
               device: str = "cpu") -> Iterator[ModelResult]:
    """Train the groups ``todo`` one after another in this process, on ``device``; ``bar`` (a tqdm bar) advances
    by every model's step."""
    sets = task_sets(config) if todo else None
    for encoding, seeds in todo:
        assert sets is not None
        yield from train_seeds(config, sets, encoding, seeds, bar=bar, device=device)


def _label(encoding: str, seeds: Sequence[int]) -> str:
    return f"{encoding}, seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


# -- local worker processes --------------------------------------------------------------------


def local_workers(config: CompareConfig, todo: Sequence[Group], bar: Any, *, jobs: int,
                  device: str = "cpu") -> Iterator[ModelResult]:
    """Train the groups ``todo`` in ``jobs`` worker processes, on ``device``; yields each model as its group
    comes back.

    ``bar`` advances as the workers report their steps. When the caller stops
    iterating (Ctrl-C, SIGTERM or SIGHUP, an error while saving a result) or a worker
    fails, the other workers are stopped at once: nothing is left running in the
    background. While the workers run, SIGTERM and SIGHUP raise
    :class:`attnlab._workers.Terminated` (a ``KeyboardInterrupt``) in the main thread;
    a driver that dies without a chance to stop them (SIGKILL) takes them with it
    (see :mod:`attnlab._workers`).

    Raises:
        ChildProcessError: naming the group, if a worker process died (killed, out of memory);
            the models that had finished were already handed out.
    """
    if not todo:
        return
    context = multiprocessing.get_context("spawn")
    # A SimpleQueue: a worker's put writes to the pipe before it returns (a Queue's feeder thread writes later),
    # so the steps of a run are there to read once its result is, whatever the machine's load.
    progress = context.SimpleQueue()
    lifeline = _workers.Lifeline(context)
    before = set(multiprocessing.active_children())
    # The initializer is a torch-free module's: a worker holds on to its lifeline before it imports torch.
    executor = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context,
                                   initializer=_workers.start_worker, initargs=(lifeline.worker_args(), progress))
    names = {}
    finished = False
    try:
        with _workers.termination_as_interrupt():
            config_dict = config.to_dict()
            pending: set[Future[list[dict[str, Any]]]] = set()
            for encoding, seeds in todo:
                future = executor.submit(local_task, config_dict, encoding, tuple(seeds), device)
                names[future] = _label(encoding, seeds)
                pending.add(future)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(progress, bar)
                for future in done:
                    error = future.exception()
                    if error is not None:
                        if type(error).__name__ == "BrokenProcessPool":
                            raise ChildProcessError(f"a worker process died while training {names[future]} (killed, "
                                                    "or out of memory); the finished models are kept: run again "
                                                    "with --resume") from None
                        raise error
                    bar.set_postfix_str(f"{names[future]} done", refresh=False)
                    for packed in future.result():
                        yield unpack(packed)
        finished = True
    finally:
        executor.shutdown(wait=finished, cancel_futures=True)
        if not finished:  # stopped early: the runs under way are abandoned, their workers stopped now
            _terminate(set(multiprocessing.active_children()) - before)
            executor.shutdown(wait=True)  # the executor's own thread is done: it starts no worker any more
            _terminate(set(multiprocessing.active_children()) - before)
        lifeline.close()  # the workers are gone: a late one would end now
        progress.close()


def _terminate(children: set[Any]) -> None:
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout=5)
    # A child that has not gone within 5 s of SIGTERM (a loaded machine, a stuck system call) is killed:
    # the sweep promises that no worker outlives it.
    for child in children:
        if child.is_alive():
            child.kill()
            child.join()


def _drain(progress: Any, bar: Any) -> None:
    """Move the steps the workers reported onto the bar."""
    while not progress.empty():
        bar.update(progress.get())


# -- Ray ---------------------------------------------------------------------------------------


def ray_tasks(config: CompareConfig, todo: Sequence[Group], bar: Any, *, address: str, device: str = "cpu",
              max_retries: int = 3) -> Iterator[ModelResult]:
    """Train the groups ``todo`` as Ray tasks on the cluster at ``address``; yields each model as its group
    returns.

    The cluster must be reachable (``connect_ray`` checks it before any training).
    Each task needs one CPU (and, for a CUDA ``device``, one GPU of its own: Ray makes it
    the task's ``cuda``) and computes on one thread; a task whose worker dies is
    run again by Ray, up to ``max_retries`` times. ``bar`` advances by a whole group's
    steps when the group returns. Stopping early cancels the tasks still queued or running.

    Raises:
        ChildProcessError: naming the group, if a task failed ``max_retries + 1`` times.
    """
    import ray

    if not todo:
        return
    gpu = torch.device(device).type == "cuda"
    remote = ray.remote(num_cpus=1, num_gpus=1 if gpu else 0, max_retries=max_retries)(ray_task)
    device = "cuda" if gpu else device  # the GPU Ray gives the task is its only visible one
    config_dict = config.to_dict()
    config_ref = ray.put(config_dict)
    names = {}
    for encoding, seeds in todo:
        names[remote.remote(config_ref, encoding, tuple(seeds), device)] = _label(encoding, seeds)
    pending = list(names)
    finished = False
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=None)
            for ref in done:
                try:
                    group = ray.get(ref)
                except ray.exceptions.RayError as err:
                    raise ChildProcessError(f"Ray could not train {names[ref]}: {str(err).splitlines()[0]}") from None
                bar.update(config.steps_per_model() * len(group))
                bar.set_postfix_str(f"{names[ref]} done", refresh=False)
                for packed in group:
                    yield unpack(packed)
        finished = True
    finally:
        if not finished:
            for ref in pending:
                ray.cancel(ref, force=True)


def connect_ray(address: str) -> Any:
    """``ray.init(address)`` (``"local"``: a private instance on this machine); returns the ray module.

    Raises:
        ModuleNotFoundError: naming the extra to install, when Ray is missing.
        ConnectionError: naming the address, when no cluster answers there.
    """
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError("--ray needs Ray: pip install 'attnlab[ray]'") from None
    if ray.is_initialized():
        return ray
    _check_reachable(address)
    try:
        if address == "local":
            ray.init(num_cpus=cpu_count(), include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
        else:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConnectionError(f"--ray {address!r}: no Ray cluster answers there ({str(err).splitlines()[0]})") \
            from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A ``host:port`` (or ``ray://host:port``) address must accept a connection within ``timeout`` seconds:
    ``ray.init`` itself would retry an unreachable one for minutes.

    Raises:
        ConnectionError: naming the address.
    """
    if address in ("local", "auto"):
        return  # nothing to connect to yet: "auto" finds a running cluster on this machine, or says there is none
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise ConnectionError(f"--ray {address!r}: expected auto, local, host:port or ray://host:port")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ConnectionError(f"--ray {address!r}: no Ray cluster answers there ({err.strerror or err})") from None
