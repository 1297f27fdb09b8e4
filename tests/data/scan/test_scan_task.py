"""SCAN's length split as a task of the length lab: its sets, batches by hand, decoding a command length at a time."""

import pytest
import torch

from attnlab.data import BOS, EOS, PAD, TaskSpec
from attnlab.data.scan.scan_task import ScanTask, scan_batch
from attnlab.data.tasks.layouts import decoder_only_batch

# -- SCAN ---------------------------------------------------------------------------------


def test_scan_sets_are_the_length_split():
    task = ScanTask()
    sets = task.sets(TaskSpec(task="scan", train_len=22, test_lens=(24, 48), n_train=10**6, n_test=10**6))
    assert sets.train.source.shape[0] == 16_990  # SCAN's own length split
    n_24, n_48 = (sets.tests[n].source.shape[0] for n in (24, 48))
    assert (sets.tests[48].target_out[:, :48] != PAD).all() and (sets.tests[48].target_out[:, 48] == EOS).all()
    assert n_24 > 0 and n_48 > 0
    kaz = task.sets(TaskSpec(task="scan", train_len=25, test_lens=(26,), n_train=10**6, n_test=8))
    assert kaz.train.source.shape[0] == 17_774 and kaz.tests[26].source.shape[0] == 8  # Kazemnejad et al.'s
    with pytest.raises(ValueError, match=r"test_lens \[23\]: SCAN has no command of that many actions"):
        task.sets(TaskSpec(task="scan", train_len=22, test_lens=(23,), n_train=8, n_test=8))


def test_scan_batch_by_hand():
    b = scan_batch([(("walk",), ("I_WALK",)), (("jump", "twice"), ("I_JUMP", "I_JUMP"))], prompt=False)
    # ids: 3 + the word's index in COMMANDS (walk 0, jump 3, twice 9), 3 + 13 + the action's (I_WALK 0, I_JUMP 3)
    assert b.source.tolist() == [[3, PAD], [6, 12]]
    assert b.target_out.tolist() == [[16, EOS, PAD], [19, 19, EOS]]
    assert b.lengths.tolist() == [1, 2]
    inputs, labels = decoder_only_batch(b)
    assert inputs[0].tolist() == [3, BOS, 16, PAD, PAD] and labels[0].tolist() == [PAD, 16, EOS, PAD, PAD]


def test_scan_test_sets_of_several_command_lengths_are_decoded_a_length_at_a_time():
    b = scan_batch([(("walk",), ("I_WALK",)), (("jump", "twice"), ("I_JUMP", "I_JUMP"))], prompt=False)
    prompts = []

    class Oracle(torch.nn.Module):  # answers with the target it is shown, to check the bookkeeping
        def generate(self, prompt, steps):
            prompts.append(prompt.tolist())
            return b.target_out[[0] if prompt.shape[1] == 2 else [1], :steps]

    pred = ScanTask().predict(Oracle(), b, "decoder-only")
    assert prompts == [[[3, BOS]], [[6, 12, BOS]]]  # every prompt ends in BOS, no padding inside
    assert torch.equal(pred, b.target_out)
    assert ScanTask().score(pred, b, "decoder-only")["sequence_accuracy"] == 1.0
