"""Writing files so that a crash or a bad path never leaves half a file behind.

Every file attnlab writes goes to a temporary file in the destination folder
and is renamed over the target only once it is complete (``os.replace`` is
atomic on POSIX and Windows), so the previous version stays readable until the
new one is whole.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write", "check_below", "check_folder", "check_regular_file", "check_writable", "read_json",
           "read_text", "subfolder"]


def check_writable(path: str | os.PathLike[str], *, name: str = "--out") -> Path:
    """Check, before any work is done, that ``path`` can be written.

    Raises:
        ValueError: naming ``name`` and ``path``, if the folder does not exist,
            is not a folder, takes no new files, or ``path`` is itself a folder.
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a folder; give a file name")
    _check_container(f"{name} {str(path)!r}", p.parent if str(p.parent) else Path("."))
    return p


def _check_container(what: str, folder: Path) -> None:
    """Raise ValueError (starting with ``what``) unless ``folder`` exists, is a folder and takes files."""
    if not folder.exists():
        raise ValueError(f"{what}: folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise ValueError(f"{what}: {str(folder)!r} is not a folder")
    _probe(folder, f"{what}: folder {str(folder)!r}")


def _probe(folder: Path, what: str) -> None:
    """Raise ValueError (starting with ``what``) unless a file can really be created in ``folder``.

    ``os.access`` is not enough: it says yes to root everywhere, and to folders
    such as ``/proc`` that take no new files. A temporary file is created and
    removed at once.
    """
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{what} is not writable ({err.strerror or err})") from None


def check_folder(path: str | os.PathLike[str], *, name: str = "--out", parents: bool = False) -> Path:
    """Check, before any work is done, that the folder ``path`` exists and takes files, or can be created.

    Creates nothing (the probe file is removed at once).

    Args:
        path: the folder.
        name: what to call it in messages (the CLI flag, or the argument's name).
        parents: missing parent folders will be created too; the nearest one
            that exists must then be a folder that takes files.

    Returns:
        ``path`` as a Path.

    Raises:
        ValueError: naming ``name`` and ``path``, if ``path`` is a file, its parent
            does not exist or is not a folder, or nothing can be written there.
    """
    p = Path(path)
    if not str(path).strip():
        raise ValueError(f"{name} is empty: give a folder")
    if p.exists():
        if not p.is_dir():
            raise ValueError(f"{name} {str(path)!r} is a file, not a folder")
        _probe(p, f"{name} {str(path)!r}")
        return p
    parent = p.parent if str(p.parent) else Path(".")
    while parents and not parent.exists() and parent != parent.parent:
        parent = parent.parent
    _check_container(f"{name} {str(path)!r}", parent)
    return p


def _umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: read it by setting it, and put it back at once
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)`` on a temporary file next to ``path``, then rename it over ``path``.

    Args:
        path: destination file.
        write: function that writes the whole file at the path it is given
            (what it returns is ignored).

    Returns:
        The destination path.

    Raises:
        OSError: if the temporary file cannot be created, written (a full disk: named
            with ``path``, not the temporary) or renamed; the destination is untouched
            in that case and the temporary removed.
    """
    dest = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent if str(dest.parent) else ".",
                                    prefix=f".{dest.name}.", suffix=".tmp" + dest.suffix)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        # mkstemp makes the file private (0600); give it the permissions a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException as raised:
        tmp.unlink(missing_ok=True)
        err = _os_error_in(raised)
        if err is None or err.filename not in (None, tmp_name, str(tmp)):
            raise
        # A full disk or a file-size limit is named with the file being written, not its temporary.
        if err.errno is None:  # numpy's short write ("640000 requested and 24968 written") has no errno
            raise OSError(f"cannot write {str(dest)!r}: {err} (a full disk or a file-size limit)") from None
        raise OSError(err.errno, f"cannot write {str(dest)!r}: {err.strerror or err}") from None
    return dest


def _os_error_in(raised: BaseException) -> OSError | None:
    """The OSError ``raised`` is, or the one it was raised while handling (None if neither).

    torch.save's zip writer, closing after a write failed (a full disk), raises a RuntimeError of its own
    ("unexpected pos ...") that hides the OSError: the OSError is what happened.
    """
    seen: set[int] = set()
    err: BaseException | None = raised
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError):
            return err
        seen.add(id(err))
        err = err.__context__ if isinstance(err, RuntimeError) else None
    return None


def check_regular_file(path: str | os.PathLike[str], *, what: str) -> os.stat_result:
    """Check, without opening it, that ``path`` is a regular file (a symlink is followed).

    Opening a FIFO for reading blocks until someone writes to it, and a device such
    as ``/dev/zero`` never ends; so a run's files are looked at before they are read.

    Returns:
        The file's ``os.stat`` (its size is ``st_size``).

    Raises:
        FileNotFoundError: naming ``what`` and the path, if it does not exist.
        ValueError: naming them, if it is a folder, a FIFO, a device or a socket, or a
            symbolic link that leads nowhere (to nothing, or round in a loop).
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling link is a file someone made, not a missing one
            raise ValueError(f"{what} {str(path)!r} is a symbolic link to {os.readlink(path)!r}, which does not "
                             "exist; refused") from None
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist") from None
    except OSError as err:
        if err.errno == errno.ELOOP:  # the OS's words, "Too many levels of symbolic links", say it obscurely
            raise ValueError(f"{what} {str(path)!r} is a symbolic link loop (it leads back to itself); "
                             "refused") from None
        raise
    if not stat.S_ISREG(info.st_mode):
        kind = ("a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a socket" if stat.S_ISSOCK(info.st_mode) else "not a file")
        raise ValueError(f"{what} {str(path)!r} is not a regular file ({kind}); refused without reading it")
    return info


