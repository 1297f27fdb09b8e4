"""Hardening of the command line and the run files: resource limits, numbers, config files, messages.

Each row is a bad input or a fault found by trying attnlab as an attacker or a
careless user would (issue 13). Every command must print exactly one line on
stderr naming the flag (or file) and the value, exit 2, print nothing on stdout,
show no traceback, and leave the files already in its folder byte for byte as
they were. ``pytest -m bad_input -q`` counts them by kind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest
import torch

from attnlab.cli import main

RESOURCES, NUMBERS, CONFIG, MESSAGES = "resource limits", "numbers", "config files", "messages and streams"
SILENT, BEFORE = "silent wrong results", "bounded before work"
BIG = "99999999999999999999"  # 1e20: past every 64-bit integer


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder holding one trained run, ``runs/ok`` (2 epochs)."""
    root = tmp_path_factory.mktemp("hardening")
    assert main(["train", "--epochs", "2", "--out", str(root / "runs" / "ok"), "--no-progress"]) == 0
    return root


def _copy_run(workspace: Path, name: str) -> Path:
    dest = workspace / "runs" / name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(workspace / "runs" / "ok", dest)
    return dest


def _edit_config(run: Path, edit) -> None:
    config = json.loads((run / "config.json").read_text())
    edit(config)
    (run / "config.json").write_text(json.dumps(config))


def _refused(argv, match, workspace, monkeypatch, capsys) -> str:
    """Run ``attnlab ARGV`` in ``workspace``; check the refusal's contract; return its one line."""
    monkeypatch.chdir(workspace)
    before = _snapshot(workspace)
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, err[-2000:]
    assert out == "", out
    assert len(lines) == 1 and lines[0].startswith("attnlab"), err[-2000:]
    assert "Traceback" not in err and len(lines[0]) < 400, lines[0]
    assert re.search(match, lines[0]), lines[0]
    assert _snapshot(workspace) == before
    return lines[0]


# -- command lines that must be refused up front -----------------------------------------

