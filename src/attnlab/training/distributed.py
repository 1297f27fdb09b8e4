"""Data-parallel training under ``torchrun``: the process group, the wrapped model, the shared losses.

``torchrun --nproc_per_node N -m attnlab train ...`` starts N processes (ranks) and
tells each who it is through the environment: ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. :meth:`DistributedContext.from_env`
reads them and joins the process group (gloo on CPU, nccl on CUDA, where rank ``r``
of a machine uses ``cuda:LOCAL_RANK``); without them it is a single process and
nothing is set up. The training loop (:class:`~attnlab.training.Loop`) takes the
context as an explicit argument; no global state decides anything.

What every rank does, so that N processes train as one process on the same global batches:

* it builds the same initial weights (the caller seeds; DDP also broadcasts rank 0's
  when :meth:`DistributedContext.wrap` wraps the model);
* it draws its share of each global batch: a ``DistributedSampler`` with the same
  seed on every rank splits one permutation (drawn from ``seed + epoch``) as
  ``rank::world_size``; the loop calls :func:`set_sampler_epoch` before each epoch;
* ``DistributedDataParallel`` averages the gradients in backward, so with equal
  per-rank batches every rank takes the optimizer step of the global batch's mean loss;
* the epoch's training loss is the sample-weighted sum and the sample count,
  summed over ranks (:meth:`DistributedContext.all_reduce_sum`): the mean over all samples;
* validation runs on every rank over the whole validation loader, on the unwrapped
  model (:func:`unwrap`): the weights and the data are the same everywhere, so every
  rank gets the same number without communicating, and decisions taken on it (early
  stopping, a plateau scheduler, the best epoch) agree on every rank.

Only rank 0 (:attr:`DistributedContext.is_main`) writes files and prints: that is
the caller's rule (the squares lab follows it), the loop writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

__all__ = ["DistributedContext", "set_sampler_epoch", "unwrap"]

#: the variables torchrun sets for every process it starts
_RANK_VARIABLES = ("RANK", "LOCAL_RANK")
_ADDRESS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT")


def _env_int(environ: Mapping[str, str], name: str) -> int:
    text = environ.get(name)
    if text is None or not text.strip():
        raise ValueError(f"the environment variable {name} is not set: start data-parallel training with torchrun, "
                         "which sets WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"the environment variable {name} must be a whole number, got {text!r}") from None
    if value < 0:
        raise ValueError(f"the environment variable {name} must be >= 0, got {value}")
    return value


@dataclass(frozen=True)
class DistributedContext:
    """Who this process is in a data-parallel run, and the few collective steps training needs.

    The default is a single process (``world_size`` 1): every method then does
    nothing (``wrap`` returns the model, ``all_reduce_sum`` its input). Build the
    real one with :meth:`from_env`; use it as a context manager, or call
    :meth:`close`, to leave the process group at the end.

    Attributes:
        rank: this process's rank, 0 to ``world_size - 1``.
        world_size: how many processes train together.
        local_rank: its rank on this machine (which GPU it uses).
        device: where this process trains (``cuda:LOCAL_RANK`` on a GPU machine).
        find_unused_parameters: how :meth:`wrap` wraps: let DDP look for parameters a
            step's loss does not use (a walk over the graph per step). Needed by models
            that leave some unused (the attention lab's ``gru-attn`` never uses its
            attention's ``linear_value``), where DDP otherwise fails at the second
            step; off by default, since DDP warns when it finds none.

    Raises:
        TypeError, ValueError: for ranks that are not whole numbers in range, a device
            that is not a torch device, or a ``find_unused_parameters`` that is not a bool.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    find_unused_parameters: bool = False

    def __post_init__(self) -> None:
        for name in ("rank", "world_size", "local_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {self.rank}")
        if self.local_rank < 0:
            raise ValueError(f"local_rank must be >= 0, got {self.local_rank}")
        if not isinstance(self.find_unused_parameters, bool):
            raise TypeError(f"find_unused_parameters must be a bool, got {type(self.find_unused_parameters).__name__}")
        try:
            object.__setattr__(self, "device", torch.device(self.device))
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device {self.device!r} is not a torch device ({exc})") from None

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and prints."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        """More than one process trains (a process group is needed)."""
        return self.world_size > 1

    @property
    def shard(self) -> tuple[int, int] | None:
        """``(rank, world_size)`` for :func:`attnlab.data.make_loaders`, or None in a single process."""
        return (self.rank, self.world_size) if self.active else None

    @classmethod
    def from_env(cls, *, device: torch.device | str, environ: Mapping[str, str] | None = None) -> DistributedContext:
        """This process's context, joining the process group if torchrun started it.

        ``WORLD_SIZE`` unset or 1: a single process on ``device``; nothing is set up.
        Otherwise the process group is joined (``init_process_group`` from the
        environment): with gloo for a CPU ``device``, with nccl for a CUDA one, each
        rank then using ``cuda:LOCAL_RANK``.

        Args:
            device: the device asked for (``cpu`` or ``cuda``; under torchrun a CUDA
                index other than ``LOCAL_RANK`` is refused).
            environ: the environment to read; None reads ``os.environ``.

        Returns:
            The context.

        Raises:
            ValueError: naming the variable, for a missing or malformed torchrun
                variable, a rank out of range, a device data-parallel training does
                not run on (``mps``), a CUDA index that is not ``LOCAL_RANK`` or beyond
                this machine's GPUs, or a torch built without the backend.
        """
        env = os.environ if environ is None else environ
        device = torch.device(device)
        world_size = _env_int(env, "WORLD_SIZE") if env.get("WORLD_SIZE", "").strip() else 1
        if world_size <= 1:
            return cls(device=device)
        rank, local_rank = (_env_int(env, name) for name in _RANK_VARIABLES)
        if rank >= world_size:
            raise ValueError(f"the environment variable RANK ({rank}) must be below WORLD_SIZE ({world_size})")
        for name in _ADDRESS_VARIABLES:
            if not env.get(name, "").strip():
                raise ValueError(f"the environment variable {name} is not set: start data-parallel training "
                                 "with torchrun, which sets it")
        if device.type == "cuda":
            if device.index is not None and device.index != local_rank:
                raise ValueError(f"device {device}: under torchrun each process uses cuda:LOCAL_RANK "
                                 f"(here cuda:{local_rank}); give the device as cuda")
            if local_rank >= torch.cuda.device_count():
                raise ValueError(f"LOCAL_RANK {local_rank}: this machine has {torch.cuda.device_count()} CUDA "
                                 "device(s); start at most that many processes per machine")
            device, backend = torch.device("cuda", local_rank), "nccl"
            torch.cuda.set_device(device)  # nccl's collectives and broadcast_object_list use the current device
        elif device.type == "cpu":
            backend = "gloo"
        else:
            raise ValueError(f"device {device}: data-parallel training runs on cpu (gloo) or cuda (nccl), "
                             f"not {device.type}")
        available = dist.is_available() and (dist.is_nccl_available() if backend == "nccl"
                                             else dist.is_gloo_available())
        if not available:
            raise ValueError(f"device {device}: this torch build has no {backend} backend for data-parallel training")
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size)
        return cls(rank=rank, world_size=world_size, local_rank=local_rank, device=device)

    def close(self) -> None:
        """Leave the process group (a no-op in a single process or once left)."""
        if self.active and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> DistributedContext:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` in ``DistributedDataParallel`` (which broadcasts rank 0's weights), or itself in one process.

        Wrap once, after moving the model to :attr:`device`; the wrapper shares the
        model's parameters, so checkpoints are taken from the model itself (no
        ``module.`` prefix: they load in one process and in N alike). See
        :attr:`find_unused_parameters` for models that leave parameters unused.

        Raises:
            TypeError: if ``model`` is not a module.
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not self.active:
            return model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=self.find_unused_parameters)

    def all_reduce_sum(self, values: Tensor) -> Tensor:
        """``values [L]`` (any shape) summed over every rank (a copy; ``values`` itself in one process).

        The collective runs on :attr:`device` (nccl needs CUDA tensors); the result
        comes back on ``values``'s device and in its dtype.

        Raises:
            TypeError: if ``values`` is not a tensor.
        """
        if not isinstance(values, Tensor):
            raise TypeError(f"values must be a tensor, got {type(values).__name__}")
        if not self.active:
            return values
        summed = values.detach().to(self.device, copy=True)
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        return summed.to(values.device)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (the others pass anything, e.g. None); ``obj`` in one process.

        For small, plain data (settings, a path): it is pickled.
        """
        if not self.active:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def per_rank_batch(self, batch_size: int, *, name: str = "batch_size") -> int:
        """The share of a global batch of ``batch_size`` each rank takes.

        Raises:
            ValueError: naming ``name``, if ``batch_size`` does not split evenly over the
                ranks (unequal shares would weight the ranks' gradients unequally).
        """
        if batch_size % self.world_size:
            raise ValueError(f"{name} {batch_size} is not divisible by the {self.world_size} processes training "
                             "together: each takes an equal share of every batch")
        return batch_size // self.world_size


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a ``DistributedDataParallel`` wrapper, or ``model`` itself."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Call ``set_epoch(epoch)`` on the ``DistributedSampler`` driving ``loader``, if there is one.

    A ``DistributedSampler`` shuffles with ``seed + epoch``: without this call every
    epoch would see the same order. The sampler is looked for where a ``DataLoader``
    keeps it: ``sampler``, ``batch_sampler``, or one level inside either (a
    ``BatchSampler`` over it).
    """
    places = (getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None))
    seen: list[DistributedSampler[Any]] = []
    for place in places:
        for candidate in (place, getattr(place, "sampler", None)):
            if isinstance(candidate, DistributedSampler) and all(candidate is not s for s in seen):
                seen.append(candidate)
    for sampler in seen:
        sampler.set_epoch(epoch)
