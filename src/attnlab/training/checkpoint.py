"""Checkpoint files: plain data, written atomically, read safely, checked against the model.

A checkpoint is one ``torch.save`` file holding a dict of plain data only
(tensors, numbers, strings, None, lists, tuples and dicts), so it is read with
``torch.load(..., weights_only=True)``: loading one never runs pickled code.
The book's checkpoints held numpy floats, which forced ``weights_only=False``.

It is written to a temporary file in the destination folder, flushed to disk
(``fsync``; ``sync=False`` leaves that to :func:`sync_checkpoint`, later) and renamed
over the destination (``os.replace``), so a crash or a full disk mid-save leaves
the previous checkpoint whole and loadable. (A process
killed mid-save cannot remove its temporary file, ``.NAME.XXXX.tmp.pt``: it is
never read, and may be deleted.) Reading checks the file before opening it (a
FIFO, a device or a socket is refused unopened), the zip's directory before
decompressing anything (compressed entries, and entries declaring more than the
model can need, are refused: a 3.9 MB deflate stream holds 4 GB), and the
archive before unpickling anything: an empty, truncated or damaged file (the
zip's CRC-32s, which ``torch.load`` ignores) or one that is not a zip archive is
refused with a ``ValueError`` naming it and saying which. What it holds is then
checked against the model, optimizer and scheduler (see
:mod:`attnlab.training.checkpoint_checks`) before any of it is loaded.

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
import stat
import struct
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from attnlab._io import atomic_write, check_regular_file, check_writable
from attnlab._limits import available_memory, format_bytes
from attnlab._validate import check_finite_float
from attnlab.training.rng import check_rng_state

__all__ = ["FORMAT", "MAX_ENTRIES", "REQUIRED_KEYS", "VERSION", "check_format", "read_checkpoint", "sync_checkpoint",
           "to_plain", "write_checkpoint"]

FORMAT = "attnlab.trainer.checkpoint"
VERSION = 1
REQUIRED_KEYS = ("epoch", "model_state_dict", "optimizer_state_dict", "loss", "val_loss", "learning_rates",
                 "optimizer_class", "scheduler_class", "scheduler_state_dict", "best_val_loss", "best_epoch",
                 "clipping", "rng")
_PLAIN_LEAVES = (type(None), bool, int, float, str, torch.Tensor, torch.dtype, torch.device)
_CLIPPING = {"value": ("clip_value",), "norm": ("max_norm", "norm_type"), "backprop": ("clip_value",)}


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


def write_checkpoint(path: str | os.PathLike[str], state: Mapping[str, Any], *, sync: bool = True) -> Path:
    """Write ``state`` to ``path`` atomically.

    Args:
        path: destination file; its folder must exist.
        state: the checkpoint dict.
        sync: flush the file and the rename to the disk (``fsync``) before returning, so that
            the new checkpoint survives a power loss too. False: the rename alone, which a
            killed process (Ctrl-C, SIGTERM, SIGKILL, out of memory) never undoes, since the
            bytes are in the system's cache once written; :func:`sync_checkpoint` makes
            such a checkpoint durable later. Unsynced, it is about 3 times cheaper.

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
            if sync:
                f.flush()
                os.fsync(f.fileno())

    atomic_write(dest, write)
    if sync:
        _fsync_folder(dest.parent if str(dest.parent) else Path("."))
    return dest


def sync_checkpoint(path: str | os.PathLike[str]) -> None:
    """Flush a checkpoint written with ``sync=False`` to the disk: its bytes, then its folder (the rename).

    Raises:
        OSError: if the file cannot be opened or flushed.
    """
    p = Path(path)
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_folder(p.parent if str(p.parent) else Path("."))


_ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive (since torch 1.6); attnlab never writes another kind
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
#: entries a checkpoint's zip directory may list: torch.save writes one per storage (a model of 10,000
#: parameter tensors with Adam: about 40,000); Python's zipfile keeps some 500 bytes per entry it reads
MAX_ENTRIES = 100_000
_METHODS = {zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}


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


def _entry_count(f: BinaryIO) -> int | None:
    """The entry count the zip's end record declares, read before the directory is (None if not found).

    ``zipfile`` reads its whole directory when it opens an archive, so the count
    is bounded first. Its end-record reader is private but has been there since
    Python 2; without it the count is left to the size bounds.
    """
    try:
        end = zipfile._EndRecData(f)  # type: ignore[attr-defined]  # noqa: SLF001
    except (AttributeError, OSError, struct.error):
        return None
    return None if end is None else int(end[4])  # zipfile._ECD_ENTRIES_TOTAL: the entries in all


