"""One engine: every model trains through `fit`, and the size flags reach the layers that use them.

- `fit` trains a labs' model (the positional-encoding lab's, on the noisy squares, the
  book's `(x, y)` batches) and the length lab's decoder-only Transformer (token batches,
  its own loss) alike;
- `attnlab train`, `attnlab compare` and the book's `Trainer` all run their epochs in
  `Loop.run_one_epoch` (counted here);
- `--d-model/--n-heads/--n-layers/--ff-units` change the parameter count to exactly that
  of the model built directly from the public classes with those sizes; bad values are
  one line on stderr and exit 2.
"""

import json

import pytest
import torch
from torch import nn

from attnlab.cli import main
from attnlab.data import PAD, TaskSpec, Vocab, make_loaders
from attnlab.data.tasks.layouts import decoder_only_batch
from attnlab.data.tasks.loader import task_loader
from attnlab.data.tasks.registry import make_task_sets
from attnlab.labs.squares.train import load_run
from attnlab.models import (
    DecoderOnlyTransformer,
    DecoderPe,
    EncoderDecoderSelfAttn,
    EncoderDecoderTransformer,
    EncoderPe,
    Transformer,
)
from attnlab.training import Callback, Loop, Trainer, fit, supervised

pytestmark = pytest.mark.usefixtures("one_thread")


def n_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class Recorder(Callback):
    def __init__(self):
        self.batches, self.epochs, self.events = 0, [], []

    def on_fit_start(self, loop):
        self.events.append("start")

    def on_batch_end(self, loop, loss):
        self.batches += 1

    def on_epoch_end(self, loop, record):
        self.epochs.append(record)

    def on_fit_end(self, loop):
        self.events.append("end")


def test_fit_trains_the_pe_labs_model_on_the_squares():
    torch.manual_seed(43)
    model = EncoderDecoderSelfAttn(EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2),
                                   DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2),
                                   input_len=2, target_len=2)
    data = make_loaders(n_train=128, n_test=128, batch_size=16, eval_batch_size=128, shuffle_seed=0)
    recorder = Recorder()
    history = fit(model, torch.optim.Adam(model.parameters(), lr=0.01), data.train, epochs=10,
                  loss=supervised(nn.MSELoss()), val_loader=data.test, callbacks=[recorder])
    assert history.epochs == 10 and recorder.batches == 10 * 8 and recorder.events == ["start", "end"]
    assert [r["epoch"] for r in recorder.epochs] == list(range(1, 11))
    assert history.losses[-1] < 0.8 * history.losses[0]  # it learns
    assert all(v is not None for v in history.val_losses)
    assert model.training  # the mode it came in with


def test_fit_trains_the_length_labs_decoder_only_model_on_tokens():
    spec = TaskSpec(task="reverse", train_len=4, test_lens=(4,), n_train=256, n_test=16)
    sets = make_task_sets(spec)
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(vocab_size=Vocab(10).size, d_model=32, n_heads=2, n_layers=1, position="rotary",
                                   max_len=16, pad_id=PAD)

    def next_token_loss(model, batch):
        inputs, labels = decoder_only_batch(batch)  # [B, 2S + 1] each
        return nn.functional.cross_entropy(model(inputs).flatten(0, 1), labels.flatten(), ignore_index=PAD)

    loader = task_loader(sets.train, 32, seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    history = fit(model, optimizer, loader, epochs=4, loss=next_token_loss, scheduler=scheduler,
                  scheduler_interval="batch")
    assert history.epochs == 4 and history.losses[-1] < history.losses[0]
    assert len(history.learning_rates) == 4 * len(loader)  # stepped after every batch
    assert history.learning_rates[-1][0] == pytest.approx(3e-3 / (1 + 4 * len(loader)))


@pytest.mark.training
def test_every_lab_and_the_trainer_run_their_epochs_in_the_one_loop(tmp_path, monkeypatch, capsys):
    calls = []
    run_one_epoch = Loop.run_one_epoch

    def counted(self):
        calls.append(type(self.model).__name__)
        return run_one_epoch(self)

    monkeypatch.setattr(Loop, "run_one_epoch", counted)
    assert main(["train", "--epochs", "2", "--out", str(tmp_path / "t"), "--no-progress"]) == 0
    assert calls == ["EncoderDecoderSelfAttn"] * 2
    calls.clear()
    assert main(["compare", "--encodings", "none,alibi", "--seeds", "1", "--epochs", "1", "--n-train", "32",
                 "--train-len", "4", "--test-lens", "4", "--d-model", "16", "--n-heads", "2", "--n-layers", "1",
                 "--out", str(tmp_path / "c"), "--no-progress", "--jobs", "1"]) == 0  # in this process, to count
    assert calls == ["DecoderOnlyTransformer"] * 2
    calls.clear()
    model = nn.Linear(3, 1)
    trainer = Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1), device="cpu", progress=False)
    trainer.set_loaders([(torch.randn(4, 3), torch.randn(4, 1))])
    trainer.train(3)
    assert calls == ["Linear"] * 3
    capsys.readouterr()


# -- the size flags ---------------------------------------------------------------------


