"""Benchmark: would ``torch.compile`` of one chunk's step bring chunked attention near the fused kernel?

Issue 29 asks chunked attention with ALiBi to come within 1.25x of attention without
positions (torch's fused CPU kernel), and, where torch's operators cannot reach it, what a
fused CPU kernel gives. The profile of attnlab's chunk loop (``chunked_attend``) shows its two
matmuls alone take about as long as the whole fused call; the rest (the bias, the softmax's
passes) is what a compiled step could fuse. This measures it, forward only, one thread,
``B = 1``, ``H = 8``, ``Dh = 64``, causal, interleaved in one process (median of the repeats):

* ``fused``: ``scaled_dot_product_attention(is_causal=True)``, no positions (the reference);
* ``attnlab``: :func:`attnlab.attention.backends.chunked.chunked_attend` with ALiBi;
* ``compiled``: a chunk step written for the compiler (the ALiBi bias from the distances, the
  causal mask, ``q @ k^T``, softmax, ``@ v``) under ``torch.compile(dynamic=True)``, called
  for each chunk of ``C`` queries over the keys it sees (the key count changes per chunk);
* ``compiled_static``: the same step over all ``L`` keys in every chunk (one shape, so one
  compile; it computes the masked half too).

The compile time (the first call of a compiled loop) is reported apart.

Run: ``python benchmarks/bench_compiled_chunk.py [--length 4096] [--chunk 128] [--repeats 3]``; writes
``compiled_chunk_<length>.json`` in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import Tensor

from harness import interleaved, write_result


def alibi_step(q_c: Tensor, k_n: Tensor, v_n: Tensor, slopes: Tensor, rows: Tensor, scale: float) -> Tensor:
    """One chunk: queries ``q_c [H, C, Dh]`` at positions ``rows [C]`` over ``k_n``, ``v_n [H, n, Dh]``; ALiBi, causal.

    The positions come as a tensor, not as the chunk's first index: an int would be a constant
    of the compiled graph, and each chunk would compile again. Returns ``[H, C, Dh]``.
    """
    cols = torch.arange(k_n.shape[1], device=q_c.device)  # [n]
    distance = (rows[:, None] - cols[None, :]).to(q_c.dtype)  # [C, n]
    bias = torch.where(distance >= 0, -slopes[:, None, None] * distance, float("-inf"))  # [H, C, n]
    scores = torch.baddbmm(bias, q_c, k_n.transpose(1, 2), alpha=scale)  # [H, C, n]
    return torch.softmax(scores, dim=-1) @ v_n  # [H, C, Dh]


def chunk_loop(step, q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, chunk: int, *, all_keys: bool) -> Tensor:
    """``step`` over the query chunks of ``q [H, L, Dh]``; each sees its causal keys, or all ``L`` of them."""
    L, scale = q.shape[1], q.shape[-1] ** -0.5
    positions = torch.arange(L, device=q.device)  # [L]
    outs = []
    for first in range(0, L, chunk):
        n = L if all_keys else min(L, first + chunk)
        rows = positions[first:first + chunk]  # [C]
        outs.append(step(q[:, first:first + chunk], k[:, :n], v[:, :n], slopes, rows, scale))  # [H, C, Dh]
    return torch.cat(outs, dim=1)  # [H, L, Dh]


def main(argv: list[str] | None = None) -> dict:
    from attnlab.attention.backends.chunked import chunked_attend
    from attnlab.encodings import ALiBi

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=128, help="queries per chunk of the compiled loops")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    H, L, Dh = 8, args.length, 64
    q, k, v = (torch.randn(H, L, Dh) for _ in range(3))  # [H, L, Dh]
    alibi = ALiBi(H)
    slopes = alibi.slopes.float()  # [H]
    dynamic = torch.compile(alibi_step, dynamic=True)
    static = torch.compile(alibi_step, dynamic=False)
    loops = {
        "fused": lambda: F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True),
        "attnlab": lambda: chunked_attend(q[None], k[None], v[None], position=alibi, is_causal=True),
        "compiled": lambda: chunk_loop(dynamic, q, k, v, slopes, args.chunk, all_keys=False),
        "compiled_static": lambda: chunk_loop(static, q, k, v, slopes, args.chunk, all_keys=True),
    }
    with torch.no_grad():
        future = torch.ones(L, L, dtype=torch.bool).triu(1)  # [L, L]: the keys a causal row does not see
        dense = alibi.bias(q[None], L).masked_fill(future, float("-inf"))  # [1, H, L, L]
        want = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=dense)[0]  # [H, L, Dh]
        del future, dense
        first_call = {}
        for name in ("compiled", "compiled_static"):
            start = time.perf_counter()
            got = loops[name]()
            first_call[name] = time.perf_counter() - start
            assert torch.allclose(got, want, atol=1e-4), f"{name} differs from the dense ALiBi attention"
        timings = interleaved(loops, repeats=args.repeats)
    base = timings["fused"]["median"]
    ratios = {name: t["median"] / base for name, t in timings.items()}
    payload = {"length": L, "chunk": args.chunk, "heads": H, "head_dim": Dh, "threads": 1,
               "timings_s": timings, "ratio_to_fused": ratios, "first_call_s": first_call}
    write_result(f"compiled_chunk_{L}", payload)
    for name, ratio in ratios.items():
        print(f"{name:16s} {timings[name]['median']:8.3f} s  {ratio:5.2f}x of fused")
    print("first call (compile): " + ", ".join(f"{n} {s:.1f} s" for n, s in first_call.items()))
    return payload


def summary(result: dict) -> list[tuple]:
    """Rows for ``make bench``'s table: each chunked forward pass against the fused call, target 1.25x."""
    fused = result["timings_s"]["fused"]["median"]
    return [(f"ALiBi fwd L={result['length']} 1 thread, {name}", f"{result['timings_s'][name]['median']:.3f} s",
             f"{fused:.3f} s fused", f"{result['ratio_to_fused'][name]:.2f}x", "<= 1.25x",
             result["ratio_to_fused"][name] <= 1.25)
            for name in ("attnlab", "compiled", "compiled_static")]


if __name__ == "__main__":
    main()
