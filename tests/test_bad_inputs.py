"""The catalogue of bad inputs: every one gets the exact error type and a message naming the argument and value.

Two tables. ``LIBRARY``: a call into the library, the exception type it must raise
and a regular expression the message must match (the argument's name and the value
it was given). ``CLI``: a command line that must print exactly one line on stderr,
exit with status 2, show no traceback, print nothing on stdout, and leave every file
already in its folder (a trained run folder among them) byte for byte as it was.

``pytest tests/test_bad_inputs.py -q`` counts them: one test per row.

NaN and infinity are refused where checking is cheap: numbers given as arguments
(a base, a scale, a learning rate, a point on the command line) and the tables the
audit reads. Tensors flowing through attention and the models are not scanned (a
full pass over the data and, on an accelerator, a device sync, on every call); what
happens to them is documented in ``attend`` and tested in ``test_properties.py``.
"""

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.analysis import audit
from attnlab.attention import Attention, LabMultiHeadAttention, MultiHeadAttention, attend, causal_mask
from attnlab.cli import main
from attnlab.data import TaskSpec, generate_sequences, make_loaders, make_task_batch, pad_sequences
from attnlab.encodings import (
    ALiBi,
    LearnedPositionalEncoding,
    PositionalEncoding,
    Rotary,
    ShawRelative,
    T5RelativeBias,
    fixed_base,
    shift_matrix,
    sinusoidal,
)
from attnlab.labs.lengths.config import CompareConfig
from attnlab.models import (
    DecoderOnlyTransformer,
    DecoderPe,
    Encoder,
    EncoderDecoderSelfAttn,
    EncoderPe,
    Transformer,
)
from attnlab.training import Trainer

pytestmark = pytest.mark.bad_input("catalogue")

Q = torch.randn(2, 2, 4, 8)  # [B, H, L, Dh]


def _pe_lab_model() -> EncoderDecoderSelfAttn:
    return EncoderDecoderSelfAttn(EncoderPe(3, 2, 10, n_features=2), DecoderPe(3, 2, 10, n_features=2),
                                  input_len=2, target_len=2)


def _trainer() -> Trainer:
    model = nn.Linear(2, 2)
    return Trainer(model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1))


