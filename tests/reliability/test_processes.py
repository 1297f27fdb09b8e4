"""Reliability: a sweep's processes die with it, by any signal; torchrun runs only the verb that trains data-parallel.

Real processes throughout: ``python -m attnlab compare --jobs 2`` in its own session,
its workers and multiprocessing's resource tracker found in ``/proc`` as the driver's
children (each known by its pid and start time, so a reused pid is not taken for it),
real signals, and a real ``torchrun``. Every wait is on a condition (a worker's pid
appearing, a file written by a worker that trains: ``tests/sweep_gate.py``); a timeout
only bounds a hang. That the sweep's processes are gone once its driver is signalled is
waited for as a condition too: how soon depends on the machine's load (a worker still
importing torch on a loaded machine answers late), so no outcome hangs on a number of seconds.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sweep_gate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.process,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds a sweep's processes in /proc (Linux)"),
]

TINY = ["--n-train", "64", "--n-test", "16", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
        "--train-len", "4", "--test-lens", "4,6", "--no-progress"]
FOREVER = "100000"  # epochs: a model that is still training whenever the test acts
GONE_WITHIN = 300.0  # seconds: only bounds a hang (a process left behind stays for good, and fails)


# -- processes, from /proc -------------------------------------------------------------------------


def _stat(pid):
    """``(state, ppid, start time)`` of ``pid``, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _children(pid):
    """``{(child pid, start time): command line}`` of ``pid``'s children."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(entry.name)
            if stat is not None and stat[1] == pid:
                try:
                    found[int(entry.name), stat[2]] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
    return found


def _alive(process):
    pid, start = process
    stat = _stat(pid)
    return stat is not None and stat[2] == start and stat[0] != "Z"  # a zombie has exited


def _workers(family):
    return {p for p, command in family.items() if b"spawn_main" in command}


def _trackers(family):
    return {p for p, command in family.items() if b"resource_tracker" in command}


def _left_after(processes, seconds=GONE_WITHIN):
    """The processes still alive ``seconds`` after now (returns as soon as none is)."""
    deadline = time.monotonic() + seconds
    while (alive := {p for p in processes if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


class Sweep:
    """``attnlab compare --jobs 2 ...`` in its own session (a signal to it reaches nothing of the test's)."""

    def __init__(self, tmp_path, *flags, gate=False):
        self.folder, self.started, self.gate = tmp_path / "sweep", tmp_path / "started", tmp_path / "gate"
        self.started.mkdir()

        def default_signals():  # a shell without job control starts background commands ignoring these
            for signum in (signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)

        # Output to files, not pipes: a worker that outlived its driver would hold a pipe open, and reading
        # the driver's output to its end would wait for that worker.
        self.out, self.err = tmp_path / "stdout", tmp_path / "stderr"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "attnlab", "compare", *TINY, *flags, "--jobs", "2", "--out", str(self.folder)],
                env=sweep_gate.env(started=self.started, gate=self.gate if gate else None), cwd=tmp_path,
                stdout=out, stderr=err, start_new_session=True, preexec_fn=default_signals)
        self.driver = (self.proc.pid, _stat(self.proc.pid)[2])
        self.seen = {self.driver}  # every process of the sweep the test has seen, to end whatever it leaves

    def processes(self):
        """``{process: command line}``: the driver and its children (the workers, the resource tracker), once
        both workers exist."""
        family = {}

        def both_workers():
            family.update(_children(self.proc.pid))
            return len(_workers(family)) == 2 and _trackers(family)

        sweep_gate.wait_until(both_workers, "two workers", proc=self.proc, output=self.err.read_text)
        self.seen.update(family)
        return {self.driver: b"driver", **family}

    def training(self, *, models=0):
        """The sweep's processes, once both workers train (and ``models`` models are saved)."""
        sweep_gate.wait_until(lambda: len(sweep_gate.started(self.started)) == 2
                              and len(self.saved()) >= models, "two workers training", proc=self.proc,
                              output=self.err.read_text)
        processes = self.processes()
        assert {pid for pid, _ in _workers(processes)} == sweep_gate.started(self.started)
        return processes

    def saved(self):
        return sorted(p.parent.name for p in self.folder.glob("models/*/record.json"))

    def signal(self, signum):
        os.kill(self.proc.pid, signum)

    def end(self):
        """``(exit status, stdout, stderr)``, once the driver has exited."""
        code = self.proc.wait(timeout=300)
        return code, self.out.read_text(), self.err.read_text()

    def kill_all(self):
        """After the test: whatever it left is ended (the processes of this sweep only, by pid and start time)."""
        if self.proc.poll() is None:
            self.seen.update(_children(self.proc.pid))
        for process in self.seen:
            if _alive(process):
                os.kill(process[0], signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def sweeps():
    started = []
    yield started.append
    for sweep in started:
        sweep.kill_all()


def _start(sweeps, tmp_path, *flags, gate=False):
    sweep = Sweep(tmp_path, *flags, gate=gate)
    sweeps(sweep)
    return sweep


GATED = ["--encodings", f"alibi,{sweep_gate.NAME}", "--seeds", "2", "--epochs", "2"]  # alibi's 2 finish, then held
TRAINING = ["--encodings", sweep_gate.NAME, "--seeds", "2", "--epochs", FOREVER]  # two models training for good
STARTING = ["--encodings", "rotary,alibi", "--seeds", "1", "--epochs", FOREVER]  # built-in schemes only


# -- a signal to the driver ------------------------------------------------------------------------


@pytest.mark.bad_input("processes")
def test_sigterm_to_the_driver_ends_every_process_in_one_line_and_keeps_the_finished_models(sweeps, tmp_path):
    sweep = _start(sweeps, tmp_path, *GATED, gate=True)
    processes = sweep.training(models=2)  # alibi's two models saved; the gated two held mid-training
    sweep.signal(signal.SIGTERM)
    assert _left_after(processes) == set()
    code, out, err = sweep.end()
    assert code == 128 + signal.SIGTERM and err.splitlines() == ["attnlab compare: terminated by SIGTERM"], err
    assert sweep.saved() == ["alibi-seed0", "alibi-seed1"] and not (sweep.folder / "results.json").exists()


@pytest.mark.bad_input("processes")
def test_sigkill_to_the_driver_while_its_workers_train_leaves_no_process(sweeps, tmp_path):
    sweep = _start(sweeps, tmp_path, *TRAINING)
    processes = sweep.training()
    sweep.signal(signal.SIGKILL)
    assert _left_after(processes) == set()
    assert sweep.end()[0] == -signal.SIGKILL


@pytest.mark.bad_input("processes")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_driver_signalled_while_its_workers_start_leaves_no_process(sweeps, tmp_path, signum):
    # The workers exist but may still be starting (importing torch): they must not stay behind either.
    sweep = _start(sweeps, tmp_path, *STARTING)
    processes = sweep.processes()
    sweep.signal(signum)
    assert _left_after(processes) == set()
    code, _, err = sweep.end()
    assert code == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signal.SIGTERM), err


