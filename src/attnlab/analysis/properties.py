"""The audit: the positional-encoding lab's requirements for a positional encoding, as measured numbers.

The lab asks four things of an encoding table: the values are bounded; every
position has its own vector; no two positions share one; and the distance
between two positions' vectors reflects how far apart they are ("the vector
distance between position 1 and 3 needs to be the same as 3 and 5").
:func:`audit` measures each of them, and two more, and gives each a verdict:

* ``bounded``: the largest ``|value|`` in the table is at most ``bound``.
* ``unique``: the smallest distance ``||PE[i] - PE[j]||`` between two different
  positions is above rounding, i.e. no position repeats another. (fixed_base
  with bases 4, 5, 7 repeats at position lcm = 140.)
* ``shift_invariant``: the distance between positions ``k`` apart is the same
  wherever they are: for every offset ``k``, ``||PE[p+k] - PE[p]||`` varies over
  ``p`` by no more than rounding. Exact for sinusoids, since
  ``||PE[p+k] - PE[p]||^2 = sum_i (2 - 2 cos(k w_i))`` does not involve ``p``.
  (Not for an odd ``D`` with a last sine and no cosine partner: the audit sees
  that lone column once its effect outgrows rounding, e.g. D = 7 over 200 rows.)
* ``monotonic``: the distance (its mean over ``p``) grows with the offset up to
  some ``k*``. It cannot grow forever for a bounded table; the lab's
  ``d_model = 8`` table stops at ``k* = 3`` (0.9641, 1.6949, 2.0175, then 1.8619).
  A step counts as growth only if it beats rounding and twice the noise of the
  two means, so a random table's wobbling means do not read as growth.
* ``linear_shift``: for each offset ``k`` one matrix ``M_k`` moves every position
  ``k`` steps, ``PE[p] @ M_k == PE[p+k]`` (Vaswani et al. 2017, §3.5: "PE[pos+k]
  can be represented as a linear function of PE[pos]"). Fitted by float64 least
  squares (SVD-based, as sinusoid tables are numerically rank deficient); the
  residual is the largest ``|PE[p] @ M_k - PE[p+k]|``. With no more rows than
  columns any table fits, so that case is "n/a", not a pass.
* ``precision``: the table against a float64 ``reference`` of the same formula,
  over every position (the labs' float32 formula is off by 7e-4 at 10,000).

Why the tolerances are what they are. A table stored in a dtype with machine
epsilon ``u`` holds each entry rounded, off by at most ``u/2`` of its size, so a
row moves by at most ``u/2 * R`` (``R`` the largest row norm), a distance by at
most ``u * R``, and a difference of two distances by at most ``2 u R``. The
distance checks therefore allow ``2 u R``: a float32 rounding of a repeated row
still counts as a repeat, and a float32 sinusoid still counts as shift
invariant. ``linear_shift`` allows the same ``2 u R``: the exact rotation misses
rounded rows by at most ``u/2 * (|value| + R) <= u R``. ``u`` is never taken
finer than float32's 1.2e-7: the float64 arithmetic that produced the table (an
angle ``p * w`` carries about ``p * 1e-16`` of error) is not a property of the
encoding, and models run in float32 or coarser. ``precision`` allows
``max(1e-6, eps * max(1, max|reference|))`` with ``eps`` the table dtype's own
epsilon: twice the error of a correctly rounded table (9.8e-4 for float16,
7.8e-3 for bfloat16), and 1e-6 for float32 and float64.

The O(L^2) checks (unique, shift_invariant, monotonic, linear_shift) look at the
first ``max_positions`` rows; bounded and precision look at every row, in chunks.

Shape notation: ``L`` positions, ``N`` audited positions, ``D`` columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab._limits import check_memory
from attnlab._validate import check_finite_float, check_int
from attnlab.analysis.audit_report import VERDICTS, AuditReport, PropertyCheck
from attnlab.analysis.similarity import check_table, distance_matrix

# The report types live in .audit_report; named here too, as what audit() returns.
__all__ = ["VERDICTS", "AuditReport", "PropertyCheck", "audit"]

# Elements per float64 chunk in the full-table passes: 32 MB, so a 1e6 x 512
# table is read with ~100 MB of scratch instead of a 4 GB float64 copy.
_CHUNK_ELEMENTS = 1 << 22
# Default linear_shift offsets are fitted while their summed cost (N - k) * D^2
# stays below this: 10 fits of 1024 x 512, ~0.8 s of SVD least squares on 2
# cores. Bigger audits get fewer offsets, not more time.
_FIT_BUDGET = 10 * 1024 * 512 * 512
_FLOAT32_EPS = torch.finfo(torch.float32).eps


def _chunks(t: Tensor) -> Iterable[tuple[int, Tensor]]:
    """Yield ``(first_row, rows as float64 on CPU)`` in chunks of ~32 MB."""
    step = max(1, _CHUNK_ELEMENTS // t.shape[1])
    for r0 in range(0, t.shape[0], step):
        yield r0, t[r0 : r0 + step].to("cpu", torch.float64)  # [rows, D]


def _unit_roundoff(dtype: torch.dtype) -> float:
    """The ``u`` of the module docstring: the dtype's epsilon, never finer than float32's."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    return max(eps, _FLOAT32_EPS)