def read_text(path: str | os.PathLike[str], *, what: str, max_bytes: int = 64 * 2**20) -> str:
    """The UTF-8 text of one of attnlab's own small files (a config, a record, a metrics log).

    Args:
        path: the file.
        what: how to name it in messages (``"config.json"``).
        max_bytes: larger files are refused unread (attnlab writes none near this size).

    Raises:
        FileNotFoundError: if it does not exist.
        ValueError: naming ``what`` and the path, for a special file (see
            :func:`check_regular_file`), a file over ``max_bytes``, or bytes that are not UTF-8.
    """
    info = check_regular_file(path, what=what)
    if info.st_size > max_bytes:
        raise ValueError(f"{what} {str(path)!r} is {info.st_size} bytes, more than any attnlab writes "
                         f"({max_bytes}); refused unread")
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (byte {err.start}, line {line}: "
                         f"{data[err.start:err.start + 1]!r}); was it written by attnlab?") from None



def read_json(path: str | os.PathLike[str], *, what: str, max_bytes: int = 64 * 2**20) -> Any:
    """The JSON value of one of attnlab's own files (:func:`read_text`'s checks first).

    Raises:
        FileNotFoundError: if it does not exist.
        ValueError: naming ``what`` and the path, for what :func:`read_text` refuses, text that
            is not JSON (with the line), or JSON nested too deeply to read (attnlab writes
            no more than a few levels; Python's parser would raise RecursionError).
    """
    text = read_text(path, what=what, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:
        raise ValueError(f"{what} {str(path)!r} is nested too deeply to be one attnlab wrote; refused") from None


# -- staying inside a folder -------------------------------------------------------------------


def _refuse_link(root: Path, path: Path) -> None:
    target = os.readlink(path)
    raise ValueError(f"{str(path.relative_to(root))!r} in {str(root)!r} is a symbolic link (to {target!r}); "
                     "attnlab writes only inside the run folder and never through a link: remove the link")


def check_below(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Check that writing ``path`` stays inside ``root``: every folder between them is a real folder, not a link.

    ``root`` itself may be reached through a link (the user chose it); below it
    nothing is followed. The file itself may be a link: :func:`atomic_write`
    replaces a link with the new file, it never writes through one.

    Returns:
        ``path`` as a Path.

    Raises:
        ValueError: if ``path`` is not below ``root``, or a folder on the way is a
            symbolic link (named, with where it points) or not a folder.
    """
    root, dest = Path(root), Path(path)
    try:
        parts = dest.relative_to(root).parts
    except ValueError:
        raise ValueError(f"{str(dest)!r} is not inside the run folder {str(root)!r}") from None
    current = root
    for part in parts[:-1]:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            break  # nothing further down exists yet: nothing to follow
        if stat.S_ISLNK(mode):
            _refuse_link(root, current)
        if not stat.S_ISDIR(mode):
            raise ValueError(f"{str(current.relative_to(root))!r} in {str(root)!r} is not a folder")
    return dest


def subfolder(root: str | os.PathLike[str], *parts: str) -> Path:
    """The folder ``root/parts...``, created where missing, without following a link below ``root``.

    Raises:
        ValueError: if a component is a symbolic link or a file (see :func:`check_below`).
        OSError: if a folder cannot be created.
    """
    root = Path(root)
    current = root
    for part in parts:
        current = current / part
        check_below(root, current / "_")
        try:
            os.mkdir(current)
        except FileExistsError:
            check_below(root, current / "_")  # made by someone else since: judged again
    return current
