"""Crafted checkpoints, decompression bombs and special files (issue 13, classes 1 and 2).

A checkpoint is a zip archive of pickled plain data, so an attacker (or a bad
disk, or a careless copy) can hand attnlab one whose every key is right and
whose tensors are not: Adam state of the wrong size, which the fused Adam kernel
then writes past; a random-number state of the wrong length; a deflated entry
that expands to 4 GB; a FIFO where the file should be. Each must be refused
before any of it reaches a kernel or is decompressed, with one line naming the
file and the offending entry: a ValueError from the library
(``Trainer.load_checkpoint``, ``attnlab.labs.squares.train.load_run``) and exit
status 2 from ``attnlab train --resume`` and ``attnlab predict``.

Kinds (``pytest -m bad_input``): "memory safety" for crafted state, "decompression
bombs" for oversized or compressed ballast, "resource limits" for special files.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import resource
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from attnlab.cli import main
from attnlab.labs.squares.train import SquaresConfig, build_model, load_run, make_optimizer
from attnlab.training import Trainer

MEMORY, BOMBS, RESOURCES = "memory safety", "decompression bombs", "resource limits"
CHECKPOINT = "checkpoint.pt"
RESUME = ["--epochs", "3", "--no-progress"]
POINTS = ["--points", "1,1 1,-1"]
W = "encoder.layer.self_attn_heads.linear_out.weight"  # selfattn-pe's first parameter, [2, 6]
GRU_W = "encoder.basic_rnn.weight_ih_l0"  # the GRU model's first parameter, [6, 2]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster here


# -- run folders ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A folder holding two trained runs: ``ok`` (selfattn-pe, 2 epochs by ``attnlab train``) and ``gru``
    (its config and a checkpoint after 1 epoch of the GRU model, trained through the library: only the
    checkpoint is ever read, and ``attnlab train`` would spend seconds drawing figures)."""
    root = tmp_path_factory.mktemp("checkpoints")
    assert main(["train", "--epochs", "2", "--out", str(root / "ok"), "--no-progress"]) == 0
    gru = _copy(root, "gru", dest=root / "gru")
    (gru / "config.json").write_text(json.dumps(SquaresConfig(model="gru", epochs=2).to_dict()))
    trainer = _squares_trainer(gru)
    trainer.train(1, seed=0)
    trainer.save_checkpoint(gru / CHECKPOINT)
    return root


def _copy(runs: Path, name: str, source: str = "ok", *, dest: Path | None = None) -> Path:
    dest = dest or runs / "cases" / name
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(runs / source, dest, symlinks=True)
    return dest


def _edit(run: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    """Load the run's checkpoint as plain data, let ``edit`` change it in place, save it back."""
    path = run / CHECKPOINT
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)


def _param_id(run: Path, name: str) -> int:
    """The optimizer's id of the named parameter (its index in ``model.parameters()``)."""
    return _parameter_names((run / "config.json").read_text()).index(name)


@functools.cache
def _parameter_names(config_text: str) -> list[str]:
    return [n for n, _ in build_model(SquaresConfig.from_dict(json.loads(config_text))).named_parameters()]


def _squares_trainer(run: Path) -> Trainer:
    """A trainer built as ``attnlab train`` builds it for this run (model, fused Adam, loaders)."""
    from attnlab.data import make_loaders

    config = SquaresConfig.from_dict(json.loads((run / "config.json").read_text()))
    model = build_model(config)
    trainer = Trainer(model, nn.MSELoss(), make_optimizer(model, config), progress=False)
    data = make_loaders(n_train=config.n_train, n_test=config.n_test, batch_size=config.batch_size,
                        eval_batch_size=config.eval_batch_size, shuffle_seed=config.train_seed,
                        test_draws_global=config.test_draws_global)
    trainer.set_loaders(data.train, data.test)
    return trainer


