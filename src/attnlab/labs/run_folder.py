"""The run folder: one contract for every command that writes one (``attnlab train``, ``attnlab compare``).

* **One writer at a time.** A writer holds an exclusive lock (``flock`` on
  ``.lock``, which records its pid) for as long as it writes. A second writer is
  refused at once, naming the folder and the holder's pid. The operating system
  drops the lock of a process that dies, however it dies, so a lock left by a
  killed run is stale by construction and the next writer simply takes it.
* **Only our own folders.** A folder is written only if it is new, empty, or a run
  of the same kind. Anything else (another kind of run, a user's files, ``.``, a
  folder owned by another user) is refused before anything is written. A
  symlink is resolved and judged like the folder it points to.
* **Nothing below the root is followed.** :meth:`RunFolder.folder` and
  :meth:`RunFolder.file` refuse a link (or a file) where a folder should be,
  :func:`check_files` checks the same before any work, and the lock is never opened
  through a link; a link at a file's own name is replaced by the new file.
* **Every state is resumable.** The kind is recorded first (``attnlab-run.json``),
  so a run killed at any moment, before its first checkpoint included, is
  recognised: ``--resume`` continues it and a fresh run may reuse it if it had
  not started. Temporary files of a killed atomic save (``.NAME.XXXX.tmp*``) are
  removed by the next writer, which holds the lock, so no one is mid-save.

Usage::

    with claim(path, kind="train", resume=False) as folder:   # checked, locked, marked
        ...write into folder.path...
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from attnlab import __version__
from attnlab._io import atomic_write, check_below, check_folder, read_json, subfolder

try:  # POSIX; elsewhere the lock is an exclusively created file (see _Lock)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["ENVIRONMENT", "KINDS", "LOCK", "MARKER", "FolderBusy", "FolderState", "RunFolder", "check_claim",
           "check_files", "claim", "environment", "inspect_folder", "is_temporary", "run_kind"]

#: the kinds of run folder: ``train`` (the squares lab), ``compare`` (the length-generalisation lab) and
#: ``suite`` (a preset over several tasks: a ``compare`` folder per task, :mod:`attnlab.labs.lengths.suite`).
KINDS = ("train", "compare", "suite")
MARKER = "attnlab-run.json"
LOCK = ".lock"
# What a run of each kind leaves once it has made progress worth keeping: a checkpoint,
# finished models. A run without any (killed while it started) is reused by a fresh run.
_PROGRESS = {"train": ("checkpoint.pt",), "compare": ("results.json", "models"), "suite": ("suite.json", "tasks")}


class FolderBusy(ValueError):
    """Another process is writing the run folder (a ``ValueError``: the CLI reports it as one line, exit 2)."""


@dataclass(frozen=True)
class FolderState:
    """What a folder holds, as far as the contract cares.

    Attributes:
        exists: the folder is there.
        kind: the kind of run it holds (one of :data:`KINDS`), or None.
        started: the run has made progress (a checkpoint, a finished model).
        files: the names of its entries, our lock and temporary files left out.
    """

    exists: bool
    kind: str | None
    started: bool
    files: tuple[str, ...]


def is_temporary(name: str) -> bool:
    """Whether ``name`` is one of :func:`attnlab._io.atomic_write`'s temporary files (``.NAME.XXXX.tmp*``)."""
    return name.startswith(".") and ".tmp" in name


def run_kind(path: Path) -> str | None:
    """The kind of run ``path`` holds (its marker), or None."""
    marker = path / MARKER
    if os.path.lexists(marker):
        # A FIFO, a device, bytes that are not UTF-8 or JSON, or JSON nested too deeply are named (ValueError).
        doc = read_json(marker, what=MARKER, max_bytes=2**16)
        kind = doc.get("kind") if isinstance(doc, dict) else None
        return kind if kind in KINDS else None
    return None


def inspect_folder(path: Path) -> FolderState:
    """What ``path`` holds (see :class:`FolderState`); ``path`` should be resolved."""
    if not path.exists():
        return FolderState(False, None, False, ())
    files = tuple(sorted(p.name for p in path.iterdir() if p.name != LOCK and not is_temporary(p.name)))
    kind = run_kind(path)
    started = kind is not None and any((path / name).exists() for name in _PROGRESS[kind])
    return FolderState(True, kind, started, files)


def _resolve(path: str | os.PathLike[str], name: str) -> Path:
    if not str(path).strip():
        raise ValueError(f"{name} is empty: give a folder")
    given = Path(path).expanduser()
    if given.is_symlink() and not given.exists():
        # Following it would create a folder wherever it points; refusing is the safe reading.
        raise ValueError(f"{name} {str(path)!r} is a symbolic link to {os.readlink(given)!r}, which does not exist; "
                         "create that folder first, or give another folder")
    # A symlink is judged by what it points to; resolve() also turns "." into the real folder.
    return given.resolve()


