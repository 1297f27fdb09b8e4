"""What a training run does besides training: callbacks for :func:`attnlab.training.fit`.

Each is one concern, composed by passing it in ``callbacks=[...]``:

* :class:`MetricsFile`: one JSON line per epoch (``metrics.jsonl``);
* :class:`Checkpoint`: a checkpoint at the end of every epoch, so a killed run resumes
  (flushed to the disk as often as asked);
* :class:`KeepBest`: a checkpoint whenever the validation loss improves;
* :class:`EarlyStopping`: stop once the validation loss stops improving;
* :class:`EpochProgress` / :class:`StepProgress`: a progress bar over epochs, or steps
  of a bar someone else owns (a sweep's); ``progress=None`` (automatic, :func:`progress_enabled`)
  means a bar when stderr is a terminal and none when it is redirected to a file, a pipe or a
  test's capture, so logs are not filled with carriage returns; ``True`` and ``False`` force it;
* :class:`TensorBoard`: the losses as TensorBoard scalars, steps continuing across calls.
  The ``tensorboard`` package is optional (attnlab does not depend on it, and
  ``torch.utils.tensorboard`` cannot be imported without it): :func:`make_summary_writer`
  imports it the first time a writer is needed and reports its absence as an
  ``ImportError`` that says what to install;
* :class:`OnEpochEnd`: any function of the epoch's record.

Checkpoints are written with :func:`attnlab.training.checkpoint.write_checkpoint`
(atomic: a kill mid-save leaves the previous one whole) from a ``state()``
function given by the owner of the run (the :class:`~attnlab.training.Trainer`'s
``state_dict``), since only it knows every random stream to save.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import Tensor
from tqdm import tqdm

from attnlab._validate import check_finite_float, check_int
from attnlab.training.checkpoint import sync_checkpoint, write_checkpoint
from attnlab.training.loop import Callback, EpochRecord, Loop

__all__ = ["Checkpoint", "EarlyStopping", "EpochProgress", "KeepBest", "MetricsFile", "OnEpochEnd",
           "StepProgress", "TensorBoard", "check_progress", "epoch_bar", "make_summary_writer", "progress_enabled"]

StateFn = Callable[[], dict[str, Any]]


def _check_state_fn(state: Any) -> StateFn:
    if not callable(state):
        raise TypeError(f"state must be a function returning the checkpoint dict, got {type(state).__name__}")
    return state


class OnEpochEnd(Callback):
    """Calls ``function(record)`` after every epoch (see :data:`attnlab.training.loop.EpochRecord`).

    Raises:
        TypeError: if ``function`` is not callable.
    """

    def __init__(self, function: Callable[[EpochRecord], Any]) -> None:
        if not callable(function):
            raise TypeError(f"function must be callable, got {type(function).__name__}")
        self.function = function

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """Call the function with the record."""
        self.function(record)


class MetricsFile(Callback):
    """Appends each epoch's record to ``path`` as one JSON line (the file must exist or be creatable).

    Put it before :class:`Checkpoint`: a kill between the two leaves a line the
    checkpoint does not know of, which a resume drops, never an epoch without its line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """Append the record."""
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


class Checkpoint(Callback):
    """Writes ``state()`` to ``path`` atomically at the end of every epoch.

    Each write is atomic (a kill at any moment leaves the previous checkpoint or the
    new one, whole). ``sync_every`` says how often a write is also flushed to the disk
    (``fsync``), which only a power loss or a system crash needs and which costs most of
    a small model's write (about 8 of 12 ms on attnlab's development machine): 0 (the
    default) flushes every write; ``sync_every=S`` the first write of a :func:`fit` call
    and then one at least ``S`` seconds after the last flushed one; and the last
    checkpoint of the call is flushed when it ends (``on_fit_end``, also when training raised).

    Raises:
        TypeError: if ``state`` is not callable; TypeError / ValueError: if ``sync_every`` is
            not a finite number of at least 0.
    """

    def __init__(self, path: str | os.PathLike[str], state: StateFn, *, sync_every: float = 0.0) -> None:
        self.path = Path(path)
        self.state = _check_state_fn(state)
        self.sync_every = check_finite_float("sync_every", sync_every)
        if self.sync_every < 0:
            raise ValueError(f"sync_every must be >= 0 seconds, got {sync_every!r}")
        self._synced_at: float | None = None  # when the last flushed write was made; None: none in this fit
        self._unsynced = False  # the file on disk is a write not flushed yet

    def on_fit_start(self, loop: Loop) -> None:
        """A new :func:`fit` call: its first write is flushed."""
        self._synced_at, self._unsynced = None, False

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """Write the checkpoint (flushed if ``sync_every`` seconds have passed since the last flushed one)."""
        now = time.monotonic()
        sync = self._synced_at is None or now - self._synced_at >= self.sync_every
        write_checkpoint(self.path, self.state(), sync=sync)
        if sync:
            self._synced_at = now
        self._unsynced = not sync

    def on_fit_end(self, loop: Loop) -> None:
        """Flush the last checkpoint, if it was written without."""
        if self._unsynced:
            self._unsynced = False
            sync_checkpoint(self.path)


