"""Reversed-digit addition and multiplication, and their Abacus and coupled position ids.

Expected values are worked by hand from the papers' formats (McLeish et al. 2024: operands
and answer least significant digit first; Cho et al. 2024: zero-padded operands and
answer), or read back with Python's integers (which have no 64-bit limit) from the
symbols; the position rules are re-implemented here from the reference code's
definitions (a digit's index in its run of digits; Cho et al.'s start + 1 + significance).
"""

import pytest
import torch

from attnlab.data.arithmetic import (
    DIGITS,
    EQUALS,
    OPERATORS,
    PLUS,
    SYMBOLS,
    TIMES,
    ReversedAddition,
    ReversedMultiplication,
    addition_strings,
    decode,
    encode,
    multiplication_strings,
)
from attnlab.data.arithmetic.numbering import coupled_positions, digit_positions
from attnlab.data.tasks.strings import StringGenerator, Strings


def gen(seed):
    return torch.Generator().manual_seed(seed)


def check(task, strings, n, length):
    """What check_strings checks, with the input width the task gives (2L + 2 for addition, not L)."""
    inputs, outputs, scored = strings
    assert inputs.dtype == torch.int64 and tuple(inputs.shape) == (n, task.input_length(length))
    assert outputs.dtype == torch.int64 and tuple(outputs.shape) == (n, task.output_length(length))
    assert 0 <= int(inputs.min()) and int(inputs.max()) < task.input_size
    assert 0 <= int(outputs.min()) and int(outputs.max()) < task.output_size
    assert scored is None


def read_back(text):
    """``"75+86="`` -> (57, 68, "+"): the operands of a reversed input, with Python ints."""
    op = "+" if "+" in text else "*"
    left, right = text.rstrip("=").split(op)
    return int(left[::-1]), int(right[::-1]), op


def number(digits_reversed):
    return int(decode(digits_reversed)[::-1])


# -- the alphabet --------------------------------------------------------------------------------


def test_alphabet():
    assert SYMBOLS == "0123456789+*=" and (PLUS, TIMES, EQUALS) == (10, 11, 12)
    assert DIGITS == tuple(range(10)) and OPERATORS == (10, 11, 12)
    assert encode("75+86=").tolist() == [7, 5, 10, 8, 6, 12]
    assert decode(encode("0123456789+*=")) == "0123456789+*="


def test_encode_and_decode_refuse_what_is_outside_the_alphabet():
    with pytest.raises(ValueError, match="alphabet"):
        encode("7-5")
    with pytest.raises(ValueError, match="outside 0..12"):
        decode([3, 13])


def test_both_tasks_are_string_generators():
    for task in (ReversedAddition(), ReversedMultiplication()):
        assert isinstance(task, StringGenerator)
        assert (task.input_size, task.output_size, task.shortest) == (13, 10, 1)
    assert ReversedAddition().name == "reversed-addition"
    assert ReversedMultiplication().name == "reversed-multiplication"


# -- hand-worked examples -------------------------------------------------------------------------


@pytest.mark.parametrize("a, b, inputs, outputs", [
    ("75", "86", "75+86=", "521"),      # 57 + 68 = 125
    ("99", "10", "99+10=", "001"),      # 99 + 1 = 100 (01 is 1, zero-padded to 2 digits)
    ("123", "000", "123+000=", "1230"),  # 321 + 0 = 321, the carry-out slot is 0
    ("9", "9", "9+9=", "81"),           # 9 + 9 = 18
    ("999", "999", "999+999=", "8991"),  # 999 + 999 = 1998
])
def test_addition_by_hand(a, b, inputs, outputs):
    s = addition_strings(encode(a)[None], encode(b)[None])
    assert isinstance(s, Strings) and s.scored is None
    assert decode(s.inputs[0]) == inputs and decode(s.outputs[0]) == outputs