def _snapshot(folder: Path) -> dict[str, object]:
    """Each file's bytes (their hash), or for a large one its inode, size and time (any write changes one)."""
    def state(p: Path) -> object:
        info = p.stat()
        return hashlib.sha256(p.read_bytes()).hexdigest() if info.st_size < 2**20 \
            else (info.st_ino, info.st_size, info.st_mtime_ns)
    return {str(p.relative_to(folder)): state(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


# -- the refusals' contract -------------------------------------------------------------------------


def _one_line(message: str, match: str, path: Path) -> None:
    assert "\n" not in message and len(message) < 500, message
    assert str(path) in message, message
    assert re.search(match, message), message


def _library_refuses(run: Path, match: str) -> None:
    """``Trainer.load_checkpoint`` and ``load_run`` raise one ValueError naming the file; the trainer is untouched."""
    path = run / CHECKPOINT
    trainer = _squares_trainer(run)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    rng_before = torch.get_rng_state()
    with pytest.raises(ValueError) as info:
        trainer.load_checkpoint(path)
    _one_line(str(info.value), match, path)
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    assert trainer.total_epochs == 0 and trainer.losses == [] and not trainer.optimizer.state
    assert torch.equal(rng_before, torch.get_rng_state())
    with pytest.raises(ValueError) as info:
        load_run(run)
    _one_line(str(info.value), match, path)


def _cli_refuses(argv: list[str], match: str, capsys, path: Path) -> None:
    """``attnlab ARGV``: exit 2, nothing on stdout, one line on stderr naming the file, no traceback."""
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, err[-3000:]
    assert out == "", out
    assert len(lines) == 1 and lines[0].startswith("attnlab"), err[-3000:]
    assert "Traceback" not in err
    _one_line(lines[0], match, path)


def _everyone_refuses(run: Path, match: str, capsys, *, resume: bool = True, model: str | None = None) -> None:
    """The library first (so old code that would crash in training fails here instead), then ``attnlab
    predict`` and (if ``resume``) ``attnlab train --resume``; the run's files are left as they were.

    ``train --resume`` loads through ``Trainer.load_checkpoint``, checked for every case; through the
    command line (a quarter of a second each) it is tried for a few cases of each family."""
    before = _snapshot(run)
    _library_refuses(run, match)
    _cli_refuses(["predict", "--run", str(run), *POINTS], match, capsys, run / CHECKPOINT)
    if resume:
        flags = ["--model", model] if model else []
        _cli_refuses(["train", "--resume", "--out", str(run), *flags, *RESUME], match, capsys, run / CHECKPOINT)
    assert _snapshot(run) == before


# -- 1. crafted state: every key right, a tensor or number wrong ----------------------------------------


def _adam(run: Path, key: str, value: Any, name: str = W) -> Callable[[dict[str, Any]], None]:
    i = _param_id(run, name)
    return lambda s: s["optimizer_state_dict"]["state"][i].__setitem__(key, value)


def _adam_both(run: Path, value: Callable[[], torch.Tensor], name: str = W) -> Callable[[dict[str, Any]], None]:
    i = _param_id(run, name)

    def edit(s):
        s["optimizer_state_dict"]["state"][i].update(exp_avg=value(), exp_avg_sq=value())
    return edit


def _group(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda s: s["optimizer_state_dict"]["param_groups"][0].__setitem__(key, value)


def _group_params(edit: Callable[[list[int]], list[int]]) -> Callable[[dict[str, Any]], None]:
    def change(s):
        group = s["optimizer_state_dict"]["param_groups"][0]
        group["params"] = edit(group["params"])
    return change


def _rng(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda s: edit(s["rng"])


def _bytes(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.uint8)


def _python_rng(position: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(s):
        s["rng"]["python"][1][position] = value
    return edit


def _drop_state_key(run: Path, key: str) -> Callable[[dict[str, Any]], None]:
    i = _param_id(run, W)
    return lambda s: s["optimizer_state_dict"]["state"][i].pop(key)


def _model_entry(name: str, value: Callable[[torch.Tensor], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(s):
        s["model_state_dict"][name] = value(s["model_state_dict"][name])
    return edit


# (name, run -> edit of the checkpoint dict, pattern of the message). The first two are the issue's.
CRAFTED: list[tuple[str, Callable[[Path], Callable[[dict[str, Any]], None]], str]] = [
    ("adam state of one element (issue)", lambda r: _adam_both(r, lambda: torch.zeros(1)),
     r"optimizer_state_dict\['state'\]\[0\]\['exp_avg'\]: shape \(1,\) does not fit parameter 0's \(2, 6\)"),
    ("adam state 7x7 for a 2x6 parameter (issue)", lambda r: _adam_both(r, lambda: torch.zeros(7, 7)),
     r"\['state'\]\[0\]\['exp_avg'\]: shape \(7, 7\) does not fit parameter 0's \(2, 6\)"),
    # found here
    ("adam state a broadcast view of one element", lambda r: _adam_both(r, lambda: torch.zeros(1).expand(2, 6)),
     r"\['state'\]\[0\]\['exp_avg'\]: .*strides \(0, 0\)"),
    ("exp_avg float64", lambda r: _adam(r, "exp_avg", torch.zeros(2, 6, dtype=torch.float64)),
     r"\['exp_avg'\]: dtype torch.float64 does not fit parameter 0's torch.float32"),
    ("exp_avg_sq int64", lambda r: _adam(r, "exp_avg_sq", torch.zeros(2, 6, dtype=torch.int64)),
     r"\['exp_avg_sq'\]: dtype torch.int64 does not fit"),
    ("exp_avg not a tensor", lambda r: _adam(r, "exp_avg", [0.0] * 12), r"\['exp_avg'\]: a list, not a tensor"),
    ("step negative", lambda r: _adam(r, "step", torch.tensor(-1.0)), r"\['step'\]: -1.0 is not a finite number >= 0"),
    ("step NaN", lambda r: _adam(r, "step", torch.tensor(float("nan"))), r"\['step'\]: nan is not a finite number"),
    ("step a vector", lambda r: _adam(r, "step", torch.tensor([1.0, 2.0])), r"\['step'\]: .*shape \(2,\).*scalar"),
    ("step a string", lambda r: _adam(r, "step", "3"), r"\['step'\]: '3' is a str"),
    ("unknown per-parameter key", lambda r: _adam(r, "momentum_buffer", torch.zeros(2, 6)),
     r"\['state'\]\[0\]: unknown key 'momentum_buffer' for Adam"),
    ("exp_avg_sq missing", lambda r: _drop_state_key(r, "exp_avg_sq"),
     r"\['state'\]\[0\]: lacks 'exp_avg_sq'"),
    ("state for a parameter that does not exist",
     lambda r: lambda s: s["optimizer_state_dict"]["state"].__setitem__(99, {"step": torch.tensor(1.0)}),
     r"\['state'\]\[99\]: .*not a parameter id"),
    ("parameter ids repeated", lambda r: _group_params(lambda ids: [ids[0]] * len(ids)),
     r"\['param_groups'\]\[0\]\['params'\]: .*parameter 0 twice"),
    ("betas a string", lambda r: _group("betas", "0.9"), r"\['param_groups'\]\[0\]\['betas'\]: '0.9' is a str"),
    ("betas of three numbers", lambda r: _group("betas", (0.9, 0.99, 0.999)), r"\['betas'\]: 3 items, .* 2"),
    ("lr NaN", lambda r: _group("lr", float("nan")), r"\['param_groups'\]\[0\]\['lr'\]: nan is not a finite number"),
    ("amsgrad on without its state", lambda r: _group("amsgrad", True),
     r"\['state'\]\[0\]: lacks 'max_exp_avg_sq'"),
    ("differentiable with fused", lambda r: _group("differentiable", True),
     r"\['param_groups'\]\[0\]\['differentiable'\]: True, where this Adam has False"),
    ("unknown hyper-parameter", lambda r: _group("bogus", 1.0), r"\['param_groups'\]\[0\]: unknown key 'bogus'"),
    ("rng torch state of 100 bytes", lambda r: _rng(lambda g: g.__setitem__("torch", _bytes(100))),
     r"random-number state rng\['torch'\]: 100 bytes, .*5056"),
    ("rng cuda state of 3 bytes", lambda r: _rng(lambda g: g.__setitem__("cuda", [_bytes(3)])),
     r"rng\['cuda'\]\[0\]: 3 bytes"),
    ("rng python state of 10 ints", lambda r: _rng(lambda g: g["python"].__setitem__(1, list(range(10)))),
     r"rng\['python'\]\[1\]: 10 ints, .*625"),
    ("rng python word out of range", lambda r: _python_rng(0, 2**32), r"rng\['python'\]\[1\]\[0\]: 4294967296"),
    ("rng python index out of range", lambda r: _python_rng(624, 700), r"rng\['python'\]\[1\]\[624\]: 700"),
    ("rng python version 1", lambda r: _rng(lambda g: g["python"].__setitem__(0, 1)), r"rng\['python'\]\[0\]: 1"),
    ("rng python gauss_next a string", lambda r: _rng(lambda g: g["python"].__setitem__(2, "x")),
     r"rng\['python'\]\[2\]: 'x'"),
    ("rng loader state of 100 bytes",
     lambda r: _rng(lambda g: g["loaders"].__setitem__("train", [_bytes(100)])),
     r"rng\['loaders'\]\['train'\]\[0\]: 100 bytes"),
    ("model tensor float64", lambda r: _model_entry(W, lambda t: t.double()),
     rf"model_state_dict\['{W}'\]: dtype torch.float64 does not fit"),
    ("model tensor int64", lambda r: _model_entry("decoder.layer.ffn.0.bias", lambda t: t.long()),
     r"\['decoder.layer.ffn.0.bias'\]: dtype torch.int64"),
    ("model entry not a tensor", lambda r: _model_entry(W, lambda t: t.tolist()),
     rf"model_state_dict\['{W}'\]: a list, not a tensor"),
]


# the cases also tried through `attnlab train --resume`: the issue's, and a few of each family
RESUMED = {"adam state of one element (issue)", "adam state 7x7 for a 2x6 parameter (issue)",
           "adam state a broadcast view of one element", "step NaN", "betas a string", "differentiable with fused",
           "rng torch state of 100 bytes", "rng python state of 10 ints", "rng loader state of 100 bytes",
           "model tensor float64", "model entry not a tensor"}


@pytest.mark.training
@pytest.mark.bad_input(MEMORY)
@pytest.mark.parametrize(("name", "make_edit", "match"), CRAFTED, ids=[c[0] for c in CRAFTED])
def test_crafted_state_is_refused_before_it_is_loaded(runs, capsys, name, make_edit, match):
    run = _copy(runs, "crafted")
    _edit(run, make_edit(run))
    _everyone_refuses(run, match, capsys, resume=name in RESUMED)


GRU_CRAFTED = [
    ("gru: adam state of one element", lambda r: _adam_both(r, lambda: torch.zeros(1), GRU_W),
     r"\['state'\]\[0\]\['exp_avg'\]: shape \(1,\) does not fit parameter 0's \(6, 2\)"),
    ("gru: model tensor float16", lambda r: _model_entry("decoder.regression.weight", lambda t: t.half()),
     r"\['decoder.regression.weight'\]: dtype torch.float16"),
]


@pytest.mark.training
@pytest.mark.bad_input(MEMORY)
@pytest.mark.parametrize(("make_edit", "match"), [c[1:] for c in GRU_CRAFTED], ids=[c[0] for c in GRU_CRAFTED])
def test_crafted_gru_state_is_refused(runs, capsys, make_edit, match):
    run = _copy(runs, "crafted-gru", source="gru")
    _edit(run, make_edit(run))
    _everyone_refuses(run, match, capsys, model="gru")


# -- the library's own trainers: SGD momentum, schedulers, clipping ---------------------------------


def _mlp_trainer(*, momentum: float = 0.0, scheduler: bool = False) -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum) if momentum \
        else torch.optim.Adam(model.parameters(), lr=0.05)
    trainer = Trainer(model, nn.MSELoss(), optimizer, device="cpu", progress=False)
    x = torch.randn(24, 3)
    trainer.set_loaders(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                                    batch_size=8))
    if scheduler:
        trainer.set_lr_scheduler(torch.optim.lr_scheduler.StepLR(trainer.optimizer, step_size=2))
    return trainer


def _sched(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda s: s["scheduler_state_dict"].__setitem__(key, value)


LIBRARY = [  # (name, trainer settings, edit, pattern)
    ("sgd momentum buffer of the wrong shape", {"momentum": 0.9},
     lambda s: s["optimizer_state_dict"]["state"][0].__setitem__("momentum_buffer", torch.zeros(3)),
     r"\['state'\]\[0\]\['momentum_buffer'\]: shape \(3,\) does not fit parameter 0's \(8, 3\)"),
    ("scheduler last_epoch a string", {"scheduler": True}, _sched("last_epoch", "3"),
     r"scheduler_state_dict\['last_epoch'\]: '3' is a str, where this StepLR has an int"),
    ("scheduler last_epoch a float", {"scheduler": True}, _sched("last_epoch", 2.5),
     r"scheduler_state_dict\['last_epoch'\]: 2.5 is a float, where this StepLR has an int"),
    ("scheduler base_lrs of two items", {"scheduler": True}, _sched("base_lrs", [0.05, 0.05]),
     r"scheduler_state_dict\['base_lrs'\]: 2 items, where this StepLR has 1"),
    ("scheduler key missing", {"scheduler": True}, lambda s: s["scheduler_state_dict"].pop("_step_count"),
     r"scheduler_state_dict: lacks '_step_count'"),
    ("scheduler unknown key", {"scheduler": True}, _sched("bogus", 1),
     r"scheduler_state_dict: unknown key 'bogus' for StepLR"),
    ("clipping without its value", {}, lambda s: s.__setitem__("clipping", {"mode": "value"}),
     r"clipping.*clip_value"),
    ("clipping value a string", {}, lambda s: s.__setitem__("clipping", {"mode": "norm", "max_norm": "1",
                                                                          "norm_type": 2.0}),
     r"clipping.*max_norm"),
]


@pytest.mark.bad_input(MEMORY)
@pytest.mark.parametrize(("settings", "edit", "match"), [c[1:] for c in LIBRARY], ids=[c[0] for c in LIBRARY])
def test_crafted_library_state_is_refused(tmp_path, settings, edit, match):
    trainer = _mlp_trainer(**settings)
    trainer.train(1)
    state = trainer.state_dict()
    edit(state)
    path = tmp_path / "c.pt"
    torch.save(state, path)
    fresh = _mlp_trainer(**settings)
    before = [p.detach().clone() for p in fresh.model.parameters()]
    with pytest.raises(ValueError) as info:
        fresh.load_checkpoint(path)
    _one_line(str(info.value), match, path)
    assert all(torch.equal(a, b) for a, b in zip(before, fresh.model.parameters(), strict=True))
    assert fresh.total_epochs == 0 and not fresh.optimizer.state


# -- 2. decompression bombs and oversized ballast -------------------------------------------------------

ZERO_BLOCK = 40_000_000  # bytes of zeros per deflate block
SMALL = 70_000  # the ballast tensor's elements as saved: > 65535, so the pickle writes it as a 4-byte int


@functools.cache
def _deflated_zeros(n_bytes: int) -> tuple[bytes, int]:
    """A raw deflate stream of ``n_bytes`` zero bytes and their CRC-32, never holding more than 40 MB.

    After a full flush deflate forgets its window, so every further block of zeros
    compresses to the same bytes: one block is compressed and repeated.
    """
    assert n_bytes % ZERO_BLOCK == 0
    chunk = bytes(ZERO_BLOCK)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(n_bytes // ZERO_BLOCK):
        crc = zlib.crc32(chunk, crc)
    return block * (n_bytes // ZERO_BLOCK) + compressor.flush(), crc


def _rewrite_entry(path: Path, suffix: str, *, data: bytes, method: int, size: int, crc: int,
                   pickle_edit: Callable[[bytes], bytes] = lambda b: b) -> None:
    """Rewrite the zip at ``path``: the entry ending in ``suffix`` holds ``data`` as it lies in the archive,
    declared as compressed with ``method`` from ``size`` bytes of CRC ``crc``; ``data.pkl`` is edited."""
    with zipfile.ZipFile(path) as source:
        entries = [(info.filename, source.read(info)) for info in source.infolist()]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f, zipfile.ZipFile(f, "w") as out:
        for name, body in entries:
            if name.endswith("/data.pkl"):
                body = pickle_edit(body)
            if not name.endswith(suffix):
                out.writestr(name, body)
                continue
            entry = zipfile.ZipInfo(name)
            with out.open(entry, "w", force_zip64=True) as w:
                w.write(data)
            # Now say what the bytes are, in the local header and (at close) the central directory.
            entry.compress_type, entry.file_size, entry.CRC = method, size, crc
            end = f.tell()
            f.seek(entry.header_offset)
            f.write(entry.FileHeader(zip64=True))
            f.seek(end)
    tmp.replace(path)


def _storage_of(path: Path, n_bytes: int) -> str:
    """The archive entry holding the one storage of ``n_bytes`` bytes."""
    with zipfile.ZipFile(path) as archive:
        (name,) = [i.filename for i in archive.infolist() if i.file_size == n_bytes and "/data/" in i.filename]
    return name


def _numel_edit(old: int, new: int) -> Callable[[bytes], bytes]:
    """Change a tensor's element count in the pickle: its storage size and its shape (BININT opcodes)."""
    def edit(pickled: bytes) -> bytes:
        before, after = b"J" + struct.pack("<i", old), b"J" + struct.pack("<i", new)
        assert pickled.count(before) == 2, pickled.count(before)  # the storage's size and the tensor's shape
        return pickled.replace(before, after)
    return edit


def make_bomb(run: Path, *, where: str, n_bytes: int) -> None:
    """Put a float32 zero tensor of ``n_bytes`` bytes into the run's checkpoint, deflated: ``where`` is
    ``"extra"`` (a new top-level key) or ``"model"`` (a model entry). The archive stays valid: CRC,
    sizes and the pickle's element counts all say ``n_bytes``."""
    def edit(state):
        if where == "extra":
            state["ballast"] = torch.zeros(SMALL)
        else:
            state["model_state_dict"]["decoder.pe.pe"] = torch.zeros(SMALL)
    _edit(run, edit)
    path = run / CHECKPOINT
    stream, crc = _deflated_zeros(n_bytes)
    _rewrite_entry(path, _storage_of(path, SMALL * 4), data=stream, method=zipfile.ZIP_DEFLATED, size=n_bytes,
                   crc=crc, pickle_edit=_numel_edit(SMALL, n_bytes // 4))


def make_declared(run: Path, n_bytes: int) -> None:
    """An extra stored entry whose central directory declares ``n_bytes`` (its bytes are 280 kB)."""
    _edit(run, lambda s: s.__setitem__("ballast", torch.zeros(SMALL)))
    path = run / CHECKPOINT
    name = _storage_of(path, SMALL * 4)
    with zipfile.ZipFile(path) as archive:
        body = archive.read(name)
    _rewrite_entry(path, name, data=body, method=zipfile.ZIP_STORED, size=n_bytes, crc=zlib.crc32(body))


def make_stored_ballast(run: Path, n_bytes: int) -> None:
    """An extra key holding a real, uncompressed zero tensor of ``n_bytes`` bytes (a valid torch.save file)."""
    _edit(run, lambda s: s.__setitem__("ballast", torch.zeros(n_bytes // 4)))


@contextmanager
def _address_space_cap(extra: int = 3 * 2**30) -> Iterator[None]:
    """Cap this process's address space at its size now plus ``extra`` (then restore it): code that would
    inflate a bomb fails with an allocation error instead of taking the shared machine's memory."""
    with open("/proc/self/status") as f:
        vm_size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_size + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


GB4 = 4_000_000_000  # 1e9 float32 zeros

BOMBS_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("deflate bomb: 3.9 MB holding a 1e9-element tensor in an extra key (issue)",
     lambda r: make_bomb(r, where="extra", n_bytes=GB4), r"'[^']*/data/\d+' is compressed \(deflate.*4 GB"),
    # found here
    ("deflate bomb: 1e9-element tensor in the model state", lambda r: make_bomb(r, where="model", n_bytes=GB4),
     r"/data/\d+' is compressed \(deflate.*4 GB"),
    ("compressed ballast: 200 kB holding 200 MB in an extra key",
     lambda r: make_bomb(r, where="extra", n_bytes=5 * ZERO_BLOCK), r"is compressed \(deflate.*200 MB"),
    ("stored ballast: an extra 80 MiB tensor", lambda r: make_stored_ballast(r, 80 * 2**20),
     r"entries declare 83.\d MB.*more than the .* this model's checkpoint can need"),
]


@pytest.fixture(scope="module")
def bomb_runs(runs) -> dict[str, Path]:
    """A run folder per case of ``BOMBS_CASES``, by name, made once (the tests only read them)."""
    made = {}
    for i, (name, make, _) in enumerate(BOMBS_CASES):
        made[name] = _copy(runs, f"bomb-{i}")
        make(made[name])
    return made


@pytest.mark.training
@pytest.mark.bad_input(BOMBS)
@pytest.mark.parametrize(("name", "match"), [(c[0], c[2]) for c in BOMBS_CASES], ids=[c[0] for c in BOMBS_CASES])
def test_bombs_are_refused_before_decompressing(bomb_runs, capsys, name, match):
    with _address_space_cap():
        _everyone_refuses(bomb_runs[name], match, capsys)


def test_an_entry_declaring_10_gb_is_refused(runs, capsys):
    # Not counted: the old code refused it too (as truncated, once testzip ran out of bytes).
    run = _copy(runs, "declared")
    make_declared(run, 10 * 10**9)
    with _address_space_cap():
        _everyone_refuses(run, r"declares 10 GB but stores 280 kB", capsys, resume=False)


PEAK = textwrap.dedent("""
    import json, resource, sys
    import torch
    torch.set_num_threads(1)
    from attnlab.labs.squares.train import load_run
    sys.path.insert(0, {here!r})
    from test_checkpoints import _squares_trainer
    from pathlib import Path
    # The baseline: attnlab imported, a model and a trainer built, one good checkpoint loaded.
    _squares_trainer(Path({good!r})).load_checkpoint(Path({good!r}) / "checkpoint.pt")
    load_run({good!r})
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # An address-space cap (3 GiB above now) keeps code that inflates a bomb from taking the machine's memory.
    with open("/proc/self/status") as f:
        vm_size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm_size + 3 * 2**30, resource.RLIM_INFINITY))
    outcomes = {{}}
    for run in {bad!r}:
        for how in ("trainer", "load_run"):
            try:
                if how == "trainer":
                    _squares_trainer(Path(run)).load_checkpoint(Path(run) / "checkpoint.pt")
                else:
                    load_run(run)
                outcomes[run + " " + how] = "accepted"
            except ValueError as err:
                outcomes[run + " " + how] = "refused"
            except BaseException as err:
                outcomes[run + " " + how] = type(err).__name__ + ": " + str(err)[:200]
    growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024
    print(json.dumps({{"base": base * 1024, "growth": growth, "outcomes": outcomes}}))
""")


@pytest.mark.process
@pytest.mark.bad_input(BOMBS)
def test_refusals_stay_under_200_mb(runs, bomb_runs):
    """One fresh process tries every bomb, oversized and crafted case; its peak memory grows by < 200 MB."""
    bad = list(bomb_runs.values())
    declared = _copy(runs, "peak-declared")
    make_declared(declared, 10 * 10**9)
    oversized = _copy(runs, "peak-oversized")
    _edit(oversized, _adam_both(oversized, lambda: torch.zeros(7, 7)))
    bad += [declared, oversized]
    code = PEAK.format(here=str(Path(__file__).parent), good=str(runs / "ok"), bad=[str(b) for b in bad])
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report["outcomes"].values()) == {"refused"}, report["outcomes"]
    print(f"peak memory: baseline {report['base'] / 2**20:.0f} MiB, growth {report['growth'] / 2**20:.1f} MiB")
    assert report["growth"] < 200 * 2**20, report


# -- 3. special files in place of the checkpoint ---------------------------------------------------------


@contextmanager
def _fifo_unblocker(fifo: Path) -> Iterator[None]:
    """Open ``fifo`` for writing whenever a reader waits on it, and close it at once (the reader sees EOF):
    code that opens the FIFO (the old code did) fails its test instead of hanging the suite."""
    stop = threading.Event()

    def unblock() -> None:
        while not stop.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no reader waiting
                pass
            stop.wait(0.05)
    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _make_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.training
@pytest.mark.bad_input(RESOURCES)
def test_a_fifo_is_refused_unopened(runs, capsys):
    """The issue's: ``attnlab predict`` on a FIFO blocked for ever."""
    run = _copy(runs, "fifo")
    _make_fifo(run / CHECKPOINT)
    with _fifo_unblocker(run / CHECKPOINT):
        _everyone_refuses(run, r"checkpoint.pt' is not a regular file \(a FIFO", capsys)


@pytest.mark.bad_input(RESOURCES)
def test_a_symlink_to_a_fifo_is_refused_unopened(runs, capsys):
    run = _copy(runs, "fifo-link")
    fifo = run / "elsewhere.fifo"
    os.mkfifo(fifo)
    (run / CHECKPOINT).unlink()
    (run / CHECKPOINT).symlink_to(fifo)
    with _fifo_unblocker(fifo):
        _everyone_refuses(run, r"is not a regular file \(a FIFO", capsys, resume=False)


@pytest.mark.bad_input(RESOURCES)
def test_a_socket_is_refused_unopened(runs, capsys):
    run = _copy(runs, "socket")
    (run / CHECKPOINT).unlink()
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(run / CHECKPOINT))
        _everyone_refuses(run, r"is not a regular file \(a socket", capsys, resume=False)


@pytest.mark.training
@pytest.mark.bad_input(RESOURCES)
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_symlink_to_a_device_is_refused_unopened(runs, capsys, device):
    run = _copy(runs, "device")
    (run / CHECKPOINT).unlink()
    (run / CHECKPOINT).symlink_to(device)
    _everyone_refuses(run, r"is not a regular file \(a device", capsys, resume=device == "/dev/zero")


def test_a_symlink_to_a_regular_checkpoint_is_read(runs, capsys):
    # Not counted (a regression check): symlinks to regular files are fine.
    run = _copy(runs, "link")
    real = run / "real.pt"
    (run / CHECKPOINT).rename(real)
    (run / CHECKPOINT).symlink_to(real)
    assert main(["predict", "--run", str(run), *POINTS]) == 0
    _squares_trainer(run).load_checkpoint(run / CHECKPOINT)