def _check_entries(name: str, entries: list[zipfile.ZipInfo], file_size: int, max_bytes: int, bound: str) -> None:
    """Refuse compressed entries and sizes past ``max_bytes`` or the file's, from the directory alone.

    torch.save stores every entry uncompressed; a compressed one can expand
    1000-fold (3.9 MB of deflate holds 4 GB of zeros), and torch.load would
    allocate all of it. Stored entries hold their bytes in the file, so together
    they cannot declare more than it has, unless they overlap (a zip bomb's trick).
    """
    refused = f"checkpoint {name!r} cannot be read: "
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED:
            method = _METHODS.get(entry.compress_type, f"method {entry.compress_type}")
            raise ValueError(refused + f"its entry {entry.filename!r} is compressed ({method}: "
                             f"{format_bytes(entry.compress_size)} declaring {format_bytes(entry.file_size)}); "
                             "torch.save stores every entry uncompressed, so it is refused without decompressing it")
        if entry.compress_size != entry.file_size:
            raise ValueError(refused + f"its entry {entry.filename!r} declares {format_bytes(entry.file_size)} "
                             f"but stores {format_bytes(entry.compress_size)}; refused unread")
    total = sum(entry.file_size for entry in entries)
    if total > max_bytes:
        largest = max(entries, key=lambda entry: entry.file_size)
        raise ValueError(refused + f"its entries declare {format_bytes(total)} (the largest, {largest.filename!r}, "
                         f"{format_bytes(largest.file_size)}), more than the {format_bytes(max_bytes)} {bound}; "
                         "refused unread")
    if total > file_size:
        raise ValueError(refused + f"its entries declare {format_bytes(total)}, more than the file's "
                         f"{format_bytes(file_size)}: they overlap; refused unread")


