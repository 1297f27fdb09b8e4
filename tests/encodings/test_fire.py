"""FIRE against a float64 re-implementation of Li et al. 2024's formula; in attention, cached, audited."""

import math

import pytest
import torch
from torch import nn

from attnlab.analysis.position_audit import audit_position
from attnlab.attention import KVCache, MultiHeadAttention
from attnlab.encodings.fire import FIRE
from attnlab.encodings.scheme import PositionScheme


def reference_fire(fire, q_pos, k_pos):
    """``b_h(i, j) = f(psi(|i - j|) / (psi(max(L, i)) + eps))``, ``psi(x) = log(c x + 1)``, pair by pair.

    From the paper's §3 and its appendix listing: ``|c|``, ``L = |m * L0|``, ``eps`` added
    to the normaliser, ``f`` = Linear(1, hidden) -> ReLU -> Linear(hidden, H). For
    ``causal=False``, outputs ``H .. 2H - 1`` for keys after the query (FIRE's documented
    extension). Plain Python floats for the log ratio, float64 tensors for the MLP.
    """
    w1 = fire.mlp[0].weight.detach().double()[:, 0]  # [hidden]
    b1 = fire.mlp[0].bias.detach().double()  # [hidden]
    w2 = fire.mlp[2].weight.detach().double()  # [n_out, hidden]
    b2 = fire.mlp[2].bias.detach().double()  # [n_out]
    c = abs(fire.c.item())
    L = abs(fire.threshold_multiplier.item() * fire.init_threshold)
    H = fire.n_heads
    out = torch.empty(H, len(q_pos), len(k_pos), dtype=torch.float64)
    for a, i in enumerate(q_pos):
        for b, j in enumerate(k_pos):
            x = math.log(c * abs(i - j) + 1) / (math.log(c * max(L, i) + 1) + fire.eps)
            y = w2 @ torch.relu(w1 * x + b1) + b2  # [n_out]
            out[:, a, b] = y[H:] if (not fire.causal and j > i) else y[:H]
    return out


def make_fire(n_heads, *, causal=True, **kwargs):
    """A FIRE whose c and threshold are moved off their defaults (negative, to check the |.|)."""
    fire = FIRE(n_heads, causal=causal, init_threshold=6.0, **kwargs)
    with torch.no_grad():
        fire.c.fill_(-0.25)  # used as |c| = 0.25
        fire.threshold_multiplier.fill_(-1.5)  # L = |-1.5 * 6| = 9
    return fire


def zeros_q(n_heads, T, dtype=torch.float32):
    return torch.zeros(2, n_heads, T, 4, dtype=dtype)


