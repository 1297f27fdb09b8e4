"""``attnlab compare --jobs N``: the same records as one process, workers that stop with the driver.

Real worker processes throughout (``spawn``ed by :mod:`concurrent.futures`), and a real
``attnlab compare`` process interrupted with a real SIGINT to its process group, as a
terminal's Ctrl-C sends it. The tests act while workers train, which they know from a
condition, never from a pause: the gated scheme of ``tests/sweep_gate.py`` announces each
worker's first step and holds it there until the test is done (whatever the machine's load).
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
import sweep_gate
import torch

from attnlab.labs.lengths import sweep
from attnlab.labs.lengths.compare import groups, run_compare
from attnlab.labs.lengths.config import CompareConfig

pytestmark = pytest.mark.process  # every test here starts a sweep's worker processes

TINY = dict(encodings=("rotary", "alibi"), n_seeds=2, epochs=1, n_train=64, n_test=16, d_model=16, n_heads=2,
            n_layers=1, train_len=4, test_lens=(4, 6))
# alibi's two models, then the gated scheme's two (held mid-training while the gate is closed).
HELD_FLAGS = ["--encodings", f"alibi,{sweep_gate.NAME}", "--seeds", "2", "--epochs", "1", "--n-train", "64",
              "--n-test", "16", "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--train-len", "4",
              "--test-lens", "4,6", "--no-progress"]


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
    here = {(r.encoding, r.seed): r for r in sweep.in_process(config, groups(config, config.runs()), CountingBar())}
    bar = CountingBar()
    there = {(r.encoding, r.seed): r for r in sweep.local_workers(config, groups(config, config.runs()), bar, jobs=2)}
    assert sorted(there) == sorted(here) == sorted(config.runs())
    for key, result in here.items():
        assert there[key].records == result.records, key
        assert there[key].state_dict.keys() == result.state_dict.keys()
        assert all(torch.equal(there[key].state_dict[k], v) for k, v in result.state_dict.items()), key
    assert bar.n == config.steps_per_model() * len(config.runs())


@pytest.mark.bad_input("machine independence")
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the worker processes from /proc (Linux)")
def test_a_killed_worker_ends_the_sweep_in_one_line_and_no_worker_is_left(tmp_path, monkeypatch):
    # alibi's two models come back; then both workers are held mid-training by the gate: one is killed
    # while the other's run is still pending, on any machine (not only when the models were slow enough).
    monkeypatch.setenv("ATTNLAB_TEST_STARTED", str(tmp_path))
    monkeypatch.setenv("ATTNLAB_TEST_GATE", str(tmp_path / "gate"))
    config = CompareConfig(**{**TINY, "encodings": ("alibi", sweep_gate.NAME)})
    runs = sweep.local_workers(config, groups(config, config.runs()), CountingBar(), jobs=2)
    first = next(runs)
    assert first.encoding == "alibi", first
    sweep_gate.wait_until(lambda: len(sweep_gate.started(tmp_path)) == 2, "both workers held mid-training")
    # The workers are the processes that announced themselves (whatever else this process may have started).
    held = sweep_gate.started(tmp_path)
    workers = [p for p in multiprocessing.active_children() if p.pid in held]
    assert len(workers) == 2, (held, multiprocessing.active_children())
    os.kill(workers[0].pid, signal.SIGKILL)
    with pytest.raises(ChildProcessError, match=r"a worker process died while training .*run again with --resume"):
        list(runs)
    # The sweep stopped early: the surviving worker must not outlive it. Asked of the system, not of the Process
    # object: the executor's own thread reaps the workers too, and a Process whose exit another thread reaped
    # can read as alive until that thread records its exit code (seen once at load 7).
    assert not _alive(workers[1].pid)


def _start_held_compare(folder, started, gate):
    """An ``attnlab compare --jobs 2`` in its own process group; returns it once alibi's two models are saved
    and both workers are held mid-training on the gated scheme's two."""
    # SIGINT back to its default in the child: a shell without job control starts background commands
    # (the suite under `nohup ... &`) with SIGINT ignored, and Python then never turns it into Ctrl-C.
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "compare", *HELD_FLAGS, "--jobs", "2",
                             "--out", str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=sweep_gate.env(started=started, gate=gate),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    sweep_gate.wait_until(lambda: len(list(Path(folder).glob("models/*/record.json"))) == 2
                          and len(sweep_gate.started(started)) == 2, "two models saved and two held", proc=proc)
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


@pytest.mark.bad_input("machine independence")
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the worker processes from /proc (Linux)")
def test_ctrl_c_stops_the_workers_keeps_the_finished_models_and_resume_completes_them(tmp_path):
    folder, started = tmp_path / "sweep", tmp_path / "started"
    started.mkdir()
    proc = _start_held_compare(folder, started, tmp_path / "gate")
    workers = _workers(proc.pid)
    assert sorted(workers) == sorted(sweep_gate.started(started))
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    _, err = proc.communicate(timeout=300)
    # One line: the workers leave Ctrl-C to the driver, which stops them.
    assert proc.returncode == 130 and err.splitlines() == ["attnlab compare: interrupted"], err
    deadline = time.monotonic() + 300  # only bounds a hang: on a loaded machine a worker may take its time
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "a worker outlived the interrupted sweep"
    kept = sorted(p.parent.name for p in folder.glob("models/*/record.json"))
    assert kept == ["alibi-seed0", "alibi-seed1"] and not (folder / "results.json").exists()

    # Resumed here, in this process (no gate): the records are those of an unbroken sweep, wherever each
    # model trained.
    config = CompareConfig.from_dict(json.loads((folder / "config.json").read_text()))
    resumed = run_compare(config, folder, resume=True, progress=False)
    assert resumed.records == run_compare(config, progress=False).records


def test_a_worker_process_imports_only_the_settings_and_train():
    # What a spawned worker (or a Ray task) imports of the lab to train a group: the settings (with their costs and
    # the protocols they check against) and the train module; the package __init__s above them import nothing.
    code = ("import json, sys, attnlab.labs.lengths.worker; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('attnlab.labs'))))")
    env = dict(os.environ, PYTHONPATH=str(Path(sweep.__file__).parents[3]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          check=True)
    assert json.loads(done.stdout) == ["attnlab.labs", "attnlab.labs.lengths", "attnlab.labs.lengths.config",
                                       "attnlab.labs.lengths.costs", "attnlab.labs.lengths.protocols",
                                       "attnlab.labs.lengths.train", "attnlab.labs.lengths.worker",
                                       "attnlab.labs.memory_bound"]
    assert sweep.local_task.__module__ == sweep.ray_task.__module__ == "attnlab.labs.lengths.worker"
    # The lab's names are still where they are promised, imported when asked for.
    import attnlab.labs.lengths as lengths

    assert lengths.run_compare.__module__ == "attnlab.labs.lengths.compare"
    assert set(lengths.__all__) <= set(dir(lengths))
    with pytest.raises(AttributeError, match="no_such_name"):
        lengths.no_such_name  # noqa: B018
