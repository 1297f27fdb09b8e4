"""``group_size``: the models of one encoding trained together give each model the records it gets alone.

The reference is :func:`attnlab.labs.lengths.train.train_one`, one model at a time, run side by
side. In float32 (the lab's dtype) on the CPU the grouped computation is the alone one bit for bit
(the batched matmuls, attention and embedding give one model's numbers, the layer norms run member
by member, GroupAdam is torch's Adam/AdamW update), so the records and weights are compared exactly;
in float64 the weights agree to rounding (1e-10).
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

from attnlab.labs.lengths import sweep
from attnlab.labs.lengths.compare import groups, run_compare
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.saved import MODELS, model_name
from attnlab.labs.lengths.train import task_sets, train_one, train_seeds

# Dropout at every site, a randomized scheme and a plain one, the two architectures a group takes.
TINY = dict(task="reverse", train_len=5, test_lens=(5, 8), n_seeds=3, epochs=2, n_train=48, n_test=16, batch_size=8,
            d_model=16, n_heads=2, n_layers=2, ff_units=32, dropout=0.1, lr=3e-3)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster here

@pytest.mark.parametrize(("protocol", "architecture", "encoding"), [
    ("ruoss2023", "encoder-only", "random-alibi"),  # fresh strings of one length per step, Adam
    ("fixed", "decoder-only", "t5"),  # a padded set shuffled per seed: members' batches differ in length
    ("kazemnejad2023", "decoder-only", "none"),  # AdamW with weight decay on the matrices only
])
def test_a_group_gives_each_model_the_records_and_weights_of_train_one(protocol: str, architecture: str,
                                                                        encoding: str) -> None:
    config = CompareConfig(**TINY, protocol=protocol, architecture=architecture, encodings=(encoding,))
    sets = task_sets(config)
    grouped = train_seeds(config, sets, config.encodings[0], [0, 1, 2])
    for result in grouped:
        alone = train_one(config, sets, config.encodings[0], result.seed)
        assert result.records == alone.records
        for name, tensor in alone.state_dict.items():
            assert torch.equal(result.state_dict[name], tensor), name
        assert result.n_parameters == alone.n_parameters


def test_in_float64_the_weights_agree_to_rounding() -> None:
    config = CompareConfig(**TINY, protocol="ruoss2023", architecture="encoder-only", encodings=("random-rotary",))
    sets = task_sets(config)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        grouped = train_seeds(config, sets, "random-rotary", [2, 0])
        alone = [train_one(config, sets, "random-rotary", seed) for seed in (2, 0)]
    finally:
        torch.set_default_dtype(before)
    for g, a in zip(grouped, alone, strict=True):
        assert g.seed == a.seed and g.records == a.records
        assert next(iter(a.state_dict.values())).dtype == torch.float64
        worst = max((g.state_dict[k] - v).abs().max().item() for k, v in a.state_dict.items())
        assert worst < 1e-10, worst


class CountingBar:
    def __init__(self) -> None:
        self.n = 0

    def update(self, steps: int) -> None:
        self.n += steps

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass


def test_group_size_3_gives_the_records_of_group_size_1_and_counts_every_step() -> None:
    config = CompareConfig(**{**TINY, "n_seeds": 4}, protocol="ruoss2023", architecture="encoder-only",
                           encodings=("random-alibi", "alibi"))
    one = run_compare(config, progress=False, device="cpu")
    grouped = dataclasses.replace(config, group_size=3)
    assert groups(grouped, grouped.runs()) == [("random-alibi", (0, 1, 2)), ("random-alibi", (3,)),
                                               ("alibi", (0, 1, 2)), ("alibi", (3,))]
    bar = CountingBar()
    results = list(sweep.in_process(grouped, groups(grouped, grouped.runs()), bar))
    assert bar.n == grouped.steps_per_model() * len(grouped.runs())
    assert {(r.encoding, r.seed) for r in results} == set(config.runs())
    three = run_compare(grouped, progress=False, device="cpu")
    assert three.records == one.records


@pytest.mark.process
def test_group_size_3_with_two_workers_gives_the_records_of_group_size_1() -> None:
    config = CompareConfig(**TINY, protocol="ruoss2023", architecture="decoder-only", encodings=("rotary", "alibi"))
    one = run_compare(config, progress=False, device="cpu")
    three = run_compare(dataclasses.replace(config, group_size=3), progress=False, jobs=2, device="cpu")
    assert three.records == one.records


@pytest.mark.training
def test_resume_of_a_partly_saved_group_trains_only_its_missing_seeds(tmp_path, monkeypatch) -> None:
    config = CompareConfig(**TINY, protocol="ruoss2023", architecture="encoder-only", encodings=("alibi",),
                           group_size=3)
    whole = run_compare(config, tmp_path / "run", progress=False, device="cpu")
    shutil.rmtree(tmp_path / "run" / MODELS / model_name("alibi", 1))
    shutil.rmtree(tmp_path / "run" / MODELS / model_name("alibi", 2))
    trained = []

    def spy(config, sets, encoding, seeds, **kwargs):  # type: ignore[no-untyped-def]
        trained.append((encoding, tuple(seeds)))
        return train_seeds(config, sets, encoding, seeds, **kwargs)

    monkeypatch.setattr(sweep, "train_seeds", spy)
    resumed = run_compare(config, tmp_path / "run", resume=True, progress=False, device="cpu")
    assert trained == [("alibi", (1, 2))]
    assert resumed.records == whole.records


def test_group_size_is_a_checked_and_recorded_setting() -> None:
    assert CompareConfig().group_size == 1
    assert CompareConfig(group_size=4).to_dict()["group_size"] == 4
    partial = {k: v for k, v in CompareConfig().to_dict().items() if k != "group_size"}
    with pytest.raises(ValueError, match="group_size"):
        CompareConfig.from_dict(partial)  # a missing setting is refused, never filled in
    with pytest.raises(ValueError, match="group_size"):
        CompareConfig(group_size=0)
    with pytest.raises(TypeError, match="group_size"):
        CompareConfig(group_size=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="encoder-decoder"):
        CompareConfig(group_size=2, architecture="encoder-decoder")


@pytest.mark.bad_input("tracebacks and messages")
@pytest.mark.parametrize(("step", "said"), [
    (0, r"the training loss of seed 4 is nan at step 1, with the model's initial weights, before any update, so "
        r"the learning rate is not the cause: .*check encoding 'mine:Scheme'"),
    (1, r"the training loss of seed 4 is nan at step 2 \(epoch 1\): training diverged; lower the learning rate"),
    (7, r"the training loss of seed 4 is nan at step 8 \(epoch 2\): training diverged"),
])
def test_a_groups_loss_bad_at_its_first_step_names_the_encoding_not_the_rate(step, said):
    from attnlab.labs.lengths.train import _check_finite

    losses = torch.ones(8, 2)  # [steps, G]
    losses[step, 1] = float("nan")
    with pytest.raises(FloatingPointError, match=said):
        _check_finite(losses, [3, 4], epochs=2, encoding="mine:Scheme")
