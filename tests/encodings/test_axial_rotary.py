"""Axial rotary position embedding against a float64 formula written out here, against
rotary-embedding-torch's get_axial_freqs + apply_rotary_emb, and on its invariants:
scores that depend only on the (row, column) offset, norms, MultiHeadAttention on flattened images."""

import itertools
import math

import numpy as np
import pytest
import torch
from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
from torch.testing import assert_close

from attnlab.attention import MultiHeadAttention
from attnlab.encodings.axial_rotary import AxialRotary, axial_rotary_angles
from attnlab.encodings.scheme import PositionScheme


def reference_axial(x, sizes, *, rotary_dim, base=10000.0, coords="integer", max_freq=10.0):
    """Float64 axial RoPE, one pair at a time. x: [..., L, Dh], L = prod(sizes) row-major.

    The d rotated features are A shares of d_a = d / A; pair i of share a (features
    a*d_a + 2i, a*d_a + 2i + 1) turns by c_a * theta_i: integer c_a with theta_i = base ** (-2i / d_a)
    (RoFormer eq. 15), or c_a = -1 + 2 * index / (n_a - 1) with theta_i = pi * (1 + i * (max_freq/2 - 1) / (d_a/2 - 1)).
    """
    x = np.asarray(x, dtype=np.float64)
    axes = len(sizes)
    d_a = rotary_dim // axes
    half = d_a // 2
    out = x.copy()
    for token, index in enumerate(itertools.product(*(range(s) for s in sizes))):
        for a, (i_a, n_a) in enumerate(zip(index, sizes, strict=True)):
            if coords == "integer":
                c = float(i_a)
            else:
                c = -1.0 + 2.0 * i_a / (n_a - 1) if n_a > 1 else -1.0
            for i in range(half):
                if coords == "integer":
                    theta = base ** (-2.0 * i / d_a)
                else:
                    theta = math.pi * (1.0 + i * (max_freq / 2 - 1.0) / (half - 1) if half > 1 else 1.0)
                p = a * d_a + 2 * i
                cos, sin = math.cos(c * theta), math.sin(c * theta)
                x0, x1 = x[..., token, p], x[..., token, p + 1]
                out[..., token, p] = x0 * cos - x1 * sin
                out[..., token, p + 1] = x1 * cos + x0 * sin
    return torch.from_numpy(out)


CASES = [
    # (sizes, head_dim, rotary_dim, coords, max_freq)
    ((3, 4), 8, None, "integer", 10.0),
    ((4, 3), 12, 8, "integer", 10.0),
    ((2, 3, 4), 12, None, "integer", 10.0),
    ((3, 5), 16, None, "pixel", 10.0),
    ((1, 4), 8, None, "pixel", 64.0),
    ((2, 2, 3), 14, 12, "pixel", 20.0),
]


@pytest.mark.parametrize(("sizes", "head_dim", "rotary_dim", "coords", "max_freq"), CASES)
def test_rotate_matches_the_float64_formula(sizes, head_dim, rotary_dim, coords, max_freq):
    rope = AxialRotary(head_dim, axes=len(sizes), grid=sizes, rotary_dim=rotary_dim, coords=coords,
                       max_freq=max_freq, angle_dtype=torch.float64)
    n = math.prod(sizes)
    q = torch.randn(2, 3, n, head_dim, dtype=torch.float64)
    k = torch.randn(2, 3, n, head_dim, dtype=torch.float64)
    rq, rk = rope.rotate(q, k)
    d = head_dim if rotary_dim is None else rotary_dim
    kw = dict(rotary_dim=d, coords=coords, max_freq=max_freq)
    assert_close(rq, reference_axial(q, sizes, **kw), atol=1e-12, rtol=0)
    assert_close(rk, reference_axial(k, sizes, **kw), atol=1e-12, rtol=0)
    assert torch.equal(rq[..., d:], q[..., d:])  # pass-through features untouched


def peer(sizes, axis_dim, coords, max_freq=10.0):
    """rotary-embedding-torch's axial frequencies [*sizes, A * axis_dim], each angle twice."""
    if coords == "integer":
        emb = RotaryEmbedding(axis_dim, freqs_for="lang")
    else:
        emb = RotaryEmbedding(axis_dim, freqs_for="pixel", max_freq=max_freq)
    return emb.get_axial_freqs(*sizes)


