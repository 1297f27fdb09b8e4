"""attnlab on a GPU against its peers: attention, bias schemes, rotary, decoding and the length lab, in one run.

``python benchmarks/gpu.py --device cuda`` (``make bench-gpu``) runs five cases and writes
``gpu.json`` and ``gpu.md`` (the same numbers as a table, each target marked met or missed) into
``benchmarks/results/gpu/`` (``--out DIR``), with the GPU's name, torch's and CUDA's versions, the
date and the commit. ``--device cpu --tiny`` runs every case at toy sizes in seconds
(``tests/test_benchmarks.py`` runs it so, so that the script cannot rot on a machine without a GPU).

The cases (bf16 unless stated; causal; forward and forward + backward; time and peak memory):

1. ``attention``: multi-head attention, B=8, T=4096, D=1024, H=16: attnlab's ``MultiHeadAttention``
   against ``nn.MultiheadAttention`` and bare SDPA (the flash backend) with the same projections.
2. ``bias``: ALiBi, T5, FIRE, KERPLE and the README's user scheme (Sandwich) at L = 4k, 16k, 64k
   (B=1, H=16, Dh=64) through attnlab's GPU path (``attend_with_position`` with ``backend="auto"``,
   which takes FlexAttention with the scheme's score_mod on CUDA past 2**20 scores; the path taken
   is recorded), against SDPA without positions (flash), x-transformers' ALiBi (``Attend``, default
   and ``flash=True``) and SDPA with a prebuilt float bias where they fit in memory (otherwise the
   row records why it was skipped). Memory at the three lengths shows whether it grows linearly.
3. ``rotary``: rope types ``default`` and ``yarn`` at L = 4k and 32k (B=1, H=16, Dh=64): rotate q and
   k, then SDPA; attnlab's ``Rotary`` (the ``half`` pairing) against transformers'
   ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``, and attnlab's interleaved pairing against
   rotary-embedding-torch (no YaRN there: that row is skipped with the reason).
4. ``decoding``: a 6-layer D=512 (8 heads, feed-forward 2048, vocabulary 1024) decoder-only attnlab
   model with rotary, random weights, greedy decoding of 512 new tokens after a 512-token prompt
   with the KV cache, batch 1 and 32, tokens/s; against transformers' ``generate`` on a
   ``GPTNeoXForCausalLM`` built from a config of the same sizes (no download) holding the same
   weights (mapped layer by layer), so that its logits must equal attnlab's.
5. ``lab``: the length lab's ``ruoss2023`` preset (reverse-string, the reference code's model:
   5 layers x 64 x 8 heads, feed-forward 256, dropout 0.1, batches of 32 fresh strings of one
   length per step, Adam, clipping at 1.0), float32: one model stepped as
   ``attnlab.training.Loop.train_step`` does, against G models stepped as one
   ``attnlab.training.grouped.group_step`` (what ``compare --group-size`` trains), each step
   drawing its batches on the CPU as the lab does. Models per hour are 3600 over (the preset's
   6,400 steps times the step time, plus a process's start-up, measured) per process, times G for
   a group; evaluation is left out of both. ``--compile`` adds the one model under ``torch.compile``.

Method. Every case first checks its outputs against a reference and only then times:
attention against the same computation in float32, the bias and rotary cases against float64
on the last 256 query rows (each sees every key) at every length, and their gradients against
float64 at the shortest length; decoding compares logits in float32 and then the greedy tokens;
the lab compares a grouped step with each member stepped alone. A peer whose output misses its
tolerance is not timed (the row says so); attnlab missing its own fails the case. Tolerances are
relative to the reference's scale (Frobenius norm of the difference over that of the reference):
2e-2 for bf16 outputs, 5e-2 for bf16 gradients, 1e-3 in float32.

"fwd" is the forward pass of a training step (autograd records it; nothing is backpropagated), so
that one compile of FlexAttention per scheme and length serves both passes; "fwd+bwd" adds the
backward pass to the inputs (and the scheme's parameters). On CUDA each call is timed with CUDA
events after a synchronisation (so a launch-bound call counts its launches), after two warm-up
rounds (the first call of each, where a compile lands, is recorded apart as ``first_call_s``; in
the bias case the forward's compile lands in the check before, ``check_call_s``); the
implementations are interleaved round-robin, the order rotated each round, so that load hits all
alike; the figure is the median of ``--repeats`` rounds (10), min and max beside it. Peak memory is
``torch.cuda.max_memory_allocated()`` over one more call after ``reset_peak_memory_stats()``, less
what was allocated before it (the inputs and weights): what the call itself adds. A peer that keeps
a ``[H, L, L]`` bias between calls (the prebuilt one, x-transformers' cache) has it reported apart
(``held_mib``). On the CPU time is ``time.perf_counter`` and memory is not measured (null); the CPU
computes in float32 (its bf16 kernels are slow) on one thread with ``--tiny``.

Targets, each a ratio of two medians of one run: attention within 1.05x of bare SDPA; every bias
scheme within 1.3x of SDPA without positions at 16k and 64k, and its memory linear in L (the peak
at 64k at most 1.25 x 4 times that at 16k: quadratic memory would be 16 times); decoding at least
as fast as transformers' ``generate``; grouped lab training at least 20x the models per hour of
one model per process. In ``--tiny`` mode the same checks run at toy sizes, where their verdicts
mean nothing.

Budget on one H200 (about 790 TFLOP/s bf16 for large matmuls, 4.3 TB/s), estimated from FLOPs:
case 1 is 5.5e11 FLOP forward (projections 2.75e11, causal attention 2.75e11), 1.9e12 with the
backward: about 2 ms and 6 ms a call, under 5 s with its references. Case 2 is dominated by
compiles: 5 schemes x 3 lengths, about 8 s each for FlexAttention's forward and backward kernels
(tests/gpu took 5-19 s a scheme), ~120 s; causal attention at 64k is 8.8e12 FLOP forward, ~35 ms,
~120 ms with the backward, 6 implementations x 13 calls ~ 15 s; x-transformers' dense path at
16k moves ~17 GB per pass (~50 ms forward): ~25 s for the case's timings. Case 3: 2.2e12 FLOP
forward at 32k, ~10 s in all. Case 4 is bound by kernel launches: ~2-4 ms a token for either
side, 512 tokens, 2 batch sizes x 2 implementations x 12 calls: ~100 s. Case 5: a step ~10 ms
alone, ~20-60 ms for 256 models, ~30 s with the start-up measurement. With imports and CUDA's
start, about 5 minutes; ``--budget-s`` (default 450 on CUDA) stops starting new work past it, so
the run always ends inside 8 minutes and writes what it has (a round cut short records fewer
repeats, a part not reached is skipped with the reason).

Run: ``python benchmarks/gpu.py [--device cuda|cpu] [--tiny] [--cases attention,bias,rotary,decoding,lab]
[--repeats N] [--out DIR] [--budget-s S] [--dtype bfloat16|float16|float32] [--threads N] [--compile]``;
``benchmarks/gpu_session.sh`` runs the cuda tests and then this in one device call.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import gc
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import commit  # noqa: E402

RESULTS = HERE / "results" / "gpu"
CASES = ("attention", "bias", "rotary", "decoding", "lab")
MIB = 2**20
MIN_REPEATS = 3  # a round cut short by the budget keeps at least this many

# Tolerances: |got - ref|_F / |ref|_F.
TOL = {"bf16": 2e-2, "bf16_grad": 5e-2, "float32": 1e-3}


class Skip(Exception):
    """A part of a case that was not run, with the reason (recorded, not an error)."""


# -- sizes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    mha: tuple[int, int, int, int]  # B, T, D, H
    bias_lengths: tuple[int, ...]
    heads: int
    head_dim: int
    rotary_lengths: tuple[int, ...]
    ref_rows: int
    decoder: dict[str, int]
    decode_batches: tuple[int, ...]
    prompt: int
    new_tokens: int
    lab_groups: tuple[int, ...]
    lab_model: dict[str, int] = field(default_factory=dict)  # overrides of the preset's sizes (tiny only)


FULL = Sizes(mha=(8, 4096, 1024, 16), bias_lengths=(4096, 16384, 65536), heads=16, head_dim=64,
             rotary_lengths=(4096, 32768), ref_rows=256,
             decoder={"n_layers": 6, "d_model": 512, "n_heads": 8, "ff_units": 2048, "vocab_size": 1024},
             decode_batches=(1, 32), prompt=512, new_tokens=512, lab_groups=(16, 64, 256))
TINY = Sizes(mha=(2, 32, 32, 2), bias_lengths=(32, 64, 128), heads=2, head_dim=16,
             rotary_lengths=(32, 128), ref_rows=16,
             decoder={"n_layers": 2, "d_model": 32, "n_heads": 2, "ff_units": 64, "vocab_size": 64},
             decode_batches=(1, 4), prompt=16, new_tokens=8, lab_groups=(2, 4),
             lab_model={"d_model": 16, "n_heads": 2, "n_layers": 1, "ff_units": 32})


# -- the run's context: device, clock, memory, budget ----------------------------------------------


@dataclass
class Ctx:
    device: torch.device
    dtype: torch.dtype
    sizes: Sizes
    tiny: bool
    repeats: int
    warmup: int
    deadline: float | None  # time.perf_counter() past which no new work starts
    compile: bool = False

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def over_budget(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def check_budget(self, what: str) -> None:
        if self.over_budget():
            raise Skip(f"not run: the time budget (--budget-s) was spent before {what}")

    def out_of_time(self, case: Case, what: str) -> bool:
        """Past the budget: note in ``case`` that ``what`` was not run, and say so (the caller stops there)."""
        if not self.over_budget():
            return False
        case.notes.append(f"{what}: not run, the time budget (--budget-s) was spent")
        return True

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def clock(self, fn: Callable[[], object]) -> float:
        """Seconds of one call: CUDA events after a synchronisation on CUDA, perf_counter on the CPU."""
        if not self.cuda:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def peak_mib(self, fn: Callable[[], object]) -> float | None:
        """What one call adds at its peak to the memory allocated before it, MiB (None on the CPU)."""
        if not self.cuda:
            return None
        torch.cuda.synchronize(self.device)  # no gc.collect here: 0.1-0.4 s a call with transformers imported
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        fn()
        torch.cuda.synchronize(self.device)
        return (torch.cuda.max_memory_allocated(self.device) - base) / MIB

    def free_bytes(self) -> int | None:
        if not self.cuda:
            return None
        gc.collect()
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info(self.device)[0]

    def fits(self, need: float, what: str) -> None:
        """Raise :class:`Skip` when ``need`` bytes (an estimate) exceed 80% of the GPU's free memory."""
        free = self.free_bytes()
        if free is not None and need > 0.8 * free:
            raise Skip(f"{what} needs about {need / 2**30:.0f} GiB (estimated), more than 80% of the "
                       f"{free / 2**30:.0f} GiB free")


