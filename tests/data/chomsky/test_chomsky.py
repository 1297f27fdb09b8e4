"""The 15 Chomsky-hierarchy tasks as a whole: registry, shapes, determinism, seeds, chance, bad arguments.

Hand-written examples of each task are in test_chomsky_examples.py; the
reference's sampling rules, re-implemented here independently, in
test_chomsky_sampling.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.data.chomsky import CHOMSKY_TASKS, LEVELS, ChomskyTask, decode, encode
from attnlab.data.tasks.strings import StringGenerator, check_strings

NAMES = list(CHOMSKY_TASKS)


def draw(name: str, n: int, length: int, seed: int = 0):
    return CHOMSKY_TASKS[name]().sample(n, length, generator=torch.Generator().manual_seed(seed))


def test_the_15_names_in_order_and_their_levels() -> None:
    assert NAMES == [
        "even-pairs", "modular-arithmetic", "parity-check", "cycle-navigation",
        "stack-manipulation", "reverse-string", "modular-arithmetic-brackets", "solve-equation",
        "duplicate-string", "missing-duplicate", "odds-first", "binary-addition",
        "binary-multiplication", "compute-sqrt", "bucket-sort",
    ]
    assert LEVELS == {"regular": tuple(NAMES[:4]), "dcf": tuple(NAMES[4:8]), "cs": tuple(NAMES[8:])}
    for level, names in LEVELS.items():
        assert all(CHOMSKY_TASKS[name].level == level for name in names)


# The reference's alphabets and output lengths (randomized_positional_encodings, tasks/*), at L = 7 and L = 40.
SIZES = {
    "even-pairs": (2, 2, 1, 1), "modular-arithmetic": (9, 5, 1, 1), "parity-check": (2, 2, 1, 1),
    "cycle-navigation": (3, 5, 1, 1), "stack-manipulation": (5, 3, 8, 41), "reverse-string": (2, 2, 7, 40),
    "modular-arithmetic-brackets": (11, 5, 1, 1), "solve-equation": (11, 5, 1, 1),
    "duplicate-string": (2, 2, 14, 80), "missing-duplicate": (4, 2, 1, 1), "odds-first": (2, 2, 7, 40),
    "binary-addition": (3, 3, 8, 41), "binary-multiplication": (3, 3, 7, 40), "compute-sqrt": (2, 2, 4, 20),
    "bucket-sort": (5, 5, 7, 40),
}


@pytest.mark.parametrize("name", NAMES)
def test_alphabets_output_lengths_and_protocol(name: str) -> None:
    task = CHOMSKY_TASKS[name]()
    assert isinstance(task, StringGenerator) and task.name == name and task.shortest == 1
    assert (task.input_size, task.output_size, task.output_length(7), task.output_length(40)) == SIZES[name]


@pytest.mark.parametrize("name", NAMES)
def test_shapes_and_alphabets_from_the_shortest_length_to_100(name: str) -> None:
    task = CHOMSKY_TASKS[name]()
    for length in (1, 2, 3, 4, 5, 6, 17, 100):
        strings = check_strings(task, draw(name, 8, length, seed=length), 8, length)
        if task.terminator is None:
            assert strings.scored is None
        else:  # scored up to and including the first terminator, which every answer has
            first = [row.index(task.terminator) for row in strings.outputs.tolist()]
            assert strings.scored.sum(1).tolist() == [f + 1 for f in first]
            assert all(row[:f + 1].all() for row, f in zip(strings.scored, first, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_the_output_is_a_function_of_the_input(name: str) -> None:
    # Short strings repeat often: across two seeds, equal inputs must have equal outputs.
    a, b = draw(name, 600, 6, seed=1), draw(name, 600, 6, seed=2)
    inputs, outputs = torch.cat([a.inputs, b.inputs]), torch.cat([a.outputs, b.outputs])
    seen: dict[tuple[int, ...], tuple[int, ...]] = {}
    for x, y in zip(inputs.tolist(), outputs.tolist(), strict=True):
        assert seen.setdefault(tuple(x), tuple(y)) == tuple(y)
    assert len(seen) < len(inputs)  # some input did come back
    task = CHOMSKY_TASKS[name]()
    assert torch.equal(task.answer(inputs), outputs)  # and answer() is what sample() pairs them with


@pytest.mark.parametrize("name", NAMES)
def test_a_seed_gives_the_same_strings_and_another_seed_others(name: str) -> None:
    first, again, other = draw(name, 16, 20, seed=3), draw(name, 16, 20, seed=3), draw(name, 16, 20, seed=4)
    for x, y in zip(first, again, strict=True):
        assert (x is None and y is None) or torch.equal(x, y)
    assert not torch.equal(first.inputs, other.inputs)


def test_sample_draws_from_the_generator_only() -> None:
    torch.manual_seed(0)
    before = torch.get_rng_state()
    draw("modular-arithmetic-brackets", 4, 12)
    draw("binary-addition", 4, 12)
    assert torch.equal(torch.get_rng_state(), before)


def best_constant_guess(name: str, n: int, length: int) -> float:
    """The token accuracy of the most frequent output symbol over the scored positions."""
    strings = draw(name, n, length, seed=11)
    scored = torch.ones_like(strings.outputs, dtype=torch.bool) if strings.scored is None else strings.scored
    counts = torch.bincount(strings.outputs[scored])
    return float(counts.max() / counts.sum())


# Single-class tasks need more strings for the same precision; the Python-drawn grammars are slower.
CHANCE_DRAWS = {"modular-arithmetic-brackets": (1500, 40), "solve-equation": (1500, 40)}


@pytest.mark.parametrize("name", NAMES)
def test_chance_is_the_best_constant_guess_at_a_test_length(name: str) -> None:
    task = CHOMSKY_TASKS[name]()
    n, length = CHANCE_DRAWS.get(name, (4000 if task.output_length(100) == 1 else 400, 100))
    measured = best_constant_guess(name, n, length)
    # MAB's share of 0 is 0.292 at L = 40 and 0.31 over the test lengths (see test_chomsky_sampling.py).
    tolerance = 0.045 if name == "modular-arithmetic-brackets" else 0.03
    assert abs(measured - task.chance()) < tolerance, (measured, task.chance())


def test_chance_at_the_short_lengths_where_the_answer_is_fixed() -> None:
    # The reference's special cases: one answer whatever the input.
    assert best_constant_guess("even-pairs", 50, 1) == 1.0
    assert best_constant_guess("solve-equation", 50, 2) == 1.0
    assert best_constant_guess("missing-duplicate", 50, 1) == 1.0
    assert best_constant_guess("binary-multiplication", 50, 1) == 1.0


def test_encode_and_decode_are_inverse() -> None:
    symbols = encode(["(1+2)", "-3*44"], "01234+-*()")
    assert symbols.tolist() == [[8, 1, 5, 2, 9], [6, 3, 7, 4, 4]]
    assert decode(symbols, "01234+-*()") == ["(1+2)", "-3*44"]
    with pytest.raises(ValueError, match="outside"):
        encode(["12a"], "012")
    with pytest.raises(ValueError, match="one length"):
        encode(["12", "1"], "012")


@pytest.mark.parametrize("name", ["even-pairs", "solve-equation", "binary-addition"])
def test_bad_arguments_are_named(name: str) -> None:
    task: ChomskyTask = CHOMSKY_TASKS[name]()
    g = torch.Generator()
    with pytest.raises(ValueError, match="length"):
        task.sample(2, 0, generator=g)
    with pytest.raises(ValueError, match="n must be positive"):
        task.sample(0, 3, generator=g)
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, 3, generator=np.random.default_rng(0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="length"):
        task.output_length(0)
    with pytest.raises(TypeError, match="int64"):
        task.answer(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"\[N, L\]"):
        task.answer(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="symbols"):
        task.answer(torch.full((1, 3), task.input_size))
