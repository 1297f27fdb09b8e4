"""Kazemnejad et al. 2023's tasks: hand-derived answers, invariants, chance levels, the paper's data table."""

import itertools
import math
from collections import Counter

import pytest
import torch

from attnlab.data.kazemnejad.mathematical import Addition
from attnlab.data.kazemnejad.splits import KAZEMNEJAD_DATA, KAZEMNEJAD_TASKS
from attnlab.data.scan.grammar import length_split
from attnlab.data.tasks.strings import StringGenerator, check_strings

NAMES = sorted(KAZEMNEJAD_TASKS)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def answer(name, rows, **kwargs):
    """The answers to the task's own inputs ``rows``, written with the task's prompt as ``sample`` writes them."""
    task = KAZEMNEJAD_TASKS[name](**kwargs)
    return task.answer(task.frame(torch.tensor(rows))).tolist()


def drawn(name, n, length, **kwargs):
    """The task's own inputs ``[N, L]`` of a sample (the prompt's words taken off)."""
    task = KAZEMNEJAD_TASKS[name](**kwargs)
    return task.unframe(task.sample(n, length, generator=gen()).inputs)


# -- the registry --------------------------------------------------------------------------


def test_registry_names():
    assert set(NAMES) == {
        "copy-random", "copy-repeat", "copy-repeat-change", "copy-random-2x", "copy-repeat-2x",
        "reverse-random", "reverse-random-2x", "reverse-copy", "addition", "kz-sort", "summation",
    }  # fmt: skip
    assert all(cls.name == name for name, cls in KAZEMNEJAD_TASKS.items())


@pytest.mark.parametrize("name", NAMES)
def test_every_task_is_a_string_generator(name):
    assert isinstance(KAZEMNEJAD_TASKS[name](), StringGenerator)


@pytest.mark.parametrize(
    ("name", "sizes"),
    [("copy-random", (100, 100)), ("copy-repeat", (6052, 6052)), ("copy-repeat-change", (78, 78)),
     ("copy-random-2x", (100, 101)), ("copy-repeat-2x", (6052, 6052)), ("reverse-random", (100, 100)),
     ("reverse-random-2x", (100, 101)), ("reverse-copy", (100, 101)), ("addition", (11, 11)),
     ("kz-sort", (50, 50)), ("summation", (10, 10))],
)  # fmt: skip
def test_alphabets_are_the_papers(name, sizes):
    task = KAZEMNEJAD_TASKS[name]()
    assert (task.body_size, task.output_size) == sizes
    # the prompt's words come after every input and output symbol, one symbol per distinct word
    assert task.first_word == max(sizes) and task.input_size == max(sizes) + len(task.template.words)
    bare = KAZEMNEJAD_TASKS[name](prompt=False)
    assert (bare.input_size, bare.output_size) == sizes


# -- samples: shapes, alphabets, seeds, answers ---------------------------------------------


