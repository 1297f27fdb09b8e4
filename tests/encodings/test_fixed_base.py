"""fixed_base: the positional-encoding lab's dials (angle 2*pi*p/base), against its labels and a float64 formula."""

import math

import pytest
import torch

from attnlab.encodings import fixed_base


def test_matches_the_angle_formula():
    table = fixed_base(20, (4, 5, 7), dtype=torch.float64)
    assert table.shape == (20, 6)
    for k, b in enumerate((4, 5, 7)):
        for p in range(20):
            angle = 2 * math.pi * p / b
            assert table[p, 2 * k].item() == pytest.approx(math.sin(angle), abs=1e-15)
            assert table[p, 2 * k + 1].item() == pytest.approx(math.cos(angle), abs=1e-15)


def test_pe_lab_dial_labels():
    # The book's dial xlabels at position 1: base 5 -> (0.95, 0.31), base 7 -> (0.78, 0.62).
    row = fixed_base(2, (4, 5, 7))[1]
    assert [round(v, 2) for v in row[2:4].tolist()] == [0.95, 0.31]
    assert [round(v, 2) for v in row[4:6].tolist()] == [0.78, 0.62]


def test_period_is_the_lcm_of_the_bases():
    table = fixed_base(141, (4, 5, 7), dtype=torch.float64)
    torch.testing.assert_close(table[140], table[0], atol=1e-12, rtol=0)
    # ... and no earlier position repeats position 0.
    assert (table[1:140] - table[0]).norm(dim=1).min() > 1e-3


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(max_len=0), ValueError, "max_len"),
        (dict(max_len=5, bases=()), ValueError, "bases"),
        (dict(max_len=5, bases=(4, 0)), ValueError, r"bases\[1\]"),
        (dict(max_len=5, bases="457"), TypeError, "bases"),
        (dict(max_len=5, bases=(4, "x")), TypeError, r"bases\[1\]"),
    ],
)
def test_bad_arguments(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        fixed_base(**kwargs)