def _check_owner(path: Path, name: str, given: str) -> None:
    getuid = getattr(os, "geteuid", None)
    if getuid is not None and path.exists() and path.stat().st_uid != getuid():
        raise ValueError(f"{name} {given!r} belongs to another user; attnlab writes only into its own folders")


def check_claim(
    path: str | os.PathLike[str], *, kind: str, resume: bool, name: str = "--out", held: bool = False
) -> Path:
    """Check, writing nothing, that a ``kind`` run may write (or resume in) ``path``; returns it resolved.

    Args:
        path: the folder (a symlink is followed).
        kind: one of :data:`KINDS`.
        resume: continue the run in the folder. Without it, a run of this kind that
            has made no progress yet (killed before its first checkpoint or model)
            is reused.
        name: the flag to name in messages.
        held: the caller holds the folder's lock (so it is not tested).

    Raises:
        ValueError: naming ``name`` and the folder, for an empty path, a file, a
            folder that cannot be created or written, another user's folder, one
            holding another kind of run or files that are not a run, a run that
            has started (without ``resume``), and ``resume`` of a folder that holds
            no run of this kind; :class:`FolderBusy` if another process writes it.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    given = str(path)
    resolved = _resolve(path, name)
    check_folder(path, name=name, parents=True)
    _check_owner(resolved, name, given)
    state = inspect_folder(resolved)
    # A symlink (or ".") is named with what it stands for; a plain relative path as given.
    shown = f"'{given}'" if Path(given).expanduser().absolute() == resolved else f"'{given}' (= '{resolved}')"
    if state.kind is not None and state.kind != kind:
        raise ValueError(f"{name} {shown} holds an attnlab {state.kind} run, not a {kind} run; "
                         "choose another folder")
    if state.kind is None and state.files:
        listed = ", ".join(state.files[:3]) + (", ..." if len(state.files) > 3 else "")
        raise ValueError(f"{name} {shown} holds files that are not an attnlab run ({listed}); "
                         "choose a new or empty folder")
    if resume and state.kind is None:
        raise ValueError(f"--resume: {shown} holds no {kind} run to resume")
    if not resume and state.kind == kind and state.started:
        raise ValueError(f"{name} {shown} already holds a {kind} run; add --resume to continue it, "
                         "or choose another folder")
    _check_lock_file(resolved)
    if not held and (resolved / LOCK).is_file():
        _Lock(resolved, f"{name} {shown}", probe=True).release()  # refused now, before anything is printed
    return resolved


def _check_lock_file(folder: Path) -> None:
    """The lock file is ours: absent, or a regular file. A link would have the lock truncate its target."""
    path = folder / LOCK
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise ValueError(f"'{LOCK}' in {str(folder)!r} is a symbolic link (to {os.readlink(path)!r}); attnlab "
                         "writes only inside the run folder and never through a link: remove the link")
    if not stat.S_ISREG(mode):
        raise ValueError(f"'{LOCK}' in {str(folder)!r} is not a regular file; attnlab keeps its lock there: remove it")


def check_files(root: Path, files: Iterable[Sequence[str]]) -> None:
    """Check, writing nothing, that each file (its ``parts`` below ``root``) can be written as :meth:`RunFolder.file`
    writes it: no link nor file where a folder on the way should be, and no folder at the file's own name.

    Raises:
        ValueError: naming the path below ``root``.
    """
    for parts in files:
        path = check_below(root, root.joinpath(*parts))
        if os.path.isdir(path) and not os.path.islink(path):
            raise ValueError(f"{'/'.join(parts)!r} in {str(root)!r} is a folder, where attnlab writes a file; "
                             "remove it")


class _Lock:
    """An exclusive, non-blocking lock on ``folder/.lock`` holding the owner's pid.

    With ``probe``, the lock file must exist and is only tested: taken and dropped at
    once, nothing written.
    """

    def __init__(self, folder: Path, what: str, *, probe: bool = False) -> None:
        self.path = folder / LOCK
        self.probe = probe
        # Never through a link (check_claim refuses one; O_NOFOLLOW closes the gap since): truncating the
        # lock file must not truncate a file outside the folder.
        nofollow = getattr(os, "O_NOFOLLOW", 0)
        self.fd = os.open(self.path, (os.O_RDONLY if probe else os.O_RDWR | os.O_CREAT) | nofollow, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = self._holder()
            os.close(self.fd)
            raise FolderBusy(f"{what} is being written by another attnlab process"
                             f"{f' (pid {holder})' if holder else ''}; wait for it to finish") from None
        if not probe:
            os.ftruncate(self.fd, 0)
            os.write(self.fd, f"{os.getpid()}\n".encode())

    def _holder(self) -> str:
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def release(self) -> None:
        # The file stays (removing it would let a process holding its old inode and one
        # creating a new one both think they own the folder); only the lock is dropped.
        try:
            if not self.probe:
                os.ftruncate(self.fd, 0)
        finally:
            os.close(self.fd)  # closing drops the flock


@dataclass(frozen=True)
class RunFolder:
    """A run folder held for writing (see :func:`claim`).

    Attributes:
        path: the folder, resolved.
        kind: the kind of run it holds.
        resumed: whether it was claimed to resume a run.
    """

    path: Path
    kind: str
    resumed: bool

    def folder(self, *parts: str) -> Path:
        """The sub-folder ``parts`` of the run folder, created where missing; a link on the way is refused.

        Raises:
            ValueError: naming the link (or file) found where a folder should be.
        """
        return subfolder(self.path, *parts)

    def file(self, *parts: str) -> Path:
        """Where to write the file ``parts`` (its folders created, none of them a link).

        Write it with :func:`attnlab._io.atomic_write`, which replaces a link standing
        at the file's own name instead of writing through it.
        """
        return self.folder(*parts[:-1]) / parts[-1]

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as indented JSON to ``name`` (``/``-separated below the folder: ``models/M/record.json``),
        atomically, through :meth:`file`."""
        return atomic_write(self.file(*PurePosixPath(name).parts),
                            lambda tmp: tmp.write_text(json.dumps(obj, indent=2) + "\n"))


