"""2-D and 3-D sinusoidal tables against a float64 formula written out here, side by side with
positional-encodings' PositionalEncoding2D/3D, and the places where ours differs on purpose."""

import itertools
import math

import numpy as np
import pytest
import torch
from positional_encodings.torch_encodings import PositionalEncoding2D as TheirPE2D
from positional_encodings.torch_encodings import PositionalEncoding3D as TheirPE3D
from torch.testing import assert_close

from attnlab.encodings.sinusoidal_nd import (
    PositionalEncoding2D,
    PositionalEncoding3D,
    axis_pairs,
    sinusoidal_2d,
    sinusoidal_3d,
)


def reference_pairs(d_model, axes):
    """The documented split: ceil(P / A) pairs per axis in turn, never leaving a later axis without one."""
    left = d_model // 2
    n = math.ceil(left / axes)
    out = []
    for a in range(axes):
        take = min(n, left - (axes - 1 - a))
        out.append(take)
        left -= take
    return out


def reference_grid(sizes, d_model, base=10000.0):
    """Float64 grid table, one entry at a time: axis a's pair i at coordinate x is
    sin(x * base ** (-i / n)), cos(...), n = ceil((D // 2) / A), blocks in axis order, odd D zero-padded."""
    pairs = reference_pairs(d_model, len(sizes))
    n = pairs[0]
    out = np.zeros((*sizes, d_model))
    for index in itertools.product(*(range(s) for s in sizes)):
        col = 0
        for x, k in zip(index, pairs, strict=True):
            for i in range(k):
                w = base ** (-i / n)
                out[(*index, col)] = math.sin(x * w)
                out[(*index, col + 1)] = math.cos(x * w)
                col += 2
    return torch.from_numpy(out)


def theirs(module_class, sizes, d_model):
    """positional-encodings' table for a grid: its module returns the encoding of a [1, *sizes, D] input."""
    return module_class(d_model)(torch.zeros(1, *sizes, d_model))[0]


@pytest.mark.parametrize(("sizes", "d_model", "base"), [
    ((5, 7), 4, 10000.0), ((5, 7), 6, 10000.0), ((3, 4), 13, 10000.0), ((6, 2), 32, 100.0), ((1, 1), 8, 10000.0),
    ((3, 4, 5), 6, 10000.0), ((2, 3, 4), 8, 10000.0), ((2, 3, 4), 17, 10000.0), ((4, 2, 3), 24, 500.0),
])
def test_table_matches_the_float64_formula(sizes, d_model, base):
    want = reference_grid(sizes, d_model, base)
    make = sinusoidal_2d if len(sizes) == 2 else sinusoidal_3d
    got = make(*sizes, d_model, base=base, dtype=torch.float64)
    assert got.shape == (*sizes, d_model) and got.dtype == torch.float64
    assert_close(got, want, atol=1e-13, rtol=0)
    # float32 is the float64 table cast once: within half an ulp of the formula
    assert_close(make(*sizes, d_model, base=base), want.float(), atol=6e-8, rtol=0)


@pytest.mark.parametrize("d_model", [4, 6, 8, 10, 12, 18, 30, 64])  # incl. D not a multiple of 4
@pytest.mark.parametrize("sizes", [(5, 7), (1, 3), (9, 2)])
def test_2d_equals_positional_encodings_for_even_d(sizes, d_model):
    # They compute in float32, so entries differ by float32 rounding of small angles only.
    assert_close(sinusoidal_2d(*sizes, d_model), theirs(TheirPE2D, sizes, d_model), atol=1e-6, rtol=0)


@pytest.mark.parametrize("d_model", [6, 10, 12, 14, 16, 20, 22, 48])  # incl. D not a multiple of 6; not 8: below
@pytest.mark.parametrize("sizes", [(3, 4, 5), (2, 1, 6)])
def test_3d_equals_positional_encodings_for_even_d(sizes, d_model):
    assert_close(sinusoidal_3d(*sizes, d_model), theirs(TheirPE3D, sizes, d_model), atol=1e-6, rtol=0)


