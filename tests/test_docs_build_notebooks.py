"""``docs/build.py`` executes several notebooks in one run, as ``make docs`` does (all seven).

The suite otherwise runs the builder one notebook at a time (``--notebook NAME``, tests/notebook_runs.py)
and builds the site from those (``--executed``), so a fault that shows only from the second notebook
executed in one run, which ``make docs`` met at once, went unseen: the executed notebook was bound
to the name of the ``--executed`` folder, and the next notebook's lookup raised TypeError.
Two of the quickest notebooks, with the suite's short parameters.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from notebook_runs import HANG_GUARD, PARAMETERS

pytestmark = pytest.mark.notebook  # kernels run (implies `process`)

ROOT = Path(__file__).resolve().parent.parent
PAIR = ["05_pe_walkthrough.ipynb", "06_schemes_inside_attention.ipynb"]


def test_one_run_executes_two_notebooks(tmp_path):
    pytest.importorskip("papermill", reason="the notebooks' runner is not installed (`pip install -e '.[test]'`)")
    argv = [sys.executable, str(ROOT / "docs" / "build.py"), "--build", str(tmp_path / "build"),
            "--parameters", json.dumps(PARAMETERS)]
    for name in PAIR:
        argv += ["--notebook", name]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    for name in PAIR:
        assert f"executed {name} in" in result.stdout
        assert (tmp_path / "build" / "src" / "notebooks" / name).stat().st_size > 1000