@pytest.mark.parametrize("a, b, inputs, outputs", [
    ("321", "54", "321*54=", "53550"),    # 123 * 45 = 5535, padded to 3 + 2 digits
    ("99", "99", "99*99=", "1089"),       # 99 * 99 = 9801
    ("5", "7", "5*7=", "53"),             # 5 * 7 = 35
    ("1234", "0", "1234*0=", "00000"),    # 4321 * 0 = 0
    ("999", "999", "999*999=", "100899"),  # 999 * 999 = 998001
    ("27", "30", "27*30=", "6120"),       # 72 * 03 = 216 = 0216 in 4 digits
])
def test_multiplication_by_hand(a, b, inputs, outputs):
    s = multiplication_strings(encode(a)[None], encode(b)[None])
    assert decode(s.inputs[0]) == inputs and decode(s.outputs[0]) == outputs


def test_layouts_refuse_bad_operands():
    with pytest.raises(ValueError, match="one shape"):
        addition_strings(encode("12")[None], encode("123")[None])
    with pytest.raises(TypeError, match=r"\[N, W\]"):
        addition_strings(encode("12"), encode("12"))
    with pytest.raises(ValueError, match="0..9"):
        addition_strings(encode("1+")[None], encode("12")[None])
    with pytest.raises(ValueError, match="as many numbers"):
        multiplication_strings(encode("12")[None], torch.zeros(2, 1, dtype=torch.int64))


# -- random draws: invariants ----------------------------------------------------------------------


@pytest.mark.parametrize("length", range(1, 41))
def test_addition_sums_read_back(length):
    task = ReversedAddition()
    s = task.sample(12, length, generator=gen(length))
    check(task, s, 12, length)
    for row in range(12):
        text = decode(s.inputs[row])
        a, b, op = read_back(text)
        assert op == "+" and text.endswith("=") and text.count("+") == 1
        # Both operands take `length` digits (zero-padded); the longer one has exactly `length` of its own.
        assert len(text) == 2 * length + 2
        assert max(len(str(a)), len(str(b))) == length
        assert number(s.outputs[row]) == a + b


@pytest.mark.parametrize("length", range(1, 41))
@pytest.mark.parametrize("m", [1, 2, 3])
def test_multiplication_products_read_back(length, m):
    task = ReversedMultiplication(multiplier_digits=m)
    s = task.sample(6, length, generator=gen(100 * m + length))
    check(task, s, 6, length)
    for row in range(6):
        text = decode(s.inputs[row])
        a, b, op = read_back(text)
        assert op == "*" and len(text) == length + m + 2
        assert len(str(a)) == length  # the multiplicand has exactly `length` digits (0..9 at length 1)
        assert b < 10**m
        assert number(s.outputs[row]) == a * b


def test_addition_draws_cover_the_operand_lengths():
    """A fair coin picks the longer operand; the other's length is uniform over 1..length."""
    length, n = 6, 3000
    s = ReversedAddition().sample(n, length, generator=gen(0))
    pairs = [read_back(decode(row)) for row in s.inputs]
    # a has `length` digits when the coin picks it, or when the other draw is `length` too: 1/2 + 1/2 * 1/6.
    p = 0.5 + 0.5 / length
    a_longer = sum(len(str(a)) == length for a, _, _ in pairs)
    assert abs(a_longer - p * n) < 4 * (n * p * (1 - p)) ** 0.5
    shorter = [min(len(str(a)), len(str(b))) for a, b, _ in pairs]
    for d in range(1, length + 1):  # the shorter one's length is the uniform draw
        assert abs(shorter.count(d) - n / length) < 4 * (n / length * (1 - 1 / length)) ** 0.5


def test_equal_lengths_gives_both_operands_every_digit():
    length = 7
    s = ReversedAddition(equal_lengths=True).sample(200, length, generator=gen(4))
    for row in s.inputs:
        a, b, _ = read_back(decode(row))
        assert len(str(a)) == len(str(b)) == length
    with pytest.raises(TypeError, match="equal_lengths"):
        ReversedAddition(equal_lengths=1)


