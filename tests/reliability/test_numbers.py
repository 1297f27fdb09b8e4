"""Issue 27, numbers: bias schemes stay finite where attention without positions does, masked keys have no
effect whatever they hold, CoPE validates its input, and the library's messages for numbers and copies.

Each example the issue lists is a test here; the others are cases found around them.
"""

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab._validate import check_int
from attnlab.attention import LabMultiHeadAttention, MultiHeadAttention, attend, chunked_attend
from attnlab.attention.backends.choose import attend_with_position
from attnlab.attention.backends.flex import flex_attend
from attnlab.encodings import ALiBi, CoPE, sinusoidal
from attnlab.encodings.registry import ENCODINGS, attention_position

SILENT = pytest.mark.bad_input("silent wrong results")
MESSAGES = pytest.mark.bad_input("tracebacks and messages")

H, DH = 2, 8


def _score_schemes():
    """Every encoding of the registry that adds a term to the scores (built for a causal model)."""
    names = []
    for name in ENCODINGS:
        scheme = attention_position(name, n_heads=H, head_dim=DH, causal=True, max_len=64)
        if scheme is not None and scheme.adds_score:
            names.append(name)
    return names


SCORE_SCHEMES = _score_schemes()


def _finite(t):
    return bool(torch.isfinite(t).all())


def _with_position(q, k, v, position, backend, **kw):
    out, _ = attend_with_position(q, k, v, position=position, backend=backend, q_offset=0, mask=kw.get("mask"),
                                  bias=None, is_causal=kw.get("is_causal", False), scale=None, dropout_p=0.0,
                                  need_weights=kw.get("need_weights", False))
    return out


# -- silent wrong results ----------------------------------------------------------------------------------


def test_the_registry_has_the_issues_bias_schemes():
    assert {"alibi", "t5", "fire", "kerple", "relative", "cope"} <= set(SCORE_SCHEMES)


# Each scheme on each path it can take (one that draws positions per call takes the dense path only).
SCHEME_PATHS = [(name, backend) for name in SCORE_SCHEMES for backend in ("dense", "chunked", "weights")
                if not (backend == "chunked" and name.startswith("random-"))]


@SILENT
@pytest.mark.parametrize(("name", "backend"), SCHEME_PATHS)
def test_bias_schemes_stay_finite_where_attention_without_positions_does(name, backend):
    # The issue's example: inputs of 1e30 (float32) gave NaN with ALiBi, T5, FIRE and KERPLE, finite without.
    scheme = attention_position(name, n_heads=H, head_dim=DH, causal=True, max_len=64)
    # Stronger than the rule: with a term, large finite inputs give finite outputs whatever torch's fused
    # kernel does without one (on the CPU it answers zeros for some such inputs, NaN for others).
    path = "dense" if backend == "weights" else backend
    for scale in (None, 1e10):
        q, k, v = torch.randn(1, H, 5, DH) * 1e30, torch.randn(1, H, 5, DH) * 1e30, torch.randn(1, H, 5, DH)
        out, _ = attend_with_position(q, k, v, position=scheme, backend=path, q_offset=0, mask=None, bias=None,
                                      is_causal=True, scale=scale, dropout_p=0.0, need_weights=backend == "weights")
        assert _finite(out), scale


@SILENT
@pytest.mark.parametrize("scale", [1e15, 1e25, 1e35])
def test_bias_schemes_stay_finite_over_a_range_of_large_inputs(scale):
    torch.manual_seed(1)
    x = torch.randn(2, 6, 8) * scale
    for name in ("alibi", "t5", "relative", "kerple", "fire", "cope"):
        torch.manual_seed(0)
        scheme = attention_position(name, n_heads=H, head_dim=4, causal=True, max_len=64)
        mha = MultiHeadAttention(H, 8, position=scheme).eval()
        with torch.no_grad():
            for backend in ("dense", "chunked"):
                mha.backend = backend
                assert _finite(mha(x, is_causal=True)), (name, backend)


@SILENT
def test_flex_path_stays_finite_with_large_inputs():
    # FlexAttention run eagerly (compiled=False: the same numbers without a compile).
    alibi = ALiBi(H)
    q, k, v = torch.randn(1, H, 5, DH) * 1e30, torch.randn(1, H, 5, DH) * 1e30, torch.randn(1, H, 5, DH)
    out = flex_attend(q, k, v, score_mod=lambda Tp, Sp: alibi.score_mod(torch.zeros(1, H, Tp, DH), Sp),
                      is_causal=True, compiled=False)
    assert _finite(out)


def _masked_inputs(where, bad):
    q, k, v = torch.randn(2, H, 4, DH), torch.randn(2, H, 6, DH), torch.randn(2, H, 6, DH)
    keep = torch.tensor([True, True, True, True, False, False])  # keys 4 and 5 are masked out
    (k if where == "key" else v)[:, :, 4:] = bad
    return q, k, v, keep