@pytest.mark.parametrize(("sizes", "axis_dim", "head_dim", "coords", "max_freq"), [
    ((4, 5), 8, 16, "integer", 10.0),
    ((7, 9), 16, 40, "integer", 10.0),
    ((3, 4, 5), 8, 24, "integer", 10.0),
    ((4, 5), 8, 16, "pixel", 10.0),
    ((7, 9), 16, 32, "pixel", 20.0),
    ((3, 4, 5), 8, 28, "pixel", 10.0),
])
def test_matches_rotary_embedding_torch(sizes, axis_dim, head_dim, coords, max_freq):
    axes, n = len(sizes), math.prod(sizes)
    freqs = peer(sizes, axis_dim, coords, max_freq)  # [*sizes, A * axis_dim]
    angles = axial_rotary_angles(*sizes, head_dim=head_dim, rotary_dim=axes * axis_dim, coords=coords,
                                 max_freq=max_freq)  # [*sizes, A * axis_dim / 2]
    assert_close(angles, freqs[..., 0::2], atol=1e-5, rtol=0)
    assert torch.equal(freqs[..., 0::2], freqs[..., 1::2])  # theirs: every angle twice, adjacent pairs
    rope = AxialRotary(head_dim, axes=axes, grid=sizes, rotary_dim=axes * axis_dim, coords=coords,
                       max_freq=max_freq)
    q, k = torch.randn(2, 3, n, head_dim), torch.randn(2, 3, n, head_dim)
    rq, rk = rope.rotate(q, k)
    assert_close(rq, apply_rotary_emb(freqs.reshape(n, -1), q), atol=1e-5, rtol=0)  # [L, d] against [B, H, L, Dh]
    assert_close(rk, apply_rotary_emb(freqs.reshape(n, -1), k), atol=1e-5, rtol=0)
    # Their README's form: q laid out as the grid [B, H, *sizes, Dh]. Ours on the row-major flattening is the same.
    grid_q = q.reshape(2, 3, *sizes, head_dim)
    assert_close(rq, apply_rotary_emb(freqs, grid_q).reshape(2, 3, n, head_dim), atol=1e-5, rtol=0)


def test_scores_depend_only_on_the_row_and_column_offset():
    rows, cols, dh = 5, 6, 16
    rope = AxialRotary(dh, grid=(rows, cols), angle_dtype=torch.float64)
    q = torch.randn(dh, dtype=torch.float64).expand(1, 1, rows * cols, dh)  # the same vector at every pixel
    k = torch.randn(dh, dtype=torch.float64).expand(1, 1, rows * cols, dh)
    rq, rk = rope.rotate(q, k)
    scores = (rq @ rk.transpose(-1, -2))[0, 0]  # [L, L]
    coords = [(r, c) for r in range(rows) for c in range(cols)]  # row-major
    by_offset = {}
    for i, (r0, c0) in enumerate(coords):
        for j, (r1, c1) in enumerate(coords):
            by_offset.setdefault((r1 - r0, c1 - c0), []).append(scores[i, j].item())
    for offset, values in by_offset.items():
        assert max(values) - min(values) < 1e-12, offset
    firsts = [values[0] for values in by_offset.values()]
    assert np.std(firsts) > 0.1  # different offsets do score differently
    # and it is not the 1-D offset of the flattened index: (0, +1) and (+1, -5) are both index offset 1 here
    assert abs(by_offset[(0, 1)][0] - by_offset[(1, -5)][0]) > 1e-3


def test_norms_are_preserved():
    rope = AxialRotary(12, axes=3, grid=(2, 3, 4), coords="pixel")
    q = torch.randn(2, 2, 24, 12)
    rq, rk = rope.rotate(q, q * 2)
    assert_close(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5, rtol=1e-6)
    assert_close(rk.norm(dim=-1), 2 * q.norm(dim=-1), atol=1e-5, rtol=1e-6)


def test_rotate_at_a_subset_is_the_full_grids_rows():
    # A masked autoencoder's encoder sees some patches only: their flattened positions.
    rope = AxialRotary(8, grid=(4, 4))
    x = torch.randn(1, 2, 16, 8)
    full_q, full_k = rope.rotate(x, x)
    keep = torch.tensor([0, 3, 5, 6, 15])
    sub_q, sub_k = rope.rotate_at(x[:, :, keep], x[:, :, keep], q_pos=keep, k_pos=keep)
    assert torch.equal(sub_q, full_q[:, :, keep]) and torch.equal(sub_k, full_k[:, :, keep])


class PeerAxial(PositionScheme):
    """rotary-embedding-torch's axial rotary wrapped as an attention position, for a side-by-side model."""

    def __init__(self, freqs):
        super().__init__()
        self.freqs = freqs  # [L, d]

    def rotate(self, q, k, *, q_offset=0, k_offset=0):
        return apply_rotary_emb(self.freqs, q), apply_rotary_emb(self.freqs, k)