@pytest.mark.parametrize("prompt", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_samples_keep_the_protocol_and_the_answers(name, prompt):
    task = KAZEMNEJAD_TASKS[name](prompt=prompt)
    for length in (task.shortest, task.train_lengths[-1], task.test_lengths[-1]):
        strings = check_strings(task, task.sample(64, length, generator=gen(1)), 64, length)
        # the output is a function of the input: what answer() gives on the inputs alone
        assert torch.equal(task.answer(strings.inputs), strings.outputs)
        again = task.sample(64, length, generator=gen(1))
        assert torch.equal(again.inputs, strings.inputs) and torch.equal(again.outputs, strings.outputs)
    other = task.sample(64, task.test_lengths[0], generator=gen(2))
    assert not torch.equal(other.inputs, task.sample(64, task.test_lengths[0], generator=gen(1)).inputs)


def test_hand_derived_copy_and_reverse():
    row = [[3, 1, 4]]
    assert answer("copy-random", row) == [[3, 1, 4]]
    assert answer("reverse-random", row) == [[4, 1, 3]]
    assert answer("copy-random-2x", row) == [[3, 1, 4, 100, 3, 1, 4]]  # [NEXT] is symbol 100
    assert answer("reverse-random-2x", row) == [[4, 1, 3, 100, 4, 1, 3]]
    assert answer("reverse-copy", row) == [[4, 1, 3, 100, 3, 1, 4]]
    assert answer("copy-repeat", [[7, 7, 7]]) == [[7, 7, 7]]
    assert answer("copy-repeat-2x", [[7, 7]]) == [[7, 7, 7, 7]]
    # "Replace 5 with 9 in 5 5 5" -> "9 9 9"
    assert answer("copy-repeat-change", [[5, 9, 5, 5, 5]]) == [[9, 9, 9]]


def test_repeated_tokens_and_distinct_replacements():
    inputs = drawn("copy-repeat", 200, 5)
    assert bool((inputs == inputs[:, :1]).all())
    assert len(set(inputs[:, 0].tolist())) > 150  # one token per row, from 6052
    rdc = drawn("copy-repeat-change", 500, 6)
    assert bool((rdc[:, 0] != rdc[:, 1]).all()) and bool((rdc[:, 2:] == rdc[:, :1]).all())
    random = drawn("copy-random", 500, 20)
    assert set(random.flatten().tolist()) == set(range(100))


def test_hand_derived_sort_and_summation():
    assert answer("kz-sort", [[3, 1, 4, 1, 5]]) == [[1, 1, 3, 4, 5]]
    assert answer("summation", [[9, 9, 9], [1, 2, 3]]) == [[7], [6]]  # 27 and 6, mod 10
    assert answer("summation", [[1, 2, 3, 4]]) == [[0]]
    digits = drawn("summation", 500, 9)
    assert set(digits.flatten().tolist()) == set(range(1, 10))


def add(text):
    """``"37+85"`` as addition symbols."""
    return [10 if c == "+" else int(c) for c in text]


def test_hand_derived_addition():
    task = Addition(prompt=False)
    strings = task.answer(torch.tensor([add("37+85")]))
    assert strings.tolist() == [[1, 2, 2, 10, 10]]  # 122, then the terminator '.', padded
    assert task.scored(strings).tolist() == [[True, True, True, True, False]]
    assert task.answer(torch.tensor([add("0+0")])).tolist() == [[0, 10, 10]]
    assert task.answer(torch.tensor([add("9+9")])).tolist() == [[1, 8, 10]]
    assert task.answer(torch.tensor([add("999+1")])).tolist() == [[1, 0, 0, 0, 10]]
    assert task.answer(torch.tensor([add("5+999")])).tolist() == [[1, 0, 0, 4, 10]]


def value(symbols):
    return int("".join(map(str, symbols)))


def test_addition_agrees_with_python_integers():
    task = Addition(prompt=False)
    for length in (3, 9, 33):
        strings = task.sample(300, length, generator=gen(length))
        rows = zip(strings.inputs.tolist(), strings.outputs.tolist(), strings.scored.tolist(), strict=True)
        for x, y, scored in rows:
            plus = x.index(10)
            total = str(value(x[:plus]) + value(x[plus + 1 :]))
            assert y == [int(c) for c in total] + [10] * (length - len(total))
            assert scored == [True] * (len(total) + 1) + [False] * (length - len(total) - 1)


def test_addition_operands_are_drawn_as_the_builder_draws_them():
    strings = Addition(prompt=False).sample(3000, 7, generator=gen())
    a_digits, starts = [], Counter()
    for x in strings.inputs.tolist():
        plus = x.index(10)
        a, b = x[:plus], x[plus + 1 :]
        a_digits.append(len(a))
        for number in (a, b):
            assert len(number) == 1 or number[0] != 0  # no leading zero, as randint(10**(k-1), 10**k)
            if len(number) == 1:
                starts[number[0]] += 1
    assert set(a_digits) == set(range(1, 6))  # 1 .. L - 2
    assert starts[0] > 0  # a one-digit operand may be 0 (the builder's low = 0)
    bin_ = Addition().sample_digits(50, 3, 12, generator=gen())
    check_strings(Addition(), bin_, 50, 16)
    body = Addition().unframe(bin_.inputs)  # [50, 16]
    assert bool((body[:, 3] == 10).all()) and bool((body[:, [0, 4]] != 0).all())


def test_addition_bins_are_the_papers():
    assert len(Addition.train_bins) == 64 and max(max(b) for b in Addition.train_bins) == 8
    assert len(Addition.test_bins) == 16 * 16 - 8 * 8 == 192
    assert all(9 <= max(b) <= 16 for b in Addition.test_bins)


# -- chance --------------------------------------------------------------------------------


def best_guess_accuracy(task, inputs, weights):
    """Enumerated: the best input-ignoring guess per output position, over the scored positions."""
    outputs = task.answer(task.frame(torch.tensor(inputs)))
    scored = task.scored(outputs)
    scored = torch.ones_like(outputs, dtype=torch.bool) if scored is None else scored
    w = torch.tensor(weights, dtype=torch.float64)
    right = 0.0
    for j in range(outputs.shape[1]):
        keep = scored[:, j]
        per_symbol = torch.zeros(task.output_size, dtype=torch.float64).index_add_(0, outputs[keep, j], w[keep])
        right += float(per_symbol.max())
    return right / float((scored.double() * w[:, None]).sum())


def test_chance_of_uniform_tokens_and_of_next():
    assert KAZEMNEJAD_TASKS["copy-random"]().chance() == pytest.approx(1 / 100)
    assert KAZEMNEJAD_TASKS["copy-repeat"]().chance() == pytest.approx(1 / 6052)
    # two symbols, L = 1: outputs "x NEXT x"; the guesser gets 1/2, 1, 1/2 of them
    assert KAZEMNEJAD_TASKS["reverse-copy"](vocab_size=2).chance(length=1) == pytest.approx(2 / 3)


def test_chance_of_sort_by_enumeration():
    task = KAZEMNEJAD_TASKS["kz-sort"](vocab_size=3)
    inputs = [list(p) for p in itertools.product(range(3), repeat=3)]
    assert task.chance(length=3) == pytest.approx(best_guess_accuracy(task, inputs, [1] * 27))
    assert KAZEMNEJAD_TASKS["kz-sort"]().chance(length=1) == pytest.approx(1 / 50)
    pairs = [list(p) for p in itertools.product(range(50), repeat=2)]
    task = KAZEMNEJAD_TASKS["kz-sort"]()
    assert task.chance(length=2) == pytest.approx(best_guess_accuracy(task, pairs, [1] * 2500))


def test_chance_of_summation_by_enumeration():
    task = KAZEMNEJAD_TASKS["summation"]()
    assert task.chance(length=1) == pytest.approx(1 / 9)
    inputs = [list(p) for p in itertools.product(range(1, 10), repeat=2)]
    assert task.chance(length=2) == pytest.approx(best_guess_accuracy(task, inputs, [1] * 81))


def test_chance_of_addition():
    task = Addition()
    # L = 3, a + b of two digits 0..9: position 0 is '1' when a + b >= 10 (45/100) or == 1 (2/100),
    # position 1 is '.' when a + b <= 9 (55/100), position 2 '.' (scored only when a + b >= 10): 1.47 / 2.45
    assert task.chance(length=3) == pytest.approx(1.47 / 2.45)
    # L = 5 by enumeration: (ka, kb) in (1, 3), (2, 2), (3, 1), each equally likely
    inputs, weights = [], []
    for ka in (1, 2, 3):
        kb = 4 - ka
        a_range = range(10) if ka == 1 else range(10 ** (ka - 1), 10**ka)
        b_range = range(10) if kb == 1 else range(10 ** (kb - 1), 10**kb)
        for a, b in itertools.product(a_range, b_range):
            inputs.append(add(f"{a}+{b}"))
            weights.append(1 / (3 * len(a_range) * len(b_range)))
    assert task.chance(length=5) == pytest.approx(best_guess_accuracy(task, inputs, weights))


@pytest.mark.parametrize("name", NAMES)
def test_default_chance_is_the_mean_over_the_test_lengths(name):
    task = KAZEMNEJAD_TASKS[name]()
    expected = sum(task.chance(length=n) for n in task.test_lengths) / len(task.test_lengths)
    assert task.chance() == pytest.approx(expected)
    assert 0 < task.chance() < 1


# -- the paper's data ------------------------------------------------------------------------


def builder_split(n_train, n_bins):
    """The builders' arithmetic: int(1.15 * n_train / n_bins) per bin, the first n_train train."""
    return int(1.15 * n_train / n_bins) * n_bins - n_train


def test_data_table_covers_every_task_and_scan():
    assert set(KAZEMNEJAD_DATA) == set(KAZEMNEJAD_TASKS) | {"scan"}
    assert all(split.task == name for name, split in KAZEMNEJAD_DATA.items())
    assert all(split.sources and split.dataset and split.split for split in KAZEMNEJAD_DATA.values())


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith(("copy", "reverse"))])
def test_primitive_splits(name):
    split, task = KAZEMNEJAD_DATA[name], KAZEMNEJAD_TASKS[name]()
    assert split.train_lengths == tuple(range(2, 21)) and split.test_lengths == tuple(range(21, 41))
    offset = 2 if name == "copy-repeat-change" else 0  # t and u precede the repeated tokens
    assert task.train_lengths == tuple(n + offset for n in split.train_lengths)
    assert task.test_lengths == tuple(n + offset for n in split.test_lengths)
    assert split.n_test == split.n_test_per_length * len(split.test_lengths) == 10_000
    if name == "copy-repeat-change":  # 78 * 77 ordered pairs at each of 19 lengths
        assert split.n_valid == 78 * 77 * 19 - split.n_train
    else:
        assert split.n_valid == builder_split(split.n_train, 19)
    assert split.vocab_size == task.body_size


