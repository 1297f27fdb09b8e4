"""Checkpoint files: plain data, written atomically, read safely, checked against what they are loaded into.

A checkpoint is one ``torch.save`` file holding a dict of plain data only
(tensors, numbers, strings, None, lists, tuples and dicts), so it is read with
``torch.load(..., weights_only=True)``: loading one never runs pickled code.
The book's checkpoints held numpy floats, which forced ``weights_only=False``.

Writing. It is written to a temporary file in the destination folder, flushed to disk
(``fsync``; ``sync=False`` leaves that to :func:`sync_checkpoint`, later) and renamed
over the destination (``os.replace``), so a crash or a full disk mid-save leaves
the previous checkpoint whole and loadable. (A process
killed mid-save cannot remove its temporary file, ``.NAME.XXXX.tmp.pt``: it is
never read, and may be deleted.)

Reading. :func:`read_checkpoint` checks the file before opening it (a
FIFO, a device or a socket is refused unopened), the zip's directory before
decompressing anything (compressed entries, and entries declaring more than the
model can need, are refused: a 3.9 MB deflate stream holds 4 GB), and the
archive before unpickling anything: an empty, truncated or damaged file (the
zip's CRC-32s, which ``torch.load`` ignores) or one that is not a zip archive is
refused with a ``ValueError`` naming it and saying which.

Checking. A checkpoint's contents are data someone may have crafted, and torch's own
``load_state_dict`` methods check little: a module's checks keys and
shapes; an optimizer's copies its state tensors as they are (casting dtypes
only), and the fused Adam kernel trusts that ``exp_avg`` has its parameter's
size, so a one-element ``exp_avg`` makes it write past the end of it (glibc then
aborts the process); a scheduler's takes any dict; ``random.setstate`` and
``torch.set_rng_state`` raise only once the model and optimizer have changed.
So :func:`check_fits` checks everything first, and nothing of a checkpoint reaches a
kernel before all of it has passed:

* the model state: the keys and shapes (every mismatch named), then every entry
  a strided tensor of the model's dtype;
* the optimizer state: the same parameter groups, each with the keys this
  optimizer has and values of the same types (numbers finite; the implementation
  settings ``foreach``, ``fused``, ``capturable``, ``differentiable`` equal), the
  parameter ids listed once; per parameter, for torch's optimizers, only the keys
  that optimizer keeps, all it needs, each tensor of its parameter's shape and
  dtype and densely laid out, each step count a finite float >= 0;
* the scheduler state: the keys and value types of this scheduler's own
  ``state_dict()``, list lengths included;
* the histories, the clipping setting and the random-number state (:func:`check_format`).

A saved value is compared with the live value it is to replace (the same types, list
lengths, keys, tensor shapes and dtypes, finite numbers), and a tensor must be dense
inside its storage, as the kernels that update state in place assume. Each refusal is a
ValueError ``"checkpoint '<path>': <entry>: <problem>"``, the entry named by its key path,
e.g. ``optimizer_state_dict['state'][3]['exp_avg']: shape (1,) does not fit parameter 3's (2, 6)``.

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

import math
import os
import pickle
import re
import reprlib
import stat
import struct
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

import numpy as np
import torch

from attnlab._io import atomic_write, check_regular_file, check_writable
from attnlab._limits import available_memory, format_bytes
from attnlab._validate import check_finite_float
from attnlab.training.rng import check_rng_state

__all__ = ["FORMAT", "MAX_ENTRIES", "OPTIMIZER_STATE", "REQUIRED_KEYS", "SCHEDULER_GROUP_KEYS", "SLACK_BYTES",
           "VERSION", "check_fits", "check_format", "check_state_dict", "guard_optimizer", "max_checkpoint_bytes",
           "read_checkpoint", "sync_checkpoint", "to_plain", "write_checkpoint"]

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
            :func:`max_checkpoint_bytes` of its
            model and optimizer. None: the memory this machine has available now.

    Returns:
        The checkpoint dict (see the module docstring for its keys). Its contents are
        checked against a model by :func:`check_fits`.

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


# -- saved values against live ones: the same kind, shape and layout ----------------------------------------

#: a repr short enough for one line of an error message
_short = reprlib.Repr()
_short.maxlist = _short.maxtuple = _short.maxdict = 4
_short.maxstring = _short.maxother = 40


def _with_article(name: str) -> str:
    """``name`` with its indefinite article: "an int", "a float"."""
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _is_number(value: Any) -> bool:
    """True for an int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _layout_problem(t: torch.Tensor) -> str | None:
    """Why ``t`` (any shape ``[...]``) is not a dense strided tensor inside its storage (None if it is).

    Kernels that update state in place (the fused optimizers) walk ``numel``
    elements from the first: a broadcast view (stride 0) of one element would be
    written past its storage's end.
    """
    if t.layout != torch.strided:
        return f"a {t.layout} tensor, not a strided one"
    if t.numel() == 0:
        return None
    expected = 1
    for size, stride in sorted(((n, s) for n, s in zip(t.shape, t.stride(), strict=True) if n != 1),
                               key=lambda pair: pair[1]):
        if stride != expected:
            return (f"its elements overlap or leave gaps (strides {tuple(t.stride())} for shape "
                    f"{tuple(t.shape)}); torch.save writes dense tensors")
        expected *= size
    if (t.storage_offset() + t.numel()) * t.element_size() > t.untyped_storage().nbytes():
        return "it reaches past the end of its storage"
    return None


