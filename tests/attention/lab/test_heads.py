"""LabMultiHeadAttention is the labs' MultiHeadAttention: parameters, outputs and alphas after the same seed.

The reference is the positional-encoding lab's own code (``Attention`` and
``MultiHeadAttention``, as the lab writes them, in ``tests/lab_code.py``). attnlab's module is
built, seeded and called as the lab's is: ``LabMultiHeadAttention(n_heads,
d_model, input_dim=None, proj_values=True)``, ``mha.init_keys(x)``, then
``mha(query, mask)`` with the lab's 0/1 float mask, and ``mha.alphas`` read after
the call. Both run in float64, so agreement is asked to 1e-12.
"""

import io

import pytest
import torch

from attnlab.attention import KVCache, LabMultiHeadAttention, MultiHeadAttention, keeping_alphas

from lab_code import MultiHeadAttention as LabsMultiHeadAttention  # the lab's own module

# -- the comparisons ----------------------------------------------------------------------------------------

ATOL = 1e-12
# (n_heads, d_model, input_dim, proj_values): H divides D, H does not divide D, the issue's (2, 4, input_dim=5),
# input_dim defaulted, and the raw keys as values.
CASES = [(2, 4, 5, True), (3, 4, None, True), (4, 8, 3, True), (3, 2, 2, True), (1, 5, None, True), (2, 3, None, False)]


@pytest.fixture(autouse=True)
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def pair(n_heads, d_model, input_dim, proj_values, seed=42):
    """The lab's module and attnlab's, each built right after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    theirs = LabsMultiHeadAttention(n_heads, d_model, input_dim=input_dim, proj_values=proj_values)
    torch.manual_seed(seed)
    mine = LabMultiHeadAttention(n_heads, d_model, input_dim=input_dim, proj_values=proj_values)
    return theirs, mine


def lab_mask(B, S, T=None, seed=0):
    """The lab's float masks: a source mask ``[B, 1, S]`` (some steps 0) or a causal ``[1, T, T]`` (1 - triu)."""
    if T is not None:
        return 1 - torch.triu(torch.ones((1, T, T)), diagonal=1)
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, 1, S, generator=g) > 0.3).to(torch.get_default_dtype())
    mask[:, :, 0] = 1.0  # every row keeps a key: the lab's -1e9 and attnlab's zeros then agree exactly
    return mask


@pytest.mark.parametrize(("n_heads", "d_model", "input_dim", "proj_values"), CASES)
def test_parameters_equal_the_labs_after_the_same_seed(n_heads, d_model, input_dim, proj_values):
    theirs, mine = pair(n_heads, d_model, input_dim, proj_values)
    count = sum(p.numel() for p in theirs.parameters())
    assert sum(p.numel() for p in mine.parameters()) == count
    F_ = d_model if input_dim is None else input_dim
    assert count == (n_heads * d_model + 1) * d_model + n_heads * 3 * (F_ + 1) * d_model  # every head D wide
    # The lab's per-head weights, stacked q | k | v with the heads in order, are attnlab's packed rows.
    for kind in ("weight", "bias"):
        stacked = torch.cat([getattr(getattr(h, proj), kind) for proj in ("linear_query", "linear_key", "linear_value")
                             for h in theirs.attn_heads])
        assert torch.equal(getattr(mine.in_proj, kind), stacked)
        assert torch.equal(getattr(mine.linear_out, kind), getattr(theirs.linear_out, kind))
    torch.manual_seed(42)
    LabsMultiHeadAttention(n_heads, d_model, input_dim=input_dim, proj_values=proj_values)
    after_theirs = torch.rand(4)
    torch.manual_seed(42)
    LabMultiHeadAttention(n_heads, d_model, input_dim=input_dim, proj_values=proj_values)
    assert torch.equal(torch.rand(4), after_theirs)  # the modules built next start from the lab's weights too


def test_the_issues_case_has_the_labs_180_parameters():
    assert sum(p.numel() for p in LabMultiHeadAttention(2, 4, input_dim=5).parameters()) == 180


@pytest.mark.parametrize(("n_heads", "d_model", "input_dim", "proj_values"), CASES)
@pytest.mark.parametrize("masking", ["none", "source", "causal"])
def test_outputs_and_alphas_equal_the_labs_called_as_the_labs_call_it(n_heads, d_model, input_dim, proj_values,
                                                                      masking):
    theirs, mine = pair(n_heads, d_model, input_dim, proj_values)
    B, S = 3, 6
    x = torch.randn(B, S, d_model if input_dim is None else input_dim)
    mask = {"none": None, "source": lab_mask(B, S), "causal": lab_mask(B, S, T=S)}[masking]
    # Self-attention, the lab's way: init_keys(x), then mha(query, mask) with positional arguments.
    theirs.init_keys(x)
    mine.init_keys(x)
    expected = theirs(x, mask)
    got = mine(x, mask)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.alphas, theirs.alphas, atol=ATOL, rtol=0)  # [H, B, T, S], read after the call
    assert mine.alphas.shape == (n_heads, B, S, S)
    # Cross-attention, the lab's way: keys set once, several queries of another length.
    query = torch.randn(B, 2, x.shape[-1])
    cross_mask = None if mask is None or masking == "causal" else mask
    torch.testing.assert_close(mine(query, cross_mask), theirs(query, cross_mask), atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.alphas, theirs.alphas, atol=ATOL, rtol=0)
    # attnlab's stateless call gives the lab's numbers too, and keeps the lab's alphas.
    torch.testing.assert_close(mine.attend(x, mask=mask), expected, atol=ATOL, rtol=0)
    theirs(x, mask)  # the lab's alphas of the self-attention call again
    torch.testing.assert_close(mine.alphas, theirs.alphas, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("n_heads", "d_model", "input_dim"), [(2, 4, 5), (3, 4, None)])