def _check_offsets(offsets: Any) -> list[int]:
    if isinstance(offsets, (Tensor, np.ndarray)):
        offsets = offsets.reshape(-1).tolist()  # plain ints (or floats, refused below)
    if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Iterable):
        raise TypeError(f"offsets must be an iterable of positive integers, got {offsets!r}")
    values = [int(k) if isinstance(k, np.integer) else k for k in offsets]
    if not values:
        raise ValueError("offsets must name at least one offset, got an empty iterable")
    return sorted({check_int(f"offsets[{i}]", k, minimum=1) for i, k in enumerate(values)})


def _default_offsets(n: int, d: int) -> list[int]:
    """1..8 and powers of two up to (N-1)//2, within the least-squares budget.

    Powers of two are taken first (1, 2, 4, ... reach the large shifts), then
    3, 5, 6, 7; offsets too long to fit meaningfully cost nothing and stay listed.
    """
    powers = [2**j for j in range(max(8, (n - 1) // 2).bit_length())]  # 1, 2, 4, 8, ...
    wanted = [k for k in dict.fromkeys(powers + [3, 5, 6, 7]) if k <= n - 1]
    chosen: list[int] = []
    cost = 0
    for k in wanted:
        fit_cost = (n - k) * d * d if n - k > d else 0
        if cost + fit_cost <= _FIT_BUDGET or not chosen:
            chosen.append(k)
            cost += fit_cost
    return sorted(chosen)


def audit(
    table: Any,
    *,
    reference: Any = None,
    max_positions: int = 1024,
    offsets: Iterable[int] | None = None,
    bound: float = 1.0,
) -> AuditReport:
    """Measure the positional-encoding lab's requirements of a positional-encoding table.

    Args:
        table: the encoding, a tensor or numpy array ``[L, D]`` or a ``pe``
            buffer ``[1, L, D]``, any real dtype and device.
        reference: optional exact table (float64, same shape) for ``precision``,
            e.g. ``sinusoidal(L, D, dtype=torch.float64)``.
        max_positions: the pairwise checks use the first ``N = min(L,
            max_positions)`` rows (they cost O(N^2 D)); at least 2.
        offsets: positive offsets ``k`` for ``linear_shift``; default 1..8 and
            powers of two up to ``(N-1)//2``, fewer for large ``N * D^2``.
        bound: the largest ``|value|`` ``bounded`` accepts.

    Returns:
        An :class:`AuditReport` with the checks bounded, unique,
        shift_invariant, monotonic, linear_shift and precision.

    Raises:
        TypeError: if ``table`` or ``reference`` is not a real tensor or array,
            or an argument has the wrong type.
        ValueError: for a table that is not ``[L, D]`` (or ``[1, L, D]``), is
            empty or holds NaN/inf; a ``reference`` of another shape;
            ``max_positions < 2``; a non-positive offset; ``bound <= 0``.

    Example:
        >>> from attnlab.encodings import sinusoidal
        >>> audit(sinusoidal(10, 8))["monotonic"].value
        3.0
    """
    t = check_table(table, "table")
    ref = None if reference is None else check_table(reference, "reference")
    if ref is not None and ref.shape != t.shape:
        raise ValueError(
            f"reference must have the table's shape {list(t.shape)}, got {list(ref.shape)}"
        )
    max_positions = check_int("max_positions", max_positions, minimum=2)
    bound = check_finite_float("bound", bound, positive=True)
    L, D = t.shape
    N = min(L, max_positions)
    check_memory(f"max_positions {max_positions}: the distances between {N} positions", N * N * 8 * 3)
    offsets = _default_offsets(N, D) if offsets is None else _check_offsets(offsets)

    u = _unit_roundoff(t.dtype)
    bounded = _bounded(t, bound, u)  # first: it also refuses NaN/inf before any distance
    head = t[:N].to("cpu", torch.float64)  # [N, D]
    max_norm = head.norm(dim=1).max().item()
    # 2 u R: the most rounding can move a difference of two distances (module docstring).
    dist_tol = 2.0 * u * max_norm
    scope = f" (first {N} of {L} positions)" if N < L else ""
    dist = distance_matrix(head)  # [N, N]
    means, sems, spreads = _diagonals(dist)  # [N-1] each, offsets 1..N-1
    checks = (
        bounded,
        _unique(dist, dist_tol, scope),
        _shift_invariant(spreads, dist_tol, scope),
        _monotonic(means, sems, dist_tol, scope),
        _linear_shift(head, offsets, dist_tol, scope),
        _precision(t, ref),
    )
    dtype = str(t.dtype).removeprefix("torch.")
    return AuditReport(n_positions=L, n_audited=N, d_model=D, dtype=dtype, checks=checks)


def _bounded(t: Tensor, bound: float, u: float) -> PropertyCheck:
    worst = 0.0
    for r0, rows in _chunks(t):
        finite = torch.isfinite(rows)
        if not finite.all():
            p, c = (~finite).nonzero()[0].tolist()
            raise ValueError(
                f"table must hold finite numbers, got {rows[p, c].item()} at position {r0 + p}, "
                f"column {c}"
            )
        worst = max(worst, rows.abs().max().item())
    # A value rounded to the table's dtype may sit a rounding step above the bound.
    tol = bound * (1.0 + u)
    ok = worst <= tol
    detail = f"max |value| = {worst:.4f} {'<=' if ok else '>'} {bound:g}"
    if not ok:
        detail += f": values are not bounded by {bound:g}"
    return PropertyCheck("bounded", "pass" if ok else "fail", worst, tol, detail)


def _unique(dist: Tensor, tol: float, scope: str) -> PropertyCheck:
    N = dist.shape[0]
    if N < 2:
        return PropertyCheck("unique", "n/a", None, tol, "needs at least two positions to compare")
    i, j = torch.triu_indices(N, N, offset=1)  # every pair i < j
    d = dist[i, j]  # [N(N-1)/2]
    smallest = d.min().item()
    repeats = d <= tol
    if repeats.any():
        # Name the first position that repeats an earlier one (smallest j, then i):
        # "position 140 repeats position 0" rather than whichever pair rounds closest.
        order = torch.argsort(j[repeats] * N + i[repeats])[0]
        a, b = i[repeats][order].item(), j[repeats][order].item()
        n_rep = int(repeats.sum())
        detail = (f"positions {a} and {b} share a vector (distance {dist[a, b].item():.2g} <= "
                  f"{tol:.2g}); {n_rep} pair{'s' if n_rep > 1 else ''} repeat{scope}")
        extra = {"pair": [a, b], "pair_distance": dist[a, b].item(), "n_repeated_pairs": n_rep}
        return PropertyCheck("unique", "fail", smallest, tol, detail, extra)
    k = int(d.argmin())
    a, b = i[k].item(), j[k].item()
    detail = (f"no two positions share a vector: the closest pair, positions {a} and {b}, "
              f"is {smallest:.4g} apart (> {tol:.2g}){scope}")
    return PropertyCheck("unique", "pass", smallest, tol, detail, {"pair": [a, b]})


def _diagonals(dist: Tensor) -> tuple[list[float], list[float], list[float]]:
    """Mean, standard error and spread (max - min) over ``p`` of ``dist[p, p+k]``.

    Returns three lists for the offsets ``k = 1 .. N-1``.
    """
    means, sems, spreads = [], [], []
    for k in range(1, dist.shape[0]):
        d = dist.diagonal(k)  # [N - k]: ||PE[p+k] - PE[p]|| for every p
        means.append(d.mean().item())
        sems.append(d.std().item() / math.sqrt(len(d)) if len(d) > 1 else 0.0)
        spreads.append((d.max() - d.min()).item())
    return means, sems, spreads


def _shift_invariant(spreads: list[float], tol: float, scope: str) -> PropertyCheck:
    N = len(spreads) + 1
    if N < 3:
        return PropertyCheck("shift_invariant", "n/a", None, tol,
                             "needs at least three positions: two pairs the same distance apart")
    spreads = spreads[:-1]  # offset N-1 has a single pair, so no spread to speak of
    k = int(np.argmax(spreads)) + 1
    worst = spreads[k - 1]
    ok = worst <= tol
    if ok:
        detail = (f"positions k apart are always equally far apart: over p the distance varies by "
                  f"at most {worst:.2g} (offset {k}), within rounding ({tol:.2g}){scope}")
    else:
        detail = (f"the distance between positions k apart depends on where they are: at offset "
                  f"{k} it varies by {worst:.4g} over p (> {tol:.2g}){scope}")
    extra = {"worst_offset": k, "offsets": list(range(1, N - 1)), "spread": spreads}
    return PropertyCheck("shift_invariant", "pass" if ok else "fail", worst, tol, detail, extra)


def _monotonic(means: list[float], sems: list[float], tol: float, scope: str) -> PropertyCheck:
    N = len(means) + 1
    if N < 3:
        return PropertyCheck("monotonic", "n/a", None, tol,
                             "needs at least three positions (offsets 1 and 2)")
    # k* is the last offset of the first rising run. A step counts as a rise only
    # if it beats rounding and twice the noise of the two means (their standard
    # errors): a random table's means wobble up and down without growing.
    k_star = 1
    while k_star < N - 1:
        noise = 2.0 * math.hypot(sems[k_star], sems[k_star - 1])
        if means[k_star] - means[k_star - 1] <= tol + noise:
            break
        k_star += 1
    extra = {"k_star": k_star, "offsets": list(range(1, N)), "mean_distance": means}
    if k_star == N - 1:
        verdict = "pass"
        detail = (f"the mean distance grows with the offset over all {N - 1} audited offsets, "
                  f"from {means[0]:.4f} at 1 to {means[-1]:.4f} at {N - 1}{scope}")
    elif k_star == 1:
        verdict = "fail"
        detail = (f"the mean distance does not grow from offset 1 to offset 2 beyond rounding "
                  f"and noise ({means[0]:.4f}, then {means[1]:.4f}){scope}")
    else:
        verdict = "partial"
        rising = ", ".join(f"{m:.4f}" for m in means[:k_star]) if k_star <= 4 else (
            f"{means[0]:.4f} ... {means[k_star - 1]:.4f}")
        detail = (f"the mean distance grows with the offset up to k* = {k_star} ({rising}), "
                  f"then falls to {means[k_star]:.4f} at offset {k_star + 1}{scope}")
    return PropertyCheck("monotonic", verdict, float(k_star), tol, detail, extra)


def _linear_shift(head: Tensor, offsets: list[int], tol: float, scope: str) -> PropertyCheck:
    N, D = head.shape
    residuals: list[float | None] = []
    for k in offsets:
        if N - k <= D:  # as many unknowns per column as equations: any table fits exactly
            residuals.append(None)
            continue
        x, y = head[: N - k], head[k:]  # [N-k, D] each: PE[p] and PE[p+k]
        # SVD-based gelss: sinusoid tables are numerically rank deficient (slow
        # columns are nearly collinear), and the default gelsy returns fits off
        # by O(1) on them (pytorch/pytorch#71222, #92537).
        m = torch.linalg.lstsq(x, y, driver="gelss").solution  # [D, D]
        residuals.append((x @ m - y).abs().max().item())  # [N-k, D] x [D, D] -> [N-k, D]
    extra: dict[str, Any] = {"offsets": list(offsets), "rows": [max(N - k, 0) for k in offsets],
                             "residual": residuals}
    fitted = [(r, k) for r, k in zip(residuals, offsets, strict=True) if r is not None]
    if not offsets:
        return PropertyCheck("linear_shift", "n/a", None, tol,
                             "needs at least two positions: there is no offset to fit", extra)
    if not fitted:
        detail = (f"needs more positions than columns (N - k > D) to mean anything; with N = {N} "
                  f"and D = {D} no offset in {_span(offsets)} qualifies, and any table fits "
                  "trivially")
        return PropertyCheck("linear_shift", "n/a", None, tol, detail, extra)
    worst, k = max(fitted)
    extra["worst_offset"] = k
    skipped = len(offsets) - len(fitted)
    note = f"; {skipped} offset{'s' if skipped > 1 else ''} with N - k <= D n/a" if skipped else ""
    if worst <= tol:
        detail = (f"for each offset k one matrix maps PE[p] to PE[p+k] for every p: worst residual "
                  f"{worst:.2g} (offset {k}) <= {tol:.2g} over offsets {_span(offsets)}"
                  f"{note}{scope}")
        return PropertyCheck("linear_shift", "pass", worst, tol, detail, extra)
    detail = (f"no single matrix maps PE[p] to PE[p+k]: the best fit misses by {worst:.4g} "
              f"at offset {k} (> {tol:.2g}){note}{scope}")
    return PropertyCheck("linear_shift", "fail", worst, tol, detail, extra)


def _span(offsets: list[int]) -> str:
    if not offsets:  # a one-position table has no offset to audit
        return "(none)"
    return str(offsets[0]) if len(offsets) == 1 else f"{offsets[0]}..{offsets[-1]}"


def _precision(t: Tensor, ref: Tensor | None) -> PropertyCheck:
    if ref is None:
        return PropertyCheck("precision", "n/a", None, None,
                             "no reference table given to compare against")
    worst, where, scale = -1.0, (0, 0), 1.0
    for r0, rows in _chunks(t):
        exact = ref[r0 : r0 + rows.shape[0]].to("cpu", torch.float64)  # [rows, D]
        if not torch.isfinite(exact).all():
            raise ValueError(f"reference must hold finite numbers, got NaN/inf in rows {r0}..")
        err = (rows - exact).abs()
        e = err.max().item()
        if e > worst:
            flat = int(err.argmax())
            worst, where = e, (r0 + flat // t.shape[1], flat % t.shape[1])
        scale = max(scale, exact.abs().max().item())
    # Twice the error of a correctly rounded table, never below 1e-6 (module docstring).
    eps = torch.finfo(t.dtype).eps if t.dtype.is_floating_point else 0.0
    tol = max(1e-6, eps * scale)
    ok = worst <= tol
    detail = (f"max |table - reference| = {worst:.2g} {'<=' if ok else '>'} {tol:.2g} over all "
              f"{t.shape[0]} positions (worst at position {where[0]})")
    extra = {"worst_position": where[0], "worst_column": where[1],
             "reference_dtype": str(ref.dtype).removeprefix("torch.")}
    return PropertyCheck("precision", "pass" if ok else "fail", worst, tol, detail, extra)
