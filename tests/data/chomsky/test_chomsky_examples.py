"""Each Chomsky-hierarchy task on inputs written and answered by hand, from the tasks' definitions.

Inputs are written as text and turned into symbols here (each character's index
in the task's alphabet); every expected output was worked out by hand.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.data.chomsky import CHOMSKY_TASKS


def answer(name: str, text: str, alphabet: str) -> str:
    """The task's answer to one hand-written input, as text in the output alphabet ``"01234"``."""
    inputs = torch.tensor([[alphabet.index(c) for c in text]], dtype=torch.int64)
    return "".join(str(s) for s in CHOMSKY_TASKS[name]().answer(inputs)[0].tolist())


# --- regular -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("001110", "0"),   # 01 and 10: two unequal pairs
    ("0101001", "1"),  # 01 10 01 10 01: five
    ("1001", "0"),     # 10 and 01
    ("10", "1"),
    ("1", "0"),        # no pairs at all
])
def test_even_pairs(text: str, expected: str) -> None:
    assert answer("even-pairs", text, "01") == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("0110", "0"),     # "abba" with a = 0, b = 1: two b's
    ("1010100", "1"),
    ("01111", "0"),
    ("1", "1"),
])
def test_parity_check(text: str, expected: str) -> None:
    assert answer("parity-check", text, "01") == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("RLSLL", "3"),    # +1 -1 0 -1 -1 = -2 = 3 (mod 5)
    ("RRRL", "2"),
    ("RRRRR", "0"),    # once round the cycle
    ("L", "4"),
    ("S", "0"),
])
def test_cycle_navigation(text: str, expected: str) -> None:
    assert answer("cycle-navigation", text, "LSR") == expected  # 0 = left, 1 = stay, 2 = right


@pytest.mark.parametrize(("text", "expected"), [
    ("1+2*3", "2"),        # 1 + 6 = 7
    ("1-1-1", "4"),        # -1
    ("0*1+4*3-2", "0"),    # 0 + 12 - 2 = 10
    ("2-3*4", "0"),        # 2 - 12 = -10
    ("2-3*4+1", "1"),      # -9
    ("4*4*4", "4"),        # 64
    ("3", "3"),
    ("1+2*3_", "2"),       # an even length: the trailing blank changes nothing
    ("3_", "3"),
    ("2_3", "0"),          # a blank operator is +: 5
    ("_+3", "3"),          # a blank digit is 0
])
def test_modular_arithmetic(text: str, expected: str) -> None:
    assert answer("modular-arithmetic", text, "01234+-*_") == expected


def test_modular_arithmetic_refuses_an_operator_where_a_digit_belongs() -> None:
    with pytest.raises(ValueError, match="alternate"):
        answer("modular-arithmetic", "1++", "01234+-*_")


# --- deterministic context-free ------------------------------------------------------------------------

STACK = "01PZO"  # bits 0 and 1, then POP, PUSH 0 (Z), PUSH 1 (O): symbols 0..4


@pytest.mark.parametrize(("text", "expected"), [
    ("0110OPP", "11020000"),   # 0110, push 1, pop, pop: 011, popped top first
    ("110PPP", "2000000"),     # emptied
    ("1PPZ", "02000"),         # the second POP meets an empty stack and is ignored
    ("01ZO", "10102"),         # 01, push 0, push 1: 0101, popped 1010, then 2
    ("1", "12"),
])
def test_stack_manipulation(text: str, expected: str) -> None:
    assert answer("stack-manipulation", text, STACK) == expected


def test_stack_manipulation_scores_up_to_the_terminator() -> None:
    task = CHOMSKY_TASKS["stack-manipulation"]()
    outputs = torch.tensor([[1, 1, 0, 2, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0, 0, 0]])
    assert task.scored(outputs).long().tolist() == [[1, 1, 1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]]


@pytest.mark.parametrize(("text", "expected"), [("011010", "010110"), ("10", "01"), ("1", "1")])
def test_reverse_string(text: str, expected: str) -> None:
    assert answer("reverse-string", text, "01") == expected


MAB = "01234+-*()x"


@pytest.mark.parametrize(("text", "expected"), [
    ("((1-4)*-2)", "1"),      # (-3)(-2) = 6
    ("(3*4)", "2"),           # 12
    ("((2+3)*(4-1))", "0"),   # 5 * 3
    ("(1--3)", "4"),          # 1 + 3
    ("(2*-4)", "2"),          # -8
    ("-3", "2"), ("(-3)", "2"), ("(2)", "2"), ("4", "4"),
])
def test_modular_arithmetic_brackets(text: str, expected: str) -> None:
    assert answer("modular-arithmetic-brackets", text, MAB) == expected