CLI = [
    # sizes whose tensors cannot fit: refused before anything is allocated
    (RESOURCES, ["encode", "--d-model", "100000", "--max-len", "100000"],
     r"--max-len 100000 x --d-model 100000.* GB.*available"),
    (RESOURCES, ["train", "--n-train", "1000000000000", "--out", "runs/t1"], r"--n-train 1000000000000: .*available"),
    (RESOURCES, ["compare", "--seeds", "1000000000", "--out", "runs/c1"], r"--seeds 1000000000: .*at most"),
    (RESOURCES, ["plot", "encoding", "--dpi", "100000", "--out", "x.png"], r"--dpi 100000: .*pixels"),
    (RESOURCES, ["plot", "exponential-dials", "--d-model", "2000", "--out", "x.png"],
     r"--d-model 2000: .*dials.*at most"),
    # found here
    (RESOURCES, ["plot", "encoding-degrees", "--max-len", "1000", "--out", "x.png"],
     r"--max-len 1000: .*dials.*at most"),
    (RESOURCES, ["plot", "exponential-dials", "--max-len", "500", "--out", "x.png"], r"--max-len 500: .*dials"),
    (RESOURCES, ["train", "--model", "transformer", "--d-model", "1000000", "--out", "runs/t2"],
     r"--d-model 1000000\b.*parameters.*available"),
    (RESOURCES, ["compare", "--d-model", "100000", "--quick", "--out", "runs/c2"],
     r"--d-model 100000\b.*parameters.*available"),
    (RESOURCES, ["compare", "--quick", "--test-lens", "8,10000000", "--out", "runs/c3"],
     r"--test-lens .*10000000.*available"),
    (RESOURCES, ["compare", "--quick", "--n-train", "100000000000", "--out", "runs/c4"],
     r"--n-train 100000000000\b.*training set.*available"),
    (RESOURCES, ["audit", "--max-len", "200000", "--max-positions", "200000"],
     r"--max-positions 200000: .*available"),
    (RESOURCES, ["plot", "similarity", "--max-len", "1000000", "--d-model", "8", "--out", "x.png"],
     r"--max-len 1000000: .*at most 2048 positions"),
    # numbers checked in the dtype they will live in, integers in the range they must fit
    (NUMBERS, ["predict", "--run", "runs/ok", "--points", "1e39,1 1,1"], r"'1e39,1' is not finite in float32"),
    (NUMBERS, ["predict", "--run", "runs/ok", "--points", "1e39,1 1,1", "--json"], r"'1e39,1' is not finite"),
    (NUMBERS, ["encode", "--round", "400"], r"--round: must be at most \d+, got 400"),
    (NUMBERS, ["train", "--seed", BIG, "--out", "runs/s1"], rf"--seed: .*got {BIG}"),
    (NUMBERS, ["compare", "--quick", "--n-train", BIG, "--out", "runs/c5"], rf"--n-train: .*got {BIG}"),
    (NUMBERS, ["encode", "--max-len", BIG], rf"--max-len: .*got {BIG}"),
    # found here
    (NUMBERS, ["train", "--train-seed", BIG, "--out", "runs/s2"], rf"--train-seed: .*got {BIG}"),
    (NUMBERS, ["encode", "--d-model", BIG], rf"--d-model: .*got {BIG}"),
    (NUMBERS, ["compare", "--quick", "--test-lens", f"8,{BIG}", "--out", "runs/c6"], rf"--test-lens: .*{BIG}"),
    (NUMBERS, ["train", "--lr", "1e39", "--out", "runs/s3"], r"--lr: must be finite in float32.*got 1e39"),
    (NUMBERS, ["predict", "--run", "runs/ok", "--points", "1e30,1 1,1", "--json"], r"not finite"),
    (NUMBERS, ["encode", "--base", "1e39"], r"--base: must be finite in float32.*got 1e39"),
    (NUMBERS, ["audit", "--max-positions", BIG], rf"--max-positions: .*got {BIG}"),
    # --symbols sizes attnlab's own tasks only: a task whose vocabulary is fixed ignored it, and config.json and
    # results.json recorded it as if it had been used
    (SILENT, ["compare", "--task", "binary-multiplication", "--symbols", "7", "--out", "runs/v1"],
     r"^attnlab compare: error: --symbols 7: the binary-multiplication task's vocabulary is fixed \(3 input and 3 "
     r"output symbols\); --symbols sizes the alphabet of copy, reverse, duplicate, sort only$"),
    (SILENT, ["compare", "--task", "bucket-sort", "--symbols", "5", "--out", "runs/v2"],
     r"--symbols 5: the bucket-sort task's vocabulary is fixed"),
    (SILENT, ["compare", "--task", "scan", "--symbols", "2", "--out", "runs/v3"],
     r"--symbols 2: the scan task's vocabulary is fixed"),
    (SILENT, ["compare", "--task", "reversed-addition", "--symbols", "10", "--out", "runs/v4"],
     r"--symbols 10: the reversed-addition task's vocabulary is fixed \(13 input and 10 output symbols\)"),
    (SILENT, ["compare", "--task", "addition", "--symbols", "3", "--min-train-len", "3", "--out", "runs/v5"],
     r"--symbols 3: the addition task's vocabulary is fixed"),
    (SILENT, ["compare", "--task", "squares", "--symbols", "4", "--out", "runs/v6"],
     r"--symbols 4: the squares task has no vocabulary to size"),
    (SILENT, ["compare", "--preset", "ruoss2023", "--quick", "--symbols", "2", "--out", "runs/v7"],
     r"--symbols 2: the [a-z-]+ task's vocabulary is fixed"),
    (SILENT, ["compare", "--preset", "kazemnejad2023", "--task", "copy-random", "--symbols", "7", "--out", "runs/v8"],
     r"--symbols 7: the copy-random task's vocabulary is fixed \(102 input and 100 output symbols\)"),
    # lengths the task's data refuses: refused when its sets were built, after the run folder was written
    (BEFORE, ["compare", "--task", "scan", "--test-lens", "23", "--out", "runs/l1"],
     r"--test-lens \[23\]: SCAN has no command of that many actions; its commands have 1 to 22, 24 to 28, 30, 32, 33, "
     r"36, 40, 48 actions$"),
    (BEFORE, ["compare", "--task", "scan", "--train-len", "22", "--test-lens", "24,29,31", "--out", "runs/l2"],
     r"--test-lens \[29, 31\]: SCAN has no command"),
    (BEFORE, ["compare", "--task", "scan", "--quick", "--test-lens", "25,49", "--out", "runs/l3"],
     r"--test-lens \[49\]: SCAN has no command"),
    (BEFORE, ["compare", "--task", "addition", "--quick", "--min-train-len", "1", "--out", "runs/l4"],
     r"--min-train-len must be at least 3 for the addition task \(the shortest length it is defined at\), got 1$"),
    (BEFORE, ["compare", "--task", "copy-repeat-change", "--quick", "--min-train-len", "3", "--test-lens", "2,8",
              "--out", "runs/l5"], r"--test-lens must be at least 3 for the copy-repeat-change task .*got \[2\]$"),
    (BEFORE, ["compare", "--preset", "kazemnejad2023", "--task", "addition", "--quick", "--out", "runs/l6"],
     r"--min-train-len must be at least 3 for the addition task .*got 2$"),
    (BEFORE, ["compare", "--task", "addition", "--protocol", "ruoss2023", "--train-len", "2", "--min-train-len", "2",
              "--test-lens", "4", "--out", "runs/l7"],
     r"--train-len must be at least 3 for the addition task .*got 2$"),
    (BEFORE, ["compare", "--quick", "--n-test", "1000000000", "--out", "runs/l8"],
     r"--n-test 1000000000: the test sets \(4 lengths up to 24\).* would need .*available"),
    # an encoding that takes its positions from the task: refused at the first forward pass, the folder written
    (BEFORE, ["train", "--model", "transformer", "--encoding", "abacus", "--out", "runs/l9"],
     r"--encoding 'abacus' takes its positions from the task \('abacus'.*the squares have none"),
    (BEFORE, ["train", "--model", "transformer", "--encoding", "coupling", "--epochs", "1", "--out", "runs/l10"],
     r"--encoding 'coupling' takes its positions from the task"),
]