class KeepBest(Checkpoint):
    """A :class:`Checkpoint` written only at the end of an epoch whose validation loss is the best so far.

    Raises:
        TypeError: if ``state`` is not callable.
    """

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """Write the checkpoint if this epoch improved."""
        if record["best"]:
            super().on_epoch_end(loop, record)


class EarlyStopping(Callback):
    """Stops training once the validation loss has not improved for ``patience`` epochs in a row.

    Patience runs from the history's best epoch, so epochs of earlier calls count.

    Raises:
        TypeError, ValueError: if ``patience`` is not a positive integer.
    """

    def __init__(self, patience: int) -> None:
        self.patience = check_int("patience", patience, minimum=1)

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """Ask the loop to stop if the patience has run out."""
        history = loop.history
        if history.epochs - (history.best_epoch or 0) >= self.patience:
            loop.should_stop = True


def check_progress(progress: Any) -> bool | None:
    """``progress`` if it is None, True or False.

    Raises:
        TypeError: for anything else.
    """
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None (automatic), True or False, got {progress!r}")
    return progress


def progress_enabled(progress: bool | None) -> bool:
    """Whether to draw the bar: ``progress`` itself, or (None) whether stderr is a terminal."""
    if progress is not None:
        return progress
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty is not None and isatty())


def epoch_bar(n_epochs: int, *, enabled: bool, first_epoch: int = 0) -> tqdm:
    """A bar over ``n_epochs`` epochs on stderr (disabled bars print nothing).

    Args:
        n_epochs: epochs this call will run.
        enabled: draw it at all.
        first_epoch: epochs already done before this call, shown in the description.
    """
    desc = "train" if first_epoch == 0 else f"train (from epoch {first_epoch + 1})"
    return tqdm(total=n_epochs, desc=desc, unit="epoch", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True, leave=True)


class EpochProgress(Callback):
    """A tqdm bar over the epochs of one :func:`fit` call, showing the latest losses (on stderr)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def on_fit_start(self, loop: Loop) -> None:
        """Open the bar over the loop's ``planned_epochs``."""
        self.bar = epoch_bar(loop.planned_epochs, enabled=self.enabled, first_epoch=loop.history.epochs)

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """Advance the bar and show the losses."""
        postfix = {"loss": f"{record['loss']:.4g}"}
        if record["val_loss"] is not None:
            postfix["val_loss"] = f"{record['val_loss']:.4g}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)

    def on_fit_end(self, loop: Loop) -> None:
        """Close the bar."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class StepProgress(Callback):
    """Advances a bar someone else owns (a whole sweep's) by one per training step.

    Args:
        bar: a tqdm bar (or anything with ``update`` and ``set_postfix_str``).
        label: shown with the loss every ``every`` steps.
        every: how often to read the loss (reading it waits for a GPU).
    """

    def __init__(self, bar: Any, label: str, *, every: int = 50) -> None:
        self.bar = bar
        self.label = label
        self.every = check_int("every", every, minimum=1)

    def on_batch_end(self, loop: Loop, loss: Tensor) -> None:
        """Advance the bar; show the loss (the mean over the batch's ``[B]`` samples) now and then."""
        self.bar.update(1)
        if self.bar.n % self.every == 0:
            self.bar.set_postfix_str(f"{self.label}, loss {float(loss):.3f}", refresh=False)


class TensorBoard(Callback):
    """Logs the losses as TensorBoard scalars at step = the epoch (continuing across calls).

    Args:
        writer: a ``SummaryWriter`` or anything with ``add_scalars`` and ``flush``;
            flushed (not closed) at the end of each :func:`fit` call.
    """

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def on_epoch_end(self, loop: Loop, record: EpochRecord) -> None:
        """Add the epoch's losses."""
        scalars = {"training": record["loss"]}
        if record["val_loss"] is not None:
            scalars["validation"] = record["val_loss"]
        self.writer.add_scalars("loss", scalars, global_step=record["epoch"])

    def on_fit_end(self, loop: Loop) -> None:
        """Flush the writer."""
        self.writer.flush()


def make_summary_writer(name: str, folder: str | os.PathLike[str] = "runs") -> Any:
    """A ``SummaryWriter`` logging to ``{folder}/{name}_{YYYYmmddHHMMSS}``, as the book names runs.

    Raises:
        TypeError: if ``name`` is not a non-empty string.
        ImportError: if the ``tensorboard`` package is not installed.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError(
            "set_tensorboard needs the 'tensorboard' package, which is not installed "
            "(pip install tensorboard), or pass writer= an object with add_scalars/flush/close"
        ) from exc
    stamp = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    return SummaryWriter(os.path.join(os.fspath(folder), f"{name}_{stamp}"))