def _stats(times: list[float], first: float | None, cut: bool) -> dict:
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "repeats": len(times),
            "times_s": times, "first_call_s": first, "cut_by_budget": cut}


def interleaved(ctx: Ctx, fns: dict[str, Callable[[], object]], first: dict[str, float] | None = None,
                ) -> dict[str, dict]:
    """Warm-up rounds, then ``ctx.repeats`` rounds round-robin, the order rotated each round.

    ``first``: each call's first time, when the caller made it (else the first warm-up round's)."""
    names = list(fns)
    first = dict(first or {})
    for _ in range(ctx.warmup):
        for name in names:
            t0 = time.perf_counter()
            fns[name]()
            ctx.sync()
            if name not in first:
                first[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {name: [] for name in names}
    cut = False
    for r in range(ctx.repeats):
        if r >= MIN_REPEATS and ctx.over_budget():
            cut = True
            break
        k = r % len(names)
        for name in names[k:] + names[:k]:
            times[name].append(ctx.clock(fns[name]))
    return {name: _stats(times[name], first.get(name), cut) for name in names}


def rel_error(got: Tensor, ref: Tensor) -> float:
    """``|got - ref|_F / |ref|_F`` in float64 (inf when ``got`` is not finite)."""
    got, ref = got.detach().double(), ref.detach().double().to(got.device)
    if got.shape != ref.shape:
        raise ValueError(f"shape {tuple(got.shape)} against the reference's {tuple(ref.shape)}")
    if not bool(torch.isfinite(got).all()):
        return math.inf
    return float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def _oom_types() -> tuple[type[BaseException], ...]:
    return (torch.OutOfMemoryError,) if hasattr(torch, "OutOfMemoryError") else (RuntimeError,)


def _flash() -> Any:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def sdpa_flash(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Bare causal SDPA, the flash backend only."""
    with _flash():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# -- the case's record ---------------------------------------------------------------------------


class Case:
    """Rows, checks, targets and skips of one case, as the JSON and the markdown hold them."""

    def __init__(self, name: str, title: str) -> None:
        self.name, self.title = name, title
        self.rows: list[dict] = []
        self.checks: list[dict] = []
        self.targets: list[dict] = []
        self.notes: list[str] = []
        self.config: dict[str, Any] = {}

    def check(self, impl: str, what: str, error: float, tol: float, *, ours: bool) -> bool:
        ok = bool(error <= tol)
        self.checks.append({"impl": impl, "what": what, "error": error, "tolerance": tol, "ok": ok})
        if not ok and ours:
            raise AssertionError(f"{impl}: {what} is off by {error:.3g} (tolerance {tol:g})")
        return ok

    def row(self, group: str, impl: str, timing: dict | None, *, peak: float | None = None, skipped: str | None = None,
            baseline: str | None = None, **extra: Any) -> None:
        self.rows.append({"group": group, "impl": impl, "timing": timing, "peak_mib": peak, "skipped": skipped,
                          "baseline": baseline, **extra})

    def target(self, what: str, value: float | None, wanted: str, met: bool | None, detail: str = "") -> None:
        self.targets.append({"target": what, "value": value, "wanted": wanted, "met": met, "detail": detail})

    def to_dict(self) -> dict:
        return {"title": self.title, "config": self.config, "rows": self.rows, "checks": self.checks,
                "targets": self.targets, "notes": self.notes}


def time_impls(ctx: Ctx, case: Case, group: str, impls: dict[str, Callable[[], object]], *,
               baseline: str | None, ours: set[str], skipped: dict[str, str] | None = None,
               extra: dict[str, dict] | None = None) -> dict[str, dict]:
    """Warm up each implementation (a peer that fails is recorded and dropped), time them interleaved, then their
    peak memory one by one; add a row per implementation (and per skipped one). Returns the timings."""
    skipped = dict(skipped or {})
    live: dict[str, Callable[[], object]] = {}
    first: dict[str, float] = {}
    for name, fn in impls.items():
        try:
            t0 = time.perf_counter()
            fn()  # the first call: a compile lands here, timed apart
            ctx.sync()
            first[name] = time.perf_counter() - t0
            live[name] = fn
        except _oom_types() as e:
            if name in ours:
                raise
            skipped[name] = f"out of memory: {str(e).splitlines()[0][:160]}"
            _free(ctx, collect=True)
        except Exception as e:  # a peer's failure is its row's, not the case's
            if name in ours:
                raise
            skipped[name] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            _free(ctx)
    timings = interleaved(ctx, live, first) if live else {}
    for name in impls:
        if name in live:
            try:
                peak = ctx.peak_mib(live[name])
            except _oom_types():
                peak = None
                _free(ctx, collect=True)
            case.row(group, name, timings[name], peak=peak, baseline=baseline if name != baseline else None,
                     ours=name in ours, **(extra or {}).get(name, {}))
        else:
            case.row(group, name, None, skipped=skipped.get(name, "not run"), ours=name in ours,
                     **(extra or {}).get(name, {}))
    for name, why in skipped.items():
        if name not in impls:
            case.row(group, name, None, skipped=why, ours=name in ours, **(extra or {}).get(name, {}))
    return timings


def _free(ctx: Ctx, collect: bool = False) -> None:
    """Hand the GPU's cached blocks back between parts (``collect``: after an out-of-memory, run gc first)."""
    if collect:
        gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()


def ratio(timings: dict[str, dict], a: str, b: str) -> float | None:
    if a in timings and b in timings:
        return timings[a]["median_s"] / timings[b]["median_s"]
    return None


# -- case 1: multi-head attention ------------------------------------------------------------------


def case_attention(ctx: Ctx, case: Case) -> None:
    from attnlab.attention import MultiHeadAttention
    from attnlab.attention.projections import copy_torch_weights

    B, T, D, H = ctx.sizes.mha
    Dh = D // H
    case.config = {"B": B, "T": T, "D": D, "H": H, "dtype": str(ctx.dtype), "causal": True}
    dev = ctx.device
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D, H, batch_first=True).to(dev)
    ours = MultiHeadAttention(H, D).to(dev)
    copy_torch_weights(theirs, ours.in_proj, ours.linear_out)
    mask = torch.ones(T, T, dtype=torch.bool, device=dev).triu(1)  # torch's polarity: True = may not attend

    def bare(x: Tensor, m: nn.MultiheadAttention, flash: bool = True) -> Tensor:
        qkv = F.linear(x, m.in_proj_weight, m.in_proj_bias).view(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each [B, H, T, Dh]
        o = sdpa_flash(q, k, v) if flash else F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(o.transpose(1, 2).reshape(B, T, D), m.out_proj.weight, m.out_proj.bias)

    calls = {
        "attnlab MultiHeadAttention": lambda x, o=ours: o(x, is_causal=True),
        "nn.MultiheadAttention": lambda x, m=theirs: m(x, x, x, attn_mask=mask, is_causal=True,
                                                        need_weights=False)[0],
        "bare SDPA (flash)": lambda x, m=theirs: bare(x, m),
    }
    # The reference: the bare computation in float32 with the same weights, before the cast.
    g = torch.Generator(device="cpu").manual_seed(1)
    x32 = torch.randn(B, T, D, generator=g).to(dev).requires_grad_(True)
    up32 = torch.randn(B, T, D, generator=g).to(dev)
    ref_out = bare(x32, theirs, flash=False)
    ref_out.backward(up32)
    ref_grad = x32.grad
    theirs.to(ctx.dtype)
    ours.to(ctx.dtype)
    x = x32.detach().to(ctx.dtype).requires_grad_(True)
    up = up32.to(ctx.dtype)
    low = ctx.dtype != torch.float32
    for name, call in calls.items():
        out = call(x)
        case.check(name, "output vs float32", rel_error(out, ref_out), TOL["bf16" if low else "float32"],
                   ours=name.startswith("attnlab"))
        x.grad = None
        out.backward(up)
        case.check(name, "input gradient vs float32", rel_error(x.grad, ref_grad),
                   TOL["bf16_grad" if low else "float32"], ours=name.startswith("attnlab"))
    del ref_out, ref_grad, x32, up32
    modules = [ours, theirs]
    ours_names = {"attnlab MultiHeadAttention"}

    def fwd(call: Callable[[Tensor], Tensor]) -> Callable[[], None]:
        def run() -> None:
            call(x)
        return run

    def fwd_bwd(call: Callable[[Tensor], Tensor]) -> Callable[[], None]:
        def run() -> None:
            x.grad = None
            for m in modules:
                m.zero_grad(set_to_none=True)
            call(x).backward(up)
        return run

    base = "bare SDPA (flash)"
    for mode, wrap in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        if ctx.out_of_time(case, f"attention {mode}"):
            break
        t = time_impls(ctx, case, mode, {n: wrap(c) for n, c in calls.items()}, baseline=base, ours=ours_names)
        r = ratio(t, "attnlab MultiHeadAttention", base)
        case.target(f"attention {mode}: attnlab / bare SDPA", r, "<= 1.05x", None if r is None else r <= 1.05)


# -- case 2: bias schemes ----------------------------------------------------------------------------


def sandwich_class() -> type:
    """The README's user scheme ("Bring your own position scheme"), Sandwich (Chi et al. 2023), verbatim."""
    from attnlab.encodings import ModelSizes, PositionScheme
    from attnlab.encodings.scheme import bias_dtype

    class Sandwich(PositionScheme):
        """Chi et al. 2023: head h adds (p_i . p_j - d'/2) / 8h, p the sinusoids of width d'."""
        adds_score = relative = by_distance = has_score_mod = True    # what it does, declared

        def __init__(self, n_heads: int, width: int = 64):
            super().__init__()
            self.register_buffer("speeds", 10000.0 ** (-torch.arange(0, width, 2.0) / width), persistent=False)
            self.register_buffer("scales", 1 / (8.0 * torch.arange(1, n_heads + 1)), persistent=False)

        @classmethod
        def for_model(cls, sizes: ModelSizes) -> Sandwich:           # how a model builds one per layer
            return cls(sizes.n_heads)

        def bias_rel(self, q, *, rel, k=None):  # type: ignore[no-untyped-def]  # the term at distances rel [T, S]
            dot = torch.cos(rel[..., None] * self.speeds).sum(-1) - self.speeds.numel()      # [T, S]
            return (self.scales[:, None, None] * dot)[None].to(bias_dtype(q.dtype))        # [1, H, T, S]

    return Sandwich


def schemes(H: int) -> dict[str, nn.Module]:
    from attnlab.encodings import ALiBi, T5RelativeBias
    from attnlab.encodings.fire import FIRE
    from attnlab.encodings.kerple import KERPLE

    torch.manual_seed(0)
    made = {"ALiBi": ALiBi(H), "T5": T5RelativeBias(H, bidirectional=False), "FIRE": FIRE(H), "KERPLE": KERPLE(H),
            "Sandwich (README's user scheme)": sandwich_class()(H)}
    with torch.no_grad():  # off the initial values, so that no term is trivially zero or symmetric
        for s in made.values():
            for p in s.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return made


def attention_rows64(q: Tensor, k: Tensor, v: Tensor, rows: int, bias: Callable[[Tensor, int], Tensor] | None,
                     ) -> Tensor:
    """Float64 causal attention of the last ``rows`` queries over every key: ``[B, H, rows, Dh]``."""
    L, Dh = q.shape[-2], q.shape[-1]
    q64, k64, v64 = q[:, :, L - rows:].double(), k.double(), v.double()
    scores = q64 @ k64.transpose(-1, -2) / math.sqrt(Dh)  # [B, H, rows, L]
    if bias is not None:
        scores = scores + bias(q64, L - rows)
    t = torch.arange(L - rows, L, device=q.device)[:, None]
    scores = scores.masked_fill(torch.arange(L, device=q.device)[None, :] > t, -math.inf)
    return scores.softmax(-1) @ v64


def scheme_bias64(scheme: nn.Module) -> Callable[[Tensor, int], Tensor]:
    s64 = copy.deepcopy(scheme).double()

    def bias(q64: Tensor, offset: int) -> Tensor:
        with torch.no_grad():
            return s64.bias(q64, q64.shape[-2] + offset, q_offset=offset)  # type: ignore[operator]
    return bias


def case_bias(ctx: Ctx, case: Case) -> None:
    H, Dh, R = ctx.sizes.heads, ctx.sizes.head_dim, ctx.sizes.ref_rows
    dev, dtype = ctx.device, ctx.dtype
    # On CUDA the path backend="auto" picks (FlexAttention past 2**20 scores); on the CPU, where torch has no
    # FlexAttention backward, the chunked path stands in for it (the O(L) path the CPU has).
    backend = "auto" if ctx.cuda else "chunked"
    made = {name: s.to(dev) for name, s in schemes(H).items()}
    lengths = ctx.sizes.bias_lengths
    case.config = {"B": 1, "H": H, "Dh": Dh, "lengths": list(lengths), "dtype": str(dtype), "backend": backend,
                   "reference_rows": R, "schemes": list(made)}
    peaks: dict[tuple[str, str, int], float | None] = {}
    timings: dict[tuple[str, int], dict[str, dict]] = {}
    for i, L in enumerate(lengths):
        if ctx.out_of_time(case, f"bias schemes at L={L}"):
            break
        bias_at_length(ctx, case, made, L, backend=backend, grads=i == 0, timings=timings, peaks=peaks)
        _free(ctx)
    # Targets: time at the two longest lengths, memory from the middle to the longest.
    for name in made:
        impl = f"attnlab {name}"
        for mode in ("fwd", "fwd+bwd"):
            for L in lengths[-2:]:
                r = ratio(timings.get((mode, L), {}), impl, BIAS_BASELINE)
                case.target(f"{name} {mode} L={L}: time / SDPA without positions", r, "<= 1.3x",
                            None if r is None else r <= 1.3)
            if len(lengths) >= 2:
                a, b = lengths[-2], lengths[-1]
                pa, pb = peaks.get((impl, mode, a)), peaks.get((impl, mode, b))
                growth = None if not pa or pb is None else pb / pa
                bound = 1.25 * b / a
                case.target(f"{name} {mode}: peak memory L={b} / L={a}", growth, f"<= {bound:g} (linear x 1.25)",
                            None if growth is None else growth <= bound,
                            "" if growth is not None else "memory is not measured on the CPU")


BIAS_BASELINE = "SDPA, no positions (flash)"


def bias_at_length(ctx: Ctx, case: Case, made: dict[str, nn.Module], L: int, *, backend: str, grads: bool,
                   timings: dict[tuple[str, int], dict[str, dict]],
                   peaks: dict[tuple[str, str, int], float | None]) -> None:
    """Every implementation at length ``L``: checked against float64, then timed, forward and forward + backward."""
    from attnlab.attention.backends.choose import attend_with_position, choose_backend

    H, Dh, R = ctx.sizes.heads, ctx.sizes.head_dim, ctx.sizes.ref_rows
    dev, dtype = ctx.device, ctx.dtype
    g = torch.Generator(device="cpu").manual_seed(L)
    q, k, v, up = (torch.randn(1, H, L, Dh, generator=g).to(dev, dtype) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    scores = H * L * L

    def ours(scheme: nn.Module) -> Callable[[], Tensor]:
        def call() -> Tensor:
            return attend_with_position(q, k, v, position=scheme, backend=backend,  # type: ignore[arg-type]
                                        q_offset=0, mask=None, bias=None, is_causal=True, scale=None,
                                        dropout_p=0.0, need_weights=False)[0]
        return call

    calls: dict[str, Callable[[], Tensor]] = {f"attnlab {name}": ours(s) for name, s in made.items()}
    calls[BIAS_BASELINE] = lambda: sdpa_flash(q, k, v)
    extra = {f"attnlab {name}": {"path": choose_backend(
        backend, position=s, T=L, S=L, need_weights=False, device=dev, backward=True,  # type: ignore[arg-type]
        dropout_p=0.0, flex_mask_ok=True, batch=1, heads=H, dtype=dtype)} for name, s in made.items()}
    skipped: dict[str, str] = {}
    no_backward: dict[str, str] = {}  # timed forward only: the backward would not fit
    try:
        from x_transformers.attend import Attend
        from x_transformers.x_transformers import AlibiPositionalBias
    except ImportError as e:
        skipped["x-transformers ALiBi"] = skipped["x-transformers ALiBi (flash)"] = (
            f"x-transformers is not installed ({e})")
    else:
        xt_alibi = AlibiPositionalBias(heads=H).to(dev, dtype)  # as model.to(bf16) casts it

        def xt(attend: nn.Module) -> Callable[[], Tensor]:
            return lambda: attend(q, k, v, attn_bias=xt_alibi(L, L))[0]

        for flash, name in ((False, "x-transformers ALiBi"), (True, "x-transformers ALiBi (flash)")):
            # Bytes per score: the cached bias, then (default) the scores, their copy, the biased and masked
            # scores, a float32 softmax and its cast; (flash) the masked copy of the bias. x 1.75: the backward.
            per_score = 16 if not flash else 5
            try:
                ctx.fits(per_score * scores, name)
            except Skip as e:
                skipped[name] = str(e)
                continue
            try:
                ctx.fits(per_score * scores * 1.75, f"{name}'s backward")
            except Skip as e:
                no_backward[name] = str(e)
            calls[name] = xt(Attend(causal=True, flash=flash))
    dense_name = "SDPA + prebuilt ALiBi float bias"
    # What a peer keeps between calls, outside its calls' peak: the [H, L, L] bias (x-transformers caches its own).
    held = {"held_mib": scores * torch.finfo(dtype).bits / 8 / MIB}
    extra.update({dense_name: held, "x-transformers ALiBi": held, "x-transformers ALiBi (flash)": held})
    try:
        ctx.fits(scores * torch.finfo(dtype).bits / 8 * 2.5, dense_name)
        with torch.no_grad():
            dense = made["ALiBi"].bias(q.detach(), L)  # type: ignore[operator]  # [1, H, L, L] float32
            dense = dense.masked_fill(torch.ones(L, L, dtype=torch.bool, device=dev).triu(1), -math.inf).to(dtype)
        calls[dense_name] = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    except Skip as e:
        skipped[dense_name] = str(e)
    except _oom_types() as e:
        skipped[dense_name] = f"out of memory building the bias: {str(e).splitlines()[0][:120]}"
        _free(ctx, collect=True)

    # Every implementation's last R rows against float64, at this length.
    refs = {name: attention_rows64(q, k, v, R, scheme_bias64(s)) for name, s in made.items()}
    refs[BIAS_BASELINE] = attention_rows64(q, k, v, R, None)
    tol = TOL["bf16" if dtype != torch.float32 else "float32"]
    for name in list(calls):
        ref = refs[name[len("attnlab "):]] if name.startswith("attnlab ") else refs.get(name, refs["ALiBi"])
        is_ours = name.startswith("attnlab ")
        try:  # with autograd, as timed: FlexAttention compiles one kernel family for forward and backward
            t0 = time.perf_counter()
            out = calls[name]()
            ctx.sync()
            extra.setdefault(name, {})["check_call_s"] = time.perf_counter() - t0  # the forward's compile, if any
            err = rel_error(out[:, :, L - R:], ref)
            del out
        except _oom_types() as e:
            if is_ours:
                raise
            skipped[name] = f"out of memory: {str(e).splitlines()[0][:160]}"
            del calls[name]
            _free(ctx, collect=True)
            continue
        if not case.check(name, f"L={L} last {R} rows vs float64", err, tol, ours=is_ours):
            skipped[name] = f"not timed: its output is off by {err:.3g} of the reference's scale"
            del calls[name]
    del refs
    if grads:  # gradients against float64 at the shortest length
        grad_check(ctx, case, made, q, k, v, up, ours, L)
    _free(ctx)
    params = [p for s in made.values() for p in s.parameters()]

    def fwd(call: Callable[[], Tensor]) -> Callable[[], None]:
        def run() -> None:
            call()
        return run

    def fwd_bwd(call: Callable[[], Tensor]) -> Callable[[], None]:
        def run() -> None:
            for t in (q, k, v, *params):
                t.grad = None
            call().backward(up)
        return run

    for mode, wrap in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        if ctx.out_of_time(case, f"bias schemes at L={L} {mode}"):
            break
        before = len(case.rows)
        dropped = no_backward if mode == "fwd+bwd" else {}
        timings[mode, L] = time_impls(ctx, case, f"L={L} {mode}",
                                      {n: wrap(c) for n, c in calls.items() if n not in dropped},
                                      baseline=BIAS_BASELINE, ours={n for n in calls if n.startswith("attnlab ")},
                                      skipped={**skipped, **dropped}, extra=extra)
        for row in case.rows[before:]:
            peaks[row["impl"], mode, L] = row["peak_mib"]


def grad_check(ctx: Ctx, case: Case, made: dict[str, nn.Module], q: Tensor, k: Tensor, v: Tensor, up: Tensor,
               ours: Callable[[nn.Module], Callable[[], Tensor]], L: int) -> None:
    """Each scheme's input gradients on attnlab's path against float64 autograd through the dense formula."""
    tol = TOL["bf16_grad" if ctx.dtype != torch.float32 else "float32"]
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)
    for name, scheme in made.items():
        q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
        s64 = copy.deepcopy(scheme).double()
        scores = q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1]) + s64.bias(q64, L)  # type: ignore[operator]
        out = scores.masked_fill(causal, -math.inf).softmax(-1) @ v64
        out.backward(up.double())
        del scores, out
        for t in (q, k, v):
            t.grad = None
        ours(scheme)().backward(up)
        for label, got, ref in (("q", q.grad, q64.grad), ("k", k.grad, k64.grad), ("v", v.grad, v64.grad)):
            assert got is not None and ref is not None
            case.check(f"attnlab {name}", f"L={L} grad of {label} vs float64", rel_error(got, ref), tol, ours=True)
        for t in (q, k, v):
            t.grad = None
        scheme.zero_grad(set_to_none=True)
        del q64, k64, v64, s64
        _free(ctx)


