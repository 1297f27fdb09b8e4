"""RoPE scaling side by side with transformers 5.23 (the test extra pins it: these formulas change
between releases): every rope type's frequencies and attention factor against ROPE_INIT_FUNCTIONS,
Rotary's rotated queries and keys against Llama's LlamaRotaryEmbedding + apply_rotary_pos_emb, the
per-position rule of the length-dependent types with a key/value cache, and the bad inputs."""

import copy
import functools
import math
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

transformers = pytest.importorskip("transformers")
if transformers.__version__ != "5.23.0":
    pytest.skip(f"these tests compare with transformers 5.23.0, found {transformers.__version__}",
                allow_module_level=True)

from attnlab.attention import KVCache, MultiHeadAttention  # noqa: E402
from attnlab.encodings.rope_scaling import ROPE_TYPES, rope_frequencies  # noqa: E402
from attnlab.encodings.rotary import Rotary  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@functools.cache
def hf() -> SimpleNamespace:
    """transformers' Llama and GPT-NeoX pieces, imported on first use: the modelling modules take
    seconds to import, and every xdist worker collects this file, not only the one that runs it."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    return SimpleNamespace(LlamaConfig=LlamaConfig, ROPE_INIT_FUNCTIONS=ROPE_INIT_FUNCTIONS,
                           GPTNeoXRotaryEmbedding=GPTNeoXRotaryEmbedding,
                           LlamaRotaryEmbedding=LlamaRotaryEmbedding, apply_rotary_pos_emb=apply_rotary_pos_emb)


def hf_config(rope_parameters, *, head_dim, max_position_embeddings):
    """A tiny LlamaConfig carrying ``rope_parameters`` (copied: transformers fills in defaults in place)."""
    return hf().LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, num_key_value_heads=2, head_dim=head_dim,
                       num_hidden_layers=1, intermediate_size=8, vocab_size=8,
                       max_position_embeddings=max_position_embeddings,
                       rope_parameters=copy.deepcopy(rope_parameters))


def hf_frequencies(rope_parameters, *, head_dim, max_position_embeddings, seq_len=None):
    """transformers' (inv_freq, attention_factor) for these parameters."""
    config = hf_config(rope_parameters, head_dim=head_dim, max_position_embeddings=max_position_embeddings)
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":  # no ROPE_INIT_FUNCTIONS entry; GPT-NeoX's honours partial_rotary_factor
        return hf().GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
    return hf().ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=seq_len)