@pytest.mark.bad_input("processes")
def test_sighup_to_the_driver_a_closed_terminal_ends_every_process_in_one_line(sweeps, tmp_path):
    sweep = _start(sweeps, tmp_path, *TRAINING)
    processes = sweep.training()
    sweep.signal(signal.SIGHUP)
    assert _left_after(processes) == set()
    code, _, err = sweep.end()
    assert code == 128 + signal.SIGHUP and err.splitlines() == ["attnlab compare: terminated by SIGHUP"], err


@pytest.mark.bad_input("processes")
def test_sigint_to_the_driver_alone_ends_every_process_in_one_line(sweeps, tmp_path):
    # kill -INT PID reaches the driver only, not its workers as Ctrl-C in a terminal would.
    sweep = _start(sweeps, tmp_path, *TRAINING)
    processes = sweep.training()
    sweep.signal(signal.SIGINT)
    assert _left_after(processes) == set()
    code, _, err = sweep.end()
    assert code == 130 and err.splitlines() == ["attnlab compare: interrupted"], err


@pytest.mark.bad_input("processes")
def test_sigterm_to_the_whole_process_group_ends_every_process_in_one_line(sweeps, tmp_path):
    # What a job scheduler or `kill -TERM -PGID` does: the workers get it too, at the same moment.
    sweep = _start(sweeps, tmp_path, *TRAINING)
    processes = sweep.training()
    os.killpg(sweep.proc.pid, signal.SIGTERM)
    assert _left_after(processes) == set()
    code, _, err = sweep.end()
    assert code in (2, 128 + signal.SIGTERM) and len(err.splitlines()) == 1, err
    assert "Traceback" not in err


