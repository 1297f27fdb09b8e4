"""tests/kinds.py: the markers `make test-fast` leaves out are set by rule, and its guard fails a test that
starts a process or writes a training run without its marker (an inner pytest run, in a subprocess)."""

import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.process  # the inner pytest runs in a subprocess

HERE = Path(__file__).resolve().parent

INNER = textwrap.dedent('''
    import multiprocessing
    import subprocess
    import sys

    import pytest

    from attnlab.labs.run_folder import claim


    @pytest.fixture
    def local_ray():  # a name in PROCESS_FIXTURES: its tests are `process` by rule
        yield


    def test_a_subprocess_unmarked():
        subprocess.run([sys.executable, "-c", "pass"], check=True)


    @pytest.mark.process
    def test_a_subprocess_marked():
        subprocess.run([sys.executable, "-c", "pass"], check=True)


    def test_a_spawned_worker_unmarked():
        worker = multiprocessing.get_context("spawn").Process(target=print)
        worker.start()
        worker.join()


    def test_by_fixture(local_ray):
        subprocess.run([sys.executable, "-c", "pass"], check=True)


    def test_a_run_folder_unmarked(tmp_path):
        with claim(tmp_path / "run", kind="train", resume=False):
            pass


    @pytest.mark.training
    def test_a_run_folder_marked(tmp_path):
        with claim(tmp_path / "run", kind="train", resume=False):
            pass


    def test_neither():
        assert sum(range(4)) == 6


    def test_a_font_cache_built_unmarked():  # matplotlib's, once per machine: not the test's own process
        try:
            subprocess.run(["fc-list", "--help"], capture_output=True)
        except FileNotFoundError:  # no fontconfig here: the start was still tried, and seen
            pass
''')


@pytest.fixture
def inner(pytester):
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(HERE)!r})\npytest_plugins = ['kinds']\n")
    pytester.makepyfile(test_inner=INNER)
    pytester.makefile(".toml", pyproject=(HERE.parent / "pyproject.toml").read_text())  # the markers
    (pytester.path / "tests").mkdir()  # pyproject.toml's testpaths, left empty: the file is named
    return pytester


def test_the_guard_fails_each_unmarked_test_and_names_its_marker(inner):
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "test_inner.py")
    result.assert_outcomes(passed=5, failed=3)
    for name in ("test_a_subprocess_unmarked", "test_a_spawned_worker_unmarked"):
        result.stdout.fnmatch_lines([f"*{name}*"])
    result.stdout.fnmatch_lines(["*starts another process*not marked `process`*",
                                 "*trains through a whole run*not marked `training`*"])


def test_the_quick_subset_leaves_out_what_is_marked_by_hand_or_by_rule(inner):
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-m",
                                        "not process and not training", "--co", "test_inner.py")
    listed = {line.split("::")[1] for line in result.stdout.lines if "::" in line}
    assert listed == {"test_a_subprocess_unmarked", "test_a_spawned_worker_unmarked", "test_a_run_folder_unmarked",
                      "test_neither", "test_a_font_cache_built_unmarked"}