def test_multihead_attention_on_a_flattened_image():
    rows, cols, heads, dh = 3, 4, 2, 8
    torch.manual_seed(0)
    ours = MultiHeadAttention(heads, heads * dh, position=AxialRotary(dh, grid=(rows, cols)))
    theirs = MultiHeadAttention(heads, heads * dh, position=PeerAxial(peer((rows, cols), dh // 2, "integer")
                                                                       .reshape(rows * cols, dh)))
    theirs.load_state_dict(ours.state_dict())
    image = torch.randn(2, rows, cols, heads * dh)  # [B, rows, cols, D]
    x = image.flatten(1, 2)  # [B, L, D], row-major
    out = ours(x)
    assert out.shape == (2, rows * cols, heads * dh)
    assert_close(out, theirs(x), atol=1e-5, rtol=0)
    # the positions matter: the same tokens without the rotation give other outputs
    plain = MultiHeadAttention(heads, heads * dh)
    plain.load_state_dict(ours.state_dict())
    assert not torch.allclose(out, plain(x), atol=1e-3)
    with pytest.raises(ValueError, match=r"grid 3 x 4 has 12 positions, but got 13 queries"):
        y = torch.randn(1, 13, heads * dh)  # a class token too many for the 3 x 4 grid
        ours(y)


def test_set_grid_changes_the_size_and_dtypes_are_kept():
    rope = AxialRotary(8)
    assert rope.set_grid(2, 5) is rope and rope.grid == (2, 5)
    x = torch.randn(1, 1, 10, 8)
    for dtype in (torch.float64, torch.bfloat16, torch.float16):
        rq, rk = rope.rotate(x.to(dtype), x.to(dtype))
        assert rq.dtype == rk.dtype == dtype
    # half inputs: rotated in float32, rounded once
    h = x.to(torch.bfloat16)
    assert torch.equal(rope.rotate(h, h)[0], rope.rotate(h.float(), h.float())[0].to(torch.bfloat16))
    assert "grid=(2, 5)" in repr(rope)
    assert rope.bias(x, 10) is None and rope.value_term(torch.ones(1, 1, 10, 10)) is None
    assert rope.caches is False


def test_angles_golden_integer_grid():
    # 2 x 3 grid, Dh = 8: d_a = 4, theta = (1, 0.01); pairs (row*1, row*0.01, col*1, col*0.01)
    angles = axial_rotary_angles(2, 3, head_dim=8, angle_dtype=torch.float64)
    assert angles.shape == (2, 3, 4)
    assert_close(angles[1, 2], torch.tensor([1.0, 0.01, 2.0, 0.02], dtype=torch.float64), atol=1e-15, rtol=0)


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: AxialRotary(2), ValueError, r"head_dim must be at least 4 for 2 axes.*head_dim=2"),
    (lambda: AxialRotary(8, axes=3), ValueError, r"head_dim=8 cannot be split into 3.*rotary_dim=6"),
    (lambda: AxialRotary(10), ValueError, r"head_dim=10 cannot be split into 2.*rotary_dim=8"),
    (lambda: AxialRotary(16, rotary_dim=6), ValueError, r"rotary_dim must be a multiple of 4.*rotary_dim=6"),
    (lambda: AxialRotary(16, rotary_dim=20), ValueError, r"at most head_dim=16.*rotary_dim=20"),
    (lambda: AxialRotary(8, axes=0), ValueError, r"axes.*0"),
    (lambda: AxialRotary(8, grid=(3, 0)), ValueError, r"grid size 1.*0"),
    (lambda: AxialRotary(8, grid=(3, 4, 5)), ValueError, r"grid must have 2 sizes.*\(3, 4, 5\)"),
    (lambda: AxialRotary(8, grid=(3.0, 4)), TypeError, r"grid size 0.*3\.0"),
    (lambda: AxialRotary(8, coords="polar"), ValueError, r"coords 'polar'.*'integer', 'pixel'"),
    (lambda: AxialRotary(8, max_freq=0.0), ValueError, r"max_freq.*0"),
    (lambda: AxialRotary(8, base=-1.0), ValueError, r"base.*-1"),
    (lambda: AxialRotary(8, angle_dtype=torch.bfloat16), ValueError, r"angle_dtype.*bfloat16"),
    (lambda: AxialRotary(8).rotate(torch.zeros(1, 1, 4, 8), torch.zeros(1, 1, 4, 8)), RuntimeError,
     r"no grid.*set_grid"),
    (lambda: AxialRotary(8, grid=(2, 2)).rotate(torch.zeros(1, 1, 5, 8), torch.zeros(1, 1, 5, 8)), ValueError,
     r"grid 2 x 2 has 4 positions, but got 5 queries at offset 0 and 5 keys"),
    (lambda: AxialRotary(8, grid=(2, 2)).rotate(torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8), q_offset=3,
                                               k_offset=3), ValueError, r"1 queries at offset 3"),
    (lambda: AxialRotary(8, grid=(2, 2)).rotate(torch.zeros(1, 1, 4, 6), torch.zeros(1, 1, 4, 6)), ValueError,
     r"head_dim=8.*\[1, 1, 4, 6\]"),
    (lambda: AxialRotary(8, grid=(2, 2)).rotate(torch.zeros(1, 1, 4, 8, dtype=torch.int64),
                                               torch.zeros(1, 1, 4, 8)), TypeError, r"q must be a floating"),
    (lambda: AxialRotary(8).set_grid(4), ValueError, r"grid must have 2 sizes.*\(4,\)"),
    (lambda: AxialRotary(8, grid=(2, 2)).rotate_at(torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8),
                                                  q_pos=torch.tensor([0.0, 1.0]), k_pos=torch.tensor([0, 1])),
     TypeError, r"q_pos.*integer"),
    (lambda: axial_rotary_angles(head_dim=8), ValueError, r"at least one size"),
    (lambda: axial_rotary_angles(0, 3, head_dim=8), ValueError, r"grid size 0.*0"),
    (lambda: axial_rotary_angles(2, 3, head_dim=6), ValueError, r"head_dim=6 cannot be split"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
