"""The command line starts at once: ``--help`` and ``--version`` import neither torch nor the library.

Each check runs ``python -m attnlab ARGS`` in a fresh interpreter and reads the modules
it had loaded when it exited. The names the parsers list come from :mod:`attnlab.catalog`,
so every list there is compared with the library's own: they cannot drift apart silently.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from attnlab import catalog
from attnlab.cli import build_parser
from attnlab.cli import plot as cli_plot
from attnlab.cli._common import FLOAT32_MAX
from attnlab.cli._tables import table_dtype

VERBS = ("encode", "audit", "plot", "train", "predict", "compare")

# What a command line that has not started any work must not have imported: torch (and the
# numeric stack under it) and the parts of attnlab that import torch.
HEAVY = ("torch", "numpy", "matplotlib")
LIBRARY = tuple(f"attnlab.{name}" for name in ("labs", "models", "training", "attention", "encodings", "data",
                                                 "plotting", "analysis", "compat"))

# Runs `python -m attnlab ARGS` as a user does, and writes sys.modules at exit to a file
# (stdout is the command's own).
DRIVER = textwrap.dedent("""
    import atexit, json, runpy, sys
    where, args = sys.argv[1], json.loads(sys.argv[2])

    def dump():
        with open(where, "w") as f:
            json.dump(sorted(sys.modules), f)

    atexit.register(dump)
    sys.argv = ["attnlab", *args]
    runpy.run_module("attnlab", run_name="__main__", alter_sys=True)
