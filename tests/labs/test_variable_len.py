"""``attnlab train --variable-len``: squares of 2 to 4 corners, padded and masked, end to end through the CLI.

The run's numbers are checked against the model run directly on the test squares
(given corners padded to 4 steps, the mask, the two corners that follow), so a
run that dropped the mask anywhere (summary, predict, figures, viewer) fails.
"""

import json

import pytest
import torch

from attnlab.cli import main
from attnlab.data import SquarePrefixes
from attnlab.labs.squares import train as squares_lab
from attnlab.labs.squares.figures import attention_viewer_data
from attnlab.labs.squares.train import load_run
from tests.cli_helpers import cli

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--epochs", "2", "--n-train", "32", "--no-progress"]


@pytest.fixture(scope="module")
def variable_run(tmp_path_factory):
    """A 2-epoch ``gru-attn`` run on the variable-length squares (it has attention, so a viewer)."""
    folder = tmp_path_factory.mktemp("variable") / "run"
    assert main(["train", "--model", "gru-attn", "--variable-len", *TINY, "--out", str(folder)]) == 0
    return folder


def _model_on(folder, source, mask):
    _, model, _ = load_run(folder)
    with torch.no_grad():
        return model.predict(source, mask)  # [B, 2, 2]


def test_the_run_records_the_setting_and_its_test_mse_is_the_masked_one(variable_run):
    config = json.loads((variable_run / "config.json").read_text())
    assert config["variable_len"] is True and config["model"] == "gru-attn"
    test = SquarePrefixes(config["n_test"], seed=19, inputs="source")  # the test squares: data seed 19
    assert sorted(test.lengths.unique().tolist()) == [2, 3, 4]
    predicted = _model_on(variable_run, test.source, test.source_mask)
    summary = json.loads((variable_run / "summary.json").read_text())
    assert summary["test_mse"] == pytest.approx(float(torch.nn.functional.mse_loss(predicted, test.target)),
                                                rel=1e-6)
    # The last epoch's validation loss is the same MSE (the GRU's eval forward never teacher-forces).
    last = json.loads((variable_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["val_loss"] == pytest.approx(summary["test_mse"], rel=1e-5)
    report = (variable_run / "report.html").read_text()
    assert "2 to 4 corners each square gives" in report
    assert (variable_run / "figures" / "predictions.png").stat().st_size > 10_000


def test_predict_takes_two_to_four_corners_and_numbers_the_points_after_them(variable_run, capsys):
    given = [[-1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]]
    code, out, err = cli(capsys, "predict", "--run", str(variable_run), "--points", "-1,-1 -1,1 1,1")
    assert code == 0, err
    padded = torch.tensor([given + [[0.0, 0.0]]])  # [1, 4, 2]
    expected = _model_on(variable_run, padded, torch.tensor([[[True, True, True, False]]]))[0]
    assert out == "".join(f"point {k}: {x:.4f}, {y:.4f}\n" for k, (x, y) in zip((4, 5), expected.tolist(), strict=True))
    code, out, _ = cli(capsys, "predict", "--run", str(variable_run), "--points", "1,1 1,-1 -1,-1 -1,1", "--json")
    assert code == 0 and len(json.loads(out)["predicted"]) == 2


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize("points", ["1,1", "1,1 1,-1 -1,-1 -1,1 1,1"])
def test_predict_refuses_other_counts_of_corners(variable_run, capsys, points):
    code, out, err = cli(capsys, "predict", "--run", str(variable_run), "--points", points)
    assert code == 2 and out == "" and "expected 2 to 4 points" in err and err.count("\n") == 1


def test_the_viewer_and_figures_keep_the_padding_out(variable_run, capsys):
    config, model, _ = load_run(variable_run)
    squares = squares_lab.test_squares(config)
    data = attention_viewer_data(model, squares, n=8)
    (cross,) = data.layers
    assert list(cross.keys) == ["Point #1", "Point #2", "Point #3", "Point #4"]
    assert list(cross.queries) == ["Next #1", "Next #2"]
    for i, length in enumerate(squares.lengths[:8].tolist()):
        assert f"{length} given" in data.sequences[i]
        assert bool((cross.weights[i, ..., length:] == 0).all()), i  # no weight on a padded corner
        torch.testing.assert_close(cross.weights[i, ..., :length].sum(-1), torch.ones(1, 2))
    out = variable_run.parent / "pred.png"
    code, _, err = cli(capsys, "plot", "predictions", "--run", str(variable_run), "--out", str(out))
    assert code == 0 and out.stat().st_size > 10_000, err


@pytest.mark.training
@pytest.mark.bad_input("catalogue")
def test_a_fixed_length_run_keeps_two_corners_and_cannot_be_resumed_as_variable(capsys, tmp_path):
    folder = tmp_path / "fixed"
    code, _, err = cli(capsys, "train", "--model", "gru", *TINY, "--epochs", "1", "--out", str(folder))
    assert code == 0, err
    code, out, err = cli(capsys, "predict", "--run", str(folder), "--points", "-1,-1 -1,1 1,1")
    assert code == 2 and out == "" and "expected two points" in err
    code, out, err = cli(capsys, "train", "--out", str(folder), "--resume", "--variable-len", "--epochs", "2")
    assert code == 2 and "--variable-len: saved False, given True" in err
