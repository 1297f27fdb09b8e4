"""The figures touch no global matplotlib state and never go through pyplot."""

import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import attnlab.plotting
from attnlab.encodings import angle_rates, axial_rotary_angles, sinusoidal, sinusoidal_2d
from attnlab.plotting import (
    alignment_matrix,
    encoding_degrees,
    encoding_heatmap,
    exponential_dials,
    plot_angle_map,
    plot_angle_rates,
    plot_attention_weights,
    plot_axial_rotary,
    plot_binary,
    plot_columns,
    plot_distances,
    plot_encoding,
    plot_encoding_2d,
    plot_length_generalisation,
    plot_losses,
    plot_mesh,
    plot_nearby,
    plot_sequence_pred,
    plot_shifted,
    plot_similarity,
    prefix_pred,
    query_and_keys,
)

TABLE = sinusoidal(12, 10)
SQUARES = [[[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -1.0]],
           [[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]]]
CALLS = {
    "plot_length_generalisation": lambda: plot_length_generalisation(
        [{"encoding": "sinusoidal", "seed": 0, "length": 4, "token_accuracy": 1.0, "sequence_accuracy": 1.0}],
        train_len=4,
    ),
    "encoding_degrees": lambda: encoding_degrees(2, (4, 5), 3),
    "exponential_dials": lambda: exponential_dials(4, 3),
    "encoding_heatmap": lambda: encoding_heatmap(4, 5),
    "plot_mesh": lambda: plot_mesh(TABLE, showvals=True, colorbar=True),
    "plot_distances": lambda: plot_distances(TABLE, 4),
    "plot_angle_rates": lambda: plot_angle_rates(angle_rates(10)),
    "plot_angle_map": lambda: plot_angle_map(12, angle_rates(10)),
    "plot_encoding": lambda: plot_encoding(TABLE),
    "plot_encoding_2d": lambda: plot_encoding_2d(sinusoidal_2d(4, 5, 8)),
    "plot_axial_rotary": lambda: plot_axial_rotary(axial_rotary_angles(4, 5, head_dim=8)),
    "plot_similarity": lambda: plot_similarity(TABLE),
    "plot_nearby": lambda: plot_nearby(TABLE, 3),
    "plot_shifted": lambda: plot_shifted(TABLE, -2),
    "plot_columns": lambda: plot_columns(TABLE, (6, 7, 8, 9)),
    "plot_binary": lambda: plot_binary(4),
    "alignment_matrix": lambda: alignment_matrix(),
    "figure9": lambda: attnlab.plotting.figure9(),
    "query_and_keys": lambda: query_and_keys([0.55, 0.95], [[0.65, 0.2], [0.85, -0.4], [-0.95, -0.75]]),
    "plot_attention_weights": lambda: plot_attention_weights(torch.rand(1, 2, 3, 3).softmax(-1)),
    "plot_losses": lambda: plot_losses([0.5, 0.3, 0.2], [None, 0.35, 0.25]),
    "prefix_pred": lambda: prefix_pred(torch.zeros(1, 2, 2), torch.ones(1, 4, 2), [3], torch.ones(1, 2, 2)),
    "plot_sequence_pred": lambda: plot_sequence_pred(torch.tensor(SQUARES)[:, 2:].flip(1), torch.tensor(SQUARES),
                                                     n_rows=1, n_cols=2),
}


# Not figures: attention in bertviz's format (data in, data out; tests/plotting/test_bertviz.py).
NOT_FIGURES = {"to_bertviz"}


def test_every_public_function_is_covered():
    assert sorted(CALLS) == sorted(set(attnlab.plotting.__all__) - NOT_FIGURES)


def test_no_global_state_changes(tmp_path):
    rc_before = {k: np.copy(v) if isinstance(v, np.ndarray) else v
                 for k, v in matplotlib.rcParams.items()}
    figs_before = plt.get_fignums()
    for name, call in CALLS.items():
        fig = call()
        assert type(fig) is Figure, name
        fig.savefig(tmp_path / f"{name}.png")  # drawing must not change anything either
    assert plt.get_fignums() == figs_before
    assert dict(matplotlib.rcParams.items()) == rc_before


@pytest.mark.process
def test_drawing_never_imports_pyplot():
    # In a fresh interpreter: importing and drawing must not pull pyplot in (it
    # would register figures and pick a backend behind the user's back).
    code = (
        "import sys; import attnlab.plotting as p; from attnlab.encodings import sinusoidal; "
        "p.plot_mesh(sinusoidal(3, 4), showvals=True, colorbar=True).savefig(sys.argv[1]); "
        "p.exponential_dials(2, 2).savefig(sys.argv[1]); "
        "print('matplotlib.pyplot' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(Path(tempfile.mkdtemp()) / "f.png")],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
