"""The import rules DESIGN.md writes down, checked on the source: one-way layers, leaves, no cycles.

Every ``import attnlab...`` and ``from attnlab... import`` in ``src/attnlab`` is
read with :mod:`ast`, wherever it sits (a lazy import inside a function is a
dependency too: it is how ``plotting`` used to run models), and resolved to the
module it names. Then:

* the layers run one way, ``encodings -> attention -> models -> training -> labs
  -> cli``: a package never imports one further along;
* ``training`` trains any module: it imports no models;
* ``plotting`` takes data: it imports no attention, model, training, lab, CLI or
  compat code; ``data`` never imports models; ``compat`` and ``analysis`` sit
  beside ``models``; the ground-floor modules (``attnlab/_*.py``) import no package;
* no import cycle, inside a package or between them. A cycle is counted on what runs:
  an import under ``if TYPE_CHECKING:`` never does (it types, and counts for the layers
  only), and importing a submodule runs its packages' ``__init__`` first, unless the
  importer sits inside that package (whose ``__init__`` then runs already). So an
  ``__init__`` that imports a module which imports, from outside the package, a module
  of it, is a cycle: a process that imports that module first meets it half initialised.

The only exceptions are listed in ``KNOWN_CYCLES``, each with who is removing it.
A new violation fails; so does an exception that no longer happens (shrink the list).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"

LAYERS = ("encodings", "attention", "models", "training", "labs", "cli")

# package -> the packages it must never import (besides the layers further along, for a layer).
FORBIDDEN = {
    "training": {"models"},  # a generic loop: it trains any nn.Module
    "plotting": {"attention", "models", "training", "labs", "cli", "compat"},
    "data": {"models", "training", "labs", "cli"},
    "compat": {"training", "labs", "cli"},
    "analysis": {"training", "labs", "cli"},
}

# Import cycles that other work in progress removes (issue 25). Each entry is the set of
# modules of one cycle; a cycle among a subset of them passes too (half fixed). Delete an entry when its
# cycle is gone: the test says so.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in SRC.rglob("*.py")}


def _resolve(name: str) -> str:
    """The module ``name`` lives in: itself, or the nearest package above it (a name inside ``__init__``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): a block that never runs."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, *, runtime: bool) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement under ``tree``; with ``runtime``, none inside an ``if TYPE_CHECKING:`` body."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if runtime and _type_checking(node):
            assert isinstance(node, ast.If)
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _imports(module: str, *, runtime: bool = False) -> set[str]:
    """The attnlab modules ``module`` imports, anywhere in its file (``runtime``: those that run)."""
    path = MODULES[module]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in _import_nodes(tree, runtime=runtime):
        if isinstance(node, ast.Import):
            found.update(_resolve(alias.name) for alias in node.names if alias.name.split(".")[0] == "attnlab")
        else:
            base = node.module or ""
            if node.level:  # relative: from the module's own package upwards
                package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            if base.split(".")[0] != "attnlab":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"  # `from attnlab.training import checkpoint`: a module
                found.add(full if full in MODULES else _resolve(base))
    found.discard(module)
    return found