# -- case 3: rotary ----------------------------------------------------------------------------------


def rotate64(x: Tensor, inv_freq: Tensor, factor: float, convention: str) -> Tensor:
    """Float64 RoPE of ``x [..., L, Dh]`` at positions 0..L-1 (RoFormer eq. 13-15), in either pairing."""
    L = x.shape[-2]
    x = x.double()
    angles = torch.arange(L, device=x.device, dtype=torch.float64)[:, None] * inv_freq.double().to(x.device)
    cos, sin = angles.cos() * factor, angles.sin() * factor  # [L, d/2]
    if convention == "half":
        x1, x2 = x.chunk(2, -1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)


def case_rotary(ctx: Ctx, case: Case) -> None:
    from attnlab.encodings import Rotary

    H, Dh, R = ctx.sizes.heads, ctx.sizes.head_dim, ctx.sizes.ref_rows
    lengths = ctx.sizes.rotary_lengths
    longest = max(lengths)
    yarn = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": longest // 8,
            "rope_theta": 10000.0}
    case.config = {"B": 1, "H": H, "Dh": Dh, "lengths": list(lengths), "dtype": str(ctx.dtype), "yarn": yarn,
                   "max_position_embeddings": longest, "reference_rows": R,
                   "rotary-embedding-torch": f"RotaryEmbedding(dim={Dh}, cache_max_seq_len={longest})"}
    for rope_type in ("default", "yarn"):
        params = yarn if rope_type == "yarn" else {"rope_type": "default", "rope_theta": 10000.0}
        scaled = {"rope_parameters": params, "max_position_embeddings": longest} if rope_type == "yarn" else {}
        half = Rotary(Dh, convention="half", **scaled)  # type: ignore[arg-type]
        inter = Rotary(Dh, convention="interleaved", **scaled)  # type: ignore[arg-type]
        peers: dict[str, Any] = {}
        try:
            from transformers import LlamaConfig
            from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

            config = LlamaConfig(hidden_size=H * Dh, num_attention_heads=H, num_key_value_heads=H, head_dim=Dh,
                                 num_hidden_layers=1, intermediate_size=8, vocab_size=8,
                                 max_position_embeddings=longest, rope_parameters=copy.deepcopy(params))
            peers[ROT_HF] = LlamaRotaryEmbedding(config).to(ctx.device)
        except ImportError as e:
            peers[ROT_HF] = f"transformers is not installed ({e})"
        if rope_type == "yarn":
            peers[ROT_RET] = "rotary-embedding-torch has no YaRN scaling"
        else:
            try:
                from rotary_embedding_torch import RotaryEmbedding

                peers[ROT_RET] = RotaryEmbedding(dim=Dh, cache_max_seq_len=longest).to(ctx.device)  # every length
            except ImportError as e:
                peers[ROT_RET] = f"rotary-embedding-torch is not installed ({e})"
        for L in lengths:
            if ctx.out_of_time(case, f"rotary {rope_type} at L={L}"):
                break
            rotary_at_length(ctx, case, rope_type, L, half, inter, peers)
            _free(ctx)


