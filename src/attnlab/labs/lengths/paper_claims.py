"""The papers' claims as tests on cells, each aggregated over the tasks run the way its paper aggregates.

Each test takes :class:`~attnlab.labs.lengths.claims.Cell` s, one per task and encoding (a
suite's, a single comparison's, or a paper's own table), and returns ``(outcome, detail)``:

* :func:`ruoss_mean_gain`: Ruoss et al. 2023's abstract, randomized positions increase test
  accuracy "by 12.0% on average": the mean over every task and every scheme run beside its
  randomized version of the gain in token accuracy beyond training; the detail gives each pair.
* :func:`nope_best`, :func:`t5_best_explicit`, :func:`common_worst`: Kazemnejad et al. 2023 rank
  the encodings against each other on each task variant and report the mean reciprocal rank
  (their Figure 1: NoPE 0.69, T5 0.55, ALiBi 0.50, rotary 0.33, APE 0.22 over 17 variants); the
  text reads the ranking ("in most extrapolation scenarios T5's bias outperforms the other explicit
  encodings; ALiBi in the middle; APE and rotary poor"), so all three claims are read off the same
  MRR (:func:`mean_reciprocal_rank`).
* :func:`structure_best`: McLeish et al. and Cho et al. 2024: numbering digits by significance
  (Abacus, coupling) beats every scheme that numbers tokens by order, each encoding's numbers
  averaged over the tasks run.

A single comparison is a suite of one task: the aggregate is then over that task alone, and the
detail says so.

Competence before judgement. A model that did not learn a task in distribution (token accuracy at
the longest training length below :data:`~attnlab.labs.lengths.claims.COMPETENCE`) says nothing
about length generalisation, so the cells a claim rests on (its baselines) are checked first:

* Ruoss et al.: the scheme without randomization, in each pair. A pair whose baseline did not learn
  a task is left out of the mean (the randomized scheme is the claim's subject: its failing counts).
* Kazemnejad et al.: every encoding ranked. A task whose ranking lacks a learned cell of any ranked
  encoding is left out of the MRR, whole: dropping one encoding from a ranking would raise the others'
  ranks, and the paper's own MRR keeps only the variants every encoding ran.
* Abacus: every encoding compared. A cell that did not learn is left out of its encoding's mean.

What is left out is named in the detail; when nothing is left the outcome is ``"not tested (did not
learn: ...)"`` (or ``"not tested (competence unknown: ...)"`` where a run has no record at the training
length), naming the encodings, tasks and in-distribution accuracies, never "not reproduced". A
published cell counts as learned: the papers report their models' in-distribution accuracy as
(near) perfect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from attnlab.labs.lengths.claims import COMPETENCE, MARGIN, Cell, gap, pct

__all__ = ["COMMON", "EXPLICIT", "RANDOMIZABLE", "RANKED", "STRUCTURED", "common_worst", "mean_reciprocal_rank",
           "nope_best", "ruoss_mean_gain", "structure_best", "t5_best_explicit"]

#: the schemes Ruoss et al.'s randomization applies to here ("random-" + name is the randomized one)
RANDOMIZABLE = ("sinusoidal", "learned", "relative", "transformer-xl", "rotary", "alibi", "t5", "fire")
#: the lab's names of Kazemnejad et al.'s own versions of a scheme: their T5 bias is one table shared by all layers
PAPER_NAMES = {"t5-shared": "t5"}
#: the encodings Kazemnejad et al. rank (their rotary is the quarter rotary, "rotary-quarter" here)
RANKED = ("none", "t5", "alibi", "rotary", "rotary-quarter", "sinusoidal")
#: the explicit encodings among them
EXPLICIT = RANKED[1:]
#: "the most commonly used" ones (ALiBi, rotary, APE)
COMMON = ("alibi", "rotary", "rotary-quarter", "sinusoidal")
#: the schemes that number each digit by its significance
STRUCTURED = ("abacus", "coupling")

_RUOSS_HEADLINE = 0.12  # the abstract's mean gain, 12.0 points
_KAZEMNEJAD_MRR = "none 0.69, t5 0.55, alibi 0.50, rotary 0.33, sinusoidal (APE) 0.22 over 17 task variants"
_EPS = 1e-9  # two reciprocal ranks this close are equal (sums of the same fractions in another order)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _tasks(cells: list[Cell]) -> list[str]:
    """The tasks, in the cells' order."""
    return list(dict.fromkeys(c.task for c in cells))


