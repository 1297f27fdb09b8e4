"""FlexAttention's compiled kernel on CUDA, forward and backward, for every scheme with a score_mod.

Through the public API: two :class:`attnlab.attention.MultiHeadAttention` with one set of
weights (grouped-query, 2 key/value heads), one on ``backend="flex"``, the other on
``backend="dense"`` (the scheme's term as a ``[B, H, T, S]`` tensor: the reference, itself
tested against float64 formulas and peers in tests/encodings). Both are float32 on the GPU.
Lengths cross FlexAttention's 128-block boundary, one sequence is padded at each end (the
left-padded one has query rows with no key to attend to: zeros on both paths), and a causal
scheme is also run step by step from a cache (queries after an offset). ``backend="auto"`` must
take FlexAttention on CUDA for a sequence past the dense path's limit (2**20 scores).

On the CPU, torch 2.13 has no FlexAttention backward, and a compile takes about a minute
(62 s for ALiBi at T=150 here, loaded): the unmarked twin of the CUDA test runs the same check
on the chunked path, forward and backward, so the checking code runs in every ``make test``.
The CPU forward through FlexAttention, run eagerly, is tested in tests/attention/test_long_context.py.
"""

from __future__ import annotations

import copy

import pytest
import torch

from attnlab import catalog
from attnlab.attention import KVCache, MultiHeadAttention
from attnlab.encodings import ALiBi, ShawRelative, T5RelativeBias
from attnlab.encodings.fire import FIRE
from attnlab.encodings.kerple import KERPLE
from attnlab.encodings.registry import attention_position
from attnlab.encodings.t5 import SharedT5RelativeBias

# Head dim 16: FlexAttention's CUDA kernel is built for head dims of at least 16.
B, H, DH, T = 2, 4, 16, 150

# Every scheme class that declares a score_mod, in each of its forms: name -> (factory, causal).
SCHEMES = {
    "alibi": (lambda: ALiBi(H), True),
    "alibi-bidirectional": (lambda: ALiBi(H, causal=False, left_offset=0.5), False),
    "t5": (lambda: T5RelativeBias(H, num_buckets=8, max_distance=16), False),
    "t5-causal": (lambda: T5RelativeBias(H, num_buckets=8, max_distance=16, bidirectional=False), True),
    "t5-shared": (lambda: SharedT5RelativeBias(H, num_buckets=8, max_distance=16, bidirectional=False), True),
    "shaw-keys": (lambda: ShawRelative(DH, max_relative_position=3, on_values=False), True),
    "fire": (lambda: FIRE(H, hidden=8, init_threshold=6.0), True),
    "fire-bidirectional": (lambda: FIRE(H, causal=False, hidden=8, init_threshold=6.0), False),
    "kerple": (lambda: KERPLE(H), True),
    "kerple-power-bidirectional": (lambda: KERPLE(H, kernel="power", causal=False), False),
}
CAUSAL = sorted(name for name, (_, causal) in SCHEMES.items() if causal)


def twin_modules(name: str, backend: str, device: str) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    """The dense module and its copy on ``backend``, float32 on ``device``, the scheme's parameters moved off init."""
    factory, _ = SCHEMES[name]
    torch.manual_seed(0)
    scheme = factory()
    with torch.no_grad():  # off the initial values, where a term could be symmetric or zero by construction
        for p in scheme.parameters():
            p.add_(0.3 * torch.randn_like(p))
    dense = MultiHeadAttention(H, H * DH, position=scheme, n_kv_heads=2, backend="dense")
    other = copy.deepcopy(dense)
    other.backend = backend
    return dense.to(device), other.to(device)


def assert_near(got: torch.Tensor, ref: torch.Tensor, *, rel: float, what: str, floor: float = 0.0) -> None:
    """``max |got - ref| <= rel * max |ref| + floor``: the error relative to the tensor's scale."""
    assert got.shape == ref.shape and got.dtype == ref.dtype, (what, got.shape, ref.shape, got.dtype, ref.dtype)
    assert torch.isfinite(got).all(), f"{what}: not finite"
    err, scale = (got - ref).abs().max().item(), ref.abs().max().item()
    assert err <= rel * scale + floor, f"{what}: max |diff| {err:.3e} > {rel:g} x max |ref| {scale:.3e} + {floor:g}"


