"""KERPLE against float64 re-implementations of Chi et al. 2022's kernels; in attention, cached, audited."""

import math

import pytest
import torch
from torch import nn

from attnlab.analysis.position_audit import audit_position
from attnlab.attention import KVCache, MultiHeadAttention
from attnlab.encodings.kerple import KERPLE
from attnlab.encodings.scheme import PositionScheme


def reference_kerple(kernel, r1, r2, q_pos, k_pos):
    """The paper's §4 kernels pair by pair in plain Python floats: ``[H, T, S]`` float64.

    logarithmic ``-r1 log(1 + r2 |i - j|)``; power ``-r1 |i - j| ** r2``.
    """
    out = torch.empty(len(r1), len(q_pos), len(k_pos), dtype=torch.float64)
    for h, (a1, a2) in enumerate(zip(r1, r2, strict=True)):
        for a, i in enumerate(q_pos):
            for b, j in enumerate(k_pos):
                d = abs(i - j)
                out[h, a, b] = -a1 * math.log(1 + a2 * d) if kernel == "log" else -a1 * d**a2
    return out


def params(kerple):
    return kerple.r1.tolist(), kerple.r2.tolist()


def zeros_q(n_heads, T, dtype=torch.float32):
    return torch.zeros(2, n_heads, T, 4, dtype=dtype)


# -- the bias against the formula -----------------------------------------------------------


