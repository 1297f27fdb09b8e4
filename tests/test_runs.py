"""The main job: `attnlab train` / `predict` / `plot` on a run folder, end to end."""

import json

import pytest
import torch

from attnlab.data import generate_sequences, squares_tensor
from attnlab.labs.squares.train import SquaresConfig, load_run, train_run

from cli_helpers import cli

RUN_FILES = {"config.json", "metrics.jsonl", "checkpoint.pt", "report.html", "summary.json",
             "figures/losses.png", "figures/predictions.png"}


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs") / "selfattn"
    return train_run(SquaresConfig(), folder, progress=False)


def test_default_run_learns_the_seed19_squares_as_the_lab_does(default_run):
    assert default_run.epochs == 100
    # The lab's own procedure ends at a test MSE of 0.154 (an untrained model: about 1.0); attnlab's
    # run follows it epoch by epoch for about 30 epochs (benchmarks/lab_parity.py), then float32
    # rounding, amplified by this tiny chaotic model, takes it to 0.204.
    assert default_run.test_mse <= 0.25, default_run.test_mse
    files = set(default_run.files)
    assert RUN_FILES <= files
    attention = {f for f in files if f.startswith("figures/attention-")}
    assert attention == {"figures/attention-encoder-layer-self_attn_heads.png",
                         "figures/attention-decoder-layer-self_attn_heads.png",
                         "figures/attention-decoder-layer-cross_attn_heads.png"}
    lines = (default_run.folder / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["epoch"] for ln in lines] == list(range(1, 101))
    report = (default_run.folder / "report.html").read_text()
    assert report.count("<img") == 5 and "test MSE" in report


def test_test_mse_is_measured_on_the_real_test_squares(default_run):
    config, model, _ = load_run(default_run.folder)
    points, _ = generate_sequences(n=config.n_test, seed=19)
    full = squares_tensor(points)
    with torch.no_grad():
        mse = torch.nn.functional.mse_loss(model(full[:, :2]), full[:, 2:]).item()
    assert mse == pytest.approx(default_run.test_mse, rel=1e-6)


@pytest.mark.training
def test_the_transformer_fixes_the_squares_where_the_tiny_model_is_a_matter_of_luck(tmp_path):
    # --seed 6 is the worst of seeds 0..9 for the positional-encoding lab's model (test MSE 0.40);
    # the Transformer gets 0.0127 there (0.0116 to 0.0138 over seeds 0..9). 0.03 is the issue's
    # bar, three times the noise floor of the squares.
    result = train_run(SquaresConfig(model="transformer", seed=6), tmp_path / "t", progress=False)
    assert result.test_mse <= 0.03, result.test_mse
    attention = {f for f in result.files if f.startswith("figures/attention-")}
    assert len(attention) == 3  # encoder self-, decoder self- and cross-attention
    config, model, _ = load_run(tmp_path / "t")
    assert (config.d_model, config.n_heads, config.n_layers, config.ff_units) == (16, 4, 1, 32)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """An unbroken 12-epoch run: what the resume tests compare with (small, as they should be)."""
    return train_run(SquaresConfig(epochs=12), tmp_path_factory.mktemp("runs") / "short", progress=False)


@pytest.mark.training
def test_resume_gives_the_losses_of_an_unbroken_run(tmp_path, short_run):
    train_run(SquaresConfig(epochs=5), tmp_path / "r", progress=False)
    resumed = train_run(SquaresConfig(epochs=12), tmp_path / "r", resume=True, progress=False)
    straight = [json.loads(ln) for ln in (short_run.folder / "metrics.jsonl").read_text().splitlines()]
    again = [json.loads(ln) for ln in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in again] == [r["loss"] for r in straight]  # bit for bit
    assert [r["val_loss"] for r in again] == [r["val_loss"] for r in straight]
    assert resumed.test_mse == short_run.test_mse


