"""The one training loop: :func:`fit`, and the :class:`Loop` its callbacks see.

Every model attnlab trains goes through here: the labs' models under the book's
:class:`~attnlab.training.Trainer` (a facade that keeps the book's interface), the
squares lab (``attnlab train``) and the length-generalisation lab (``attnlab compare``).
What is not part of every run is a callback (:mod:`.callbacks`): the metrics
file, checkpoints, early stopping, keeping the best model, the progress bar,
TensorBoard. What a run has done so far is its :class:`History`, which a run
continues across calls and keeps in its checkpoints.

An epoch is::

    train pass (model.train(), one optimizer step per batch, per-batch scheduler)
    -> divergence check -> validation pass (model.eval(), no grad) -> history
    -> per-epoch scheduler -> best-so-far bookkeeping -> callbacks' on_epoch_end

A batch is whatever the loader yields; ``loss(model, batch)`` turns it into the
batch's mean loss (a scalar tensor). :func:`supervised` gives the book's
convention, ``(x, y)`` batches and ``loss_fn(model(x), y)`` (``model(**x)`` for a
dict ``x``). Batches are moved to
the device as they are (tuples, lists, dicts and named tuples are walked).

``fit`` never seeds and never draws a random number itself: the model (dropout),
the loaders (shuffling) and the caller's seeding decide what is random, so a
caller that saves and restores those streams resumes exactly. A
``DistributedSampler`` in the training loader is told the epoch (``set_epoch``,
the number of epochs done) before each training pass, so a resumed run shuffles on.

Data-parallel training (``torchrun``) is one more argument, ``distributed`` (a
:class:`~attnlab.training.distributed.DistributedContext`): the model is the
wrapped one, each rank's training loader yields its share of the batches, and the
epoch's training loss is summed over the ranks; see :mod:`.distributed`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from attnlab._eval_mode import preserved_modes
from attnlab._validate import check_choice, check_finite_float, check_int
from attnlab.training import schedulers as sched
from attnlab.training.batches import BatchLoss, count_samples, supervised, to_device
from attnlab.training.clipping import GradientClipping
from attnlab.training.distributed import DistributedContext, set_sampler_epoch, unwrap
from attnlab.training.nonfinite import describe_nonfinite, nonfinite_origin
from attnlab.training.threads import fit_threads, intra_op_threads

# BatchLoss and supervised (the loss of a batch) live in .batches; they are named here too, as parts of the
# loop's interface.
__all__ = ["BatchLoss", "Callback", "EpochRecord", "History", "Loop", "default_device", "fit", "supervised"]


#: what ``on_epoch_end`` receives: ``epoch`` (1-based, counting earlier calls), ``loss``,
#: ``val_loss`` (None without a val_loader), ``lr`` (first group's, at the epoch's start),
#: ``seconds`` (train and validation time) and ``best`` (the validation loss improved).
EpochRecord = dict[str, Any]


@dataclass
class History:
    """What training has done so far; it survives :func:`~attnlab.training.fit` calls and checkpoints.

    Attributes:
        epochs: epochs trained, across calls.
        losses, val_losses: per-epoch mean losses over samples (``val_losses`` holds
            None for epochs run without a validation loader).
        learning_rates: one list of per-group learning rates per scheduler step.
        best_val_loss, best_epoch: the lowest validation loss and its (1-based) epoch.
        stopped_early: whether the last :func:`~attnlab.training.fit` call was stopped by a callback.
    """

    epochs: int = 0
    losses: list[float] = field(default_factory=list)
    val_losses: list[float | None] = field(default_factory=list)
    learning_rates: list[list[float]] = field(default_factory=list)
    best_val_loss: float | None = None
    best_epoch: int | None = None
    stopped_early: bool = False

    def improve(self, val_loss: float | None, min_delta: float) -> bool:
        """Record ``val_loss`` as the best if it is below the best by more than ``min_delta``; True if it was."""
        if val_loss is None or math.isnan(val_loss):
            return False
        if self.best_val_loss is None or val_loss < self.best_val_loss - min_delta:
            self.best_val_loss, self.best_epoch = val_loss, self.epochs
            return True
        return False


def default_device() -> torch.device:
    """``cuda`` if available, else ``mps`` (Apple GPUs), else ``cpu``: where a run trains unless told."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