LIBRARY = [
    # attention core: ranks, shapes, masks, dtypes, numbers
    ("attend: query of rank 3", lambda: attend(torch.randn(2, 4, 8), Q, Q), ValueError,
     r"query must have shape \[B, H, L, D\] \(4 dims\), got \[2, 4, 8\]"),
    ("attend: key width differs", lambda: attend(Q, torch.randn(2, 2, 4, 6), Q), ValueError,
     r"query and key must have the same width Dh.*key \[2, 2, 4, 6\]"),
    ("attend: value length differs", lambda: attend(Q, Q, torch.randn(2, 2, 5, 8)), ValueError,
     r"key and value must have the same length S.*value \[2, 2, 5, 8\]"),
    ("attend: mask of the wrong shape", lambda: attend(Q, Q, Q, mask=torch.ones(3, 4, dtype=torch.bool)),
     ValueError, r"mask of shape \[3, 4\] does not broadcast to \[B, H, T, S\] = \[2, 2, 4, 4\]"),
    ("attend: float mask", lambda: attend(Q, Q, Q, mask=torch.ones(4, 4)), TypeError,
     r"mask must be a boolean tensor.*got torch.float32.*bias="),
    ("attend: integer bias", lambda: attend(Q, Q, Q, bias=torch.ones(4, 4, dtype=torch.long)), TypeError,
     r"bias must be a floating-point tensor.*got torch.int64"),
    ("attend: bias of the wrong shape", lambda: attend(Q, Q, Q, bias=torch.zeros(3, 4, 5)), ValueError,
     r"bias of shape \[3, 4, 5\] does not broadcast"),
    ("attend: a list for query", lambda: attend([[1.0]], Q, Q), TypeError, r"query must be a tensor, got list"),
    ("attend: integer tensors", lambda: attend(Q.long(), Q.long(), Q.long()), TypeError,
     r"query must be floating point, got dtype torch.int64"),
    ("attend: mixed dtypes", lambda: attend(Q.double(), Q, Q), TypeError,
     r"must share a dtype, got torch.float64, torch.float32"),
    ("attend: dropout 1.5", lambda: attend(Q, Q, Q, dropout_p=1.5), ValueError,
     r"dropout_p must be in \[0, 1\), got 1.5"),
    ("attend: NaN scale", lambda: attend(Q, Q, Q, scale=float("nan")), ValueError, r"scale must be finite, got nan"),
    ("causal_mask(0)", lambda: causal_mask(0), ValueError, r"n_queries must be positive, got 0"),
    ("MultiHeadAttention: heads do not divide d_model", lambda: MultiHeadAttention(3, 8), ValueError,
     r"d_model \(8\) must be divisible by n_heads \(3\)"),
    ("MultiHeadAttention: zero heads", lambda: MultiHeadAttention(0, 8), ValueError,
     r"n_heads must be positive, got 0"),
    ("MultiHeadAttention: negative d_model", lambda: MultiHeadAttention(2, -4), ValueError,
     r"d_model must be positive, got -4"),
    ("MultiHeadAttention: 2.0 heads", lambda: MultiHeadAttention(2.0, 8), TypeError,
     r"n_heads must be an integer, got 2.0 \(float\)"),
    ("MultiHeadAttention: wrong feature size", lambda: MultiHeadAttention(2, 8)(torch.randn(2, 3, 5)), ValueError,
     r"query must have shape \[B, L, 8\], got \[2, 3, 5\]"),
    ("MultiHeadAttention: query of rank 2", lambda: MultiHeadAttention(2, 8)(torch.randn(3, 8)), ValueError,
     r"query must have shape \[B, L, 8\], got \[3, 8\]"),
    ("MultiHeadAttention: mask of the wrong shape",
     lambda: (lambda x: MultiHeadAttention(2, 8)(x, x, x, mask=torch.ones(2, 4, 4, dtype=torch.bool)))(
         torch.randn(2, 3, 8)), ValueError, r"mask of shape \[2, 1, 4, 4\] does not broadcast"),
    ("LabMultiHeadAttention: no keys initialised",
     lambda: LabMultiHeadAttention(2, 8)(torch.randn(2, 3, 8)),
     RuntimeError, r"no keys: call init_keys\(keys\) first"),
    ("MultiHeadAttention: dropout 2", lambda: MultiHeadAttention(2, 8, dropout=2.0), ValueError,
     r"dropout must be in \[0, 1\), got 2.0"),
    ("Attention: zero hidden_dim", lambda: Attention(0), ValueError, r"hidden_dim must be positive, got 0"),
    # encodings
    ("sinusoidal: max_len 0", lambda: sinusoidal(0, 8), ValueError, r"max_len must be positive, got 0"),
    ("sinusoidal: d_model 0", lambda: sinusoidal(10, 0), ValueError, r"d_model must be positive, got 0"),
    ("sinusoidal: max_len 10.5", lambda: sinusoidal(10.5, 8), TypeError, r"max_len must be an integer, got 10.5"),
    ("sinusoidal: unknown layout", lambda: sinusoidal(10, 8, layout="foo"), ValueError,
     r"unknown layout 'foo'; known: 'interleaved', 'concat', 't2t'"),
    ("sinusoidal: negative base", lambda: sinusoidal(10, 8, base=-1.0), ValueError, r"base must be positive, got -1.0"),
    ("sinusoidal: NaN base", lambda: sinusoidal(10, 8, base=float("nan")), ValueError, r"base must be finite, got nan"),
    ("sinusoidal: infinite base", lambda: sinusoidal(10, 8, base=float("inf")), ValueError,
     r"base must be finite, got inf"),
    ("fixed_base: no bases", lambda: fixed_base(10, ()), ValueError, r"bases must name at least one base"),
    ("fixed_base: a negative base", lambda: fixed_base(10, (4, -5)), ValueError,
     r"bases\[1\] must be positive, got -5"),
    ("shift_matrix: odd d_model", lambda: shift_matrix(1, 7), ValueError, r"shift_matrix needs an even d_model, got 7"),
    ("PositionalEncoding: d_model 0", lambda: PositionalEncoding(2, 0), ValueError, r"d_model must be positive, got 0"),
    ("PositionalEncoding: wrong width", lambda: PositionalEncoding(4, 8)(torch.randn(1, 3, 6)), ValueError,
     r"expects x of shape \[B, L, 8\], got \[1, 3, 6\]"),
    ("LearnedPositionalEncoding: longer than its table",
     lambda: LearnedPositionalEncoding(4, 8)(torch.randn(1, 6, 8)), ValueError, r"length 6.*max_len=4"),
    ("Rotary: odd head_dim", lambda: Rotary(7), ValueError, r"head_dim must be even.*got head_dim=7"),
    ("ALiBi: zero heads", lambda: ALiBi(0), ValueError, r"n_heads must be positive, got 0"),
    ("T5RelativeBias: zero buckets", lambda: T5RelativeBias(2, num_buckets=0), ValueError,
     r"num_buckets must be positive, got 0"),
    ("ShawRelative: head_dim 0", lambda: ShawRelative(0), ValueError, r"head_dim must be positive, got 0"),
    ("audit: a vector", lambda: audit(torch.randn(10)), ValueError,
     r"table must have shape \[L, D\] or \[1, L, D\], got \[10\]"),
    ("audit: NaN in the table", lambda: audit(torch.full((10, 4), float("nan"))), ValueError,
     r"table must hold finite numbers, got nan at position 0, column 0"),
    # data
    ("generate_sequences: n 0", lambda: generate_sequences(n=0), ValueError, r"n must be positive, got 0"),
    ("generate_sequences: seed 'a'", lambda: generate_sequences(seed="a"), TypeError,
     r"seed must be an integer or None, got 'a' \(str\)"),
    ("make_loaders: batch_size 0", lambda: make_loaders(batch_size=0), ValueError,
     r"batch_size must be positive, got 0"),
    ("make_task_batch: unknown task", lambda: make_task_batch("add", 4, 4, generator=0), ValueError,
     r"task 'add' is not one of copy, reverse, duplicate, sort"),
    ("make_task_batch: zero sequences", lambda: make_task_batch("copy", 0, 4, generator=0), ValueError,
     r"n must be positive, got 0"),
    ("TaskSpec: train_len 0", lambda: TaskSpec(train_len=0), ValueError, r"train_len must be positive, got 0"),
    ("pad_sequences: nothing to pad", lambda: pad_sequences([]), ValueError,
     r"points is empty; need at least one sequence"),
    # models
    ("Transformer: heads do not divide d_model", lambda: Transformer(vocab_size=10, d_model=30, n_heads=4),
     ValueError, r"d_model \(30\) must be divisible by n_heads \(4\)"),
    ("Transformer: unknown encoding", lambda: Transformer(vocab_size=10, position="wavelet"), ValueError,
     r"wavelet.*sinusoidal"),
    ("Transformer: an empty source",
     lambda: Transformer(vocab_size=10)(torch.ones(1, 0, dtype=torch.long), torch.ones(1, 2, dtype=torch.long)),
     ValueError, r"source is empty"),
    ("DecoderOnlyTransformer: longer than a learned table",
     lambda: DecoderOnlyTransformer(vocab_size=10, position="learned", max_len=4)(torch.ones(1, 6, dtype=torch.long)),
     ValueError, r"max_len=4"),
    ("DecoderOnlyTransformer: ids outside the vocabulary",
     lambda: DecoderOnlyTransformer(vocab_size=10)(torch.tensor([[3, 10]])), ValueError,
     r"x holds ids from 3 to 10; the vocabulary is 0..9"),
    ("the PE lab's model: three features for two", lambda: _pe_lab_model()(torch.randn(1, 4, 3)), ValueError,
     r"shape \[B, L, 2\], got \[1, 2, 3\]"),
    ("the PE lab's model: a batch of rank 2", lambda: _pe_lab_model()(torch.randn(4, 2)), ValueError,
     r"X must have shape \[B, L, F\] \(3 dims\), got \[4, 2\]"),
    ("the PE lab's model: too short to train on", lambda: _pe_lab_model().train()(torch.randn(1, 3, 2)), ValueError,
     r"X has 3 steps; training .* needs 4"),
    ("GRU encoder: hidden_dim 0", lambda: Encoder(n_features=2, hidden_dim=0), ValueError,
     r"hidden_dim must be positive, got 0"),
    # training and the lab
    ("Trainer: a string for a model", lambda: Trainer("x", nn.MSELoss(), None), TypeError,
     r"model must be a torch.nn.Module, got str"),
    ("Trainer: a string for an optimizer", lambda: Trainer(nn.Linear(2, 2), nn.MSELoss(), "adam"), TypeError,
     r"optimizer must be a torch.optim.Optimizer, got str"),
    ("Trainer.train(-1)", lambda: _trainer().train(-1), ValueError, r"n_epochs must be positive, got -1"),
    ("Trainer.train without loaders", lambda: _trainer().train(1), ValueError,
     r"no training data: call set_loaders"),
    ("CompareConfig: unknown encoding", lambda: CompareConfig(encodings=("rotary", "wavelet")), ValueError,
     r"unknown encoding 'wavelet'; known: 'sinusoidal'"),
    ("CompareConfig: NaN learning rate", lambda: CompareConfig(lr=float("nan")), ValueError, r"lr .*nan"),
    ("CompareConfig: unknown architecture", lambda: CompareConfig(architecture="rnn"), ValueError,
     r"unknown architecture 'rnn'; known: 'decoder-only', 'encoder-decoder'"),
]