ROT_HF, ROT_RET = "transformers apply_rotary_pos_emb", "rotary-embedding-torch"
ROT_BASELINE = "SDPA, no rotation (flash)"


def rotary_at_length(ctx: Ctx, case: Case, rope_type: str, L: int, half: nn.Module, inter: nn.Module,
                     peers: dict[str, Any]) -> None:
    """Rotate q and k, then SDPA, each implementation checked against float64, then timed."""
    H, Dh, R = ctx.sizes.heads, ctx.sizes.head_dim, ctx.sizes.ref_rows
    dev, dtype = ctx.device, ctx.dtype
    g = torch.Generator(device="cpu").manual_seed(L)
    q, k, v, up = (torch.randn(1, H, L, Dh, generator=g).to(dev, dtype) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    positions = torch.arange(L, device=dev)[None]  # [1, L]
    calls: dict[str, Callable[[], Tensor]] = {
        "attnlab Rotary (half)": lambda: sdpa_flash(*half.rotate(q, k), v),  # type: ignore[operator]
        "attnlab Rotary (interleaved)": lambda: sdpa_flash(*inter.rotate(q, k), v),  # type: ignore[operator]
        ROT_BASELINE: lambda: sdpa_flash(q, k, v),
    }
    skipped = {name: peer for name, peer in peers.items() if isinstance(peer, str)}
    if not isinstance(peers[ROT_HF], str):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        def hf_call(e: nn.Module = peers[ROT_HF]) -> Tensor:
            cos, sin = e(v, positions)  # [1, L, Dh] in v's dtype, as a Llama forward makes them once per call
            return sdpa_flash(*apply_rotary_pos_emb(q, k, cos, sin), v)
        calls[ROT_HF] = hf_call
    if not isinstance(peers[ROT_RET], str):
        ret = peers[ROT_RET]
        calls[ROT_RET] = lambda: sdpa_flash(ret.rotate_queries_or_keys(q), ret.rotate_queries_or_keys(k), v)
    refs = {conv: attention_rows64(rotate64(q.detach(), rot.inv_freq, rot.attention_factor, conv),
                                   rotate64(k.detach(), rot.inv_freq, rot.attention_factor, conv), v.detach(), R, None)
            for conv, rot in (("half", half), ("interleaved", inter))}
    refs["none"] = attention_rows64(q.detach(), k.detach(), v.detach(), R, None)
    which = {"attnlab Rotary (half)": "half", ROT_HF: "half", "attnlab Rotary (interleaved)": "interleaved",
             ROT_RET: "interleaved", ROT_BASELINE: "none"}
    tol = TOL["bf16" if dtype != torch.float32 else "float32"]
    for name in list(calls):
        with torch.no_grad():
            err = rel_error(calls[name]()[:, :, L - R:], refs[which[name]])
        if not case.check(name, f"{rope_type} L={L} last {R} rows vs float64", err, tol,
                          ours=name.startswith("attnlab")):
            skipped[name] = f"not timed: its output is off by {err:.3g} of the reference's scale"
            del calls[name]
    del refs

    def fwd(call: Callable[[], Tensor]) -> Callable[[], None]:
        def run() -> None:
            call()
        return run

    def fwd_bwd(call: Callable[[], Tensor]) -> Callable[[], None]:
        def run() -> None:
            for t in (q, k, v):
                t.grad = None
            call().backward(up)
        return run

    for mode, wrap in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        group = f"{rope_type} L={L} {mode}"
        t = time_impls(ctx, case, group, {n: wrap(c) for n, c in calls.items()}, baseline=ROT_BASELINE,
                       ours={n for n in calls if n.startswith("attnlab")}, skipped=skipped)
        for a, b in (("attnlab Rotary (half)", ROT_HF), ("attnlab Rotary (interleaved)", ROT_RET)):
            r = ratio(t, a, b)
            if r is not None:
                case.target(f"rotary {group}: {a} / {b}", r, "(context)", None)


# -- case 4: decoding ---------------------------------------------------------------------------------


def neox_state_dict(ours: nn.Module, H: int) -> dict[str, Tensor]:
    """attnlab's decoder-only model's weights in GPT-NeoX's names and layout (its q|k|v rows interleaved per head)."""
    sd: dict[str, Tensor] = {"gpt_neox.embed_in.weight": ours.embed.weight,  # type: ignore[union-attr]
                             "gpt_neox.final_layer_norm.weight": ours.norm.weight,  # type: ignore[union-attr]
                             "gpt_neox.final_layer_norm.bias": ours.norm.bias,  # type: ignore[union-attr]
                             "embed_out.weight": ours.head.weight}  # type: ignore[union-attr]
    for i, layer in enumerate(ours.layers):  # type: ignore[union-attr, arg-type]
        p = f"gpt_neox.layers.{i}."
        w, b = layer.self_attn.in_proj.weight, layer.self_attn.in_proj.bias  # [3 H Dh, D]: q | k | v, heads inside
        D = w.shape[1]
        sd.update({
            p + "input_layernorm.weight": layer.norm1.weight, p + "input_layernorm.bias": layer.norm1.bias,
            p + "post_attention_layernorm.weight": layer.norm2.weight,
            p + "post_attention_layernorm.bias": layer.norm2.bias,
            # NeoX: per head [q_h | k_h | v_h] (its qkv.view(..., H, 3 Dh).chunk(3, -1))
            p + "attention.query_key_value.weight": w.view(3, H, -1, D).transpose(0, 1).reshape(-1, D),
            p + "attention.query_key_value.bias": b.view(3, H, -1).transpose(0, 1).reshape(-1),
            p + "attention.dense.weight": layer.self_attn.linear_out.weight,
            p + "attention.dense.bias": layer.self_attn.linear_out.bias,
            p + "mlp.dense_h_to_4h.weight": layer.ffn[0].weight, p + "mlp.dense_h_to_4h.bias": layer.ffn[0].bias,
            p + "mlp.dense_4h_to_h.weight": layer.ffn[3].weight, p + "mlp.dense_4h_to_h.bias": layer.ffn[3].bias,
        })
    return {k: v.detach().clone() for k, v in sd.items()}


def case_decoding(ctx: Ctx, case: Case) -> None:
    from attnlab.encodings import Rotary
    from attnlab.models import DecoderOnlyTransformer

    s = ctx.sizes
    d = dict(s.decoder)
    V, D, H, N, FF = d["vocab_size"], d["d_model"], d["n_heads"], d["n_layers"], d["ff_units"]
    P, new = s.prompt, s.new_tokens
    dev = ctx.device
    case.config = {**d, "prompt": P, "new_tokens": new, "batches": list(s.decode_batches), "dtype": str(ctx.dtype),
                   "position": "rotary, rotate_half pairing (GPT-NeoX's), all of each head",
                   "peer": "transformers GPTNeoXForCausalLM.generate, greedy, default cache, sdpa attention"}
    torch.manual_seed(0)
    ours = DecoderOnlyTransformer(vocab_size=V, d_model=D, n_heads=H, n_layers=N, ff_units=FF,
                                  position=lambda sizes: Rotary(sizes.head_dim, convention="half"),
                                  max_len=P + new).eval()
    with torch.no_grad():
        ours.head.bias.zero_()  # GPT-NeoX's output layer has no bias
    ours.to(dev)
    theirs, hf_why = None, ""
    try:
        from transformers import GenerationConfig, GPTNeoXConfig, GPTNeoXForCausalLM
        # GPT-NeoX's own names for the rotary (rotary_pct, rotary_emb_base): every transformers 5 release reads
        # them into rope_parameters; attention_bias is True by default.
        config = GPTNeoXConfig(vocab_size=V, hidden_size=D, num_hidden_layers=N, num_attention_heads=H,
                               intermediate_size=FF, hidden_act="relu", max_position_embeddings=P + new,
                               use_parallel_residual=False, layer_norm_eps=1e-5, rotary_pct=1.0,
                               rotary_emb_base=10000, bos_token_id=None, eos_token_id=None, pad_token_id=0,
                               tie_word_embeddings=False)
        config._attn_implementation = "sdpa"
        theirs = GPTNeoXForCausalLM(config).eval()
        weights = neox_state_dict(ours, H)
        if "embed_out.weight" not in theirs.state_dict():  # the output layer's name moved between releases
            weights["lm_head.weight"] = weights.pop("embed_out.weight")
        missing, unexpected = theirs.load_state_dict(weights, strict=False)
        assert not unexpected and all("rotary" in m or "inv_freq" in m for m in missing), (missing, unexpected)
        theirs.to(dev)
        gen = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                               eos_token_id=None, bos_token_id=None)
    except ImportError as e:
        theirs, hf_why = None, f"transformers is not installed ({e})"
    except Exception as e:  # a peer that cannot be built (another transformers release): attnlab alone, said so
        theirs, hf_why = None, f"transformers' GPT-NeoX could not be built: {type(e).__name__}: {e}"
    if hf_why:
        case.notes.append(hf_why)
    g = torch.Generator(device="cpu").manual_seed(2)
    prompts = {B: torch.randint(0, V, (B, P), generator=g).to(dev) for B in s.decode_batches}
    hf_name = "transformers generate (GPT-NeoX)"

    def hf_generate(x: Tensor) -> Tensor:
        assert theirs is not None
        out = theirs.generate(x, attention_mask=torch.ones_like(x), generation_config=gen)
        return out[:, P:]

    # Checks, in float32: the same logits, then the same greedy tokens.
    x = prompts[s.decode_batches[0]][:, : min(P, 64)]
    with torch.no_grad():
        mine = ours(x)
        if theirs is not None:
            case.check("attnlab DecoderOnlyTransformer", "float32 logits vs GPT-NeoX's with the same weights",
                       rel_error(mine, theirs(x).logits), TOL["float32"], ours=True)
    steps = min(new, 32)
    a = ours.generate(x, steps)
    assert a.shape == (x.shape[0], steps) and int(a.min()) >= 0 and int(a.max()) < V, a.shape
    if theirs is not None:
        b = theirs.generate(x, attention_mask=torch.ones_like(x),
                            generation_config=GenerationConfig(max_new_tokens=steps, min_new_tokens=steps,
                                                               do_sample=False, pad_token_id=0, eos_token_id=None,
                                                               bos_token_id=None))[:, x.shape[1]:]
        same = float((a == b).float().mean())
        case.checks.append({"impl": "attnlab DecoderOnlyTransformer", "what": f"float32 greedy tokens ({steps} steps) "
                            "equal transformers'", "error": 1 - same, "tolerance": None, "ok": same == 1.0})
        if same != 1.0:
            case.notes.append(f"float32 greedy tokens agree on {same:.1%} only (near ties?)")
    ours.to(ctx.dtype)
    if theirs is not None:
        theirs.to(ctx.dtype)
    for B, prompt in prompts.items():
        if ctx.out_of_time(case, f"decoding at batch {B}"):
            break
        calls: dict[str, Callable[[], object]] = {"attnlab generate (KV cache)": lambda p=prompt: ours.generate(p, new)}
        skipped = {}
        if theirs is not None:
            calls[hf_name] = lambda p=prompt: hf_generate(p)
        else:
            skipped[hf_name] = hf_why
        outs = {}
        for name, call in calls.items():
            out = call()
            assert isinstance(out, Tensor) and out.shape == (B, new) and int(out.min()) >= 0 and int(out.max()) < V, (
                name, getattr(out, "shape", None))
            outs[name] = out
        if len(outs) == 2:
            a, b = outs.values()
            agree = float((a == b).float().mean())
            case.checks.append({"impl": "attnlab DecoderOnlyTransformer", "what": f"batch {B}: {ctx.dtype} greedy "
                                "tokens equal transformers' (informative: rounding differs)", "error": 1 - agree,
                                "tolerance": None, "ok": None})
        t = time_impls(ctx, case, f"batch {B}, {new} tokens", calls, baseline=hf_name if theirs is not None else None,
                       ours={"attnlab generate (KV cache)"}, skipped=skipped)
        for row in case.rows[-len(calls) - len(skipped):]:
            if row["timing"] is not None:
                row["tokens_per_s"] = B * new / row["timing"]["median_s"]
        r = ratio(t, hf_name, "attnlab generate (KV cache)")
        case.target(f"decoding batch {B}: attnlab tokens/s / transformers'", r, ">= 1x", None if r is None else r >= 1)


