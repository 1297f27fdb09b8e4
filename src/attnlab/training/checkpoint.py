"""Checkpoint files: plain data, written atomically, read safely, checked against the model.

A checkpoint is one ``torch.save`` file holding a dict of plain data only
(tensors, numbers, strings, None, lists, tuples and dicts), so it is read with
``torch.load(..., weights_only=True)``: loading one never runs pickled code.
The book's checkpoints held numpy floats, which forced ``weights_only=False``.

It is written to a temporary file in the destination folder, flushed to disk
(``fsync``) and renamed over the destination (``os.replace``), so a crash or a
full disk mid-save leaves the previous checkpoint whole and loadable. (A process
killed mid-save cannot remove its temporary file, ``.NAME.XXXX.tmp.pt``: it is
never read, and may be deleted.) Reading checks the archive before unpickling
anything: an empty, truncated or damaged file (the zip's CRC-32s, which
``torch.load`` ignores) or one that is not a zip archive is refused with a
``ValueError`` naming it and saying which.

Keys (version 1). The first five are the book's names, so code written for its
checkpoints reads ours:

* ``"format"``: ``"attnlab.trainer.checkpoint"``; ``"version"``: 1;
* ``"epoch"``: ``total_epochs``, the number of epochs trained;
* ``"model_state_dict"``, ``"optimizer_state_dict"``;
* ``"loss"``, ``"val_loss"``: the per-epoch losses (floats; ``val_loss`` items may be None);
* ``"learning_rates"``: the scheduler's per-step learning rates, one list of floats per step;
* ``"optimizer_class"``, ``"scheduler_class"`` (or None), ``"scheduler_state_dict"`` (or None);
* ``"best_val_loss"``, ``"best_epoch"``: the best validation loss so far and its epoch (or None);
* ``"clipping"``: the gradient-clipping setting (or None);
* ``"rng"``: random-number state (see :mod:`attnlab.training.rng`).
"""

from __future__ import annotations

import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab._io import atomic_write, check_writable
from attnlab.training.rng import check_rng_state

__all__ = ["FORMAT", "VERSION", "check_fits", "check_state_dict", "read_checkpoint", "to_plain",
           "write_checkpoint"]

FORMAT = "attnlab.trainer.checkpoint"
VERSION = 1
REQUIRED_KEYS = ("epoch", "model_state_dict", "optimizer_state_dict", "loss", "val_loss", "learning_rates",
                 "optimizer_class", "scheduler_class", "scheduler_state_dict", "best_val_loss", "best_epoch",
                 "clipping", "rng")
_PLAIN_LEAVES = (type(None), bool, int, float, str, torch.Tensor, torch.dtype, torch.device)
_MAX_NAMES = 8  # names listed in a mismatch message before "and N more"