class Callback:
    """Something a run does besides training; override the hooks you need (each does nothing here).

    Hooks run in the order the callbacks were given. ``on_fit_end`` runs even when
    training raised (to close a bar or flush a writer), before the error propagates.
    A callback stops training by setting ``loop.should_stop = True``.
    """

    def on_fit_start(self, loop: Loop) -> None:
        """Before the first epoch of a :func:`fit` call."""

    def on_batch_end(self, loop: Loop, loss: Tensor) -> None:
        """After each training step, with the batch's detached loss (a scalar: the mean over its ``[B]`` samples)."""

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """After each epoch, once the history holds it; ``record`` is plain JSON-ready data."""

    def on_fit_end(self, loop: Loop) -> None:
        """After the last epoch, or when training raised."""


class Loop:
    """One training run's parts, as :func:`fit` drives them and callbacks see them.

    Build it with :func:`fit`'s arguments (see there); :meth:`run` trains.

    Attributes:
        model, optimizer, loss, train_loader, val_loader, scheduler, clipping, device,
            history, callbacks, min_delta, distributed: as given to :func:`fit`.
        batch_scheduler: whether the scheduler steps after every batch.
        planned_epochs: how many epochs the current :meth:`run` was asked for.
        should_stop: set by a callback to end training after the current epoch.

    Raises:
        TypeError / ValueError: naming the argument, for a part of the wrong type, no
            ``train_loader``, a scheduler on another optimizer, ``ReduceLROnPlateau``
            without a ``val_loader``, a per-batch scheduler over a loader without a
            length, a negative ``min_delta``, or (with an active ``distributed``) a model
            that is not wrapped in ``DistributedDataParallel``.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Optimizer,
        train_loader: Iterable[Any],
        *,
        loss: BatchLoss,
        val_loader: Iterable[Any] | None = None,
        scheduler: Any = None,
        scheduler_interval: str | None = None,
        clipping: GradientClipping | None = None,
        device: torch.device | str | None = None,
        history: History | None = None,
        callbacks: Sequence[Callback] = (),
        min_delta: float = 0.0,
        distributed: DistributedContext | None = None,
        threads: int | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        for name, loader in (("train_loader", train_loader), ("val_loader", val_loader)):
            if loader is not None and not isinstance(loader, Iterable):
                raise TypeError(f"{name} must be an iterable of batches, got {type(loader).__name__}")
        if train_loader is None:
            raise ValueError("no training data: train_loader is None")
        if not callable(loss):
            raise TypeError(f"loss must be callable as loss(model, batch), got {type(loss).__name__}")
        if scheduler is not None:
            sched.check_scheduler(scheduler, optimizer)
        if scheduler_interval is None:
            self.batch_scheduler = sched.is_batch_scheduler(scheduler)
        else:
            self.batch_scheduler = check_choice("scheduler_interval", scheduler_interval, ("epoch", "batch")) == "batch"
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and val_loader is None:
            raise ValueError("ReduceLROnPlateau watches the validation loss, but there is no val_loader")
        if self.batch_scheduler and scheduler is not None and not hasattr(train_loader, "__len__"):
            raise ValueError(f"{type(scheduler).__name__} steps per batch and needs len(train_loader)")
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"callbacks must be Callback instances, got {type(callback).__name__}")
        self.min_delta = check_finite_float("min_delta", min_delta)
        if self.min_delta < 0:
            raise ValueError(f"min_delta must be >= 0, got {min_delta}")
        if distributed is not None and not isinstance(distributed, DistributedContext):
            raise TypeError(f"distributed must be a DistributedContext, got {type(distributed).__name__}")
        if distributed is not None and distributed.active and unwrap(model) is model:
            # Unwrapped, each rank would step on its own gradients and the copies of the model drift apart.
            raise ValueError(f"model: with {distributed.world_size} processes the model must be wrapped by "
                             "distributed.wrap(model), so that its gradients are averaged over them")
        self.model = model
        self.optimizer = optimizer
        self.loss = loss
        self.train_loader = train_loader
        self.threads = fit_threads(model, train_loader, torch.device(device) if device is not None
                                   else _model_device(model), threads)
        self.val_loader = val_loader
        self.scheduler = scheduler
        self.clipping = clipping if clipping is not None else GradientClipping()
        self.device = _model_device(model) if device is None else torch.device(device)
        self.history = history if history is not None else History()
        self.callbacks = list(callbacks)
        self.distributed = distributed
        self.should_stop = False
        self.planned_epochs = 0
        self._params: list[nn.Parameter] | None = None  # the model's parameters, listed by each training pass
        self._first_step_checked = False  # the run's first loss is read once, before its step (_check_first_step)

    # -- one step, one pass ---------------------------------------------------------------

    def train_step(self, batch: Any) -> Tensor:
        """One optimizer step on ``batch`` (already on the device); returns its detached loss (a scalar).

        Raises:
            ValueError: if the loss is not a scalar tensor.
        """
        # Gradients are cleared before the step, so nothing left in .grad by earlier code leaks in.
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.model, batch)
        if not isinstance(loss, Tensor) or loss.dim() != 0:
            raise ValueError(f"the loss must be a scalar tensor, got {type(loss).__name__} "
                             f"of shape {tuple(getattr(loss, 'shape', ()))}")
        if not self._first_step_checked:
            self._check_first_step(loss, batch)
        loss.backward()
        self.clipping.after_backward(self.model, params=self._params)
        self.optimizer.step()
        return loss.detach()

    def _check_first_step(self, loss: Tensor, batch: Any) -> None:
        """Refuse a first loss that is not finite, before its step, naming where in the model it starts.

        Only the run's first step (no epoch in the history), whose weights are the model's initial
        ones: its loss is read at once (one sync per run), and when it is NaN or inf the cause is the
        forward pass (a position scheme, a table, the data), not the learning rate: the pass is run
        again, on a copy of the random state, to name the module (:func:`nonfinite_origin`). With
        several processes every rank must stop together, so the epoch's check decides there.

        Raises:
            FloatingPointError: naming the module where the non-finite value starts.
        """
        self._first_step_checked = True
        if self.history.epochs or (self.distributed is not None and self.distributed.active):
            return
        value = float(loss.detach())
        if math.isfinite(value):
            return
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            origin = nonfinite_origin(self.model, lambda: self.loss(self.model, batch))
        raise FloatingPointError(f"the training loss is {value} at the first step of epoch 1: "
                                 f"{describe_nonfinite(value, origin)}")

    def run_epoch(self, training: bool) -> float:
        """One pass over the train (or validation) loader; the mean loss over samples.

        Batch means are weighted by batch size, so a short last batch counts less.
        With ``distributed``, a training pass's sums and counts are added over the
        ranks (the mean over every rank's samples); validation runs on the unwrapped
        model over the whole val_loader on every rank, so it needs no communication
        and every rank gets the same number.

        Raises:
            ValueError: if the loader yields no batches, or the loss is not a scalar.
        """
        loader = self.train_loader if training else self.val_loader
        if loader is None:
            raise ValueError("there is no val_loader to validate on")
        n_batches = len(loader) if training and self.batch_scheduler else 0  # type: ignore[arg-type]
        if training:
            set_sampler_epoch(loader, self.history.epochs)
            # Listed once per pass, not walked at every step (a callback may change the model between epochs).
            self._params = list(self.model.parameters())
        # Validation skips DDP's wrapper: no collective step, so ranks may validate on their own.
        model = self.model if training else unwrap(self.model)
        self.model.train(training)
        batch_losses: list[Tensor] = []
        sizes: list[int] = []
        with torch.set_grad_enabled(training):
            for i, batch in enumerate(loader):
                batch = to_device(batch, self.device)
                if training:
                    loss = self.train_step(batch)
                    if self.batch_scheduler and self.scheduler is not None:
                        sched.step_batch(self.scheduler, self.history.epochs + (i + 1) / n_batches)
                        self.history.learning_rates.append(sched.current_lrs(self.optimizer))
                    for callback in self.callbacks:
                        callback.on_batch_end(self, loss)
                else:
                    loss = self.loss(model, batch)
                batch_losses.append(loss)
                sizes.append(count_samples(batch))
        if training:
            self.optimizer.zero_grad(set_to_none=True)  # no gradients held between epochs
        if not batch_losses:
            raise ValueError(f"{'train' if training else 'val'}_loader yielded no batches")
        # One device-to-host copy per epoch, summed in float64.
        values = torch.stack(batch_losses).cpu().double()
        weights = torch.tensor(sizes, dtype=torch.float64)
        totals = torch.stack([(values * weights).sum(), weights.sum()])  # [2]: weighted sum, samples
        if training and self.distributed is not None:
            totals = self.distributed.all_reduce_sum(totals)
        return float(totals[0] / totals[1])

    # -- epochs -----------------------------------------------------------------------------

    def run_one_epoch(self) -> EpochRecord:
        """Train, check, validate and record one epoch, then call every ``on_epoch_end``.

        Raises:
            FloatingPointError: if the epoch's training loss is NaN or infinite (the
                epoch is not recorded).
        """
        lr = float(self.optimizer.param_groups[0]["lr"])  # the rate the epoch's first batch uses
        start = time.perf_counter()
        loss = self.run_epoch(training=True)
        if not math.isfinite(loss):
            # Checked once per epoch, on a number already computed: NaN weights make every later epoch NaN too.
            raise FloatingPointError(
                f"the training loss is {loss} in epoch {self.history.epochs + 1}: training diverged "
                f"(lr={lr:g}); lower the learning rate, clip gradients or check the data for NaN/inf"
            )
        val_loss = self.run_epoch(training=False) if self.val_loader is not None else None
        seconds = time.perf_counter() - start
        history = self.history
        history.epochs += 1
        history.losses.append(loss)
        history.val_losses.append(val_loss)
        if self.scheduler is not None and not self.batch_scheduler:
            sched.step_epoch(self.scheduler, val_loss)
            history.learning_rates.append(sched.current_lrs(self.optimizer))
        improved = history.improve(val_loss, self.min_delta)
        record = {"epoch": history.epochs, "loss": loss, "val_loss": val_loss, "lr": lr, "seconds": seconds,
                  "best": improved}
        for callback in self.callbacks:
            callback.on_epoch_end(self, record)
        return record

    def run(self, epochs: int) -> History:
        """Train ``epochs`` more epochs (fewer if a callback stops it); every module's mode is restored after.

        Raises:
            TypeError, ValueError: for a bad ``epochs``, and what an epoch raises.
            FloatingPointError: when training diverges.
        """
        self.planned_epochs = check_int("epochs", epochs, minimum=1)
        self.should_stop = False
        self.history.stopped_early = False
        threads = intra_op_threads(self.threads) if self.threads is not None else contextlib.nullcontext()
        with preserved_modes(self.model), threads:
            try:
                for callback in self.callbacks:
                    callback.on_fit_start(self)
                for _ in range(self.planned_epochs):
                    self.run_one_epoch()
                    if self.should_stop:
                        self.history.stopped_early = True
                        break
            finally:
                for callback in self.callbacks:
                    callback.on_fit_end(self)
        return self.history


def fit(
    model: nn.Module,
    optimizer: Optimizer,
    train_loader: Iterable[Any],
    *,
    epochs: int,
    loss: BatchLoss,
    val_loader: Iterable[Any] | None = None,
    scheduler: Any = None,
    scheduler_interval: str | None = None,
    clipping: GradientClipping | None = None,
    device: torch.device | str | None = None,
    history: History | None = None,
    callbacks: Sequence[Callback] = (),
    min_delta: float = 0.0,
    distributed: DistributedContext | None = None,
    threads: int | None = None,
) -> History:
    """Train ``model`` for ``epochs`` epochs: the one loop every attnlab experiment runs.

    Args:
        model: any ``nn.Module``, already on ``device``.
        optimizer: a torch optimizer over its parameters.
        train_loader: an iterable of batches (a ``DataLoader``).
        epochs: epochs to run in this call, at least 1.
        loss: ``loss(model, batch) -> scalar tensor`` (see :func:`supervised`).
        val_loader: batches to validate on after each epoch, or None.
        scheduler: a torch LR scheduler on ``optimizer``, or None.
        scheduler_interval: ``"batch"`` or ``"epoch"``; None: per batch for
            ``CyclicLR``, ``OneCycleLR`` and ``CosineAnnealingWarmRestarts``, per epoch
            otherwise (``ReduceLROnPlateau`` with the validation loss).
        clipping: gradient clipping after each backward, or None.
        device: where batches go; None: the device of the model's first parameter.
        history: the history to continue (e.g. from a checkpoint); None starts one.
        callbacks: :class:`Callback` objects, called in order.
        min_delta: how far below the best a validation loss must be to count as the
            new best (``record["best"]``, early stopping, keep-best).
        distributed: under torchrun, this process's
            :class:`~attnlab.training.distributed.DistributedContext` (``model`` then
            being ``distributed.wrap(model)``); None in a single process.
        threads: the intra-op threads to train on (torch's count is put back after); None: the
            thread rule of :mod:`attnlab.training.threads` for a step of this model on one batch
            (one thread below 1e11 parameters x tokens, as the command line), on the CPU; on an
            accelerator torch's count stays.

    Returns:
        The :class:`History`, with this call's epochs appended.

    Raises:
        TypeError, ValueError: naming the argument, for bad arguments, an empty
            loader or a non-scalar loss.
        FloatingPointError: when an epoch's training loss is NaN or infinite.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.randn(64, 3, generator=g)
        >>> loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)
        >>> model = nn.Linear(3, 1)
        >>> history = fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, epochs=5,
        ...               loss=supervised(nn.MSELoss()))
        >>> history.epochs, history.losses[-1] < history.losses[0]
        (5, True)
    """
    loop = Loop(model, optimizer, train_loader, loss=loss, val_loader=val_loader, scheduler=scheduler,
                scheduler_interval=scheduler_interval, clipping=clipping, device=device, history=history,
                callbacks=callbacks, min_delta=min_delta, distributed=distributed, threads=threads)
    return loop.run(epochs)


def _model_device(model: nn.Module) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")