def _ancestors(module: str) -> list[str]:
    """``a.b.c`` -> ``["a.b", "a"]``: the packages whose ``__init__`` runs before the module does."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def _with_packages(edges: dict[str, set[str]], modules: set[str]) -> dict[str, set[str]]:
    """``edges`` with what importing runs besides: each target's packages' ``__init__``, unless the importer
    sits inside that package (its ``__init__`` has run, or is running, before the importer's first line)."""
    ran: dict[str, set[str]] = {}
    for module, targets in edges.items():
        inside = set(_ancestors(module))
        packages = {p for t in targets for p in _ancestors(t) if p in modules and p not in inside}
        ran[module] = (targets | packages) - {module}
    return ran


GRAPH = {module: _imports(module) for module in MODULES}
#: what runs when each module is imported: its imports outside TYPE_CHECKING, and their packages' __init__
RUNTIME = _with_packages({module: _imports(module, runtime=True) for module in MODULES}, set(MODULES))


def _package(module: str) -> str:
    """``attnlab.training.loop`` -> ``training``; ``attnlab._validate`` -> ``_validate``; ``attnlab`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _ground_floor(package: str) -> bool:
    """``_validate``, ``_io``, ``_eval_mode`` ...: not ``__main__``, the entry point above the CLI."""
    return package.startswith("_") and not package.startswith("__")


def _forbidden(package: str) -> set[str]:
    banned = set(FORBIDDEN.get(package, ()))
    if package in LAYERS:
        banned |= set(LAYERS[LAYERS.index(package) + 1:])
    if _ground_floor(package):  # only other ground-floor modules
        banned |= {_package(m) for m in MODULES if not _ground_floor(_package(m))}
    return banned


def _violations() -> list[str]:
    found = []
    for module, targets in sorted(GRAPH.items()):
        banned = _forbidden(_package(module))
        found += [f"{module} imports {target}" for target in sorted(targets) if _package(target) in banned]
    return found


def _components(edges: dict[str, list[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def _cycles() -> list[frozenset[str]]:
    """The import cycles among attnlab's modules, counted on what runs (:data:`RUNTIME`)."""
    return _components({m: sorted(RUNTIME[m]) for m in MODULES})


def test_the_scan_sees_the_imports():
    # The checks below are only as good as the scan: it must find lazy, aliased and relative imports.
    assert len(MODULES) > 50
    # `from attnlab.training import schedulers as sched` names a module, not the package.
    assert "attnlab.training.schedulers" in GRAPH["attnlab.training.loop"]
    assert "attnlab._eval_mode" in GRAPH["attnlab.training.book.trainer"]
    assert "attnlab.cli" in GRAPH["attnlab.__main__"]
    assert any(_package(t) == "encodings" for t in GRAPH["attnlab.attention.multihead"])


def test_the_rules_catch_what_they_forbid():
    assert {"models", "training", "labs", "cli", "compat", "attention"} <= _forbidden("plotting")
    assert {"attention", "models", "training", "labs", "cli"} <= _forbidden("encodings")
    assert {"models", "labs", "cli"} <= _forbidden("training")
    assert "models" in _forbidden("data")
    assert {"encodings", "training"} <= _forbidden("_eval_mode")
    assert "plotting" not in _forbidden("training")  # the trainer draws its losses
    assert _forbidden("__main__") == set()


def test_the_cycle_finder_finds_cycles():
    edges = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"], "e": ["e"]}
    assert _components(edges) == [frozenset({"a", "b", "c"})]


def test_what_runs_counts_package_inits_and_not_type_checking():
    # Importing the length lab's settings from the CLI runs the lab's package __init__s first.
    assert {"attnlab.labs.lengths", "attnlab.labs"} <= RUNTIME["attnlab.cli.compare"]
    # An import that only types is a dependency of the layers, and runs nothing.
    assert "attnlab.labs.lengths.config" in GRAPH["attnlab.labs.lengths.protocols"]
    assert "attnlab.labs.lengths.config" not in RUNTIME["attnlab.labs.lengths.protocols"]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nelse:\n    import b\n")
    assert [n.names[0].name for n in _import_nodes(tree, runtime=True) if isinstance(n, ast.Import)] == ["b"]


def test_a_package_init_that_is_imported_back_is_a_cycle():
    modules = {"p", "p.a", "p.b", "q"}
    # p/__init__ imports p.a, which imports q, which imports p.b: a process that imports q first runs p's
    # __init__, which reaches q half initialised. No file imports the package itself; the cycle is p -> p.a -> q -> p.
    edges = {"p": {"p.a"}, "p.a": {"q"}, "q": {"p.b"}, "p.b": set()}
    assert _components({m: sorted(t) for m, t in _with_packages(edges, modules).items()}) == [
        frozenset({"p", "p.a", "q"})]
    # Inside the package, its __init__ runs already: p.a importing p.b is no cycle.
    edges = {"p": {"p.a"}, "p.a": {"p.b"}, "q": {"p.a"}, "p.b": set()}
    assert _components({m: sorted(t) for m, t in _with_packages(edges, modules).items()}) == []


def test_packages_import_only_downwards():
    assert _violations() == []


@pytest.mark.parametrize("package", ["training", "plotting", "analysis", "encodings", "data", "labs"])
def test_no_import_cycle_inside(package):
    assert [sorted(c) for c in _cycles() if package in {_package(m) for m in c}] == []


def test_no_new_import_cycle_and_no_stale_exception():
    cycles = _cycles()
    new = [sorted(c) for c in cycles if not any(c <= known for known in KNOWN_CYCLES)]
    assert new == [], "a new import cycle"
    stale = [why for known, why in KNOWN_CYCLES.items() if not any(c <= known for c in cycles)]
    assert stale == [], "these cycles are gone: delete them from KNOWN_CYCLES"


@pytest.mark.process
def test_a_model_loads_the_core_and_not_the_long_context_paths():
    # Importing a model loads what every forward pass needs. The chunked and FlexAttention paths, the randomized
    # wrapper and the decoding cache load where a call first takes them; 25 modules is the goal the grain
    # count (benchmarks/grain.py) holds the package to.
    code = ("import sys, attnlab.models.decoder_only\n"
            "print(' '.join(sorted(m for m in sys.modules if m == 'attnlab' or m.startswith('attnlab.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "attnlab.models.decoder_only" in loaded
    lazy = {"attnlab.attention.backends.chunked", "attnlab.attention.backends.flex",
            "attnlab.encodings.randomized", "attnlab.attention.decoding_cache"}
    assert lazy.isdisjoint(loaded), sorted(lazy & set(loaded))
    assert len(loaded) <= 25, loaded