@SILENT
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("where", ["key", "value"])
def test_masked_keys_have_no_effect_whatever_they_hold(where, bad, need_weights):
    # The issue's example: inf in a masked-out key gave non-finite outputs.
    q, k, v, keep = _masked_inputs(where, bad)
    out, _ = attend(q, k, v, mask=keep.view(1, 1, 1, 6), need_weights=need_weights)
    removed, _ = attend(q, k[:, :, :4], v[:, :, :4], need_weights=need_weights)
    torch.testing.assert_close(out, removed)


@SILENT
@pytest.mark.parametrize("backend", ["dense", "chunked"])
def test_masked_keys_have_no_effect_with_a_bias_scheme(backend):
    q, k, v, keep = _masked_inputs("key", float("nan"))
    v[:, :, 5] = float("inf")
    out = _with_position(q, k, v, ALiBi(H), backend, mask=keep.view(1, 1, 1, 6))
    removed = _with_position(q, k[:, :, :4], v[:, :, :4], ALiBi(H), backend)
    torch.testing.assert_close(out, removed)


@SILENT
def test_masked_keys_have_no_effect_in_grouped_query_attention():
    q = torch.randn(1, 4, 3, DH)
    k, v = torch.randn(1, 2, 5, DH), torch.randn(1, 2, 5, DH)
    k[:, :, 4], v[:, :, 4] = float("inf"), float("nan")
    keep = torch.tensor([True, True, True, True, False])
    out, _ = attend(q, k, v, mask=keep)
    removed, _ = attend(q, k[:, :, :4], v[:, :, :4])
    torch.testing.assert_close(out, removed)


@SILENT
@pytest.mark.parametrize("backend", ["dense", "chunked"])
def test_a_padded_step_holding_nan_changes_no_other_output(backend):
    # Right padding whose embedding is NaN (uninitialised memory, a bad pad value), masked out as keys.
    mha = MultiHeadAttention(H, 8, position=ALiBi(H), backend=backend).eval()
    x = torch.randn(1, 5, 8)
    padded = torch.cat([x, torch.full((1, 1, 8), float("nan"))], dim=1)  # [1, 6, 8]
    keep = torch.tensor([True] * 5 + [False]).view(1, 1, 6)
    with torch.no_grad():
        out = mha(padded, mask=keep)[:, :5]
        alone = mha(x)
    torch.testing.assert_close(out, alone)


@SILENT
def test_masked_cache_entries_have_no_effect():
    # A cache whose last step is masked out (a padded step): its NaN must not reach the next step.
    from attnlab.attention import KVCache

    mha = MultiHeadAttention(H, 8).eval()
    x = torch.randn(1, 3, 8)
    with torch.no_grad():
        cache = KVCache()
        mha(x, cache=cache)
        bad = torch.full((1, 1, 8), float("nan"))
        mha(bad, cache=cache, mask=torch.tensor([True, True, True, False]).view(1, 1, 4))
        step = torch.randn(1, 1, 8)
        keep = torch.tensor([True, True, True, False, True]).view(1, 1, 5)
        out = mha(step, cache=cache, mask=keep)
        clean = KVCache()
        mha(x, cache=clean)
        expected = mha(step, key=torch.cat([x, step], dim=1))  # the same keys, the bad one removed
    torch.testing.assert_close(out, expected)


@SILENT
def test_a_fully_masked_query_row_gives_zeros_on_every_path():
    q, k, v = torch.randn(1, H, 3, DH), torch.randn(1, H, 3, DH), torch.randn(1, H, 3, DH)
    k[:, :, 2] = float("inf")
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])  # row 1 sees nothing
    for need_weights in (False, True):
        out, _ = attend(q, k, v, mask=mask, need_weights=need_weights)
        assert _finite(out) and bool((out[:, :, 1] == 0).all())
    chunked = chunked_attend(q, k, v, position=ALiBi(H), mask=mask, chunk_size=1)
    assert _finite(chunked) and bool((chunked[:, :, 1] == 0).all())


@SILENT
def test_attend_with_a_scale_beyond_the_dtype_is_refused_not_nan():
    # The issue's example: attend(..., scale=1e308) gave NaN (1e308 is inf in float32).
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match=r"scale.*float32.*1e\+308"):
        attend(q, q, q, scale=1e308)
    mha = MultiHeadAttention(1, 4, scale=1e308)
    with pytest.raises(ValueError, match="scale"):
        mha(torch.randn(1, 3, 4))


@SILENT
def test_a_huge_scale_in_float64_with_weights_is_finite():
    q, k, v = (torch.randn(1, 1, 3, 4, dtype=torch.float64) for _ in range(3))
    out, weights = attend(q, k, v, scale=1e308, need_weights=True)
    assert _finite(out) and _finite(weights)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 1, 3, dtype=torch.float64))