def test_addition_split():
    split = KAZEMNEJAD_DATA["addition"]
    assert split.n_valid == builder_split(split.n_train, len(Addition.train_bins))
    assert split.n_test == int(10_000 / len(Addition.test_bins)) * len(Addition.test_bins)
    assert split.n_test_per_length == 52
    assert split.train_lengths == tuple(sorted({max(b) for b in Addition.train_bins}))
    assert split.test_lengths == tuple(sorted({max(b) for b in Addition.test_bins}))


def test_sort_and_summation_splits():
    for name in ("kz-sort", "summation"):
        split, task = KAZEMNEJAD_DATA[name], KAZEMNEJAD_TASKS[name]()
        assert split.test_lengths == task.test_lengths == tuple(range(9, 17))
        assert split.train_lengths == task.train_lengths and max(split.train_lengths) == 8
    assert KAZEMNEJAD_DATA["kz-sort"].vocab_size == KAZEMNEJAD_TASKS["kz-sort"]().body_size


def test_scan_split_matches_the_grammar():
    split = KAZEMNEJAD_DATA["scan"]
    train, test = length_split(max_train_actions=25)
    assert split.n_train + split.n_valid == len(train) and split.n_test == len(test)
    assert split.n_valid == len(train) // 10  # make_scan_dataset.py: train[: len(train) // 10]
    assert split.train_lengths == tuple(sorted({len(a) for _, a in train}))
    assert split.test_lengths == tuple(sorted({len(a) for _, a in test}))