def _scope(counted: list[str], run: list[str]) -> str:
    """Over what the aggregate is: the tasks ``counted`` of those ``run``."""
    if len(run) == 1:
        return f"on the one task run, {run[0]} (the paper aggregates over all its tasks)"
    if len(counted) < len(run):
        return f"over {len(counted)} of the {len(run)} tasks run ({', '.join(counted)})"
    return f"over {len(counted)} tasks ({', '.join(counted)})"


def _untested(dropped: list[Cell]) -> tuple[str, str]:
    """``"not tested (...)"``: every cell the claim rests on was left out for competence; the reasons, named."""
    failed = [c for c in dropped if c.learned() is False]
    unknown = [c for c in dropped if c.learned() is None]
    reasons = []
    if failed:
        reasons.append("did not learn: " + ", ".join(f"{c.encoding} on {c.task} {pct(c.trained or 0.0)}"
                                                    for c in failed) + " at the training length")
    if unknown:
        reasons.append("competence unknown: no record at the training length for "
                       + ", ".join(f"{c.encoding} on {c.task}" for c in unknown))
    return (f"not tested ({'; '.join(reasons)})",
            f"a claim is judged only on models that learned the task in distribution (token accuracy at the "
            f"training length at least {pct(COMPETENCE)}); none of those it rests on did")


def _left_out(dropped: list[Cell]) -> str:
    """``"; left out ..."`` naming the cells dropped for competence, or ``""``."""
    if not dropped:
        return ""
    named = ", ".join(f"{c.encoding} on {c.task} "
                      + ("(no record at the training length)" if c.trained is None else pct(c.trained))
                      for c in dropped)
    return f"; left out, not learned in distribution (token accuracy at the training length): {named}"


# -- Ruoss et al. 2023 -----------------------------------------------------------------


def _tokens(cell: Cell) -> float:
    if cell.tokens is None:
        raise ValueError(f"cell {cell.encoding} on {cell.task} has no token accuracy: Ruoss et al.'s metric")
    return cell.tokens


def ruoss_mean_gain(cells: list[Cell]) -> tuple[str, str]:
    """Randomized minus baseline token accuracy beyond training, averaged over every task and pair run.

    Reproduced at a mean gain within :data:`~attnlab.labs.lengths.claims.MARGIN` of the paper's
    +12.0 points or above; partly (the direction) above the margin; contradicted below minus it.
    """
    by = {(c.task, c.encoding): c for c in cells}
    tasks = _tasks(cells)
    pairs = [(by[t, b], by[t, f"random-{b}"]) for t in tasks for b in RANDOMIZABLE
             if (t, b) in by and (t, f"random-{b}") in by]
    if not pairs:
        return "not tested", "no encoding ran beside its randomized version"
    kept = [(base, rand) for base, rand in pairs if base.learned()]
    dropped = [base for base, _ in pairs if not base.learned()]
    if not kept:
        return _untested(dropped)
    gains = [_tokens(rand) - _tokens(base) for base, rand in kept]
    mean = _mean(gains)
    kept_tasks = _tasks([base for base, _ in kept])
    if len(kept_tasks) == 1:  # one task: each pair's numbers
        parts = [f"{rand.encoding} {pct(_tokens(rand))} vs {base.encoding} {pct(_tokens(base))} "
                 f"({100 * (_tokens(rand) - _tokens(base)):+.1f} points)" for base, rand in kept]
    else:  # several: each scheme's mean gain over the tasks, then per task
        parts = []
        for name in dict.fromkeys(base.encoding for base, _ in kept):
            mine = [(base.task, _tokens(rand) - _tokens(base)) for base, rand in kept if base.encoding == name]
            parts.append(f"random-{name} vs {name} {100 * _mean([g for _, g in mine]):+.1f} points ("
                         + ", ".join(f"{t} {100 * g:+.1f}" for t, g in mine) + ")")
    detail = (f"mean gain {100 * mean:+.1f} points over {len(gains)} pair(s) {_scope(kept_tasks, tasks)}: "
              + "; ".join(parts) + _left_out(dropped)
              + f"; the paper: +{100 * _RUOSS_HEADLINE:.1f} points on average over its 15 tasks")
    if mean >= _RUOSS_HEADLINE - MARGIN:
        return "reproduced", detail
    if mean > MARGIN:
        return "partly reproduced (the direction, not the size)", detail
    return ("contradicted" if mean < -MARGIN else "not reproduced"), detail


