"""Published setups of the length-generalisation literature, scaled to this lab, and their claims checked.

``attnlab compare --preset NAME`` starts from one of :data:`PRESETS`: the paper's
task, architecture, encodings and metric, with its sizes and training scaled down
to run on two CPU cores in the time the preset states (every setting can still be
overridden on the command line, and ``--quick`` scales it further). The report
then prints the paper's published claims beside the lab's numbers and says, claim
by claim, whether this run reproduced it (:func:`check_claims`).

* ``ruoss2023``: Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
  Generalization of Transformers" (ACL, arXiv:2305.16843; code:
  google-deepmind/randomized_positional_encodings). An encoder-only Transformer
  writes the answer into empty slots; binary strings; each scheme against its
  randomized version; masked per-token accuracy beyond the training length.
* ``kazemnejad2023``: Kazemnejad et al. 2023, "The Impact of Positional Encoding on
  Length Generalization in Transformers" (NeurIPS, arXiv:2305.19466; code:
  McGill-NLP/length-generalization). A decoder-only Transformer, NoPE against T5's
  bias, ALiBi, rotary and absolute sinusoids (their "APE": ``pe_abs_sin``); exact
  match of the whole answer beyond the training length.

Published numbers: the claims below are the papers' own words (abstract and
results sections). Their per-task tables are not reproduced cell by cell: the
papers' tables could not be consulted where this lab was written, and a number
typed from memory would be worse than none; :attr:`Preset.published` holds the
numbers that are known (with their source) and the report prints them where a
cell has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnlab._validate import check_choice

__all__ = ["PRESETS", "Claim", "Preset", "Verdict", "beyond_training", "check_claims", "preset"]


@dataclass(frozen=True)
class Verdict:
    """What one run says about one published claim.

    Attributes:
        claim: the claim, in the paper's terms.
        outcome: ``"reproduced"``, ``"not reproduced"`` (no clear difference),
            ``"contradicted"`` (the opposite, clearly) or ``"not tested"`` (this run
            lacks an encoding the claim needs).
        detail: the lab's numbers behind the outcome, in words.
    """

    claim: str
    outcome: str
    detail: str


@dataclass(frozen=True)
class Claim:
    """A published claim and the test of it on a run's records.

    Attributes:
        text: the claim, as the paper states it.
        source: where the paper states it.
        test: ``(records, config) -> (outcome, detail)`` (see :class:`Verdict`).
    """

    text: str
    source: str
    test: Callable[[list[dict[str, Any]], Any], tuple[str, str]]


@dataclass(frozen=True)
class Preset:
    """A paper's setup, as ``attnlab compare`` settings, with what was scaled and the claims to check.

    Attributes:
        name: the ``--preset`` name.
        paper: the citation.
        settings: :class:`~attnlab.labs.lengths.config.CompareConfig` fields (each overridable).
        quick: further overrides for ``--quick`` (under 5 minutes on 2 cores).
        paper_setup: the paper's own values of what was scaled, ``{what: value}``.
        scaled: what was scaled and by how much, in words.
        metric: the record field the paper's claims are about.
        claims: the claims :func:`check_claims` tests.
        published: known published values, ``{(task, encoding): value}`` (may be empty).
    """

    name: str
    paper: str
    settings: dict[str, Any]
    quick: dict[str, Any]
    paper_setup: dict[str, str]
    scaled: str
    metric: str
    claims: tuple[Claim, ...]
    published: dict[tuple[str, str], float] = field(default_factory=dict)


#: a difference in accuracy (0-1) below this is "no clear difference": about what separates seeds here
MARGIN = 0.02


def beyond_training(records: list[dict[str, Any]], config: Any, metric: str) -> dict[str, float]:
    """``{encoding: mean of metric}`` over the seeds and every test length above ``config.train_len``.

    Raises:
        ValueError: if no test length exceeds the training length (no claim about generalisation can be checked).
    """
    longer = [r for r in records if r["length"] > config.train_len]
    if not longer:
        raise ValueError(f"no test length exceeds train_len {config.train_len}: the claims are about longer sequences")
    sums: dict[str, list[float]] = {}
    for r in longer:
        sums.setdefault(r["encoding"], []).append(float(r[metric]))
    return {enc: sum(v) / len(v) for enc, v in sums.items()}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# -- Ruoss et al. 2023 -----------------------------------------------------------------

_RUOSS_PAIRS = ("sinusoidal", "learned", "relative", "rotary", "alibi", "t5", "fire")


def _ruoss_pairs(records: list[dict[str, Any]], config: Any) -> tuple[str, str]:
    scores = beyond_training(records, config, "token_accuracy")
    pairs = [(base, f"random-{base}") for base in _RUOSS_PAIRS if base in scores and f"random-{base}" in scores]
    if not pairs:
        return "not tested", "no encoding ran beside its randomized version"
    parts, wins, losses = [], 0, 0
    for base, rand in pairs:
        gain = scores[rand] - scores[base]
        wins += gain > MARGIN
        losses += gain < -MARGIN
        parts.append(f"{rand} {_pct(scores[rand])} vs {base} {_pct(scores[base])} ({100 * gain:+.1f} points)")
    if wins == len(pairs):
        outcome = "reproduced"
    elif losses > wins:
        outcome = "contradicted"
    else:
        outcome = "not reproduced" if wins == 0 else f"partly reproduced ({wins} of {len(pairs)} pairs)"
    return outcome, "; ".join(parts)


def _ruoss_average(records: list[dict[str, Any]], config: Any) -> tuple[str, str]:
    scores = beyond_training(records, config, "token_accuracy")
    gains = [scores[f"random-{b}"] - scores[b] for b in _RUOSS_PAIRS if b in scores and f"random-{b}" in scores]
    if not gains:
        return "not tested", "no encoding ran beside its randomized version"
    mean = sum(gains) / len(gains)
    detail = (f"mean gain {100 * mean:+.1f} points over {len(gains)} pair(s) on {config.task} "
              "(the paper: +12.0 points, averaged over 15 tasks and 5 schemes)")
    if mean >= 0.12 - MARGIN:
        return "reproduced", detail
    if mean > MARGIN:
        return "partly reproduced (the direction, not the size)", detail
    return ("contradicted" if mean < -MARGIN else "not reproduced"), detail


RUOSS2023 = Preset(
    name="ruoss2023",
    paper="Ruoss et al. 2023, Randomized Positional Encodings Boost Length Generalization of Transformers "
          "(ACL, arXiv:2305.16843)",
    settings={
        "task": "reverse", "architecture": "encoder-only", "n_symbols": 2,
        "encodings": ("none", "sinusoidal", "random-sinusoidal", "learned", "random-learned", "relative",
                      "random-relative", "rotary", "random-rotary", "alibi", "random-alibi"),
        "train_len": 16, "min_train_len": 1, "test_lens": (16, 24, 32, 48), "n_seeds": 3,
        "d_model": 64, "n_heads": 4, "n_layers": 2, "ff_units": 256, "lr": 1e-3,
        "batch_size": 64, "n_train": 16384, "epochs": 4, "n_test": 256, "l_max": 256,
        # The paper's relative encoding (Transformer-XL's) does not clip; Shaw's does, at k. Clipped at 8,
        # "relative" is length-invariant by construction and drawing distances up to L_max pushes almost every
        # offset past k, destroying local order (measured: random-relative 3.7 points below relative). Unclipped,
        # as in the paper, the baseline meets unseen distances and randomization helps (+6.3 at the quick size).
        "max_relative_position": 256,
    },
    quick={"n_seeds": 1, "train_len": 8, "test_lens": (8, 12, 16), "n_train": 16384, "epochs": 3, "n_test": 128,
           "l_max": 128, "max_relative_position": 128},
    paper_setup={"train lengths": "1-40", "test lengths": "41-500", "layers x width x heads": "5 x 64 x 8",
                 "steps x batch": "10,000 x 128", "L_max": "2048", "seeds": "10 (best reported)"},
    scaled="train lengths 1-16 (paper 1-40), tests at 16-48 (paper 41-500); 2 layers x 64 x 4 heads (paper 5 x 64 "
           "x 8); 1,024 steps of 64 (paper 10,000 x 128: about 1/20 of the examples); L_max 256 (paper 2048: about "
           "2 to 3 times the longest test sequence in both); Shaw's relative vectors unclipped up to L_max, as the "
           "paper's (Transformer-XL's) relative encoding; the mean and range over 3 seeds (the paper reports the "
           "best of 10 seeds and 3 learning rates)",
    metric="token_accuracy",
    claims=(
        Claim("Each randomized scheme generalises better than its baseline beyond the training length",
              "the main results table", _ruoss_pairs),
        Claim("Randomized positions increase test accuracy by 12.0% on average", "abstract", _ruoss_average),
    ),
)


# -- Kazemnejad et al. 2023 ------------------------------------------------------------

_EXPLICIT = ("t5", "alibi", "rotary", "sinusoidal")


def _kazemnejad_scores(records: list[dict[str, Any]], config: Any) -> dict[str, tuple[float, float]]:
    """Exact match first (the paper's metric), per-token accuracy to break ties (all zero beyond training)."""
    seq = beyond_training(records, config, "sequence_accuracy")
    tok = beyond_training(records, config, "token_accuracy")
    return {enc: (seq[enc], tok[enc]) for enc in seq}


def _describe(scores: dict[str, tuple[float, float]], names: tuple[str, ...]) -> str:
    return ", ".join(f"{n} {_pct(scores[n][0])} exact / {_pct(scores[n][1])} tokens" for n in names if n in scores)


def _nope_best(records: list[dict[str, Any]], config: Any) -> tuple[str, str]:
    scores = _kazemnejad_scores(records, config)
    others = [n for n in _EXPLICIT if n in scores]
    if "none" not in scores or not others:
        return "not tested", "needs none and at least one explicit encoding"
    detail = _describe(scores, ("none", *others))
    margins = [_gap(scores["none"], scores[n]) for n in others]
    if all(m > 0 for m in margins):
        return "reproduced", detail
    return ("contradicted" if all(m < 0 for m in margins) else "not reproduced"), detail


def _gap(a: tuple[float, float], b: tuple[float, float]) -> int:
    """+1 if ``a`` clearly beats ``b`` (exact match, then tokens), -1 if clearly worse, 0 if within the margin."""
    for x, y in zip(a, b, strict=True):
        if abs(x - y) > MARGIN:
            return 1 if x > y else -1
    return 0


def _t5_best_explicit(records: list[dict[str, Any]], config: Any) -> tuple[str, str]:
    scores = _kazemnejad_scores(records, config)
    others = [n for n in _EXPLICIT if n != "t5" and n in scores]
    if "t5" not in scores or not others:
        return "not tested", "needs t5 and another explicit encoding"
    detail = _describe(scores, ("t5", *others))
    margins = [_gap(scores["t5"], scores[n]) for n in others]
    if all(m > 0 for m in margins):
        return "reproduced", detail
    return ("contradicted" if all(m < 0 for m in margins) else "not reproduced"), detail


def _common_worst(records: list[dict[str, Any]], config: Any) -> tuple[str, str]:
    scores = _kazemnejad_scores(records, config)
    common = [n for n in ("alibi", "rotary", "sinusoidal") if n in scores]
    better = [n for n in ("none", "t5") if n in scores]
    if not common or not better:
        return "not tested", "needs none or t5 beside alibi, rotary or sinusoidal"
    detail = _describe(scores, (*better, *common))
    margins = [_gap(scores[b], scores[c]) for b in better for c in common]
    if all(m > 0 for m in margins):
        return "reproduced", detail
    return ("contradicted" if all(m < 0 for m in margins) else "not reproduced"), detail


KAZEMNEJAD2023 = Preset(
    name="kazemnejad2023",
    paper="Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization in Transformers "
          "(NeurIPS, arXiv:2305.19466)",
    settings={
        "task": "copy", "architecture": "decoder-only", "n_symbols": 10,
        "encodings": ("none", "t5", "alibi", "rotary", "sinusoidal"),
        "train_len": 20, "min_train_len": 1, "test_lens": (20, 25, 30, 35, 40), "n_seeds": 3,
        "d_model": 64, "n_heads": 4, "n_layers": 2, "ff_units": 256, "lr": 3e-3,
        "batch_size": 64, "n_train": 8192, "epochs": 16, "n_test": 256,
    },
    quick={"n_seeds": 1, "train_len": 10, "test_lens": (10, 15, 20), "n_train": 4096, "epochs": 16, "n_test": 128},
    paper_setup={"train lengths": "up to 20", "test lengths": "up to 40", "model": "decoder-only, ~107M parameters",
                 "seeds": "3"},
    scaled="the same lengths (train up to 20, tests to 40) and architecture; the model about 1000x smaller "
           "(2 layers x 64, about 0.1M parameters against the paper's ~107M); 2,048 steps of 64 (in which rotary "
           "learns copy at length 20 and NoPE does not yet); 10 symbols",
    metric="sequence_accuracy",
    claims=(
        Claim("NoPE outperforms the explicit positional encodings (T5's bias, ALiBi, rotary, APE)", "abstract",
              _nope_best),
        Claim("T5's relative bias is the best of the explicit encodings", "results", _t5_best_explicit),
        Claim("The most commonly used encodings (ALiBi, rotary, APE) are not suited for length generalization",
              "abstract", _common_worst),
    ),
)

#: the presets by name.
PRESETS: dict[str, Preset] = {p.name: p for p in (RUOSS2023, KAZEMNEJAD2023)}


def preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        ValueError: for an unknown name (listing the known ones).
    """
    return PRESETS[check_choice("preset", name, tuple(PRESETS))]


def check_claims(name: str, records: list[dict[str, Any]], config: Any) -> list[Verdict]:
    """The verdict of a run on each claim of preset ``name`` (``config``: the run's CompareConfig).

    Raises:
        ValueError: for an unknown preset, or a run with no test length above its training length.
    """
    return [Verdict(claim.text, *claim.test(records, config)) for claim in preset(name).claims]
