"""Kazemnejad et al.'s constant prompt words in the lab's layout: token by token against the reference's text.

The expected sequences are the reference's own string templates (McGill-NLP/length-generalization
@40f8a44), copied here: the data instance processors' prompts and targets
(src/data/data_instance_processor/*_instance_processor.py), the separators
(``decoder_only_input_output_sep_token`` in configs/data/*.jsonnet) and the decoder-only
sample ``f"{prompt}{sep}{targets}{eos}"`` (src/data/s2s_dl_factory.py, lines 343-345). Each
text is cut into tokens by :func:`attnlab.data.tasks.prompts.split_words`, ``[SEP]`` and ``</s>``
being tokens of their own (as they are special to the tokenizer, not words). The lab's row is
read back into words (its symbols named as the reference names them) and must equal it, with
the differences the modules document written out here one by one.
"""

import pytest
import torch

from attnlab.data import BOS, EOS, FIRST_SYMBOL, PAD
from attnlab.data.kazemnejad.splits import KAZEMNEJAD_TASKS
from attnlab.data.scan.grammar import ACTIONS, COMMANDS, KAZEMNEJAD_ACTION_WORDS, scan_pairs
from attnlab.data.scan.scan_task import LONGEST_COMMAND, ScanTask, scan_batch
from attnlab.data.tasks.layouts import decoder_only_batch, encoder_only_batch
from attnlab.data.tasks.prompts import Prompt, split_words
from attnlab.data.tasks.token_task import TokenTask
from attnlab.models import DecoderOnlyTransformer

NAMES = sorted(KAZEMNEJAD_TASKS)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def reference_tokens(sample):
    """The reference's decoder-only text as tokens: ``[SEP]`` and ``</s>`` are tokens of their own."""
    return list(split_words(sample.replace("[SEP]", " [SEP] ").replace("</s>", " </s> ")))


def number_to_string(number):
    """data_instance_processor.py, ``number_to_string``: digits separated by spaces."""
    return " ".join(str(number))


def lab_row(name, length, *, seed=0):
    """One example of ``name`` at ``length``, laid out for the decoder-only model: (task, body, answer, row ids)."""
    task = KAZEMNEJAD_TASKS[name]()
    batch = TokenTask(task).draw(1, length, generator=seed)
    S = batch.source.shape[1]
    row = [*batch.source[0].tolist(), BOS, *batch.target_out[0].tolist()]  # source, BOS, answer, EOS
    body = task.unframe(batch.source - FIRST_SYMBOL)[0].tolist()
    answer = (batch.target_out[0, :-1] - FIRST_SYMBOL).tolist()
    assert len(row) == S + 1 + batch.target_out.shape[1]
    return task, body, answer, row


def lab_words(task, row, *, name_in, name_out, bos):
    """The lab's row as words: the prompt's words, the task's symbols by ``name_in`` / ``name_out``, BOS and EOS."""
    words, answering = [], False
    for token in row:
        if token == BOS:
            words.append(bos)
            answering = True
        elif token == EOS:
            words.append("</s>")
        else:
            s = token - FIRST_SYMBOL
            if not answering and s >= task.first_word:
                words.append(task.template.words[s - task.first_word])
            else:
                words.append(name_out(s) if answering else name_in(s))
    return words


def tok(s):
    """A drawn token's name in the texts below (the builders draw sentencepiece pieces; any name serves)."""
    return f"tok{s}"


# -- the tokenisation rule and the Prompt ---------------------------------------------------


def test_split_words_splits_end_punctuation_and_keeps_brackets():
    assert split_words("Copy: a b ") == ("Copy", ":", "a", "b")
    assert split_words("[ a, b ].") == ("[", "a", ",", "b", "]", ".")
    assert split_words("Compute 1 2 ? ") == ("Compute", "1", "2", "?")
    assert split_words("[SEP] 5.") == ("[SEP]", "5", ".")
    with pytest.raises(TypeError, match="text"):
        split_words(3)


def test_a_prompt_frames_and_unframes_its_input():
    p = Prompt("Replace {t} with {u} in {x}", parts={"t": slice(0, 1), "u": slice(1, 2), "x": slice(2, None)})
    assert p.words == ("Replace", "with", "in") and p.fixed == 3 and p.width(5) == 8
    body = torch.tensor([[7, 8, 7, 7, 7], [1, 2, 1, 1, 1]])
    framed = p.frame(body, first_word=10)
    assert framed.tolist()[0] == [10, 7, 11, 8, 12, 7, 7, 7]
    assert torch.equal(p.unframe(framed, first_word=10), body)
    with pytest.raises(ValueError, match="framed by the prompt"):
        p.unframe(framed, first_word=11)
    with pytest.raises(ValueError, match="W >= 3"):
        p.unframe(framed[:, :2], first_word=10)
    words = Prompt("Sort the list [ {x} ]. The list is [")
    assert words.words == ("Sort", "the", "list", "[", "]", ".", "The", "is") and words.fixed == 10
    assert words.frame(torch.tensor([[0]]), first_word=5).tolist() == [[5, 6, 7, 8, 0, 9, 10, 11, 7, 12, 8]]