@pytest.mark.bad_input("processes")
def test_a_worker_killed_while_the_other_trains_ends_the_sweep_in_one_line_and_every_process(sweeps, tmp_path):
    sweep = _start(sweeps, tmp_path, *TRAINING)
    processes = sweep.training()
    victim = min(_workers(processes))
    os.kill(victim[0], signal.SIGKILL)
    assert _left_after(processes) == set()
    code, _, err = sweep.end()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"a worker process died while training {sweep_gate.NAME}, seed " in err and "--resume" in err


# -- torchrun ------------------------------------------------------------------------------------


TORCHRUN_VERBS = {
    "compare": ["--encodings", "none", "--seeds", "1", "--epochs", "1", *TINY, "--jobs", "1", "--out", "out"],
    "predict": ["--run", "missing-run", "--points", "-1,-1 -1,1"],
    "encode": ["--d-model", "8", "--max-len", "10", "--out", "table.csv"],
    "plot": ["exponential-dials", "--out", "dials.png"],
}


@pytest.mark.bad_input("processes")
@pytest.mark.parametrize("verb", list(TORCHRUN_VERBS))
def test_torchrun_refuses_a_verb_that_does_not_train_data_parallel_once_and_writes_nothing(tmp_path, verb):
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    # --standalone: torchrun finds a free port itself (a port chosen here could be taken before it binds it)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "--log-dir", str(tmp_path / "logs"), "--redirects", "3",
                           "-m", "attnlab", "--", verb, *TORCHRUN_VERBS[verb]],  # --: torchrun would take --run
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    logs = {rank: {name: next((tmp_path / "logs").rglob(f"attempt_0/{rank}/{name}.log")).read_text()
                   for name in ("stdout", "stderr")} for rank in (0, 1)}
    assert proc.returncode != 0  # torchrun reports the launch as failed ...
    assert "rank      : 0" in proc.stderr  # ... by rank 0, whose exit is the failure
    # Rank 1 exits 0 at once; only on a loaded machine may torchrun's SIGTERM (sent once rank 0 has
    # failed) reach it first, and then torchrun lists it as killed by that signal, never as failing itself.
    other = re.search(r"rank      : 1 .*\n\s*exitcode  : (-?\d+)", proc.stderr)
    assert other is None or other.group(1) == f"-{signal.SIGTERM.value}", proc.stderr
    lines = logs[0]["stderr"].splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attnlab {verb}: error: started as 2 processes"), logs
    assert "without torchrun" in lines[0]
    assert logs[0]["stdout"] == logs[1]["stdout"] == logs[1]["stderr"] == "", logs
    assert list(work.iterdir()) == []  # nothing written, no half-started folder


@pytest.mark.bad_input("processes")
@pytest.mark.parametrize(("environ", "expected"), [
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, 2),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, 0),  # quiet: rank 0 says why
    ({"WORLD_SIZE": "4", "RANK": "junk"}, 2),  # which rank this is cannot be told: it says why
    ({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0"}, None),  # torchrun --nproc_per_node 1: one process
    ({"WORLD_SIZE": "not a number"}, None),  # not torchrun's: the verb does not use it
    ({}, None),
], ids=["rank0", "rank1", "unreadable-rank", "one-process", "foreign-world-size", "no-torchrun"])
def test_which_processes_under_torchrun_refuse_a_verb_and_which_say_so(capsys, environ, expected):
    from attnlab.cli._ranks import refused_under_torchrun

    assert refused_under_torchrun("compare", environ=environ) == expected
    err = capsys.readouterr().err
    assert (err.count("\n") == 1 and "attnlab compare: error:" in err) if expected == 2 else err == ""
    assert refused_under_torchrun("train", environ=environ) is None  # data-parallel: every rank runs


# -- the mechanisms, in this process -----------------------------------------------------------------