def test_gradients_equal_the_labs(n_heads, d_model, input_dim):
    theirs, mine = pair(n_heads, d_model, input_dim, True, seed=7)
    x = torch.randn(2, 5, d_model if input_dim is None else input_dim)
    mask = lab_mask(2, 5)
    for module in (theirs, mine):
        module.init_keys(x)
        module(x, mask).pow(2).sum().backward()
    torch.testing.assert_close(mine.linear_out.weight.grad, theirs.linear_out.weight.grad, atol=ATOL, rtol=0)
    lab_grads = torch.cat([getattr(h, proj).weight.grad for proj in ("linear_query", "linear_key", "linear_value")
                           for h in theirs.attn_heads])
    torch.testing.assert_close(mine.in_proj.weight.grad, lab_grads, atol=ATOL, rtol=0)


def test_the_labs_checkpoint_loads_into_the_module():
    torch.manual_seed(3)
    theirs = LabsMultiHeadAttention(3, 4, input_dim=2)
    for p in theirs.parameters():  # weights no seed of ours draws
        p.data.add_(torch.randn_like(p))
    buffer = io.BytesIO()
    torch.save(theirs.state_dict(), buffer)
    buffer.seek(0)
    mine = LabMultiHeadAttention(3, 4, input_dim=2)
    result = mine.load_state_dict(torch.load(buffer, weights_only=True))
    assert not result.missing_keys and not result.unexpected_keys
    x = torch.randn(2, 3, 2)
    theirs.init_keys(x)
    mine.init_keys(x)
    torch.testing.assert_close(mine(x), theirs(x), atol=ATOL, rtol=0)


def test_cached_decoding_gives_the_labs_re_decoding_and_its_alphas():
    """attnlab's fast path (a KVCache per layer, one new step per call) against the lab's whole-prefix re-run."""
    theirs, mine = pair(2, 4, 3, True, seed=5)
    x = torch.randn(2, 5, 3)
    cache, steps = KVCache(), []
    for t in range(5):
        steps.append(mine.attend(x[:, t : t + 1], is_causal=True, cache=cache))  # [B, 1, D]
    theirs.init_keys(x)
    expected = theirs(x, lab_mask(2, 5, T=5))  # the lab's last re-decoding: the whole prefix, causal
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.alphas, theirs.alphas, atol=ATOL, rtol=0)  # every step so far, [H, B, T, T]


def test_keeping_alphas_false_keeps_nothing():
    _, mine = pair(2, 4, None, True)
    x = torch.randn(1, 3, 4)
    with keeping_alphas(False):
        mine.attend(x)
    assert mine.alphas is None


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda m, x: m(x), RuntimeError, r"no keys: call init_keys\(keys\) first"),
    (lambda m, x: (m.init_keys(x), m(x, torch.full((1, 1, 3), 0.5)))[1], ValueError, "mask .* only 0 .* and 1"),
    (lambda m, x: m.init_keys(x[..., :3]), ValueError, r"keys must have shape \[B, L, 4\], got \[1, 3, 3\]"),
    (lambda m, x: LabMultiHeadAttention(2, 4, input_dim=3, proj_values=False), ValueError,
     r"proj_values=False .* input_dim \(3\) must equal head_dim \(4\)"),
    (lambda m, x: LabMultiHeadAttention(0, 4), ValueError, "n_heads must be positive, got 0"),
    (lambda m, x: LabMultiHeadAttention(2, 4, head_dim=2), TypeError, "head_dim"),
])
def test_bad_calls_name_the_argument(call, error, match):
    module = LabMultiHeadAttention(2, 4)
    with pytest.raises(error, match=match):
        call(module, torch.randn(1, 3, 4))


def test_the_labs_module_is_attnlabs_multihead_attention_with_heads_d_model_wide():
    mine = LabMultiHeadAttention(3, 4)  # 3 does not divide 4: every head is 4 wide anyway
    assert isinstance(mine, MultiHeadAttention) and mine.head_dim == mine.d_model == 4
    assert mine.in_proj.weight.shape == (3 * 3 * 4, 4) and mine.linear_out.weight.shape == (4, 3 * 4)


# The previous API's keywords stopped at a bare TypeError; each now names what replaced it.
@pytest.mark.bad_input("tracebacks and messages")
@pytest.mark.parametrize(("given", "named"), [
    ({"head_dim": 2}, r"takes no head_dim= any more: .*MultiHeadAttention\(n_heads, d_model, head_dim=\.\.\.\)"),
    ({"dropout": 0.1}, r"takes no dropout= any more: .*MultiHeadAttention\(\.\.\., dropout=\.\.\.\)"),
    ({"head_dim": 2, "dropout": 0.1}, r"takes no head_dim= any more"),
    ({"bogus": 1}, r"got an unexpected keyword argument 'bogus'"),
])
def test_a_removed_argument_names_its_replacement(given, named):
    from attnlab.attention import LabMultiHeadAttention

    with pytest.raises(TypeError, match=named):
        LabMultiHeadAttention(2, 4, **given)
