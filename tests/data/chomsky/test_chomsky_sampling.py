"""The Chomsky-hierarchy tasks' strings against the reference's rules, re-implemented here in plain Python.

The rules come from google-deepmind/randomized_positional_encodings (tasks/):
how each input is drawn, and what its answer is. Arithmetic is checked with
Python's own ``eval`` and big ints, the stack with a list.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from attnlab.data.chomsky import CHOMSKY_TASKS


def draw(name: str, n: int, length: int, seed: int = 0):
    return CHOMSKY_TASKS[name]().sample(n, length, generator=torch.Generator().manual_seed(seed))


def texts(symbols: torch.Tensor, alphabet: str) -> list[str]:
    return ["".join(alphabet[s] for s in row) for row in symbols.tolist()]


def test_the_simple_tasks_follow_their_definitions_at_length_100() -> None:
    for name, rule in {
        "even-pairs": lambda s: [sum(a != b for a, b in zip(s, s[1:], strict=False)) % 2],
        "parity-check": lambda s: [sum(s) % 2],
        "cycle-navigation": lambda s: [sum(x - 1 for x in s) % 5],
        "reverse-string": lambda s: s[::-1],
        "duplicate-string": lambda s: s + s,
        "odds-first": lambda s: s[1::2] + s[::2],
        "bucket-sort": sorted,
    }.items():
        strings = draw(name, 16, 100)
        assert [rule(s) for s in strings.inputs.tolist()] == strings.outputs.tolist(), name


@pytest.mark.parametrize("length", [1, 2, 3, 6, 7, 41, 100])
def test_modular_arithmetic_is_pythons_arithmetic_mod_5(length: int) -> None:
    strings = draw("modular-arithmetic", 64, length)
    for text, (value,) in zip(texts(strings.inputs, "01234+-*_"), strings.outputs.tolist(), strict=True):
        expression = text if length % 2 else text[:-1]  # the reference's L - 1 symbols, then a blank
        assert len(text) == length and "_" not in expression and (length % 2 or text[-1] == "_")
        assert all(c.isdigit() == (i % 2 == 0) for i, c in enumerate(expression))
        assert eval(expression) % 5 == value  # Python: * before + and -, as the reference


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 8, 30, 100])
def test_bracket_expressions_are_pythons_arithmetic_mod_5(length: int) -> None:
    strings = draw("modular-arithmetic-brackets", 48, length)
    for text, (value,) in zip(texts(strings.inputs, "01234+-*()x"), strings.outputs.tolist(), strict=True):
        assert len(text) == length and "x" not in text
        if length <= 4:  # the reference's short forms d, -d, (d), (-d)
            assert text.replace(text.strip("()-")[0], "d") == ["d", "-d", "(d)", "(-d)"][length - 1]
        assert eval(text) % 5 == value


def value_distributions(up_to: int) -> list[np.ndarray]:
    """P(value = v) for bracket expressions of each length, from the reference's recursion (index = length)."""
    add = np.add.outer(np.arange(5), np.arange(5)) % 5
    sub = np.subtract.outer(np.arange(5), np.arange(5)) % 5
    mul = np.multiply.outer(np.arange(5), np.arange(5)) % 5
    dist = [np.zeros(5)] + [np.full(5, 0.2)] * 4  # lengths 1..4: one uniform digit, maybe negated
    for length in range(5, up_to + 1):
        # left has 1 .. L - 4 characters, uniformly; right the rest; the pair's joint law summed over splits.
        left = np.array(dist[1 : length - 3])
        right = np.array(dist[length - 4 : 0 : -1])
        joint = left.T @ right / (length - 4)  # [5, 5]
        dist.append(sum(np.bincount(op.ravel(), joint.ravel(), minlength=5) for op in (add, sub, mul)) / 3)
    return dist


def test_bracket_values_favour_0_as_the_recursion_says_and_chance_is_its_test_range_mean() -> None:
    dist = value_distributions(500)
    assert dist[5][0] == pytest.approx(19 / 75)  # (d op d): 0 with probability (1/5 + 1/5 + 9/25) / 3
    outputs = draw("modular-arithmetic-brackets", 2000, 40, seed=5).outputs
    assert abs(float((outputs == 0).double().mean()) - dist[40][0]) < 0.03  # 0.292; sd 0.010
    assert all(d.argmax() == 0 for d in dist[5:])
    mean = float(np.mean([d.max() for d in dist[41:]]))  # Ruoss et al.'s test lengths
    assert CHOMSKY_TASKS["modular-arithmetic-brackets"]().chance() == pytest.approx(mean, abs=0.005)