@pytest.mark.parametrize(("argv", "match"), [
    pytest.param(argv, match, marks=pytest.mark.bad_input(kind), id=" ".join(argv)[:70]) for kind, argv, match in CLI])
def test_refused_up_front(argv, match, workspace, monkeypatch, capsys):
    _refused(argv, match, workspace, monkeypatch, capsys)


# -- config files hold every setting a run needs ---------------------------------------

def _drop(key):
    return lambda config: config.pop(key)


CONFIG_CASES = [
    ("lr deleted, predict", _drop("lr"), ["predict", "--points", "1,1 1,-1"], r"config.json.*lacks 'lr'"),
    ("model deleted, resume", _drop("model"), ["train", "--resume", "--epochs", "3", "--no-progress"],
     r"config.json.*lacks 'model'"),
    # found here
    ("seed deleted, plot", _drop("seed"), ["plot", "losses", "--out", "losses.png"], r"config.json.*lacks 'seed'"),
    ("n_test deleted, resume", _drop("n_test"), ["train", "--resume", "--epochs", "3", "--no-progress"],
     r"config.json.*lacks 'n_test'"),
    ("a size set to null", lambda c: c.update(d_model=None), ["predict", "--points", "1,1 1,-1"],
     r"config.json.*'d_model'.*null"),
    ("every key deleted", lambda c: c.clear(), ["predict", "--points", "1,1 1,-1"], r"config.json.*lacks 'model'"),
]


@pytest.mark.bad_input(CONFIG)
@pytest.mark.parametrize(("edit", "argv", "match"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES])
def test_config_must_hold_every_key(edit, argv, match, workspace, monkeypatch, capsys):
    run = _copy_run(workspace, "edited")
    _edit_config(run, edit)
    flag = "--out" if argv[0] == "train" else "--run"
    _refused([*argv, flag, "runs/edited"], match, workspace, monkeypatch, capsys)


@pytest.mark.bad_input(CONFIG)
def test_compare_config_must_hold_every_key(workspace, monkeypatch, capsys):
    folder = workspace / "runs" / "cmp-config"
    folder.mkdir(exist_ok=True)
    (folder / "attnlab-run.json").write_text(json.dumps({"kind": "compare"}))
    from attnlab.labs.lengths.config import QUICK, CompareConfig

    config = CompareConfig(**{**QUICK, "encodings": ("sinusoidal",)}).to_dict()
    del config["lr"]
    (folder / "config.json").write_text(json.dumps(config))
    _refused(["compare", "--resume", "--out", "runs/cmp-config", "--no-progress"], r"config.json.*lacks 'lr'",
             workspace, monkeypatch, capsys)


# -- messages and streams --------------------------------------------------------------

@pytest.mark.training
@pytest.mark.bad_input(MESSAGES)
def test_nothing_on_stdout_before_a_resume_is_known_to_run(workspace, monkeypatch, capsys):
    _copy_run(workspace, "done")  # 2 epochs trained: --epochs 1 cannot be resumed
    _refused(["train", "--resume", "--out", "runs/done", "--epochs", "1", "--no-progress"],
             r"--epochs 1: .* already has 2 epochs", workspace, monkeypatch, capsys)


