"""encoding_degrees / exponential_dials: the positional-encoding lab's dials, labels from the data."""

import math

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from attnlab.plotting import encoding_degrees, exponential_dials


def _grid(fig, n_rows, n_cols):
    """The figure's axes as the (rows + 1) x (cols + 1) grid they were created in."""
    axes = np.array(fig.axes, dtype=object)
    assert axes.size == (n_rows + 1) * (n_cols + 1)
    return axes.reshape(n_rows + 1, n_cols + 1)


def _tick_label(ax):
    """The dial's second tick label (the first is the '0' at angle 0)."""
    labels = [t for t in ax.texts if t.get_text() and t.get_text() != "0"]
    assert len(labels) == 1
    return labels[0]


def _arrow_angle(ax):
    (arrow,) = [t for t in ax.texts if hasattr(t, "xy")]
    x, y = arrow.xy
    return math.atan2(y, x)


def _all_text(fig):
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [t.get_text() for t in ax.texts] + [ax.get_xlabel(), ax.get_ylabel()]
    return out


def test_encoding_degrees_renders(save_png):
    fig = encoding_degrees()
    assert isinstance(fig, Figure)
    save_png(fig, "encoding_degrees")


def test_encoding_degrees_pe_lab_labels_and_angles():
    fig = encoding_degrees(3, (4, 5, 7), 8)  # the positional-encoding lab's positional call
    grid = _grid(fig, 3, 8)
    # Row r + 1 is base seqs[r]; column p + 1 is position p.
    assert grid[2, 2].get_xlabel() == "(0.95, 0.31)"  # base 5, position 1
    assert grid[3, 2].get_xlabel() == "(0.78, 0.62)"  # base 7, position 1
    assert grid[1, 3].get_xlabel() == "(0.00, -1.00)"  # base 4, position 2: no '-0.00'
    for r, b in enumerate((4, 5, 7)):
        assert _tick_label(grid[r + 1, 1]).get_text() == f"1/{b}"
        for p in range(8):
            expected = math.remainder(2 * math.pi * p / b, 2 * math.pi)
            assert math.remainder(_arrow_angle(grid[r + 1, p + 1]) - expected, 2 * math.pi) == \
                pytest.approx(0.0, abs=1e-9)


def test_encoding_degrees_fixes_the_book_layout_bugs():
    fig = encoding_degrees(2, (4, 5), 3)
    grid = _grid(fig, 2, 3)
    texts = _all_text(fig)
    assert texts.count("Position") == 1  # the book redraws it tot*dims times
    assert not any("-0.00" in t for t in texts)
    for ax in list(grid[0, :]) + list(grid[1:, 0]):
        assert not ax.axison  # header and label cells show no empty axes
    for ax in grid[1:, 1:].ravel():
        assert ax.get_aspect() == 1.0  # circles, not ellipses
        assert any(isinstance(p, Circle) for p in ax.patches)


def test_exponential_dials_renders(save_png):
    save_png(exponential_dials(), "exponential_dials")


@pytest.mark.parametrize(
    "d_model, base, expected",
    [
        (8, 10000.0, ["1", "10", "100", "1000"]),
        (6, 10000.0, ["1", "21.5", "464"]),  # 10000 ** (2i/6): the book would say 1, 10, 100
        (4, 100.0, ["1", "10"]),
    ],
)
def test_exponential_dials_tick_labels_follow_the_rates(d_model, base, expected):
    fig = exponential_dials(d_model, 2, base=base)
    grid = _grid(fig, len(expected), 2)
    labels = [_tick_label(grid[i + 1, 1]) for i in range(len(expected))]
    assert [t.get_text() for t in labels] == expected
    for t in labels:  # the tick sits at 1 radian
        x, y = t.get_position()
        assert math.atan2(y, x) == pytest.approx(1.0, abs=1e-9)


def test_exponential_dials_pe_lab_labels():
    fig = exponential_dials(8, 10)
    grid = _grid(fig, 4, 10)
    assert grid[1, 2].get_xlabel() == "(0.84, 0.54)"  # dims 0/1, position 1
    assert grid[2, 4].get_xlabel() == "(0.30, 0.96)"  # dims 2/3, position 3
    assert grid[1, 0].texts[0].get_text() == "Dims #0, #1"
    assert _arrow_angle(grid[1, 4]) == pytest.approx(3.0, abs=1e-9)  # 3 positions x 1 rad
    assert not any("-0.00" in t for t in _all_text(fig))


def test_exponential_dials_odd_d_model_shows_the_lone_sine():
    fig = exponential_dials(5, 2)
    grid = _grid(fig, 3, 2)
    assert grid[3, 0].texts[0].get_text() == "Dim #4"
    assert grid[3, 2].get_xlabel() == "(0.00)"  # sin(1 * 10000 ** -0.8) = 0.0006


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: encoding_degrees(0), ValueError, "dims"),
        (lambda: encoding_degrees(4, (4, 5, 7)), ValueError, "dims"),
        (lambda: encoding_degrees(2, (4, -5)), ValueError, r"seqs\[1\]"),
        (lambda: encoding_degrees(1, 4), TypeError, "seqs"),
        (lambda: encoding_degrees(1, (4,), 0), ValueError, "tot"),
        (lambda: encoding_degrees(1, (4,), 2.5), TypeError, "tot"),
        (lambda: exponential_dials(0), ValueError, "d_model"),
        (lambda: exponential_dials(8, "10"), TypeError, "max_len"),
        (lambda: exponential_dials(8, 2, base=-1.0), ValueError, "base"),
    ],
)
def test_bad_arguments_name_themselves(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