# -- Kazemnejad et al. 2023 ------------------------------------------------------------


def mean_reciprocal_rank(cells: list[Cell]) -> tuple[dict[str, float], dict[str, str], list[Cell]]:
    """Each ranked encoding's mean reciprocal rank over the tasks, as Kazemnejad et al.'s Figure 1.

    On each task the encodings of :data:`RANKED` that the cells hold anywhere are ranked by
    exact match beyond training, token accuracy breaking its ties (:meth:`Cell.key`); cells
    still equal share the mean of the reciprocal ranks they span (what the paper's tie-break,
    the order of listing, gives on average). A task counts only where every ranked encoding
    has a cell that learned it.

    Returns:
        ``({encoding: MRR}`` (empty if no task counts), ``{task: "t5 > none = alibi > ..."}`` for the
        tasks counted, the cells left out because their model did not learn the task).
    """
    ranked = [e for e in RANKED if any(c.encoding == e for c in cells)]
    by = {(c.task, c.encoding): c for c in cells}
    reciprocal: dict[str, list[float]] = {e: [] for e in ranked}
    orders: dict[str, str] = {}
    dropped: list[Cell] = []
    for task in _tasks(cells):
        row = [by.get((task, e)) for e in ranked]
        present = [c for c in row if c is not None]
        if len(present) < len(ranked):  # an encoding did not run this task: no ranking of them all
            continue
        failed = [c for c in present if not c.learned()]
        if failed:
            dropped += failed
            continue
        order = sorted(present, key=lambda c: c.key(), reverse=True)
        words, i = [], 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and order[j + 1].key() == order[i].key():
                j += 1
            share = _mean([1.0 / (k + 1) for k in range(i, j + 1)])
            for k in range(i, j + 1):
                reciprocal[order[k].encoding].append(share)
            words.append(" = ".join(c.encoding for c in order[i:j + 1]))
            i = j + 1
        orders[task] = " > ".join(words)
    mrr = {e: _mean(v) for e, v in reciprocal.items() if v}
    return mrr, orders, dropped


def _ranking(cells: list[Cell], needs: tuple[str, ...], others: tuple[str, ...],
             judge: Callable[[dict[str, float]], int], what: str) -> tuple[str, str]:
    """A claim about the MRR: ``judge(mrr)`` +1 reproduced, -1 contradicted, 0 not reproduced."""
    cells = [replace(c, encoding=PAPER_NAMES.get(c.encoding, c.encoding)) for c in cells]
    present = {c.encoding for c in cells}
    if not any(n in present for n in needs) or not any(o in present for o in others):
        return "not tested", f"needs {what}"
    mrr, orders, dropped = mean_reciprocal_rank(cells)
    if not mrr:
        if dropped:
            return _untested(dropped)
        return "not tested", "no task on which every ranked encoding ran"
    detail = (f"mean reciprocal rank {_scope(list(orders), _tasks(cells))}: "
              + ", ".join(f"{e} {v:.2f}" for e, v in sorted(mrr.items(), key=lambda kv: -kv[1]))
              + "; ranks: " + "; ".join(f"{t} {o}" for t, o in orders.items())
              + _left_out(dropped) + f"; the paper: {_KAZEMNEJAD_MRR}")
    return {1: "reproduced", 0: "not reproduced", -1: "contradicted"}[judge(mrr)], detail