@pytest.mark.bad_input(MESSAGES)
def test_nothing_on_stdout_before_a_bad_seed_is_refused(workspace, monkeypatch, capsys):
    _refused(["train", "--seed", str(2**64), "--out", "runs/s4", "--no-progress"], r"--seed", workspace,
             monkeypatch, capsys)


@pytest.mark.bad_input(MESSAGES)
@pytest.mark.parametrize("verb", ["train", "compare"])
def test_dangling_symlink_out(verb, workspace, monkeypatch, capsys):
    link = workspace / f"dangling-{verb}"
    if not link.is_symlink():
        link.symlink_to(workspace / "nowhere" / "at-all")
    line = _refused([verb, "--out", link.name, "--epochs", "1", "--no-progress"],
                    r"symbolic link to .*nowhere/at-all.*does not exist", workspace, monkeypatch, capsys)
    assert "Errno" not in line


@pytest.mark.training
@pytest.mark.bad_input(MESSAGES)
def test_bad_utf8_metrics_names_the_file(workspace, monkeypatch, capsys):
    run = _copy_run(workspace, "bad-metrics")
    (run / "metrics.jsonl").write_bytes(b'{"epoch": 1}\n\xff\xfe{"epoch": 2}\n{"epoch": 2}\n')
    _refused(["train", "--resume", "--out", "runs/bad-metrics", "--epochs", "3", "--no-progress"],
             r"metrics.jsonl.*(UTF-8|utf-8)", workspace, monkeypatch, capsys)


@pytest.mark.bad_input(MESSAGES)
def test_bad_utf8_compare_record_names_the_file(workspace, monkeypatch, capsys):
    folder = workspace / "runs" / "cmp-utf8"
    from attnlab.labs.lengths.config import QUICK, CompareConfig

    config = CompareConfig(**{**QUICK, "encodings": ("sinusoidal",), "epochs": 1, "n_train": 64, "n_test": 8,
                              "d_model": 16, "n_layers": 1})
    folder.mkdir()
    (folder / "attnlab-run.json").write_text(json.dumps({"kind": "compare"}))
    (folder / "config.json").write_text(json.dumps(config.to_dict()))
    record = folder / "models" / "sinusoidal-seed0"
    record.mkdir(parents=True)
    (record / "record.json").write_bytes(b"\xff\xfe not utf-8")
    (record / "weights.pt").write_bytes(b"")
    _refused(["compare", "--resume", "--out", "runs/cmp-utf8", "--no-progress"],
             r"record.json.*(UTF-8|utf-8)", workspace, monkeypatch, capsys)


@pytest.mark.bad_input(MESSAGES)
def test_bad_utf8_marker_names_the_file(workspace, monkeypatch, capsys):
    run = _copy_run(workspace, "bad-marker")
    (run / "attnlab-run.json").write_bytes(b"\xff\xfe")
    _refused(["train", "--resume", "--out", "runs/bad-marker", "--epochs", "3", "--no-progress"],
             r"attnlab-run.json.*(UTF-8|utf-8)", workspace, monkeypatch, capsys)


# -- special files are refused without being opened ----------------------------------------

def _with_fifo(run: Path, name: str) -> None:
    (run / name).unlink()
    os.mkfifo(run / name)


def _in_thread(call, seconds=20.0):
    """Run ``call`` in a thread; fail (instead of hanging the suite) if it blocks."""
    result = {}

    def target():
        result["value"] = call()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"blocked for {seconds} s (reading a FIFO?)")
    return result["value"]


@pytest.mark.training
@pytest.mark.bad_input(RESOURCES)
@pytest.mark.parametrize(("name", "argv"), [
    ("metrics.jsonl", ["train", "--resume", "--epochs", "3", "--no-progress", "--out"]),
    ("config.json", ["train", "--resume", "--epochs", "3", "--no-progress", "--out"]),
    ("config.json", ["predict", "--points", "1,1 1,-1", "--run"]),
    ("attnlab-run.json", ["train", "--resume", "--epochs", "3", "--no-progress", "--out"]),
])
def test_fifo_run_files_are_refused(name, argv, workspace, monkeypatch, capsys):
    run = _copy_run(workspace, "fifo")
    _with_fifo(run, name)
    monkeypatch.chdir(workspace)
    code = _in_thread(lambda: main([*argv, "runs/fifo"]))
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    assert re.search(rf"{re.escape(name)}.*not a regular file", err), err


