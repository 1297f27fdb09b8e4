"""A writable folder for matplotlib's config and cache, chosen before matplotlib is imported.

matplotlib keeps its font cache in ``~/.cache/matplotlib`` (``$XDG_CACHE_HOME``) and reads
``~/.config/matplotlib``. When either cannot be written (a read-only or missing ``HOME``, a
container's), it makes a temporary folder at every import, rebuilds its font cache there,
and logs two warnings to stderr: the command line's one-line error would then come third.
:func:`use_writable_matplotlib_dir` sets ``MPLCONFIGDIR``, matplotlib's own setting, to a
folder of this user's under the temporary directory instead (one for every run, so the font
cache is built once), only where matplotlib would fail, and never over a user's own choice.

Standard library only (a ground-floor module): the command line calls it before any verb
imports matplotlib.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

__all__ = ["matplotlib_dirs", "use_writable_matplotlib_dir"]


def matplotlib_dirs() -> list[Path]:
    """The folders matplotlib would use for its config and its cache, as ``matplotlib`` finds them.

    Example:
        >>> all(p.name in ("matplotlib", ".matplotlib") for p in matplotlib_dirs())
        True
    """
    if os.environ.get("MPLCONFIGDIR"):
        return [Path(os.environ["MPLCONFIGDIR"])]
    home = Path(os.path.expanduser("~"))
    if not sys.platform.startswith(("linux", "freebsd")):
        return [home / ".matplotlib"]
    config = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    cache = os.environ.get("XDG_CACHE_HOME") or str(home / ".cache")
    return [Path(config) / "matplotlib", Path(cache) / "matplotlib"]


def _writable(folder: Path) -> bool:
    """Whether ``folder`` is a writable folder, or could be made as one (its nearest existing parent is)."""
    path = folder
    while not os.path.lexists(path):
        if path.parent == path:
            return False
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _private_folder() -> str:
    """This user's folder for matplotlib under the temporary directory: made if new, used if truly ours."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    folder = Path(tempfile.gettempdir()) / f"attnlab-matplotlib-{uid if uid is not None else 'user'}"
    try:
        folder.mkdir(mode=0o700)
    except OSError:
        pass  # there already (checked below), or the temporary directory refuses: a fresh folder then
    try:
        info = os.lstat(folder)
        ours = stat.S_ISDIR(info.st_mode) and (uid is None or info.st_uid == uid) and not info.st_mode & 0o022
        if ours and os.access(folder, os.W_OK | os.X_OK):
            return str(folder)
    except OSError:
        pass
    # Someone else's, a link, or shared: never use it; a folder of our own, new for this run.
    return tempfile.mkdtemp(prefix="attnlab-matplotlib-")


def use_writable_matplotlib_dir() -> str | None:
    """Set ``MPLCONFIGDIR`` to a private temporary folder if matplotlib's own folders cannot be written.

    Does nothing when ``MPLCONFIGDIR`` is set already, when matplotlib is imported already
    (too late to change), or when its folders are writable.

    Returns:
        The folder now in ``MPLCONFIGDIR``, or None where nothing was changed.
    """
    if os.environ.get("MPLCONFIGDIR") or "matplotlib" in sys.modules:
        return None
    if all(_writable(folder) for folder in matplotlib_dirs()):
        return None
    folder = _private_folder()
    os.environ["MPLCONFIGDIR"] = folder
    return folder
