"""The trainer: the book's ``StepByStep`` interface, with its bugs fixed.

:class:`Trainer` (also exported as :class:`StepByStep`, the book's name) trains
any ``nn.Module`` on ``(x, y)`` batches: ``loss_fn(model(x), y)`` must return a
scalar tensor, the mean over the batch. It knows nothing about the task or the
model, and imports neither ``attnlab.models`` nor ``attnlab.data``. It is a facade:
its epochs run in :func:`attnlab.training.fit`, the one loop every attnlab
experiment trains through, and its options are that loop's callbacks.

The class reads top to bottom: construction, the book's setters (loaders,
seed, optimizer, scheduler, gradient clipping), training, using the model
(predict, plots, the learning-rate range test), looking inside it (hooks,
TensorBoard) and checkpoints. What a checkpoint holds is :mod:`.state`'s; the
recorders the hooks attach are :mod:`.hooks`'.

Fixed or added relative to the book (dvgodoy/PyTorchStepByStep ``stepbystep/v4.py``):

* the epoch loss is the mean over batches weighted by batch size, so it is the
  mean over samples (a short last batch counts less);
* ``train(n)`` seeds only when given a seed or on its first call, so a second
  ``train(n)`` continues instead of replaying the same shuffles and dropout;
* checkpoints carry the scheduler, learning rates, best validation loss,
  clipping and every random stream, are plain data (``weights_only=True``),
  are written atomically and are checked when read (see :mod:`attnlab.training.checkpoint`);
  a run resumed from one continues bitwise as if it had never stopped (on CPU);
* ``predict`` builds no graph, works in batches, keeps integer inputs, and
  restores the model's train/eval mode; ``train`` restores it too;
* TensorBoard steps continue across ``train`` calls and the writer is flushed,
  not closed, after each call;
* a progress bar, early stopping, best-checkpoint keeping and a per-epoch
  callback (for a ``metrics.jsonl``); clipping settings no longer conflict;
  the default hook copes with tuple outputs; bad arguments raise errors that
  name them.

Example:
    >>> import torch
    >>> from torch import nn
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> x = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
    >>> y = x.sum(dim=1, keepdim=True)
    >>> loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True,
    ...                     generator=torch.Generator())
    >>> model = nn.Linear(3, 1)
    >>> trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1),
    ...                   device="cpu", progress=False)
    >>> trainer.set_loaders(loader)
    >>> trainer.train(5)
    >>> trainer.total_epochs, len(trainer.losses), trainer.losses[-1] < trainer.losses[0]
    (5, 5, True)
    >>> trainer.predict(x[:2]).shape
    (2, 1)
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from attnlab._eval_mode import evaluating
from attnlab._io import check_writable
from attnlab._validate import check_finite_float, check_int
from attnlab.training import checkpoint as ckpt
from attnlab.training import rng
from attnlab.training import schedulers as sched
from attnlab.training.batches import unpack_batch
from attnlab.training.book.hooks import GradientRecorder, OutputRecorder, ParameterRecorder, resolve_layers
from attnlab.training.book.state import restore_state, trainer_state
from attnlab.training.callbacks import (
    EarlyStopping,
    EpochProgress,
    KeepBest,
    OnEpochEnd,
    TensorBoard,
    check_progress,
    make_summary_writer,
    progress_enabled,
)
from attnlab.training.clipping import GradientClipping
from attnlab.training.distributed import DistributedContext
from attnlab.training.loop import Callback, History, Loop, default_device, supervised
from attnlab.training.lr_finder import lr_range_test

__all__ = ["EpochCallback", "StepByStep", "Trainer"]

EpochCallback = Callable[["Trainer", dict[str, Any]], Any]
DEFAULT_SEED = 42  # the book's train(seed=42)


def _check_device(device: Any) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a torch device ({exc})") from exc


def _float_dtype(model: nn.Module) -> torch.dtype:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.get_default_dtype()


def _predict_numpy(model: nn.Module, x: Any, *, device: torch.device, batch_size: int = 1024) -> Any:
    """``model``'s output for ``x [B, ...]`` as numpy, in eval mode, chunk by chunk, without a graph.

    :meth:`Trainer.predict`'s work (its errors are that method's). Several threads may
    predict with one model at once: the model is held in eval mode while any of them
    needs it (:func:`attnlab._eval_mode.evaluating`) and everything else a call needs
    stays in the call.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    try:
        x = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"x must be a tensor or array-like, got {type(x).__name__} ({exc})") from exc
    if x.dim() == 0:
        raise ValueError(f"x must have a batch axis, got a scalar {x.item()!r}")
    if x.is_floating_point():
        x = x.to(_float_dtype(model))
    chunks = x.split(batch_size) if len(x) else (x,)
    with evaluating(model), torch.no_grad():
        outputs = [model(chunk.to(device)) for chunk in chunks]
    return _concat_numpy(outputs, [len(chunk) for chunk in chunks])


