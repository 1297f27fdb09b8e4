"""Fixtures for the trainer tests (the builders live in trainer_helpers.py)."""

import pytest

from trainer_helpers import make_trainer


@pytest.fixture
def trainer():
    """A Trainer on a small MLP with dropout, Adam, a shuffled train loader and a val loader."""
    return make_trainer()
