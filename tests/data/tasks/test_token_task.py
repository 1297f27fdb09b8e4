"""A string generator as the lab's one token task: ids, padding, the accuracy mask, sizes, chance, positions."""

import subprocess
import sys

import pytest
import torch

from attnlab.data import EOS, FIRST_SYMBOL, PAD, make_task_batch
from attnlab.data.tasks.layouts import EMPTY, decoder_only_batch, encoder_only_batch
from attnlab.data.tasks.registry import task_named
from attnlab.data.tasks.strings import Strings
from attnlab.data.tasks.token_task import TokenTask


def test_the_accuracy_mask_leaves_unscored_positions_out():
    # binary addition pads its answer after the terminator: trained on, not scored (the reference's accuracy_mask)
    task = task_named("binary-addition")
    batch = task.draw(32, 9, generator=0)
    assert not bool(batch.scored.all())  # some answers are shorter than the padded width
    wrong = batch.target_out.clone()
    wrong[~batch.scored] = FIRST_SYMBOL + 1  # every unscored position wrong ...
    scores = task.score(wrong, batch, "decoder-only")
    assert scores["token_accuracy"] == 1.0 and scores["sequence_accuracy"] == 1.0  # ... and nothing lost
    wrong[0, 0] = PAD
    assert task.score(wrong, batch, "decoder-only")["sequence_accuracy"] == pytest.approx(31 / 32)
    # the encoder-only layout scores its slots the same way
    slots = encoder_only_batch(batch)[1][:, 9:]
    assert task.score(slots, batch, "encoder-only")["token_accuracy"] == 1.0


def test_mixed_lengths_are_right_padded_rows_of_their_own_answers():
    task = task_named("reverse-string")
    b = task.draw(40, 7, min_len=2, generator=1)
    assert sorted(set(b.lengths.tolist())) != [7] and int(b.lengths.min()) >= 2
    for i, n in enumerate(b.lengths.tolist()):
        row = b.source[i, :n]
        assert bool((b.source[i, n:] == PAD).all()) and bool(b.source_mask[i, 0, :n].all())
        assert torch.equal(b.target_out[i, :n], row.flip(0)) and b.target_out[i, n] == EOS
        assert bool((b.target_out[i, n + 1:] == PAD).all())


def test_vocabulary_sequence_length_and_chance_follow_the_generator():
    parity = task_named("parity-check")
    assert parity.model_io() == {"vocab_size": FIRST_SYMBOL + 2, "n_features": None}
    assert parity.sequence_length(8, "encoder-only") == 9 and parity.sequence_length(8, "decoder-only") == 10
    assert parity.chance("token_accuracy", length=8) == 0.5
    addition = task_named("reversed-addition")  # a + b = over 2 * 10 + 2 symbols, 11 answer digits
    assert addition.sequence_length(10, "decoder-only") == 22 + 11 + 1
    assert addition.draw(3, 10, generator=0).source.shape == (3, 22)


def test_a_generator_that_breaks_its_promise_is_named():
    class Liar:
        name, input_size, output_size, shortest = "liar", 2, 2, 1

        def output_length(self, length):
            return length

        def sample(self, n, length, *, generator):
            return Strings(torch.zeros(n, length + 1, dtype=torch.int64), torch.zeros(n, length, dtype=torch.int64))

        def chance(self):
            return 0.5

    with pytest.raises(ValueError, match=r"task 'liar' at length 3: inputs are torch.int64 \(2, 4\)"):
        TokenTask(Liar()).draw(2, 3, generator=0)
    with pytest.raises(TypeError, match="StringGenerator"):
        TokenTask(object())


# -- positions from the task --------------------------------------------------------------


def test_the_arithmetic_tasks_number_their_digits_for_abacus_and_coupling():
    task = task_named("reversed-addition")
    b = task.draw(1, 2, generator=0)  # "a1 a0 + b1 b0 =" then 3 answer digits
    inputs = decoder_only_batch(b)[0]  # [1, 6 + 4]: source, BOS, answer, EOS
    abacus = task.positions(inputs, "abacus")
    assert abacus.tolist() == [[1, 2, 0, 1, 2, 0, 0, 1, 2, 3]]  # each digit's index in its number
    coupling = task.positions(inputs, "coupling")
    # digits of equal significance share an id (significance i -> i + 2), operators 1, BOS/EOS 0
    assert coupling.tolist() == [[2, 3, 1, 2, 3, 1, 0, 2, 3, 4]]
    slots = encoder_only_batch(b)[0]  # source and 3 EMPTY slots
    assert task.positions(slots, "abacus", slots=(EMPTY,)).tolist() == [[1, 2, 0, 1, 2, 0, 1, 2, 3]]
    with pytest.raises(ValueError, match="the copy task has none"):
        task_named("copy").positions(inputs, "abacus")


