"""Every size a user controls is bounded before anything is allocated or written (issue 27).

Three kinds: "bounded before work" (a size too large is refused in milliseconds, before a
folder or a file exists; a randomized draw costs the sequence's length, not ``max_len``),
"tracebacks and messages" (a size that cannot fit is a ValueError naming the argument and its
value, never the allocator's RuntimeError) and "machine independence" (the memory a run plans
for is ``ATTNLAB_MEMORY_BUDGET`` when it is set, so no outcome depends on the machine's free memory).
"""

import builtins
import io
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from collections import Counter
from itertools import combinations

import pytest
import torch

from attnlab.catalog import STRING_TASKS, TOKEN_TASKS

from cli_helpers import cli

BOUNDED = pytest.mark.bad_input("bounded before work")
MESSAGES = pytest.mark.bad_input("tracebacks and messages")
MACHINE = pytest.mark.bad_input("machine independence")

HUGE = 10**12


def sample_positions(*args, **kwargs):
    """attnlab's draw (imported when called: the module moved between versions)."""
    from attnlab.encodings import sample_positions as draw

    return draw(*args, **kwargs)


def _fake_machine(monkeypatch, free_bytes):
    """Make ``/proc/meminfo`` say the machine has ``free_bytes`` available (and read nothing else differently)."""
    real_open = builtins.open

    def fake_open(file, *args, **kwargs):
        if str(file) == "/proc/meminfo":
            return io.StringIO(f"MemTotal: {2**40 // 1024} kB\nMemAvailable: {free_bytes // 1024} kB\n")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)


def _refused_in_process(capsys, argv, flag, *, written):
    """``attnlab ARGV`` exits 2 with one line naming ``flag``, quickly, and ``written`` does not exist."""
    start = time.process_time()
    code, out, err = cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and flag in lines[0], err[-2000:]
    assert "Traceback" not in err
    assert not written.exists()
    return time.process_time() - start, lines[0]


# -- bounded before work: the examples ------------------------------------------------


@BOUNDED
def test_a_huge_vocabulary_is_refused_before_any_model_is_built(capsys, tmp_path, monkeypatch):
    # `compare --symbols 12000000` built a 6.3 GB model for 178 s before refusing.
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "4G")
    from attnlab.labs.lengths import train

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(train, "build_model", no_model)
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds, line = _refused_in_process(capsys, ["compare", "--quick", "--symbols", "12000000", "--out",
                                                 str(tmp_path / "c"), "--jobs", "1", "--no-progress"],
                                        "--symbols 12000000", written=tmp_path / "c")
    assert "would need" in line
    assert seconds < 20  # CPU seconds: at base it was minutes
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 200 * 2**20  # no model's memory


@BOUNDED
def test_a_huge_randomized_table_is_refused_before_the_folder_exists(capsys, tmp_path, monkeypatch):
    # `compare --encodings random-sinusoidal --l-max 100000000` made the folder, then failed allocating 25.6 GB.
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "4G")
    _, line = _refused_in_process(capsys, ["compare", "--quick", "--encodings", "random-sinusoidal", "--l-max",
                                           "100000000", "--out", str(tmp_path / "c"), "--jobs", "1",
                                           "--no-progress"], "--l-max 100000000", written=tmp_path / "c")
    assert "position table" in line


TIMED_CHILD = textwrap.dedent("""
    import resource, sys, time, torch
    from attnlab.encodings import RandomizedPositions, Rotary
    {setup}
    torch.manual_seed(0)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.process_time()
    {work}
    print(time.process_time() - start, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
""")


def _child_cost(setup, work, timeout=600):
    """CPU seconds and peak-memory growth (bytes) of ``work`` in a fresh interpreter (None, None past ``timeout``)."""
    code = TIMED_CHILD.format(setup=setup, work=work)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None
    assert proc.returncode == 0, proc.stderr[-2000:]
    seconds, grown = proc.stdout.split()
    return float(seconds), float(grown)


@pytest.mark.process
@BOUNDED
def test_a_randomized_forward_costs_its_length_not_max_len():
    # RandomizedPositions(max_len=10**8) took 82 s and 1 GB for one forward of length 5.
    seconds, grown = _child_cost(
        "rand = RandomizedPositions(Rotary(8), max_len=10**8)\nq = torch.zeros(1, 2, 5, 8)",
        "for _ in range(3):\n        rand.rotate(q, q)")
    assert seconds is not None, "timed out"
    assert grown < 100 * 2**20, f"peak memory grew by {grown / 2**20:.0f} MiB"
    assert seconds < 10


@BOUNDED
@pytest.mark.parametrize("max_len", [10**12, 10**15, 2**62])
def test_randomized_positions_place_a_short_sequence_in_any_range(max_len):
    # The draw never materialises [0, max_len): a permutation of it cannot even be allocated here.
    from attnlab.encodings import RandomizedPositions, Rotary

    rand = RandomizedPositions(Rotary(8), max_len=max_len)
    q = torch.randn(1, 2, 5, 8)
    rq, rk = rand.rotate(q, q)
    draw = rand.last_draw
    assert draw.shape == (5,) and bool((draw[1:] > draw[:-1]).all()) and 0 <= int(draw[0]) and int(draw[-1]) < max_len
    assert torch.isfinite(rq).all() and rq.shape == q.shape


@BOUNDED
def test_random_rotary_with_a_huge_l_max_is_cheap_per_step(monkeypatch):
    # random-rotary with --l-max 100000000 cost O(l_max) at every step: the lab now counts (and pays) O(L).
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "4G")
    from attnlab.labs.lengths.config import CompareConfig
    from attnlab.labs.lengths.costs import costs
    from attnlab.labs.lengths.train import build_model

    config = CompareConfig(encodings=("random-rotary",), l_max=HUGE, n_seeds=1, epochs=1, n_train=64, n_test=8,
                           d_model=16, n_heads=2, n_layers=1)
    draw = next(c for c in costs(config) if "drawn" in c.what)
    assert draw.n_bytes < 2**20
    model = build_model(config, "random-rotary")
    x = torch.randint(1, 5, (2, 12))
    start = time.process_time()
    model(x).sum().backward()  # every layer draws from [0, 10**12)
    assert time.process_time() - start < 5


