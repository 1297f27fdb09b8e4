"""Shared test set-up: every test starts from the same torch seed, on CPU."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_torch():
    # Seeded per test so a test's random draws do not depend on which ran before it.
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module of tiny models: on a shared 2-core machine two threads
    only wait for each other (up to 10x slower). Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
