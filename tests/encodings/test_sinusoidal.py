"""sinusoidal / angle_rates / shift_matrix against the labs' printed numbers,
the anchors' golden values and float64 formulas written out here."""

import math

import numpy as np
import pytest
import torch

from attnlab.encodings import LAYOUTS, angle_rates, shift_matrix, sinusoidal


def np_vaswani(positions, d_model, base=10000.0):
    """Float64 reference: PE[p, 2i] = sin(p / base**(2i/D)), PE[p, 2i+1] = cos(...)."""
    p = np.asarray(positions, dtype=np.float64)[:, None]
    i = np.arange(0, d_model, 2, dtype=np.float64)
    angles = p / base ** (i / d_model)
    out = np.zeros((len(p), d_model))
    out[:, 0::2] = np.sin(angles)
    out[:, 1::2] = np.cos(angles)[:, : d_model // 2]
    return out


# The positional-encoding lab, "np.round(encoding[0:4], 4)  # first four positions" (d_model=8).
PE_LAB_FIRST_FOUR = [
    [0.0000, 1.0000, 0.0000, 1.0000, 0.0000, 1.0000, 0.0000, 1.0000],
    [0.8415, 0.5403, 0.0998, 0.9950, 0.0100, 1.0000, 0.0010, 1.0000],
    [0.9093, -0.4161, 0.1987, 0.9801, 0.0200, 0.9998, 0.0020, 1.0000],
    [0.1411, -0.9900, 0.2955, 0.9553, 0.0300, 0.9996, 0.0030, 1.0000],
]

# The PE walkthrough, the printed denominators for d_model=16, then sin and cos of position 1.
PE_WALKTHROUGH_DENOMINATORS = [1.0, 3.1623e-01, 1.0e-01, 3.1623e-02, 1.0e-02, 3.1623e-03, 1.0e-03, 3.1623e-04]
PE_WALKTHROUGH_SIN_ROW1 = [
    8.4147e-01, 3.1098e-01, 9.9833e-02, 3.1618e-02, 9.9998e-03, 3.1623e-03, 1.0000e-03, 3.1623e-04,
]
PE_WALKTHROUGH_COS_ROW4 = [-0.6536, 0.3011, 0.9211, 0.9920, 0.9992, 0.9999, 1.0000, 1.0000]

# reference/pe_and_attention_anchors.md §5.3: PE(1, :) at d=8 for each layout.
ANCHOR_ROW1 = {
    "interleaved": [0.841471, 0.540302, 0.099833, 0.995004, 0.01, 0.99995, 0.001, 1.0],
    "concat": [0.841471, 0.099833, 0.01, 0.001, 0.540302, 0.995004, 0.99995, 1.0],
    "t2t": [0.841471, 0.046399, 0.002154, 0.0001, 0.540302, 0.998923, 0.999998, 1.0],
}


def test_pe_lab_first_four_rows():
    table = sinusoidal(10, 8)
    assert table.shape == (10, 8) and table.dtype == torch.float32
    # Printed to 4 decimals, so each entry is within half a unit of the 4th decimal.
    torch.testing.assert_close(table[:4], torch.tensor(PE_LAB_FIRST_FOUR), atol=5.01e-5, rtol=0)


def test_pe_walkthrough_denominators_and_rows():
    torch.testing.assert_close(
        angle_rates(16), torch.tensor(PE_WALKTHROUGH_DENOMINATORS, dtype=torch.float64), rtol=2e-4, atol=0
    )
    table = sinusoidal(20, 16)
    torch.testing.assert_close(table[1, 0::2], torch.tensor(PE_WALKTHROUGH_SIN_ROW1), rtol=2e-4, atol=0)
    torch.testing.assert_close(table[4, 1::2], torch.tensor(PE_WALKTHROUGH_COS_ROW4), atol=5e-5, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_golden_row(layout):
    row = sinusoidal(2, 8, layout=layout, dtype=torch.float64)[1]
    torch.testing.assert_close(row, torch.tensor(ANCHOR_ROW1[layout], dtype=torch.float64), atol=5e-7, rtol=0)


def test_concat_is_interleaved_with_columns_permuted():
    a = sinusoidal(50, 12, layout="interleaved")
    b = sinusoidal(50, 12, layout="concat")
    torch.testing.assert_close(b, torch.cat([a[:, 0::2], a[:, 1::2]], dim=1), atol=0, rtol=0)


def test_t2t_slowest_rate_is_one_over_base():
    # tensor2tensor: log_inc = log(base) / (D/2 - 1), so the last rate is exactly 1/base.
    w = angle_rates(8, rates="linspace")
    assert math.isclose(w[-1].item(), 1e-4, rel_tol=1e-12)
    assert math.isclose(angle_rates(8)[-1].item(), 1e-3, rel_tol=1e-12)


def test_tf_notebook_linspace_rates_and_table():
    # The TensorFlow position-encoding notebook: angle_rates = min_rate ** linspace(0, 1, depth // 2); sines and cosines
    # stacked on the last axis then reshaped, i.e. interleaved.
    depth, n_pos = 100, 50
    rates = (1 / 10000) ** np.linspace(0, 1, depth // 2)
    np.testing.assert_allclose(angle_rates(depth, rates="linspace").numpy(), rates, rtol=1e-13)
    angle_rads = np.arange(n_pos)[:, None] * rates[None, :]
    expected = np.stack((np.sin(angle_rads), np.cos(angle_rads)), axis=-1).reshape(n_pos, depth)
    table = sinusoidal(n_pos, depth, rates="linspace", dtype=torch.float64).numpy()
    np.testing.assert_allclose(table, expected, atol=1e-13, rtol=0)


@pytest.mark.parametrize("d_model", [1, 3, 7, 9])
def test_odd_d_model_drops_last_cosine(d_model):
    table = sinusoidal(30, d_model, dtype=torch.float64)
    np.testing.assert_allclose(table.numpy(), np_vaswani(range(30), d_model), atol=1e-13, rtol=0)
    concat = sinusoidal(30, d_model, layout="concat", dtype=torch.float64)
    n_sin = (d_model + 1) // 2
    torch.testing.assert_close(concat[:, :n_sin], table[:, 0::2])
    torch.testing.assert_close(concat[:, n_sin:], table[:, 1::2])


def test_t2t_odd_d_model_pads_a_zero_column_like_fairseq():
    table = sinusoidal(5, 7, layout="t2t", dtype=torch.float64)
    even = sinusoidal(5, 6, layout="t2t", dtype=torch.float64)
    torch.testing.assert_close(table[:, :6], even)
    assert torch.all(table[:, 6] == 0)


def test_any_length_and_start():
    # One row, and rows that start far from 0, agree with the formula.
    np.testing.assert_allclose(sinusoidal(1, 16, dtype=torch.float64).numpy(), np_vaswani([0], 16))
    tail = sinusoidal(7, 16, start=123_456, dtype=torch.float64).numpy()
    np.testing.assert_allclose(tail, np_vaswani(range(123_456, 123_463), 16), atol=1e-10, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtype_is_a_single_rounding_of_float64(dtype):
    table = sinusoidal(300, 32, dtype=dtype)
    assert table.dtype == dtype
    ref = torch.from_numpy(np_vaswani(range(300), 32))
    # Cast once: every |entry| <= 1, so one rounding of the float64 value is off by at
    # most half an epsilon (plus float64 noise between two ways of writing the angle).
    err = (table.double() - ref).abs().max().item()
    assert err <= torch.finfo(dtype).eps / 2 + 1e-12, err


def test_million_positions_within_1e6_of_float64_while_the_labs_formula_is_not():
    # 64 dims: the fastest frequencies, where the labs' formula fails, are the same at any width;
    # the whole table (256 MB) is still built, as a user building one would.
    d_model, n = 64, 1_000_000
    table = sinusoidal(n, d_model)  # float32, the whole table
    rows = np.r_[0:64, n // 2 : n // 2 + 64, n - 512 : n]
    ref = np_vaswani(rows, d_model)
    err = np.abs(table[rows].double().numpy() - ref).max()
    assert err <= 1e-6, err
    # The labs' float32 formula on the same rows: off by ~6e-2 (DESIGN.md).
    position = torch.tensor(rows, dtype=torch.float32).unsqueeze(1)
    speed = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(10000.0) / d_model))
    labs = torch.zeros(len(rows), d_model)
    labs[:, 0::2] = torch.sin(speed * position)
    labs[:, 1::2] = torch.cos(speed * position)
    labs_err = np.abs(labs.double().numpy() - ref).max()
    assert 1e-2 < labs_err < 0.2, labs_err


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("delta", [-10, -1, 1, 3, 17])
def test_shift_matrix_moves_the_table_exactly(layout, delta):
    table = sinusoidal(64, 16, layout=layout, dtype=torch.float64)
    m = shift_matrix(delta, 16, layout=layout)
    assert m.dtype == torch.float64 and m.shape == (16, 16)
    if delta > 0:
        err = (table[:-delta] @ m - table[delta:]).abs().max()
    else:
        err = (table[-delta:] @ m - table[:delta]).abs().max()
    assert err < 1e-12, err


def test_tf_notebook_shift_error_at_numerical_precision():
    # The TensorFlow position-encoding notebook: 50 positions, depth 100, linspace rates, delta = -10, and
    # errors = (pos_encoding @ update)[10:] - pos_encoding[:-10].
    table = sinusoidal(50, 100, rates="linspace", dtype=torch.float64)
    update = shift_matrix(-10, 100, rates="linspace")
    err = ((table @ update)[10:] - table[:-10]).abs().max().item()
    assert err < 1e-12, err


def test_shift_matrix_is_a_rotation_and_composes():
    m3, m4, m7 = (shift_matrix(k, 10) for k in (3, 4, 7))
    torch.testing.assert_close(m3 @ m4, m7, atol=1e-13, rtol=0)
    torch.testing.assert_close(m3 @ m3.T, torch.eye(10, dtype=torch.float64), atol=1e-13, rtol=0)
    torch.testing.assert_close(shift_matrix(0, 10), torch.eye(10, dtype=torch.float64))


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: sinusoidal(0, 8), ValueError, "max_len"),
        (lambda: sinusoidal(10, 0), ValueError, "d_model"),
        (lambda: sinusoidal(10, -4), ValueError, "d_model"),
        (lambda: sinusoidal(10, 8.0), TypeError, "d_model"),
        (lambda: sinusoidal(10, 8, layout="zigzag"), ValueError, "zigzag"),
        (lambda: sinusoidal(10, 8, rates="cubic"), ValueError, "cubic"),
        (lambda: sinusoidal(10, 8, layout="t2t", rates="vaswani"), ValueError, "rates"),
        (lambda: sinusoidal(10, 8, base=0), ValueError, "base"),
        (lambda: sinusoidal(10, 8, base=float("nan")), ValueError, "base"),
        (lambda: sinusoidal(10, 8, dtype=torch.int64), TypeError, "dtype"),
        (lambda: sinusoidal(10, 8, start=-1), ValueError, "start"),
        (lambda: shift_matrix(1, 7), ValueError, "d_model"),
        (lambda: shift_matrix(1.5, 8), TypeError, "delta"),
        (lambda: angle_rates(True), TypeError, "d_model"),
    ],
)
def test_bad_arguments_name_themselves(call, exc, words):
    with pytest.raises(exc, match=words):
        call()
