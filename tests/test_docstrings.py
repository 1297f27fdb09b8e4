"""The examples in docstrings run and print what they show; every public name is documented.

The public API is every function and class named in the ``__all__`` of an attnlab
module or subpackage (defined in attnlab, not re-exported from torch), and the
public methods and properties of those classes (their attnlab bases included).
The audit asks, of each:

* a docstring (a method may inherit its base's, e.g. ``extra_repr``);
* a ``Raises:`` section when its body has a ``raise`` statement (re-raises and
  ``raise`` in nested functions do not count; a class documents what its
  ``__init__`` / ``__post_init__`` raises in its own docstring or theirs);
* named shapes when it takes a tensor (a parameter annotated ``Tensor``, alone,
  optional or in a container): its docstring holds a bracketed shape using the
  notation of DESIGN.md (``[B, T, D]``, ``[H, Dh]``...), or says "any shape".
"""

import ast
import collections.abc
import doctest
import importlib
import inspect
import pkgutil
import re
import textwrap
import typing

import pytest
import torch

import attnlab

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(attnlab.__path__, "attnlab.") if not m.name.endswith("__main__")
)

# A bracketed shape with at least one of the named dimensions, e.g. ``[B, H, T, S]`` or ``[L, D]``.
SHAPE = re.compile(r"\[[^\]\n]*\b(?:B|T|S|L|D|H|Dh|F)\b[^\]\n]*\]|any shape")

# Known gaps the audit skips, each (name, check); test_allow_list_is_not_stale fails once
# an entry is fixed, so that it is removed. Empty now: every public name passes.
ALLOWED_GAPS: set[tuple[str, str]] = set()  # (name, check) pairs waiting for a fix; keep it empty

_CONSTRUCTORS = ("__init__", "__post_init__", "__new__")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


@pytest.mark.parametrize("name", MODULES)
def test_public_names_have_docstrings(name):
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no module docstring"
    for attr in getattr(module, "__all__", []):
        obj = getattr(module, attr)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert inspect.getdoc(obj), f"{name}.{attr} has no docstring"


# -- the audit ---------------------------------------------------------------------------


def _public_api():
    """``{qualified name: function or class}`` of everything named in an attnlab ``__all__``."""
    found = {}
    for name in ["attnlab", *MODULES]:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__.startswith("attnlab"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def _unwrap(member):
    """The function behind a method, static/class method or property (None for anything else)."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    elif isinstance(member, property):
        member = member.fget
    return member if inspect.isfunction(member) else None


def _members(cls):
    """``(qualified name, function)`` of the public methods and properties ``cls`` and its attnlab bases define."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("attnlab"):
            continue
        for attr, member in vars(klass).items():
            func = _unwrap(member)
            if func is not None and not attr.startswith("_"):
                yield f"{klass.__module__}.{klass.__qualname__}.{attr}", func


class _RaiseFinder(ast.NodeVisitor):
    """Collects the ``raise X`` statements of one function body, not of functions or classes nested in it."""

    def __init__(self):
        self.lines = []

    def visit_Raise(self, node):
        if node.exc is not None:  # a bare ``raise`` re-raises what the caller was already told about
            self.lines.append(node.lineno)

    def visit_FunctionDef(self, node):
        pass

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


def _raises(func):
    """True if ``func``'s own body has a ``raise X`` statement (False for generated code without source)."""
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):  # e.g. a dataclass's generated __init__
        return False
    finder = _RaiseFinder()
    for statement in ast.parse(textwrap.dedent(source)).body[0].body:
        finder.visit(statement)
    return bool(finder.lines)


def _is_tensor_type(hint):
    if hint is torch.Tensor:
        return True
    origin = typing.get_origin(hint)
    if origin is None or origin is collections.abc.Callable:  # a callable returning a tensor takes none
        return False
    return any(_is_tensor_type(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)


def _takes_tensor(func):
    try:
        hints = typing.get_type_hints(func)
    except NameError:  # a name imported under TYPE_CHECKING only (typed without an import cycle): read the text
        return any("Tensor" in str(hint) for name, hint in func.__annotations__.items() if name != "return")
    hints.pop("return", None)
    return any(_is_tensor_type(h) for h in hints.values())


def _audit():
    """``{(name, check): detail}`` for every gap in the public API's docstrings."""
    gaps = {}
    functions = []
    for qualname, obj in _public_api().items():
        if inspect.isclass(obj):
            if not inspect.getdoc(obj):
                gaps[qualname, "docstring"] = "class has no docstring"
            for attr in _CONSTRUCTORS:
                init = vars(obj).get(attr)
                if not inspect.isfunction(init):
                    continue
                docs = (obj.__doc__ or "") + (init.__doc__ or "")
                if _raises(init) and "Raises:" not in docs:
                    gaps[qualname, "raises"] = f"{attr} raises; neither the class nor {attr} documents Raises:"
                if _takes_tensor(init) and not SHAPE.search(docs):
                    gaps[qualname, "shapes"] = f"{attr} takes a tensor; no shape like [B, L, D] is named"
            functions.extend(_members(obj))
        else:
            functions.append((qualname, obj))
    for qualname, func in dict(functions).items():
        own = func.__doc__ or ""
        if not inspect.getdoc(func):
            gaps[qualname, "docstring"] = "no docstring"
        if _raises(func) and "Raises:" not in own:
            gaps[qualname, "raises"] = "has a raise statement; no Raises: section"
        if _takes_tensor(func) and not SHAPE.search(own):
            gaps[qualname, "shapes"] = "takes a tensor; no shape like [B, L, D] is named"
    return gaps


@pytest.fixture(scope="module")
def gaps():
    return _audit()


def _report(gaps, check):
    return "\n".join(f"  {name}: {detail}" for (name, kind), detail in sorted(gaps.items())
                     if kind == check and (name, kind) not in ALLOWED_GAPS)


@pytest.mark.parametrize("check", ["docstring", "raises", "shapes"])
def test_public_api_is_documented(gaps, check):
    missing = _report(gaps, check)
    assert not missing, f"public names failing the {check!r} check:\n{missing}"


def test_allow_list_is_not_stale(gaps):
    fixed = sorted(entry for entry in ALLOWED_GAPS if entry not in gaps)
    assert not fixed, f"fixed: remove these from ALLOWED_GAPS: {fixed}"


def test_the_audit_finds_what_it_looks_for():
    def undocumented(x: torch.Tensor) -> None:
        if x is None:
            raise ValueError("x")

    def nested_raise_only(x: int) -> None:
        """Nothing to declare."""

        def inner():
            raise ValueError("inner")

    assert _raises(undocumented) and _takes_tensor(undocumented)
    assert not _raises(nested_raise_only) and not _takes_tensor(nested_raise_only)
    assert _is_tensor_type(torch.Tensor | None) and _is_tensor_type(tuple[torch.Tensor, ...])
    assert not _is_tensor_type(collections.abc.Callable[[int], torch.Tensor])
    assert SHAPE.search("query ``[B, H, T, Dh]``") and not SHAPE.search("a list [1, 2]")