# Both paths are float32 with full-precision float32 products (the fixture below: no TF32); they
# differ in the order of their sums: the kernel's blocked online softmax against SDPA's or the
# chunked path's. A sum of n float32 terms is off by about sqrt(n) * 2**-24 relative (n * 2**-24 at
# worst): outputs sum over S <= 1100 keys (2e-6 typical, 6.6e-5 at worst: 1e-4 allowed); gradients of
# the scheme's parameters sum over every score, B * H * T * S = 180 000 of them at T = 150 (3e-5
# typical: 1e-3 allowed).
# Some gradients are zero exactly, in exact arithmetic: a term shared by a whole softmax row cancels
# (FIRE's output bias, the keys' projection bias); what is left is float32 noise from sums of terms of
# size <= 1 (2e-6 on the CPU's chunked path here), hence an absolute floor, 100x that, well below any
# gradient that is not zero (0.02 to 20 here).
OUT_REL, GRAD_REL, GRAD_FLOOR = 1e-4, 1e-3, 1e-4


def check_against_dense(name: str, *, device: str, backend: str, length: int = T) -> None:
    """``backend`` equals the dense path for scheme ``name`` on ``device``: outputs, then every gradient.

    One padded batch of ``length`` steps through both modules: sequence 0 has its last 7 keys
    padded, sequence 1 its first 5 (its first 5 queries then see no key at all under a causal mask).
    """
    dense, other = twin_modules(name, backend, device)
    causal = SCHEMES[name][1]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, length, H * DH, generator=g).to(device).requires_grad_(True)  # [B, T, D]
    cotangent = torch.randn(B, length, H * DH, generator=g).to(device)  # a random direction: a sum's could cancel
    valid = torch.ones(B, length, dtype=torch.bool)
    valid[0, -7:] = False
    valid[1, :5] = False
    mask = valid[:, None, :].to(device)  # [B, 1, S], True = may attend
    ref, out = (m(x, mask=mask, is_causal=causal) for m in (dense, other))
    assert_near(out, ref, rel=OUT_REL, what=f"{name} {backend} output")
    if causal:  # rows with no key: attention gives zeros, so the module its output projection's bias, alike
        assert torch.equal(ref[1, :5], ref[1, :1].expand(5, -1)) and torch.equal(out[1, :5], ref[1, :5])
    names = ["x", *(n for n, p in dense.named_parameters() if p.requires_grad)]
    grads = [torch.autograd.grad((o * cotangent).sum(), [x, *(p for p in m.parameters() if p.requires_grad)],
                                 allow_unused=True) for o, m in ((ref, dense), (out, other))]
    assert len(names) == len(grads[0]) == len(grads[1])
    for what, a, b in zip(names, grads[1], grads[0], strict=True):
        assert (a is None) == (b is None), f"{name} {backend}: gradient of {what} only on one path"
        if b is not None:
            assert_near(a, b, rel=GRAD_REL, floor=GRAD_FLOOR, what=f"{name} {backend} gradient of {what}")


