"""token_accuracy / sequence_accuracy / mean_squared_error: padding left out, EOS counted, bad shapes refused."""

import numpy as np
import pytest
import torch

from attnlab.data import EOS, PAD, make_task_batch
from attnlab.data.tasks.metrics import mean_squared_error, sequence_accuracy, token_accuracy

# Two targets of lengths 3 and 1 (then EOS), right-padded.
TARGET = torch.tensor([[5, 6, 7, EOS, PAD],
                       [9, EOS, PAD, PAD, PAD]])


def test_perfect_predictions():
    b = make_task_batch("reverse", 20, 6, min_len=1, generator=0)
    assert token_accuracy(b.target_out, b.target_out) == 1.0
    assert sequence_accuracy(b.target_out, b.target_out) == 1.0


def test_golden_values():
    pred = torch.tensor([[5, 6, 8, EOS, 4],   # one wrong token of 4; junk after EOS is not scored
                         [9, EOS, 3, 3, 3]])  # right
    assert token_accuracy(pred, TARGET) == pytest.approx(5 / 6)
    assert sequence_accuracy(pred, TARGET) == 0.5


def test_padding_positions_are_never_scored():
    pred = TARGET.clone()
    pred[TARGET == PAD] = 12  # whatever the model writes past the end
    assert token_accuracy(pred, TARGET) == 1.0 and sequence_accuracy(pred, TARGET) == 1.0


def test_eos_counts():
    pred = TARGET.clone()
    pred[1, 1] = 9  # right tokens, but no end: the sequence is wrong
    assert token_accuracy(pred, TARGET) == pytest.approx(5 / 6)
    assert sequence_accuracy(pred, TARGET) == 0.5


def test_token_accuracy_pools_tokens_not_sequences():
    pred = TARGET.clone()
    pred[0, :4] = 3  # the long sequence all wrong: 4 of 6 tokens, 1 of 2 sequences
    assert token_accuracy(pred, TARGET) == pytest.approx(2 / 6)
    assert sequence_accuracy(pred, TARGET) == 0.5


def test_all_pad_rows_are_left_out():
    target = torch.cat([TARGET, torch.full((1, 5), PAD)])  # [3, 5]
    pred = torch.cat([TARGET, torch.full((1, 5), 4)])
    pred[1, 0] = 3
    assert token_accuracy(pred, target) == pytest.approx(5 / 6)
    assert sequence_accuracy(pred, target) == 0.5  # 1 of the 2 real sequences, not 1 of 3


def test_pad_none_scores_everything_and_another_pad_id():
    pred = TARGET.clone()
    pred[1, 4] = 3
    assert token_accuracy(pred, TARGET, pad=None) == pytest.approx(9 / 10)
    assert sequence_accuracy(pred, TARGET, pad=None) == 0.5
    assert token_accuracy(TARGET + 1, TARGET + 1, pad=1) == 1.0


def test_numpy_and_lists_and_return_types():
    acc = token_accuracy(TARGET.numpy(), TARGET.tolist())
    assert acc == 1.0 and type(acc) is float
    assert type(sequence_accuracy(TARGET, TARGET)) is float


@pytest.mark.parametrize("metric", [token_accuracy, sequence_accuracy])
@pytest.mark.parametrize(("pred", "target", "error", "match"), [
    (TARGET[:, :4], TARGET, ValueError, r"pred has shape \[2, 4\] but target has \[2, 5\]"),
    (TARGET[0], TARGET[0], ValueError, r"pred must be token ids \[N, T\], got shape \[5\]"),
    (TARGET, TARGET[None], ValueError, r"target must be token ids \[N, T\], got shape \[1, 2, 5\]"),
    (torch.zeros(2, 5, 13), TARGET, TypeError, r"pred must hold token ids .*float32 .*argmax"),
    (TARGET, TARGET.float(), TypeError, "target must hold token ids .*float32"),
    (TARGET.bool(), TARGET, TypeError, "pred must hold token ids .*torch.bool"),
    (torch.zeros(2, 5, dtype=torch.int64), torch.zeros(2, 5, dtype=torch.int64), ValueError,
     r"target has no token other than pad=0 \(shape \[2, 5\]\)"),
    (torch.zeros(0, 5, dtype=torch.int64), torch.zeros(0, 5, dtype=torch.int64), ValueError,
     "target has no token other than pad=0"),
    ("abc", TARGET, TypeError, "pred must be a tensor or array, got str"),
])
def test_bad_inputs(metric, pred, target, error, match):
    with pytest.raises(error, match=match):
        metric(pred, target)


def test_bad_pad():
    with pytest.raises(TypeError, match="pad must be an integer, got 0.5"):
        token_accuracy(TARGET, TARGET, pad=0.5)


def test_mean_squared_error():
    target = torch.zeros(3, 2, 2)
    pred = torch.ones(3, 2, 2)
    pred[0] = 3.0  # 9 on 4 of 12 elements, 1 on the other 8
    assert mean_squared_error(pred, target) == pytest.approx((4 * 9 + 8) / 12)
    assert mean_squared_error(target, target) == 0.0
    assert mean_squared_error(np.ones((2, 2)), np.zeros((2, 2))) == 1.0


@pytest.mark.parametrize(("pred", "target", "error", "match"), [
    (torch.zeros(2, 2), torch.zeros(2, 3), ValueError, r"pred has shape \[2, 2\] but target has \[2, 3\]"),
    (torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, 2), TypeError, "pred must be a floating-point .*int64"),
    (torch.zeros(0, 2), torch.zeros(0, 2), ValueError, r"target is empty \(shape \[0, 2\]\)"),
])
def test_mean_squared_error_bad_inputs(pred, target, error, match):
    with pytest.raises(error, match=match):
        mean_squared_error(pred, target)