def test_answer_digits_below_the_top_are_uniform():
    """What chance() says: an input-blind guess of an interior answer digit is right 1 time in 10."""
    task = ReversedAddition()
    s = task.sample(4000, 8, generator=gen(1))
    interior = s.outputs[:, :6]  # significance 0..5: below the leading digit and the carry out
    for column in interior.T:
        freq = torch.bincount(column, minlength=10).double() / column.numel()
        assert float(freq.max()) < 0.12
    assert task.chance() == 0.1 and ReversedMultiplication().chance() == 0.1


def test_leading_digits_are_nonzero_and_one_digit_numbers_may_be_zero():
    s = ReversedMultiplication(multiplier_digits=1).sample(500, 1, generator=gen(2))
    assert set(s.inputs[:, 0].tolist()) == set(range(10))  # a one-digit number is 0..9
    s = ReversedMultiplication(multiplier_digits=1).sample(500, 4, generator=gen(3))
    assert int(s.inputs[:, 3].min()) >= 1  # the leading (last written) digit of a 4-digit number


def test_seeds_repeat_and_differ():
    for task in (ReversedAddition(), ReversedMultiplication()):
        one, two = task.sample(8, 7, generator=gen(5)), task.sample(8, 7, generator=gen(5))
        assert torch.equal(one.inputs, two.inputs) and torch.equal(one.outputs, two.outputs)
        other = task.sample(8, 7, generator=gen(6))
        assert not torch.equal(one.inputs, other.inputs)


def test_output_length_is_fixed_per_length():
    add, mul = ReversedAddition(), ReversedMultiplication(multiplier_digits=3)
    assert [add.output_length(n) for n in (1, 30)] == [2, 31]
    assert [add.input_length(n) for n in (1, 30)] == [4, 62]
    assert [mul.output_length(n) for n in (1, 30)] == [4, 33]
    assert [mul.input_length(n) for n in (1, 30)] == [6, 35]
    assert ReversedAddition().sample(0, 3, generator=gen(0)).inputs.shape == (0, 8)


def test_bad_samples_and_sizes():
    task = ReversedAddition()
    with pytest.raises(ValueError, match="length"):
        task.sample(2, 0, generator=gen(0))
    with pytest.raises(ValueError, match="n must be"):
        task.sample(-1, 3, generator=gen(0))
    with pytest.raises(TypeError, match="generator"):
        task.sample(2, 3, generator=0)
    with pytest.raises(ValueError, match="multiplier_digits"):
        ReversedMultiplication(multiplier_digits=4)
    with pytest.raises(ValueError, match="multiplier_digits"):
        ReversedMultiplication(multiplier_digits=0)
    with pytest.raises(TypeError, match="multiplier_digits"):
        ReversedMultiplication(multiplier_digits=2.0)


# -- positions -----------------------------------------------------------------------------------------


def test_abacus_positions_by_hand():
    # 57 + 68 = 125: each number's digits count 1, 2, ... from its first (units) digit.
    assert digit_positions(encode("75+86=521")[None]).tolist() == [[1, 2, 0, 1, 2, 0, 1, 2, 3]]
    # 123 * 45 = 5535, answer padded to 5 digits.
    assert digit_positions(encode("321*54=53550")[None]).tolist() == [[1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 5]]


def test_coupled_positions_by_hand():
    # Cho et al. at start 1: operators 1, the digit of significance i at i + 2.
    assert coupled_positions(encode("75+86=521")[None]).tolist() == [[2, 3, 1, 2, 3, 1, 2, 3, 4]]
    assert coupled_positions(encode("321*54=53550")[None]).tolist() == [[2, 3, 4, 1, 2, 3, 1, 2, 3, 4, 5, 6]]