def _like(value: Any, own: Any, owner: str, *, finite: bool,
          counters: Mapping[str, int] | None = None) -> tuple[str, str] | None:
    """How ``value`` differs in kind from ``own``, this object's own value: ``(sub-entry, problem)``, or None.

    Same types (an int is a float; a float where ``own`` is an int only outside
    ``counters``), lists and tuples of the same length, records (dicts with str
    keys) with the same keys, tensors of the same shape and dtype; None where
    ``own`` is None, or a plain scalar. Numbers are never NaN, and finite if ``finite``.
    """
    def kind() -> tuple[str, str]:
        return "", (f"{_short.repr(value)} is {_with_article(type(value).__name__)}, where this {owner} has "
                    f"{_with_article(type(own).__name__)} ({_short.repr(own)})")

    if own is None:
        return None if value is None or isinstance(value, (bool, int, float, str)) else kind()
    if isinstance(own, bool) or isinstance(own, str):
        return None if type(value) is type(own) else kind()
    if _is_number(own):
        if not _is_number(value):
            return kind()
        if math.isnan(value) or (finite and not math.isfinite(value)):
            return "", f"{value!r} is not a finite number"
        return None
    if isinstance(own, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            return kind()
        if len(value) != len(own):
            return "", f"{len(value)} items, where this {owner} has {len(own)}"
        for i, (item, own_item) in enumerate(zip(value, own, strict=True)):
            found = _like(item, own_item, owner, finite=finite, counters=counters)
            if found:
                return f"[{i}]{found[0]}", found[1]
        return None
    if isinstance(own, dict):
        if not isinstance(value, dict):
            return kind()
        if not all(isinstance(k, str) for k in own):  # a map of data (MultiStepLR's milestones): like its items
            sample = next(iter(own.items()), None)
            for k, item in value.items():
                if sample is not None and (type(k) is not type(sample[0]) or _like(item, sample[1], owner,
                                                                                    finite=finite)):
                    return f"[{k!r}]", f"{_short.repr(item)} does not fit this {owner}'s {_short.repr(own)}"
            return None
        missing, unknown = [k for k in own if k not in value], [k for k in value if k not in own]
        if missing or unknown:
            return "", f"lacks {missing[0]!r}, which this {owner} has" if missing else \
                f"unknown key {unknown[0]!r} for {owner}"
        for k, item in value.items():
            if counters and k in counters and isinstance(own[k], int):
                if type(item) is not int:
                    return f"[{k!r}]", (f"{_short.repr(item)} is {_with_article(type(item).__name__)}, "
                                        f"where this {owner} has an int ({own[k]!r})")
                if item < counters[k]:
                    return f"[{k!r}]", f"{item} is less than {counters[k]}"
            found = _like(item, own[k], owner, finite=finite, counters=counters)
            if found:
                return f"[{k!r}]{found[0]}", found[1]
        return None
    if isinstance(own, torch.Tensor):
        if not isinstance(value, torch.Tensor):
            return kind()
        if value.shape != own.shape or value.dtype != own.dtype:
            return "", (f"a {value.dtype} tensor of shape {tuple(value.shape)}, where this {owner} has "
                        f"a {own.dtype} one of shape {tuple(own.shape)}")
        if value.is_floating_point() and finite and not bool(torch.isfinite(value).all()):
            return "", "holds a number that is not finite"
        problem = _layout_problem(value)
        return ("", problem) if problem else None
    return None if type(value) is type(own) else kind()


# -- a checkpoint against the model, optimizer and scheduler it is loaded into -----------------------------

#: bytes a checkpoint may hold beyond its model's and optimizer's tensors: the pickle, histories, RNG states
SLACK_BYTES = 64 * 2**20

_MAX_NAMES = 8  # names listed in a mismatch message before "and N more"

# Per-parameter optimizer state, for torch's optimizers: key -> (kind, when it is required). Kinds: "param",
# a tensor of the parameter's shape and dtype; "param?", that or None; "scalar", a finite number >= 0 (a float
# scalar tensor or a Python number). Required: always (True), never (False), or when the named
# param-group setting is true (the optimizer's step then reads it without checking).
_Spec = dict[str, tuple[str, bool | str]]
_STEP: tuple[str, bool | str] = ("scalar", True)
_ADAM: _Spec = {"step": _STEP, "exp_avg": ("param", True), "exp_avg_sq": ("param", True)}
_AMSGRAD: _Spec = {**_ADAM, "max_exp_avg_sq": ("param", "amsgrad")}
OPTIMIZER_STATE: dict[str, _Spec] = {
    "Adam": _AMSGRAD, "AdamW": _AMSGRAD, "SparseAdam": _ADAM, "RAdam": _ADAM,
    "NAdam": {**_ADAM, "mu_product": ("scalar", True)},
    "Adamax": {"step": _STEP, "exp_avg": ("param", True), "exp_inf": ("param", True)},
    "Adagrad": {"step": _STEP, "sum": ("param", True)},
    "Adadelta": {"step": _STEP, "square_avg": ("param", True), "acc_delta": ("param", True)},
    "RMSprop": {"step": _STEP, "square_avg": ("param", True), "momentum_buffer": ("param", "momentum"),
                "grad_avg": ("param", "centered")},
    "Rprop": {"step": _STEP, "prev": ("param", True), "step_size": ("param", True)},
    "ASGD": {"step": _STEP, "eta": ("scalar", True), "mu": ("scalar", True), "ax": ("param", True)},
    "SGD": {"momentum_buffer": ("param?", False)},  # torch < 2.1 kept None when momentum is 0
}
# How the optimizer computes, not what it learned: loading other values would switch its kernel (and some
# combinations, such as fused with differentiable, only fail at the first step).
_IMPLEMENTATION = ("foreach", "fused", "capturable", "differentiable")
#: keys LR schedulers add to the param groups: present or not depending on whether a scheduler was set
SCHEDULER_GROUP_KEYS = ("initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum", "swa_lr")
# Scheduler counters that torch uses as integers, and their least values.
_COUNTERS = {"last_epoch": -1, "_step_count": 0}
# Scheduler flags that torch's versions since 2.3 (the oldest attnlab supports) gained or lost.
_VERSION_FLAGS = ("verbose", "_is_initial", "_get_lr_called_within_step")


def max_checkpoint_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """The most a checkpoint of ``model`` (and ``optimizer``) can hold uncompressed, in bytes.

    The model's storages, the optimizer's state (per parameter, as many
    parameter-sized tensors as that optimizer keeps: 3 for Adam with amsgrad, 1
    for SGD, 4 for one :data:`OPTIMIZER_STATE` does not list), and
    :data:`SLACK_BYTES` for the pickle, the histories and the random-number states.
    """
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in model.state_dict().values() if isinstance(t, torch.Tensor)}
    total = sum(storages.values()) + SLACK_BYTES
    if optimizer is not None:
        spec = _state_spec(optimizer)
        per_param = 4 if spec is None else sum(kind != "scalar" for kind, _ in spec.values())
        total += sum(per_param * p.numel() * p.element_size() for g in optimizer.param_groups for p in g["params"])
    return total


