"""Oversized runs are refused from their settings alone: one line naming the flag, little memory, nothing written.

Every outcome here is independent of the machine's free memory: the commands run under
``ATTNLAB_MEMORY_BUDGET=4G`` (what the run may plan for), and the runs asked for need
hundreds of gigabytes or more.
"""

import subprocess
import sys
import textwrap

import pytest

from attnlab._limits import memory_budget
from attnlab.labs.lengths.config import CompareConfig
from attnlab.labs.lengths.costs import costs
from attnlab.labs.lengths.train import build_model
from attnlab.labs.memory_bound import Cost, check_costs, transformer_parameters

# Runs the command in a child and prints its exit status, its stderr and the child's peak RSS in kB:
# a fresh interpreter, so RUSAGE_CHILDREN holds that one child only.
MEASURE = textwrap.dedent("""
    import json, resource, subprocess, sys
    proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    print(json.dumps([proc.returncode, proc.stderr, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
""")


@pytest.mark.parametrize("flags, flag", [
    (["--symbols", "12000000"], "--symbols 12000000"),
    (["--test-lens", "8,10000000"], "--test-lens 10000000"),
    (["--encodings", "random-sinusoidal", "--l-max", "100000000"], "--l-max 100000000"),
    (["--encodings", "random-learned", "--l-max", "1000000000000"], "--l-max 1000000000000"),  # its table
])
@pytest.mark.process
def test_an_oversized_comparison_is_refused_cheaply_naming_its_flag(flags, flag, tmp_path, monkeypatch):
    import json
    import os

    out = tmp_path / "never"
    env = {**os.environ, "ATTNLAB_MEMORY_BUDGET": "4G"}
    command = [sys.executable, "-m", "attnlab", "compare", *flags, "--out", str(out), "--no-progress"]
    proc = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    status, stderr, peak_kb = json.loads(proc.stdout)
    assert status == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"attnlab compare: error: {flag}:"), stderr
    assert "would need" in lines[0]
    assert peak_kb * 1024 < 500 * 2**20, f"peak RSS {peak_kb} kB"
    assert not out.exists() and not (tmp_path / "runs").exists()  # nothing written


def test_the_budget_caps_what_a_run_may_plan_for(monkeypatch):
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "512M")
    assert memory_budget() == 512 * 2**20
    with pytest.raises(ValueError, match=r"d_model 4096: the layers.*would need .* more than the 537 MB"):
        CompareConfig(d_model=4096, n_heads=4)
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "lots")
    with pytest.raises(ValueError, match="ATTNLAB_MEMORY_BUDGET must be a positive size .*'lots'"):
        memory_budget()


def test_the_largest_cost_is_named_and_phases_do_not_add(monkeypatch):
    monkeypatch.setenv("ATTNLAB_MEMORY_BUDGET", "1000000000")
    # Two phases of 0.6 GB each do not overlap: with 0.3 GB that lives throughout, 0.9 GB fits.
    check_costs([Cost("n_train", 1, "data", 300_000_000), Cost("train_len", 2, "a step", 600_000_000, True),
                 Cost("test_lens", 3, "decoding", 600_000_000, True)])
    with pytest.raises(ValueError, match=r"^test_lens 3: decoding \(and 300 MB for the rest of the run\) would need"):
        check_costs([Cost("n_train", 1, "data", 300_000_000), Cost("test_lens", 3, "decoding", 800_000_000, True)])


def test_one_parameter_bound_for_both_labs():
    # attnlab's Transformer: Dh = D / H, so 12 D^2 per layer; the labs' wide heads: Dh = D, 12 H D^2.
    narrow = transformer_parameters(d_model=64, n_heads=4, head_dim=16, n_layers=1, ff_units=256, stacks=1)
    wide = transformer_parameters(d_model=64, n_heads=4, head_dim=64, n_layers=1, ff_units=256, stacks=1)
    assert narrow == 12 * 64 * 64 + 2 * 64 * 256 + 16 * 64
    assert wide - narrow == 12 * 3 * 64 * 64


def test_the_bound_holds_the_models_it_allows():
    # Every model a default comparison builds has fewer parameters than the bound counts for it.
    config = CompareConfig(n_seeds=1)
    layers = next(c for c in costs(config) if c.setting == "d_model")
    vocabulary = next(c for c in costs(config) if c.setting == "n_symbols")
    for encoding in config.encodings:
        model = build_model(config, encoding)
        table = sum(p.numel() for name, p in model.named_parameters() if name.startswith("input_position"))
        counted = sum(p.numel() for p in model.parameters()) - table
        assert counted * 16 <= layers.n_bytes + vocabulary.n_bytes, encoding
