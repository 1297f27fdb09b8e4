"""Shared test set-up: every test starts from the same torch seed, on CPU."""

import os

import pytest
import torch

# The kinds of test `make test-fast` leaves out (``process``, ``notebook``, ``training``): marked by rule, and a
# guard that fails a test starting a process without its mark (tests/kinds.py).
pytest_plugins = ["kinds"]

# `make test` runs the suite in pytest-xdist workers, one per core: each worker then takes its
# share of the cores for torch's intra-op threads, instead of every worker taking them all.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


# The memory every run plans for, in place of the machine's free memory (attnlab._limits): set at import, so
# that every test and every process a test starts sees it, and no outcome depends on what else the machine
# is doing. Tests of the memory rule set their own.
os.environ["ATTNLAB_MEMORY_BUDGET"] = "16G"


@pytest.fixture(autouse=True)
def _seed_torch():
    # Seeded per test so a test's random draws do not depend on which ran before it.
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny models: on a shared 2-core machine two threads
    only wait for each other (up to 10x slower). Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- the catalogue of bad inputs and faults, counted by kind -------------------------------
#
# Every test that tries a bad input or a fault carries ``@pytest.mark.bad_input("kind")``
# (or a module-level ``pytestmark``). ``pytest -m bad_input -q`` runs just those and ends
# with a table: per kind, how many were tried and how many were handled well (passed).

BAD_INPUT_KINDS = ("memory safety", "decompression bombs", "threads", "resource limits", "numbers",
                   "config files", "messages and streams", "catalogue",
                   # the reliability issue's kinds (tests/reliability/): each example it lists, and more of each
                   "data loss", "writes outside the run folder", "processes", "bounded before work",
                   "silent wrong results", "tracebacks and messages", "machine independence")
_outcome: dict[str, tuple[str, bool]] = {}  # nodeid -> (kind, handled well so far)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def save_png(tmp_path):
    """``save_png(fig, name)`` writes ``tmp_path/name.png`` and checks it is a real PNG (the figure tests')."""

    def save(fig, name):
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE), f"{name}.png is not a PNG"
        # A blank canvas of this size compresses to ~1-2 kB; a drawn figure is far larger.
        assert len(data) > 5000, f"{name}.png is only {len(data)} bytes"
        return path

    return save


def pytest_collection_modifyitems(config, items):
    # The site's tests last: they build from the notebooks tests/test_notebooks.py runs (tests/notebook_runs.py), so
    # by then those have run, each as a test of its own, and the site's first test pays for MkDocs alone.
    items.sort(key=lambda item: item.path.name == "test_docs_site.py")
    for item in items:
        marker = item.get_closest_marker("bad_input")
        if marker is None:
            continue
        kind = marker.args[0] if marker.args else ""
        if kind not in BAD_INPUT_KINDS:
            raise pytest.UsageError(f"{item.nodeid}: bad_input kind {kind!r} is not one of {BAD_INPUT_KINDS}")
        # Carried by every report: under pytest-xdist the workers collect, and only reports reach the table.
        item.user_properties.append(("bad_input", kind))


def pytest_runtest_logreport(report):
    kind = dict(report.user_properties).get("bad_input")
    if kind is None:
        return
    failed = report.failed or (report.when == "setup" and report.skipped)
    if report.when == "call" or failed:
        _outcome[report.nodeid] = (kind, _outcome.get(report.nodeid, (kind, True))[1] and not failed)


def pytest_terminal_summary(terminalreporter):
    if not _outcome:
        return
    terminalreporter.section("bad inputs and faults tried, by kind")
    total = handled = 0
    width = max(map(len, BAD_INPUT_KINDS))
    for kind in BAD_INPUT_KINDS:
        runs = [ok for k, ok in _outcome.values() if k == kind]
        if runs:
            terminalreporter.write_line(f"{kind:<{width}} {sum(runs):>4} of {len(runs):>4} handled well")
            total, handled = total + len(runs), handled + sum(runs)
    terminalreporter.write_line(f"{'all':<{width}} {handled:>4} of {total:>4} handled well")