# -- case 5: the lab's throughput --------------------------------------------------------------------


def startup_seconds(device: torch.device) -> float:
    """Wall time of a fresh process that imports torch and the lab's training and opens the device."""
    code = ("import torch, attnlab.labs.lengths.train, attnlab.training.grouped; "
            f"torch.ones(1, device={str(device)!r}).sum().item()")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent / "src"),
                                                                    os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    return time.perf_counter() - t0


def lab_config(ctx: Ctx, *, dropout: float | None = None, steps: int) -> Any:
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.presets import preset

    p = preset("ruoss2023")
    settings = {**p.settings, "task": "reverse-string", "encodings": ("sinusoidal",), "test_lens": (12,),
                "n_test": 32, "n_seeds": 1, "n_train": p.settings["batch_size"] * steps, **ctx.sizes.lab_model}
    if dropout is not None:
        settings["dropout"] = dropout
    return CompareConfig(**settings, preset=p.name)


def case_lab(ctx: Ctx, case: Case) -> None:
    from attnlab.labs.lengths.train import build_model, task_sets
    from attnlab.models.grouped import ModelGroup
    from attnlab.training.batches import to_device
    from attnlab.training.clipping import GradientClipping
    from attnlab.training.grouped import GroupAdam, group_step, member_calls
    from attnlab.training.loop import Loop

    dev = ctx.device
    steps_needed = ctx.warmup + ctx.repeats + 4
    config = lab_config(ctx, steps=steps_needed)
    from attnlab.labs.lengths.presets import preset

    settings = preset("ruoss2023").settings  # the preset's steps per model: 204,800 strings / 32 a batch = 6,400
    steps_per_model = settings["epochs"] * settings["n_train"] // settings["batch_size"]
    protocol = config.protocol_object
    sets = task_sets(config)
    encoding = config.encodings[0]
    groups = ctx.sizes.lab_groups
    case.config = {"preset": "ruoss2023", "task": config.task, "encoding": encoding, "d_model": config.d_model,
                   "n_heads": config.n_heads, "n_layers": config.n_layers, "ff_units": config.ff_units,
                   "dropout": config.dropout, "batch": config.batch_size, "train_lengths": [config.min_train_len,
                                                                                            config.train_len],
                   "dtype": "torch.float32", "groups": list(groups), "steps_per_model": steps_per_model,
                   "compile": ctx.compile}

    def member_loaders(seeds: range | list[int], cfg: Any) -> list[Any]:
        return [iter(protocol.batches(cfg, sets, seed)[0]) for seed in seeds]

    def one(cfg: Any, seed: int, compiled: bool = False) -> tuple[nn.Module, Callable[[], Tensor], Any]:
        """One model and its lab step (Loop.train_step, then the scheduler) on its own fresh batches."""
        torch.manual_seed(seed)
        model = build_model(cfg, encoding).to(dev)
        optimizer = protocol.optimizer(model, cfg)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, protocol.schedule(steps_needed))
        clipping = GradientClipping()
        clipping.set_norm(1.0)
        run = torch.compile(model, dynamic=True) if compiled else model
        loader = protocol.batches(cfg, sets, seed)[0]
        loop = Loop(run, optimizer, loader, loss=protocol.loss(cfg), scheduler=scheduler, scheduler_interval="batch",
                    clipping=clipping, device=dev)
        batches = iter(loader)
        model.train()

        def step() -> Tensor:
            loss = loop.train_step(to_device(next(batches), dev))
            scheduler.step()
            return loss
        return model, step, optimizer

    def grouped(cfg: Any, G: int) -> tuple[Any, Callable[[], Tensor]]:
        group = ModelGroup.build(lambda: build_model(cfg, encoding), seeds=list(range(G))).to(dev).train()
        members = group.to_members()
        adam = GroupAdam.like(group, [protocol.optimizer(m, cfg) for m in members])
        inputs, loss = member_calls(protocol.loss(cfg), members[0])
        loaders = member_loaders(range(G), cfg)
        factor = protocol.schedule(steps_needed)
        count = [0]

        def step() -> Tensor:
            batches = [to_device(next(it), dev) for it in loaders]
            out = group_step(group, adam, batches, inputs=inputs, loss=loss, factor=factor(count[0]), clip=1.0)
            count[0] += 1
            return out
        return group, step

    # Check: without dropout, one grouped step of 3 models equals each model's own step.
    plain = lab_config(ctx, dropout=0.0, steps=steps_needed)
    group, gstep = grouped(plain, 3)
    glosses = gstep()
    for seed in range(3):
        model, step, _ = one(plain, seed)
        loss = step()
        case.check(f"group of 3, member {seed}", "first-step loss vs the model alone", rel_error(glosses[seed], loss),
                   1e-4, ours=True)
        worst = max(rel_error(group.parameter(n)[seed], p) for n, p in model.named_parameters())
        case.check(f"group of 3, member {seed}", "parameters after one step vs the model alone", worst, 1e-4,
                   ours=True)
    del group, gstep

    start = startup_seconds(dev)
    case.config["process_startup_s"] = start
    calls: dict[str, Callable[[], object]] = {}
    _, calls["one model"], _ = one(config, 0)
    if ctx.compile:
        _, calls["one model, torch.compile"], _ = one(config, 0, compiled=True)
    sizes_of = {"one model": 1, "one model, torch.compile": 1}
    for G in groups:
        if ctx.out_of_time(case, f"the lab's group of {G}"):
            break
        _, calls[f"group of {G}"] = grouped(config, G)
        sizes_of[f"group of {G}"] = G
    t = time_impls(ctx, case, "one training step", calls, baseline=None,
                   ours={n for n in calls if "compile" not in n})  # a compile that fails is its row's
    per_hour = {}
    for row in case.rows:
        if row["timing"] is None:
            continue
        G = sizes_of[row["impl"]]
        step_s = row["timing"]["median_s"]
        row["model_steps_per_s"] = G / step_s
        row["models_per_hour"] = per_hour[row["impl"]] = 3600 * G / (steps_per_model * step_s + start)
    case.notes.append(f"models per hour = 3600 x G / ({steps_per_model} steps x the step's median + "
                      f"{start:.1f} s of a process's start-up, measured); evaluation left out of both")
    if per_hour and "one model" in per_hour:
        best = max((n for n in per_hour if n.startswith("group")), key=lambda n: per_hour[n], default=None)
        r = None if best is None else per_hour[best] / per_hour["one model"]
        case.target(f"lab: models per hour, {best} / one model per process", r, ">= 20x",
                    None if r is None else r >= 20)
    del t


