"""``make test-gpu``: the test extra installed as ``make test`` installs it, then the ``cuda`` tests in one process.

Read from ``make -n -B`` (the commands printed, nothing run), on a machine without ``.venv``.
"""

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.process  # runs make (printing only)


def make_commands(target: str, tmp_path: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    result = subprocess.run(["make", "--no-print-directory", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def test_make_test_gpu_installs_what_make_test_does_then_runs_the_cuda_tests(tmp_path):
    gpu, everything = make_commands("test-gpu", tmp_path), make_commands("test", tmp_path)
    assert [c for c in gpu if "pip install" in c] == [c for c in everything if "pip install" in c]
    assert any(".[test]" in c for c in gpu)
    # The last command that runs pytest (under another make, MAKEFLAGS may add lines of its own).
    words = shlex.split([c for c in gpu if " pytest " in c][-1])
    assert words[words.index("pytest") - 2:] == [f"{tmp_path / 'venv'}/bin/python", "-m", "pytest", "-m", "cuda",
                                                 "-rs"], gpu[-1]
    assert "-n" not in words  # one process: one GPU, one compile of each kernel
