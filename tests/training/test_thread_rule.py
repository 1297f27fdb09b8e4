"""The intra-op thread rule (issue 28): threads chosen by the work of a step, ``--threads`` overriding it.

The boundary's numbers are the measurement of ``benchmarks/bench_threads.py`` (recorded in
``benchmarks/results/investigations/threads_large.json``): at 5.2e10 parameters x tokens a second thread was still
twice as slow as one, at 1.0e11 it paid. The runs' thread counts are read inside the run
(``torch.get_num_threads()`` when training starts), whatever the machine's cores: the rule is
given the core count, or the count is one the rule picks without it.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from attnlab.cli import main
from attnlab.labs.lengths import train as lengths_train
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.squares import train as squares_train
from attnlab.labs.squares.config import SquaresConfig
from attnlab.training import Callback, Trainer
from attnlab.training.threads import TWO_THREADS_FROM, intra_op_threads, step_work, threads_for

# benchmarks/bench_threads.py, the largest step where two threads were slower (a squares Transformer of width
# 1024 on 1024 squares) and the smallest where they paid (the length lab's model at width 512 on 128 x 64 tokens)
SLOWER_AT = 52_215_160_832
PAID_AT = 104_341_259_904


@pytest.mark.parametrize("available", [1, 2, 16])
def test_the_rule_at_the_measured_boundary(available):
    assert threads_for(work=SLOWER_AT, available=available) == 1
    assert threads_for(work=TWO_THREADS_FROM - 1, available=available) == 1
    assert threads_for(work=TWO_THREADS_FROM, available=available) == available
    assert threads_for(work=PAID_AT, available=available) == available
    assert SLOWER_AT < TWO_THREADS_FROM <= PAID_AT


def test_the_labs_models_get_one_thread_whatever_the_cores():
    squares = SquaresConfig(device="cpu", epochs=1)  # the positional-encoding lab's model, batches of 16
    model = squares_train.build_model(squares)
    assert threads_for(work=step_work(model, tokens=16 * 4), available=64) == 1
    lengths = CompareConfig()  # the length lab's default model and batch
    work = step_work(lengths_train.build_model(lengths, "sinusoidal"),
                     tokens=lengths.batch_size * lengths.sequence_length(8))
    assert threads_for(work=work, available=64) == 1


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"work": -1}, ValueError, "work"), ({"work": 1.5}, TypeError, "work"),
    ({"work": 10, "available": 0}, ValueError, "available"),
])
def test_the_rule_names_a_bad_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        threads_for(**kwargs)


def test_intra_op_threads_comes_back_after_an_error():
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"), intra_op_threads(3):
        assert torch.get_num_threads() == 3
        raise RuntimeError("inside")
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"), intra_op_threads(0):
        pass


@pytest.fixture
def seen_threads(monkeypatch):
    """The intra-op threads each ``Trainer.train`` call of the test starts on."""
    seen: list[int] = []
    train = Trainer.train

    def spy(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return train(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "train", spy)
    return seen


def _train(folder, *flags):
    return main(["train", "--epochs", "1", "--device", "cpu", "--no-progress", "--out", str(folder), *map(str, flags)])


@pytest.mark.training
def test_train_takes_the_rule_records_none_and_restores_the_count(tmp_path, seen_threads):
    torch.set_num_threads(3)  # whatever the caller had: the run takes one thread, and gives the 3 back
    try:
        assert _train(tmp_path / "r") == 0
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(1)
    assert seen_threads == [1]
    assert json.loads((tmp_path / "r" / "config.json").read_text())["threads"] is None


@pytest.mark.training
def test_threads_is_recorded_honoured_and_kept_by_a_resume(tmp_path, seen_threads):
    folder = tmp_path / "r"
    assert _train(folder, "--threads", 3) == 0
    assert json.loads((folder / "config.json").read_text())["threads"] == 3
    assert main(["train", "--resume", "--epochs", "2", "--no-progress", "--out", str(folder)]) == 0
    assert main(["train", "--resume", "--epochs", "3", "--no-progress", "--out", str(folder), "--threads", "2"]) == 0
    assert seen_threads == [3, 3, 2]  # given, kept by a resume, given again (like --device, a resume may change it)
    assert json.loads((folder / "config.json").read_text())["threads"] == 2


def test_a_squares_config_without_threads_is_refused():
    saved = SquaresConfig(device="cpu").to_dict()
    del saved["threads"]  # a config.json without it is refused, never filled in
    with pytest.raises(ValueError, match="threads"):
        SquaresConfig.from_dict(saved)


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_a_bad_threads_is_one_line_naming_the_flag(tmp_path, capsys, bad):
    assert _train(tmp_path / "r", "--threads", bad) == 2
    err = capsys.readouterr().err
    assert "--threads" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.training
def test_predict_and_plot_compute_on_the_rule_or_the_flag(tmp_path, monkeypatch, capsys):
    import attnlab.labs.squares.inference as inference

    folder = tmp_path / "r"
    assert _train(folder, "--threads", 3) == 0  # the training's count is not the prediction's
    seen: list[int] = []
    run_eval = inference.run_eval

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return run_eval(*args, **kwargs)

    monkeypatch.setattr(inference, "run_eval", spy)
    assert main(["predict", "--run", str(folder), "--points", "1,1 1,-1"]) == 0
    assert main(["predict", "--run", str(folder), "--points", "1,1 1,-1", "--threads", "2"]) == 0
    assert seen == [1, 2]
    monkeypatch.setattr("attnlab.labs.squares.figures.run_eval", spy)
    assert main(["plot", "predictions", "--run", str(folder), "--out", str(tmp_path / "p.png"), "--threads", "2"]) == 0
    assert seen == [1, 2, 2]
    assert main(["plot", "exponential-dials", "--out", str(tmp_path / "d.png"), "--threads", "2"]) == 2
    assert "--threads goes with the run figures" in capsys.readouterr().err


def test_compare_runs_take_the_rule_or_the_setting(monkeypatch):
    import attnlab.labs.lengths.train as lengths_train

    seen: list[int] = []
    fit = lengths_train.fit

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return fit(*args, **kwargs)

    monkeypatch.setattr(lengths_train, "fit", spy)
    tiny = {"encodings": ("sinusoidal",), "n_seeds": 1, "epochs": 1, "n_train": 16, "n_test": 8, "d_model": 8,
            "n_heads": 2, "n_layers": 1, "train_len": 4, "test_lens": (4,), "batch_size": 8}
    for threads in (None, 2):
        config = CompareConfig(**tiny, threads=threads)
        lengths_train.train_one(config, lengths_train.task_sets(config), "sinusoidal", 0)
    assert seen == [1, 2]
    partial = CompareConfig(**tiny).to_dict()
    del partial["threads"]  # a config.json without it is refused, never filled in
    with pytest.raises(ValueError, match="threads"):
        CompareConfig.from_dict(partial)
    with pytest.raises(ValueError, match="threads"):
        CompareConfig(**tiny, threads=0)


# The Python API trained on torch's default threads while only the CLI applied the rule: the README's Trainer
# example took 104 s on a loaded 2-core machine against 11 s on one thread, for the same numbers.
class _SeenThreads(Callback):
    def __init__(self):
        self.seen = []

    def on_epoch_end(self, loop, record):
        self.seen.append(torch.get_num_threads())


def _tiny():
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    return nn.Linear(3, 1), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)


@pytest.mark.parametrize(("threads", "inside"), [(None, 1), (2, 2), (1, 1)])
def test_fit_trains_on_the_rules_threads_and_puts_torchs_back(threads, inside):
    from attnlab.training import fit, supervised

    model, loader = _tiny()
    seen = _SeenThreads()
    before = torch.get_num_threads()
    with intra_op_threads(3):
        fit(model, torch.optim.SGD(model.parameters(), lr=0.1), loader, epochs=2, loss=supervised(nn.MSELoss()),
            callbacks=[seen], threads=threads)
        assert torch.get_num_threads() == 3
    assert seen.seen == [inside, inside] and torch.get_num_threads() == before


def test_the_trainer_trains_on_the_rules_threads():
    model, loader = _tiny()
    trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1))
    trainer.set_loaders(loader)
    seen = _SeenThreads()
    with intra_op_threads(2):
        trainer.train(2, callbacks=[seen])
        trainer.train(1, callbacks=[seen], threads=2)
    assert seen.seen == [1, 1, 2]


def test_the_rule_reads_a_batch_without_drawing_one():
    from torch.utils.data import DataLoader, TensorDataset

    from attnlab.training.threads import loader_tokens

    loader = DataLoader(TensorDataset(torch.zeros(40, 7, 2)), batch_size=8, shuffle=True)
    state = torch.random.get_rng_state()
    assert loader_tokens(loader) == 8 * 7
    assert torch.equal(torch.random.get_rng_state(), state)  # the shuffle's draw is the training's, untouched
    assert loader_tokens([torch.zeros(3)]) == 1  # a plain iterable: one token per step, nothing drawn