def _remove_temporaries(folder: Path) -> None:
    for path in folder.rglob(".*"):
        if path.is_file() and is_temporary(path.name):
            path.unlink(missing_ok=True)


@contextmanager
def claim(path: str | os.PathLike[str], *, kind: str, resume: bool, name: str = "--out") -> Iterator[RunFolder]:
    """Hold ``path`` for writing a ``kind`` run: checked, created, locked, marked; unlocked on exit.

    The checks of :func:`check_claim` run again once the lock is held (another
    writer may have written in between); killed saves' temporary files are removed.

    Args:
        path, kind, resume, name: as :func:`check_claim`.

    Yields:
        The :class:`RunFolder`.

    Raises:
        ValueError: what :func:`check_claim` raises; :class:`FolderBusy` if another
            process holds the folder.
    """
    resolved = check_claim(path, kind=kind, resume=resume, name=name)
    try:
        resolved.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{name} {str(path)!r} cannot be created: {err.strerror or err}") from None
    lock = _Lock(resolved, f"{name} '{path}'")
    try:
        check_claim(resolved, kind=kind, resume=resume, name=name, held=True)
        _remove_temporaries(resolved)
        if run_kind(resolved) is None or not (resolved / MARKER).is_file():
            marker = {"kind": kind, "attnlab": __version__}
            atomic_write(resolved / MARKER, lambda tmp: tmp.write_text(json.dumps(marker) + "\n"))
        yield RunFolder(resolved, kind, resume)
    finally:
        # A Ctrl-C can land between a temporary's creation and atomic_write's own clean-up (inside
        # mkstemp): while the lock is still held, no other writer's temporary can be here to remove.
        try:
            _remove_temporaries(resolved)
        except OSError:
            pass  # never hide the error that ended the run
        lock.release()


#: what a run folder records of the machine and software a run ran on
ENVIRONMENT = "environment.json"


def environment(*, device: Any, threads: int | str | None) -> dict[str, Any]:
    """What ran: Python's, torch's and attnlab's versions (and attnlab's commit, run from a checkout), the device
    and its name, and the intra-op threads (a number, or the rule that chose them per model).

    ``device``: a torch device or its name. Read when a run starts (or resumes): a resumed run records the
    machine it resumed on.
    """
    import platform

    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{platform.machine()}, {os.cpu_count()} cores"  # platform.processor() would run `uname -p`
    return {"python": platform.python_version(), "torch": torch.__version__, "attnlab": __version__,
            "attnlab_commit": _commit(), "device": str(device), "device_name": name, "threads": threads,
            "platform": f"{platform.system()} {platform.release()}"}


def _commit() -> str | None:
    """The commit checked out where attnlab runs from a git checkout, else None.

    Read from the repository's files, not by running git: a run starts no process for it. Changes not yet
    committed are not seen.
    """
    here = Path(__file__).resolve()
    root = next((folder for folder in here.parents if (folder / ".git").exists()), None)
    if root is None:
        return None
    try:
        git = root / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>"
            git = (root / git.read_text().strip().removeprefix("gitdir:").strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head  # a detached HEAD is the commit itself
        ref = head.removeprefix("ref:").strip()
        common = (git / (git / "commondir").read_text().strip()).resolve() if (git / "commondir").is_file() else git
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
        for line in (common / "packed-refs").read_text().splitlines() if (common / "packed-refs").is_file() else ():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    except (OSError, UnicodeDecodeError):  # an unreadable repository: the commit is not known
        return None
    return None
