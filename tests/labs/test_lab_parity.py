"""`attnlab train`'s defaults train as the labs do: epoch losses side by side with the labs' own code.

The labs' procedure and the run compared with it are in ``tests/lab_procedure.py``: the labs'
classes (``lab_code.py``, verbatim) trained by the book's loop written out, and what a default
``attnlab train`` run writes to ``metrics.jsonl`` (``train_run(SquaresConfig(...))``).

Rounding: attnlab computes the same functions, but not in the same order (one fused projection for
all heads, a positional table computed in float64), so the losses differ in their last bits. The
self-attention model is chaotic from about epoch 16, so this test runs the length that proves the
procedure is the labs' (a seed, a loader or a step out of place shows from the first epoch): the
first 15 epochs, within 1e-6, for both models and for the README's Trainer example. The labs' full
100 epochs (the GRU within 1e-6 for 75 epochs, 4e-4 by 100; the self-attention model within the
spread of two float32 Adams) are ``benchmarks/lab_parity.py --check``'s: seconds per model, too long
for the suite.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.labs.squares.train import SquaresConfig

from lab_procedure import attnlab_train, labs_procedure, max_diffs

pytestmark = pytest.mark.usefixtures("one_thread")

EPOCHS = 15  # the README's claim for the chaotic self-attention model: 1e-6 for the first 15 epochs


@pytest.fixture
def keep_global_rng():
    """The labs' procedure seeds the global generators: put them back for the next test."""
    with torch.random.fork_rng(devices=[]):
        state = random.getstate(), np.random.get_state()  # noqa: NPY002
        yield
        random.setstate(state[0])
        np.random.set_state(state[1])  # noqa: NPY002


@pytest.mark.training
@pytest.mark.parametrize("model_name", ["selfattn-pe", "gru-attn"])
def test_default_train_gives_the_labs_epoch_losses(tmp_path, keep_global_rng, model_name):
    lab_losses, lab_val = labs_procedure(model_name, epochs=EPOCHS)
    losses, val_losses = attnlab_train(model_name, epochs=EPOCHS, folder=tmp_path / "run")
    for ours, theirs, what in ((losses, lab_losses, "training"), (val_losses, lab_val, "validation")):
        diffs = max_diffs(ours, theirs)
        assert diffs.max() <= 1e-6, f"{what} losses, epochs 1-{EPOCHS}: {diffs}"


def test_the_labs_own_seeds_are_the_defaults():
    assert SquaresConfig().seed == 43 and SquaresConfig(model="gru-attn").seed == 23
    assert SquaresConfig().train_seed == 42  # the book's StepByStep.train(n_epochs, seed=42)
    assert SquaresConfig().test_draws_global and SquaresConfig().eval_batch_size == 16


# -- the same procedure from Python, as the README shows it -----------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"
README_BLOCK = "tests/labs/test_lab_parity.py runs this block"  # tests/test_readme.py leaves it to this test


def readme_trainer_example() -> str:
    """The README's Trainer example (its one ``python`` block that names this test), as written."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S) if README_BLOCK in b]
    assert len(blocks) == 1, "the README's Trainer example is gone"
    return blocks[0]


@pytest.mark.training
def test_the_readmes_trainer_example_trains_as_the_lab(keep_global_rng):
    block = readme_trainer_example()
    code = block.replace("EPOCHS = 100\n", f"EPOCHS = {EPOCHS}\n")
    assert code != block, "the README's example no longer sets EPOCHS = 100"
    scope: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "README.md (the Trainer example)", "exec"), scope)
    assert re.fullmatch(r"test MSE \d\.\d{3}\n", out.getvalue())
    lab_losses, lab_val = labs_procedure("gru-attn", epochs=EPOCHS)
    trainer = scope["trainer"]
    for ours, theirs, what in ((trainer.losses, lab_losses, "training"), (trainer.val_losses, lab_val, "validation")):
        diffs = max_diffs(ours, theirs)
        assert diffs.max() <= 1e-6, f"{what} losses, epochs 1-{EPOCHS}: {diffs}"
