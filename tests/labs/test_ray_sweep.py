"""``attnlab compare --ray``: a real Ray instance on this machine, a real worker killed mid-task.

One private Ray instance serves the module and is shut down after it. It is smaller than the one
``--ray local`` starts, so that its cost does not grow with the machine or its load: one CPU (the
sweep's tasks run one after another in one worker, which imports torch once), the smallest object
store Ray takes, no dashboard, and Ray's memory monitor off (it kills workers when the machine's
memory runs low, which would make an outcome depend on what else the machine runs).
``sweep.connect_ray("local")`` then finds it running and uses it. Its workers can import the gated
scheme of ``tests/sweep_gate.py``: the killed worker is killed while it is held mid-training, a
condition the test waits on, never a pause.
"""

import logging
import os
import signal
import threading

import pytest
import sweep_gate

from attnlab.labs.lengths import sweep
from attnlab.labs.lengths.compare import run_compare
from attnlab.labs.lengths.config import CompareConfig

ray = pytest.importorskip("ray", reason="Ray is a test dependency (pip install 'attnlab[ray]')")

OBJECT_STORE = 80 * 2**20  # bytes: Ray's smallest (75 MiB) and a little; the sweep passes configs and records
TINY = dict(encodings=("rotary", "alibi"), n_seeds=2, epochs=1, n_train=64, n_test=16, d_model=16, n_heads=2,
            n_layers=1, train_len=4, test_lens=(4, 6))


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """The Ray instance, and the folder where its workers announce a held training step (``started/PID``) and
    wait for a ``gate`` file (``tests/sweep_gate.py``): the instance's processes take this environment."""
    where = tmp_path_factory.mktemp("ray")
    (where / "started").mkdir()
    environ = sweep_gate.env(started=where / "started", gate=where / "gate")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("PYTHONPATH", "ATTNLAB_TEST_STARTED", "ATTNLAB_TEST_GATE"):
            patch.setenv(name, environ[name])
        patch.setenv("RAY_memory_monitor_refresh_ms", "0")  # no worker killed for the machine's free memory
        ray.init(num_cpus=1, object_store_memory=OBJECT_STORE, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)
        assert sweep.connect_ray("local") is ray and ray.is_initialized()
    yield where
    ray.shutdown()


def test_a_ray_sweep_writes_the_records_of_one_process(local_ray, tmp_path):
    config = CompareConfig(**TINY)
    on_ray = run_compare(config, tmp_path / "ray", progress=False, ray_address="local")
    here = run_compare(config, progress=False)
    assert on_ray.records == here.records and len(here.records) == 8
    assert sorted(p.parent.name for p in (tmp_path / "ray").glob("models/*/record.json")) == \
        ["alibi-seed0", "alibi-seed1", "rotary-seed0", "rotary-seed1"]


@pytest.mark.bad_input("machine independence")
def test_a_killed_worker_is_retried_and_the_sweep_completes_with_the_same_records(local_ray):
    # The worker is killed while it is held mid-training (not after a pause that a loaded machine may
    # outlast, or a fast one may let the task finish in); the gate then opens for the retry.
    config = CompareConfig(**{**TINY, "encodings": (sweep_gate.NAME,), "n_seeds": 1})
    killed = []

    def kill_the_held_worker():
        try:
            sweep_gate.wait_until(lambda: sweep_gate.started(local_ray / "started"), "a Ray worker training")
            (pid,) = sweep_gate.started(local_ray / "started")
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        finally:
            (local_ray / "gate").write_text("")  # whatever happened, the sweep is not held for ever

    killer = threading.Thread(target=kill_the_held_worker, daemon=True)
    killer.start()
    on_ray = run_compare(config, progress=False, ray_address="local")
    killer.join()
    assert killed, "no Ray worker was seen training"
    assert len(sweep_gate.started(local_ray / "started")) == 2  # the killed worker, and the retry's
    assert on_ray.records == run_compare(config, progress=False).records
