"""Encodings that take their positions from the task (Abacus, position coupling) inside the models and the lab."""

import pytest
import torch

from attnlab.data.tasks.layouts import decoder_only_batch
from attnlab.data.tasks.registry import task_named
from attnlab.encodings.registry import task_positions
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.train import task_sets, train_one
from attnlab.models import DecoderOnlyTransformer, EncoderOnlyTransformer

NAMES = ["abacus", "coupling"]


@pytest.mark.parametrize("name", NAMES)
def test_the_models_declare_the_rule_and_refuse_to_guess_positions(name):
    assert task_positions(name) == name and task_positions("rotary") is None
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(vocab_size=16, d_model=16, n_heads=2, n_layers=1, position=name, max_len=64)
    assert model.task_positions == name
    with pytest.raises(ValueError, match="position_ids"):
        model(torch.randint(3, 16, (2, 6)))


@pytest.mark.parametrize("name", NAMES)
def test_cached_generation_with_the_tasks_positions_equals_uncached(name):
    task = task_named("reversed-addition")
    batch = task.draw(3, 4, generator=0)
    inputs = decoder_only_batch(batch)[0]  # [3, 10 + 6]
    whole = torch.nn.functional.pad(inputs, (0, 1))
    ids = task.positions(whole, name)  # [3, 17]: the answer's positions known up front
    torch.manual_seed(1)
    model = DecoderOnlyTransformer(vocab_size=16, d_model=16, n_heads=2, n_layers=1, position=name, max_len=64).eval()
    prompt = inputs[:, :11]  # source and BOS
    cached = model.generate(prompt, 6, position_ids=ids, use_cache=True)
    uncached = model.generate(prompt, 6, position_ids=ids, use_cache=False)
    assert torch.equal(cached, uncached)
    # the positions matter: numbering the tokens by their order instead gives other logits
    order = torch.arange(17).expand(3, 17)
    assert not torch.allclose(model(whole, position_ids=ids), model(whole, position_ids=order))


def test_equal_digit_indices_read_the_same_row_of_the_abacus_table():
    torch.manual_seed(0)
    model = EncoderOnlyTransformer(vocab_size=16, d_model=16, n_heads=2, n_layers=1, position="abacus",
                                   max_len=64).eval()
    h = torch.zeros(1, 4, 16)
    out = model.input_position(h, position_ids=torch.tensor([[1, 2, 1, 2]]))
    assert torch.equal(out[0, 0], out[0, 2]) and not torch.equal(out[0, 0], out[0, 1])


@pytest.mark.parametrize("architecture", ["decoder-only", "encoder-only"])
def test_the_lab_trains_and_scores_with_the_tasks_positions(architecture):
    config = CompareConfig(task="reversed-addition", architecture=architecture, encodings=("abacus",), train_len=3,
                           test_lens=(3, 5), n_seeds=1, epochs=1, n_train=64, n_test=8, batch_size=16, d_model=16,
                           n_heads=2, n_layers=1)
    result = train_one(config, task_sets(config), "abacus", 0)
    assert [r["length"] for r in result.records] == [3, 5]
    assert all(0.0 <= r["token_accuracy"] <= 1.0 for r in result.records)
    with pytest.raises(ValueError, match="encoding 'abacus' takes its positions from the task, and the copy task "
                                         "has none"):
        CompareConfig(task="copy", encodings=("abacus",), train_len=3, test_lens=(3, 5))
    with pytest.raises(ValueError, match="give it a decoder-only or encoder-only architecture"):
        CompareConfig(task="reversed-addition", encodings=("coupling",), architecture="encoder-decoder", train_len=3,
                      test_lens=(3, 5))
