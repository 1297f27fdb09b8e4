"""A folder built once per test session, shared by the xdist workers (see :func:`shared_once`)."""

import fcntl
import os
from collections.abc import Callable
from pathlib import Path


def shared_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder ``make(folder)`` filled once per test session, whichever xdist worker asks first.

    A module-scoped fixture runs once per worker that runs one of its tests, and work stealing
    spreads a module's tests over both workers: an expensive fixture (processes that train) then
    ran twice. The first caller builds under a file lock in the workers' shared temporary folder;
    the others wait for it and reuse the folder. A build that failed is retried by the next caller.
    """
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's base is popen-gwN inside the session's folder, which the workers share;
    # in one process the base is the session's own folder (its parent holds every session's: stale ones).
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            done.touch()
    return folder