@pytest.mark.parametrize("kernel", ["log", "power"])
@pytest.mark.parametrize("n_heads", [1, 3, 8])
def test_bias_matches_the_formula_at_offsets(n_heads, kernel):
    kerple = KERPLE(n_heads, kernel=kernel).double()  # the authors' random initialisation
    q_pos, k_pos = list(range(4, 9)), list(range(1, 13))
    want = reference_kerple(kernel, *params(kerple), q_pos, k_pos)
    b = kerple.bias(zeros_q(n_heads, 5, torch.float64), 12, q_offset=4, k_offset=1)
    assert b.shape == (1, n_heads, 5, 12) and b.dtype == torch.float64
    torch.testing.assert_close(b[0], want, atol=1e-12, rtol=1e-14)
    b32 = kerple.float().bias(zeros_q(n_heads, 5), 12, q_offset=4, k_offset=1)
    want32 = reference_kerple(kernel, *params(kerple), q_pos, k_pos)  # the float32-rounded parameters
    torch.testing.assert_close(b32[0].double(), want32, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kernel", ["log", "power"])
@pytest.mark.parametrize("n_heads", [2, 5])
def test_bias_at_arbitrary_sorted_positions(n_heads, kernel):
    # Randomized positions (Ruoss et al. 2023): a sorted random subset of [0, 5000).
    kerple = KERPLE(n_heads, kernel=kernel).double()
    g = torch.Generator().manual_seed(7)
    k_pos = torch.randperm(5000, generator=g)[:10].sort().values
    q_pos = k_pos[[1, 4, 9]]
    b = kerple.bias_at(zeros_q(n_heads, 3, torch.float64), q_pos=q_pos, k_pos=k_pos)
    want = reference_kerple(kernel, *params(kerple), q_pos.tolist(), k_pos.tolist())
    torch.testing.assert_close(b[0], want, atol=1e-12, rtol=1e-14)


def test_positions_beyond_float32_integers_stay_exact():
    # 2**25 + 1 rounds to 2**25 in float32: distances must be taken as integers first.
    assert torch.tensor(2**25 + 1, dtype=torch.float32) == torch.tensor(2**25, dtype=torch.float32)
    kerple = KERPLE(2, init_r1=1.0, init_r2=1.0)
    b = kerple.bias_at(zeros_q(2, 1), q_pos=torch.tensor([2**25 + 2]), k_pos=torch.tensor([2**25, 2**25 + 1]))
    torch.testing.assert_close(b[0, 0, 0], torch.tensor([-math.log(3), -math.log(2)]))


def test_visible_half_equals_the_authors_tril_form():
    # chijames/KERPLE's ParallelKerpleLog: diff = tril(i - j), bias = -p * log(1 + a * diff),
    # p and a per head [H, 1, 1]. Equal where a causal mask lets the query see the key.
    kerple = KERPLE(4).double()
    i, j = torch.arange(9)[:, None], torch.arange(9)[None, :]
    diff = torch.tril(i - j).double()  # [T, S], 0 above the diagonal
    theirs = -kerple.r1.detach()[:, None, None] * torch.log(1 + kerple.r2.detach()[:, None, None] * diff)
    ours = kerple.bias(zeros_q(4, 9, torch.float64), 9)[0].detach()
    visible = (j <= i).expand(4, 9, 9)
    torch.testing.assert_close(ours[visible], theirs[visible], atol=1e-14, rtol=0)
    assert not torch.allclose(ours, theirs)  # above the diagonal ours is symmetric; there the mask decides
    torch.testing.assert_close(ours, ours.transpose(-1, -2), atol=0, rtol=0)


def test_initialisation_follows_the_authors():
    # log: r1 ~ U(0, 2) (their bias_p), r2 ~ U(0, 1) (bias_a); power: r1 ~ U(0, 1), r2 ~ U(0, 2).
    for kernel, (hi1, hi2) in {"log": (2.0, 1.0), "power": (1.0, 2.0)}.items():
        kerple = KERPLE(4096, kernel=kernel)
        for r, hi in ((kerple.r1, hi1), (kerple.r2, hi2)):
            assert 0 <= r.min() < 0.01 * hi and 0.99 * hi < r.max() <= hi
            assert abs(r.mean().item() - hi / 2) < 0.03 * hi
    fixed = KERPLE(3, init_r1=0.5, init_r2=1.5)
    assert fixed.r1.tolist() == [0.5] * 3 and fixed.r2.tolist() == [1.5] * 3


def test_values_are_clamped_as_the_authors_do_with_the_gradient_passed_through():
    # Their forward writes clamp(r, 1e-2) (and r2 <= 2 for the power kernel) into the parameters.
    # Ours uses the clamped value with the gradient passed straight through.
    for kernel, bad_r2, used_r2 in (("log", -3.0, 1e-2), ("power", 3.5, 2.0)):
        kerple = KERPLE(2, kernel=kernel).double()
        clamped = KERPLE(2, kernel=kernel).double()
        with torch.no_grad():
            kerple.r1.copy_(torch.tensor([-0.5, 0.7]))
            kerple.r2.copy_(torch.tensor([bad_r2, 0.3]))
            clamped.r1.copy_(torch.tensor([1e-2, 0.7]))
            clamped.r2.copy_(torch.tensor([used_r2, 0.3]))
        q = zeros_q(2, 6, torch.float64)
        b, want = kerple.bias(q, 6), clamped.bias(q, 6)
        torch.testing.assert_close(b, want, atol=0, rtol=0)
        b.square().sum().backward()
        want.square().sum().backward()
        torch.testing.assert_close(kerple.r1.grad, clamped.r1.grad, atol=0, rtol=0)
        torch.testing.assert_close(kerple.r2.grad, clamped.r2.grad, atol=0, rtol=0)
        assert (kerple.r1.grad != 0).all() and (kerple.r2.grad != 0).all()


def test_bias_dtype_follows_the_queries():
    kerple = KERPLE(2)
    for dtype, want in [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                        (torch.float32, torch.float32), (torch.float64, torch.float64)]:
        assert kerple.bias(zeros_q(2, 3, dtype), 4).dtype == want


def test_module_attributes():
    kerple = KERPLE(4, kernel="power", causal=False)
    assert isinstance(kerple, PositionScheme) and kerple.max_len is None and kerple.caches
    assert not kerple.adds_value and not kerple.causal
    assert [(n, tuple(p.shape)) for n, p in kerple.named_parameters()] == [("r1", (4,)), ("r2", (4,))]
    assert "kernel='power'" in repr(kerple)


# -- in attention ---------------------------------------------------------------------------


def random_mha(scheme, n_heads, head_dim=4):
    mha = MultiHeadAttention(n_heads, n_heads * head_dim, position=scheme)
    with torch.no_grad():
        for p in mha.parameters():
            p.add_(0.3 * torch.randn_like(p))  # fresh layers barely react to position
    return mha.eval()


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_causal_attention_ignores_later_tokens(kernel):
    mha = random_mha(KERPLE(2, kernel=kernel), 2)
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
    """A decoder-only stack of residual causal self-attention layers, each with its own KERPLE."""

    def __init__(self, kernel, n_layers=2, n_heads=2, head_dim=4):
        super().__init__()
        self.layers = nn.ModuleList(random_mha(KERPLE(n_heads, kernel=kernel), n_heads, head_dim)
                                    for _ in range(n_layers))

    def forward(self, x, caches=None):
        for n, layer in enumerate(self.layers):
            x = x + layer(x, is_causal=True, cache=None if caches is None else caches[n])
        return x


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_cached_decoding_equals_the_full_pass(kernel):
    model = TinyDecoder(kernel).eval()
    x = torch.randn(3, 14, 8)
    with torch.no_grad():
        full = model(x)
        caches = [KVCache() for _ in model.layers]
        steps, start = [], 0
        for size in (1, 1, 3, 1, 2, 1, 5):  # single tokens and chunks
            steps.append(model(x[:, start : start + size], caches))
            start += size
    assert start == 14 and len(caches[0]) == 14
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


# -- gradients ------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_gradients_reach_every_parameter(kernel):
    kerple = KERPLE(2, kernel=kernel)
    mha = random_mha(kerple, 2)
    x = torch.randn(2, 10, 8)
    mha(x, is_causal=True).square().sum().backward()
    for name, p in kerple.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and (p.grad != 0).all(), name


class _Bias(nn.Module):
    """Lets torch.func.functional_call swap the scheme's parameters for gradcheck's inputs."""

    def __init__(self, scheme, q, q_pos, k_pos):
        super().__init__()
        self.scheme, self.q, self.q_pos, self.k_pos = scheme, q, q_pos, k_pos

    def forward(self):
        return self.scheme.bias_at(self.q, q_pos=self.q_pos, k_pos=self.k_pos)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_gradcheck_float64(kernel):
    # Values away from the clamps (eps = 1e-2, and 2 for the power), distance 0 included.
    kerple = KERPLE(3, kernel=kernel).double()
    with torch.no_grad():
        kerple.r1.copy_(torch.tensor([0.3, 1.1, 1.7]))
        kerple.r2.copy_(torch.tensor([0.2, 0.9, 1.6]))
    pos = torch.arange(6)
    wrapper = _Bias(kerple, zeros_q(3, 6, torch.float64), pos, pos)
    values = (kerple.r1.detach().clone().requires_grad_(), kerple.r2.detach().clone().requires_grad_())

    def bias(r1, r2):
        return torch.func.functional_call(wrapper, {"scheme.r1": r1, "scheme.r2": r2}, ())

    assert torch.autograd.gradcheck(bias, values)


# -- the audit ------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_audit_kerple_is_purely_relative(kernel):
    # The bias is a function of |i - j| alone, so score(i, i + d) is the same for every i,
    # shifting every position changes nothing, and a query decoded alone at q_offset = p gets
    # row p of the full pass. KERPLE only adds a bias: there is no rotation, norm n/a.
    report = audit_position(KERPLE(4, kernel=kernel))
    assert {c.name: c.verdict for c in report.checks} == {
        "offset_only": "pass", "norm_preserved": "n/a", "shift_invariant": "pass", "offsets_consistent": "pass"}


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: KERPLE(0), ValueError, r"n_heads.*0"),
    (lambda: KERPLE(True), TypeError, r"n_heads.*True"),
    (lambda: KERPLE(2, kernel="cosine"), ValueError, r"kernel 'cosine'.*'log', 'power'"),
    (lambda: KERPLE(2, causal=1), TypeError, r"causal.*1"),
    (lambda: KERPLE(2, init_r1=0.0), ValueError, r"init_r1.*0"),
    (lambda: KERPLE(2, init_r1=-1.0), ValueError, r"init_r1.*-1\.0"),
    (lambda: KERPLE(2, init_r2=1e-3), ValueError, r"init_r2 must be at least eps.*0\.001"),
    (lambda: KERPLE(2, init_r2=math.nan), ValueError, r"init_r2.*nan"),
    (lambda: KERPLE(2, kernel="power", init_r2=2.5), ValueError, r"init_r2 must be at most 2\.0.*power.*2\.5"),
    (lambda: KERPLE(2, init_r1="1"), TypeError, r"init_r1.*'1'"),
    (lambda: KERPLE(2, eps=0), ValueError, r"eps.*0"),
    (lambda: KERPLE(2).bias(torch.zeros(1, 3, 2, 4), 2), ValueError, r"n_heads = 2.*\[1, 3, 2, 4\]"),
    (lambda: KERPLE(2).bias(torch.zeros(1, 2, 2, 4), -1), ValueError, r"n_keys.*-1"),
    (lambda: KERPLE(2).bias_at(torch.zeros(1, 2, 2, 4), q_pos=torch.arange(2), k_pos=torch.zeros(1, 2, 2).long()),
     ValueError, r"k_pos must be \[L\] .*got shape \[1, 2, 2\]"),
    (lambda: KERPLE(2).bias_at(torch.zeros(1, 2, 2, 4), q_pos=torch.ones(2).bool(), k_pos=torch.arange(2)),
     TypeError, r"q_pos must be an integer tensor.*bool"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
