"""``benchmarks/bench_python_vs_cli.py`` times the README's Python block: it finds that block and sets its epochs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its sibling modules, as when run from there
    try:
        spec = importlib.util.spec_from_file_location("bench_python_vs_cli", BENCHMARKS / "bench_python_vs_cli.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_it_times_the_readmes_trainer_block_at_the_epochs_asked(bench):
    block = bench.readme_block()
    assert "Trainer(" in block and "trainer.train(EPOCHS)" in block
    changed = bench.with_epochs(block, 3)
    assert "EPOCHS = 3\n" in changed and changed.replace("EPOCHS = 3\n", "") == block.replace("EPOCHS = 100\n", "")


def test_a_readme_without_the_block_is_named(bench, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="no Python block starting with"):
        bench.readme_block(readme)
