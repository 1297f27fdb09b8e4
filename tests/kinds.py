"""The kinds of test that ``make test-fast`` leaves out, marked by rule, and the guard that keeps the marks true.

``make test-fast`` runs ``pytest -m "not process and not training"``: the tests that start no other
process and write no training run, for a developer at work (``make test`` runs them all).

* ``process``: the test starts another process, in its setup or its call: a command run in a
  subprocess, a pool of workers, Ray, torchrun, a notebook's kernel, a browser. Marked by hand
  (``@pytest.mark.process``, or a module's ``pytestmark``), and by rule: a test that carries
  ``notebook`` or ``browser`` (both start processes), or that uses a fixture named in
  :data:`PROCESS_FIXTURES`.
* ``notebook``: the test executes a notebook in a kernel (implies ``process``).
* ``training``: the test itself trains through a whole run, the kind ``attnlab train`` and ``attnlab
  compare`` make: its call writes a run folder (``attnlab.labs.run_folder.claim``: configuration,
  metrics, checkpoints, figures, report), which takes seconds however few its epochs. A run that a
  module-scoped fixture trains once for many quick tests does not count (its cost is paid once per
  module), unless the fixture is named in :data:`TRAINING_FIXTURES`. Marked by hand, and by that rule.
  A test that trains a model in memory (a Trainer, a loop) without a run folder is not ``training``:
  those are the quick tests of the training code itself.

The guard: while a test's setup and call run, every start of a process from the test's process is
seen (Python's audit events for ``subprocess``, ``os.fork``, ``os.posix_spawn``, ``os.system``,
``os.exec*``, ``os.spawn*``; multiprocessing's ``spawn`` and ``forkserver`` starts go through
``_posixsubprocess.fork_exec``, which raises no audit event on Python 3.11, so that function is
wrapped). A test that starts one without carrying ``process`` fails, naming what it started: a new
test that starts a process cannot slip into ``make test-fast`` unnoticed, it fails there (and in
``make test``) until it is marked. Likewise every ``RunFolder`` built while a test runs is seen (its
class's ``__init__`` is wrapped, so however a caller imported ``claim``): a test whose call writes a run
folder without ``training`` (or ``process``) fails. The guard decides nothing about the code under
test: what it watches is deterministic (never a time or the machine's load).
"""

from __future__ import annotations

import _posixsubprocess
import sys
from collections.abc import Iterator

import pytest

# Fixtures that start processes (or hand the test a service that does): every test using one is ``process``.
PROCESS_FIXTURES = frozenset({
    "local_ray",     # tests/labs/test_ray_sweep.py: a private Ray instance
    "chromium",      # tests/test_docs_site.py: headless Chromium
    "served",        # tests/test_docs_site.py: python -m http.server
    "built",         # tests/test_docs_site.py: docs/build.py in a subprocess (notebooks, MkDocs)
    "sweeps",        # tests/reliability/test_processes.py: `attnlab compare --jobs 2` in its own session
    "ddp_run",       # tests/training/test_distributed.py: torchrun
    "kernel_specs",  # tests/test_notebooks.py: the kernel the notebooks run in
    "two_processes",  # tests/test_reproducibility.py: the same commands in two fresh interpreters
    "savers",        # tests/training/test_checkpoint_safety.py: two children that save checkpoints
})

# Fixtures that train through whole runs (shared by a module's tests): every test using one is ``training``.
TRAINING_FIXTURES = frozenset({
    "default_run",   # tests/test_runs.py: `attnlab train`'s default run, the labs' 100 epochs
})

# Audit events that start a process (the os.exec* and os.spawn* events are "os.exec", "os.spawn").
_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.system", "os.exec",
                     "os.spawn", "pty.spawn"})

# Processes a library starts once per machine, not per test: matplotlib lists the fonts with `fc-list` when it
# builds its font cache (~/.cache/matplotlib), in whichever test first draws on a fresh machine (seen on a GPU
# machine, first `make test-gpu`). Whether that happens in a test depends on the machine, not on the test.
_ONCE_PER_MACHINE = ("fc-list",)

_started: list[str] = []  # what the running test started, while _watching
_watching = False
_runs: list[str] = []  # the run folders the running test wrote, while _watching


def _audit(event: str, args: tuple) -> None:
    if _watching and event in _EVENTS:
        what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[0] if args else ""
        _note(f"{event} {str(what)[:120]}")


def _note(started: str) -> None:
    if not any(name in started for name in _ONCE_PER_MACHINE):
        _started.append(started)


_fork_exec = _posixsubprocess.fork_exec


def _watched_fork_exec(*args, **kwargs):
    # multiprocessing's spawn and forkserver start their processes through here without an audit event
    # (subprocess comes through here too, after its own event).
    if _watching:
        _note(f"_posixsubprocess.fork_exec {str(args[0] if args else '')[:120]}")
    return _fork_exec(*args, **kwargs)


def _watch_run_folders() -> None:
    """Note every run folder claimed while a test runs: every ``attnlab train`` and ``attnlab compare`` run that
    writes one (``attnlab.labs.run_folder.claim``) builds a ``RunFolder``, however its callers imported ``claim``."""
    from attnlab.labs.run_folder import RunFolder

    init = RunFolder.__init__

    def watched_init(self, *args, **kwargs):
        if _watching:
            _runs.append(str(args[0] if args else kwargs))
        init(self, *args, **kwargs)

    RunFolder.__init__ = watched_init


def pytest_configure(config: pytest.Config) -> None:
    # The markers themselves are declared in pyproject.toml ([tool.pytest.ini_options]). The watch is installed
    # once per process (audit hooks cannot be removed) and is inert outside a test's setup and call.
    if _posixsubprocess.fork_exec is not _watched_fork_exec:  # configured again (a pytester run): one watch
        sys.addaudithook(_audit)
        _posixsubprocess.fork_exec = _watched_fork_exec
        _watch_run_folders()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("notebook") or item.get_closest_marker("browser") or fixtures & PROCESS_FIXTURES:
            item.add_marker(pytest.mark.process)
        if fixtures & TRAINING_FIXTURES:
            item.add_marker(pytest.mark.training)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    global _watching
    _started.clear()
    _runs.clear()
    _watching = True
    try:
        return (yield)
    finally:
        _watching = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    global _watching
    _runs.clear()  # a run folder written by a fixture is shared by the module's tests: only the test's own count
    _watching = True
    try:
        result = yield
    finally:
        _watching = False
    if _started and item.get_closest_marker("process") is None:
        pytest.fail(f"this test starts another process ({'; '.join(sorted(set(_started))[:3])}) but is not "
                    "marked `process`: mark it (@pytest.mark.process, or a fixture in tests/kinds.py's "
                    "PROCESS_FIXTURES) so that `make test-fast` leaves it out", pytrace=False)
    if _runs and item.get_closest_marker("training") is None and item.get_closest_marker("process") is None:
        pytest.fail(f"this test trains through a whole run (a run folder written: {_runs[0]}) but is not marked "
                    "`training`: mark it (@pytest.mark.training, or a fixture in tests/kinds.py's TRAINING_FIXTURES) "
                    "so that `make test-fast` leaves it out", pytrace=False)
    return result