@pytest.mark.parametrize(
    ("template", "parts", "match"),
    [("{x}", None, "no words"), ("Copy: {y}", None, "field {y}"),
     ("A {u} {t}", {"t": slice(0, 1), "u": slice(1, None)}, "once, in order"),
     ("A {t}", {"t": slice(0, 1), "u": slice(1, None)}, "once, in order")],
)  # fmt: skip
def test_a_prompt_refuses_a_template_it_cannot_write(template, parts, match):
    with pytest.raises(ValueError, match=match):
        Prompt(template, parts=parts)


# -- every task against the reference's text ----------------------------------------------------


def primitive_target(name, src):
    """The builders' tgt_seq (make_copy_dataset.py, make_reverse_dataset.py) for the drawn tokens ``src``."""
    rev = src[::-1]
    return {
        "copy-random": src, "copy-repeat": src, "copy-random-2x": [*src, "[NEXT]", *src],
        "copy-repeat-2x": src * 2, "reverse-random": rev, "reverse-random-2x": [*rev, "[NEXT]", *rev],
        "reverse-copy": [*rev, "[NEXT]", *src],
    }[name]  # fmt: skip


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith(("copy", "reverse")) and n != "copy-repeat-change"])
def test_copy_and_reverse_read_as_the_reference_writes_them(name):
    task, body, answer, row = lab_row(name, 4)
    src = [tok(s) for s in body]
    src_str, tgt_str = " ".join(src), " ".join(primitive_target(name, src))
    # copy_instance_processor.py: prompt = f"Copy: {src_str} " (line 22) or f"Reverse: {src_str} " (line 40);
    # configs/data/s2s_copy.jsonnet, s2s_reverse.jsonnet: decoder_only_input_output_sep_token "[SEP] "
    prompt = f"Copy: {src_str} " if name.startswith("copy") else f"Reverse: {src_str} "
    expected = reference_tokens(f"{prompt}[SEP] {tgt_str}</s>")

    def name_out(s):
        return "[NEXT]" if s == getattr(task, "next_symbol", None) else tok(s)

    # the lab's BOS stands where the reference has [SEP]: the rows are the same token for token
    assert lab_words(task, row, name_in=tok, name_out=name_out, bos="[SEP]") == expected
    assert expected[:2] in (["Copy", ":"], ["Reverse", ":"])


def test_copy_repeat_change_reads_as_the_reference_writes_it():
    task, body, answer, row = lab_row("copy-repeat-change", 5)
    t, u = tok(body[0]), tok(body[1])
    src_str, tgt_str = " ".join([t] * 3), " ".join([u] * 3)
    # copy_instance_processor.py line 20: f'Replace {source_char} with {target_char} in {src_str} '
    expected = reference_tokens(f"Replace {t} with {u} in {src_str} [SEP] {tgt_str}</s>")
    assert lab_words(task, row, name_in=tok, name_out=tok, bos="[SEP]") == expected


def test_addition_reads_as_the_reference_writes_it():
    task, body, answer, row = lab_row("addition", 7, seed=3)
    plus = body.index(10)
    a, b = int("".join(map(str, body[:plus]))), int("".join(map(str, body[plus + 1:])))
    # addition_instance_processor.py line 53: f"Compute {number_to_string(num1)} + {number_to_string(num2)} ? ";
    # line 61: f"The answer is {number_to_string(answer)}."; s2s_addition.jsonnet: sep ''
    expected = reference_tokens(f"Compute {number_to_string(a)} + {number_to_string(b)} ? "
                                f"The answer is {number_to_string(a + b)}.</s>")
    # Documented differences: BOS after "The answer is" (the lab's answer marker), and the lab pads its
    # answer with more terminators (trained, not scored) before EOS.
    expected.insert(expected.index("is") + 1, "<bos>")
    words = lab_words(task, row, name_in=lambda s: "+" if s == 10 else str(s),
                      name_out=lambda s: "." if s == 10 else str(s), bos="<bos>")
    first_end = words.index(".", words.index("<bos>"))
    assert words[: first_end + 1] + ["</s>"] == expected
    assert set(words[first_end + 1: -1]) <= {"."} and words[-1] == "</s>"