""")


def loaded_by(args, tmp_path):
    """``(exit status, stdout, stderr, modules loaded at exit)`` of ``python -m attnlab ARGS``."""
    where = tmp_path / "modules.json"
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(where), json.dumps(list(args))],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr, json.loads(where.read_text())


def heavy_modules(modules):
    return [m for m in modules if m.split(".")[0] in HEAVY or m.startswith(tuple(f"{p}." for p in LIBRARY))
            or m in LIBRARY]


def test_every_verb_is_checked():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert tuple(sub.choices) == VERBS  # a new verb joins the startup checks below


@pytest.mark.process
@pytest.mark.parametrize("args", [["--help"], ["--version"], *([verb, "--help"] for verb in VERBS)],
                         ids=lambda args: " ".join(args))
def test_help_and_version_import_no_torch(args, tmp_path):
    code, out, err, modules = loaded_by(args, tmp_path)
    assert code == 0, err
    assert out.startswith("attnlab ") if args == ["--version"] else "usage: attnlab" in out
    assert "torch" not in modules
    assert heavy_modules(modules) == []
    assert "attnlab.cli" in modules  # the modules read are those of the command that ran


@pytest.mark.process
def test_a_verb_that_runs_imports_what_it_needs(tmp_path):
    # The same driver sees torch when a verb uses it: the checks above can fail.
    code, out, err, modules = loaded_by(["encode", "--d-model", "2", "--max-len", "2"], tmp_path)
    assert code == 0, err
    assert "tensor(" in out
    assert "torch" in modules and "attnlab.encodings" in modules


@pytest.mark.process
def test_bad_input_before_any_work_is_one_line_without_torch(tmp_path):
    code, out, err, modules = loaded_by(["encode", "--d-model", "0"], tmp_path)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "--d-model" in err
    assert "torch" not in modules


@pytest.mark.process
def test_out_of_memory_is_recognised_with_and_without_torch(tmp_path):
    from attnlab.cli import _out_of_memory

    assert _out_of_memory(torch.OutOfMemoryError("CUDA error"))  # by its type, whatever the message says
    assert _out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8"))
    assert not _out_of_memory(RuntimeError("shapes [2, 3] and [4] cannot be added"))
    # Before any verb imported torch, the check reads the message and imports nothing.
    code = ("import sys; from attnlab.cli import _out_of_memory as oom; "
            "print(oom(RuntimeError('CUDA out of memory')), oom(RuntimeError('a bug')), 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.stdout.split() == ["True", "False", "False"], proc.stderr


# --- the catalog's names are the library's -------------------------------------------------

def test_catalog_schemes_are_the_registrys_encodings():
    from attnlab.encodings import registry

    assert catalog.ENCODINGS == (*catalog.SCHEMES, *catalog.RANDOMIZED) == registry.ENCODINGS
    assert catalog.DEFAULT_ENCODINGS == registry.DEFAULT_ENCODINGS
    for name, path in catalog.SCHEMES.items():
        module, _, cls = path.partition(":")
        assert module.startswith("attnlab.encodings.") and cls.isidentifier(), (name, path)


def test_catalog_sorts_the_names_as_their_classes_declare():
    from attnlab.encodings import registry
    from attnlab.encodings.scheme import PositionScheme

    # Read from the classes, not from the catalog's lists: a table is any class but a PositionScheme.
    built = {name: registry.resolve(name) for name in catalog.ENCODINGS}
    tables = tuple(name for name, b in built.items() if isinstance(b, type) and not issubclass(b, PositionScheme))
    causal = tuple(name for name in catalog.SCHEMES if getattr(built[name], "causal_only", False))
    assert catalog.INPUT_TABLES == tables == ("sinusoidal", "learned", "abacus", "coupling", "random-sinusoidal",
                                              "random-learned")
    assert catalog.CAUSAL_ONLY == causal == ("xpos", "cope")
    assert registry.ADDED_TO_INPUT == catalog.INPUT_TABLES and registry.CAUSAL_ONLY == catalog.CAUSAL_ONLY
    assert set(registry.INSIDE_ATTENTION) == set(catalog.ENCODINGS) - set(tables)


def test_catalog_tasks_presets_and_models_are_the_labs():
    from attnlab.data import TASKS
    from attnlab.labs.lengths.presets import PRESETS
    from attnlab.labs.squares.models import SQUARES_MODELS

    assert catalog.TASKS == TASKS
    assert catalog.PRESETS == tuple(PRESETS)
    assert catalog.SQUARES_MODELS == SQUARES_MODELS


def test_catalog_string_tasks_and_protocols_are_the_labs():
    from attnlab.data.chomsky import CHOMSKY_TASKS
    from attnlab.data.kazemnejad.splits import KAZEMNEJAD_TASKS
    from attnlab.data.tasks.basic import BASIC_TASKS
    from attnlab.data.tasks.registry import task_named
    from attnlab.labs.lengths import protocols

    # every generator the data modules list is a task by its own name, and nothing else is
    arithmetic = ("reversed-addition", "reversed-multiplication")
    assert tuple(catalog.STRING_TASKS) == (*CHOMSKY_TASKS, *KAZEMNEJAD_TASKS, *arithmetic)
    assert tuple(catalog.TOKEN_TASKS) == tuple(BASIC_TASKS)
    assert catalog.TASKS == tuple(catalog.TASK_CLASSES)
    for name in catalog.TASKS:
        assert task_named(name).name == name
    assert catalog.PROTOCOLS == tuple(protocols._PROTOCOLS)


def test_catalog_table_options_are_the_encodings():
    from attnlab.encodings import LAYOUTS, RATES

    assert catalog.LAYOUTS == LAYOUTS
    assert catalog.RATES == RATES


def test_catalog_dtypes_are_torchs_floating_dtypes():
    assert catalog.DTYPES == ("float16", "bfloat16", "float32", "float64")
    assert [table_dtype(name) for name in catalog.DTYPES] == [torch.float16, torch.bfloat16, torch.float32,
                                                               torch.float64]
    with pytest.raises(ValueError, match="--dtype 'int8'"):
        table_dtype("int8")


def test_the_flags_thread_bound_is_the_librarys():
    from attnlab.cli._common import MAX_THREADS
    from attnlab.training.threads import MAX_THREADS as LIBRARY_MAX_THREADS

    assert MAX_THREADS == LIBRARY_MAX_THREADS


def test_float32_max_is_torchs():
    from attnlab._validate import FLOAT32_MAX as LIBRARY_FLOAT32_MAX

    assert FLOAT32_MAX == torch.finfo(torch.float32).max == LIBRARY_FLOAT32_MAX


def test_every_figure_name_has_its_figure():
    drawn = set(cli_plot._figures())
    assert set(cli_plot.FIGURE_NAMES) - set(cli_plot.RUN_FIGURES) == drawn
    assert len(cli_plot.FIGURE_NAMES) == len(set(cli_plot.FIGURE_NAMES))
