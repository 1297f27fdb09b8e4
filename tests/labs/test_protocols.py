"""The protocols: Ruoss et al.'s sampling rule replayed, fresh batches and their loss, Kazemnejad et al.'s rotary."""

import random

import pytest
import torch
import torch.nn.functional as F

from attnlab.data import PAD
from attnlab.data.tasks.layouts import encoder_only_batch
from attnlab.data.tasks.registry import task_named
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.protocols import CURRICULUM_SEED, FreshBatches, protocol_named, ruoss_lengths
from attnlab.labs.lengths.train import build_model, task_sets


def reference_lengths(seed, steps, values):
    """The reference's rule, as its code runs it: Python's global random, seeded, then random.choice per step
    (google-deepmind/randomized_positional_encodings, experiments/curriculum.py, UniformCurriculum)."""
    state = random.getstate()
    try:
        random.seed(seed)
        return [random.choice(values) for _ in range(steps)]
    finally:
        random.setstate(state)


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_ruoss_lengths_replay_the_reference_rule(seed):
    values = list(range(1, 41))  # the paper's training lengths 1..40
    assert ruoss_lengths(seed, 500, shortest=1, longest=40) == reference_lengths(seed, 500, values)
    # every length is drawn about equally often: uniform over 1..40
    drawn = ruoss_lengths(seed, 8000, shortest=1, longest=40)
    counts = [drawn.count(n) for n in values]
    assert min(counts) > 120 and max(counts) < 290  # expected 200 each; 6 sigma either way


def test_ruoss_lengths_touch_no_global_state():
    state = random.getstate()
    ruoss_lengths(3, 10, shortest=2, longest=5)
    assert random.getstate() == state


def ruoss_config(**kw):
    settings = {"task": "reverse-string", "architecture": "encoder-only", "protocol": "ruoss2023",
                "encodings": ("none",), "train_len": 6, "test_lens": (6, 9), "n_seeds": 1, "epochs": 1,
                "n_train": 8 * 16, "batch_size": 8, "n_test": 8, "d_model": 8, "n_heads": 2, "n_layers": 1}
    return CompareConfig(**{**settings, **kw})


def test_fresh_strings_one_length_per_step_unpadded_and_never_repeated():
    config = ruoss_config()
    sets = task_sets(config)
    assert sets.train is None  # no fixed set is built
    loader, epochs = config.protocol_object.batches(config, sets, seed=3)
    assert epochs == 1 and len(loader) == config.steps_per_model() == 16
    batches = list(loader)
    # the curriculum's lengths: the reference's rule at CURRICULUM_SEED, whatever the model's seed
    assert [b.source.shape[1] for b in batches] == reference_lengths(CURRICULUM_SEED, 16, list(range(1, 7)))
    for b in batches:
        assert b.source.shape[0] == 8 and bool(b.source_mask.all())  # one length: nothing padded
        assert torch.equal(b.target_out[:, :-1], b.source.flip(1))  # reverse-string's answer
    longest = [b for b in batches if b.source.shape[1] == 6]
    assert len({tuple(b.source.flatten().tolist()) for b in longest}) == len(longest)  # fresh strings
    # the same seed gives the same batches; another seed the same lengths (models of a group step together) and
    # other strings
    again = list(config.protocol_object.batches(config, sets, seed=3)[0])
    assert all(torch.equal(a.source, b.source) for a, b in zip(batches, again, strict=True))
    other = list(config.protocol_object.batches(config, sets, seed=4)[0])
    assert [b.source.shape[1] for b in other] == [b.source.shape[1] for b in batches]
    assert not all(torch.equal(a.source, b.source) for a, b in zip(batches, other, strict=True))


def test_the_ruoss_loss_sums_over_each_strings_outputs_and_averages_over_the_batch():
    # The reference's example.py: loss = mean over the batch of the sum over output positions.
    config = ruoss_config()
    task = config.task_object
    batch = task.draw(4, 5, generator=0)
    torch.manual_seed(0)
    model = build_model(config, "none")
    inputs, labels = encoder_only_batch(batch)
    logits = model(inputs).double()
    per_token = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD, reduction="none")
    expected = per_token.view(4, -1).sum(dim=1).mean()
    got = protocol_named("ruoss2023").loss(config)(model, batch)
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    # the fixed protocol's loss is the mean per token: smaller by the answer's length (5 slots)
    fixed = protocol_named("fixed").loss(config)(model, batch)
    assert got.item() == pytest.approx(5 * fixed.item(), rel=1e-5)


def test_fresh_batches_is_a_loader_of_its_length():
    drawn = []

    def draw(n, length, *, generator):
        drawn.append((n, length))
        return torch.randint(0, 9, (n, length), generator=generator)

    loader = FreshBatches(draw, [3, 1, 2], batch_size=5, seed=0)
    assert len(loader) == 3 and [b.shape for b in loader] == [(5, 3), (5, 1), (5, 2)]
    assert drawn == [(5, 3), (5, 1), (5, 2)]


def test_kazemnejad_protocol_runs_their_quarter_rotary_and_scores_exact_match():
    config = CompareConfig(task="copy-random", protocol="kazemnejad2023", encodings=("none", "rotary"),
                           train_len=4, test_lens=(4, 6), d_model=16, n_heads=2, n_layers=1)
    assert config.encodings == ("none", "rotary-quarter")  # recorded as what ran
    assert config.metric == "sequence_accuracy"
    rotary = build_model(config, "rotary-quarter").layers[0].self_attn.position
    assert rotary.rotary_dim == 2  # a quarter of head_dim 8
    assert CompareConfig(task="copy-random", protocol="ruoss2023", encodings=("none",), train_len=4,
                         test_lens=(4, 6)).metric == "token_accuracy"


@pytest.mark.bad_input("numbers")
def test_fresh_strings_refuse_a_fixed_dataset_and_unknown_protocols():
    with pytest.raises(ValueError, match="protocol 'ruoss2023' draws fresh strings at every step, and the scan task "
                                         "is a fixed set"):
        CompareConfig(task="scan", protocol="ruoss2023", encodings=("none",), train_len=22, test_lens=(22, 24))
    with pytest.raises(ValueError, match="the squares task is a fixed set"):
        CompareConfig(task="squares", protocol="ruoss2023", encodings=("none",), train_len=4, test_lens=(4, 6))
    with pytest.raises(ValueError, match="the scan task is a fixed set of commands"):
        task_named("scan").draw(2, 24, generator=0)
    with pytest.raises(ValueError, match="unknown protocol 'vaswani'"):
        CompareConfig(protocol="vaswani")


def test_a_config_without_its_protocol_is_refused():
    d = ruoss_config().to_dict()
    del d["protocol"]
    with pytest.raises(ValueError, match="protocol"):
        CompareConfig.from_dict(d)
    assert task_named("reverse-string").name == "reverse-string"
