"""Reproducibility: the same seed gives the same bits in another process, and no global random stream moves.

1. Two separate processes (other hash seeds, one CPU thread each) run ``attnlab train``
   (the attention lab's GRU with attention, whose teacher forcing draws from torch's stream),
   ``attnlab predict --json`` and a tiny ``attnlab compare``: the losses, the checkpoints,
   the predictions, the data every figure function was given, the PNG files themselves
   (Agg writes no timestamp) and the comparison's records are bit for bit the same.
2. The library never changes numpy's, Python's or torch's global random state behind
   the user's back. By design, and asserted here:

   * building a model draws its initial weights from torch's global generator, as every
     ``nn.Module`` does (``torch.manual_seed(k)`` then gives the labs' weights); the
     attention lab's GRU models also draw their teacher-forcing coin from it in eval mode;
   * ``Trainer.train`` seeds torch's and Python's generators (the book's ``set_seed``)
     with an explicit seed, or with 42 on a first call without one, then draws from them;
     ``load_checkpoint`` restores them (unless ``restore_rng=False``);
   * numpy's global generator is never touched by anything.

   Already covered elsewhere, so not repeated: ``run_compare`` (tests/test_compare.py),
   ``make_task_batch`` / ``make_task_sets`` / ``task_loader`` / ``squares_task``
   (tests/data/test_tasks.py).
"""

