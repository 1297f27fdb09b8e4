"""The labs as notebooks: the seven expected ones, committed without outputs, each running from a clean kernel.

Every notebook has one ``parameters`` cell (papermill's convention: a code cell tagged
``parameters``) near the top, holding its run-length settings as upper-case names, with
the labs' values as defaults: notebooks 01 and 04 train the labs' 100 epochs. The tests
run each notebook with papermill, which injects shorter settings in an
``injected-parameters`` cell right after the tagged one, and check that the short run
really was short (a line that only the injected values print), so the suite stays quick.
``benchmarks/notebooks_full_length.py`` runs 01 and 04 at their defaults beside the labs.

Every notebook runs in a fresh kernel, in a temporary working directory (nothing is
written into the repo); any error in any cell fails its test. The kernel is this
interpreter (a kernelspec written to a temporary folder), so the notebooks run against
the attnlab installed here, whatever kernelspec a machine has.
"""

import ast
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import nbformat
import papermill
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager

from attnlab.labs import CompareConfig

from notebook_runs import BUILD, HANG_GUARD, PARAMETERS, executed_notebook, notebook_cache

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

# A line of output that only the injected values (tests/notebook_runs.py's PARAMETERS) give.
PRINTED = {
    "01_positional_encoding_lab.ipynb": "after 2 epochs: train MSE",
    "02_tensorflow_position_encoding.ipynb": "torch.Size([30, 20])",
    "03_d2l_self_attention_and_positional_encoding.ipynb": "torch.Size([1, 20, 16])",
    "04_attention_lab.ipynb": "test MSE after 2 epochs",
    "05_pe_walkthrough.ipynb": "torch.Size([6, 8])",
    "06_schemes_inside_attention.ipynb": "(2, 3, 32)",
    "07_length_generalisation.ipynb": "copy, decoder-only: trained on lengths up to 4",
}

# The defaults are the labs' sizes, copied from the labs: both squares labs call StepByStep.train(100);
# the TensorFlow notebook sets num_positions = 50, depth = 100; the d2l chapter encoding_dim,
# num_steps = 32, 60; the PE walkthrough max_len = 20, d_model = 16.
LABS_DEFAULTS = {
    "01_positional_encoding_lab.ipynb": {"EPOCHS": 100},
    "02_tensorflow_position_encoding.ipynb": {"NUM_POSITIONS": 50, "DEPTH": 100},
    "03_d2l_self_attention_and_positional_encoding.ipynb": {"ENCODING_DIM": 32, "NUM_STEPS": 60},
    "04_attention_lab.ipynb": {"EPOCHS": 100},
    "05_pe_walkthrough.ipynb": {"MAX_LEN": 20, "D_MODEL": 16},
}


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
    assert "papermill" not in nb.metadata, "a papermill run's record must not be committed"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"
        assert "execution" not in cell.metadata, f"cell {i} keeps execution timings"
        assert "papermill" not in cell.metadata, f"cell {i} keeps a papermill run's record"
        assert "injected-parameters" not in cell.metadata.get("tags", []), f"cell {i} holds injected parameters"


def _parameters(nb) -> tuple[int, dict]:
    """The index of the one ``parameters`` cell and its names' values; checks its form."""
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"cells tagged 'parameters': {tagged}"
    index = tagged[0]
    cell = nb.cells[index]
    assert cell.cell_type == "code"
    code_before = [i for i, c in enumerate(nb.cells[:index]) if c.cell_type == "code"]
    assert len(code_before) <= 1, f"the parameters cell comes after code cells {code_before}: put it near the top"
    values = {}
    for stmt in ast.parse(cell.source).body:
        assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name), \
            f"only NAME = value lines in the parameters cell, got {ast.unparse(stmt)!r}"
        name = stmt.targets[0].id
        assert name.isupper(), f"parameter names are upper-case, got {name}"
        values[name] = ast.literal_eval(stmt.value)  # papermill can only override literals
    return index, values