@BOUNDED
@pytest.mark.parametrize("encodings", [None, "random-sinusoidal", "random-learned"])
def test_a_trillion_l_max_is_refused_at_once(capsys, tmp_path, monkeypatch, encodings):
    # `--l-max 1000000000000` hung on the meta device (a table of 10**12 rows computed block by block).
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "4G")
    argv = ["compare", "--quick", "--l-max", str(HUGE), "--out", str(tmp_path / "c"), "--jobs", "1", "--no-progress"]
    if encodings:
        argv += ["--encodings", encodings]
    else:
        argv += ["--encodings", "sinusoidal,random-rotary,random-learned"]
    seconds, _ = _refused_in_process(capsys, argv, f"--l-max {HUGE}", written=tmp_path / "c")
    assert seconds < 20


@BOUNDED
def test_plot_binary_with_a_million_positions_is_refused_before_drawing(capsys, tmp_path):
    # `attnlab plot binary --max-len 1000000` ran past 500 s, at 5.2 GB.
    out = tmp_path / "binary.png"
    seconds, line = _refused_in_process(capsys, ["plot", "binary", "--max-len", "1000000", "--out", str(out)],
                                        "--max-len 1000000", written=out)
    assert "cells" in line and seconds < 20


@BOUNDED
def test_the_binary_figure_bounds_its_cells_in_the_library():
    from attnlab.plotting import plot_binary

    start = time.process_time()
    with pytest.raises(ValueError, match=r"^n 1000000 x .*cells; at most"):
        plot_binary(10**6)
    assert time.process_time() - start < 2


# -- bounded before work: more cases ------------------------------------------------------------


@BOUNDED
@pytest.mark.parametrize("figure, flags", [
    ("encoding", ["--max-len", "1000000", "--d-model", "64"]),
    ("heatmap-p", ["--max-len", "200000", "--d-model", "32"]),
    ("encoding-heatmap", ["--max-len", "1000000", "--d-model", "8"]),
])
def test_huge_heatmap_figures_are_refused_before_the_file(capsys, tmp_path, figure, flags):
    out = tmp_path / "f.png"
    code, _, err = cli(capsys, "plot", figure, *flags, "--out", str(out))
    assert code == 2 and "cells" in err and len(err.strip().splitlines()) == 1, err[-2000:]
    assert not out.exists()


@BOUNDED
def test_a_sinusoidal_encoding_far_past_its_table_computes_only_the_rows_asked():
    from attnlab.encodings import PositionalEncoding

    pe = PositionalEncoding(16, 8, scale_input=False)
    x = torch.zeros(1, 3, 8)
    out = pe(x, offset=HUGE)  # a decoding step at position 10**12: three rows, not 10**12
    from attnlab.encodings import sinusoidal

    torch.testing.assert_close(out[0], sinusoidal(3, 8, start=HUGE), rtol=0, atol=0)


@BOUNDED
@pytest.mark.parametrize("n, max_len", [(10**6, 2**62), (300_000, 400_000), (5, 10**10)])
def test_a_draw_costs_its_length(n, max_len):
    start = time.process_time()
    draw = sample_positions(n, max_len)
    assert time.process_time() - start < 5
    assert draw.shape == (n,) and bool((draw[1:] > draw[:-1]).all()) and int(draw[-1]) < max_len


@BOUNDED
def test_generate_with_huge_steps_is_refused_before_the_first_step():
    from attnlab.models import DecoderOnlyTransformer

    model = DecoderOnlyTransformer(vocab_size=10, d_model=8, n_heads=2, n_layers=1, position="random-rotary",
                                   max_len=HUGE)
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match=r"^steps 100000000: the last step's scores \(no cache\)"):
        model.generate(torch.tensor([[1, 2]]), steps=10**8)  # without a cache: quadratic in the length
    assert not calls


# -- the draw is uniform over subsets ---------------------------------------------------------


def _chi_square(counts, expected):
    return sum((c - expected) ** 2 / expected for c in counts)


@BOUNDED
@pytest.mark.parametrize("n, max_len", [(2, 6), (4, 6), (1, 5)])
def test_the_range_free_draw_is_uniform_over_subsets(n, max_len):
    # The sampler used past PERMUTE_UP_TO, run on a small range so every subset can be counted. With a fixed seed
    # the statistic is a fixed number; 99.9% chi-square quantiles: 14 subsets of 6 choose 2 (or 4): 36.1 at 14
    # degrees of freedom; 5 singletons: 18.5 at 4. The sparse path (n <= max_len / 2) and the complement path.
    from attnlab.encodings.draws import _subset

    g = torch.Generator().manual_seed(1234)
    draws = 6000
    counts = Counter(tuple(_subset(n, max_len, g).tolist()) for _ in range(draws))
    subsets = list(combinations(range(max_len), n))
    assert set(counts) == set(subsets)
    threshold = {15: 36.1, 5: 18.5}[len(subsets)]
    assert _chi_square([counts[s] for s in subsets], draws / len(subsets)) < threshold