# ruff: noqa: NPY002  (numpy's legacy global generator is the state these tests watch)

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import attnlab.models
import attnlab.plotting as P
from attnlab.analysis import audit, audit_position
from attnlab.attention import MultiHeadAttention, attend
from attnlab.data import generate_sequences, make_loaders, squares_tensor
from attnlab.encodings import (
    PositionalEncoding,
    Rotary,
    angle_rates,
    axial_rotary_angles,
    fixed_base,
    shift_matrix,
    sinusoidal,
    sinusoidal_2d,
)
from attnlab.encodings.registry import CAUSAL_ONLY
from attnlab.labs.squares import train as runs
from attnlab.labs.squares.figures import attention_figures
from attnlab.labs.squares.models import SQUARES_MODELS
from attnlab.labs.squares.train import SquaresConfig, build_model, load_run, predict_corners
from attnlab.models import (
    ENCODINGS,
    Decoder,
    DecoderAttn,
    DecoderOnlyTransformer,
    DecoderPe,
    DecoderSelfAttn,
    Encoder,
    EncoderDecoder,
    EncoderDecoderAttn,
    EncoderDecoderSelfAttn,
    EncoderDecoderTransformer,
    EncoderOnlyTransformer,
    EncoderPe,
    EncoderSelfAttn,
    Transformer,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from attnlab.training import Trainer, read_checkpoint

from shared_once import shared_once

TINY_COMPARE = ["--encodings", "rotary,alibi", "--seeds", "1", "--epochs", "1", "--n-train", "64",
                "--train-len", "4", "--test-lens", "4,6", "--no-progress",
                "--jobs", "1"]  # tests/test_compare.py's TINY, in-process

# -- 1. the same bits in two processes ---------------------------------------------------------

CHILD = r"""
import contextlib, hashlib, io, json, random, sys
from pathlib import Path
import numpy as np
import torch
import attnlab.plotting as plotting
from attnlab.attention import collect_attention
from attnlab.cli import main

out = Path(sys.argv[1])
given = []  # (figure function, the data it was given), in call order

def plain(value):
    if isinstance(value, torch.nn.Module):
        with torch.no_grad():
            return {"module": type(value).__name__, "state": plain(value.state_dict()),
                    "attention": plain(collect_attention(value))}
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return [str(data.dtype), list(data.shape), hashlib.sha256(data.tobytes()).hexdigest()]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__name__

def recording(name, function):
    def wrapper(*args, **kwargs):
        record = {"args": plain(list(args)), "kwargs": plain(kwargs)}
        given.append([name, record])
        return function(*args, **kwargs)
    return wrapper

for name in plotting.__all__:  # the run and compare code import them from attnlab.plotting when drawing
    setattr(plotting, name, recording(name, getattr(plotting, name)))

def states():
    return torch.get_rng_state(), np.random.get_state(), random.getstate()

def moved(before, after):
    names = [] if torch.equal(before[0], after[0]) else ["torch"]
    if not (before[1][0] == after[1][0] and np.array_equal(before[1][1], after[1][1])
            and before[1][2:] == after[1][2:]):
        names.append("numpy")
    return names + ([] if before[2] == after[2] else ["python"])

streams_moved = {}  # command -> the global streams it moved in this process

def cli(*argv):
    buffer = io.StringIO()
    before = states()
    with contextlib.redirect_stdout(buffer):
        code = main([str(a) for a in argv])
    streams_moved[argv[0]] = moved(before, states())
    assert code == 0, argv
    return buffer.getvalue()

torch.manual_seed(5)
np.random.seed(5)
random.seed(5)

# the attention lab's GRU with attention: its teacher-forcing coin draws from torch's global stream too
train = cli("train", "--model", "gru-attn", "--epochs", "5", "--n-train", "32", "--out", out / "run",
            "--no-progress")
predict = cli("predict", "--run", out / "run", "--points", "-1,-1 -1,1", "--json")
cli("compare", *sys.argv[2:], "--out", out / "compare")
(out / "probe.json").write_text(json.dumps({"train": train.splitlines()[1], "predict": predict, "given": given,
                                            "moved": streams_moved}))
"""


def _run_two_processes(root):
    procs = []
    for i in (1, 2):
        folder = root / f"process{i}"
        folder.mkdir(exist_ok=True)
        env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1", PYTHONHASHSEED=str(i))
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, str(folder), *TINY_COMPARE], cwd=folder,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """The same commands run by two fresh interpreters, side by side; their output folders.

    Built once per session (tests/shared_once.py), however xdist spreads this module's tests."""
    root = shared_once(tmp_path_factory, "two-processes", _run_two_processes)
    return [root / "process1", root / "process2"]


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_same_losses_and_checkpoint(two_processes):
    a, b = (folder / "run" for folder in two_processes)
    metrics = [_lines(folder / "metrics.jsonl") for folder in (a, b)]
    for record in metrics[0] + metrics[1]:
        record.pop("seconds")  # wall time: the only field allowed to differ
    assert metrics[0] == metrics[1]
    assert [r["epoch"] for r in metrics[0]] == [1, 2, 3, 4, 5]
    assert len({r["loss"] for r in metrics[0]}) == 5  # it trained: five different losses
    for name in ("summary.json", "config.json"):
        assert (a / name).read_text() == (b / name).read_text()
    ca, cb = read_checkpoint(a / "checkpoint.pt"), read_checkpoint(b / "checkpoint.pt")
    for part in ("model_state_dict", "optimizer_state_dict", "rng"):
        torch.testing.assert_close(ca[part], cb[part], rtol=0, atol=0)
    assert ca["loss"] == cb["loss"] and ca["val_loss"] == cb["val_loss"]
    assert (a / "checkpoint.pt").read_bytes() == (b / "checkpoint.pt").read_bytes()


def test_same_predictions(two_processes):
    probes = [json.loads((folder / "probe.json").read_text()) for folder in two_processes]
    assert probes[0]["predict"] == probes[1]["predict"]  # the printed floats, every digit
    assert probes[0]["train"] == probes[1]["train"]  # "final train MSE ... | test MSE ..."
    assert probes[0]["train"].startswith("final train MSE")
    predicted = json.loads(probes[0]["predict"])["predicted"]
    assert np.array(predicted).shape == (2, 2)


def test_same_data_behind_every_figure(two_processes):
    probes = [json.loads((folder / "probe.json").read_text()) for folder in two_processes]
    drawn = [name for name, _ in probes[0]["given"]]
    assert {"plot_losses", "plot_sequence_pred", "plot_attention_weights", "plot_length_generalisation"} <= set(drawn)
    assert drawn.count("plot_attention_weights") == 1  # the decoder's attention over the source
    for (name, first), (_, second) in zip(probes[0]["given"], probes[1]["given"], strict=True):
        assert first == second, name
    # The PNG files too: Agg is deterministic and matplotlib writes no date into a PNG.
    for sub in ("run", "compare"):
        pngs = sorted(p.relative_to(two_processes[0]) for p in (two_processes[0] / sub).rglob("*.png"))
        assert len(pngs) >= 2
        for png in pngs:
            assert (two_processes[0] / png).read_bytes() == (two_processes[1] / png).read_bytes(), png
    assert (two_processes[0] / "run" / "report.html").read_text() == \
        (two_processes[1] / "run" / "report.html").read_text()


