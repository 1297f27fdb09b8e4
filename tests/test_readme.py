"""Every example in README.md runs, and the output it shows is the output we print."""

import re
import shlex
from pathlib import Path

import pytest

from attnlab.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text()


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", TEXT, flags=re.S)


def test_first_two_commands_are_make_run_and_make_test():
    commands = [line.split("#")[0].strip() for b in blocks("bash") for line in b.splitlines() if line.strip()]
    assert commands[:2] == ["make run", "make test"]


# A block that trains the labs' 100 epochs is run by the test it names, at a length that proves its point.
RUN_ELSEWHERE = "runs this block"


@pytest.mark.parametrize("index", [i for i, b in enumerate(blocks("python")) if RUN_ELSEWHERE not in b])
def test_python_examples_run(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that save figures write here
    exec(compile(blocks("python")[index], f"README.md python block {index}", "exec"), {})


def test_every_block_run_elsewhere_names_an_existing_test():
    for block in blocks("python"):
        if RUN_ELSEWHERE in block:
            named = re.search(r"(tests/\S+\.py) runs this block", block)
            assert named and (README.parent / named.group(1)).is_file(), block[:200]


def console_sessions():
    """(command, expected output lines) for each `$ attnlab ...` line of the console blocks."""
    sessions = []
    for block in blocks("console"):
        current = None
        for line in block.splitlines():
            if line.startswith("$ "):
                current = (line[2:], [])
                sessions.append(current)
            elif current is not None:
                current[1].append(line)
    return sessions


def console_chains():
    """The console sessions grouped by the run folder they use (``runs/NAME``), in README order.

    A command that reads a run (``--run runs/demo``, ``--resume --out runs/demo``) needs
    the one that made it: each chain runs in one test, in order, in a folder of its own,
    so the tests can run in any order and on any xdist worker.
    """
    chains: dict[str, list[tuple[str, list[str]]]] = {}
    for command, expected in console_sessions():
        folder = re.search(r"runs/[\w.-]+", command)
        chains.setdefault(folder.group(0) if folder else command, []).append((command, expected))
    return list(chains.items())


@pytest.mark.training
@pytest.mark.parametrize("key, chain", console_chains(), ids=[key for key, _ in console_chains()])
def test_console_examples_run_and_print_what_is_shown(key, chain, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for command, expected in chain:
        argv = shlex.split(command)
        assert argv[0] == "attnlab"
        assert main(argv[1:]) == 0, command
        out = capsys.readouterr().out
        if expected:
            assert out.splitlines() == expected, command
