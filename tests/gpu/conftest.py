"""The GPU tests (marker ``cuda``): skipped, each with the reason, where torch finds no CUDA GPU.

``make test-gpu`` runs them (``pytest -m cuda``); ``make test`` collects them with the rest and,
on a machine without a GPU, skips them before any of their set-up runs. Every test here that is
marked ``cuda`` computes on ``cuda``; the unmarked ones run the same checks on the CPU (with the
CPU's path where the GPU's has no CPU counterpart), so the checking code runs on every machine.
"""

import pytest
import torch


def _no_cuda_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    why = "this torch build has no CUDA" if torch.version.cuda is None else "torch finds no CUDA GPU"
    return f"needs a CUDA GPU ({why}); run `make test-gpu` on a machine with one"


def pytest_collection_modifyitems(config, items):
    # A skipif mark (not a skip in a set-up hook): -rs then names each test's own line with the reason,
    # and no fixture of a skipped test (a torchrun launch, a CLI run) is ever set up.
    reason = _no_cuda_reason()
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(pytest.mark.skipif(True, reason=reason))
