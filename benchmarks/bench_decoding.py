"""Benchmark: greedy decoding with the key/value cache against full recompute.

The labs' ``predict`` re-runs the decoder on the whole prefix at every step, so
step ``t`` costs ``O(t)`` layer work and ``T`` steps ``O(T^2)``; attnlab's
cached ``predict`` projects only the newest input and attends to the cached
keys. Same model, same weights, same source, in one process, A/B/A/B:
``predict(use_cache=True)`` against ``predict(use_cache=False)`` (the labs'
algorithm, on attnlab's fused layers, so the ratio isolates the cache).

Configuration (the issue's): the positional-encoding lab's self-attention
encoder-decoder with positional encoding, D=64 (features too), H=4, B=8, a 16-step source, greedy
decoding of T = 32, 64, 128, 256, 512 steps. Targets: at T=256 the cache is
>= 10x faster, and its time per step at 256 is within 1.5x of that at 32.

Run: ``python benchmarks/bench_decoding.py [--lengths 32,64,...] [--repeats R]``; writes ``decoding.json``
in ``results/investigations/`` (``results/latest/`` when ``make bench`` runs it).
"""

from __future__ import annotations

import argparse

import torch

from harness import interleaved, write_result

D, H, B, SOURCE = 64, 4, 8, 16


def build(target_len: int, max_len: int) -> torch.nn.Module:
    from attnlab.models import DecoderPe, EncoderDecoderSelfAttn, EncoderPe

    torch.manual_seed(0)
    encoder = EncoderPe(n_heads=H, d_model=D, ff_units=2 * D, n_features=D, max_len=max_len)
    decoder = DecoderPe(n_heads=H, d_model=D, ff_units=2 * D, n_features=D, max_len=max_len)
    return EncoderDecoderSelfAttn(encoder, decoder, input_len=SOURCE, target_len=target_len).eval()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="32,64,128,256,512")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    lengths = [int(t) for t in args.lengths.split(",")]
    source = torch.randn(B, SOURCE, D, generator=torch.Generator().manual_seed(1))
    rows = {}
    for T in lengths:
        model = build(T, max_len=SOURCE + T)
        cached = model.predict(source, use_cache=True)
        full = model.predict(source, use_cache=False)
        max_diff = float((cached - full).abs().max())
        assert max_diff < 1e-4, f"cached and full decoding disagree by {max_diff} at T={T}"
        # Long full recomputes take seconds: fewer repeats there, never fewer than 2.
        repeats = args.repeats if T <= 128 else max(2, args.repeats - 1)
        t = interleaved(
            {"cached": lambda m=model: m.predict(source, use_cache=True),
             "full": lambda m=model: m.predict(source, use_cache=False)},
            repeats=repeats, per_sample=1 if T >= 128 else 4,
        )
        speedup = t["full"]["median"] / t["cached"]["median"]
        rows[T] = {
            "timings_s": t,
            "ms_per_step": {name: v["median"] / T * 1e3 for name, v in t.items()},
            "speedup_full_over_cached": speedup,
            "max_abs_diff": max_diff,
        }
        print(f"T={T:4d}: cached {t['cached']['median'] * 1e3:8.1f} ms ({rows[T]['ms_per_step']['cached']:.3f} ms/step)"
              f" | full {t['full']['median'] * 1e3:9.1f} ms ({rows[T]['ms_per_step']['full']:.3f} ms/step)"
              f" | {speedup:6.1f}x  (max diff {max_diff:.1e})")
    result: dict = {
        "description": "greedy decoding, key/value cache vs full recompute "
                       "(the positional-encoding lab's model, D=64, H=4, B=8)",
        "config": {"D": D, "H": H, "B": B, "source_len": SOURCE, "lengths": lengths},
        "lengths": {str(T): row for T, row in rows.items()},
    }
    if 256 in rows:
        result["speedup_at_256"] = rows[256]["speedup_full_over_cached"]
        print(f"T=256: cache {result['speedup_at_256']:.1f}x faster than full recompute (target >= 10x)")
    if 32 in rows and 256 in rows:
        growth = rows[256]["ms_per_step"]["cached"] / rows[32]["ms_per_step"]["cached"]
        result["cached_step_growth_256_over_32"] = growth
        print(f"cached time per step, T=256 / T=32: {growth:.2f}x (target <= 1.5x)")
    path = write_result("decoding", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
