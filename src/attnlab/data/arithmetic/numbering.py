"""Position ids from the structure of an arithmetic string: Abacus (McLeish et al. 2024) and position coupling.

Both schemes number a digit by its significance instead of its place in the sequence,
so that the digits to be added line up (:mod:`attnlab.encodings.abacus`,
:mod:`attnlab.encodings.coupling`). The numbering is a function of the symbols
(:mod:`attnlab.data.arithmetic.alphabet`), so a task computes it for any layout, the
answer's slots included, and the model takes it as ``position_ids [B, L]``:

* :func:`digit_positions`: each digit's index in its own number, ``1, 2, ...`` from the
  number's first written (least significant) digit; 0 for every other token;
* :func:`coupled_positions`: digits of equal significance in the operands and the answer
  share an id (significance ``i`` is ``i + 2``), operators get 1, anything else 0.

Shape notation: ``B`` batch, ``L`` sequence length.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.data.arithmetic.alphabet import DIGITS, OPERATORS, encode  # noqa: F401  (encode: the examples use it)

__all__ = ["coupled_positions", "digit_positions", "task_positions"]


def _ids(name: str, ids: object) -> tuple[int, ...]:
    values = ids.tolist() if isinstance(ids, Tensor) else ids
    if isinstance(values, int):
        values = [values]
    if not isinstance(values, (list, tuple, range)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise TypeError(f"{name} must be token ids (ints), got {ids!r}")
    return tuple(values)


def _check_sequence(sequence: object) -> Tensor:
    if not isinstance(sequence, Tensor) or sequence.is_floating_point() or sequence.is_complex() \
            or sequence.dtype == torch.bool:
        what = sequence.dtype if isinstance(sequence, Tensor) else type(sequence).__name__
        raise TypeError(f"sequence must be integer symbols or token ids [B, L], got {what}")
    if sequence.dim() != 2:
        raise ValueError(f"sequence must be [B, L] (2 dims), got shape {list(sequence.shape)}")
    return sequence


def _member(sequence: Tensor, ids: tuple[int, ...]) -> Tensor:
    """bool ``[B, L]``: where ``sequence`` holds one of ``ids``."""
    return torch.isin(sequence, torch.tensor(ids, dtype=sequence.dtype, device=sequence.device))


def _index_in_run(is_digit: Tensor) -> Tensor:
    """int64 ``[B, L]``: ``1, 2, ...`` along each run of consecutive True, 0 elsewhere."""
    column = torch.arange(is_digit.shape[1], device=is_digit.device).expand(is_digit.shape)  # [B, L]
    # The latest column at or before each one that is not a digit (-1 if none): a run restarts after it.
    last_break = torch.where(is_digit, -1, column).cummax(dim=1).values  # [B, L]
    return torch.where(is_digit, column - last_break, 0)


def digit_positions(
    sequence: Tensor, *, digits: Sequence[int] | Tensor = DIGITS, slots: Sequence[int] | Tensor = ()
) -> Tensor:
    """Abacus position ids (McLeish et al. 2024): each digit's index in its number, 0 for every other token.

    A number is a run of consecutive digits; its first (least significant, digits being
    reversed) digit is 1, the next 2, and so on. The rule of ``Abacus.helper`` in
    github.com/mcleish7/arithmetic (``abacus.py``), without the training offset (that is
    :class:`attnlab.encodings.AbacusEmbedding`'s).

    Args:
        sequence: a laid-out sequence, int ``[B, L]``: symbols of this module's alphabet or
            a lab's token ids (input, separators and answer, padded or not).
        digits: the ids that are digits (this alphabet's 0 .. 9 by default; a lab that
            adds an offset to the symbols passes the shifted ids).
        slots: ids that stand for an answer digit not written yet (the encoder-only
            layout's empty slots): numbered as digits.

    Returns:
        int64 ``[B, L]``.

    Raises:
        TypeError / ValueError: for a sequence that is not integer ``[B, L]`` or ids that are not ints.

    Example:
        >>> digit_positions(encode("75+86=521")[None])
        tensor([[1, 2, 0, 1, 2, 0, 1, 2, 3]])
    """
    sequence = _check_sequence(sequence)
    counted = _ids("digits", digits) + _ids("slots", slots)
    return _index_in_run(_member(sequence, counted))


def coupled_positions(
    sequence: Tensor,
    *,
    digits: Sequence[int] | Tensor = DIGITS,
    operators: Sequence[int] | Tensor = OPERATORS,
    slots: Sequence[int] | Tensor = (),
) -> Tensor:
    """Position coupling's ids (Cho et al. 2024): digits of one significance share an id.

    The digit of significance ``i`` (``i``-th in its run, digits being reversed) gets
    ``i + 2`` in the operands and the answer alike, an operator or ``=`` gets 1, every
    other token (BOS, EOS, padding) 0: ``AdditionDatasetWithCoupledPositions`` of
    github.com/HanseulJo/position-coupling at its evaluation start (``start = 1``: the
    operators at ``start``, the digits from ``start + 1``), with its reversed operands
    (``reverse_input=True``, their ``pad_revall`` ablation; the main runs write the
    operands most significant first and number them from the right end, the same ids).
    The random start of training is :class:`attnlab.encodings.CoupledPositions`'.

    Args:
        sequence: a laid-out sequence, int ``[B, L]`` (symbols or a lab's token ids).
        digits: the ids that are digits.
        operators: the ids of ``+``, ``*`` and ``=``.
        slots: ids that stand for an answer digit not written yet: numbered as digits.

    Returns:
        int64 ``[B, L]``.

    Raises:
        TypeError / ValueError: for a sequence that is not integer ``[B, L]`` or ids that are not ints.

    Example:
        >>> coupled_positions(encode("75+86=521")[None])
        tensor([[2, 3, 1, 2, 3, 1, 2, 3, 4]])
    """
    sequence = _check_sequence(sequence)
    counted = _ids("digits", digits) + _ids("slots", slots)
    index = _index_in_run(_member(sequence, counted))  # [B, L]
    is_operator = _member(sequence, _ids("operators", operators))
    return torch.where(index > 0, index + 1, is_operator.long())


def task_positions(rule: str, sequence: Tensor, *, first_symbol: int = 0, slots: Sequence[int] = ()) -> Tensor:
    """The position ids of a laid-out sequence ``[B, L]`` by ``rule``: ``"abacus"`` or ``"coupling"``.

    Args:
        rule: :func:`digit_positions` (Abacus) or :func:`coupled_positions` (position coupling).
        sequence: token ids ``[B, L]``, where symbol ``s`` is id ``first_symbol + s``.
        first_symbol: the id of symbol 0 (the length lab's ``FIRST_SYMBOL``).
        slots: ids standing for answer digits not written yet (the encoder-only layout's empty slots).

    Raises:
        ValueError: for another rule.
    """
    digits = [first_symbol + d for d in DIGITS]
    if rule == "abacus":
        return digit_positions(sequence, digits=digits, slots=slots)
    if rule == "coupling":
        return coupled_positions(sequence, digits=digits, operators=[first_symbol + o for o in OPERATORS],
                                 slots=slots)
    raise ValueError(f"rule {rule!r}: the arithmetic tasks number their tokens by 'abacus' or 'coupling'")