def _load(p: Path, map_location: Any, max_bytes: int, bound: str) -> Any:
    """``torch.load`` of a checkpoint file, refusing anything but plain data; ValueError naming ``p``.

    The file is looked at before it is opened (a FIFO or a device is refused
    unopened), its zip directory before anything is decompressed, its CRC-32s
    (which torch.load ignores) before it is unpickled; all from one open file.
    """
    name = str(p)
    check_regular_file(p, what="checkpoint")
    # O_NONBLOCK: should a FIFO be put in its place after the stat, opening it does not wait for a writer.
    with os.fdopen(os.open(p, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"checkpoint {name!r} is not a regular file; refused without reading it")
        head = f.read(len(_ZIP_MAGIC))
        if not head:
            raise ValueError(f"checkpoint {name!r} cannot be read: it is empty (0 bytes)")
        if head != _ZIP_MAGIC:
            kind = ("a raw pickle, not the zip archive torch.save writes; refused without unpickling it"
                    if head[:1] == b"\x80" else
                    "not the zip archive torch.save writes (a text file, random bytes or another format); "
                    "nothing in it was run")
            raise ValueError(f"checkpoint {name!r} cannot be read: it is {kind}")
        count = _entry_count(f)
        if count is not None and count > MAX_ENTRIES:
            raise ValueError(f"checkpoint {name!r} cannot be read: its zip directory lists {count} entries, "
                             f"more than the {MAX_ENTRIES} any checkpoint needs; refused unread")
        try:
            archive = zipfile.ZipFile(f)
        except Exception as exc:  # BadZipFile, EOFError, OSError... by corruption kind
            reason = "its zip directory, at the end of the file, is missing or damaged" \
                if str(exc) == "File is not a zip file" else f"{type(exc).__name__}: {exc}"
            raise ValueError(f"checkpoint {name!r} cannot be read: it is truncated or corrupt ({reason})") from exc
        with archive:
            _check_entries(name, archive.infolist(), info.st_size, max_bytes, bound)
            # torch.load does not check the archive's CRC-32s: a flipped byte in a tensor would load silently.
            try:
                damaged = archive.testzip()
            except Exception as exc:  # a damaged local header: BadZipFile, EOFError, OSError...
                raise ValueError(f"checkpoint {name!r} cannot be read: it is truncated or corrupt "
                                 f"({type(exc).__name__}: {exc})") from exc
        if damaged is not None:
            raise ValueError(f"checkpoint {name!r} cannot be read: it is corrupt "
                             f"(the bytes of {damaged!r} do not match their checksum)")
        f.seek(0)
        try:
            with warnings.catch_warnings():  # torch's own advice (e.g. on pickle protocols) is not for our users
                warnings.simplefilter("ignore")
                return torch.load(f, map_location=map_location, weights_only=True)
        except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, KeyError... by corruption
            raise ValueError(f"checkpoint {name!r} cannot be read: {_load_failure(exc)}") from exc


def read_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu", *,
                    max_bytes: int | None = None) -> dict[str, Any]:
    """Read and check an attnlab checkpoint (never unpickling code, never decompressing a bomb).

    The file must be a regular file (a symlink to one is fine) holding the zip
    archive ``torch.save`` writes: entries stored uncompressed, declaring no more
    than ``max_bytes`` in all. It is read with ``weights_only=True``, so a pickled
    object (a class, a function such as ``os.system``) is refused before anything
    in it runs.

    Args:
        path: the checkpoint file.
        map_location: where tensors go, as for ``torch.load``.
        max_bytes: the most its entries may hold, in bytes; a trainer passes
            :func:`~attnlab.training.checkpoint_checks.max_checkpoint_bytes` of its
            model and optimizer. None: the memory this machine has available now.

    Returns:
        The checkpoint dict (see the module docstring for its keys). Its contents are
        checked against a model by :func:`~attnlab.training.checkpoint_checks.check_fits`.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if ``path`` is a folder, a FIFO, a device or a socket; if the file
            is empty, truncated, corrupt, not a ``torch.save`` zip archive, holds
            compressed entries, declares more than ``max_bytes`` or holds pickled
            objects beyond plain data; or if it is not an attnlab checkpoint or
            comes from a newer version. The message names the path and says which.
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"checkpoint {str(p)!r} is a folder, not a file")
    if max_bytes is None:
        max_bytes, bound = available_memory(), "memory this machine has available"
    else:
        bound = "this model's checkpoint can need"
    obj = _load(p, map_location, max_bytes, bound)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError(f"{str(p)!r} is not an attnlab checkpoint (no 'format': {FORMAT!r} entry)")
    version = obj.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ValueError(f"checkpoint {str(p)!r} has version {version!r}; this attnlab reads up to {VERSION}")
    missing = [key for key in REQUIRED_KEYS if key not in obj]
    if missing:
        raise ValueError(f"checkpoint {str(p)!r} lacks {', '.join(map(repr, missing))}")
    return obj


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_clipping(clipping: Any, where: str) -> None:
    """The clipping setting: None, or one the trainer writes, its numbers as ``Clipping.set_*`` wants them."""
    if clipping is None:
        return
    if not isinstance(clipping, dict) or clipping.get("mode") not in _CLIPPING:
        raise ValueError(f"checkpoint {where!r}: unknown clipping setting {_shown(clipping)}")
    keys = ("mode", *_CLIPPING[clipping["mode"]])
    for key in keys:
        if key not in clipping:
            raise ValueError(f"checkpoint {where!r}: clipping: {_shown(clipping)} lacks {key!r}")
    for key in clipping:
        if key not in keys:
            raise ValueError(f"checkpoint {where!r}: clipping: unknown key {key!r} for clipping by "
                             f"{clipping['mode']}")
    try:
        for key in keys[1:]:
            if key == "norm_type":  # clip_grad_norm_ takes any positive order, inf (the max norm) included
                if not _is_number(clipping[key]) or not clipping[key] > 0:
                    raise ValueError(f"norm_type must be a positive number (or inf), got {clipping[key]!r}")
            else:
                check_finite_float(key, clipping[key], positive=True)
    except (TypeError, ValueError) as err:
        raise ValueError(f"checkpoint {where!r}: clipping[{key!r}]: {err}") from None


def _histories_ok(state: Mapping[str, Any]) -> bool:
    return (
        type(state["epoch"]) is int and state["epoch"] >= 0
        and isinstance(state["loss"], list) and all(_is_number(v) for v in state["loss"])
        and isinstance(state["val_loss"], list) and all(v is None or _is_number(v) for v in state["val_loss"])
        and isinstance(state["learning_rates"], list)
        and all(isinstance(lrs, list) and all(_is_number(v) for v in lrs) for lrs in state["learning_rates"])
        and (state["best_val_loss"] is None or _is_number(state["best_val_loss"]))
        and (state["best_epoch"] is None or type(state["best_epoch"]) is int)
    )


def check_format(state: Mapping[str, Any], where: str) -> None:
    """Check the entries that stand on their own: the keys, histories, clipping setting, random-number state.

    Raises:
        ValueError: naming the checkpoint ``where`` and the entry.
    """
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise ValueError(f"checkpoint {where!r} lacks {', '.join(map(repr, missing))}")
    if not _histories_ok(state):
        raise ValueError(f"checkpoint {where!r}: the epoch count or loss histories are malformed")
    # One loss and one validation loss per epoch, as training appends them: a resumed run's history
    # (and its metrics.jsonl, checked against it) must not be shorter or longer than its epochs.
    if not len(state["loss"]) == len(state["val_loss"]) == state["epoch"]:
        raise ValueError(f"checkpoint {where!r} holds {state['epoch']} epochs but {len(state['loss'])} losses and "
                         f"{len(state['val_loss'])} validation losses; it is damaged")
    _check_clipping(state["clipping"], where)
    check_rng_state(state["rng"], f"checkpoint {where!r}")
