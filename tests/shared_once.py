"""A folder built once per test session, shared by the xdist workers (see :func:`shared_once`)."""

import fcntl
from collections.abc import Callable
from pathlib import Path


def shared_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder ``make(folder)`` filled once per test session, whichever xdist worker asks first.

    A module-scoped fixture runs once per worker that runs one of its tests, and work stealing
    spreads a module's tests over both workers: an expensive fixture (processes that train) then
    ran twice. The first caller builds under a file lock in the workers' shared temporary folder;
    the others wait for it and reuse the folder. A build that failed is retried by the next caller.
    """
    root = tmp_path_factory.getbasetemp().parent  # shared by the xdist workers of this session
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            done.touch()
    return folder
