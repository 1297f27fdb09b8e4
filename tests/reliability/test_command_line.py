"""Issue 27, command line: no flag is taken for another (allow_abbrev=False everywhere), and values that
look like negative numbers are values. (A flag given twice keeps argparse's last-wins meaning: overriding
a saved command line is a common use.)"""

import argparse

import pytest

from attnlab.cli import build_parser
from tests.cli_helpers import cli

SILENT = pytest.mark.bad_input("silent wrong results")
MESSAGES = pytest.mark.bad_input("tracebacks and messages")


def _parsers(parser, path=("attnlab",)):
    """Every parser of the tree under ``parser``, with its path: the root, each verb, any verb below one."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def _abbreviations():
    cases = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            longs = [o for o in action.option_strings if o.startswith("--") and len(o) > 4]
            if longs and action.dest != "help":
                cases.append((" ".join(path), longs[0], action.nargs))
    return cases


ABBREVIATIONS = _abbreviations()


def test_the_tree_has_every_verb():
    verbs = {path for path, _ in _parsers(build_parser())}
    assert {("attnlab", verb) for verb in ("train", "compare", "predict", "plot", "encode", "audit")} <= verbs


@SILENT
@pytest.mark.parametrize(("path", "flag", "nargs"), ABBREVIATIONS, ids=[f"{p} {f}" for p, f, _ in ABBREVIATIONS])
def test_no_parser_takes_an_abbreviated_flag(path, flag, nargs):
    # The example: `attnlab compare --seed 3` was taken as `--seeds 3`. Every parser of the tree,
    # every long flag: its name less its last letter must be left unrecognised, not taken for the flag.
    parser = dict(_parsers(build_parser()))[tuple(path.split())]
    for action in parser._actions:
        action.required = False  # only the abbreviation is under test, not the other flags a verb needs
    abbreviated = flag[:-1]
    while abbreviated in parser._option_string_actions:  # --bases less a letter is --base: one letter more
        abbreviated = abbreviated[:-1]
    # The verb's positionals first (plot's NAME), so that the value after the flag is not taken for one.
    args = [next(iter(a.choices)) if a.choices else "x" for a in parser._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)]
    args += [abbreviated] if nargs == 0 else [abbreviated, "1"]
    try:
        _, extras = parser.parse_known_args(args)
    except SystemExit:
        pytest.fail(f"{path} took {abbreviated} for a flag (and refused its value)")
    assert abbreviated in extras


@SILENT
def test_compare_seed_is_not_seeds(capsys):
    code, out, err = cli(capsys, "compare", "--quick", "--seed", "3")
    assert code == 2 and out == ""
    assert "unrecognized arguments: --seed 3" in err and len(err.splitlines()) == 1


@SILENT
@pytest.mark.parametrize("argv", [["train", "--no-progres"], ["train", "--epoch", "2"], ["encode", "--d-mod", "8"]])
def test_abbreviations_exit_2_in_one_line(capsys, argv):
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "unrecognized arguments" in err


@MESSAGES
def test_a_value_starting_with_a_minus_is_a_value(capsys, tmp_path):
    # --points -1,-1 was "expected one argument": argparse took the value for a flag.
    code, out, err = cli(capsys, "predict", "--run", str(tmp_path / "nothing"), "--points", "-1,-1")
    assert code == 2 and "expected one argument" not in err
    assert "--run" in err and len(err.splitlines()) == 1


@MESSAGES
@pytest.mark.parametrize(("flag", "value"), [("--lr", "-1e-3"), ("--lr", "-.5"), ("--epochs", "-2")])
def test_a_negative_number_is_named_as_the_value(capsys, flag, value):
    code, out, err = cli(capsys, "train", flag, value)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert f"argument {flag}" in err and value in err