def test_sort_reads_as_the_reference_writes_it():
    task, body, answer, row = lab_row("kz-sort", 5)
    src, tgt = [tok(s) for s in body], [tok(s) for s in sorted(body)]
    # sort_instance_processor.py line 56: f"Sort the following list [ {src_seq_str} ]. " with ", ".join;
    # line 65: f"The sorted list is [ {tgt_seq_str} ]."; s2s_sort.jsonnet: sep ''
    expected = reference_tokens(f"Sort the following list [ {', '.join(src)} ]. "
                                f"The sorted list is [ {', '.join(tgt)} ].</s>")
    # Documented differences: no commas, BOS after "The sorted list is [", EOS in place of the closing "].".
    expected = [w for w in expected if w != ","]
    assert expected[-3:] == ["]", ".", "</s>"]
    expected = expected[:-3] + ["</s>"]
    expected.insert(expected.index("is") + 2, "<bos>")
    assert lab_words(task, row, name_in=tok, name_out=tok, bos="<bos>") == expected


def test_summation_reads_as_the_reference_writes_it():
    task, body, answer, row = lab_row("summation", 6)
    # sum_instance_processor.py line 129: f"Compute: {values_seq_str} ." with " + ".join; line 137:
    # f"The answer is {number_to_string(answer)} ."; s2s_sum.jsonnet: sep "[SEP] ", modulo_factor 10
    values = " + ".join(map(str, body))
    expected = reference_tokens(f"Compute: {values} .[SEP] The answer is {number_to_string(sum(body) % 10)} .</s>")
    # Documented differences: no "+" between the digits, BOS after "The answer is", EOS for the closing ".".
    expected = [w for w in expected if w != "+"]
    assert expected[-2:] == [".", "</s>"]
    expected = expected[:-2] + ["</s>"]
    expected.insert(expected.index("is") + 1, "<bos>")
    assert lab_words(task, row, name_in=str, name_out=str, bos="<bos>") == expected


def test_scan_reads_as_the_reference_writes_it():
    command, actions = next(p for p in scan_pairs() if p[0] == ("jump", "twice", "after", "walk", "left"))
    batch = scan_batch([(command, actions)])
    vocab = {FIRST_SYMBOL + i: w for i, w in enumerate((*COMMANDS, *(KAZEMNEJAD_ACTION_WORDS[a] for a in ACTIONS)))}
    vocab |= {FIRST_SYMBOL + 19: "Solve", FIRST_SYMBOL + 20: ":", BOS: "[SEP]", EOS: "</s>"}
    row = [*batch.source[0].tolist(), BOS, *batch.target_out[0].tolist()]
    # scan_instance_processor.py: target_tokens_map (lines 14-21), f"Solve: {source}" (scan_bos, line 44);
    # configs/data/scan.jsonnet: sep "[SEP] " (processor scan_bos for the mdlen_ splits)
    target = " ".join(KAZEMNEJAD_ACTION_WORDS[a] for a in actions)
    expected = reference_tokens(f"Solve: {' '.join(command)}[SEP] {target}</s>")
    assert [vocab[t] for t in row] == expected
    assert expected[:2] == ["Solve", ":"] and expected[-1] == "</s>"


# -- lengths, vocabularies, the loss mask, decoding --------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_lengths_and_vocabulary_count_the_prompt(name):
    task = TokenTask(KAZEMNEJAD_TASKS[name]())
    bare = TokenTask(KAZEMNEJAD_TASKS[name](prompt=False))
    words = KAZEMNEJAD_TASKS[name].template.fixed
    assert words >= 2  # a fixed, non-empty run of tokens before the answer
    length = task.strings.train_lengths[-1]
    batch = task.draw(16, length, generator=0)
    M = task.target_length(length)
    assert batch.source.shape == (16, length + words) and bool((batch.lengths == length + words).all())
    width = length + words  # the prompt's words and the input
    assert task.sequence_length(length, "decoder-only") == decoder_only_batch(batch)[0].shape[1] == width + M + 1
    assert task.sequence_length(length, "encoder-only") == encoder_only_batch(batch)[0].shape[1] == width + M
    assert task.sequence_length(length, "decoder-only") == bare.sequence_length(length, "decoder-only") + words
    # every id the batch holds is in the model's vocabulary, and the prompt's words take ids no symbol has
    vocab = task.model_io()["vocab_size"]
    assert int(batch.source.max()) < vocab and int(batch.target_out.max()) < vocab
    assert vocab == bare.model_io()["vocab_size"] + len(task.strings.template.words)
    # every row starts with the same words
    items = task.strings.template.items
    lead = next(i for i, item in enumerate(items) if not isinstance(item, str))  # the words before the input
    assert lead >= 1 and bool((batch.source[:, :lead] == batch.source[:1, :lead]).all())