@pytest.mark.training
def test_an_interrupted_run_resumes_from_its_last_whole_epoch(tmp_path, short_run, monkeypatch):
    # Ctrl-C in epoch 8: the checkpoint written at the end of epoch 7 is there, and
    # --resume continues as if nothing had happened.
    from attnlab.training import Loop

    run_one_epoch = Loop.run_one_epoch

    def interrupted(self):
        if self.history.epochs == 7:
            raise KeyboardInterrupt
        return run_one_epoch(self)

    monkeypatch.setattr(Loop, "run_one_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_run(SquaresConfig(epochs=12), tmp_path / "r", progress=False)
    monkeypatch.setattr(Loop, "run_one_epoch", run_one_epoch)
    assert len((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()) == 7
    resumed = train_run(SquaresConfig(epochs=12), tmp_path / "r", resume=True, progress=False)
    straight = [json.loads(ln)["loss"] for ln in (short_run.folder / "metrics.jsonl").read_text().splitlines()]
    again = [json.loads(ln)["loss"] for ln in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert again == straight  # bit for bit
    assert resumed.test_mse == short_run.test_mse


def test_predict_and_plot_from_a_run_folder(default_run, tmp_path, capsys):
    code, out, err = cli(capsys, "predict", "--run", str(default_run.folder), "--points", "-1,-1 -1,1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    _, model, _ = load_run(default_run.folder)
    with torch.no_grad():
        expected = model(torch.tensor([[[-1.0, -1.0], [-1.0, 1.0]]]))[0]
    predicted = torch.tensor(doc["predicted"])
    torch.testing.assert_close(predicted, expected)  # how good it is: the test MSE tests above
    code, out, _ = cli(capsys, "predict", "--run", str(default_run.folder), "--points", "-1,-1 -1,1")
    assert code == 0 and out.startswith("corner 3: ")
    for name, extra in (("losses", []), ("predictions", []),
                        ("attention", ["--layer", "decoder.layer.cross_attn_heads"])):
        png = tmp_path / f"{name}.png"
        code, _, err = cli(capsys, "plot", name, "--run", str(default_run.folder), "--out", str(png), *extra)
        assert code == 0, err
        assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.training
def test_cli_train_prints_the_final_mse(tmp_path, capsys):
    code, out, err = cli(capsys, "train", "--epochs", "3", "--out", str(tmp_path / "r"), "--no-progress")
    assert code == 0, err
    assert "final train MSE" in out and "test MSE" in out and err == ""


@pytest.mark.parametrize(
    "argv, words",
    [
        (["train", "--epochs", "-5"], "--epochs"),
        (["train", "--model", "transformer-xl"], "transformer-xl"),
        (["predict", "--run", "RUN", "--points", "1,2"], "--points"),
        (["predict", "--run", "RUN", "--points", "1,x 2,3"], "1,x"),
        (["predict", "--run", "NOWHERE", "--points", "1,1 2,2"], "NOWHERE"),
        (["plot", "attention", "--run", "RUN", "--layer", "nope", "--out", "a.png"], "nope"),
        (["plot", "losses", "--out", "a.png"], "--run"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, words, default_run, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [str(default_run.folder) if a == "RUN" else a for a in argv]
    before = {p: p.stat().st_mtime_ns for p in default_run.folder.rglob("*")}
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert {p: p.stat().st_mtime_ns for p in default_run.folder.rglob("*")} == before


@pytest.mark.training
def test_existing_run_is_never_overwritten_and_bad_checkpoints_are_refused(default_run, tmp_path, capsys):
    code, _, err = cli(capsys, "train", "--out", str(default_run.folder), "--epochs", "2", "--no-progress")
    assert code == 2 and "already holds" in err
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("attnlab-run.json", "config.json", "metrics.jsonl"):
        (broken / name).write_bytes((default_run.folder / name).read_bytes())
    (broken / "checkpoint.pt").write_bytes((default_run.folder / "checkpoint.pt").read_bytes()[:200])
    code, _, err = cli(capsys, "predict", "--run", str(broken), "--points", "1,1 2,2")
    assert code == 2 and "checkpoint" in err.lower()
    code, _, err = cli(capsys, "train", "--out", str(broken), "--epochs", "120", "--resume", "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1
    # Without a checkpoint, a history of many epochs is not thrown away (issue 27): refused ...
    (broken / "checkpoint.pt").unlink()
    code, _, err = cli(capsys, "train", "--out", str(broken), "--resume", "--epochs", "2", "--no-progress")
    assert code == 2 and "records 100 epochs, but there is no checkpoint.pt" in err
    # ... but a run killed before its first checkpoint (one line at most) is started again from epoch 0.
    first = (broken / "metrics.jsonl").read_text().splitlines()[0]
    (broken / "metrics.jsonl").write_text(first + "\n")
    code, out, err = cli(capsys, "train", "--out", str(broken), "--resume", "--epochs", "2", "--no-progress")
    assert code == 0, err
    assert [json.loads(ln)["epoch"] for ln in (broken / "metrics.jsonl").read_text().splitlines()] == [1, 2]