def _state_spec(optimizer: torch.optim.Optimizer) -> _Spec | None:
    """The :data:`OPTIMIZER_STATE` entry of this optimizer, if it is torch's own class of that name."""
    name = type(optimizer).__name__
    return OPTIMIZER_STATE.get(name) if getattr(torch.optim, name, None) is type(optimizer) else None


def _refuse(where: str, entry: str, problem: str) -> NoReturn:
    raise ValueError(f"checkpoint {where!r}: {entry}: {problem}")


def _class_name(value: Any) -> str:
    """A saved class name as it is, anything else (a crafted value) shortened."""
    return value if isinstance(value, str) and value.isidentifier() else _short.repr(value)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMES])
    return shown + (f" and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else "")


def check_state_dict(expected: Mapping[str, Any], loaded: Any, *, what: str, where: str,
                     key: str = "model_state_dict") -> None:
    """Check that a saved state dict fits a module: same keys, tensors of the same shapes and dtypes.

    Args:
        expected: the module's own ``state_dict()``.
        loaded: the saved one.
        what: what it is, for the message (``"model"``, ``"selfattn-pe model"``).
        where: the checkpoint's path, for the message.
        key: the saved one's key in the checkpoint, for the message.

    Raises:
        ValueError: naming an entry that is not a strided tensor; else all missing and
            unexpected keys and shape mismatches; else the first dtype mismatch.
    """
    if not isinstance(loaded, Mapping):
        raise ValueError(f"checkpoint {where!r}: the {what} state is a {type(loaded).__name__}, not a dict")
    for name, value in loaded.items():
        if not isinstance(expected.get(name), torch.Tensor):
            continue  # an unexpected key (named below), or a module's extra state, which may be anything
        if not isinstance(value, torch.Tensor):
            _refuse(where, f"{key}[{name!r}]", f"{_with_article(type(value).__name__)}, not a tensor")
        if value.layout != torch.strided:
            _refuse(where, f"{key}[{name!r}]", f"a {value.layout} tensor, not a strided one")
    missing = [k for k in expected if k not in loaded]
    unexpected = [k for k in loaded if k not in expected]
    shapes = [f"{k} {tuple(loaded[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
              if k in loaded and isinstance(v, torch.Tensor) and loaded[k].shape != v.shape]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing keys {_names(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {_names(unexpected)}")
        if shapes:
            parts.append(f"shape mismatches (checkpoint vs {what}) {_names(shapes)}")
        raise ValueError(f"checkpoint {where!r} does not fit this {what}: " + "; ".join(parts))
    for name, own in expected.items():
        if isinstance(own, torch.Tensor) and loaded[name].dtype != own.dtype:  # torch would cast it silently
            _refuse(where, f"{key}[{name!r}]", f"dtype {loaded[name].dtype} does not fit the {what}'s {own.dtype}")


def _filled_by_setstate(cls: type[torch.optim.Optimizer]) -> dict[str, Any]:
    """The param-group settings ``cls.__setstate__`` fills in when a checkpoint lacks them.

    torch adds settings to its optimizers over the versions (Adam's
    ``decoupled_weight_decay``) and fills them in when an older checkpoint is
    loaded; such a checkpoint is as good as one that has them.
    """
    probe = cls.__new__(cls)
    try:
        probe.__setstate__({"defaults": {}, "state": {}, "param_groups": [{"params": []}]})
        return {k: v for k, v in probe.param_groups[0].items() if k != "params"}
    except Exception:  # a class whose __setstate__ wants more fills in nothing we can know of
        return {}


def _scalar_problem(value: Any) -> str | None:
    """Why ``value`` is not a finite number >= 0 held as a Python number or a float scalar tensor."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            return f"a tensor of shape {tuple(value.shape)}, not a scalar"
        if not value.is_floating_point():
            return f"a {value.dtype} tensor, not a float one"
        number = float(value)
    elif _is_number(value):
        number = float(value)
    else:
        return f"{_short.repr(value)} is {_with_article(type(value).__name__)}, not a number"
    return None if math.isfinite(number) and number >= 0 else f"{number!r} is not a finite number >= 0"


def _param_problem(value: Any, param: torch.Tensor, pid: int) -> str | None:
    """Why ``value`` cannot be state of parameter ``pid`` (None if it can): its shape, dtype and layout."""
    if not isinstance(value, torch.Tensor):
        return f"{_with_article(type(value).__name__)}, not a tensor"
    if value.shape != param.shape:
        return f"shape {tuple(value.shape)} does not fit parameter {pid}'s {tuple(param.shape)}"
    if value.dtype != param.dtype:
        return f"dtype {value.dtype} does not fit parameter {pid}'s {param.dtype}"
    return _layout_problem(value)


def _check_group(group: dict[str, Any], own: dict[str, Any], entry: str, cls: type[torch.optim.Optimizer],
                 where: str) -> None:
    """A saved param group against this optimizer's own (of class ``cls``): the same settings, of the same types."""
    name = cls.__name__
    saved = {**_filled_by_setstate(cls), **group}
    for key in own:
        if key not in saved and key not in SCHEDULER_GROUP_KEYS:
            _refuse(where, entry, f"lacks {key!r}, which this {name} has")
    for key, value in saved.items():
        if key == "params":
            continue
        if key not in own:
            if key not in SCHEDULER_GROUP_KEYS:
                _refuse(where, entry, f"unknown key {key!r} for {name}")
            if not _is_number(value) or not math.isfinite(value):
                _refuse(where, f"{entry}[{key!r}]", f"{_short.repr(value)} is not a finite number")
        elif key in _IMPLEMENTATION:
            if value != own[key] or type(value) is not type(own[key]):
                _refuse(where, f"{entry}[{key!r}]", f"{value!r}, where this {name} has {own[key]!r} (how it "
                        "computes: build the optimizer with the settings the checkpoint's had)")
        else:
            found = _like(value, own[key], name, finite=True)
            if found:
                _refuse(where, f"{entry}[{key!r}]{found[0]}", found[1])


def _check_optimizer(saved: Any, optimizer: torch.optim.Optimizer, where: str) -> None:
    """The optimizer state against this optimizer: its groups, then each parameter's state."""
    name = type(optimizer).__name__
    top = "optimizer_state_dict"
    if not isinstance(saved, dict):
        _refuse(where, top, f"{_with_article(type(saved).__name__)}, not a dict")
    for key in ("state", "param_groups"):
        if key not in saved:
            _refuse(where, top, f"lacks {key!r}")
    groups, own_groups = saved["param_groups"], optimizer.param_groups
    if not isinstance(groups, list) or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                                               for g in groups):
        _refuse(where, f"{top}['param_groups']", "not a list of groups, each a dict with a list of 'params'")
    saved_sizes, sizes = [len(g["params"]) for g in groups], [len(g["params"]) for g in own_groups]
    if saved_sizes != sizes:
        raise ValueError(f"checkpoint {where!r}: optimizer parameter groups of sizes {saved_sizes} "
                         f"do not fit this optimizer's {sizes}")
    # torch maps the saved ids to this optimizer's parameters by their order in the groups.
    params: dict[int, torch.Tensor] = {}
    groups_by_id: dict[int, dict[str, Any]] = {}
    for g, (group, own) in enumerate(zip(groups, own_groups, strict=True)):
        entry = f"{top}['param_groups'][{g}]"
        for pid, param in zip(group["params"], own["params"], strict=True):
            if type(pid) is not int:
                _refuse(where, f"{entry}['params']", f"{_short.repr(pid)} is not a parameter id (an int)")
            if pid in params:
                _refuse(where, f"{entry}['params']", f"lists parameter {pid} twice")
            params[pid], groups_by_id[pid] = param, group
        _check_group(group, own, entry, type(optimizer), where)
    state = saved["state"]
    if not isinstance(state, dict):
        _refuse(where, f"{top}['state']", f"{_with_article(type(state).__name__)}, not a dict")
    spec = _state_spec(optimizer)
    for pid, param_state in state.items():
        entry = f"{top}['state'][{pid!r}]"
        if type(pid) is not int or pid not in params:
            _refuse(where, entry, f"{_short.repr(pid)} is not a parameter id listed in param_groups")
        if not isinstance(param_state, dict):
            _refuse(where, entry, f"{_with_article(type(param_state).__name__)}, not a dict")
        for key, value in param_state.items():
            if spec is None:  # an optimizer not listed: its keys cannot be checked, its tensors' layout can
                problem = _layout_problem(value) if isinstance(value, torch.Tensor) else None
                if problem:
                    _refuse(where, f"{entry}[{key!r}]", problem)
            elif key not in spec:
                _refuse(where, entry, f"unknown key {key!r} for {name}")
        for key, (kind, required) in (spec or {}).items():
            needed = required if isinstance(required, bool) else bool(groups_by_id[pid].get(required))
            if param_state and needed and key not in param_state:  # empty state: the optimizer starts it afresh
                because = "" if isinstance(required, bool) else f" with {required}"
                _refuse(where, entry, f"lacks {key!r}, which {name} needs{because}")
            if key not in param_state or (kind == "param?" and param_state[key] is None):
                continue
            value = param_state[key]
            problem = _scalar_problem(value) if kind == "scalar" else _param_problem(value, params[pid], pid)
            if problem:
                _refuse(where, f"{entry}[{key!r}]", problem)


def _check_scheduler(saved: Any, scheduler: Any, where: str) -> None:
    """The scheduler state against this scheduler's own ``state_dict()``: its keys and value types.

    Its keys become the scheduler's attributes, so an unknown one could shadow a method (``step``).
    """
    own = scheduler.state_dict()
    if isinstance(saved, dict):  # flags of other torch versions: the scheduler keeps its own if one is missing
        saved = {**{k: own[k] for k in _VERSION_FLAGS if k in own},
                 **{k: v for k, v in saved.items() if not (k in _VERSION_FLAGS and k not in own and type(v) is bool)}}
    found = _like(saved, own, type(scheduler).__name__, finite=False, counters=_COUNTERS)
    if found:
        _refuse(where, f"scheduler_state_dict{found[0]}", found[1])


def check_fits(state: Mapping[str, Any], *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               scheduler: Any, where: str, model_name: str = "model") -> None:
    """Check a whole checkpoint against a model, optimizer and scheduler before anything of it is loaded.

    Args:
        state: the checkpoint dict (from :func:`read_checkpoint`).
        model, optimizer, scheduler: what it is to be loaded into (scheduler may be None; the
            scheduler state is then not checked, as it is not loaded).
        where: the checkpoint's path, for messages.
        model_name: how to name the model in messages (``"selfattn-pe model"``).

    Raises:
        ValueError: naming the checkpoint and the first entry that does not fit (see the module docstring).
    """
    check_format(state, where)
    check_state_dict(model.state_dict(), state["model_state_dict"], what=model_name, where=where)
    if state["optimizer_class"] != type(optimizer).__name__:
        raise ValueError(f"checkpoint {where!r} holds a {_class_name(state['optimizer_class'])} optimizer's state; "
                         f"this trainer's optimizer is a {type(optimizer).__name__}")
    _check_optimizer(state["optimizer_state_dict"], optimizer, where)
    if state["scheduler_class"] is not None and scheduler is not None \
            and state["scheduler_class"] != type(scheduler).__name__:
        raise ValueError(f"checkpoint {where!r} holds a {_class_name(state['scheduler_class'])} scheduler's "
                         f"state; this trainer's scheduler is a {type(scheduler).__name__}")
    if scheduler is not None and state["scheduler_state_dict"] is not None:
        _check_scheduler(state["scheduler_state_dict"], scheduler, where)


def guard_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``optimizer``, whose ``load_state_dict`` now checks a state against its parameters first; returned.

    torch's own load checks little, and the fused Adam kernel trusts that each ``exp_avg`` has its parameter's
    size: a crafted state corrupts memory. With this guard any load (through attnlab or straight from torch)
    is refused with a ValueError naming the entry (:func:`check_fits`'s check of the optimizer).
    """

    def check(loading: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        _check_optimizer(state, loading, "the optimizer state")

    optimizer.register_load_state_dict_pre_hook(check)
    return optimizer
