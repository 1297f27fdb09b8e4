"""Shared test set-up: every test starts from the same torch seed, on CPU."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_torch():
    # Seeded per test so a test's random draws do not depend on which ran before it.
    torch.manual_seed(0)
    yield