# -- the bias against the formula -----------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_heads", [1, 3, 8])
def test_bias_matches_the_formula_at_offsets(n_heads, causal):
    fire = make_fire(n_heads, causal=causal)
    # queries 4..8, keys 1..12: both sides of the query, and queries on both sides of L = 9
    q_pos, k_pos = list(range(4, 9)), list(range(1, 13))
    want = reference_fire(fire, q_pos, k_pos)
    b = fire.bias(zeros_q(n_heads, 5), 12, q_offset=4, k_offset=1)
    assert b.shape == (1, n_heads, 5, 12) and b.dtype == torch.float32
    torch.testing.assert_close(b[0].double(), want, atol=1e-5, rtol=0)  # float32 MLP
    fire.double()
    b64 = fire.bias(zeros_q(n_heads, 5, torch.float64), 12, q_offset=4, k_offset=1)
    torch.testing.assert_close(b64[0], want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n_heads", [2, 5])
def test_bias_at_arbitrary_sorted_positions(n_heads, causal):
    # Randomized positions (Ruoss et al. 2023): a sorted random subset of [0, 5000).
    fire = make_fire(n_heads, causal=causal).double()
    g = torch.Generator().manual_seed(7)
    k_pos = torch.randperm(5000, generator=g)[:10].sort().values
    q_pos = k_pos[[1, 4, 9]]
    b = fire.bias_at(zeros_q(n_heads, 3, torch.float64), q_pos=q_pos, k_pos=k_pos)
    assert b.shape == (1, n_heads, 3, 10)
    torch.testing.assert_close(b[0], reference_fire(fire, q_pos.tolist(), k_pos.tolist()), atol=1e-12, rtol=0)


def test_positions_beyond_float32_integers_stay_exact():
    # From 2**24 on float32 cannot hold every integer: 2**25 + 1 rounds to 2**25, so a
    # float32 subtraction would give the neighbouring keys the same distance.
    assert torch.tensor(2**25 + 1, dtype=torch.float32) == torch.tensor(2**25, dtype=torch.float32)
    fire = make_fire(2).double()
    k_pos = [2**25, 2**25 + 1, 2**25 + 2]
    b = fire.bias_at(zeros_q(2, 1, torch.float64), q_pos=torch.tensor([2**25 + 2]), k_pos=torch.tensor(k_pos))
    torch.testing.assert_close(b[0], reference_fire(fire, [2**25 + 2], k_pos), atol=1e-12, rtol=0)
    assert len(set(b[0, 0, 0].tolist())) == 3


def test_progressive_interpolation_maps_visible_distances_into_unit_interval():
    fire = FIRE(2, init_threshold=16.0)
    pos = torch.arange(0, 4000, 37)
    x = fire.normalized_distance(pos, pos).detach()  # [T, S]
    visible = pos[None, :] <= pos[:, None]
    assert x.dtype == torch.float64 and x[visible].min() == 0 and x[visible].max() <= 1
    # below the threshold the normaliser is psi(L): the paper's short-sequence regime
    c = fire.c.item()  # 0.1 rounded to float32, the parameter's dtype
    want = math.log(c * 5 + 1) / (math.log(c * 16 + 1) + 1e-6)
    assert fire.normalized_distance(torch.tensor([7]), torch.tensor([2])).item() == pytest.approx(want, abs=1e-15)


def test_bias_dtype_follows_the_queries():
    fire = FIRE(2)
    for dtype, want in [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                        (torch.float32, torch.float32), (torch.float64, torch.float64)]:
        assert fire.bias(zeros_q(2, 3, dtype), 4).dtype == want


def test_module_defaults_follow_the_paper():
    fire = FIRE(4)
    assert isinstance(fire, PositionScheme) and fire.max_len is None and fire.caches and not fire.adds_value
    assert [n for n, _ in fire.named_parameters()] == [
        "c", "threshold_multiplier", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"]
    assert fire.mlp[0].out_features == 32 and isinstance(fire.mlp[1], nn.ReLU) and fire.mlp[2].out_features == 4
    assert fire.c.item() == pytest.approx(0.1) and fire.threshold.item() == 512.0
    assert FIRE(4, causal=False).mlp[2].out_features == 8  # one output set per direction
    assert "init_threshold=512.0" in repr(fire)


# -- in attention ---------------------------------------------------------------------------


def random_mha(scheme, n_heads, head_dim=4):
    mha = MultiHeadAttention(n_heads, n_heads * head_dim, position=scheme)
    with torch.no_grad():
        for p in mha.parameters():
            p.add_(0.3 * torch.randn_like(p))  # fresh layers barely react to position
    return mha.eval()


def test_causal_attention_ignores_later_tokens():
    mha = random_mha(make_fire(2), 2)
    x = torch.randn(2, 12, 8)
    with torch.no_grad():
        out = mha(x, is_causal=True)
        for p in (0, 5, 11):
            x2 = x.clone()
            x2[:, p:] = torch.randn(2, 12 - p, 8)
            out2 = mha(x2, is_causal=True)
            torch.testing.assert_close(out2[:, :p], out[:, :p], atol=1e-6, rtol=0)
            assert not torch.allclose(out2[:, p:], out[:, p:])  # the change itself does show


class TinyDecoder(nn.Module):
    """A decoder-only stack of residual causal self-attention layers, each with its own FIRE."""

    def __init__(self, n_layers=2, n_heads=2, head_dim=4):
        super().__init__()
        self.layers = nn.ModuleList(random_mha(make_fire(n_heads), n_heads, head_dim) for _ in range(n_layers))

    def forward(self, x, caches=None):
        for n, layer in enumerate(self.layers):
            x = x + layer(x, is_causal=True, cache=None if caches is None else caches[n])
        return x


def test_cached_decoding_equals_the_full_pass():
    model = TinyDecoder().eval()
    x = torch.randn(3, 14, 8)
    with torch.no_grad():
        full = model(x)
        caches = [KVCache() for _ in model.layers]
        steps, start = [], 0
        for size in (1, 1, 3, 1, 2, 1, 5):  # single tokens and chunks; positions run past L = 9
            steps.append(model(x[:, start : start + size], caches))
            start += size
    assert start == 14 and len(caches[0]) == 14
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


# -- gradients ------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
def test_gradients_reach_every_parameter(causal):
    fire = make_fire(2, causal=causal)  # L = 9: rows below L train the threshold, rows above do not
    mha = random_mha(fire, 2)
    x = torch.randn(2, 16, 8)
    mha(x, is_causal=causal).square().sum().backward()
    for name, p in fire.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


class _Bias(nn.Module):
    """Lets torch.func.functional_call swap the scheme's parameters for gradcheck's inputs."""

    def __init__(self, scheme, q, q_pos, k_pos):
        super().__init__()
        self.scheme, self.q, self.q_pos, self.k_pos = scheme, q, q_pos, k_pos

    def forward(self):
        return self.scheme.bias_at(self.q, q_pos=self.q_pos, k_pos=self.k_pos)


@pytest.mark.parametrize("causal", [True, False])
def test_gradcheck_float64(causal):
    fire = FIRE(2, causal=causal, hidden=4, init_threshold=3.5).double()  # L between integers: no ties
    pos = torch.arange(7)
    wrapper = _Bias(fire, zeros_q(2, 7, torch.float64), pos, pos)
    names = [f"scheme.{n}" for n, _ in fire.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in fire.parameters())

    def bias(*values):
        return torch.func.functional_call(wrapper, dict(zip(names, values, strict=True)), ())

    assert torch.autograd.gradcheck(bias, params, fast_mode=True)


# -- the audit ------------------------------------------------------------------------------


def verdicts(report):
    return {c.name: c.verdict for c in report.checks}


def test_audit_below_the_threshold_fire_is_purely_relative():
    # The audit's positions reach 287 (256 + a 32-position window); the default L = 512 is
    # above all of them, so psi(max(L, i)) = psi(L) is one constant and the bias depends on
    # i - j alone: every relative check passes (and FIRE does not rotate: norm n/a).
    assert verdicts(audit_position(FIRE(2))) == {
        "offset_only": "pass", "norm_preserved": "n/a", "shift_invariant": "pass", "offsets_consistent": "pass"}


@pytest.mark.parametrize("causal", [True, False])
def test_audit_past_the_threshold_fire_depends_on_the_query_position(causal):
    fire = FIRE(2, causal=causal, init_threshold=8.0)
    report = verdicts(audit_position(fire, max_positions=64))
    # Past L = 8 the normaliser is psi(i): score(i, i + d) changes with i and moving every
    # position by a changes the scores. But the bias is a function of the two positions only,
    # so a query decoded alone at q_offset = p gets row p of the full pass: offsets consistent.
    assert report == {"offset_only": "fail", "norm_preserved": "n/a", "shift_invariant": "fail",
                      "offsets_consistent": "pass"}
    # ... which is the right answer for the formula: along the diagonal j = i - 3 the
    # reference bias is constant while i <= L and changes once i > L.
    diag = reference_fire(fire, list(range(3, 30)), list(range(0, 27))).diagonal(dim1=-2, dim2=-1)  # [H, 27]
    below, above = diag[:, : 8 - 3 + 1], diag[:, 8 - 3 + 1 :]  # i = 3..8, i = 9..29
    assert (below - below[:, :1]).abs().max() < 1e-12
    assert (above - above[:, :1]).abs().max() > 1e-3


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: FIRE(0), ValueError, r"n_heads.*0"),
    (lambda: FIRE(2.0), TypeError, r"n_heads.*2\.0"),
    (lambda: FIRE(2, hidden=0), ValueError, r"hidden.*0"),
    (lambda: FIRE(2, init_c=0.0), ValueError, r"init_c.*0"),
    (lambda: FIRE(2, init_c=-0.1), ValueError, r"init_c.*-0\.1"),
    (lambda: FIRE(2, init_c="0.1"), TypeError, r"init_c.*'0\.1'"),
    (lambda: FIRE(2, init_threshold=0), ValueError, r"init_threshold.*0"),
    (lambda: FIRE(2, init_threshold=math.inf), ValueError, r"init_threshold.*inf"),
    (lambda: FIRE(2, eps=-1e-6), ValueError, r"eps.*-1e-06"),
    (lambda: FIRE(2, causal="yes"), TypeError, r"causal.*'yes'"),
    (lambda: FIRE(2).bias(torch.zeros(1, 3, 2, 4), 2), ValueError, r"n_heads = 2.*\[1, 3, 2, 4\]"),
    (lambda: FIRE(2).bias(torch.zeros(1, 2, 2, 4), -1), ValueError, r"n_keys.*-1"),
    (lambda: FIRE(2).bias_at(torch.zeros(1, 2, 2, 4), q_pos=torch.arange(3), k_pos=torch.arange(3)),
     ValueError, r"q_pos must be \[2\] \(one position per row\) or \[B, 2\] \(per sequence\), got shape \[3\]"),
    (lambda: FIRE(2).bias_at(torch.zeros(1, 2, 2, 4), q_pos=torch.arange(2.0), k_pos=torch.arange(3)),
     TypeError, r"q_pos must be an integer tensor.*float32"),
    (lambda: FIRE(2).bias_at(torch.zeros(1, 2, 2, 4), q_pos=torch.arange(2), k_pos=[0, 1]),
     TypeError, r"k_pos must be an integer tensor \[L\], got list"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
