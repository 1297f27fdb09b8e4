"""How attnlab is installed: the Makefile's targets, the extras, and the README's wheel, built and run.

`make run` must install attnlab with its runtime dependencies only and `make test` the test
extra (read from `make -n -B`, which prints the commands without running them). The README's
install commands must name only extras that exist, and the wheel they build must hold a
working attnlab: it is built here, installed into a folder of its own, and trains from there.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
README = (ROOT / "README.md").read_text()
INSTALL = re.search(r"### Installing attnlab into your own environment\n(.*?)\n#", README, flags=re.S).group(1)


def make_commands(target: str, tmp_path: Path) -> list[str]:
    """The pip commands ``make TARGET`` would run on a machine without ``.venv`` (nothing is run)."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    result = subprocess.run(["make", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return [line for line in result.stdout.splitlines() if "pip install" in line]


def installed_specs(commands: list[str]) -> list[str]:
    """What each ``pip install`` is asked for (``torch``, ``.``, ``.[test]``), flags and constraints left out."""
    specs = []
    for command in commands:
        words = shlex.split(command)
        words = words[words.index("install") + 1:]
        skip_next = False
        for word in words:
            if skip_next:
                skip_next = False
            elif word in ("-c", "--constraint"):
                skip_next = True
            elif word == "-e" or word.startswith("-"):
                continue
            else:
                specs.append(word)
    return specs


@pytest.mark.process
def test_make_run_installs_the_runtime_dependencies_only(tmp_path):
    specs = installed_specs(make_commands("run", tmp_path))
    assert specs == ["pip", "torch", "."], specs


@pytest.mark.process
def test_make_test_adds_the_test_extra(tmp_path):
    specs = installed_specs(make_commands("test", tmp_path))
    assert specs == ["pip", "torch", ".", ".[test]"], specs


@pytest.mark.process
def test_every_pip_install_is_constrained(tmp_path):
    for target in ("run", "test", "notebooks", "lint"):
        for command in make_commands(target, tmp_path):
            if "--upgrade pip" not in command:
                assert "-c constraints.txt" in command, (target, command)


def test_the_readme_names_only_extras_that_exist():
    named = set(re.findall(r"\.\[(\w+)\]", INSTALL)) | set(re.findall(r"`(\w+)`\s+\(", INSTALL))
    assert named and named <= EXTRAS, named - EXTRAS
    assert {"ray", "notebooks", "test", "dev"} <= named


@pytest.mark.process
@pytest.mark.slow
def test_the_readmes_wheel_installs_and_trains(tmp_path):
    wheel_name = re.search(r"dist/(attnlab-[\w.]+-py3-none-any\.whl)", INSTALL).group(1)
    # --no-build-isolation: build with this environment's setuptools, nothing fetched from an index.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = tmp_path / "dist" / wheel_name
    assert wheel.is_file(), sorted(p.name for p in (tmp_path / "dist").iterdir())
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    assert set(re.findall(r"^Provides-Extra: (\S+)$", metadata, flags=re.M)) == EXTRAS
    runtime = [line for line in re.findall(r"^Requires-Dist: (.+)$", metadata, flags=re.M) if "extra ==" not in line]
    assert sorted(re.match(r"[\w-]+", r).group(0) for r in runtime) == ["matplotlib", "numpy", "torch", "tqdm"]

    # Installed into a folder of its own (its dependencies are this environment's), it trains.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(tmp_path / "site"), str(wheel)], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    where = subprocess.run([sys.executable, "-c", "import attnlab; print(attnlab.__file__)"], env=env,
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "site"), where
    run = subprocess.run([sys.executable, "-m", "attnlab", "train", "--epochs", "1", "--no-progress",
                          "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "run" / "report.html").is_file()