def _assigned(source: str) -> set[str]:
    """Names a code cell assigns (IPython's % and ! lines left out)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return {node.id for node in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


@pytest.mark.parametrize("name", EXPECTED)
def test_one_parameters_cell_near_the_top(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    index, values = _parameters(nb)
    assert set(PARAMETERS.get(name, {})) <= set(values), "the tests inject a name the notebook does not define"
    for i, cell in enumerate(nb.cells[index + 1:], start=index + 1):
        if cell.cell_type == "code":
            overwritten = _assigned(cell.source) & set(values)
            assert not overwritten, f"cell {i} assigns {overwritten}: later cells must only read the parameters"


@pytest.mark.parametrize("name", sorted(LABS_DEFAULTS))
def test_defaults_are_the_labs_sizes(name):
    _, values = _parameters(nbformat.read(NOTEBOOKS / name, as_version=4))
    assert values == LABS_DEFAULTS[name]


def test_length_notebook_defaults_are_attnlab_compares():
    _, values = _parameters(nbformat.read(NOTEBOOKS / "07_length_generalisation.ipynb", as_version=4))
    defaults = {f.name: f.default for f in fields(CompareConfig)}
    assert {name: (tuple(v) if name == "TEST_LENS" else v) for name, v in values.items()} == \
        {name: defaults[name.lower()] for name in values}


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
    """A KernelSpecManager whose only ``python3`` runs this interpreter."""
    root = tmp_path_factory.mktemp("kernels")
    spec = root / "python3"
    spec.mkdir()
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    # One intra-op thread per kernel, as tests/conftest.py's `one_thread` does for tiny models: on a
    # shared 2-core machine torch's threads otherwise wait for each other (10x slower training).
    # Temporary files go to this module's own folder. (papermill starts the kernel itself, with
    # this process's environment: the kernelspec's `env` is how to set the kernel's.)
    env = {"OMP_NUM_THREADS": "1", "TMPDIR": str(root), "MPLBACKEND": "Agg"}
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3", "language": "python",
                                                  "env": env}))
    return KernelSpecManager(kernel_dirs=[str(root)])


def _execute(notebook, kernel_specs, workdir: Path, parameters: dict | None = None):
    """Run ``notebook`` (a path or a NotebookNode) with papermill in a fresh python3 kernel in ``workdir``.

    Returns the executed notebook; raises papermill's PapermillExecutionError, naming the cell, on any error.
    """
    # Unix sockets in the test's folder rather than TCP ports: no race for free ports between the kernels of
    # parallel workers. A socket path has at most 107 characters; in a deeper folder, TCP it is.
    ipc = len(str(workdir)) < 90

    class ThisInterpreter(KernelManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs, kernel_spec_manager=kernel_specs, transport="ipc" if ipc else "tcp",
                             ip=str(workdir / "kernel") if ipc else "127.0.0.1")

    # A kernel manager class, not an instance: the client then owns its kernel, and shuts it down at the end
    # (given a started manager, nbclient leaves the kernel running until this process exits).
    return papermill.execute_notebook(notebook, None, parameters=parameters, kernel_manager_class=ThisInterpreter,
                                      cwd=str(workdir), progress_bar=False, execution_timeout=CELL_TIMEOUT)


def test_kernel_is_this_interpreter(kernel_specs, tmp_path):
    code = "import os, sys\nprint(sys.prefix)\nprint(os.path.realpath(sys.executable))\nprint(os.getcwd())\n" \
           "print(os.environ['OMP_NUM_THREADS'])"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)],
                                  metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb = _execute(nb, kernel_specs, tmp_path)
    prefix, executable, cwd, threads = nb.cells[0].outputs[0]["text"].splitlines()
    assert (prefix, executable) == (sys.prefix, os.path.realpath(sys.executable))  # this venv, this python
    assert Path(cwd).resolve() == tmp_path.resolve()
    assert threads == "1"


def test_injected_parameters_override_the_defaults(kernel_specs, tmp_path):
    """papermill's injection, on a notebook of two cells: the tagged defaults, then a line that reads them."""
    params = nbformat.v4.new_code_cell("EPOCHS = 100")
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell("print(f'{EPOCHS} epochs')")],
                                  metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb = _execute(nb, kernel_specs, tmp_path, parameters={"EPOCHS": 3})
    assert nb.cells[1].metadata["tags"] == ["injected-parameters"]
    assert nb.cells[2].outputs[0]["text"] == "3 epochs\n"


@pytest.mark.notebook
@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_runs(name, tmp_path_factory):
    # Run by docs/build.py --notebook, as `make docs` runs it (it fails on any cell's error); the site's
    # tests build from the same file.
    nb = nbformat.read(executed_notebook(tmp_path_factory, name), as_version=4)
    printed = PRINTED[name]
    index, _ = _parameters(nbformat.read(NOTEBOOKS / name, as_version=4))
    assert nb.cells[index + 1].metadata["tags"] == ["injected-parameters"]  # right after the tagged cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert [o for o in outputs if o["output_type"] == "error"] == []
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert printed in text, f"the injected parameters did not give {printed!r}: the notebook ignores them"


@pytest.mark.notebook
@pytest.mark.process
def test_a_rebuild_takes_unchanged_notebooks_from_the_cache(tmp_path_factory, tmp_path):
    # The walkthrough was executed once this session, into a cache of its own: built again with the same
    # parameters and the same attnlab, it is copied from there, not run (no kernel starts).
    name = "05_pe_walkthrough.ipynb"
    cache = notebook_cache(tmp_path_factory, name)
    argv = [sys.executable, str(BUILD), "--build", str(tmp_path / "build"), "--cache", str(cache),
            "--parameters", json.dumps(PARAMETERS), "--notebook", name]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert f"took {name} from the cache" in result.stdout and "executed" not in result.stdout.split("\n")[0]
    copied = tmp_path / "build" / "src" / "notebooks" / name
    assert copied.read_bytes() == executed_notebook(tmp_path_factory, name).read_bytes()
    # Other parameters are another key: the notebook runs again (and that run is cached beside).
    other = {**PARAMETERS, "05_pe_walkthrough.ipynb": {"MAX_LEN": 7, "D_MODEL": 8}}
    argv[argv.index("--parameters") + 1] = json.dumps(other)
    argv[argv.index("--build") + 1] = str(tmp_path / "again")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert f"executed {name} in" in result.stdout and "from the cache" not in result.stdout


def test_the_cache_key_follows_the_notebook_its_parameters_and_attnlab(tmp_path):
    spec = importlib.util.spec_from_file_location("docs_build", BUILD)
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    notebook = tmp_path / "n.ipynb"
    notebook.write_text("{}")
    key = build.cache_key(notebook, {"EPOCHS": 2}, "code")
    assert key.startswith("n-") and key.endswith(".ipynb")
    assert build.cache_key(notebook, {"EPOCHS": 2}, "code") == key
    assert build.cache_key(notebook, {"EPOCHS": 3}, "code") != key
    assert build.cache_key(notebook, {"EPOCHS": 2}, "other code") != key
    notebook.write_text('{"cells": []}')
    assert build.cache_key(notebook, {"EPOCHS": 2}, "code") != key
    assert len(build.code_digest()) == 64