def test_channel_split_is_theirs_where_every_axis_gets_a_pair():
    # Theirs: every axis but the last gets ceil(D/(2A)) * 2 channels, the last what the truncation leaves.
    for axes, module in ((2, TheirPE2D), (3, TheirPE3D)):
        for d in range(2 * axes, 80, 2):
            per_axis = module(d).channels  # their per-axis channel count
            theirs_pairs = [per_axis // 2] * (axes - 1) + [(d - (axes - 1) * per_axis) // 2]
            if theirs_pairs[-1] >= 1:
                assert list(axis_pairs(d, axes=axes)) == theirs_pairs, (axes, d)
            else:
                assert (axes, d) == (3, 8)  # the only even D >= 2A where theirs drops an axis


def test_3d_d8_documented_difference_theirs_drops_the_last_axis():
    sizes = (2, 3, 4)
    their = theirs(TheirPE3D, sizes, 8)
    # Theirs: 4 + 4 channels for the first two axes, nothing left for the third: every column is the same.
    assert torch.equal(their, their[:, :, :1].expand_as(their))
    ours = sinusoidal_3d(*sizes, 8, dtype=torch.float64)
    assert axis_pairs(8, axes=3) == (2, 1, 1)
    assert_close(ours, reference_grid(sizes, 8), atol=1e-13, rtol=0)
    # Ours tells every pixel apart, the third axis included (its pair at rate 1).
    flat = ours.reshape(-1, 8)
    assert torch.cdist(flat, flat).add(torch.eye(len(flat), dtype=torch.float64)).min() > 0.1
    assert_close(ours[..., 6], torch.arange(4.0, dtype=torch.float64).sin().expand(2, 3, 4), atol=1e-15, rtol=0)


@pytest.mark.parametrize(("axes", "d_model"), [(2, 5), (2, 7), (2, 13), (3, 7), (3, 13), (3, 25)])
def test_odd_d_documented_difference_zero_column_vs_lone_sine(axes, d_model):
    sizes = (3, 5) if axes == 2 else (2, 3, 5)
    make = sinusoidal_2d if axes == 2 else sinusoidal_3d
    module = TheirPE2D if axes == 2 else TheirPE3D
    ours = make(*sizes, d_model)
    # Ours: the D - 1 table and a zero channel (every pair keeps its cosine).
    assert torch.equal(ours[..., :-1], make(*sizes, d_model - 1))
    assert torch.equal(ours[..., -1], torch.zeros(sizes))
    # Theirs: their D + 1 table cut by one column, ending on a lone sine of the last axis.
    their = theirs(module, sizes, d_model)
    assert torch.equal(their, theirs(module, sizes, d_model + 1)[..., :-1])
    assert their[..., -1].abs().max() > 0  # a sine with no cosine beside it
    assert not torch.allclose(ours, their, atol=1e-3)


def test_odd_d5_2d_channels_spelled_out():
    rows = torch.arange(3, dtype=torch.float64)[:, None].expand(3, 4)
    cols = torch.arange(4, dtype=torch.float64)[None, :].expand(3, 4)
    ours = sinusoidal_2d(3, 4, 5, dtype=torch.float64)
    # ours: (sin r, cos r) | (sin c, cos c) | 0
    want = torch.stack([rows.sin(), rows.cos(), cols.sin(), cols.cos(), torch.zeros(3, 4, dtype=torch.float64)], -1)
    assert_close(ours, want, atol=1e-15, rtol=0)
    # theirs: (sin r, cos r, sin r/100, cos r/100) | sin c: two row pairs and half a column pair
    their = theirs(TheirPE2D, (3, 4), 5)
    want_theirs = torch.stack([rows.sin(), rows.cos(), (rows / 100).sin(), (rows / 100).cos(), cols.sin()], -1)
    assert_close(their, want_theirs.float(), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("sizes", "d_model"), [((6, 5), 12), ((6, 5), 10), ((3, 4, 4), 14)])
def test_dot_products_depend_only_on_the_offset(sizes, d_model):
    make = sinusoidal_2d if len(sizes) == 2 else sinusoidal_3d
    flat = make(*sizes, d_model, dtype=torch.float64).reshape(-1, d_model)  # [L, D], row-major
    dots = flat @ flat.T  # [L, L]
    coords = torch.tensor(list(itertools.product(*(range(s) for s in sizes))))  # [L, A]
    pairs, n = axis_pairs(d_model, axes=len(sizes)), axis_pairs(d_model, axes=len(sizes))[0]
    offsets = coords[None, :, :] - coords[:, None, :]  # [L, L, A]
    # sum over axes and pairs of cos(offset * w_i): the formula, whatever the two pixels are
    want = sum(torch.cos(offsets[..., a].double() * 10000.0 ** (-i / n)) for a, k in enumerate(pairs) for i in range(k))
    assert_close(dots, want, atol=1e-12, rtol=0)
    assert dots.std() > 0.1  # not a constant: the test can fail


def test_module_adds_the_table_and_theirs_returns_it():
    x = torch.randn(2, 4, 6, 12)
    ours = PositionalEncoding2D(12)(x)
    assert ours.shape == x.shape
    assert torch.equal(ours, x + sinusoidal_2d(4, 6, 12))
    their = TheirPE2D(12)(x)  # the encoding, not the sum
    assert_close(ours - x, their, atol=1e-6, rtol=0)
    assert not torch.allclose(their, ours)

    v = torch.randn(2, 3, 4, 5, 18)
    assert torch.equal(PositionalEncoding3D(18)(v), v + sinusoidal_3d(3, 4, 5, 18))
    assert_close(PositionalEncoding3D(18)(v) - v, TheirPE3D(18)(v), atol=1e-6, rtol=0)


def test_module_takes_any_grid_size_and_keeps_no_state():
    enc = PositionalEncoding2D(8)
    for h, w in [(2, 3), (17, 1), (5, 40), (2, 3)]:
        assert torch.equal(enc(torch.zeros(1, h, w, 8))[0], sinusoidal_2d(h, w, 8))
    assert list(enc.state_dict()) == [] and list(enc.parameters()) == []
    assert torch.equal(enc.table(3, 4), sinusoidal_2d(3, 4, 8))
    assert "d_model=8" in repr(enc)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_module_dtype_is_the_inputs_with_the_table_cast_once_from_float64(dtype):
    x = torch.randn(1, 3, 5, 8, dtype=dtype)
    out = PositionalEncoding2D(8)(x)
    assert out.dtype == dtype
    assert torch.equal(out, x + sinusoidal_2d(3, 5, 8, dtype=dtype))
    # the table in that dtype is the float64 table rounded once
    assert torch.equal(sinusoidal_2d(3, 5, 8, dtype=dtype), sinusoidal_2d(3, 5, 8, dtype=torch.float64).to(dtype))


def test_device_follows_the_input():
    x = torch.empty(1, 3, 4, 8, device="meta")
    assert PositionalEncoding2D(8)(x).device.type == "meta"
    assert sinusoidal_3d(2, 2, 2, 6, device="meta").device.type == "meta"


def test_empty_batch_and_empty_grid_give_empty_outputs():
    enc = PositionalEncoding2D(8)
    assert enc(torch.zeros(0, 3, 4, 8)).shape == (0, 3, 4, 8)
    assert enc(torch.zeros(2, 0, 4, 8)).shape == (2, 0, 4, 8)  # as x + anything would


def test_dropout_only_in_training():
    enc = PositionalEncoding2D(8, dropout=0.5)
    x = torch.ones(4, 6, 6, 8)
    torch.manual_seed(0)
    trained = enc(x)
    assert (trained == 0).float().mean() > 0.3
    assert torch.equal(enc.eval()(x), x + sinusoidal_2d(6, 6, 8))


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: sinusoidal_2d(0, 4, 8), ValueError, r"height.*0"),
    (lambda: sinusoidal_2d(4, 0, 8), ValueError, r"width.*0"),
    (lambda: sinusoidal_3d(2, 0, 4, 8), ValueError, r"height.*0"),
    (lambda: sinusoidal_3d(0, 2, 4, 8), ValueError, r"depth.*0"),
    (lambda: sinusoidal_2d(4, 4, 3), ValueError, r"d_model must be at least 4 for 2 axes.*d_model=3"),
    (lambda: sinusoidal_3d(2, 2, 2, 5), ValueError, r"d_model must be at least 6 for 3 axes.*d_model=5"),
    (lambda: sinusoidal_2d(4, 4, 0), ValueError, r"d_model.*0"),
    (lambda: sinusoidal_2d(4.0, 4, 8), TypeError, r"height.*4\.0"),
    (lambda: sinusoidal_2d(4, 4, True), TypeError, r"d_model.*True"),
    (lambda: sinusoidal_2d(4, 4, 8, base=0.0), ValueError, r"base.*0"),
    (lambda: sinusoidal_2d(4, 4, 8, base=float("nan")), ValueError, r"base.*nan"),
    (lambda: sinusoidal_2d(4, 4, 8, dtype=torch.int64), TypeError, r"dtype.*int64"),
    (lambda: axis_pairs(8, axes=0), ValueError, r"axes.*0"),
    (lambda: PositionalEncoding2D(2), ValueError, r"d_model must be at least 4.*d_model=2"),
    (lambda: PositionalEncoding3D(4), ValueError, r"d_model must be at least 6.*d_model=4"),
    (lambda: PositionalEncoding2D(8, dropout=1.0), ValueError, r"dropout.*1\.0"),
    (lambda: PositionalEncoding2D(8)(torch.zeros(2, 3, 8)), ValueError, r"\[B, height, width, 8\].*\[2, 3, 8\]"),
    (lambda: PositionalEncoding2D(8)(torch.zeros(2, 3, 4, 6)), ValueError, r"\[B, height, width, 8\].*6\]"),
    (lambda: PositionalEncoding3D(6)(torch.zeros(2, 3, 4, 6)), ValueError, r"\[B, depth, height, width, 6\]"),
    (lambda: PositionalEncoding2D(8)(torch.zeros(2, 3, 4, 8, dtype=torch.int64)), TypeError, r"floating.*int64"),
    (lambda: PositionalEncoding2D(8).table(3), ValueError, r"2 sizes"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