@BOUNDED
def test_a_draw_from_a_huge_range_is_uniform():
    # Positions of draws of 3 from [0, 10**9) fall in 10 equal bins with equal frequency (chi-square, 9 degrees
    # of freedom, 99.9%: 27.9), and the smallest of 3 is below the range's first third with probability 1 - (2/3)**3.
    g = torch.Generator().manual_seed(99)
    N, draws = 10**9, 4000
    samples = torch.stack([sample_positions(3, N, generator=g) for _ in range(draws)])  # [draws, 3]
    bins = torch.bincount((samples.flatten() * 10 // N), minlength=10).tolist()
    assert _chi_square(bins, 3 * draws / 10) < 27.9
    p = 1 - (2 / 3) ** 3
    low = float((samples[:, 0] < N // 3).float().mean())
    assert abs(low - p) < 4 * math.sqrt(p * (1 - p) / draws)


@BOUNDED
def test_the_labs_usual_ranges_draw_what_they_drew():
    # Up to 2**16 positions a draw is still the first n of torch.randperm, sorted: the same positions as before.
    torch.manual_seed(5)
    expected = torch.randperm(2048)[:40].sort().values
    torch.manual_seed(5)
    assert torch.equal(sample_positions(40, 2048), expected)


# -- bounded before work: the string tasks' data ------------------------------------------------
# A task's draw, its generator's sample and its sets at absurd sizes asked torch for terabytes (the allocator's
# RuntimeError, or a machine that swaps). Each is refused first, naming the sizes and the memory they would need.

STRING_TASK_NAMES = [*TOKEN_TASKS, *STRING_TASKS]  # attnlab's own, the 15 Chomsky tasks, Kazemnejad's, arithmetic


def _refused_before_allocating(call, *names):
    """``call()`` raises the size's ValueError naming ``names``, in CPU milliseconds (nothing was drawn)."""
    start = time.process_time()
    message = _named(call, *names)
    assert time.process_time() - start < 2, message
    return message


@BOUNDED
@pytest.mark.parametrize("name", STRING_TASK_NAMES)
def test_a_tasks_draw_of_a_million_strings_of_a_million_is_refused_before_allocating(name):
    from attnlab.data.tasks import task_named

    task = task_named(name)
    message = _refused_before_allocating(lambda: task.draw(10**6, 10**6, generator=0), "n 1000000 x length 1000000",
                                         f"the {name} task")
    assert "TB" in message  # the estimate: terabytes, where the budget is 16 GB


@BOUNDED
@pytest.mark.parametrize("name", STRING_TASK_NAMES)
def test_a_generators_sample_of_a_million_strings_of_a_million_is_refused_before_allocating(name):
    from attnlab.data.tasks import task_named

    strings = task_named(name).strings  # the generator itself, as a library user calls it
    _refused_before_allocating(lambda: strings.sample(10**6, 10**6, generator=torch.Generator()),
                               "n 1000000 x length 1000000")


@BOUNDED
@pytest.mark.parametrize("name", ["copy", "duplicate", "parity-check", "binary-addition", "addition",
                                  "reversed-addition"])
def test_a_draw_of_mixed_lengths_is_bounded_by_its_longest(name):
    # mixed lengths are drawn at once (copy's sample_mixed) or a length at a time: the batch is as wide as the longest
    from attnlab.data.tasks import task_named

    task = task_named(name)
    _refused_before_allocating(lambda: task.draw(10**5, 10**6, min_len=task.shortest, generator=0),
                               "n 100000 x length 1000000")


@BOUNDED
@pytest.mark.parametrize(("call", "names"), [
    (lambda: __import__("attnlab.data", fromlist=["x"]).make_task_batch("reverse", 10**6, 10**6, generator=0),
     ["n 1000000 x length 1000000"]),
    (lambda: __import__("attnlab.data.kazemnejad.mathematical", fromlist=["x"]).Addition().sample_digits(
        10**6, 10**6, 10**6, generator=torch.Generator()), ["n 1000000 x a_digits 1000000 + b_digits 1000000"]),
    (lambda: __import__("attnlab.data.arithmetic", fromlist=["x"]).ReversedAddition(equal_lengths=True).sample(
        10**6, 10**6, generator=torch.Generator()), ["n 1000000 x length 1000000"]),
    (lambda: __import__("attnlab.data.arithmetic", fromlist=["x"]).ReversedMultiplication(multiplier_digits=3).sample(
        10**7, 10**6, generator=torch.Generator()), ["n 10000000 x length 1000000"]),
    (lambda: __import__("attnlab.data.squares.walks", fromlist=["x"]).squares_task(10**9, 10**4),
     ["n 1000000000", "n_corners 10000"]),
], ids=["make_task_batch", "addition by digits", "reversed addition of equal lengths", "reversed multiplication",
        "squares walks"])
def test_more_draws_at_absurd_sizes_are_refused_before_allocating(call, names):
    _refused_before_allocating(call, *names)


@BOUNDED
@pytest.mark.parametrize(("task", "sizes", "names"), [
    ("reverse", {"n_train": 10**10}, ["n_train 10000000000"]),
    ("parity-check", {"n_test": 10**9}, ["n_test 1000000000"]),
    ("reversed-addition", {"train_len": 10**5, "test_lens": (10**5, 10**6), "n_train": 10**5}, ["train_len 100000"]),
    ("binary-multiplication", {"test_lens": (8, 10**7)}, ["up to 10000000"]),
    ("squares", {"train_len": 4, "test_lens": (4, 10**6), "n_test": 10**5}, ["n_test 100000"]),
])
def test_a_tasks_sets_are_refused_before_the_first_is_drawn(task, sizes, names):
    # the sets live at once: their sizes add up, and are judged before the training set is drawn
    from attnlab.data.tasks import TaskSpec, make_task_sets

    spec = TaskSpec(task=task, **sizes)
    _refused_before_allocating(lambda: make_task_sets(spec), *names, "sets")


@BOUNDED
@pytest.mark.parametrize(("argv", "flag"), [
    (["--n-test", "1000000000"], "--n-test 1000000000"),
    (["--task", "parity-check", "--n-test", "100000000"], "--n-test 100000000"),
    (["--task", "squares", "--n-test", "1000000000", "--test-lens", "4,8"], "--n-test 1000000000"),
    (["--task", "reversed-addition", "--protocol", "ruoss2023", "--n-test", "1000000000"], "--n-test 1000000000"),
    (["--task", "bucket-sort", "--n-train", "2000000000"], "--n-train 2000000000"),
])
def test_huge_data_sets_are_refused_before_the_folder_exists(capsys, tmp_path, argv, flag):
    # `compare --n-test 1000000000` wrote its folder, then failed allocating 32 GB for the first test set
    seconds, line = _refused_in_process(capsys, ["compare", "--quick", *argv, "--out", str(tmp_path / "c"), "--jobs",
                                                 "1", "--no-progress"], flag, written=tmp_path / "c")
    assert "would need" in line and seconds < 20


# -- tracebacks and messages: sizes that cannot fit are ValueErrors naming them -------------------


def _named(call, *names):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    for name in names:
        assert name in message, message
    assert "would need" in message, message
    return message


@MESSAGES
def test_a_causal_mask_of_a_trillion_is_a_value_error(monkeypatch):
    from attnlab.attention.masks import causal_mask

    _named(lambda: causal_mask(HUGE), f"n_queries {HUGE}", f"n_keys {HUGE}")


@MESSAGES
def test_a_sinusoidal_table_of_a_trillion_is_a_value_error():
    from attnlab.encodings import sinusoidal

    _named(lambda: sinusoidal(HUGE, 8), f"max_len {HUGE}", "d_model 8")


@MESSAGES
def test_a_positional_encoding_of_a_trillion_is_a_value_error():
    from attnlab.encodings import PositionalEncoding

    _named(lambda: PositionalEncoding(HUGE, 8), f"max_len {HUGE}")


@MESSAGES
def test_a_vocabulary_of_a_trillion_is_a_value_error():
    from attnlab.models import DecoderOnlyTransformer

    _named(lambda: DecoderOnlyTransformer(vocab_size=HUGE, d_model=8, n_heads=2, n_layers=1), f"vocab_size {HUGE}")


@MESSAGES
@pytest.mark.parametrize("encoding", ["learned", "sinusoidal", "random-learned", "random-sinusoidal"])
def test_a_model_max_len_of_a_trillion_is_a_value_error(encoding):
    from attnlab.models import DecoderOnlyTransformer

    _named(lambda: DecoderOnlyTransformer(vocab_size=10, d_model=8, n_heads=2, n_layers=1, position=encoding,
                                          max_len=HUGE), f"max_len {HUGE}")


@MESSAGES
@pytest.mark.parametrize("architecture", ["decoder-only", "encoder-decoder"])
def test_generate_steps_of_a_trillion_is_a_value_error(architecture):
    from attnlab.models import DecoderOnlyTransformer, Transformer

    prompt = torch.tensor([[1, 2]])
    if architecture == "decoder-only":
        model = DecoderOnlyTransformer(vocab_size=10, d_model=8, n_heads=2, n_layers=1, position="rotary")
        _named(lambda: model.generate(prompt, steps=HUGE), f"steps {HUGE}")
        # with a padding mask, positions for every step were made before the first one
        _named(lambda: model.generate(prompt, steps=HUGE, prompt_mask=torch.ones(1, 2, dtype=torch.bool)),
               f"steps {HUGE}")
    else:
        model = Transformer(vocab_size=10, d_model=8, n_heads=2, n_layers=1, position="rotary")
        _named(lambda: model.generate(prompt, steps=HUGE, start=1), f"steps {HUGE}")


@MESSAGES
@pytest.mark.parametrize("call, names", [
    (lambda: __import__("attnlab.encodings", fromlist=["x"]).LearnedPositionalEncoding(HUGE, 8), [f"max_len {HUGE}"]),
    (lambda: __import__("attnlab.encodings.sinusoidal_nd", fromlist=["x"]).sinusoidal_2d(10**6, 10**6, 8),
     ["height 1000000", "width 1000000", "d_model 8"]),
    (lambda: __import__("attnlab.encodings.axial_rotary", fromlist=["x"]).axial_rotary_angles(10**6, 10**6,
                                                                                                head_dim=8),
     ["grid size 0 1000000", "grid size 1 1000000"]),
    (lambda: __import__("attnlab.attention.masks", fromlist=["x"]).padding_mask_from_lengths([1, 2], max_len=HUGE),
     [f"max_len {HUGE}"]),
    (lambda: __import__("attnlab.analysis.similarity", fromlist=["x"]).binary_codes(HUGE), [f"n {HUGE}"]),
    (lambda: __import__("attnlab.models", fromlist=["x"]).DecoderOnlyTransformer(
        n_features=HUGE, d_model=8, n_heads=2, n_layers=1), [f"n_features {HUGE}"]),
    (lambda: __import__("attnlab.models", fromlist=["x"]).DecoderOnlyTransformer(
        vocab_size=10, d_model=10**6, n_heads=2, n_layers=1), ["d_model 1000000"]),
    (lambda: __import__("attnlab.encodings", fromlist=["x"]).RandomizedSinusoidal(HUGE, 8), [f"max_len {HUGE}"]),
], ids=["learned table", "sinusoidal_2d", "axial rotary", "padding mask", "binary codes", "n_features",
        "d_model", "randomized sinusoidal"])
def test_more_sizes_that_cannot_fit_are_value_errors_naming_them(call, names):
    _named(call, *names)


@MESSAGES
def test_a_range_beyond_int64_is_a_value_error_naming_max_len():
    from attnlab.encodings import RandomizedPositions, Rotary

    with pytest.raises(ValueError, match=r"max_len must be at most 4611686018427387904, got 10{20}"):
        sample_positions(3, 10**20)
    with pytest.raises(ValueError, match=r"max_len must be at most 4611686018427387904, got 10{20}"):
        RandomizedPositions(Rotary(8), max_len=10**20)  # at construction, not at its first call


# -- machine independence ----------------------------------------------------------------------


@MACHINE
@pytest.mark.parametrize("free_gb", [2, 10, 16, 64])
def test_the_test_lens_refusal_does_not_depend_on_the_machines_free_memory(capsys, tmp_path, monkeypatch, free_gb):
    # tests/hardening's `compare --quick --test-lens 8,10000000` failed on a machine with less than 20.5 GB free,
    # because another refusal fired first. Here the machine's free memory is faked, with no budget set.
    monkeypatch.delenv("ATTNLAB_MEMORY_BUDGET", raising=False)
    _fake_machine(monkeypatch, free_gb * 2**30)
    _, line = _refused_in_process(capsys, ["compare", "--quick", "--test-lens", "8,10000000", "--out",
                                           str(tmp_path / "c"), "--jobs", "1", "--no-progress"],
                                  "--test-lens", written=tmp_path / "c")
    assert "10000000" in line and "available" in line


@MACHINE
def test_the_budget_replaces_the_machines_free_memory(monkeypatch):
    from attnlab._limits import available_memory, check_memory

    _fake_machine(monkeypatch, 1 * 2**30)  # a small machine, or a busy one
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "64G")
    assert available_memory() == 64 * 2**30
    check_memory("a run of 8 GB", 8 * 2**30)  # planned for the budget, whatever the machine has now
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "1G")
    _fake_machine(monkeypatch, 2**40)  # a large machine
    with pytest.raises(ValueError, match=r"would need 2.15 GB, more than the 1.07 GB available "
                                         r"\(ATTNLAB_MEMORY_BUDGET=1G\)"):
        check_memory("a run of 2 GB", 2 * 2**30)


@pytest.mark.process
@MACHINE
def test_the_suite_plans_for_one_budget_in_every_test_and_subprocess():
    assert os.environ.get("ATTNLAB_MEMORY_BUDGET") == "16G"
    code = "from attnlab._limits import available_memory; print(available_memory())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and int(proc.stdout) == 16 * 2**30, proc.stderr


@MACHINE
@pytest.mark.parametrize("free_gb", [1, 4096])
def test_a_comparisons_costs_are_judged_the_same_on_any_machine(monkeypatch, free_gb):
    # Under the suite's budget, a comparison of 8 GB is refused on any machine, and a default one accepted.
    from attnlab.labs.lengths.config import CompareConfig

    _fake_machine(monkeypatch, free_gb * 2**30)
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "4G")
    CompareConfig(n_seeds=1)
    with pytest.raises(ValueError, match=r"^n_train 200000000: the training set.*4.29 GB available"):
        CompareConfig(n_seeds=1, n_train=200_000_000)


@MACHINE
@pytest.mark.parametrize("free_gb", [1, 4096])
def test_a_figures_table_is_judged_the_same_on_any_machine(capsys, tmp_path, monkeypatch, free_gb):
    _fake_machine(monkeypatch, free_gb * 2**30)
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "1G")
    out = tmp_path / "t.npy"
    code, _, err = cli(capsys, "encode", "--max-len", "10000000", "--d-model", "64", "--out", str(out))
    assert code == 2 and "--max-len 10000000 x --d-model 64" in err and "1.07 GB available" in err, err
    assert not out.exists()


