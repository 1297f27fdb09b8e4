"""The data packages' names: each imported from the module that defines it, the first time it is asked for."""

import importlib
import subprocess
import sys

import pytest

PACKAGES = ["attnlab.data", "attnlab.data.squares", "attnlab.data.tasks", "attnlab.data.chomsky",
            "attnlab.data.kazemnejad", "attnlab.data.scan", "attnlab.data.arithmetic"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_of_a_package_is_its_modules(package):
    module = importlib.import_module(package)
    assert module.__all__ and sorted(module.__all__) == sorted(module._HOMES)
    for name in module.__all__:
        home = importlib.import_module(f"{package}.{module._HOMES[name]}")
        assert getattr(module, name) is getattr(home, name), name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        module.nothing  # noqa: B018


@pytest.mark.process
def test_importing_a_module_loads_none_of_its_siblings():
    code = ("import sys\nimport attnlab.data\nprint('torch' in sys.modules)\n"
            "import attnlab.data.chomsky.regular\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('attnlab.data'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    torch_loaded, loaded = out.stdout.split("\n")[:2]
    assert torch_loaded == "False"  # the package itself imports nothing
    assert loaded.split() == ["attnlab.data", "attnlab.data.chomsky", "attnlab.data.chomsky.base",
                              "attnlab.data.chomsky.regular", "attnlab.data.tasks", "attnlab.data.tasks.strings"]
