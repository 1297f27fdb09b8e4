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


def lab_tables():
    import importlib.util

    path = README.parent / "benchmarks" / "lab_tables.py"
    spec = importlib.util.spec_from_file_location("lab_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_length_lab_tables_are_generated_from_their_committed_results():
    tables = lab_tables()
    names = [m.group("name") for m in tables.BLOCK.finditer(TEXT)]
    # every preset's default run: its results, the claims' verdicts and its settings table
    for preset in ("ruoss2023", "kazemnejad2023"):
        assert {f"{preset}/results", f"{preset}/claims", f"{preset}/settings"} <= set(names), names
    assert "ruoss2023/gains" in names
    stale = [m.group("name") for m, n in zip(tables.BLOCK.finditer(TEXT), tables.BLOCK.finditer(tables.updated(TEXT)),
                                             strict=True) if m.group("body") != n.group("body")]
    assert not stale, f"README tables differ from their files: {stale} (python benchmarks/lab_tables.py)"


def test_a_hand_edited_table_is_caught(tmp_path):
    tables = lab_tables()
    match = next(m for m in tables.BLOCK.finditer(TEXT) if m.group("name") == "ruoss2023/results")
    body = match.group("body")
    edited = TEXT.replace(body, body.replace("|", "| 99.9", 1), 1)
    assert edited != TEXT and tables.updated(edited) != edited  # the check above would name it
    assert tables.updated(edited) == tables.updated(TEXT)  # and the script writes the files' numbers back