# -- errors ----------------------------------------------------------------------------------


def test_bad_arguments_name_themselves():
    task = KAZEMNEJAD_TASKS["copy-random"]()
    with pytest.raises(ValueError, match="n must be positive"):
        task.sample(0, 3, generator=gen())
    with pytest.raises(ValueError, match="length"):
        KAZEMNEJAD_TASKS["copy-repeat-change"]().sample(2, 2, generator=gen())
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, 3, generator=0)
    with pytest.raises(ValueError, match="vocab_size"):
        KAZEMNEJAD_TASKS["kz-sort"](vocab_size=1)
    with pytest.raises(TypeError, match="int64"):
        task.answer(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="symbols 0..99"):
        task.answer(task.frame(torch.tensor([[100, 1]])))
    with pytest.raises(ValueError, match="symbols 0..99"):
        KAZEMNEJAD_TASKS["copy-random"](prompt=False).answer(torch.tensor([[100, 1]]))
    with pytest.raises(ValueError, match="framed by the prompt 'Copy: {x}'"):
        task.answer(torch.tensor([[1, 2, 3]]))  # no "Copy :" in front
    with pytest.raises(TypeError, match="prompt"):
        KAZEMNEJAD_TASKS["copy-random"](prompt=1)
    with pytest.raises(ValueError, match="length"):
        task.chance(length=0)
    with pytest.raises(ValueError, match="a_digits"):
        Addition().sample_digits(2, 0, 3, generator=gen())


@pytest.mark.parametrize("text", ["123", "+12", "12+", "1+2+3"])
def test_addition_refuses_what_is_not_a_sum(text):
    with pytest.raises(ValueError, match="one '\\+'"):
        Addition(prompt=False).answer(torch.tensor([add(text)]))


def test_chance_values_are_probabilities():
    for name in NAMES:
        task = KAZEMNEJAD_TASKS[name]()
        assert all(0 < task.chance(length=n) <= 1 for n in task.train_lengths[:3])
    assert math.isclose(KAZEMNEJAD_TASKS["summation"]().chance(length=1), 1 / 9)