def reference_coupled(a, b, answer):
    """Cho et al.'s ``AdditionDatasetWithCoupledPositions`` rule at ``start = 1``, reversed operands and answer.

    ``[BOS] a + b = answer [EOS]``: BOS and EOS 0, ``+`` and ``=`` at start, each
    operand's and the answer's digits at start + 1, start + 2, ...
    """
    start = 1
    a_pos = list(range(start + 1, start + 1 + len(a)))
    b_pos = list(range(start + 1, start + 1 + len(b)))
    answer_pos = list(range(start + 1, start + 1 + len(answer)))
    return [0] + a_pos + [start] + b_pos + [start] + answer_pos + [0]


def reference_abacus(tokens, digits):
    """McLeish et al.'s rule, one token at a time: 1 + the count of digits just before, 0 for a non-digit."""
    out, run = [], 0
    for t in tokens:
        run = run + 1 if t in digits else 0
        out.append(run)
    return out


def test_positions_in_a_lab_vocabulary_match_the_references():
    """The lab's ids (symbol + 3, PAD 0, BOS 1, EOS 2), the decoder-only layout, random draws."""
    pad, bos, eos, first = 0, 1, 2, 3
    digits = [first + d for d in range(10)]
    operators = [first + s for s in OPERATORS]
    task = ReversedAddition()
    for length in (1, 4, 9):
        s = task.sample(5, length, generator=gen(length))
        for row in range(5):
            text = decode(s.inputs[row])
            a, b = text[:-1].split("+")
            answer = decode(s.outputs[row])
            tokens = [bos] + (s.inputs[row] + first).tolist() + (s.outputs[row] + first).tolist() + [eos, pad, pad]
            seq = torch.tensor([tokens])
            got = coupled_positions(seq, digits=digits, operators=operators)[0].tolist()
            assert got == reference_coupled(a, b, answer) + [0, 0]
            assert digit_positions(seq, digits=digits)[0].tolist() == reference_abacus(tokens, set(digits))


def test_positions_depend_on_the_prefix_only():
    """An answer generated one digit at a time gets, at each step, the ids the whole sequence gives it."""
    s = ReversedAddition().sample(4, 6, generator=gen(9))
    seq = torch.cat([s.inputs, s.outputs], dim=1)  # [4, 14 + 7]
    full_abacus, full_coupled = digit_positions(seq), coupled_positions(seq)
    for end in range(1, seq.shape[1] + 1):
        assert torch.equal(digit_positions(seq[:, :end]), full_abacus[:, :end])
        assert torch.equal(coupled_positions(seq[:, :end]), full_coupled[:, :end])


def test_empty_slots_count_as_answer_digits():
    """The encoder-only layout: the answer's slots are one EMPTY id, numbered as the digits they stand for."""
    empty = 13
    seq = torch.cat([encode("75+86="), torch.full((3,), empty)])[None]  # 57 + 68 = ___
    assert digit_positions(seq, slots=[empty]).tolist() == [[1, 2, 0, 1, 2, 0, 1, 2, 3]]
    assert coupled_positions(seq, slots=(empty,)).tolist() == [[2, 3, 1, 2, 3, 1, 2, 3, 4]]
    assert digit_positions(seq).tolist() == [[1, 2, 0, 1, 2, 0, 0, 0, 0]]  # without: not digits


def test_positions_keep_the_device_and_take_tensors_of_ids():
    seq = encode("75+86=521")[None].int()
    out = coupled_positions(seq, digits=torch.arange(10), operators=torch.tensor([10, 12]))
    assert out.dtype == torch.int64 and out.tolist() == [[2, 3, 1, 2, 3, 1, 2, 3, 4]]
    assert digit_positions(torch.zeros(2, 0, dtype=torch.int64)).shape == (2, 0)


def test_positions_refuse_bad_sequences():
    with pytest.raises(ValueError, match=r"\[B, L\]"):
        digit_positions(encode("75+86="))
    with pytest.raises(TypeError, match="integer"):
        coupled_positions(torch.zeros(1, 3))
    with pytest.raises(TypeError, match="digits"):
        digit_positions(encode("75")[None], digits=["7"])
    with pytest.raises(TypeError, match="operators"):
        coupled_positions(encode("75")[None], operators=1.5)