@pytest.mark.parametrize(("call", "error", "match"), [case[1:] for case in LIBRARY],
                         ids=[case[0] for case in LIBRARY])
def test_library_bad_input(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert type(info.value) is error  # the exact type, not a subclass or a parent


# -- the command line ----------------------------------------------------------------------

CLI = [
    # unknown names
    (["frobnicate"], r"invalid choice: 'frobnicate'"),
    (["encode", "--layout", "spiral"], r"--layout: invalid choice: 'spiral'"),
    (["audit", "--encoding", "wavelet"], r"--encoding: invalid choice: 'wavelet'"),
    (["plot", "dials-of-doom", "--out", "x.png"], r"invalid choice: 'dials-of-doom'"),
    (["train", "--model", "lstm"], r"--model: invalid choice: 'lstm'"),
    (["compare", "--encodings", "rotary,wavelet"], r"unknown encoding 'wavelet'; known: 'sinusoidal'"),
    (["compare", "--task", "division"], r"unknown task 'division'; known: 'copy'"),
    (["compare", "--architecture", "rnn"], r"unknown architecture 'rnn'"),
    (["plot", "attention", "--run", "runs/ok", "--layer", "nope", "--out", "x.png"], r"unknown --layer 'nope'"),
    # numbers
    (["encode", "--d-model", "0"], r"--d-model: must be positive, got 0"),
    (["encode", "--max-len", "-3"], r"--max-len: must be positive, got -3"),
    (["train", "--epochs", "-1"], r"--epochs: must be positive, got -1"),
    (["train", "--epochs", "many"], r"--epochs.*'many'"),
    (["train", "--lr", "nan"], r"--lr: must be a positive finite number, got nan"),
    (["train", "--lr", "0"], r"--lr: must be a positive finite number, got 0"),
    (["train", "--batch-size", "0"], r"--batch-size: must be positive, got 0"),
    (["train", "--seed", "abc"], r"--seed: expected a whole number, got 'abc'"),
    (["compare", "--test-lens", "4,x"], r"--test-lens: expected comma-separated whole numbers, got '4,x'"),
    (["compare", "--seeds", "0"], r"--seeds: must be positive, got 0"),
    # points
    (["predict", "--run", "runs/ok", "--points", "1,2 x"], r"--points '1,2 x': cannot read 'x' as 'x,y'"),
    (["predict", "--run", "runs/ok", "--points", "1,2"], r"--points '1,2': expected two points"),
    (["predict", "--run", "runs/ok", "--points", "1,2,3 4,5"], r"cannot read '1,2,3' as 'x,y'"),
    (["predict", "--run", "runs/ok", "--points", "nan,1 1,1"], r"'nan,1' is not finite"),
    (["predict", "--run", "runs/ok", "--points", "1,1 1,-inf"], r"'1,-inf' is not finite"),
    # run folders and checkpoints
    (["predict", "--run", "runs/missing", "--points", "1,1 1,-1"], r"--run 'runs/missing' is not a run folder"),
    (["plot", "losses", "--run", "runs/missing", "--out", "x.png"], r"--run 'runs/missing' is not a run folder"),
    (["train", "--out", "runs/ok"], r"--out 'runs/ok' already holds a train run; add --resume"),
    (["train", "--resume", "--out", "runs/empty"], r"'runs/empty' holds no train run to resume"),
    (["predict", "--run", "runs/corrupt", "--points", "1,1 1,-1"], r"checkpoint"),
    # output files and folders
    (["encode", "--out", "nodir/pe.npy"], r"--out 'nodir/pe.npy': folder 'nodir' does not exist"),
    (["encode", "--out", "a_file/pe.npy"], r"--out 'a_file/pe.npy': 'a_file' is not a folder"),
    (["encode", "--out", "/proc/pe.npy"], r"--out '/proc/pe.npy': folder '/proc' is not writable"),
    (["encode", "--out", "pe.txt"], r"--out 'pe.txt': expected a .npy or .csv file name"),
    (["plot", "predictions", "--run", "runs/ok", "--out", "x.txt"], r"--out 'x.txt': expected a .png"),
    (["plot", "losses", "--run", "runs/ok", "--out", "nodir/x.png"], r"folder 'nodir' does not exist"),
    (["train", "--out", "a_file"], r"--out 'a_file' is a file"),
    (["train", "--out", "/proc/run"], r"--out '/proc/run'.*not writable"),
    (["compare", "--out", "a_file"], r"--out 'a_file' is a file"),
    (["compare", "--out", "/proc/cmp"], r"--out '/proc/cmp'.*not writable"),
]


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and a hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder with a trained run, an empty run folder, a corrupt checkpoint and a plain file."""
    root = tmp_path_factory.mktemp("cli")
    code = main(["train", "--epochs", "2", "--out", str(root / "runs" / "ok"), "--no-progress"])
    assert code == 0
    (root / "runs" / "empty").mkdir()
    corrupt = root / "runs" / "corrupt"
    corrupt.mkdir()
    for name in ("config.json", "metrics.jsonl"):
        (corrupt / name).write_bytes((root / "runs" / "ok" / name).read_bytes())
    (corrupt / "checkpoint.pt").write_bytes(b"not a checkpoint at all")
    (root / "a_file").write_text("keep me")
    return root


@pytest.mark.parametrize(("argv", "match"), CLI, ids=[" ".join(argv) for argv, _ in CLI])
def test_cli_bad_input(argv, match, workspace, monkeypatch, capsys):
    monkeypatch.chdir(workspace)
    before = _snapshot(workspace)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnlab"), err
    assert "Traceback" not in err
    assert re.search(match, lines[0]), lines[0]
    assert _snapshot(workspace) == before  # nothing created, nothing changed, nothing lost


def test_the_catalogue_is_big_enough():
    assert len(LIBRARY) + len(CLI) >= 40
    assert len({name for name, *_ in LIBRARY}) == len(LIBRARY)
    assert np.unique([" ".join(argv) for argv, _ in CLI]).size == len(CLI)