def _concat_numpy(outputs: list[Any], sizes: list[int]) -> Any:
    """Join per-chunk outputs along the batch axis, as numpy (a tuple of arrays for tuple outputs)."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        joinable = all(o.dim() > 0 and o.shape[0] == n for o, n in zip(outputs, sizes, strict=True))
        if len(outputs) > 1 and not joinable:
            # e.g. a GRU's h [layers, B, F]: joining chunks along its first axis would be wrong.
            raise ValueError("the model's output has no leading batch axis, so chunks cannot be joined; "
                             "pass a batch_size of at least len(x)")
        out = (torch.cat(outputs) if len(outputs) > 1 else first).detach().cpu()
        return (out.float() if out.dtype == torch.bfloat16 else out).numpy()
    if isinstance(first, (tuple, list)):
        return tuple(_concat_numpy([o[i] for o in outputs], sizes) for i in range(len(first)))
    raise TypeError(f"predict needs a model returning a tensor (or a tuple of them), "
                    f"got {type(first).__name__}")


def _history_view(name: str, doc: str) -> Any:
    """A read-write property for ``self.history.<name>``."""

    def get(self: Trainer) -> Any:
        return getattr(self.history, name)

    def set_(self: Trainer, value: Any) -> None:
        setattr(self.history, name, value)

    get.__doc__ = doc  # what help() and the docstring audit read
    return property(get, set_, doc=doc)


class Trainer:
    """Trains a model on ``(x, y)`` batches, keeping the loss history (the book's ``StepByStep``).

    Args:
        model: any ``nn.Module``; moved to ``device`` at once.
        loss_fn: ``loss_fn(model(x), y)`` returns a scalar tensor, the mean over the batch.
        optimizer: a torch optimizer over the model's parameters.
        device: where to train; None picks :func:`default_device`.
        progress: progress bar during ``train``: None (automatic: only when stderr
            is a terminal), True or False.
        distributed: under torchrun, this process's
            :class:`~attnlab.training.distributed.DistributedContext`: the model is
            trained wrapped in ``DistributedDataParallel`` (wrapped once, here; do not
            move it afterwards), on ``distributed.device`` unless ``device`` is given,
            and only rank 0 shows a progress bar, writes ``keep_best`` checkpoints and
            logs to TensorBoard. :attr:`model` stays the unwrapped model, so
            checkpoints and ``predict`` are those of a single process.

    Attributes:
        history: the :class:`~attnlab.training.loop.History` of the run; the book's
            attributes below are views of it.
        losses, val_losses: per-epoch mean losses (``val_losses`` holds None for
            epochs run without a validation loader).
        learning_rates: one list of per-group learning rates per scheduler step
            (per epoch or per batch, by scheduler), as in the book.
        total_epochs: epochs trained so far, across ``train`` calls and checkpoints.
        best_val_loss, best_epoch: the lowest validation loss and the epoch (1-based) it came at.
        stopped_early: whether the last ``train`` call was ended by early stopping.
        visualization, handles: layer outputs captured by :meth:`attach_hooks`, and all hook handles.

    Raises:
        TypeError: if ``model``, ``loss_fn``, ``optimizer``, ``progress`` or ``distributed`` has the wrong type.
        ValueError: if ``device`` is not a device.
    """

    def __init__(self, model: nn.Module, loss_fn: Callable[[Any, Any], torch.Tensor], optimizer: Optimizer,
                 *, device: torch.device | str | None = None, progress: bool | None = None,
                 distributed: DistributedContext | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.progress = check_progress(progress)
        if distributed is not None and not isinstance(distributed, DistributedContext):
            raise TypeError(f"distributed must be a DistributedContext, got {type(distributed).__name__}")
        self.distributed = distributed
        self.device = default_device()
        if device is None and distributed is not None:
            device = distributed.device
        self.to(self.device if device is None else device)
        # What the loop trains: the model itself, or (torchrun) the DDP wrapper sharing its parameters.
        self._trained = self.model if distributed is None else distributed.wrap(self.model)
        self.train_loader: Iterable[Any] | None = None
        self.val_loader: Iterable[Any] | None = None
        self.writer: Any = None
        self.scheduler: Any = None
        self.is_batch_lr_scheduler = False
        self._clipping = GradientClipping()
        self.history = History()
        self.visualization: dict[str, Any] = {}
        self.handles: dict[str, Any] = {}
        self._gradients: dict[str, dict[str, list[Any]]] = {}
        self._parameters: dict[str, dict[str, list[Any]]] = {}
        self._seeded = False  # set by set_seed and load_checkpoint; train() then never seeds by itself

    # The book's attributes are views of the history: one record of the run, whichever API trains it.
    losses = _history_view("losses", "Per-epoch mean training losses.")
    val_losses = _history_view("val_losses", "Per-epoch mean validation losses (None without a val_loader).")
    learning_rates = _history_view("learning_rates", "Per-group learning rates after each scheduler step.")
    total_epochs = _history_view("epochs", "Epochs trained so far, across ``train`` calls and checkpoints.")
    best_val_loss = _history_view("best_val_loss", "The lowest validation loss so far (None before any).")
    best_epoch = _history_view("best_epoch", "The (1-based) epoch of :attr:`best_val_loss`.")
    stopped_early = _history_view("stopped_early", "Whether the last ``train`` call was ended by early stopping.")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={type(self.model).__name__}, "
                f"optimizer={type(self.optimizer).__name__}, device={self.device}, "
                f"total_epochs={self.total_epochs})")

    # -- set-up: the device, and the book's setters ----------------------------------

    def to(self, device: torch.device | str) -> Trainer:
        """Move the model (and the optimizer's state) to ``device``.

        If the device is unusable (e.g. ``"cuda"`` on a machine without one), a
        ``RuntimeWarning`` is given and :func:`default_device` is used instead, as
        the book did (it printed a message).

        Returns:
            The trainer.

        Raises:
            ValueError: if ``device`` is not a device name or object.
        """
        target = _check_device(device)
        try:
            self.model.to(target)
        except (RuntimeError, AssertionError) as exc:  # AssertionError: torch built without CUDA
            fallback = default_device()
            warnings.warn(f"could not move the model to {target} ({exc}); using {fallback} instead",
                          RuntimeWarning, stacklevel=2)
            target = fallback
            self.model.to(target)
        self.device = target
        if self.optimizer.state:
            # Loading its own state casts the state tensors (Adam's moments) to the parameters' device.
            self.optimizer.load_state_dict(self.optimizer.state_dict())
        return self

    def set_loaders(self, train_loader: Iterable[Any], val_loader: Iterable[Any] | None = None) -> None:
        """Set the training loader and, optionally, the validation loader.

        Args:
            train_loader: iterable of ``(x, y)`` batches (usually a ``DataLoader``).
            val_loader: the same for validation, or None.

        Raises:
            TypeError: if a loader is not iterable.
        """
        for name, loader in (("train_loader", train_loader), ("val_loader", val_loader)):
            if loader is not None and not isinstance(loader, Iterable):
                raise TypeError(f"{name} must be an iterable of (x, y) batches, got {type(loader).__name__}")
        self.train_loader = train_loader
        self.val_loader = val_loader

    def set_seed(self, seed: int = 42) -> None:
        """Seed torch (CPU and CUDA), Python's ``random`` and the train loader's generator.

        numpy's global generator and cudnn's flags are left alone (the book set both).

        Raises:
            TypeError, ValueError: if ``seed`` is not a non-negative integer.
        """
        seed = check_int("seed", seed, minimum=0)
        rng.seed_all(seed, self.train_loader)
        self._seeded = True

    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Replace the optimizer; a scheduler bound to the old one is dropped, with a warning.

        Raises:
            TypeError: if ``optimizer`` is not a torch optimizer.
        """
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if self.scheduler is not None and self.scheduler.optimizer is not optimizer:
            warnings.warn("the learning-rate scheduler was bound to the old optimizer and is dropped; "
                          "set a new one with set_lr_scheduler", RuntimeWarning, stacklevel=2)
            self.set_lr_scheduler(None)
        self.optimizer = optimizer

    def set_lr_scheduler(self, scheduler: Any) -> None:
        """Set (or, with None, remove) the learning-rate scheduler.

        ``CyclicLR``, ``OneCycleLR`` and ``CosineAnnealingWarmRestarts`` step after
        every batch; the others after every epoch, ``ReduceLROnPlateau`` with the
        epoch's validation loss. Each step appends the learning rates to
        :attr:`learning_rates`.

        Raises:
            TypeError: if ``scheduler`` is not a torch LR scheduler.
            ValueError: if it is bound to another optimizer than the trainer's.
        """
        if scheduler is not None:
            sched.check_scheduler(scheduler, self.optimizer)
        self.scheduler = scheduler
        self.is_batch_lr_scheduler = sched.is_batch_scheduler(scheduler)

    # -- gradient clipping ------------------------------------------------------------

    @property
    def clipping(self) -> dict[str, Any] | None:
        """The clipping setting, e.g. ``{"mode": "norm", "max_norm": 1.0, "norm_type": 2.0}``, or None."""
        return self._clipping.config

    def set_clip_grad_value(self, clip_value: float) -> None:
        """Clamp gradient elements to ``[-clip_value, clip_value]`` after backward (replaces any clipping).

        Raises:
            TypeError, ValueError: if ``clip_value`` is not a positive finite number.
        """
        self._clipping.set_value(clip_value)

    def set_clip_grad_norm(self, max_norm: float, norm_type: float = 2) -> None:
        """Rescale gradients to a joint ``norm_type``-norm of at most ``max_norm`` (replaces any clipping).

        Raises:
            TypeError, ValueError: if ``max_norm`` is not positive and finite or
                ``norm_type`` not positive (``float("inf")`` is allowed).
        """
        self._clipping.set_norm(max_norm, norm_type)

    def set_clip_backprop(self, clip_value: float) -> None:
        """Clamp each gradient to ``[-clip_value, clip_value]`` during backward (replaces any clipping).

        Hooks on every trainable parameter do it, so the clamp happens before
        gradients from several uses of a parameter are summed.

        Raises:
            TypeError, ValueError: if ``clip_value`` is not a positive finite number.
        """
        self._clipping.set_backprop(self.model, clip_value)

    def remove_clip(self) -> None:
        """Stop clipping gradients (removing backprop hooks, if any)."""
        self._clipping.remove()

    # -- training -----------------------------------------------------------------

    def _loop(self, callbacks: list[Callback], min_delta: float = 0.0, threads: int | None = None) -> Loop:
        """The trainer's parts as a :class:`~attnlab.training.loop.Loop` (the one training loop)."""
        if self.train_loader is None:
            raise ValueError("no training data: call set_loaders(train_loader, val_loader) before train()")
        return Loop(self._trained, self.optimizer, self.train_loader, loss=supervised(self.loss_fn),
                    val_loader=self.val_loader, scheduler=self.scheduler,
                    scheduler_interval="batch" if self.is_batch_lr_scheduler else "epoch",
                    clipping=self._clipping, device=self.device, history=self.history, callbacks=callbacks,
                    min_delta=min_delta, distributed=self.distributed, threads=threads)

    def _check_train_args(self, n_epochs: Any, seed: Any, early_stopping: Any, min_delta: Any,
                          keep_best: Any, on_epoch_end: Any) -> int:
        n_epochs = check_int("n_epochs", n_epochs, minimum=1)
        if seed is not None:
            check_int("seed", seed, minimum=0)
        if self.train_loader is None:
            raise ValueError("no training data: call set_loaders(train_loader, val_loader) before train()")
        if early_stopping is not None:
            check_int("early_stopping", early_stopping, minimum=1)
        check_finite_float("min_delta", min_delta)
        if min_delta < 0:
            raise ValueError(f"min_delta must be >= 0, got {min_delta}")
        if keep_best is not None:
            check_writable(keep_best, name="keep_best")
        for name, value in (("early_stopping", early_stopping), ("keep_best", keep_best)):
            if value is not None and self.val_loader is None:
                raise ValueError(f"{name}={value!r} watches the validation loss, but there is no val_loader")
        if on_epoch_end is not None and not callable(on_epoch_end):
            raise TypeError(f"on_epoch_end must be callable, got {type(on_epoch_end).__name__}")
        return n_epochs

    def train(self, n_epochs: int, seed: int | None = None, *, early_stopping: int | None = None,
              min_delta: float = 0.0, keep_best: str | os.PathLike[str] | None = None,
              on_epoch_end: EpochCallback | None = None, callbacks: Sequence[Callback] = (),
              threads: int | None = None) -> None:
        """Train for ``n_epochs`` more epochs, validating after each one if there is a val_loader.

        The epochs run in :func:`attnlab.training.fit`, the loop every attnlab
        experiment shares; this method adds the book's seeding and turns its
        keyword arguments into callbacks.

        Seeding: with ``seed`` given, :meth:`set_seed` is called first. Without it,
        the very first call seeds with 42 (the book's default) unless
        :meth:`set_seed` or :meth:`load_checkpoint` ran before; later calls never
        re-seed, so ``train(3); train(3)`` gives exactly the losses of ``train(6)``.

        Each epoch: a training pass (model in train mode), a validation pass (eval
        mode, no grad), ``total_epochs += 1``, the losses appended, a per-epoch
        scheduler step, best-loss bookkeeping, the ``keep_best`` checkpoint, a
        TensorBoard point at step ``total_epochs``, the progress bar, then
        ``on_epoch_end`` and ``callbacks``. Afterwards every module's train/eval mode
        is restored and the TensorBoard writer flushed (not closed).

        Args:
            n_epochs: number of epochs to run, at least 1.
            seed: if given, seed everything with it first.
            early_stopping: patience: stop once the validation loss has not
                improved (fallen below the best by more than ``min_delta``) for
                this many epochs in a row. None (default) never stops early.
                Epochs before this call count: patience runs from :attr:`best_epoch`.
            min_delta: how much lower than the best a validation loss must be to
                count as an improvement (for early stopping and ``keep_best``).
            keep_best: a checkpoint path, (re)written with :meth:`save_checkpoint`
                at the end of every epoch whose validation loss improves.
            on_epoch_end: called as ``on_epoch_end(trainer, record)`` after each
                epoch, with ``record = {"epoch": int (1-based, = total_epochs),
                "loss": float, "val_loss": float | None, "lr": float (first param
                group's learning rate at the epoch's start), "seconds":
                float (the epoch's training and validation time), "best": bool
                (validation loss improved)}``; plain JSON-ready values, e.g. for
                ``f.write(json.dumps(record) + "\\n")`` into a ``metrics.jsonl``.
            callbacks: more :class:`~attnlab.training.loop.Callback` objects (e.g.
                :class:`~attnlab.training.callbacks.Checkpoint`), called after ``on_epoch_end``.
            threads: the intra-op threads to train on; None: the command line's thread rule
                (:func:`attnlab.training.fit`: one thread for the labs' models, on the CPU).

        Raises:
            TypeError, ValueError: for bad arguments (naming them), no loaders,
                ``early_stopping``/``keep_best``/``ReduceLROnPlateau`` without a
                val_loader, an empty loader or a non-scalar loss.
            FloatingPointError: when an epoch's training loss is NaN or infinite
                (training diverged); the epoch is not recorded.
        """
        n_epochs = self._check_train_args(n_epochs, seed, early_stopping, min_delta, keep_best, on_epoch_end)
        main = self.distributed is None or self.distributed.is_main  # the other ranks write and show nothing
        composed: list[Callback] = []
        if keep_best is not None and main:
            composed.append(KeepBest(keep_best, self.state_dict))
        if self.writer is not None and main:
            composed.append(TensorBoard(self.writer))
        composed.append(EpochProgress(enabled=main and progress_enabled(self.progress)))
        if on_epoch_end is not None:
            composed.append(OnEpochEnd(partial(on_epoch_end, self)))
        composed.extend(callbacks)
        if early_stopping is not None:
            composed.append(EarlyStopping(early_stopping))
        loop = self._loop(composed, float(min_delta), threads)  # checks every part before anything is seeded
        if seed is not None:
            self.set_seed(seed)
        elif not self._seeded:
            self.set_seed(DEFAULT_SEED)
        loop.run(n_epochs)

    # -- using the model -------------------------------------------------------------

    def predict(self, x: Any, *, batch_size: int = 1024) -> Any:
        """The model's output for ``x``, in eval mode, without building a graph.

        Floating inputs are cast to the model's floating dtype (numpy's float64
        to float32, as the book's ``.float()``); integer and bool inputs (token
        ids) keep their dtype. Every module's train/eval mode is restored after.

        Args:
            x: tensor or array-like ``[B, ...]``; split into chunks of ``batch_size``
                along the first axis, the outputs concatenated along it. A model that
                stashes per-call state (e.g. ``alphas``) keeps only the last chunk's.
            batch_size: rows per forward pass, at least 1.

        Returns:
            numpy array ``[B, ...]``; a tuple of arrays for a model returning a tuple.

        Raises:
            TypeError: if ``x`` cannot become a tensor, or the output is not a
                tensor or a tuple of tensors.
            ValueError: if ``x`` has no batch axis or ``batch_size`` < 1, or if ``x``
                spans several chunks and an output has no leading batch axis (a
                GRU's ``h [layers, B, F]``).
        """
        return _predict_numpy(self.model, x, device=self.device, batch_size=batch_size)

    def count_parameters(self) -> int:
        """Number of trainable parameter elements (those with ``requires_grad``)."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def plot_losses(self, *, ax: Any = None, log: bool = True) -> Any:
        """Training and validation losses per epoch, via :func:`attnlab.plotting.plot_losses`.

        Epochs without a validation loss are gaps (NaN); with none at all, only the
        training curve is drawn.

        Returns:
            The matplotlib Figure.

        Raises:
            ImportError: if this installation's ``attnlab.plotting`` has no ``plot_losses``.
        """
        try:  # imported here: training must not import plotting (nor matplotlib) at import time
            from attnlab.plotting import plot_losses
        except ImportError as exc:
            raise ImportError("Trainer.plot_losses needs attnlab.plotting.plot_losses, "
                              "which this installation of attnlab lacks") from exc
        val = None
        if any(v is not None for v in self.val_losses):
            val = [math.nan if v is None else v for v in self.val_losses]
        return plot_losses(list(self.losses), val, ax=ax, log=log)

    def lr_range_test(self, data_loader: Iterable[Any], end_lr: float, num_iter: int = 100,
                      step_mode: str = "exp", alpha: float = 0.05,
                      ax: Any = None) -> tuple[dict[str, list[float]], Any]:
        """Learning-rate range test on this model and optimizer; see :func:`.lr_finder.lr_range_test`.

        Nothing carries over into training: model, optimizer, modes, random
        streams are restored and no gradient is left.

        Returns:
            ``(tracking, fig)``: ``{"lr": [...], "loss": [...]}`` and the Figure.
        """
        return lr_range_test(self.model, self.loss_fn, self.optimizer, data_loader, end_lr, num_iter,
                             step_mode, alpha, ax, device=self.device)

    # -- hooks ---------------------------------------------------------------------

    def attach_hooks(self, layers_to_hook: str | Iterable[str],
                     hook_fn: Callable[..., Any] | None = None) -> None:
        """Attach forward hooks to the named layers, replacing earlier :meth:`attach_hooks` hooks.

        The default hook stores each layer's outputs, as numpy, concatenated along
        the batch axis, in ``self.visualization[name]``; for layers returning a
        tuple (``nn.GRU``'s ``(out, h)``) the first element (see :class:`.hooks.OutputRecorder`).

        Args:
            layers_to_hook: a layer name or names from ``model.named_modules()``.
            hook_fn: a custom ``hook_fn(module, inputs, outputs)`` to register instead.

        Raises:
            TypeError, ValueError: for names that are not strings or not layers of the model.
        """
        layers = resolve_layers(self.model, layers_to_hook)
        for name in list(self.visualization):
            handle = self.handles.pop(name, None)
            if handle is not None:
                handle.remove()
        self.visualization = {}
        for name, layer in layers.items():
            self.visualization[name] = None
            hook = OutputRecorder(self.visualization, name) if hook_fn is None else hook_fn
            self.handles[name] = layer.register_forward_hook(hook)

    def remove_hooks(self) -> None:
        """Remove every hook from :meth:`attach_hooks`, :meth:`capture_gradients` and
        :meth:`capture_parameters` (the captured values are kept)."""
        for handle in self.handles.values():
            handle.remove()
        self.handles = {}

    def capture_gradients(self, layers_to_hook: str | Iterable[str]) -> None:
        """Record every gradient of the named layers' trainable parameters, as numpy copies,
        in ``self._gradients[layer][param_name]`` (a list, one entry per backward)."""
        for name, layer in resolve_layers(self.model, layers_to_hook).items():
            self._gradients[name] = {}
            for pname, param in layer.named_parameters():
                if param.requires_grad:
                    self._gradients[name][pname] = []
                    key = f"{name}.{pname}.grad"
                    if key in self.handles:
                        self.handles.pop(key).remove()
                    self.handles[key] = param.register_hook(GradientRecorder(self._gradients[name][pname]))

    def capture_parameters(self, layers_to_hook: str | Iterable[str]) -> None:
        """Record the named layers' trainable parameters, as numpy copies, on every forward pass,
        in ``self._parameters[layer][param_name]`` (unlike the book, ``visualization`` is left alone)."""
        for name, layer in resolve_layers(self.model, layers_to_hook).items():
            self._parameters[name] = {}
            key = f"{name}.params"
            if key in self.handles:
                self.handles.pop(key).remove()
            self.handles[key] = layer.register_forward_hook(ParameterRecorder(self._parameters[name]))

    # -- TensorBoard ---------------------------------------------------------------

    def set_tensorboard(self, name: str, folder: str | os.PathLike[str] = "runs", *,
                        writer: Any = None) -> None:
        """Log losses to TensorBoard under ``{folder}/{name}_{timestamp}``, or to ``writer``.

        Args:
            name: run name.
            folder: parent folder of the run.
            writer: an object with ``add_scalars``, ``flush`` and ``close`` (a
                ``SummaryWriter`` or a stand-in); when given, nothing is imported.

        Raises:
            ImportError: if ``writer`` is None and ``tensorboard`` is not installed.
        """
        self.writer = writer if writer is not None else make_summary_writer(name, folder)

    def add_graph(self) -> None:
        """Add the model's graph, traced on the first training batch, to TensorBoard (as the book)."""
        if self.train_loader is not None and self.writer is not None:
            x, _ = unpack_batch(next(iter(self.train_loader)), self.device)
            self.writer.add_graph(self.model, x)

    def close(self) -> None:
        """Close the TensorBoard writer, if any (``train`` only flushes it)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    # -- checkpoints ----------------------------------------------------------------

    def _loaders(self) -> dict[str, Iterable[Any] | None]:
        """The loaders whose random streams a checkpoint keeps."""
        return {"train": self.train_loader, "val": self.val_loader}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: the checkpoint's contents.

        Returns:
            A dict with the keys listed in :mod:`attnlab.training.checkpoint`; its
            tensors are the live ones (``torch.save`` copies them).
        """
        return trainer_state(model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                             history=self.history, clipping=self._clipping, loaders=self._loaders())

    def load_state_dict(self, state: dict[str, Any], *, restore_rng: bool = True,
                        where: str = "state") -> None:
        """Restore :meth:`state_dict` output; everything is checked before anything changes.

        Args:
            state: a :meth:`state_dict` (a checkpoint's contents).
            restore_rng: also restore the random streams (see :meth:`load_checkpoint`).
            where: how to name the state in errors (the checkpoint's path).

        Raises:
            ValueError: if the state is malformed or does not fit this model,
                optimizer or scheduler.
        """
        restore_state(state, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                      history=self.history, clipping=self._clipping, loaders=self._loaders(),
                      restore_rng=restore_rng, where=where)
        self._seeded = True  # a resumed run must not be re-seeded by its first train() call

    def save_checkpoint(self, filename: str | os.PathLike[str]) -> Path:
        """Write a checkpoint atomically (see :mod:`attnlab.training.checkpoint` for its keys).

        Returns:
            The path written.

        Raises:
            ValueError: if the folder is missing or not writable.
            OSError: if writing fails; a previous file at ``filename`` stays whole.
        """
        return ckpt.write_checkpoint(filename, self.state_dict())

    def load_checkpoint(self, filename: str | os.PathLike[str], *, restore_rng: bool = True) -> None:
        """Resume from a checkpoint: model, optimizer, scheduler, histories, clipping, random streams.

        Tensors are mapped to this trainer's device; the model's train/eval mode is
        left as it is (the book forced train mode). Set the loaders (and scheduler)
        first so their state is restored too; afterwards ``train`` continues exactly
        where the saved run stopped and never re-seeds by itself.

        Args:
            filename: the checkpoint file.
            restore_rng: also restore the random streams (global torch and Python
                ones, and the loaders' generators); False to load for inference only.

        Raises:
            FileNotFoundError: if ``filename`` does not exist.
            ValueError: if it is unreadable, not a regular file, not an attnlab checkpoint,
                larger than this model and optimizer can need, or does not fit this
                model (naming the mismatched keys), optimizer or scheduler (naming the
                entry: every state tensor's shape and dtype are checked before loading).
        """
        # Bounded by what this model and optimizer can need: a bomb is refused before it is decompressed.
        state = ckpt.read_checkpoint(filename, map_location=self.device,
                                     max_bytes=ckpt.max_checkpoint_bytes(self.model, self.optimizer))
        self.load_state_dict(state, restore_rng=restore_rng, where=str(filename))


StepByStep = Trainer
"""The book's name for :class:`Trainer`."""