def test_same_comparison_records(two_processes):
    docs = [json.loads((folder / "compare" / "results.json").read_text()) for folder in two_processes]
    assert docs[0]["records"] == docs[1]["records"]
    assert len(docs[0]["records"]) == 4  # 2 encodings x 1 seed x 2 lengths
    assert docs[0]["summary"] == docs[1]["summary"] and docs[0]["config"] == docs[1]["config"]
    assert set(docs[0]["seconds_per_model"]) == set(docs[1]["seconds_per_model"])  # times may differ


# -- 2. global random states --------------------------------------------------------------------


def rng_states():
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def moved(before, after):
    """Which global streams differ between two :func:`rng_states` snapshots."""
    names = set()
    if not torch.equal(before[0], after[0]):
        names.add("torch")
    if not (before[1][0] == after[1][0] and np.array_equal(before[1][1], after[1][1])
            and before[1][2:] == after[1][2:]):
        names.add("numpy")
    if before[2] != after[2]:
        names.add("python")
    return names


@pytest.fixture(autouse=True)
def _known_global_states():
    """Every test starts from seeded global streams and leaves numpy's and Python's as it found them."""
    saved = np.random.get_state(), random.getstate()
    torch.manual_seed(1234)
    np.random.seed(1234)
    random.seed(1234)
    yield
    np.random.set_state(saved[0])
    random.setstate(saved[1])


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster here


def calls(entry):
    """``entry()`` between two snapshots: the set of global streams it moved."""
    before = rng_states()
    entry()
    return moved(before, rng_states())


class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Dropout(0.2), nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)


