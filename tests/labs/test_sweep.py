"""``attnlab compare --jobs N``: the same records as one process, workers that stop with the driver.

Real worker processes throughout (``spawn``ed by :mod:`concurrent.futures`), and a real
``attnlab compare`` process interrupted with a real SIGINT to its process group, as a
terminal's Ctrl-C sends it.
"""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnlab.labs import sweep
from attnlab.labs.lengths.compare import run_compare
from attnlab.labs.lengths.config import CompareConfig

TINY = dict(encodings=("rotary", "alibi"), n_seeds=2, epochs=1, n_train=64, n_test=16, d_model=16, n_heads=2,
            n_layers=1, train_len=4, test_lens=(4, 6))
# Long enough per model (a few seconds) that a test can act while the sweep is under way.
SLOW_FLAGS = ["--encodings", "rotary,alibi,none", "--seeds", "1", "--epochs", "4", "--n-train", "256",
              "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--train-len", "4", "--test-lens", "4,6",
              "--no-progress"]


class CountingBar:
    """Stands in for the tqdm bar: adds up what it is told."""

    def __init__(self):
        self.n = 0

    def update(self, steps):
        self.n += steps

    def set_postfix_str(self, text, refresh=True):
        pass


def test_two_workers_give_the_records_and_weights_of_one_process_and_report_every_step():
    config = CompareConfig(**TINY)
    here = {(r.encoding, r.seed): r for r in sweep.in_process(config, config.runs(), CountingBar())}
    bar = CountingBar()
    there = {(r.encoding, r.seed): r for r in sweep.local_workers(config, config.runs(), bar, jobs=2)}
    assert sorted(there) == sorted(here) == sorted(config.runs())
    for key, result in here.items():
        assert there[key].records == result.records, key
        assert there[key].state_dict.keys() == result.state_dict.keys()
        assert all(torch.equal(there[key].state_dict[k], v) for k, v in result.state_dict.items()), key
    assert bar.n == config.steps_per_model() * len(config.runs())


def test_a_killed_worker_ends_the_sweep_in_one_line_and_no_worker_is_left():
    # Models of a few seconds each, so the others are still under way when one worker is killed.
    config = CompareConfig(**{**TINY, "epochs": 4, "n_train": 256})
    before = set(multiprocessing.active_children())
    runs = sweep.local_workers(config, config.runs(), CountingBar(), jobs=2)
    next(runs)  # one model back; the others are under way
    workers = [p for p in multiprocessing.active_children() if p not in before]
    assert len(workers) == 2
    os.kill(workers[0].pid, signal.SIGKILL)
    with pytest.raises(ChildProcessError, match=r"a worker process died while training .*run again with --resume"):
        list(runs)
    # The sweep stopped early: the surviving worker must not outlive it.
    assert [p for p in multiprocessing.active_children() if p not in before and p.is_alive()] == []


def _start_slow_compare(folder, *flags):
    """An ``attnlab compare --jobs 2`` in its own process group; returns it once a first model is saved."""
    # SIGINT back to its default in the child: a shell without job control starts background commands
    # (the suite under `nohup ... &`) with SIGINT ignored, and Python then never turns it into Ctrl-C.
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "compare", *SLOW_FLAGS, "--jobs", "2",
                             "--out", str(folder), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not list(Path(folder).glob("models/*/record.json")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no model finished in 2 minutes"
        time.sleep(0.1)
    return proc


def _workers(pid):
    """The pids of ``pid``'s worker processes (children started by ``spawn_main``), from /proc."""
    workers = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == pid and b"spawn_main" in command:
                workers.append(int(entry.name))
    return workers


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the worker processes from /proc (Linux)")
def test_ctrl_c_stops_the_workers_keeps_the_finished_models_and_resume_completes_them(tmp_path):
    folder = tmp_path / "sweep"
    # 16 epochs: the third model (started when the first is saved) must still be training when the signal
    # arrives, also when the suite's other processes slow this test's polling down.
    proc = _start_slow_compare(folder, "--epochs", "16")
    workers = _workers(proc.pid)
    assert len(workers) == 2
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "attnlab compare: interrupted" in err, err
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "a worker outlived the interrupted sweep"
    kept = sorted(p.parent.name for p in folder.glob("models/*/record.json"))
    assert 1 <= len(kept) < 3 and not (folder / "results.json").exists()

    # Resumed here, in this process: the records are those of an unbroken sweep, wherever each model trained.
    config = CompareConfig.from_dict(json.loads((folder / "config.json").read_text()))
    resumed = run_compare(config, folder, resume=True, progress=False)
    assert resumed.records == run_compare(config, progress=False).records