@pytest.mark.parametrize("length", [3, 4, 7, 40])
def test_solve_equation_hides_one_digit_of_a_sum_and_difference_expression(length: int) -> None:
    strings = draw("solve-equation", 48, length)
    for text, (x,) in zip(texts(strings.inputs, "01234+-()x="), strings.outputs.tolist(), strict=True):
        left, right = text.split("=")
        assert len(text) == length and len(right) == 1 and left.count("x") == 1 and "*" not in left
        assert eval(left.replace("x", str(x))) % 5 == int(right)
        others = [v for v in range(5) if eval(left.replace("x", str(v))) % 5 == int(right)]
        assert others == [x]  # with + and - only, x is the one solution


@pytest.mark.parametrize("length", [1, 2, 9, 60])
def test_stack_manipulation_runs_the_instructions_on_the_given_stack(length: int) -> None:
    strings = draw("stack-manipulation", 200, length)
    sizes = Counter()
    for symbols, out in zip(strings.inputs.tolist(), strings.outputs.tolist(), strict=True):
        size = next((i for i, s in enumerate(symbols) if s >= 2), length)  # the initial stack: leading bits
        assert all(s >= 2 for s in symbols[size:])
        sizes[size] += 1
        stack = list(symbols[:size])
        for action in symbols[size:]:
            if action == 2:
                stack = stack[:-1]
            else:
                stack.append(action - 3)
        expected = stack[::-1] + [2]
        assert out == expected + [0] * (length + 1 - len(expected))
    if length > 1:  # the initial stack has 1 .. L - 1 bits
        assert set(sizes) <= set(range(1, length)) and (length > 10 or set(sizes) == set(range(1, length)))


def little_endian(bits: str) -> int:
    return int(bits[::-1], 2)


@pytest.mark.parametrize("length", [3, 4, 12, 500])
def test_binary_addition_and_multiplication_are_pythons(length: int) -> None:
    cases = (("binary-addition", int.__add__, length + 1), ("binary-multiplication", int.__mul__, length))
    for name, op, width in cases:
        strings = draw(name, 32, length)
        for text, out in zip(texts(strings.inputs, "012"), texts(strings.outputs, "012"), strict=True):
            n, m = text.split("2")
            assert n and m and int(n, 2) > 0 and int(m, 2) > 0  # each number is drawn from 1 .. 2**len - 1
            result = format(op(little_endian(n), little_endian(m)), "b")[::-1]
            assert out == result + "2" + "0" * (width - len(result) - 1)


def test_binary_operands_split_the_length_uniformly() -> None:
    strings = draw("binary-addition", 2000, 10)
    where = (strings.inputs == 2).long().argmax(1)  # the separator: after 1 .. L - 2 bits
    counts = torch.bincount(where, minlength=10).tolist()
    assert counts[0] == counts[9] == 0 and all(abs(c - 250) < 60 for c in counts[1:9])


def test_binary_operations_below_length_3_are_the_references() -> None:
    # np.random.randint(0, 2**L - 1): always 0 at L = 1, 0..2 (never 11) at L = 2.
    assert draw("binary-addition", 50, 1).inputs.unique().tolist() == [0]
    assert set(texts(draw("binary-addition", 200, 2).inputs, "01")) == {"00", "10", "01"}
    assert set(texts(draw("binary-multiplication", 200, 2).outputs, "012")) == {"02"}


@pytest.mark.parametrize("length", [1, 2, 7, 500])
def test_compute_sqrt_is_the_integer_square_root(length: int) -> None:
    strings = draw("compute-sqrt", 32, length)
    for text, out in zip(texts(strings.inputs, "01"), texts(strings.outputs, "01"), strict=True):
        number, root = int(text, 2), int(out, 2)
        assert number >= 1 and root * root <= number < (root + 1) ** 2 and len(out) == math.ceil(length / 2)


@pytest.mark.parametrize("length", [2, 6, 7])
def test_missing_duplicate_hides_one_bit_of_ww_anywhere(length: int) -> None:
    strings = draw("missing-duplicate", 600, length)
    half, hidden_at = length // 2, Counter()
    for text, (bit,) in zip(texts(strings.inputs, "0123"), strings.outputs.tolist(), strict=True):
        i = text.index("2")
        hidden_at[i] += 1
        full = text[:i] + str(bit) + text[i + 1 :]
        assert full[:half] == full[half : 2 * half] and full[2 * half :] == "3" * (length % 2)
    assert set(hidden_at) == set(range(2 * half))