def to_plain(obj: Any, where: str = "checkpoint") -> Any:
    """``obj`` as plain data: numpy scalars become Python numbers, containers are rebuilt.

    Args:
        obj: the object to save.
        where: how to name ``obj`` in an error (its key path).

    Returns:
        An equal object made of tensors, numbers, strings, None, lists, tuples and dicts.

    Raises:
        TypeError: naming the key path of the first object that is not plain data.
    """
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, _PLAIN_LEAVES):
        return obj
    if isinstance(obj, dict):
        plain = {}
        for key, value in obj.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where} has a key {key!r} of type {type(key).__name__}; "
                                "keys must be str or int")
            plain[key] = to_plain(value, f"{where}[{key!r}]")
        return plain
    if isinstance(obj, (list, tuple)):
        items = [to_plain(value, f"{where}[{i}]") for i, value in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    raise TypeError(
        f"{where} is of type {type(obj).__name__}, not plain data; checkpoints hold only tensors, "
        "numbers, strings, None, lists, tuples and dicts"
    )


def _fsync_folder(folder: Path) -> None:
    # Makes the rename itself durable; not possible (nor needed) on every platform.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_checkpoint(path: str | os.PathLike[str], state: Mapping[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically.

    Args:
        path: destination file; its folder must exist.
        state: the checkpoint dict.

    Returns:
        The destination path.

    Raises:
        ValueError: if ``path`` is a folder or its folder is missing or not writable.
        TypeError: if ``state`` holds something that is not plain data.
        OSError: if writing fails; the previous file at ``path`` is then untouched.
    """
    dest = check_writable(path, name="checkpoint")
    plain = to_plain(dict(state))

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            torch.save(plain, f)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(dest, write)
    _fsync_folder(dest.parent if str(dest.parent) else Path("."))
    return dest


_ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive (since torch 1.6); attnlab never writes another kind
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def _load_failure(exc: BaseException) -> str:
    """Why ``torch.load(..., weights_only=True)`` refused a file, in one short clause."""
    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError) and "Weights only load failed" in text:
        found = _GLOBAL.search(text)
        if found:
            return (f"it holds pickled objects beyond plain data ({found.group(1)}); "
                    "refused without running them")
        operand = re.search(r"Unsupported operand \d+", text)
        return ("it holds pickle data beyond plain data, or is corrupt"
                + (f" ({operand.group(0)})" if operand else "") + "; refused without running it")
    first = text.strip().split(". ")[0].splitlines()[0].strip() if text.strip() else ""
    detail = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return f"it is truncated or corrupt ({detail})"


def _load(p: Path, map_location: Any) -> Any:
    """``torch.load`` of a checkpoint file, refusing anything but plain data; ValueError naming ``p``."""
    with open(p, "rb") as f:
        head = f.read(len(_ZIP_MAGIC))
    if not head:
        raise ValueError(f"checkpoint {str(p)!r} cannot be read: it is empty (0 bytes)")
    if head != _ZIP_MAGIC:
        kind = ("a raw pickle, not the zip archive torch.save writes; refused without unpickling it"
                if head[:1] == b"\x80" else
                "not the zip archive torch.save writes (a text file, random bytes or another format); "
                "nothing in it was run")
        raise ValueError(f"checkpoint {str(p)!r} cannot be read: it is {kind}")
    # torch.load does not check the archive's CRC-32s: a flipped byte in a tensor would load silently.
    try:
        with zipfile.ZipFile(p) as archive:
            damaged = archive.testzip()
    except Exception as exc:  # BadZipFile, EOFError, OSError... by corruption kind
        reason = "its zip directory, at the end of the file, is missing or damaged" \
            if str(exc) == "File is not a zip file" else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"checkpoint {str(p)!r} cannot be read: it is truncated or corrupt ({reason})") from exc
    if damaged is not None:
        raise ValueError(f"checkpoint {str(p)!r} cannot be read: it is corrupt "
                         f"(the bytes of {damaged!r} do not match their checksum)")
    try:
        with warnings.catch_warnings():  # torch's own advice (e.g. on pickle protocols) is not for our users
            warnings.simplefilter("ignore")
            return torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, KeyError... by corruption kind
        raise ValueError(f"checkpoint {str(p)!r} cannot be read: {_load_failure(exc)}") from exc


def read_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Read and check an attnlab checkpoint (never unpickling code).

    The file must be the zip archive ``torch.save`` writes; it is read with
    ``weights_only=True``, so a pickled object (a class, a function such as
    ``os.system``) is refused before anything in it runs.

    Args:
        path: the checkpoint file.
        map_location: where tensors go, as for ``torch.load``.

    Returns:
        The checkpoint dict (see the module docstring for its keys).

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if ``path`` is a folder; if the file is empty, truncated,
            corrupt, not a ``torch.save`` zip archive, or holds pickled objects
            beyond plain data; or if it is not an attnlab checkpoint or comes
            from a newer version. The message names the path and says which.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"checkpoint {str(p)!r} does not exist")
    if p.is_dir():
        raise ValueError(f"checkpoint {str(p)!r} is a folder, not a file")
    obj = _load(p, map_location)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError(f"{str(p)!r} is not an attnlab checkpoint (no 'format': {FORMAT!r} entry)")
    version = obj.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ValueError(f"checkpoint {str(p)!r} has version {version!r}; this attnlab reads up to {VERSION}")
    missing = [key for key in REQUIRED_KEYS if key not in obj]
    if missing:
        raise ValueError(f"checkpoint {str(p)!r} lacks {', '.join(map(repr, missing))}")
    return obj


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMES])
    return shown + (f" and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else "")


def check_state_dict(expected: Mapping[str, Any], loaded: Any, *, what: str, where: str) -> None:
    """Check that a saved state dict fits a module: same keys, same tensor shapes.

    Args:
        expected: the module's own ``state_dict()``.
        loaded: the saved one.
        what: what it is, for the message (``"model"``).
        where: the checkpoint's path, for the message.

    Raises:
        ValueError: naming the missing and unexpected keys and the shape mismatches.
    """
    if not isinstance(loaded, Mapping):
        raise ValueError(f"checkpoint {where!r}: the {what} state is a {type(loaded).__name__}, not a dict")
    missing = [k for k in expected if k not in loaded]
    unexpected = [k for k in loaded if k not in expected]
    shapes = [
        f"{k} {tuple(loaded[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in loaded and isinstance(v, torch.Tensor) and isinstance(loaded[k], torch.Tensor)
        and loaded[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing keys {_names(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {_names(unexpected)}")
        if shapes:
            parts.append(f"shape mismatches (checkpoint vs {what}) {_names(shapes)}")
        raise ValueError(f"checkpoint {where!r} does not fit this {what}: " + "; ".join(parts))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_fits(state: Mapping[str, Any], *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               scheduler: Any, where: str) -> None:
    """Check a checkpoint against a trainer's model, optimizer and scheduler before anything is loaded.

    Args:
        state: the checkpoint dict (from :func:`read_checkpoint`).
        model, optimizer, scheduler: the trainer's (scheduler may be None).
        where: the checkpoint's path, for messages.

    Raises:
        ValueError: naming the mismatched model keys or shapes, the optimizer or
            scheduler class, the parameter-group sizes, or the malformed entry.
    """
    check_state_dict(model.state_dict(), state["model_state_dict"], what="model", where=where)
    if state["optimizer_class"] != type(optimizer).__name__:
        raise ValueError(f"checkpoint {where!r} holds a {state['optimizer_class']} optimizer's state; "
                         f"this trainer's optimizer is a {type(optimizer).__name__}")
    saved_opt = state["optimizer_state_dict"]
    saved_groups = saved_opt.get("param_groups", []) if isinstance(saved_opt, dict) else []
    saved_sizes = [len(g["params"]) for g in saved_groups]
    sizes = [len(g["params"]) for g in optimizer.param_groups]
    if saved_sizes != sizes:
        raise ValueError(f"checkpoint {where!r}: optimizer parameter groups of sizes {saved_sizes} "
                         f"do not fit this optimizer's {sizes}")
    if state["scheduler_class"] is not None and scheduler is not None \
            and state["scheduler_class"] != type(scheduler).__name__:
        raise ValueError(f"checkpoint {where!r} holds a {state['scheduler_class']} scheduler's state; "
                         f"this trainer's scheduler is a {type(scheduler).__name__}")
    histories_ok = (
        isinstance(state["epoch"], int) and state["epoch"] >= 0
        and isinstance(state["loss"], list) and all(_is_number(v) for v in state["loss"])
        and isinstance(state["val_loss"], list) and all(v is None or _is_number(v) for v in state["val_loss"])
        and isinstance(state["learning_rates"], list)
        and all(isinstance(lrs, list) and all(_is_number(v) for v in lrs) for lrs in state["learning_rates"])
        and (state["best_val_loss"] is None or _is_number(state["best_val_loss"]))
        and (state["best_epoch"] is None or isinstance(state["best_epoch"], int))
    )
    if not histories_ok:
        raise ValueError(f"checkpoint {where!r}: the epoch count or loss histories are malformed")
    clipping = state["clipping"]
    if clipping is not None and (not isinstance(clipping, dict)
                                 or clipping.get("mode") not in ("value", "norm", "backprop")):
        raise ValueError(f"checkpoint {where!r}: unknown clipping setting {clipping!r}")
    check_rng_state(state["rng"], f"checkpoint {where!r}")