# -- the run -----------------------------------------------------------------------------------------

RUNNERS: dict[str, tuple[str, Callable[[Ctx, Case], None]]] = {
    "attention": ("1. Multi-head attention", case_attention),
    "bias": ("2. Bias schemes at long lengths", case_bias),
    "rotary": ("3. Rotary in a full attention call", case_rotary),
    "decoding": ("4. Greedy decoding with the KV cache", case_decoding),
    "lab": ("5. The length lab's training throughput", case_lab),
}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_commit() -> dict:
    """The commit (``harness.commit``); where there is no git (a copy of the tree on a GPU machine), the one
    ``ATTNLAB_COMMIT`` names (``benchmarks/gpu_session.sh --prepare`` writes it down before the tree travels)."""
    found = commit()
    if found["commit"] is None and os.environ.get("ATTNLAB_COMMIT"):
        dirty = os.environ.get("ATTNLAB_UNCOMMITTED")
        return {"commit": os.environ["ATTNLAB_COMMIT"], "uncommitted_changes": None if dirty is None else dirty == "1",
                "commit_from": "ATTNLAB_COMMIT"}
    return {**found, "commit_from": "git" if found["commit"] else None}


def machine(ctx: Ctx) -> dict:
    info: dict[str, Any] = {
        **run_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": str(ctx.device),
        "gpu": torch.cuda.get_device_name(ctx.device) if ctx.cuda else None,
        "gpu_memory_gib": (torch.cuda.get_device_properties(ctx.device).total_memory / 2**30) if ctx.cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "peers": {name: _version(name) for name in ("transformers", "x-transformers", "rotary-embedding-torch")},
    }
    return info


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def _value(v: float | None) -> str:
    return "" if v is None else f"{v:.3g}"


