"""A run folder says what ran it: Python's, torch's and attnlab's versions and commit, the device, the threads."""

import json
import platform
import subprocess
from pathlib import Path

import pytest
import torch

from cli_helpers import cli

ROOT = Path(__file__).resolve().parents[2]


def _commit():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return head.stdout.strip() if head.returncode == 0 else None


def _check(doc):
    assert doc["python"] == platform.python_version() and doc["torch"] == torch.__version__
    assert doc["device"] == "cpu" and doc["device_name"]
    commit = _commit()
    if commit is not None:  # run from this checkout: its commit
        assert doc["attnlab_commit"] == commit


@pytest.mark.process  # git, for the commit to compare with
@pytest.mark.training
def test_a_training_run_records_what_ran_it(capsys, tmp_path):
    code, _, err = cli(capsys, "train", "--epochs", "1", "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 0, err
    doc = json.loads((tmp_path / "run" / "environment.json").read_text())
    _check(doc)
    assert doc["threads"] == 1  # the rule's choice for the lab's model (config.json records only what was asked)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["threads"] is None
    page = (tmp_path / "run" / "report.html").read_text()
    assert "What ran it" in page and torch.__version__ in page


@pytest.mark.process
@pytest.mark.training
def test_a_comparison_records_what_ran_it(capsys, tmp_path):
    code, _, err = cli(capsys, "compare", "--encodings", "none", "--seeds", "1", "--train-len", "3", "--test-lens",
                       "3,4", "--n-train", "32", "--n-test", "4", "--epochs", "1", "--d-model", "8", "--n-heads", "2",
                       "--n-layers", "1", "--jobs", "1", "--no-progress", "--threads", "1",
                       "--out", str(tmp_path / "run"))
    assert code == 0, err
    doc = json.loads((tmp_path / "run" / "environment.json").read_text())
    _check(doc)
    assert doc["threads"] == 1
    assert "What ran it" in (tmp_path / "run" / "report.html").read_text()