@pytest.mark.parametrize("text", ["(1+2", "1+2", "(1+2+3)", "()", "(1+x)", "1)", "-(1)", "(12)"])
def test_modular_arithmetic_brackets_refuses_malformed_expressions(text: str) -> None:
    with pytest.raises(ValueError):
        answer("modular-arithmetic-brackets", text, MAB)


EQ = "01234+-()x="


@pytest.mark.parametrize(("text", "expected"), [
    ("((x-4)+2)=1", "3"),       # x - 2 = 1
    ("((1-x)-(3+2))=0", "1"),   # -4 - x = 0, x = -4
    ("(4-x)=1", "3"),
    ("-x=3", "2"),              # x = -3
    ("(-x)=1", "4"),
    ("x=3", "3"),
    ("00", "0"), ("0", "0"),    # below length 3 the reference answers 0
])
def test_solve_equation(text: str, expected: str) -> None:
    assert answer("solve-equation", text, EQ) == expected


@pytest.mark.parametrize("text", ["(1+2)=3", "x+1=2", "x=1=1", "(x-x)=0"])
def test_solve_equation_refuses_what_has_no_single_x(text: str) -> None:
    with pytest.raises(ValueError):
        answer("solve-equation", text, EQ)


# --- context-sensitive ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [("101", "101101"), ("1", "11"), ("0011", "00110011")])
def test_duplicate_string(text: str, expected: str) -> None:
    assert answer("duplicate-string", text, "01") == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("01100210", "1"),   # w = 0110; the hidden bit is w's second
    ("1011213", "0"),    # w = 101, then the padding symbol 3
    ("2010", "1"),       # w = 10, its first bit hidden in the first copy
    ("1", "1"),          # the reference's answer at length 1
])
def test_missing_duplicate(text: str, expected: str) -> None:
    assert answer("missing-duplicate", text, "0123")  # 2 hides a bit, 3 pads == expected


def test_missing_duplicate_needs_one_hidden_bit() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        answer("missing-duplicate", "2020", "0123")


@pytest.mark.parametrize(("text", "expected"), [
    ("00110101", "01110100"),  # 0-based odd indices (0 1 1 1), then even ones (0 1 0 0)
    ("011", "101"),
    ("1000", "0010"),
    ("1", "1"),
])
def test_odds_first(text: str, expected: str) -> None:
    assert answer("odds-first", text, "01") == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("001201101", "0101120000"),       # 4 + 22 = 26 = 01011 little-endian
    ("10012000001", "100101200000"),   # 9 + 32 = 41 = 100101
    ("121", "0120"),                   # 1 + 1 = 2
    ("0", "02"), ("01", "012"), ("10", "120"), ("00", "020"),  # below 3: the number itself
])
def test_binary_addition(text: str, expected: str) -> None:
    assert answer("binary-addition", text, "012") == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("001201101", "000110120"),        # 4 * 22 = 88 = 0001101 little-endian
    ("10012000001", "00000100120"),    # 9 * 32 = 288 = 000001001
    ("121", "120"),
    ("0", "2"), ("10", "02"), ("01", "02"),  # below 3 the reference answers 0s and the terminator
])
def test_binary_multiplication(text: str, expected: str) -> None:
    assert answer("binary-multiplication", text, "012") == expected


def test_binary_addition_scores_the_sum_and_its_terminator_only() -> None:
    task = CHOMSKY_TASKS["binary-addition"]()
    outputs = task.answer(torch.tensor([[0, 0, 1, 2, 0, 1, 1, 0, 1]]))  # 4 + 22, as above
    assert task.scored(outputs).long().tolist() == [[1, 1, 1, 1, 1, 1, 0, 0, 0, 0]]


@pytest.mark.parametrize("text", ["1212", "0001", "2011"])
def test_binary_operations_need_two_numbers_around_one_separator(text: str) -> None:
    for name in ("binary-addition", "binary-multiplication"):
        with pytest.raises(ValueError, match="two binary numbers"):
            answer(name, text, "012")


@pytest.mark.parametrize(("text", "expected"), [
    ("100101", "110"),      # 37 -> 6
    ("0111", "10"),         # 7 -> 2
    ("10000", "100"),       # 16 -> 4, in ceil(5 / 2) = 3 bits
    ("1111111111", "11111"),  # 1023 -> 31
    ("11", "1"), ("1", "1"),
])
def test_compute_sqrt(text: str, expected: str) -> None:
    assert answer("compute-sqrt", text, "01") == expected


@pytest.mark.parametrize(("text", "expected"), [("10204112", "00111224"), ("43210", "01234"), ("3", "3")])
def test_bucket_sort(text: str, expected: str) -> None:
    assert answer("bucket-sort", text, "01234") == expected