def _train_parameters(tmp_path, capsys, name, *flags):
    code = main(["train", "--epochs", "1", "--out", str(tmp_path / name), "--no-progress", *flags])
    _, err = capsys.readouterr()
    assert code == 0, err
    config, model, _ = load_run(tmp_path / name)
    return config, n_parameters(model)


@pytest.mark.training
def test_train_size_flags_give_the_model_of_those_sizes(tmp_path, capsys):
    config, count = _train_parameters(tmp_path, capsys, "t", "--model", "transformer", "--d-model", "24",
                                      "--n-heads", "3", "--n-layers", "2", "--ff-units", "40")
    assert (config.d_model, config.n_heads, config.n_layers, config.ff_units) == (24, 3, 2, 40)
    peer = EncoderDecoderTransformer(Transformer(n_features=2, d_model=24, n_heads=3, n_layers=2, ff_units=40,
                                                 max_len=4), input_len=2, target_len=2)
    assert count == n_parameters(peer)
    default = EncoderDecoderTransformer(Transformer(n_features=2, d_model=16, n_heads=4, n_layers=1, ff_units=32,
                                                    max_len=4), input_len=2, target_len=2)
    assert n_parameters(default) != count  # the README's defaults: d_model 16, 4 heads, 1 layer, ff_units 32
    # the positional-encoding lab's model: --d-model, --n-heads, --ff-units (no layers)
    config, count = _train_parameters(tmp_path, capsys, "pe", "--d-model", "4", "--n-heads", "2", "--ff-units", "6")
    peer = EncoderDecoderSelfAttn(EncoderPe(2, 4, 6, n_features=2), DecoderPe(2, 4, 6, n_features=2), 2, 2)
    assert count == n_parameters(peer)
    assert json.loads((tmp_path / "pe" / "config.json").read_text())["d_model"] == 4


@pytest.mark.training
def test_compare_size_flags_give_the_model_of_those_sizes(tmp_path, capsys):
    flags = ["--encodings", "none", "--seeds", "1", "--epochs", "1", "--n-train", "32", "--train-len", "4",
             "--test-lens", "4", "--no-progress"]
    counts = {}
    for name, sizes in [("small", ("16", "2", "1", "32")), ("big", ("32", "4", "2", "48"))]:
        d, h, n, f = sizes
        code = main(["compare", *flags, "--d-model", d, "--n-heads", h, "--n-layers", n, "--ff-units", f,
                     "--out", str(tmp_path / name)])
        _, err = capsys.readouterr()
        assert code == 0, err
        [counts[name]] = json.loads((tmp_path / name / "results.json").read_text())["parameters_per_model"].values()
        peer = DecoderOnlyTransformer(vocab_size=Vocab(10).size, d_model=int(d), n_heads=int(h), n_layers=int(n),
                                      ff_units=int(f), position="none", max_len=10)
        assert counts[name] == n_parameters(peer)
    assert counts["small"] < counts["big"]


@pytest.mark.parametrize("argv, words", [
    (["train", "--d-model", "0"], "--d-model: must be positive, got 0"),
    (["train", "--n-heads", "x"], "--n-heads: expected a whole number, got 'x'"),
    (["train", "--n-layers", "2"], "--n-layers: the selfattn-pe model has no such size"),
    (["train", "--model", "gru", "--n-heads", "2"], "--n-heads: the gru model has no such size"),
    (["train", "--model", "transformer", "--d-model", "10", "--n-heads", "4"],
     "--d-model (10) must be divisible by --n-heads (4)"),
    (["compare", "--ff-units", "-1"], "--ff-units: must be positive, got -1"),
    (["compare", "--d-model", "30", "--n-heads", "4"], "--d-model (30) must be divisible by --n-heads (4)"),
    (["compare", "--n-layers", "0"], "--n-layers: must be positive, got 0"),
    # what a scheme refuses at these sizes, and a scheme that does not import: refused before the folder is made
    (["compare", "--encodings", "rotary", "--d-model", "6", "--n-heads", "2"],
     "head_dim must be even to rotate every feature, got head_dim=3"),
    (["compare", "--encodings", "alibi,nosuchpkg.schemes:Sandwich"],
     "no module 'nosuchpkg.schemes' where Python looks"),
])
def test_bad_sizes_are_one_line_and_exit_2(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main([*argv, "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert words in err
    assert list(tmp_path.iterdir()) == []  # nothing written, not even runs/


def test_a_lab_model_looks_its_scheme_name_up_once_per_run(monkeypatch):
    # The settings resolve each encoding once; the models are built from what they resolved, never from the
    # name again (one look-up per run, not one per model or per layer).
    from attnlab.encodings import registry
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.train import build_model

    looked_up = []
    real = registry._named
    monkeypatch.setattr(registry, "_named", lambda name: looked_up.append(name) or real(name))
    config = CompareConfig(encodings=("alibi", "random-alibi"), train_len=4, test_lens=(4, 6), d_model=16,
                           n_heads=2, n_layers=2, n_seeds=2)
    models = [build_model(config, encoding) for encoding in config.encodings for _ in range(2)]
    assert sorted(looked_up) == ["alibi", "alibi"], looked_up  # alibi, and random-alibi's inner scheme
    assert [m.position_name for m in models] == ["alibi", "alibi", "random-alibi", "random-alibi"]