def _above(mine: list[float], theirs: list[float]) -> int:
    """+1 if every one of ``mine`` is above every one of ``theirs``, -1 if every one below, else 0."""
    if min(mine) > max(theirs) + _EPS:
        return 1
    if max(mine) < min(theirs) - _EPS:
        return -1
    return 0


def nope_best(cells: list[Cell]) -> tuple[str, str]:
    """NoPE's MRR above every explicit encoding's (below every one: contradicted)."""
    return _ranking(cells, ("none",), EXPLICIT,
                    lambda mrr: _above([mrr["none"]], [v for e, v in mrr.items() if e != "none"]),
                    "none and at least one explicit encoding")


def t5_best_explicit(cells: list[Cell]) -> tuple[str, str]:
    """T5's MRR above every other explicit encoding's (NoPE aside; below every one: contradicted)."""
    return _ranking(cells, ("t5",), tuple(e for e in EXPLICIT if e != "t5"),
                    lambda mrr: _above([mrr["t5"]], [v for e, v in mrr.items() if e not in ("t5", "none")]),
                    "t5 and another explicit encoding")


def common_worst(cells: list[Cell]) -> tuple[str, str]:
    """Every common encoding's MRR (ALiBi, rotary, APE) below both NoPE's and T5's (above both: contradicted)."""
    return _ranking(cells, ("none", "t5"), COMMON,
                    lambda mrr: -_above([v for e, v in mrr.items() if e in COMMON],
                                        [v for e, v in mrr.items() if e in ("none", "t5")]),
                    "none or t5 beside alibi, rotary or sinusoidal")


# -- McLeish et al. 2024 and Cho et al. 2024 ------------------------------------------------


def structure_best(cells: list[Cell]) -> tuple[str, str]:
    """The best of Abacus and coupling clearly above the best scheme that numbers tokens by order.

    Each encoding's exact match and token accuracy beyond training are averaged over the tasks
    it learned; the two best are compared with :func:`~attnlab.labs.lengths.claims.gap`.
    """
    if not any(c.encoding in STRUCTURED for c in cells) or not any(c.encoding not in STRUCTURED for c in cells):
        return "not tested", "needs abacus or coupling beside a scheme that numbers the tokens by their order"
    kept = [c for c in cells if c.learned()]
    dropped = [c for c in cells if not c.learned()]
    own = [c for c in kept if c.encoding in STRUCTURED]
    rivals = [c for c in kept if c.encoding not in STRUCTURED]
    if not own or not rivals:
        return _untested(dropped)
    means: dict[str, tuple[float, float]] = {}
    for name in dict.fromkeys(c.encoding for c in kept):
        mine = [c.key() for c in kept if c.encoding == name]
        means[name] = (_mean([k[0] for k in mine]), _mean([k[1] for k in mine]))
    best = max(dict.fromkeys(c.encoding for c in own), key=lambda n: means[n])
    rival = max(dict.fromkeys(c.encoding for c in rivals), key=lambda n: means[n])
    detail = (f"{_scope(_tasks(kept), _tasks(cells))}: "
              + ", ".join(f"{n} {pct(e)} exact / {pct(t)} tokens" for n, (e, t) in means.items())
              + _left_out(dropped))
    return {1: "reproduced", 0: "not reproduced", -1: "contradicted"}[gap(means[best], means[rival])], detail
