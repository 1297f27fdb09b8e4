"""``attnlab train --device``: checked before anything is written, recorded in config.json, free on resume."""

import json

import pytest
import torch

from attnlab.cli._common import UsageError
from attnlab.cli._device import parse_device
from attnlab.labs.squares.train import SquaresConfig
from attnlab.training import default_device

from cli_helpers import cli

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--epochs", "1", "--n-train", "16", "--no-progress"]
NO_CUDA = not torch.cuda.is_available()
NO_MPS = not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available())


@pytest.mark.bad_input("catalogue")
@pytest.mark.parametrize(("device", "message"), [
    pytest.param("cuda", "--device cuda: CUDA is not available on this machine",
                 marks=pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")),
    pytest.param("cuda:0", "--device cuda:0: CUDA is not available on this machine",
                 marks=pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")),
    pytest.param("cuda:7", "--device cuda:7: ",
                 marks=pytest.mark.skipif(torch.cuda.device_count() > 7, reason="this machine has 8 GPUs")),
    pytest.param("mps", "--device mps: MPS (Apple GPUs) is not available on this machine",
                 marks=pytest.mark.skipif(not NO_MPS, reason="this machine has MPS")),
    ("tpu", "--device 'tpu' is not a device; give cpu, cuda, cuda:N or mps"),
    ("garbage!", "--device 'garbage!' is not a device"),
    ("", "--device '' is not a device"),
    ("meta", "--device 'meta': attnlab trains on cpu, cuda, cuda:N or mps, not meta"),
])
def test_a_device_this_machine_lacks_is_one_line_and_nothing_is_written(capsys, tmp_path, device, message):
    code, out, err = cli(capsys, "train", "--device", device, *TINY, "--out", str(tmp_path / "r"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_parse_device():
    assert parse_device("cpu") == torch.device("cpu") == parse_device("cpu:0")
    assert parse_device(None) == default_device()
    with pytest.raises(UsageError, match="--device 'x'"):
        parse_device("x")


@pytest.mark.training
def test_device_cpu_is_recorded_and_a_resume_may_train_elsewhere(capsys, tmp_path):
    # The plain GRU: no attention figures to draw, so the run is quick.
    folder = tmp_path / "r"
    code, _, err = cli(capsys, "train", "--model", "gru", "--device", "cpu", *TINY, "--out", str(folder))
    assert code == 0, err
    config = json.loads((folder / "config.json").read_text())
    assert config["device"] == "cpu"
    # As a run trained on a GPU records it: resumed (on this machine's default device), predicted, plotted.
    (folder / "config.json").write_text(json.dumps({**config, "device": "cuda:1"}))
    code, _, err = cli(capsys, "train", "--out", str(folder), "--resume", "--epochs", "2", "--no-progress")
    assert code == 0, err
    assert json.loads((folder / "config.json").read_text())["device"] == str(default_device())
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 2
    (folder / "config.json").write_text(json.dumps({**config, "epochs": 2, "device": "cuda:1"}))
    code, out, err = cli(capsys, "predict", "--run", str(folder), "--points", "1,1 1,-1")
    assert code == 0, err
    code, _, err = cli(capsys, "plot", "losses", "--run", str(folder), "--out", str(tmp_path / "l.png"))
    assert code == 0, err


@pytest.mark.bad_input("config files")
def test_a_config_device_must_be_a_device_name():
    assert SquaresConfig(device="cpu:0").device == "cpu"
    with pytest.raises(ValueError, match="device 'tpu' is not a device name"):
        SquaresConfig(device="tpu")
    with pytest.raises(ValueError, match="squares runs train on cpu, cuda, mps, not xla"):
        SquaresConfig(device="xla")
    with pytest.raises(TypeError, match="device must be a device name"):
        SquaresConfig(device=0)
