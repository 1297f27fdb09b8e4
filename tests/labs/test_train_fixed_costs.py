"""What ``attnlab train`` does besides training (issue 28): its figures in one pass, its imports lazy.

* The run's figures come from :func:`write_run_figures`, one pass over the model for the
  figures and the report's viewer; its PNGs are byte for byte those of the per-figure path
  (:func:`write_figures`, which ``attnlab plot`` and the library keep), and its viewer data
  that of :func:`attention_viewer_data`, for every kind of squares model.
* Importing the squares lab imports neither the length lab nor matplotlib: the figures
  import what they draw with when they are drawn.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.labs.squares import train as squares_train
from attnlab.labs.squares.figures import attention_viewer_data, write_figures, write_run_figures
from attnlab.labs.squares.train import SquaresConfig, build_model

#: attention layers per model: the encoder's self-attention, the decoder's and the cross-attention; the attention
#: lab's GRU model attends once, from its decoder; the plain GRU not at all
ATTENTION_LAYERS = {"selfattn-pe": 3, "transformer": 3, "gru-attn": 1, "gru": 0}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(("model", "variable_len"), [("selfattn-pe", False), ("gru-attn", False), ("gru", False),
                                                     ("transformer", True)])
def test_the_one_pass_figures_are_the_per_figure_paths_bytes(tmp_path, model, variable_len):
    config = SquaresConfig(model=model, variable_len=variable_len, device="cpu", epochs=1)
    net = build_model(config)  # untrained weights draw the same kinds of figure
    squares = squares_train.test_squares(config)
    losses, val_losses = [0.5, 0.25, 0.125], [0.6, None, 0.2]
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = write_figures(net, losses, val_losses, squares, tmp_path / "old")
    new = write_run_figures(net, losses, val_losses, squares, tmp_path / "new")
    assert [p.name for p in new.paths] == [p.name for p in old]
    assert {p.name for p in old} >= {"losses.png", "predictions.png"}
    assert len(old) == 2 + ATTENTION_LAYERS[model]
    for before, after in zip(old, new.paths, strict=True):
        assert after.read_bytes() == before.read_bytes(), after.name
    viewer = attention_viewer_data(net, squares)
    assert new.viewer.sequences == viewer.sequences
    assert [(x.key, x.name, x.title, x.queries, x.keys) for x in new.viewer.layers] == \
        [(x.key, x.name, x.title, x.queries, x.keys) for x in viewer.layers]
    for x, y in zip(new.viewer.layers, viewer.layers, strict=True):
        assert torch.equal(x.weights, y.weights), x.name


@pytest.mark.process
def test_importing_the_squares_lab_leaves_the_length_lab_and_matplotlib_alone():
    code = ("import json, sys, attnlab.labs.squares.train, attnlab.labs; "
            "print(json.dumps(sorted(sys.modules)))")
    env = dict(os.environ, PYTHONPATH=str(Path(attnlab.__file__).parents[1]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          check=True)
    loaded = json.loads(done.stdout)
    assert not [m for m in loaded if m.startswith(("attnlab.labs.lengths", "matplotlib", "attnlab.plotting"))]
    # ...and the names attnlab.labs lists are still there, imported when asked for
    import attnlab.labs as labs

    assert labs.CompareConfig.__module__ == "attnlab.labs.lengths.config"
    assert labs.train_run.__module__ == "attnlab.labs.squares.train"
    assert set(labs.__all__) <= set(dir(labs))
    with pytest.raises(AttributeError, match="no_such_name"):
        labs.no_such_name  # noqa: B018


@pytest.mark.process
@pytest.mark.parametrize("sigint", ["handled", "ignored"])  # ignored: a job a script started in the background
def test_the_program_collects_garbage_again_once_torch_is_in(sigint):
    # The program turns the collector off while torch is imported (attnlab.cli.program_start); a verb runs
    # with it on again, and torch's import frozen out of its walks.
    code = ("import gc, sys, attnlab.cli, attnlab.cli.encode as encode; run = encode.run\n"
            "def spy(args):\n"
            "    frozen = gc.get_freeze_count() > 100000\n"
            "    print('collecting', gc.isenabled(), 'frozen', frozen, 'torch' in sys.modules)\n"
            "    return run(args)\n"
            "encode.run = spy\n"
            "sys.argv = ['attnlab', 'encode', '--d-model', '4', '--max-len', '3']\n"
            "sys.exit(attnlab.cli.main())\n")
    env = dict(os.environ, PYTHONPATH=str(Path(attnlab.__file__).parents[1]))
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          check=True, preexec_fn=ignore)
    assert done.stdout.splitlines()[0] == "collecting True frozen True True", done.stdout