def rotate_half_reference(x, positions, inv_freq, attention_factor=1.0):
    """Float64 RoPE in the rotate_half pairing (x[i], x[i + d/2]) of GPT-NeoX and HF Llama.

    x [..., L, Dh]; positions [L]; inv_freq [d/2], or one row per position [L, d/2]. Pair i of the
    vector at position m turns by m * inv_freq[i] (RoFormer eq. 13-15); cos and sin are multiplied by
    attention_factor (YaRN eq. 22 / transformers' attention_scaling).
    """
    x = x.double()
    d = 2 * inv_freq.shape[-1]
    angles = positions.double()[:, None] * inv_freq.double()  # [L, d/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1) * attention_factor  # [L, d]
    sin = torch.cat([angles.sin(), angles.sin()], -1) * attention_factor  # [L, d]
    head, tail = x[..., :d], x[..., d:]
    turned = torch.cat([-head[..., d // 2 :], head[..., : d // 2]], -1)  # [..., L, d]: (-x2, x1)
    return torch.cat([head * cos + turned * sin, tail], -1)


def test_rope_types_are_transformers_types():
    assert set(ROPE_TYPES) == set(hf().ROPE_INIT_FUNCTIONS) | {"default"}


# --- frequencies and attention factor against ROPE_INIT_FUNCTIONS ---------------------------------

SHORT = [1.0, 1.1, 1.25, 1.4, 1.6, 1.8, 2.1, 2.5]
LONG = [1.0, 1.5, 2.0, 4.0, 6.0, 9.0, 12.0, 16.0]
LONGROPE = {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "original_max_position_embeddings": 64}
LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}

GRID = [
    # (rope_parameters, head_dim, max_position_embeddings, seq_len)
    ({"rope_type": "default"}, 16, 64, None),
    ({"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.5}, 16, 64, None),
    ({"rope_type": "linear", "factor": 4.0}, 16, 64, None),
    ({"rope_type": "linear", "factor": 2.5, "partial_rotary_factor": 0.25}, 32, 64, None),
    ({"rope_type": "dynamic", "factor": 4.0}, 16, 64, None),
    ({"rope_type": "dynamic", "factor": 4.0}, 16, 64, 40),
    ({"rope_type": "dynamic", "factor": 4.0}, 16, 64, 65),
    ({"rope_type": "dynamic", "factor": 4.0}, 16, 64, 300),
    ({"rope_type": "dynamic", "factor": 2.0, "partial_rotary_factor": 0.5}, 32, 64, 1000),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, 16, 256, None),
    ({"rope_type": "yarn", "factor": 4.0}, 16, 64, None),  # O falls back to max_position_embeddings
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "truncate": False}, 16, 256, None),
    ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "truncate": True,
      "rope_theta": 1e6}, 64, 32768, None),
    ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "truncate": False,
      "rope_theta": 1e6}, 64, 32768, None),
    ({"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
      "mscale_all_dim": 0.5, "beta_fast": 16, "beta_slow": 2}, 64, 163840, None),  # DeepSeek-style
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 0.9,
      "partial_rotary_factor": 0.5}, 32, 256, None),
    ({"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 64}, 16, 512, None),  # factor = M / O
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 0}, 16, 256, None),
    (LONGROPE, 16, 256, None),
    (LONGROPE, 16, 256, 64),  # at the original length: still short
    (LONGROPE, 16, 256, 65),  # above it: long
    ({**LONGROPE, "factor": 8.0}, 16, 64, 1000),
    ({**LONGROPE, "attention_factor": 1.2}, 16, 256, None),
    ({**LONGROPE, "original_max_position_embeddings": 256}, 16, 256, 300),  # factor M / O = 1: attention factor 1
    (LLAMA3, 16, 256, None),
    ({**LLAMA3, "factor": 8.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}, 128, 131072, None),
    ({k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}, 16, 64, None),
    ({"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}, 32, 64, None),
    ({"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0}, 16, 64, None),
]


@pytest.mark.parametrize(("params", "head_dim", "mpe", "seq_len"), GRID,
                         ids=[f"{i}-{case[0].get('rope_type')}" for i, case in enumerate(GRID)])
def test_frequencies_match_transformers(params, head_dim, mpe, seq_len):
    want_inv, want_factor = hf_frequencies(params, head_dim=head_dim, max_position_embeddings=mpe, seq_len=seq_len)
    inv, factor = rope_frequencies(copy.deepcopy(params), head_dim=head_dim, max_position_embeddings=mpe,
                                   seq_len=seq_len)
    assert inv.dtype == torch.float64 and isinstance(factor, float)
    # theirs is float32 (relative error up to ~5e-7 for base ** x), ours float64
    assert_close(inv, want_inv.double(), rtol=1e-6, atol=0)
    assert math.isclose(factor, float(want_factor), rel_tol=1e-6)


def test_the_grid_reaches_what_it_claims():
    # The quirks the grid is there for do change the numbers, so the comparison above can tell them apart.
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    with_o = rope_frequencies(yarn, head_dim=16, max_position_embeddings=256)
    without_o = rope_frequencies({"rope_type": "yarn", "factor": 4.0}, head_dim=16, max_position_embeddings=256)
    assert not torch.allclose(with_o[0], without_o[0])
    untruncated = rope_frequencies({**yarn, "truncate": False}, head_dim=16, max_position_embeddings=256)
    assert not torch.allclose(untruncated[0], with_o[0])
    assert rope_frequencies(LONGROPE, head_dim=16, max_position_embeddings=256, seq_len=65)[0][1] \
        == rope_frequencies(LONGROPE, head_dim=16, max_position_embeddings=256, seq_len=64)[0][1] / 1.5 * 1.1
    plain, llama3 = rope_frequencies({}, head_dim=16)[0], rope_frequencies(LLAMA3, head_dim=16)[0]
    assert llama3[0] == plain[0] and llama3[-1] == plain[-1] / 4 and plain[1] > llama3[1] > plain[1] / 4


def test_rope_theta_and_partial_factor_from_the_dict_or_the_arguments():
    by_dict = rope_frequencies({"rope_theta": 500000.0, "partial_rotary_factor": 0.5}, head_dim=16)
    by_args = rope_frequencies({}, head_dim=16, base=500000.0, partial_rotary_factor=0.5)
    agreeing = rope_frequencies({"rope_theta": 500000.0}, head_dim=16, base=500000.0, partial_rotary_factor=0.5)
    assert torch.equal(by_dict[0], by_args[0]) and torch.equal(by_dict[0], agreeing[0]) and len(by_dict[0]) == 4
    assert torch.equal(rope_frequencies({"type": "linear", "factor": 2.0}, head_dim=8)[0],  # the old key name
                       rope_frequencies({"rope_type": "linear", "factor": 2.0}, head_dim=8)[0])


# --- end to end: Rotary against LlamaRotaryEmbedding + apply_rotary_pos_emb -------------------------

HEAD_DIM, MPE = 16, 16
E2E = {
    "default": {"rope_type": "default"},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
    "llama3": {**LLAMA3, "original_max_position_embeddings": 8},
    "longrope": {**LONGROPE, "original_max_position_embeddings": 8},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
}


def hf_rotated(params, q, k, positions):
    """transformers' Llama rotation of q, k [B, H, L, Dh], one call per list of positions in ``positions``."""
    rope = hf().LlamaRotaryEmbedding(hf_config(params, head_dim=HEAD_DIM, max_position_embeddings=MPE))
    out_q, out_k, start = [], [], 0
    for call in positions:  # e.g. [range(L)]: one full pass; [[0], [1], ...]: decoding step by step
        n = len(call)
        cos, sin = rope(q, torch.tensor([list(call)]))  # [1, n, Dh] each
        rq, rk = hf().apply_rotary_pos_emb(q[:, :, start : start + n], k[:, :, start : start + n], cos, sin)
        out_q.append(rq)
        out_k.append(rk)
        start += n
    return torch.cat(out_q, dim=2), torch.cat(out_k, dim=2)


@pytest.mark.parametrize("name", list(E2E))
def test_rotary_matches_llama_full_pass(name):
    # Within the original length for the length-dependent types (above it, see the next test).
    L = 8 if name in ("longrope", "dynamic") else 40
    q, k = torch.randn(2, 3, L, HEAD_DIM), torch.randn(2, 3, L, HEAD_DIM)
    ours = Rotary(HEAD_DIM, convention="half", rope_parameters=copy.deepcopy(E2E[name]), max_position_embeddings=MPE)
    got_q, got_k = ours.rotate(q, k)
    want_q, want_k = hf_rotated(E2E[name], q, k, [range(L)])
    assert_close(got_q, want_q, atol=1e-5, rtol=0)
    assert_close(got_k, want_k, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["longrope", "dynamic"])
def test_length_dependent_rotary_matches_llama_decoding_step_by_step(name):
    # transformers recomputes as position_ids grow: one position per call is exactly our per-position rule.
    L = 40
    q, k = torch.randn(1, 2, L, HEAD_DIM), torch.randn(1, 2, L, HEAD_DIM)
    ours = Rotary(HEAD_DIM, convention="half", rope_parameters=copy.deepcopy(E2E[name]), max_position_embeddings=MPE)
    got_q, got_k = ours.rotate(q, k)
    want_q, want_k = hf_rotated(E2E[name], q, k, [[p] for p in range(L)])
    assert_close(got_q, want_q, atol=1e-5, rtol=0)
    assert_close(got_k, want_k, atol=1e-5, rtol=0)
    # transformers' one full pass over L tokens differs (every token turned with length L's frequencies),
    # and is what rope_frequencies(seq_len=L) gives.
    block_q, _ = hf_rotated(E2E[name], q, k, [range(L)])
    assert not torch.allclose(got_q, block_q, atol=1e-3)
    inv, factor = rope_frequencies(E2E[name], head_dim=HEAD_DIM, max_position_embeddings=MPE, seq_len=L)
    assert_close(rotate_half_reference(q, torch.arange(L), inv, factor), block_q.double(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["longrope", "dynamic"])
def test_per_position_rule_in_float64(name):
    # Position p turns with rope_frequencies(seq_len=p + 1), at any positions (rotate_at: randomized ones too).
    rope = Rotary(HEAD_DIM, convention="half", rope_parameters=E2E[name], max_position_embeddings=MPE,
                  angle_dtype=torch.float64)
    positions = torch.tensor([0, 3, 7, 8, 15, 16, 17, 30, 100])
    rows = [rope_frequencies(E2E[name], head_dim=HEAD_DIM, max_position_embeddings=MPE, seq_len=int(p) + 1)
            for p in positions]
    inv = torch.stack([row[0] for row in rows])  # [L, d/2]
    x = torch.randn(2, 2, len(positions), HEAD_DIM, dtype=torch.float64)
    got, _ = rope.rotate_at(x, x, q_pos=positions, k_pos=positions)
    assert_close(got, rotate_half_reference(x, positions, inv, rows[0][1]), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["dynamic", "longrope", "yarn"])
def test_cached_decoding_equals_the_full_pass(name):
    # 20 steps past an original length of 8 (dynamic: M = 16): every key is turned once, at its own position.
    rope = Rotary(HEAD_DIM, convention="half", rope_parameters=E2E[name], max_position_embeddings=MPE)
    mha = MultiHeadAttention(2, 2 * HEAD_DIM, position=rope).eval()
    x = torch.randn(2, 28, 2 * HEAD_DIM)
    with torch.no_grad():
        full = mha(x, is_causal=True)  # [B, L, D]
        cache, steps = KVCache(), []
        for t in range(28):
            step = x[:, t : t + 1]
            steps.append(mha(step, is_causal=True, cache=cache))
        cache, chunks = KVCache(), []
        for t in range(0, 28, 5):  # chunks that straddle the original length
            chunk = x[:, t : t + 5]
            chunks.append(mha(chunk, is_causal=True, cache=cache))
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=0)


def test_attention_factor_scales_cos_and_sin():
    params = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 8}
    rope = Rotary(8, rope_parameters=params, angle_dtype=torch.float64)
    assert math.isclose(rope.attention_factor, 0.1 * math.log(16.0) + 1.0, rel_tol=1e-15)
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    rx, _ = rope.rotate(x, x)
    assert_close(rx.norm(dim=-1), x.norm(dim=-1) * rope.attention_factor, atol=0, rtol=1e-12)


def test_rotary_without_rope_parameters_is_unchanged():
    plain, scaled = Rotary(8), Rotary(8, rope_parameters={"rope_type": "default"})
    x = torch.randn(1, 2, 6, 8)
    assert torch.equal(plain.rotate(x, x, q_offset=3, k_offset=3)[0], scaled.rotate(x, x, q_offset=3, k_offset=3)[0])
    linear = Rotary(8, rope_parameters={"rope_type": "linear", "factor": 4.0}, angle_dtype=torch.float64)
    interp = Rotary(8, interpolation=4.0, angle_dtype=torch.float64)
    xd = x.double()
    assert_close(linear.rotate(xd, xd, q_offset=50, k_offset=50)[0], interp.rotate(xd, xd, q_offset=50, k_offset=50)[0],
                 atol=1e-12, rtol=0)
    partial = Rotary(16, rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.5})
    assert partial.rotary_dim == 8 and "rope_type" in repr(partial)


# --- bad input: each a ValueError/TypeError of one line naming the argument and the value ------------

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


@pytest.mark.bad_input("config files")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: rope_frequencies({"rope_type": "ntk"}, head_dim=8), ValueError,
     r"rope_type'\] 'ntk'; known: 'default', 'linear', 'dynamic', 'yarn', 'longrope', 'llama3', 'proportional'"),
    (lambda: rope_frequencies({"rope_type": "yarn"}, head_dim=8, max_position_embeddings=64), ValueError,
     r"rope_type 'yarn' lacks 'factor'"),
    (lambda: rope_frequencies({"rope_type": "linear", "factor": 2.0, "beta_fast": 32}, head_dim=8), ValueError,
     r"unknown keys \['beta_fast'\] for rope_type 'linear'"),
    (lambda: rope_frequencies({"rope_theta": 500000.0}, head_dim=8, base=20000.0), ValueError,
     r"rope_theta'\]=500000 contradicts base=20000"),
    (lambda: rope_frequencies({"partial_rotary_factor": 0.5}, head_dim=8, partial_rotary_factor=0.25), ValueError,
     r"partial_rotary_factor'\]=0.5 contradicts partial_rotary_factor=0.25"),
    (lambda: rope_frequencies({"type": "linear", "rope_type": "yarn"}, head_dim=8), ValueError,
     r"'type'\]='linear'.*'rope_type'\]='yarn'"),
    (lambda: rope_frequencies({"rope_type": "dynamic", "factor": 2.0}, head_dim=8), ValueError,
     r"'dynamic' needs max_position_embeddings.*got None"),
    (lambda: rope_frequencies({"rope_type": "yarn", "factor": 2.0}, head_dim=8), ValueError,
     r"'yarn' needs max_position_embeddings.*original_max_position_embeddings"),
    (lambda: Rotary(8, rope_parameters={"rope_type": "dynamic", "factor": 2.0}), ValueError,
     r"'dynamic' needs max_position_embeddings"),
    (lambda: rope_frequencies(["yarn"], head_dim=8), TypeError, r"rope_parameters must be a dict.*list"),
    (lambda: Rotary(8, interpolation=2.0, rope_parameters=YARN), ValueError,
     r"interpolation=2 and ntk_factor=1 cannot be combined with rope_parameters"),
    (lambda: Rotary(16, rotary_dim=4, rope_parameters={"partial_rotary_factor": 0.5}), ValueError,
     r"partial_rotary_factor'\]=0.5 rotates 8 .* contradicts rotary_dim=4"),
    (lambda: rope_frequencies({"partial_rotary_factor": 0.5}, head_dim=10), ValueError, r"rotates 5 features"),
    (lambda: rope_frequencies({**YARN, "truncate": "yes"}, head_dim=8), TypeError, r"truncate'\].*'yes'"),
    (lambda: rope_frequencies({**LONGROPE, "factor": 4.0, "short_factor": [1.0, 2.0]}, head_dim=16), ValueError,
     r"short_factor'\] must be a list of 8 positive numbers.*\[1.0, 2.0\]"),
])
def test_bad_parameters(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.bad_input("numbers")
@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: rope_frequencies({"rope_type": "linear", "factor": None}, head_dim=8), TypeError, r"factor'\].*None"),
    (lambda: rope_frequencies({"rope_type": "linear", "factor": -2.0}, head_dim=8), ValueError, r"factor'\].*-2"),
    (lambda: rope_frequencies({**YARN, "beta_fast": -1}, head_dim=8), ValueError, r"beta_fast.*-1"),
    (lambda: rope_frequencies({**LLAMA3, "high_freq_factor": 1.0}, head_dim=8), ValueError,
     r"high_freq_factor'\] must exceed .*low_freq_factor'\], got 1 and 1"),
    (lambda: rope_frequencies({"rope_theta": float("nan")}, head_dim=8), ValueError, r"rope_theta'\].*nan"),
    (lambda: rope_frequencies({}, head_dim=8, partial_rotary_factor=1.5), ValueError, r"partial_rotary_factor.*1.5"),
    (lambda: rope_frequencies({}, head_dim=8, seq_len=0), ValueError, r"seq_len.*0"),
    (lambda: rope_frequencies({"rope_type": "dynamic", "factor": 2.0}, head_dim=2, max_position_embeddings=8),
     ValueError, r"at least 4 rotated features.*got 2"),
    # Accepted before, and silently wrong: a reversed YaRN ramp, a base with no slow pair, a length float64
    # cannot hold.
    (lambda: rope_frequencies({**YARN, "beta_fast": 1, "beta_slow": 32}, head_dim=8), ValueError,
     r"beta_fast'\] must exceed .*beta_slow'\].*got 1 and 32"),
    (lambda: rope_frequencies({**YARN, "beta_fast": 4, "beta_slow": 4}, head_dim=8), ValueError,
     r"beta_fast'\] must exceed .*got 4 and 4"),
    (lambda: rope_frequencies({**YARN, "beta_slow": 40}, head_dim=8), ValueError, r"got 32 and 40"),
    (lambda: rope_frequencies({"rope_type": "linear", "factor": 4.0, "rope_theta": 1}, head_dim=8), ValueError,
     r"rope_theta'\] must exceed 1 .*got 1$"),
    (lambda: rope_frequencies({"rope_theta": 0.5}, head_dim=8), ValueError, r"rope_theta'\] must exceed 1.*0.5"),
    (lambda: rope_frequencies({**YARN, "rope_theta": 1.0}, head_dim=8), ValueError, r"rope_theta'\] must exceed 1"),
    (lambda: rope_frequencies({}, head_dim=8, base=1.0), ValueError, r"^base must exceed 1"),
    (lambda: rope_frequencies({"rope_type": "dynamic", "factor": 2.0}, head_dim=8, max_position_embeddings=64,
                              seq_len=10**30), ValueError, r"seq_len must be at most 9007199254740992, got 10{30}"),
    (lambda: rope_frequencies({**LONGROPE, "factor": 4.0}, head_dim=16, seq_len=2**60), ValueError,
     r"seq_len must be at most"),
])
def test_bad_numbers(call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert "\n" not in str(info.value)