@pytest.mark.parametrize("name", ["copy-random", "reverse-random", "addition", "kz-sort", "summation"])
def test_the_loss_covers_the_answer_and_eos_only(name):
    task = TokenTask(KAZEMNEJAD_TASKS[name]())
    batch = task.draw(8, 5, generator=1, min_len=3)  # mixed lengths: rows of different widths
    inputs, labels = decoder_only_batch(batch)
    for i in range(8):
        S = int(batch.lengths[i])  # the prompt and the input
        T = int(batch.target_mask[i, 0].sum())  # the answer and EOS
        assert bool((labels[i, :S] == PAD).all())  # nothing to learn over the prompt and the input
        assert labels[i, S: S + T].tolist() == batch.target_out[i, :T].tolist()
        assert bool((labels[i, S + T:] == PAD).all())
        assert inputs[i, S] == BOS


def test_scan_lengths_vocabulary_and_loss_mask():
    task, bare = ScanTask(), ScanTask(prompt=False)
    assert task.sequence_length(48, "decoder-only") == 2 + LONGEST_COMMAND + 48 + 1
    assert task.sequence_length(48, "decoder-only") == bare.sequence_length(48, "decoder-only") + 2
    assert task.model_io()["vocab_size"] == FIRST_SYMBOL + 13 + 6 + 2 == bare.model_io()["vocab_size"] + 2
    pairs = [*(p for p in scan_pairs() if len(p[1]) == 48), max(scan_pairs(), key=lambda p: len(p[0]))]
    batch = scan_batch(pairs)
    inputs, labels = decoder_only_batch(batch)
    assert inputs.shape[1] <= task.sequence_length(48, "decoder-only")
    assert batch.source[:, :2].tolist() == [[22, 23]] * len(pairs)  # "Solve :" before every command
    for i, (command, actions) in enumerate(pairs):
        S = int(batch.lengths[i])
        assert S == 2 + len(command) and inputs[i, S] == BOS
        assert bool((labels[i, :S] == PAD).all())  # nothing to learn over the prompt and the command
        assert labels[i, S: S + len(actions) + 1].tolist() == batch.target_out[i, : len(actions) + 1].tolist()
    assert repr(bare) == "ScanTask(prompt=False)"
    with pytest.raises(TypeError, match="prompt"):
        ScanTask(prompt="yes")


class Reader(torch.nn.Module):
    """Answers copy-random from the prompt it is handed: checks the prompt and reads the tokens after "Copy :"."""

    def __init__(self, copy, seen):
        super().__init__()
        self.copy, self.seen = copy, seen

    def generate(self, prompt, steps):
        self.seen.append(prompt)
        assert bool((prompt[:, -1] == BOS).all())
        body = self.copy.unframe(prompt[:, :-1] - FIRST_SYMBOL) + FIRST_SYMBOL  # [N, L]: raises without the words
        return torch.cat([body, torch.full((body.shape[0], 1), EOS)], dim=1)[:, :steps]


def test_greedy_decoding_is_handed_the_prompt_and_reads_back():
    copy = KAZEMNEJAD_TASKS["copy-random"]()
    task = TokenTask(copy)
    batch = task.draw(6, 7, generator=2)
    seen = []
    pred = task.predict(Reader(copy, seen), batch, "decoder-only")
    assert seen[0].shape == (6, 2 + 7 + 1)  # "Copy :", the input, BOS
    assert seen[0][:, :2].tolist() == [[FIRST_SYMBOL + 100, FIRST_SYMBOL + 101]] * 6
    assert task.score(pred, batch, "decoder-only") == {"token_accuracy": 1.0, "sequence_accuracy": 1.0}


def test_a_nope_model_decodes_the_prompted_layout_as_its_own_greedy_loop():
    task = TokenTask(KAZEMNEJAD_TASKS["reverse-random"]())
    batch = task.draw(4, 5, generator=3)
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(vocab_size=task.model_io()["vocab_size"], d_model=16, n_heads=2, n_layers=1,
                                   position="none", max_len=task.sequence_length(5, "decoder-only")).eval()
    pred = task.predict(model, batch, "decoder-only")  # [4, 6]
    seq = decoder_only_batch(batch)[0][:, : 2 + 5 + 1]  # "Reverse :", the input, BOS
    with torch.no_grad():
        for _ in range(pred.shape[1]):  # greedy by hand: the whole sequence every step
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(pred, seq[:, 8:])
    # the prompt's words matter to a NoPE model: without them the same inputs give other logits
    bare = decoder_only_batch(TokenTask(KAZEMNEJAD_TASKS["reverse-random"](prompt=False)).draw(4, 5, generator=3))[0]
    with torch.no_grad():
        assert not torch.allclose(model(seq[:, :8])[:, -1], model(bare[:, :6])[:, -1])
