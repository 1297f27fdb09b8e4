"""SCAN (Lake & Baroni 2018), generated in process from its grammar: every command and its action sequence.

SCAN maps navigation commands to action sequences. Its grammar (Lake & Baroni
2018, "Generalization without systematicity", Fig. 6 and Table 1) is small
enough to enumerate::

    C -> S and S | S after S | S
    S -> V twice | V thrice | V
    V -> X opposite D | X around D | X D | U        (X: a verb or "turn"; D: left or right)
    U -> walk | look | run | jump

and its meaning is compositional:

* ``walk`` is ``I_WALK`` (look, run, jump likewise); ``turn left`` is ``I_TURN_LEFT``;
* ``x left`` turns first: ``walk left`` is ``I_TURN_LEFT I_WALK``;
* ``x opposite left`` turns twice first: ``I_TURN_LEFT I_TURN_LEFT I_WALK``;
* ``x around left`` turns and acts four times: ``(I_TURN_LEFT I_WALK) x 4``
  (``turn around left`` is four left turns);
* ``twice`` / ``thrice`` repeat; ``s1 and s2`` is ``s1`` then ``s2``; ``s1 after s2``
  is ``s2`` then ``s1``.

That gives 4 + 10 + 10 + 10 = 34 phrases ``V``, 102 phrases ``S`` and
102 + 2 * 102**2 = 20,910 commands, SCAN's count. The *length split* trains on
the 16,990 commands whose action sequence has at most 22 actions and tests on the
3,920 longer ones (24 to 48 actions; no command has 23).

Kazemnejad et al. 2023 (McGill-NLP/length-generalization) use a split of their own
(scripts/dataset_builders/make_scan_dataset.py, split ``len_tr25_ts48``): at most 25
actions in training (17,774 commands, of which a tenth is held out for validation)
and 26 to 48 in test (3,136): ``length_split(max_train_actions=25)``. Their
decoder-only sequence is ``"Solve: " + command + "[SEP] " + actions + EOS`` (the
``scan_bos`` processor of their final ``mdlen_tr25_ts48`` runs), with the actions
written as the words ``Walk Run Jump Look Left Right``
(:data:`KAZEMNEJAD_ACTION_WORDS`) and the whole sequence tokenised by T5's
sentencepiece vocabulary: commands and actions share one embedding table, but
the action words are capitalised, so the two use different tokens. The length lab's
:class:`~attnlab.data.scan.scan_task.ScanTask` writes ``Solve :`` before every command as
tokens of their own, and its ``BOS`` where they have ``[SEP]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

from attnlab._validate import check_int

__all__ = [
    "ACTIONS",
    "COMMANDS",
    "KAZEMNEJAD_ACTION_WORDS",
    "interpret",
    "length_split",
    "scan_pairs",
]

#: the command vocabulary: 13 words.
COMMANDS: tuple[str, ...] = (
    "walk", "look", "run", "jump", "turn", "left", "right",
    "opposite", "around", "twice", "thrice", "and", "after",
)  # fmt: skip

#: the action vocabulary: 6 actions.
ACTIONS: tuple[str, ...] = ("I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT")

#: how Kazemnejad et al. write each action (their ``scan`` instance processor's ``target_tokens_map``).
KAZEMNEJAD_ACTION_WORDS: dict[str, str] = {
    "I_WALK": "Walk", "I_RUN": "Run", "I_JUMP": "Jump", "I_LOOK": "Look",
    "I_TURN_LEFT": "Left", "I_TURN_RIGHT": "Right",
}  # fmt: skip

Words = tuple[str, ...]
Actions = tuple[str, ...]
Pair = tuple[Words, Actions]

_VERBS: dict[str, str] = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
_TURNS: dict[str, str] = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}
_REPEATS: dict[str, int] = {"twice": 2, "thrice": 3}
_CONJUNCTIONS = ("and", "after")


# -- enumeration: the grammar, bottom up -----------------------------------------------


def _phrases_v() -> Iterator[Pair]:
    """The 34 phrases ``V`` with their meanings, verbs first, then ``X D``, ``X opposite D``, ``X around D``."""
    for verb, action in _VERBS.items():
        yield (verb,), (action,)
    for x in (*_VERBS, "turn"):
        act: Actions = (_VERBS[x],) if x in _VERBS else ()  # "turn" only turns
        for direction, turn in _TURNS.items():
            yield (x, direction), (turn, *act)
            yield (x, "opposite", direction), (turn, turn, *act)
            yield (x, "around", direction), (turn, *act) * 4


def _phrases_s() -> list[Pair]:
    """The 102 phrases ``S``: each ``V`` alone, twice, thrice."""
    phrases = []
    for words, actions in _phrases_v():
        phrases.append((words, actions))
        for word, times in _REPEATS.items():
            phrases.append(((*words, word), actions * times))
    return phrases


@lru_cache(maxsize=1)
def scan_pairs() -> tuple[Pair, ...]:
    """Every SCAN command with its action sequence: 20,910 ``(command words, actions)`` pairs.

    The order is fixed: the 102 one-phrase commands, then ``s1 and s2`` for every
    ``(s1, s2)``, then ``s1 after s2``, each in the grammar's order (verbs before
    turns, left before right, once before twice before thrice). The result is
    built once (well under a second) and shared: it is a tuple of tuples.

    Returns:
        ``((("jump",), ("I_JUMP",)), ...)``: the command as a tuple of words, the
        actions as a tuple of action names.
    """
    phrases = _phrases_s()
    pairs: list[Pair] = list(phrases)
    for conjunction in _CONJUNCTIONS:
        for first, first_actions in phrases:
            for second, second_actions in phrases:
                # "s1 after s2" does s2 first.
                actions = first_actions + second_actions if conjunction == "and" else second_actions + first_actions
                pairs.append(((*first, conjunction, *second), actions))
    return tuple(pairs)


# -- interpretation: the semantics, top down ------------------------------------------


def _words(command: str | Sequence[str]) -> Words:
    if isinstance(command, str):
        return tuple(command.split())
    if isinstance(command, Sequence) and all(isinstance(w, str) for w in command):
        return tuple(command)
    raise TypeError(f"command must be a string or a sequence of words, got {command!r}")


def _interpret_v(words: Words, command: Words) -> Actions:
    if len(words) == 1 and words[0] in _VERBS:
        return (_VERBS[words[0]],)
    x, direction = (words[0], words[-1]) if 2 <= len(words) <= 3 else ("", "")
    if (x in _VERBS or x == "turn") and direction in _TURNS:
        act: Actions = (_VERBS[x],) if x in _VERBS else ()
        turn = _TURNS[direction]
        if len(words) == 2:
            return (turn, *act)
        if words[1] == "opposite":
            return (turn, turn, *act)
        if words[1] == "around":
            return (turn, *act) * 4
    raise ValueError(f"command {' '.join(command)!r} is not a SCAN command: {' '.join(words)!r} is not a phrase")


def _interpret_s(words: Words, command: Words) -> Actions:
    if words and words[-1] in _REPEATS:
        return _interpret_v(words[:-1], command) * _REPEATS[words[-1]]
    return _interpret_v(words, command)


def interpret(command: str | Sequence[str]) -> Actions:
    """The action sequence SCAN's semantics give ``command``.

    Example: ``interpret("jump twice after walk left")`` is
    ``("I_TURN_LEFT", "I_WALK", "I_JUMP", "I_JUMP")``.

    Args:
        command: the command, as one string of words or a sequence of words.

    Returns:
        The actions, a tuple of names from :data:`ACTIONS`.

    Raises:
        TypeError: if ``command`` is neither a string nor a sequence of strings.
        ValueError: if it is not a command of SCAN's grammar (naming it).
    """
    words = _words(command)
    joins = [i for i, w in enumerate(words) if w in _CONJUNCTIONS]
    if len(joins) > 1:
        raise ValueError(f"command {' '.join(words)!r} is not a SCAN command: it joins more than two phrases")
    if not joins:
        return _interpret_s(words, words)
    i = joins[0]
    first, second = _interpret_s(words[:i], words), _interpret_s(words[i + 1 :], words)
    return first + second if words[i] == "and" else second + first


def length_split(*, max_train_actions: int = 22) -> tuple[tuple[Pair, ...], tuple[Pair, ...]]:
    """SCAN's length split: the commands with at most ``max_train_actions`` actions train, the others test.

    Args:
        max_train_actions: the longest action sequence in training; 22 is SCAN's own
            split (16,990 / 3,920 commands), 25 Kazemnejad et al.'s (17,774 / 3,136).

    Returns:
        ``(train, test)``, each a tuple of ``(command words, actions)`` pairs in the
        order of :func:`scan_pairs`.

    Raises:
        TypeError: if ``max_train_actions`` is not an integer.
        ValueError: if it is below 1.
    """
    max_train_actions = check_int("max_train_actions", max_train_actions, minimum=1)
    pairs = scan_pairs()
    train = tuple(p for p in pairs if len(p[1]) <= max_train_actions)
    test = tuple(p for p in pairs if len(p[1]) > max_train_actions)
    return train, test
