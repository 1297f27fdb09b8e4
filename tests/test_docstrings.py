"""The examples in docstrings run and print what they show; every public name is documented."""

import doctest
import importlib
import inspect
import pkgutil

import pytest

import attnlab

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(attnlab.__path__, "attnlab.") if not m.name.endswith("__main__")
)


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