# -- one task class: tasks differ by their generator only ----------------------------------


def test_the_three_reverse_tasks_are_one_class_with_three_generators():
    from attnlab.data.chomsky.dcf import ReverseString
    from attnlab.data.kazemnejad.primitive import ReverseRandom
    from attnlab.data.tasks.basic import Reverse

    tasks = [task_named(name) for name in ("reverse", "reverse-string", "reverse-random")]
    assert [type(task) for task in tasks] == [TokenTask] * 3
    assert [type(task.strings) for task in tasks] == [Reverse, ReverseString, ReverseRandom]
    x = torch.tensor([[0, 1, 1, 0, 1], [1, 0, 0, 0, 1]])
    for strings in (Reverse(n_symbols=2), ReverseString(), ReverseRandom(prompt=False)):
        assert torch.equal(strings.answer(x), x.flip(1)), strings


@pytest.mark.parametrize("name", ["copy", "reverse", "duplicate", "sort"])
@pytest.mark.parametrize("min_len", [None, 2, 6])
def test_the_lab_tasks_draw_as_make_task_batch_does(name, min_len):
    # the task's draw and make_task_batch are one path: same generator state, same batch, field by field
    task = task_named(name)
    g = torch.Generator().manual_seed(5)
    drawn = task.draw(9, 6, min_len=min_len, n_symbols=4, generator=g)
    again = make_task_batch(name, 9, 6, min_len=min_len, n_symbols=4, generator=5)
    assert all(torch.equal(a, b) for a, b in zip(drawn, again, strict=True))
    assert ((drawn.source == PAD) | ((drawn.source >= FIRST_SYMBOL) & (drawn.source < FIRST_SYMBOL + 4))).all()


def test_the_lab_sizes_the_alphabet_of_its_own_tasks_only():
    copy, parity = task_named("copy"), task_named("parity-check")
    assert copy.model_io(4)["vocab_size"] == FIRST_SYMBOL + 4 and copy.model_io(10)["vocab_size"] == FIRST_SYMBOL + 10
    assert copy.chance("token_accuracy", n_symbols=4, length=3) == 0.25
    assert copy.chance("sequence_accuracy", n_symbols=4, length=3) == 0.25 ** 3
    assert copy.model_io()["vocab_size"] == FIRST_SYMBOL + 10  # None: the generator's own
    # a benchmark's alphabet is its own: a size given to it would be recorded and not used
    for call in (lambda: parity.model_io(4), lambda: parity.chance("token_accuracy", n_symbols=4, length=3),
                 lambda: parity.draw(2, 3, generator=0, n_symbols=4)):
        with pytest.raises(ValueError, match=r"^n_symbols 4: the parity-check task's vocabulary is fixed"):
            call()
    assert repr(copy) == "TokenTask(Copy(n_symbols=10))"


def test_a_generator_that_draws_mixed_lengths_at_once_is_asked_to():
    class Counted:
        name, input_size, output_size, shortest = "counted", 2, 2, 1
        asked: list[tuple[int, int, int | None]] = []

        def output_length(self, length):
            return length

        def sample(self, n, length, *, generator):
            x = torch.randint(0, 2, (n, length), generator=generator)
            return Strings(x, x.clone())

        def sample_mixed(self, n, length, *, min_len, generator):
            from attnlab.data.tasks.strings import PaddedStrings

            self.asked.append((n, length, min_len))
            x = torch.zeros(n, length, dtype=torch.int64)
            lengths = torch.full((n,), min_len)
            return PaddedStrings(x, x.clone(), lengths, lengths)

        def chance(self):
            return 0.5

    task = TokenTask(Counted())
    batch = task.draw(3, 5, min_len=2, generator=0)
    assert Counted.asked == [(3, 5, 2)]
    assert batch.lengths.tolist() == [2, 2, 2] and batch.target_out[0].tolist() == [3, 3, EOS, PAD, PAD, PAD]
    task.draw(3, 5, generator=0)  # one length: sample
    assert Counted.asked == [(3, 5, 2)]


@pytest.mark.process
def test_a_task_without_position_rules_refuses_them_and_the_framework_imports_no_family():
    code = ("import sys, torch; from attnlab.data.tasks import task_named\n"
            "task = task_named('copy'); batch = task.draw(2, 3, generator=0)\n"
            "try:\n    task.positions(batch.source, 'abacus')\nexcept ValueError as e:\n    print(e)\n"
            "print(sorted(m for m in sys.modules if m.startswith('attnlab.data.') and m.count('.') == 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    message, families = out.stdout.strip().splitlines()
    assert "the copy task has none" in message
    assert families == "['attnlab.data.squares', 'attnlab.data.tasks']"  # no chomsky, kazemnejad, scan, arithmetic