def make_trainer():
    """A trainer over a dropout MLP with a shuffled loader (its own generator) and a val loader."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, generator=g)
    y = x.sum(dim=1, keepdim=True)
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=True,
                                        generator=torch.Generator().manual_seed(1))
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:8], y[:8]), batch_size=8)
    model = TinyMLP()
    trainer = Trainer(model, nn.MSELoss(), torch.optim.Adam(model.parameters(), lr=0.01), device="cpu",
                      progress=False)
    trainer.set_loaders(train, val)
    return trainer


# Entry points that must leave every global stream alone.
TABLE = sinusoidal(12, 10)
SQUARES = squares_tensor(generate_sequences(n=4, seed=19)[0])  # [4, 4, 2]
DIRECTIONS = generate_sequences(n=4, seed=19)[1]


def _epochs_of(loaders, n=2):
    for _ in range(n):
        for loader in (loaders.train, loaders.test):
            list(loader)


def _plot_calls():
    """Every public figure function, with inputs built beforehand (building a module draws weights)."""
    records = [{"encoding": "rotary", "seed": 0, "length": 4, "token_accuracy": 1.0, "sequence_accuracy": 0.5}]
    return {
        "alignment_matrix": lambda: P.alignment_matrix(),
        "encoding_degrees": lambda: P.encoding_degrees(2, (4, 5), 3),
        "encoding_heatmap": lambda: P.encoding_heatmap(4, 5),
        "exponential_dials": lambda: P.exponential_dials(4, 3),
        "figure9": lambda: P.figure9(),
        "plot_angle_map": lambda: P.plot_angle_map(12, angle_rates(10)),
        "plot_angle_rates": lambda: P.plot_angle_rates(angle_rates(10)),
        "plot_attention_weights": lambda: P.plot_attention_weights(torch.full((1, 2, 3, 3), 1 / 3)),
        "plot_binary": lambda: P.plot_binary(4),
        "plot_columns": lambda: P.plot_columns(TABLE, (6, 7, 8, 9)),
        "plot_distances": lambda: P.plot_distances(TABLE, 4),
        "plot_encoding": lambda: P.plot_encoding(TABLE),
        "plot_encoding_2d": lambda: P.plot_encoding_2d(sinusoidal_2d(4, 5, 8)),
        "plot_axial_rotary": lambda: P.plot_axial_rotary(axial_rotary_angles(4, 5, head_dim=8)),
        "plot_length_generalisation": lambda: P.plot_length_generalisation(records, train_len=4),
        "plot_losses": lambda: P.plot_losses([0.5, 0.3, 0.2], [None, 0.35, 0.25]),
        "plot_mesh": lambda: P.plot_mesh(TABLE, showvals=True, colorbar=True),
        "plot_nearby": lambda: P.plot_nearby(TABLE, 3),
        "plot_shifted": lambda: P.plot_shifted(TABLE, -2),
        "plot_similarity": lambda: P.plot_similarity(TABLE),
        "query_and_keys": lambda: P.query_and_keys([0.55, 0.95], [[0.65, 0.2], [0.85, -0.4], [-0.95, -0.75]]),
        "plot_sequence_pred": lambda: P.plot_sequence_pred(SQUARES[:, 2:], SQUARES, DIRECTIONS, n_rows=1, n_cols=2),
        "prefix_pred": lambda: P.prefix_pred(SQUARES[:, 2:], SQUARES, [2] * len(SQUARES), SQUARES[:, 2:]),
        # not a figure: attention in bertviz's format (data in, data out)
        "to_bertviz": lambda: P.to_bertviz([torch.full((1, 1, 2, 2), 0.5)], ["a", "b"]),
    }


LIBRARY_CALLS = {
    "generate_sequences": lambda: generate_sequences(n=16, seed=3),
    "generate_sequences(variable_len)": lambda: generate_sequences(n=16, variable_len=True, seed=3),
    "generate_sequences(seed=None)": lambda: generate_sequences(n=16, seed=None),
    "squares_tensor": lambda: squares_tensor(generate_sequences(n=4)[0]),
    # (by default the test loader draws from torch's generator as the labs' does: tests/data/test_loaders.py)
    "make_loaders, two epochs": lambda: _epochs_of(make_loaders(n_train=16, n_test=8, batch_size=4,
                                                                test_draws_global=False)),
    "sinusoidal": lambda: sinusoidal(64, 16, layout="t2t", dtype=torch.float64),
    "fixed_base": lambda: fixed_base(50),
    "shift_matrix": lambda: shift_matrix(3, 8),
    "PositionalEncoding": lambda: PositionalEncoding(4, 6).eval()(torch.zeros(2, 5, 6)),
    "audit": lambda: audit(sinusoidal(10, 8), reference=sinusoidal(10, 8, dtype=torch.float64)),
    "audit_position": lambda: audit_position(Rotary(8), max_positions=16, seed=3),
    "attend": lambda: attend(*torch.ones(3, 1, 2, 4, 8).unbind(0), need_weights=True),
    "runs.test_squares": lambda: runs.test_squares(SquaresConfig(n_test=8)),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_CALLS))
def test_library_calls_leave_every_global_stream_alone(name):
    assert calls(LIBRARY_CALLS[name]) == set()


def test_every_figure_leaves_every_global_stream_alone():
    plot_calls = _plot_calls()
    assert sorted(plot_calls) == sorted(P.__all__)
    for name, call in plot_calls.items():
        assert calls(call) == set(), name


def test_the_books_figures_that_run_a_model_leave_every_global_stream_alone():
    from attnlab.compat import chapter9

    mha = MultiHeadAttention(2, 4)
    x = torch.randn(1, 3, 4)
    model = build_model(SquaresConfig())
    book_calls = {
        "plot_attention": lambda: (chapter9.plot_attention(mha, x), chapter9.plot_attention(
            model, SQUARES[:2, :2], decoder=True, layer="decoder.layer.cross_attn_heads")),
        "sequence_pred": lambda: chapter9.sequence_pred(model.train(), SQUARES, DIRECTIONS, n_rows=1, n_cols=2),
    }
    assert sorted(book_calls) == sorted(chapter9.__all__)
    for name, call in book_calls.items():
        assert calls(call) == set(), name


# The model classes: every constructor, and a forward pass in eval mode.

def _seq2seq_inputs():
    return torch.randn(3, 4, 2)  # [B, 4 corners, 2]: the first two are the source


MODEL_BUILDERS = {
    "Encoder": lambda: Encoder(2, 4),
    "Decoder": lambda: Decoder(2, 4),
    "DecoderAttn": lambda: DecoderAttn(2, 4),
    "EncoderDecoder": lambda: EncoderDecoder(Encoder(2, 4), Decoder(2, 4), input_len=2, target_len=2),
    "EncoderDecoderAttn": lambda: EncoderDecoderAttn(Encoder(2, 4), DecoderAttn(2, 4), input_len=2, target_len=2),
    "EncoderSelfAttn": lambda: EncoderSelfAttn(2, 4, 8, n_features=2),
    "DecoderSelfAttn": lambda: DecoderSelfAttn(2, 4, 8, n_features=2),
    "EncoderPe": lambda: EncoderPe(2, 4, 8, n_features=2),
    "DecoderPe": lambda: DecoderPe(2, 4, 8, n_features=2),
    "EncoderDecoderSelfAttn": lambda: EncoderDecoderSelfAttn(EncoderPe(2, 4, 8, n_features=2),
                                                             DecoderPe(2, 4, 8, n_features=2), 2, 2),
    "EncoderDecoderTransformer": lambda: EncoderDecoderTransformer(
        Transformer(n_features=2, d_model=8, n_heads=2, n_layers=1, dropout=0.1, max_len=4), input_len=2, target_len=2),
    "TransformerEncoderLayer": lambda: TransformerEncoderLayer(8, 2, 16, dropout=0.1),
    "TransformerDecoderLayer": lambda: TransformerDecoderLayer(8, 2, 16, dropout=0.1),
    **{f"Transformer-{enc}": (lambda enc=enc: Transformer(vocab_size=12, d_model=8, n_heads=2, n_layers=1,
                                                            dropout=0.1, position=enc, max_len=16))
       for enc in ENCODINGS if enc not in CAUSAL_ONLY},
    **{f"EncoderOnlyTransformer-{enc}": (lambda enc=enc: EncoderOnlyTransformer(
        vocab_size=12, d_model=8, n_heads=2, n_layers=1, dropout=0.1, position=enc, max_len=16))
       for enc in ("rotary", "fire", "kerple", "random-learned", "random-alibi")},
    **{f"DecoderOnlyTransformer-{enc}": (lambda enc=enc: DecoderOnlyTransformer(
        vocab_size=12, d_model=8, n_heads=2, n_layers=1, dropout=0.1, position=enc, max_len=16))
       for enc in ENCODINGS},
}
SEQ2SEQ = ("EncoderDecoder", "EncoderDecoderAttn", "EncoderDecoderSelfAttn", "EncoderDecoderTransformer")
COIN_IN_EVAL = ("EncoderDecoder", "EncoderDecoderAttn")  # the attention lab's teacher-forcing coin, drawn even in eval


def test_every_model_class_is_built_here():
    classes = {name for name in attnlab.models.__all__ if isinstance(getattr(attnlab.models, name), type)}
    assert classes == {name.split("-")[0] for name in MODEL_BUILDERS}


@pytest.mark.parametrize("name", sorted(MODEL_BUILDERS))
def test_building_a_model_draws_from_torch_only(name):
    # By design (nn.Module's contract): initial weights come from torch's global generator,
    # so the same torch.manual_seed gives the same model. numpy and Python are not touched.
    torch.manual_seed(7)
    moved_by_build = calls(MODEL_BUILDERS[name])
    assert moved_by_build <= {"torch"}
    torch.manual_seed(7)
    first = MODEL_BUILDERS[name]().state_dict()
    torch.manual_seed(7)
    second = MODEL_BUILDERS[name]().state_dict()
    torch.testing.assert_close(first, second, rtol=0, atol=0)


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_a_squares_model_in_eval_mode_draws_nothing_but_the_attention_labs_coin(name):
    model = MODEL_BUILDERS[name]().eval()
    x = _seq2seq_inputs()
    with torch.no_grad():
        moved_by_forward = calls(lambda: model(x))
    assert moved_by_forward == ({"torch"} if name in COIN_IN_EVAL else set())


# The trainer.


def test_trainer_train_with_a_seed_seeds_torch_and_python_and_never_numpy():
    # By design (the book's set_seed): afterwards, torch's and Python's streams depend on the
    # seed and the epochs run, not on what they were before; numpy's is never touched.
    ends = []
    for before_seed in (1, 2):
        trainer = make_trainer()
        torch.manual_seed(before_seed)
        random.seed(before_seed)
        before = rng_states()
        trainer.train(2, seed=11)
        assert moved(before, rng_states()) == {"torch", "python"}
        ends.append(rng_states())
    assert moved(ends[0], ends[1]) == set()


def test_trainer_first_train_without_a_seed_seeds_42():
    # By design (the book's train(seed=42)): the first call seeds; numpy is never touched.
    trainer = make_trainer()
    torch.manual_seed(5)
    before = rng_states()
    trainer.train(1)
    assert moved(before, rng_states()) == {"torch", "python"}
    after_default = rng_states()
    again = make_trainer()
    torch.manual_seed(6)
    again.train(1, seed=42)
    assert moved(after_default, rng_states()) == set()


def test_trainer_predict_save_read_plot_and_lr_test_leave_every_stream_alone(tmp_path):
    trainer = make_trainer()
    trainer.train(1)
    trainer.model.train()  # predict must not draw dropout masks even so
    x = torch.randn(5, 3)
    path = tmp_path / "c.pt"
    entries = {
        "predict": lambda: trainer.predict(x),
        "save_checkpoint": lambda: trainer.save_checkpoint(path),
        "read_checkpoint": lambda: read_checkpoint(path),
        "plot_losses": lambda: trainer.plot_losses(),
        "lr_range_test": lambda: trainer.lr_range_test(trainer.train_loader, end_lr=1.0, num_iter=5),
        "count_parameters": lambda: trainer.count_parameters(),
    }
    fresh = make_trainer()  # built before the snapshots: building draws weights
    entries["load_checkpoint(restore_rng=False)"] = lambda: fresh.load_checkpoint(path, restore_rng=False)
    entries["predict after load_checkpoint"] = lambda: fresh.predict(x)
    for name, entry in entries.items():
        assert calls(entry) == set(), name


def test_trainer_load_checkpoint_restores_the_saved_streams(tmp_path):
    # By design: resuming restores torch's and Python's streams as they were at the save.
    trainer = make_trainer()
    trainer.train(1)
    saved = rng_states()
    path = trainer.save_checkpoint(tmp_path / "c.pt")
    fresh = make_trainer()
    torch.manual_seed(99)
    random.seed(99)
    fresh.load_checkpoint(path)
    assert moved(saved, rng_states()) == set()


# The run helpers behind `attnlab train/predict/plot/compare`.


def test_the_commands_leave_every_stream_alone(two_processes):
    # train_run, load_run + predict_corners and run_compare, in the fresh processes above:
    # they seed and draw (the trainer's contract) on a copy of the caller's streams.
    for folder in two_processes:
        probe = json.loads((folder / "probe.json").read_text())
        assert probe["moved"] == {"train": [], "predict": [], "compare": []}


def test_run_helpers_leave_every_stream_alone(two_processes):
    folder = two_processes[0] / "run"  # the attention lab's GRU with attention
    config, model, _ = load_run(folder)
    squares = runs.test_squares(config)
    entries = {
        **{f"build_model({name})": (lambda name=name: build_model(SquaresConfig(model=name)))
           for name in SQUARES_MODELS},
        "load_run": lambda: load_run(folder),
        "predict_corners": lambda: predict_corners(model, squares.source[:3]),  # a GRU: its coin drawn in eval
        "attention_figures": lambda: attention_figures(model, squares),
    }
    for name, entry in entries.items():
        assert calls(entry) == set(), name


def test_build_model_still_gives_the_seeded_weights():
    # Leaving the caller's streams alone did not change which weights a config gives:
    # the positional-encoding lab's model after torch.manual_seed(43), built as the lab builds it.
    torch.manual_seed(43)
    encoder = EncoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
    decoder = DecoderPe(n_heads=3, d_model=2, ff_units=10, n_features=2)
    labs_model = EncoderDecoderSelfAttn(encoder, decoder, input_len=2, target_len=2)
    torch.manual_seed(0)
    torch.testing.assert_close(build_model(SquaresConfig()).state_dict(), labs_model.state_dict(), rtol=0, atol=0)