@pytest.mark.process
@MACHINE
def test_a_subprocess_run_is_refused_the_same_under_a_budget(tmp_path):
    # The child reads the budget, not its machine: the same line whatever the machine has free.
    env = {**os.environ, "ATTNLAB_MEMORY_BUDGET": "2G"}
    proc = subprocess.run([sys.executable, "-m", "attnlab", "compare", "--quick", "--n-train", "100000000",
                           "--out", str(tmp_path / "c"), "--no-progress"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 2 and "2.15 GB available (ATTNLAB_MEMORY_BUDGET=2G)" in proc.stderr, proc.stderr
    assert not (tmp_path / "c").exists()


# The limits a process lives under besides the machine's free memory: an address-space limit (`ulimit -v`)
# and a control group's memory limit (a container's). A run that plans for MemAvailable alone is killed
# or fails in the allocator under them; each is read, and a refusal names the one that binds.
_UNDER_RLIMIT = textwrap.dedent("""
    import os, resource, sys
    os.environ.pop("ATTNLAB_MEMORY_BUDGET", None)
    import torch
    from attnlab import _limits
    from attnlab.cli import main
    room = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (_limits._mapped() + room, resource.getrlimit(resource.RLIMIT_AS)[1]))
    if sys.argv[2] == "check":
        try:
            _limits.check_memory("a run of 1 GB", 2**30)
        except ValueError as err:
            print(err)
    else:
        sys.exit(main(sys.argv[2:]))
""")


def _under_rlimit(room, *argv):
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_MEMORY_BUDGET"}
    return subprocess.run([sys.executable, "-c", _UNDER_RLIMIT, str(room), *argv], capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.mark.process
@MACHINE
def test_an_address_space_limit_bounds_what_a_run_plans_for():
    proc = _under_rlimit(512 * 2**20, "check")
    assert proc.returncode == 0, proc.stderr
    assert "a run of 1 GB would need 1.07 GB, more than the" in proc.stdout
    assert "its address-space limit (RLIMIT_AS) leaves" in proc.stdout


@pytest.mark.process
@MACHINE
@pytest.mark.parametrize("argv", [
    ["encode", "--max-len", "1000000", "--d-model", "1024"],  # a 4 GB table
    ["encode", "--max-len", "3000000", "--d-model", "256", "--dtype", "float64"],  # 6 GB in float64
])
def test_the_cli_refuses_in_one_line_what_the_address_space_limit_cannot_hold(argv, tmp_path):
    proc = _under_rlimit(1024 * 2**20, *argv, "--out", str(tmp_path / "table.npy"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "RLIMIT_AS" in proc.stderr, proc.stderr
    assert not (tmp_path / "table.npy").exists()


@MACHINE
@pytest.mark.parametrize(("files", "left"), [
    ({"memory.max": "2147483648\n", "memory.current": "1610612736\n"}, 512 * 2**20),  # cgroup v2
    ({"memory/memory.limit_in_bytes": "1073741824\n", "memory/memory.usage_in_bytes": "268435456\n"},
     768 * 2**20),  # cgroup v1
])
def test_a_cgroups_memory_limit_bounds_what_a_run_plans_for(monkeypatch, tmp_path, files, left):
    from attnlab import _limits

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(_limits, "CGROUP", tmp_path)
    monkeypatch.delenv("ATTNLAB_MEMORY_BUDGET", raising=False)
    _fake_machine(monkeypatch, 2**40)
    assert _limits.memory_limits()["its cgroup's memory limit leaves"] == left
    assert _limits.available_memory() == left
    with pytest.raises(ValueError, match=r"would need 1.07 GB, more than the .* its cgroup's memory limit leaves"):
        _limits.check_memory("a run of 1 GB", 2**30)


@MACHINE
@pytest.mark.parametrize("limit", ["max\n", "9223372036854771712\n"])
def test_a_cgroup_without_a_limit_leaves_the_machines_memory(monkeypatch, tmp_path, limit):
    from attnlab import _limits

    (tmp_path / "memory.max").write_text(limit)
    (tmp_path / "memory.current").write_text("1000\n")
    monkeypatch.setattr(_limits, "CGROUP", tmp_path)
    monkeypatch.delenv("ATTNLAB_MEMORY_BUDGET", raising=False)
    _fake_machine(monkeypatch, 3 * 2**30)
    assert "its cgroup's memory limit leaves" not in _limits.memory_limits()
    assert _limits.memory_limits()["this machine has available"] == 3 * 2**30


# --threads: torch.set_num_threads takes a C int, and a million threads fail in the OpenMP runtime (a SystemError
# traceback in compare; in train a message blaming the model's sizes). Refused by the flag, in one line.
@BOUNDED
@pytest.mark.parametrize("verb", [
    ["train"], ["compare", "--quick"], ["predict", "--run", "nowhere"], ["plot", "attention", "--run", "x"],
])
@pytest.mark.parametrize("threads", ["1000000", "9223372036854775807", "1025"])
def test_threads_past_the_bound_are_refused_by_the_flag(capsys, tmp_path, verb, threads):
    code, out, err = cli(capsys, *verb, "--threads", threads, "--out", str(tmp_path / "run"))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"argument --threads: must be at most 1024, got {threads}" in err
    assert not (tmp_path / "run").exists()


@BOUNDED
def test_the_library_refuses_threads_past_the_bound():
    from attnlab.training.threads import MAX_THREADS, intra_op_threads

    before = torch.get_num_threads()
    with pytest.raises(ValueError, match=r"threads must be at most 1024, got 1000000"):
        with intra_op_threads(1_000_000):
            pass
    assert torch.get_num_threads() == before and MAX_THREADS == 1024


# A full disk mid-write: torch.save's zip writer, closing after the failed write, raised a RuntimeError
# ("unexpected pos") over the OSError, and compare printed a 41-line traceback. A file-size limit (RLIMIT_FSIZE,
# SIGXFSZ ignored) makes the kernel fail the write exactly as a full disk does, without a disk to fill.
_FILE_SIZE_LIMIT = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    import torch
    from attnlab.cli import main
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.process
@MESSAGES
@pytest.mark.parametrize(("limit", "argv", "written"), [
    (200_000, ["compare", "--encodings", "alibi", "--seeds", "1", "--train-len", "4", "--test-lens", "4,6",
               "--n-train", "64", "--n-test", "8", "--epochs", "1", "--d-model", "128", "--n-heads", "2",
               "--n-layers", "4", "--jobs", "1", "--no-progress"], "models/alibi-seed0/weights.pt"),
    (200_000, ["compare", "--encodings", "alibi,none", "--seeds", "1", "--train-len", "4", "--test-lens", "4,6",
               "--n-train", "64", "--n-test", "8", "--epochs", "1", "--d-model", "128", "--n-heads", "2",
               "--n-layers", "4", "--jobs", "2", "--no-progress"], "weights.pt"),
    (20_000, ["train", "--epochs", "1", "--no-progress"], "checkpoint.pt"),
    (100_000, ["encode", "--max-len", "10000", "--d-model", "64"], "table.npy"),
])
def test_a_full_disk_mid_write_is_one_line_naming_the_file(tmp_path, limit, argv, written):
    out = tmp_path / ("table.npy" if argv[0] == "encode" else "run")
    # No bytecode written under the limit: Python's .pyc writer keeps a short write, and a truncated .pyc in src/
    # breaks every later import of that module ("marshal data too short").
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMIT, str(limit), *argv, "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "cannot write" in proc.stderr and written in proc.stderr
    assert "File too large" in proc.stderr or "file-size limit" in proc.stderr
    assert not list(tmp_path.rglob("*.tmp*"))  # no temporary left behind


# An error echoes the value given: a --test-lens of 10,000 lengths printed a 30 KB line. Lists are cut to their
# first items and the count, and every line to 2,000 characters.
@MESSAGES
@pytest.mark.parametrize(("argv", "shown"), [
    (["--test-lens", ",".join(["5"] * 10_000)], "got [5, 5, 5, ..., 5] (10,000 items)"),
    (["--task", "scan", "--test-lens", ",".join(str(i % 50 + 1) for i in range(10_000))],
     "got [1, 2, 3, ..., 50] (10,000 items)"),
    (["--encodings", ",".join(["sinusoidal"] * 5_000)], "(5,000 items)"),
    (["--encodings", "x" * 20_000], "xxxx ..."),
])
def test_an_echoed_value_is_cut_to_a_line(capsys, tmp_path, argv, shown):
    code, out, err = cli(capsys, "compare", *argv, "--out", str(tmp_path / "run"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert shown in err and len(err) <= 2040, err[:600]
    assert not (tmp_path / "run").exists()


# `--encoding ''` trained sinusoidal and recorded it: an empty name was taken for "the default".
SILENT = pytest.mark.bad_input("silent wrong results")


@SILENT
@pytest.mark.parametrize("argv", [["--encoding", ""], ["--encoding", "   "], ["--encoding", "\t"]])
def test_an_empty_encoding_is_refused_not_taken_for_the_default(capsys, tmp_path, argv):
    code, out, err = cli(capsys, "train", "--model", "transformer", *argv, "--epochs", "1",
                         "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--encoding must name one (or be left out for the default)" in err
    assert not (tmp_path / "run").exists()


@SILENT
@pytest.mark.parametrize("field", ["encoding", "backend"])
def test_the_library_refuses_an_empty_name_too(field):
    from attnlab.labs.squares.config import SquaresConfig

    with pytest.raises(ValueError, match=rf"^{field} must name one .*got ''"):
        SquaresConfig(model="transformer", **{field: ""})


# A user's `module:Class` that is not where Python looks, or that fails as it is imported: only ImportError was
# caught, so a module raising, with a syntax error, or calling sys.exit(3) gave a traceback or ended attnlab
# silently; and the console script does not look in the current folder, which nothing said.
@MESSAGES
@pytest.mark.parametrize(("source", "said"), [
    (None, r"no module 'usermod_\w+' where Python looks .*PYTHONPATH=\. attnlab"),
    ("raise RuntimeError('boom')\n", r"importing module 'usermod_\w+' failed: RuntimeError: boom \(.*usermod_\w+\.py, "
                                     r"line 1\)"),
    ("def f(:\n", r"importing module 'usermod_\w+' failed: SyntaxError: .*line 1"),
    ("import sys\nsys.exit(3)\n", r"module 'usermod_\w+' called sys.exit\(3\) while it was imported"),
    ("import no_such_package_of_theirs\n", r"failed: ModuleNotFoundError: No module named 'no_such_package_of_theirs'"),
])
def test_a_user_module_that_cannot_be_imported_is_one_line_saying_why(capsys, tmp_path, monkeypatch, source, said):
    name = f"usermod_{abs(hash((str(tmp_path), source))) % 10**8}"
    if source is not None:
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = cli(capsys, "compare", "--encodings", f"{name}:Scheme", "--out", str(tmp_path / "run"))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert re.search(said, err), err
    assert not (tmp_path / "run").exists()


_USER_SCHEME = """
from attnlab.encodings import ALiBi


class Mine(ALiBi):
    @classmethod
    def for_model(cls, sizes):
        return cls(sizes.n_heads)
"""


@MESSAGES
@pytest.mark.training
@pytest.mark.parametrize("verb", ["compare", "train"])
def test_a_run_whose_scheme_module_is_gone_names_the_module_not_an_unreadable_config(capsys, tmp_path, monkeypatch,
                                                                                    verb):
    name = f"gone_{verb}_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / f"{name}.py").write_text(_USER_SCHEME)
    run = tmp_path / "run"
    if verb == "compare":
        first = ["compare", "--encodings", f"{name}:Mine", "--seeds", "1", "--train-len", "3", "--test-lens", "3,4",
                 "--n-train", "32", "--n-test", "4", "--epochs", "1", "--d-model", "8", "--n-heads", "2",
                 "--n-layers", "1", "--jobs", "1", "--no-progress", "--out", str(run)]
        again = ["compare", "--resume", "--out", str(run)]
    else:
        first = ["train", "--model", "transformer", "--encoding", f"{name}:Mine", "--epochs", "1", "--no-progress",
                 "--out", str(run)]
        again = ["predict", "--run", str(run), "--points", "1,1 2,2"]
    with monkeypatch.context() as made:
        made.syspath_prepend(str(tmp_path / "lib"))
        code, _, err = cli(capsys, *first)
        assert code == 0, err
    monkeypatch.delitem(sys.modules, name)  # gone from the path, and from Python's memory of it
    code, out, err = cli(capsys, *again)
    assert code == 2 and err.count("\n") == 1, err
    assert "the run's settings name a scheme that cannot be loaded here" in err and f"no module '{name}'" in err
    assert "unreadable" not in err


# -- position ids far past a table, dense scores past the memory: bounded before the work -------------


@BOUNDED
@pytest.mark.parametrize("far", [10**7, 10**9, 2**40])
def test_sinusoidal_rows_at_far_position_ids_cost_the_rows_asked(far):
    from attnlab.models import DecoderOnlyTransformer

    model = DecoderOnlyTransformer(vocab_size=13, d_model=16, n_heads=2, n_layers=1, position="sinusoidal").eval()
    start = time.process_time()
    with torch.no_grad():
        out = model(torch.tensor([[3, 4]] * 2), position_ids=torch.tensor([[0, far]] * 2))
    assert time.process_time() - start < 5  # before: every row up to `far`, 63 s and 2.5 GB at 10**7
    assert out.shape == (2, 2, 13) and bool(torch.isfinite(out).all())


@BOUNDED
def test_sinusoidal_rows_far_past_the_table_are_the_float64_formula():
    from attnlab.encodings import PositionalEncoding

    pe = PositionalEncoding(16, 8, scale_input=False)
    ids = torch.tensor([[2, 10**7, 10**7 + 1, 2]])
    out = pe(torch.zeros(1, 4, 8), position_ids=ids)[0]  # [4, 8]
    p = ids[0].double()[:, None]  # [4, 1]
    w = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # [4]
    expected = torch.stack([torch.sin(p * w), torch.cos(p * w)], dim=-1).flatten(1).float()  # s0 c0 s1 c1 ...
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@BOUNDED
@pytest.mark.parametrize(("encoding", "said"), [
    ("learned", r"position_ids reach position 10000000 but LearnedPositionalEncoding has max_len=64"),
    ("random-sinusoidal", r"position_ids reach position 10000000, so RandomizedSinusoidal\(max_len=64\) would "
                          r"draw 10000001 distinct positions"),
    ("random-learned", r"position_ids reach position 10000000, so RandomizedLearned\(max_len=64\)"),
])
def test_other_tables_refuse_far_position_ids_by_name_at_once(encoding, said):
    from attnlab.models import DecoderOnlyTransformer

    model = DecoderOnlyTransformer(vocab_size=13, d_model=16, n_heads=2, n_layers=1, position=encoding, max_len=64)
    start = time.process_time()
    with pytest.raises(ValueError, match=said):
        model(torch.tensor([[3, 4]]), position_ids=torch.tensor([[0, 10**7]]))
    assert time.process_time() - start < 1


@BOUNDED
@pytest.mark.parametrize(("backend", "length", "batch", "need_weights", "way_out"), [
    ("dense", 60_000, 1, False, "use backend='chunked'"),  # the example: 28.8 GB
    ("dense", 20_000, 8, False, "use backend='chunked'"),
    ("auto", 60_000, 1, True, "only the dense path serves this call"),
    ("dense", 30_000, 2, True, "only the dense path serves this call"),
])
def test_dense_scores_that_cannot_fit_are_refused_naming_backend_and_length(monkeypatch, backend, length, batch,
                                                                            need_weights, way_out):
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "4G")
    from attnlab.attention import MultiHeadAttention
    from attnlab.encodings import ALiBi

    mha = MultiHeadAttention(2, 16, position=ALiBi(2), backend=backend)
    x = torch.randn(batch, length, 16)
    start = time.process_time()
    with torch.no_grad(), pytest.raises(ValueError) as refused:
        mha(x, need_weights=need_weights)
    assert time.process_time() - start < 5
    message = str(refused.value)
    assert message.startswith(f"backend={backend!r} at length L = {length} queries x {length} keys: ")
    assert f"B {batch} x H 2 x T {length} x S {length}" in message and way_out in message


@BOUNDED
def test_dense_scores_within_the_budget_run():
    from attnlab.attention import MultiHeadAttention
    from attnlab.encodings import ALiBi

    mha = MultiHeadAttention(2, 16, position=ALiBi(2), backend="dense")
    assert mha(torch.randn(1, 64, 16)).shape == (1, 64, 16)


# `compare --task binary-multiplication --symbols 7` trained on binary-multiplication's own 3 symbols and recorded
# n_symbols 7 in config.json and results.json: a task whose vocabulary is fixed ignored the size it was given.
FIXED_VOCABULARY = ["binary-multiplication", "bucket-sort", "scan", "reversed-addition", "copy-random", "squares"]
_TINY = {"encodings": ("alibi",), "n_seeds": 1, "train_len": 4, "test_lens": (4, 6), "n_train": 16, "n_test": 4}


@SILENT
@pytest.mark.parametrize("task", FIXED_VOCABULARY)
def test_a_size_given_to_a_fixed_vocabulary_is_refused_by_the_library(task):
    from attnlab.data.tasks import TaskSpec, make_task_sets
    from attnlab.labs.lengths.config import CompareConfig

    said = rf"^n_symbols 7: the {task} task( has no vocabulary|'s vocabulary is fixed)"
    with pytest.raises(ValueError, match=said):
        CompareConfig(task=task, n_symbols=7, **_TINY)
    spec = TaskSpec(task=task, train_len=4, test_lens=(4, 6), n_train=16, n_test=4, n_symbols=7)
    with pytest.raises(ValueError, match=said):
        make_task_sets(spec)


@SILENT
@pytest.mark.parametrize(("task", "given", "recorded", "vocab_size"), [
    ("binary-multiplication", None, None, 6), ("scan", None, None, 24), ("squares", None, None, None),
    ("copy", None, 10, 13), ("sort", 4, 4, 7), ("duplicate", 2, 2, 5),
])
def test_the_settings_record_the_alphabet_the_models_use(task, given, recorded, vocab_size):
    from attnlab.labs.lengths.config import CompareConfig

    config = CompareConfig(task=task, n_symbols=given, **_TINY)
    assert config.to_dict()["n_symbols"] == recorded  # None: the task's own vocabulary, which no setting sizes
    assert config.task_object.model_io(config.n_symbols)["vocab_size"] == vocab_size


@SILENT
def test_a_saved_default_size_of_a_fixed_vocabulary_still_resumes():
    # a config.json may hold n_symbols 10 (the default) for such a task: read as its own vocabulary, not refused
    from attnlab.labs.lengths.config import CompareConfig

    saved = {**CompareConfig(task="parity-check", **_TINY).to_dict(), "n_symbols": 10}
    assert CompareConfig.from_dict(saved) == CompareConfig(task="parity-check", **_TINY)
    with pytest.raises(ValueError, match=r"^n_symbols 7: the parity-check task's vocabulary is fixed"):
        CompareConfig.from_dict({**saved, "n_symbols": 7})  # a size that was given, and never used


# `compare --task scan --test-lens 23` was refused when the sets were built: after the run folder was written.
@BOUNDED
@pytest.mark.parametrize(("task", "fields", "said"), [
    ("scan", {"test_lens": (23,)}, r"^test_lens \[23\]: SCAN has no command of that many actions"),
    ("scan", {"train_len": 25, "test_lens": (26, 29, 64)}, r"^test_lens \[29, 64\]: SCAN has no command"),
    ("addition", {"min_train_len": 1}, r"^min_train_len must be at least 3 for the addition task .*got 1$"),
    ("copy-repeat-change", {"min_train_len": 3, "test_lens": (8, 2, 1)},
     r"^test_lens must be at least 3 for the copy-repeat-change task .*got \[2, 1\]$"),
    ("addition", {"train_len": 2, "min_train_len": 2, "test_lens": (4,)},
     r"^train_len must be at least 3 for the addition task .*got 2$"),
])
def test_lengths_a_task_refuses_are_refused_with_the_settings(task, fields, said):
    from attnlab.data.tasks import TaskSpec, make_task_sets, task_named
    from attnlab.labs.lengths.config import CompareConfig

    settings = {**_TINY, "train_len": 8, "test_lens": (8,), **fields}
    with pytest.raises(ValueError, match=said):
        CompareConfig(task=task, **settings)
    # and by the library's sets, before the training set is drawn
    spec = TaskSpec(task=task, **{k: v for k, v in settings.items() if k in ("train_len", "test_lens", "n_train",
                                                                           "n_test", "min_train_len")})
    drawn = []
    task_object = task_named(task)
    if hasattr(task_object, "draw"):
        task_object.draw = lambda *args, **kwargs: drawn.append(args)
    with pytest.raises(ValueError, match=said):
        task_object.sets(spec)
    assert drawn == []
    with pytest.raises(ValueError, match=said):
        make_task_sets(spec)


@BOUNDED
def test_scans_sets_are_bounded_by_its_commands_not_by_the_counts_asked():
    # SCAN is 20,910 commands: asking for more takes them all, so no count is too large for its sets
    from attnlab.data.tasks import TaskSpec, task_named

    task = task_named("scan")
    spec = TaskSpec(task="scan", train_len=22, test_lens=(24, 48), n_train=10**15, n_test=10**15)
    assert task.sets_bytes(spec) < 2**30
    task.check_sets(spec)  # accepted


# `train --model transformer --encoding abacus` wrote its run folder, then failed at the first forward pass: the
# squares have no digits to number.
@BOUNDED
@pytest.mark.parametrize("encoding", ["abacus", "coupling"])
def test_the_squares_settings_refuse_an_encoding_that_takes_the_tasks_positions(encoding):
    from attnlab.labs.squares.config import SquaresConfig

    with pytest.raises(ValueError, match=rf"^encoding '{encoding}' takes its positions from the task .*the squares "
                                         "have none"):
        SquaresConfig(model="transformer", encoding=encoding)


def test_the_shortest_training_length_defaults_to_the_tasks_own():
    # `compare --task addition` on its defaults asked for training sequences of length 1, which addition does not
    # have (its shortest is 3): the default is the task's shortest, recorded resolved; a length given is kept.
    from attnlab.labs.lengths.config import CompareConfig

    settings = {**_TINY, "train_len": 8, "test_lens": (8,)}
    assert CompareConfig(task="addition", **settings).min_train_len == 3
    assert CompareConfig(task="copy", **settings).min_train_len == 1
    assert CompareConfig(task="addition", **settings, min_train_len=5).min_train_len == 5