@SILENT
@pytest.mark.parametrize("name", ["alibi", "t5", "relative"])
def test_half_precision_with_large_inputs_stays_finite(name):
    scheme = attention_position(name, n_heads=H, head_dim=DH, causal=True, max_len=64)
    q, k, v = (torch.randn(1, H, 4, DH) * 1e30).bfloat16(), (torch.randn(1, H, 4, DH) * 1e30).bfloat16(), \
        torch.randn(1, H, 4, DH).bfloat16()
    for backend in ("dense", "chunked"):
        assert _finite(_with_position(q, k, v, scheme, backend, is_causal=True))


@SILENT
def test_moderate_inputs_give_the_same_numbers_as_before():
    # The guard changes nothing where the scores cannot overflow: exact equality with the unguarded math.
    q, k, v = torch.randn(1, H, 4, DH) * 1e3, torch.randn(1, H, 4, DH) * 1e3, torch.randn(1, H, 4, DH)
    bias = ALiBi(H).bias(q, 4)
    out, weights = attend(q, k, v, bias=bias, need_weights=True)
    expected = torch.softmax(q @ k.transpose(-1, -2) / DH**0.5 + bias, dim=-1)
    torch.testing.assert_close(weights, expected)


@SILENT
def test_bool_tensors_are_not_integers():
    for value in (torch.tensor(True), np.bool_(True), True):
        with pytest.raises(TypeError, match="n must be an integer"):
            check_int("n", value)


# -- tracebacks and messages -------------------------------------------------------------------------------


@MESSAGES
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_cope_refuses_a_non_finite_input_by_name(bad):
    # The issue's example: "index ... is out of bounds".
    cope = CoPE(4)
    q, k = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    k[0, 0, 1, 2] = bad
    with pytest.raises(ValueError, match=r"CoPE's k holds NaN or inf"):
        cope.bias(q, 3, k=k)


@MESSAGES
def test_cope_with_large_finite_inputs_counts_finite_positions():
    torch.manual_seed(0)
    mha = MultiHeadAttention(H, 8, position=CoPE(4, npos_max=8)).eval()
    with torch.no_grad():
        nn_pos = mha.position.pos_emb
        nn_pos.copy_(torch.randn_like(nn_pos))
        out = mha(torch.randn(1, 5, 8) * 1e30, is_causal=True)
    assert _finite(out)


@MESSAGES
def test_attend_with_no_width_is_a_clear_error():
    # The issue's example: Dh=0 gave a raw error (ZeroDivisionError).
    q = torch.randn(1, 1, 3, 0)
    with pytest.raises(ValueError, match="Dh = 0"):
        attend(q, q, torch.randn(1, 1, 3, 2))


@MESSAGES
def test_deepcopy_after_init_keys_computes_the_same():
    # The issue's example: copy.deepcopy of the labs' MultiHeadAttention after init_keys failed.
    mha = LabMultiHeadAttention(2, 4, input_dim=3)
    x = torch.randn(2, 5, 3)
    mha.init_keys(x)
    twin = copy.deepcopy(mha)
    torch.testing.assert_close(twin(x), mha(x))
    assert twin.in_proj.weight is not mha.in_proj.weight
    mha(x).sum().backward()  # the original still trains through its kept keys
    assert mha.in_proj.weight.grad is not None


@MESSAGES
def test_integers_from_numpy_and_torch_are_taken_alike():
    # The issue's example: sinusoidal(np.int64(3), 8) was refused, sinusoidal(torch.tensor(3), 8) accepted.
    expected = sinusoidal(3, 8)
    for n in (np.int64(3), np.int32(3), np.array(3), torch.tensor(3)):
        torch.testing.assert_close(sinusoidal(n, 8), expected)
    for bad in (np.bool_(True), torch.tensor(True), 3.0, np.float64(3.0), torch.tensor(3.0)):
        with pytest.raises(TypeError, match="must be an integer"):
            sinusoidal(bad, 8)


def _cli_env(tmp_path, home):
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env.update(HOME=str(home), TMPDIR=str(tmp_path), MPLBACKEND="Agg", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([src, env.get("PYTHONPATH", "")]))
    return env


@pytest.mark.process
@MESSAGES
def test_an_unwritable_home_leaves_the_error_one_line(tmp_path):
    # The issue's example: matplotlib printed two warnings before the one-line error.
    home = tmp_path / "home"
    home.write_text("a file, not a folder: nothing can be made below it, not even by root\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "attnlab", "plot", "losses", "--run", str(run),
                           "--out", str(tmp_path / "x.png")], capture_output=True, text=True,
                          env=_cli_env(tmp_path, home), cwd=tmp_path, timeout=600)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("attnlab plot: error:")


@MESSAGES
def test_a_writable_home_is_left_to_matplotlib(tmp_path):
    from attnlab._matplotlib_dir import use_writable_matplotlib_dir

    saved = {k: os.environ.get(k) for k in ("MPLCONFIGDIR", "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    try:
        os.environ.pop("MPLCONFIGDIR", None)
        os.environ["XDG_CONFIG_HOME"] = os.environ["XDG_CACHE_HOME"] = str(tmp_path)
        if "matplotlib" not in sys.modules:
            assert use_writable_matplotlib_dir() is None
            assert "MPLCONFIGDIR" not in os.environ
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