# -- the library: booleans are booleans, figures stay linear ---------------------------------

Q = torch.randn(1, 2, 3, 4)


@pytest.mark.bad_input(NUMBERS)
@pytest.mark.parametrize(("name", "call"), [
    ("is_causal", lambda: __import__("attnlab.attention", fromlist=["attend"]).attend(Q, Q, Q, is_causal="no")),
    ("need_weights", lambda: __import__("attnlab.attention", fromlist=["attend"]).attend(Q, Q, Q, need_weights="no")),
    ("proj_values", lambda: __import__("attnlab.attention", fromlist=["Attention"]).Attention(2, proj_values="no")),
    ("enabled", lambda: __import__("attnlab.attention", fromlist=["record_attention"])
     .record_attention(enabled="no").__enter__()),
    ("scale_input", lambda: __import__("attnlab.encodings", fromlist=["PositionalEncoding"])
     .PositionalEncoding(8, 4, scale_input="no")),
    ("scale_input", lambda: __import__("attnlab.encodings", fromlist=["LearnedPositionalEncoding"])
     .LearnedPositionalEncoding(8, 4, scale_input="no")),
])
def test_boolean_parameters_refuse_non_bools(name, call):
    with pytest.raises(TypeError, match=rf"{name} must be True or False, got 'no'"):
        call()


@pytest.mark.bad_input(RESOURCES)
def test_distances_figure_is_linear_in_its_size():
    from attnlab.encodings import sinusoidal
    from attnlab.plotting import plot_distances

    fig = plot_distances(sinusoidal(200, 8), n=200)
    texts = sum(len(ax.texts) for ax in fig.axes)
    assert texts <= 50  # a value in every cell only while the cells are big enough to read


# -- what the command line catches, and what it lets through ----------------------------

@pytest.mark.bad_input(RESOURCES)
@pytest.mark.parametrize("error", [
    MemoryError(),  # numpy's and Python's
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                 "you tried to allocate 40000000000 bytes. Error code 12 (Cannot allocate memory)"),  # torch's
], ids=["MemoryError", "torch-allocator"])
def test_running_out_of_memory_is_one_line(error, monkeypatch, capsys):
    # Memory can run out after the up-front checks (another process took it meanwhile).
    import attnlab.cli._tables as tables  # encode imports its build_table from here when it runs

    def build_table(*_args):
        raise error

    monkeypatch.setattr(tables, "build_table", build_table)
    assert main(["encode"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "not enough memory" in err, err
    assert "frame #" not in err and "Traceback" not in err


def test_an_internal_bug_keeps_its_traceback(monkeypatch):
    import attnlab.cli._tables as tables  # encode imports its build_table from here when it runs

    def build_table(*_args):
        raise RuntimeError("an attnlab bug: shapes [2, 3] and [4] cannot be added")

    monkeypatch.setattr(tables, "build_table", build_table)
    with pytest.raises(RuntimeError, match="an attnlab bug"):
        main(["encode"])


# -- a backend the device cannot train on: refused before the folder is claimed -----------------------------

@pytest.mark.bad_input("bounded before work")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal: CUDA has FlexAttention's backward")
@pytest.mark.parametrize(("argv", "existing"), [
    (["train", "--model", "transformer", "--encoding", "alibi", "--backend", "flex", "--epochs", "1"], False),
    (["train", "--model", "transformer", "--encoding", "t5", "--backend", "flex", "--epochs", "1"], True),
    (["compare", "--quick", "--encodings", "alibi", "--backend", "flex", "--epochs", "1"], False),
    (["compare", "--quick", "--encodings", "rotary,t5", "--backend", "flex", "--epochs", "1"], True),
])
def test_flex_on_the_cpu_is_refused_before_the_folder(capsys, tmp_path, argv, existing):
    from cli_helpers import cli

    out = tmp_path / "run"
    if existing:
        out.mkdir()  # an empty folder given: a run may be made in it, and it must stay as it was
    code, stdout, err = cli(capsys, *argv, "--no-progress", "--out", str(out))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "backend='flex' cannot serve this call" in lines[0], err
    assert "no FlexAttention backward on cpu" in lines[0] and stdout == ""
    assert (list(out.iterdir()) == []) if existing else not out.exists()
