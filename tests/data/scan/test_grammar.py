"""SCAN: the grammar's commands, their meanings (Lake & Baroni 2018), and the length splits."""

from collections import Counter

import pytest

from attnlab.data.scan.grammar import ACTIONS, COMMANDS, KAZEMNEJAD_ACTION_WORDS, interpret, length_split, scan_pairs

L, R = "I_TURN_LEFT", "I_TURN_RIGHT"
WALK, LOOK, RUN, JUMP = "I_WALK", "I_LOOK", "I_RUN", "I_JUMP"


# -- counts ------------------------------------------------------------------------------


def test_scan_has_its_20910_distinct_commands():
    # The grammar by hand: V = 4 verbs + 10 "x d" + 10 "x opposite d" + 10 "x around d" = 34,
    # S = 3 * 34 = 102, C = S + S and S + S after S = 102 + 2 * 102**2.
    pairs = scan_pairs()
    assert len(pairs) == 102 + 2 * 102**2 == 20_910
    assert len({command for command, _ in pairs}) == 20_910


def test_scan_length_split_counts():
    train, test = length_split()
    assert (len(train), len(test)) == (16_990, 3_920)
    assert max(len(a) for _, a in train) == 22
    assert {len(a) for _, a in test} >= {24, 48} and min(len(a) for _, a in test) == 24
    assert not any(len(a) == 23 for _, a in scan_pairs())  # why SCAN's test starts at 24


def test_kazemnejad_split_at_25_actions():
    # make_scan_dataset.py: target_length > 25 goes to test; classic.jsonl logs 15,997 training
    # commands (after a tenth, 1,777, is held out) and 3,136 test commands.
    train, test = length_split(max_train_actions=25)
    assert (len(train), len(test)) == (15_997 + 1_777, 3_136)
    # classic.jsonl's per-length test scores: pred/test_acc_26, _27, _28, _30, _32, _33, _36, _40, _48.
    assert {len(a) for _, a in test} == {26, 27, 28, 30, 32, 33, 36, 40, 48}


def test_split_keeps_the_enumeration_order_and_loses_nothing():
    train, test = length_split(max_train_actions=10)
    assert sorted(train + test) == sorted(scan_pairs())
    order = {pair: i for i, pair in enumerate(scan_pairs())}
    assert [order[p] for p in train] == sorted(order[p] for p in train)


# -- meanings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "actions"),
    [
        # Lake & Baroni 2018, Table 1 / Fig. 1 and the semantics of their Fig. 6
        ("jump", (JUMP,)),
        ("jump left", (L, JUMP)),
        ("jump around right", (R, JUMP) * 4),
        ("turn left twice", (L, L)),
        ("jump thrice", (JUMP,) * 3),
        ("jump opposite left and walk thrice", (L, L, JUMP, WALK, WALK, WALK)),
        ("jump opposite left after walk around left", (L, WALK) * 4 + (L, L, JUMP)),
        ("jump twice after walk left", (L, WALK, JUMP, JUMP)),
        ("turn around right", (R,) * 4),
        ("turn opposite right", (R, R)),
        ("look opposite left thrice", (L, L, LOOK) * 3),
        ("run around left twice", (L, RUN) * 8),
        ("walk after run", (RUN, WALK)),
        ("walk and run", (WALK, RUN)),
    ],
)
def test_interpret_hand_derived(command, actions):
    assert interpret(command) == actions
    assert interpret(command.split()) == actions


def test_the_longest_command_has_48_actions():
    longest = max(scan_pairs(), key=lambda p: len(p[1]))
    assert len(longest[1]) == 48
    assert len(interpret("walk around left thrice and run around right thrice")) == 48


def test_enumeration_and_interpretation_agree_on_every_command():
    # Two code paths: the grammar built bottom up, the semantics parsed top down.
    assert all(interpret(command) == actions for command, actions in scan_pairs())


def test_vocabularies():
    pairs = scan_pairs()
    assert Counter(w for c, _ in pairs for w in c).keys() == set(COMMANDS)
    assert {a for _, acts in pairs for a in acts} == set(ACTIONS)
    assert len(COMMANDS) == 13 and len(ACTIONS) == 6
    assert set(KAZEMNEJAD_ACTION_WORDS) == set(ACTIONS)


def test_order_is_fixed():
    assert scan_pairs() is scan_pairs()
    assert scan_pairs()[:2] == ((("walk",), (WALK,)), (("walk", "twice"), (WALK, WALK)))
    assert scan_pairs()[102][0] == ("walk", "and", "walk")
    last = ("turn", "around", "right", "thrice")
    assert scan_pairs()[-1] == ((*last, "after", *last), (R,) * 24)


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["turn", "walk twice twice", "left walk", "walk and run and jump", "walk opposite", "jump after",
     "turn around", "walk left right", "fly", ""],
)  # fmt: skip
def test_interpret_refuses_what_the_grammar_cannot_say(command):
    with pytest.raises(ValueError, match="not a SCAN command"):
        interpret(command)


def test_interpret_and_split_refuse_bad_types():
    with pytest.raises(TypeError, match="command"):
        interpret(3)
    with pytest.raises(TypeError, match="max_train_actions"):
        length_split(max_train_actions=22.5)
    with pytest.raises(ValueError, match="max_train_actions"):
        length_split(max_train_actions=0)
