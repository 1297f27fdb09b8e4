"""``attnlab compare --ray``: a real Ray instance on this machine, a real worker killed mid-task.

One private Ray instance (``ray.init(num_cpus=2)``, as ``--ray local`` starts) serves the
module and is shut down after it.
"""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from attnlab.labs import sweep
from attnlab.labs.lengths.compare import run_compare
from attnlab.labs.lengths.config import CompareConfig

ray = pytest.importorskip("ray", reason="Ray is a test dependency (pip install 'attnlab[ray]')")

TINY = dict(encodings=("rotary", "alibi"), n_seeds=2, epochs=1, n_train=64, n_test=16, d_model=16, n_heads=2,
            n_layers=1, train_len=4, test_lens=(4, 6))


@pytest.fixture(scope="module")
def local_ray():
    sweep.connect_ray("local")
    yield ray
    ray.shutdown()


def test_a_ray_sweep_writes_the_records_of_one_process(local_ray, tmp_path):
    config = CompareConfig(**TINY)
    on_ray = run_compare(config, tmp_path / "ray", progress=False, ray_address="local")
    here = run_compare(config, progress=False)
    assert on_ray.records == here.records and len(here.records) == 8
    assert sorted(p.parent.name for p in (tmp_path / "ray").glob("models/*/record.json")) == \
        ["alibi-seed0", "alibi-seed1", "rotary-seed0", "rotary-seed1"]


def _ray_task_pids():
    """Pids of Ray workers running a training task (Ray titles them ``ray::_ray_task``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::_ray_task"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds Ray's worker processes in /proc (Linux)")
def test_a_killed_worker_is_retried_and_the_sweep_completes_with_the_same_records(local_ray):
    config = CompareConfig(**{**TINY, "encodings": ("rotary",), "epochs": 6, "n_train": 256})
    killed = []

    def kill_one_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            pids = _ray_task_pids()
            if pids:
                time.sleep(0.5)  # well into its training
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one_worker)
    killer.start()
    on_ray = run_compare(config, progress=False, ray_address="local")
    killer.join()
    assert killed, "no Ray worker was seen running a task"
    assert on_ray.records == run_compare(config, progress=False).records
