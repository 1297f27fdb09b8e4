"""The labs as notebooks: the seven expected ones, committed without outputs, each running from a clean kernel.

Every notebook is executed by nbclient in a fresh kernel, in a temporary working directory
(nothing is written into the repo); any error in any cell fails its test. The kernel is
this interpreter (a kernelspec written to a temporary folder), so the notebooks run
against the attnlab installed here, whatever kernelspec a machine has.
"""

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
EXPECTED = (
    "01_positional_encoding_lab.ipynb",
    "02_tensorflow_position_encoding.ipynb",
    "03_d2l_self_attention_and_positional_encoding.ipynb",
    "04_attention_lab.ipynb",
    "05_pe_walkthrough.ipynb",
    "06_schemes_inside_attention.ipynb",
    "07_length_generalisation.ipynb",
)
CELL_TIMEOUT = 600  # seconds per cell: generous, since other work may share the machine (no timing asserts)


def _committed() -> list[str]:
    return sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def test_the_seven_notebooks_are_there():
    assert _committed() == sorted(EXPECTED)


@pytest.mark.parametrize("name", EXPECTED)
def test_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert "widgets" not in nb.metadata, "widget state must not be committed"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"
        assert "execution" not in cell.metadata, f"cell {i} keeps execution timings"


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
    """A KernelSpecManager whose only ``python3`` runs this interpreter."""
    root = tmp_path_factory.mktemp("kernels")
    spec = root / "python3"
    spec.mkdir()
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"}))
    return KernelSpecManager(kernel_dirs=[str(root)])


def _execute(nb, kernel_specs, workdir: Path) -> None:
    """Run ``nb`` in place in a fresh python3 kernel whose working directory is ``workdir``."""
    # Unix sockets in the test's folder rather than TCP ports: no race for free ports between the kernels of
    # parallel workers. A socket path has at most 107 characters; in a deeper folder, TCP it is.
    ipc = len(str(workdir)) < 90
    km = KernelManager(kernel_name="python3", kernel_spec_manager=kernel_specs, transport="ipc" if ipc else "tcp",
                       ip=str(workdir / "kernel") if ipc else "127.0.0.1")
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    # One intra-op thread per kernel, as tests/conftest.py's `one_thread` does for tiny models: on a
    # shared 2-core machine torch's threads otherwise wait for each other (10x slower training).
    # Temporary files go to the test's own folder.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(workdir), "MPLBACKEND": "Agg"}
    client.execute(env=env)


def test_kernel_is_this_interpreter(kernel_specs, tmp_path):
    code = "import os, sys\nprint(sys.prefix)\nprint(os.path.realpath(sys.executable))\nprint(os.getcwd())"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    _execute(nb, kernel_specs, tmp_path)
    prefix, executable, cwd = nb.cells[0].outputs[0]["text"].splitlines()
    assert (prefix, executable) == (sys.prefix, os.path.realpath(sys.executable))  # this venv, this python
    assert Path(cwd).resolve() == tmp_path.resolve()


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_runs(name, kernel_specs, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    _execute(nb, kernel_specs, tmp_path)  # raises CellExecutionError, naming the cell, on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o["output_type"] == "error"]
    assert errors == []