@pytest.fixture
def default_termination():
    """SIGTERM and SIGHUP at their default (the process ends) for the test, as they were after it."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    for signum in before:
        signal.signal(signum, signal.SIG_DFL)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


@pytest.mark.bad_input("processes")
def test_sigterm_in_a_sweep_raises_once_and_a_second_one_would_end_the_process(default_termination):
    from attnlab._workers import Terminated, termination_as_interrupt

    with pytest.raises(Terminated, match="terminated by SIGTERM") as stop:
        with termination_as_interrupt():
            try:
                signal.raise_signal(signal.SIGTERM)
            finally:  # while the first one unwinds (the workers being stopped), a second is not caught
                assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert isinstance(stop.value, KeyboardInterrupt) and stop.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.bad_input("processes")
def test_a_sweep_leaves_an_ignored_or_handled_signal_as_it_is(default_termination):
    # nohup ignores SIGHUP: the sweep must go on; a program that handles SIGTERM itself keeps its handler.
    from attnlab._workers import termination_as_interrupt

    def own(signum, frame):
        pass

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, own)
    with termination_as_interrupt():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is own
        signal.raise_signal(signal.SIGHUP)  # ignored: nothing happens
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is own


@pytest.mark.bad_input("processes")
def test_workers_started_by_a_thread_that_ends_keep_training_for_the_driver(tmp_path, monkeypatch):
    # The parent-death signal fires when the *thread* that started a worker exits: workers started by a
    # thread that then ends must not be killed with it while the driver goes on with the sweep.
    import multiprocessing
    import threading

    from attnlab.labs.lengths import sweep
    from attnlab.labs.lengths.compare import groups
    from attnlab.labs.lengths.config import CompareConfig

    monkeypatch.setenv("ATTNLAB_TEST_STARTED", str(tmp_path))
    monkeypatch.setenv("ATTNLAB_TEST_GATE", str(tmp_path / "gate"))
    config = CompareConfig(encodings=("alibi", sweep_gate.NAME), n_seeds=2, epochs=1, n_train=64, n_test=16,
                           d_model=16, n_heads=2, n_layers=1, train_len=4, test_lens=(4, 6))

    class Bar:
        def update(self, steps):
            pass

        def set_postfix_str(self, text, refresh=True):
            pass

    before = set(multiprocessing.active_children())
    runs = sweep.local_workers(config, groups(config, config.runs()), Bar(), jobs=2)
    first = []
    starter = threading.Thread(target=lambda: first.append(next(runs)))  # starts the workers, then ends
    starter.start()
    starter.join()
    workers = [p for p in multiprocessing.active_children() if p not in before]
    assert len(workers) == 2

    def both_held():
        assert all(p.is_alive() for p in workers), "a worker died with the thread that started it"
        return len(sweep_gate.started(tmp_path)) == 2

    sweep_gate.wait_until(both_held, "both workers held mid-training")
    (tmp_path / "gate").write_text("")
    rest = list(runs)
    assert sorted((r.encoding, r.seed) for r in first + rest) == sorted(config.runs())


THREAD_DRIVER = """
import sys, threading
from attnlab.labs.lengths import sweep
from attnlab.labs.lengths.compare import groups
from attnlab.labs.lengths.config import CompareConfig

class Bar:
    def update(self, steps): pass
    def set_postfix_str(self, text, refresh=True): pass

config = CompareConfig(encodings=(sys.argv[1],), n_seeds=2, epochs=1, n_train=64, n_test=16, d_model=16, n_heads=2,
                       n_layers=1, train_len=4, test_lens=(4, 6))
work = groups(config, config.runs())
sweeping = threading.Thread(target=lambda: list(sweep.local_workers(config, work, Bar(), jobs=2)))
sweeping.start()
sweeping.join()
"""


@pytest.mark.bad_input("processes")
def test_the_lifeline_alone_ends_the_workers_of_a_killed_driver(tmp_path):
    # Workers started by a thread get no parent-death signal (see above): what ends them when their driver
    # is SIGKILLed is the lifeline, as on a system without prctl.
    proc = subprocess.Popen([sys.executable, "-c", THREAD_DRIVER, sweep_gate.NAME], cwd=tmp_path,
                            env=sweep_gate.env(started=tmp_path, gate=tmp_path / "gate"), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = set()
    try:
        sweep_gate.wait_until(lambda: len(sweep_gate.started(tmp_path)) == 2, "both workers held", proc=proc)
        workers = {(pid, _stat(pid)[2]) for pid in sweep_gate.started(tmp_path)}
        proc.kill()
        assert _left_after(workers) == set()
    finally:  # whatever the test left (its own processes, by pid and start time)
        for process in workers:
            if _alive(process):
                os.kill(process[0], signal.SIGKILL)
        proc.kill()
        proc.wait()