def markdown(doc: dict) -> str:
    m = doc["machine"]
    s = doc["settings"]
    where = m["gpu"] or f"CPU ({m['cpu_count']} cores, {m['threads']} torch thread{'s' * (m['threads'] != 1)})"
    head = [
        "# attnlab on the GPU: `benchmarks/gpu.py`",
        "",
        f"{where} · torch {m['torch']} · CUDA {m['cuda']} · {m['date']} · commit "
        f"`{(m['commit'] or 'unknown')[:10]}`{' (with uncommitted changes)' if m['uncommitted_changes'] else ''}"
        f" · {s['dtype']} · median of {s['repeats']} interleaved rounds"
        + (" · **tiny sizes: the verdicts mean nothing**" if s["tiny"] else ""),
        "",
        f"Run: `{s['command']}` in {doc['seconds']:.0f} s.",
        "",
        "## Targets",
        "",
        "| target | measured | wanted | met |",
        "|---|---|---|---|",
    ]
    for name, c in doc["cases"].items():
        for t in c.get("targets", []):
            if t["wanted"] == "(context)":
                continue
            met = "—" if t["met"] is None else "pass" if t["met"] else "**miss**"
            value = "" if t["value"] is None else f"{t['value']:.2f}x" if "x" in t["wanted"] else _value(t["value"])
            head.append(f"| {t['target']} | {value or t['detail'] or 'not measured'} | {t['wanted']} | {met} |")
        if c["status"] != "ok":
            head.append(f"| {name} | {c['status']}: {c.get('error') or c.get('reason')} | | — |")
    body: list[str] = []
    for name, c in doc["cases"].items():
        body += ["", f"## {c.get('title', name)}", ""]
        if c.get("config"):
            body += ["`" + json.dumps(c["config"], default=str) + "`", ""]
        if c["status"] != "ok":
            body += [f"**{c['status']}**: {c.get('error') or c.get('reason')}", ""]
            if c.get("traceback"):
                body += ["```", c["traceback"].rstrip(), "```", ""]
        rows = c.get("rows", [])
        if rows:
            body += ["| pass | implementation | median ms | min–max ms | first call s | peak MiB | vs baseline | "
                     "note |", "|---|---|---|---|---|---|---|---|"]
            medians = {(r["group"], r["impl"]): r["timing"]["median_s"] for r in rows if r["timing"]}
            for r in rows:
                t = r["timing"]
                impl = f"**{r['impl']}**" if r.get("ours") else r["impl"]
                if t is None:
                    body.append(f"| {r['group']} | {impl} | | | | | | skipped: {r['skipped']} |")
                    continue
                base = medians.get((r["group"], r["baseline"])) if r.get("baseline") else None
                vs = f"{t['median_s'] / base:.2f}x" if base else ""
                notes = []
                if r.get("path"):
                    notes.append(f"path {r['path']}")
                if r.get("check_call_s") is not None and r["check_call_s"] >= 0.5:
                    notes.append(f"first forward {r['check_call_s']:.1f} s (compile)")
                if r.get("held_mib"):
                    notes.append(f"holds a {r['held_mib']:.3g} MiB bias between calls")
                if r.get("tokens_per_s"):
                    notes.append(f"{r['tokens_per_s']:.0f} tokens/s")
                if r.get("models_per_hour"):
                    notes.append(f"{r['model_steps_per_s']:.1f} model-steps/s, {r['models_per_hour']:.1f} models/h")
                if t["cut_by_budget"]:
                    notes.append(f"{t['repeats']} rounds (budget)")
                peak = "" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
                first = "" if t["first_call_s"] is None else f"{t['first_call_s']:.2f}"
                body.append(f"| {r['group']} | {impl} | {_ms(t['median_s'])} | {_ms(t['min_s'])}–{_ms(t['max_s'])} "
                            f"| {first} | {peak} | {vs} | {'; '.join(notes)} |")
            body.append("")
        context = [t for t in c.get("targets", []) if t["wanted"] == "(context)"]
        if context:
            body += ["Ratios (context, no target): " + "; ".join(f"{t['target']} {t['value']:.2f}x" for t in context),
                     ""]
        checks = c.get("checks", [])
        if checks:
            bad = [k for k in checks if k["ok"] is False]
            worst = max((k["error"] for k in checks if k["tolerance"] and k["ok"] is not None), default=None)
            body.append(f"Checks before timing: {len(checks)}, {len(bad)} failed"
                        + (f"; worst error {worst:.2g} of the reference's scale" if worst is not None else "") + ".")
            for k in checks:
                if k["tolerance"] is None:  # informative: a share of tokens that agree
                    body.append(f"- {k['impl']}: {k['what']}: {1 - k['error']:.0%} agree")
                elif k["ok"] is not True:
                    body.append(f"- {k['impl']}: {k['what']}: {k['error']:.3g} (tolerance {k['tolerance']:g})")
            body.append("")
        for note in c.get("notes", []):
            body.append(f"Note: {note}")
    return "\n".join(head + body).rstrip() + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (seconds on a CPU)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"a subset of {','.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 10; 3 with --tiny)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where gpu.json and gpu.md go")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no new work after this many seconds (default 450 on CUDA, none on the CPU)")
    parser.add_argument("--dtype", default=None, choices=("bfloat16", "float16", "float32"),
                        help="cases 1-4 (default bfloat16 on CUDA; float32 on the CPU, whose bf16 kernels are slow)")
    parser.add_argument("--compile", action="store_true", help="case 5: also one model under torch.compile")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's intra-op threads (default: torch's own; 1 with --tiny: toy sizes on a shared "
                             "machine lose more to waking a second thread than they gain)")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {','.join(CASES)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch finds no CUDA GPU here (use --device cpu --tiny)")
    repeats = args.repeats if args.repeats is not None else (3 if args.tiny else 10)
    if repeats < 1:
        parser.error("--repeats must be at least 1")
    budget = args.budget_s if args.budget_s is not None else (450.0 if device.type == "cuda" else None)
    threads = args.threads if args.threads is not None else (1 if args.tiny else None)
    if threads is not None:
        if threads < 1:
            parser.error("--threads must be at least 1")
        torch.set_num_threads(threads)
    began = time.perf_counter()
    dtype = args.dtype or ("bfloat16" if device.type == "cuda" else "float32")
    ctx = Ctx(device=device, dtype=getattr(torch, dtype), sizes=TINY if args.tiny else FULL, tiny=args.tiny,
              repeats=repeats, warmup=2 if device.type == "cuda" else 1,
              deadline=None if budget is None else began + budget, compile=args.compile)
    if ctx.cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # the float32 references and the lab compute in float32
    doc: dict[str, Any] = {
        "benchmark": "gpu", "script": "benchmarks/gpu.py", "machine": machine(ctx),
        "settings": {"device": str(device), "tiny": args.tiny, "cases": cases, "repeats": repeats,
                     "warmup_rounds": ctx.warmup, "dtype": str(ctx.dtype), "budget_s": budget,
                     "compile": args.compile,
                     "command": " ".join(["python benchmarks/gpu.py", *(argv if argv is not None else sys.argv[1:])]),
                     "tolerances": TOL},
        "cases": {}, "seconds": 0.0,
    }
    out = Path(args.out)

    def save() -> None:
        doc["seconds"] = time.perf_counter() - began
        write_atomic(out / "gpu.json", json.dumps(doc, indent=2, default=str) + "\n")
        write_atomic(out / "gpu.md", markdown(doc))

    print(f"benchmarks/gpu.py on {doc['machine']['gpu'] or 'the CPU'} (torch {torch.__version__}, CUDA "
          f"{torch.version.cuda}), cases {','.join(cases)}, {repeats} rounds, into {out}", flush=True)
    for name in cases:
        title, runner = RUNNERS[name]
        case = Case(name, title)
        t0, cpu0 = time.perf_counter(), time.process_time()
        print(f"[{time.perf_counter() - began:6.1f} s] {title} ...", flush=True)
        status: dict[str, Any] = {"status": "ok"}
        try:
            ctx.check_budget(f"case {name}")
            runner(ctx, case)
        except Skip as e:
            status = {"status": "skipped", "reason": str(e)}
        except Exception as e:  # one case's failure is recorded; the others still run
            status = {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        finally:
            _free(ctx, collect=True)
        doc["cases"][name] = {**case.to_dict(), **status, "seconds": time.perf_counter() - t0,
                              "cpu_seconds": time.process_time() - cpu0}
        save()
        line = status["status"] if status["status"] == "ok" else f"{status['status']}: " + (
            status.get("error") or status.get("reason", ""))
        print(f"[{time.perf_counter() - began:6.1f} s] {title}: {line} ({time.perf_counter() - t0:.1f} s, "
              f"{time.process_time() - cpu0:.1f} s of CPU)", flush=True)
        for t in case.targets:
            if t["met"] is not None:
                print(f"    {t['target']}: {t['value']:.2f}x (wanted {t['wanted']}): "
                      f"{'pass' if t['met'] else 'MISS'}", flush=True)
    save()
    print(f"wrote {out / 'gpu.json'} and {out / 'gpu.md'} in {doc['seconds']:.0f} s", flush=True)
    return doc


if __name__ == "__main__":
    main()
