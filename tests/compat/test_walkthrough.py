"""attnlab.compat.walkthrough against the PE walkthrough's own module, run side by side, and its cells run unchanged.

The reference is the walkthrough's ``PositionalEncoding`` as it defines it
(``tests/lab_code.py``). The walkthrough prints one forward of ``arange(128).reshape(2, 4, 16)``
through ``PositionalEncoding(encoding_size=16, dropout_prob=0.2)``; its dropout mask came
from an unseeded generator, but every element it kept is ``(input + table) * 1.25``.
"""

import math

import pytest
import torch

from attnlab.compat.walkthrough import PositionalEncoding
from attnlab.encodings import PositionalEncoding as LabPositionalEncoding

from lab_code import WalkthroughPositionalEncoding as TheirPositionalEncoding

pytestmark = pytest.mark.usefixtures("one_thread")


# The walkthrough's printed output, first square, second and third rows (0.0000: dropped).
PRINTED_ROWS = {
    1: [21.0518, 21.9254, 22.8887, 24.9380, 25.1248, 27.4938, 27.5395, 29.9994, 30.0125, 32.4999, 0.0000,
        35.0000, 35.0013, 37.5000, 37.5004, 40.0000],
    2: [41.1366, 40.7298, 43.2389, 0.0000, 0.0000, 47.4751, 47.5790, 49.9975, 50.0250, 52.4998, 0.0000,
        55.0000, 55.0025, 57.5000, 0.0000, 60.0000],
}


def walkthrough_input():
    return torch.arange(start=0, end=128, dtype=torch.float).reshape(2, 4, 16)


def test_the_walkthrough_cells_run_unchanged_and_keep_what_it_printed():
    positional_encoding_layer = PositionalEncoding(encoding_size=16, dropout_prob=0.2)
    assert dict(positional_encoding_layer.named_parameters()) == {}  # the table is a buffer, as theirs
    output = positional_encoding_layer(walkthrough_input())
    assert output.shape == (2, 4, 16)
    kept = positional_encoding_layer.eval()(walkthrough_input()) * 1.25  # every element dropout keeps
    for row, printed in PRINTED_ROWS.items():
        printed = torch.tensor(printed)
        where = printed != 0
        torch.testing.assert_close(kept[0, row][where], printed[where], atol=1e-4, rtol=0)


@pytest.mark.parametrize("encoding_size", [16, 6])
def test_equal_to_theirs_in_eval_and_with_the_same_dropout_draws(encoding_size):
    ours, theirs = PositionalEncoding(encoding_size, 0.2, 50), TheirPositionalEncoding(encoding_size, 0.2, 50)
    x = torch.randn(3, 40, encoding_size, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ours.eval()(x), theirs.eval()(x), atol=1e-6, rtol=0)
    ours.train(), theirs.train()
    torch.manual_seed(5)
    mine = ours(x)
    torch.manual_seed(5)
    torch.testing.assert_close(mine, theirs(x), atol=2e-6, rtol=0)  # the same elements dropped


def test_checkpoints_go_both_ways():
    ours, theirs = PositionalEncoding(16, 0.1, 100), TheirPositionalEncoding(16, 0.1, 100)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["positional_encoding"]
    assert ours.positional_encoding.shape == theirs.positional_encoding.shape == (1, 100, 16)
    theirs.load_state_dict(ours.state_dict())  # strict: the same keys and shapes
    assert torch.equal(theirs.positional_encoding, ours.positional_encoding)
    marked = {"positional_encoding": torch.full((1, 100, 16), 3.0)}
    ours.load_state_dict(marked)
    assert torch.equal(ours.positional_encoding, marked["positional_encoding"])


def test_longer_than_max_len_and_odd_sizes_work_where_theirs_fails():
    ours = PositionalEncoding(encoding_size=5, dropout_prob=0.0, max_len=4)
    out = ours(torch.zeros(1, 9, 5))
    assert out.shape == (1, 9, 5)
    assert math.isclose(out[0, 8, 0].item(), math.sin(8), abs_tol=1e-6)
    with pytest.raises(RuntimeError):
        TheirPositionalEncoding(encoding_size=5, dropout_prob=0.0, max_len=4)  # an odd size: cos has one column less


@pytest.mark.parametrize(("kwargs", "error", "named"), [
    ({"encoding_size": 0.5, "dropout_prob": 0.1}, TypeError, "encoding_size"),
    ({"encoding_size": 0, "dropout_prob": 0.1}, ValueError, "encoding_size"),
    ({"encoding_size": 4, "dropout_prob": 1.0}, ValueError, "dropout_prob"),
    ({"encoding_size": 4, "dropout_prob": 0.1, "max_len": 0}, ValueError, "max_len"),
])
def test_bad_arguments_are_named_as_the_walkthrough_names_them(kwargs, error, named):
    with pytest.raises(error, match=named):
        PositionalEncoding(**kwargs)


def test_the_labs_module_called_the_walkthroughs_way_says_where_that_one_is():
    with pytest.raises(TypeError, match=r"attnlab\.compat\.walkthrough\.PositionalEncoding"):
        LabPositionalEncoding(16, 0.2)