def check_cached_steps_against_dense(name: str, *, device: str, backend: str) -> None:
    """A causal scheme on ``backend``, 140 steps at once then 10 one at a time from a cache, equals one dense pass."""
    dense, other = twin_modules(name, backend, device)
    x = torch.randn(B, T, H * DH, generator=torch.Generator().manual_seed(2)).to(device)  # [B, T, D]
    with torch.no_grad():
        ref = dense(x, is_causal=True)
        cache = KVCache()
        steps = [other(x[:, :140], is_causal=True, cache=cache)]
        steps += [other(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(140, T)]
    assert_near(torch.cat(steps, 1), ref, rel=OUT_REL, what=f"{name} {backend} cached steps")


def check_auto_route(monkeypatch, *, device: str, expected: str, length: int = 1100) -> None:
    """``backend="auto"`` past the dense limit (CUDA: 1100 x 1100 > 2**20) takes ``expected``, equal to dense.

    ALiBi, forward and backward: the path a long sequence takes on ``device`` unless told otherwise.
    A shorter ``length`` lowers the limit to match (for the CPU's twin: 1100 steps cost 5 s there).
    """
    from attnlab.attention.backends import choose, chunked, flex

    if length != 1100:  # every limit the rule reads (the CPU's and CUDA's) lowered to match
        for limit in ("CUDA_DENSE_SCORES", "DENSE_SCORES", "DENSE_SCORES_THREADED"):
            monkeypatch.setattr(choose, limit, length * length - 1)
    if torch.device(device).type == "cuda":
        limit = choose.CUDA_DENSE_SCORES
    else:
        limit = choose.DENSE_SCORES if torch.get_num_threads() == 1 else choose.DENSE_SCORES_THREADED
    assert length * length > limit
    taken = []
    for path, module in (("flex", flex), ("chunked", chunked)):
        real = getattr(module, f"{path}_attend")

        def spy(*args, _real=real, _path=path, **kwargs):
            taken.append(_path)
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, f"{path}_attend", spy)
    check_against_dense("alibi", device=device, backend="auto", length=length)
    assert taken == [expected], taken


@pytest.fixture
def full_float32():
    """Full-precision float32 products for the test (no TF32), the tolerances' premise; restored after."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.cuda
@pytest.mark.process  # Inductor's first CUDA compile starts processes (ptxas, gcc, its compile workers)
@pytest.mark.usefixtures("full_float32")
@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_flex_on_cuda_equals_the_dense_path_forward_and_backward(name):
    check_against_dense(name, device="cuda", backend="flex")


@pytest.mark.cuda
@pytest.mark.process  # Inductor's first CUDA compile starts processes (ptxas, gcc, its compile workers)
@pytest.mark.usefixtures("full_float32")
@pytest.mark.parametrize("name", CAUSAL)
def test_flex_on_cuda_from_a_cache_equals_the_dense_path(name):
    check_cached_steps_against_dense(name, device="cuda", backend="flex")


@pytest.mark.cuda
@pytest.mark.process  # Inductor's first CUDA compile starts processes (ptxas, gcc, its compile workers)
@pytest.mark.usefixtures("full_float32")
def test_auto_on_cuda_takes_flex_for_a_long_sequence(monkeypatch):
    check_auto_route(monkeypatch, device="cuda", expected="flex")


def test_auto_on_the_cpu_takes_the_chunked_path_for_a_long_sequence(monkeypatch):
    check_auto_route(monkeypatch, device="cpu", expected="chunked", length=40)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_the_check_on_the_cpu_with_the_chunked_path(name):
    """The CUDA test's check, run here: chunked stands in for flex (no backward on the CPU), 40 steps for speed."""
    check_against_dense(name, device="cpu", backend="chunked", length=40)


def test_the_cached_check_on_the_cpu_with_the_chunked_path():
    check_cached_steps_against_dense("alibi", device="cpu", backend="chunked")


def test_the_check_fails_when_the_paths_differ(monkeypatch):
    """The check can fail: a flex path whose scheme's parameters were moved is caught."""
    real = twin_modules

    def moved(name, backend, device):
        dense, other = real(name, backend, device)
        with torch.no_grad():
            for p in other.position.parameters():
                p.mul_(1.01)
        return dense, other

    monkeypatch.setitem(globals(), "twin_modules", moved)
    with pytest.raises(AssertionError, match="t5 chunked output"):
        check_against_dense("t5", device="cpu", backend="chunked", length=40)


def test_every_scheme_with_a_score_mod_is_checked():
    """Each built-in scheme that declares a score_mod, in causal and bidirectional attention, is a class above."""
    checked = {type(factory()) for factory, _ in SCHEMES.values()}
    found = set()
    for name in catalog.SCHEMES:
        for causal in (True, False):
            try:
                scheme = attention_position(name, n_heads=H, head_dim=DH, causal=causal, max_len=64)
            except ValueError:  # a causal-only scheme in a bidirectional attention
                continue
            if scheme is not None and scheme.has_score_mod:
                found.add(type(scheme))
    assert found and found <= checked, found - checked
