"""The token ids and the vocabulary; strings as batches of ids."""


import pytest
import torch

from attnlab.data import (
    BOS,
    EOS,
    FIRST_SYMBOL,
    PAD,
    Vocab,
)
from attnlab.data.tasks.strings import Strings
from attnlab.data.tasks.tokens import strings_batch

# -- vocabulary ----------------------------------------------------------------------


def test_vocab_ids():
    assert (PAD, BOS, EOS, FIRST_SYMBOL) == (0, 1, 2, 3)
    vocab = Vocab()
    assert vocab.size == 13 and list(vocab.symbols) == list(range(3, 13))
    assert Vocab(2).size == 5
    assert vocab.format(torch.tensor([1, 7, 3, 2, 0])) == "<bos> 7 3 <eos> <pad>"


@pytest.mark.parametrize(("value", "error"), [(1, ValueError), (0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_vocab_needs_two_symbols(value, error):
    with pytest.raises(error, match=f"n_symbols must .*got {value}"):
        Vocab(value)


# -- strings as ids -------------------------------------------------------------------

def test_strings_become_ids_past_the_special_tokens_with_eos():
    strings = Strings(torch.tensor([[0, 1, 1]]), torch.tensor([[1, 0]]), torch.tensor([[True, False]]))
    b = strings_batch(strings)
    assert b.source.tolist() == [[3, 4, 4]]
    assert b.target_in.tolist() == [[BOS, 4, 3]] and b.target_out.tolist() == [[4, 3, EOS]]
    assert b.scored.tolist() == [[True, False, True]]  # the generator's mask, EOS always scored
