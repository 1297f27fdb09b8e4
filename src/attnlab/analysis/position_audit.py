"""The audit of positional schemes that act inside attention (rotary, xPos, ALiBi, T5, Shaw, CoPE, NoPE).

:func:`~attnlab.analysis.properties.audit` measures a table of vectors. A scheme
like rotary or ALiBi has no table: it changes the attention scores. So this
audit measures scores, the way attention uses the scheme (see
:class:`~attnlab.encodings.scheme.PositionScheme`)::

    score(i, j) = rotate(q)_i . rotate(k)_j / sqrt(Dh) + bias(rotate(q))[i, j]

(a scheme that sets ``reads_keys``, CoPE, also gets ``k=rotate(k)`` in ``bias``)
with random queries and keys drawn from a private ``torch.Generator`` (the
global RNG is not touched), in float64. Four checks:

* ``offset_only``: with the same query vector at every position and the same key
  vector at every position, the score depends on the positions only through
  ``j - i`` (Su et al. 2021 for rotary; by construction for relative biases): for
  each offset ``d`` in ``0, +-offsets``, the spread (max - min) over ``i`` of
  ``score(i, i + d)``. Repeating one vector hides content: a contextual scheme
  (CoPE, whose positions count gates on ``q . k``) passes when its count of
  identical tokens is ``i - j + 1`` times one gate, though with varied tokens
  its scores are not a function of ``j - i``.
* ``norm_preserved``: a rotation keeps ``|rotate(x)_i| == |x_i|`` (worst relative
  change); "n/a" for a scheme that does not rotate.
* ``shift_invariant``: moving every query and key by the same ``a``
  (``q_offset = k_offset = a``) changes no score and no value term, for ``a`` in
  ``offsets`` and ``max_positions``: the worst absolute change.
* ``offsets_consistent``: a query at position ``p`` alone, with the keys ``0 .. p``
  (``q_offset = p, k_offset = 0``: cached decoding), gets the scores and value
  term of row ``p`` of the full computation. A scheme that ignores its offsets
  passes the other checks and fails this one.

Tolerances. The schemes keep angles and tables in float32 or better, and a
float32 angle ``p * theta`` is off by up to ``p * u`` (``u`` = float32 epsilon,
1.2e-7), so a score built from positions up to ``P`` may be off by a few
``u * (1 + P)`` times its scale ``|q| |k| / sqrt(Dh) + max |bias|``: the checks
allow ``8 u (1 + P)`` times the scale (``16 u`` relative for norms). A scheme
that leaks absolute position misses by orders of magnitude more.

Shape notation: ``B`` batch, ``H`` heads, ``N`` audited positions, ``W`` window, ``Dh`` head dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from attnlab._validate import check_int
from attnlab.analysis.properties import AuditReport, PropertyCheck
from attnlab.encodings.scheme import PositionScheme

__all__ = ["audit_position"]

_U = torch.finfo(torch.float32).eps
_B = 2  # batch rows audited
_WINDOW = 32  # positions in the shift and decoding checks
_DEFAULT_HEAD_DIM = 16
_DEFAULT_HEADS = 2
_Randn = Callable[..., Tensor]  # draws float64 normals from the audit's private generator


def _resolve(name: str, given: int | None, scheme: PositionScheme, default: int) -> int:
    """The scheme's own size if it has one (refusing a different ``given``), else ``given`` or ``default``."""
    own = getattr(scheme, name, None)
    if given is not None:
        given = check_int(name, given, minimum=1)
        if own is not None and own != given:
            raise ValueError(f"{name}={given} does not match the scheme's {name}={own}")
        return given
    return default if own is None else int(own)


def _check_offsets(offsets: Any) -> list[int]:
    if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Iterable):
        raise TypeError(f"offsets must be an iterable of positive integers, got {offsets!r}")
    values = list(offsets)
    if not values:
        raise ValueError("offsets must name at least one offset, got an empty iterable")
    return sorted({check_int(f"offsets[{i}]", k, minimum=1) for i, k in enumerate(values)})


def _scores(scheme: PositionScheme, q: Tensor, k: Tensor, q_offset: int, k_offset: int) -> tuple[Tensor, float]:
    """Positional scores as attention computes them, float64 ``[B, H, T, S]``, and their scale."""
    turned_q, turned_k = scheme.rotate(q, k, q_offset=q_offset, k_offset=k_offset)
    # contiguous: a matmul of stride-0 (expanded) operands takes a slow path.
    rq, rk = turned_q.to(torch.float64).contiguous(), turned_k.to(torch.float64).contiguous()
    scores = rq @ rk.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, H, T, Dh] x [B, H, Dh, S] -> [B, H, T, S]
    # |q_i| |k_j| / sqrt(Dh) bounds the content part of every score.
    scale = (q.norm(dim=-1).max() * k.norm(dim=-1).max()).item() / math.sqrt(q.shape[-1])
    # As attention calls it: the rotated queries (and keys, for a scheme that reads them).
    bias = _bias(scheme, turned_q, turned_k, q_offset=q_offset, k_offset=k_offset)
    if bias is not None:
        bias = bias.to(torch.float64)
        scores = scores + bias  # broadcast to [B, H, T, S]
        # Only finite terms set the scale: a window's -inf masks pairs, it is not a size to round against.
        finite = bias[bias.isfinite()]
        scale += finite.abs().max().item() if finite.numel() else 0.0
    return scores, scale


def _gap(a: Tensor, b: Tensor) -> Tensor:
    """``|a - b|`` elementwise, where equal values are 0 apart, equal infinities included (a masked pair
    masked at both places is the same score; ``-inf - -inf`` would be NaN, a failure)."""
    return torch.where(a == b, torch.zeros((), dtype=a.dtype), (a - b).abs())


def _bias(scheme: PositionScheme, q: Tensor, k: Tensor, *, q_offset: int = 0, k_offset: int = 0) -> Tensor | None:
    """``scheme.bias`` as attention calls it: with the (rotated) keys ``k [B, H, S, Dh]`` when it ``reads_keys``."""
    keys = k if scheme.reads_keys else None  # CoPE counts positions with gates on q . k
    return scheme.bias(q, k.shape[2], q_offset=q_offset, k_offset=k_offset, k=keys)


def _tolerance(scale: float, largest_position: int) -> float:
    """``8 u (1 + P)`` times the scale (module docstring); never exactly zero."""
    return 8.0 * _U * (1 + largest_position) * max(scale, 1e-30)


def _uses(scheme: PositionScheme, q: Tensor, w: Tensor) -> list[str]:
    """Which of rotate / bias / value_term the scheme actually uses."""
    used = []
    rq, rk = scheme.rotate(q, q)
    if rq is not q or rk is not q:
        used.append("rotate")
    if _bias(scheme, rq, rk) is not None:
        used.append("bias")
    if scheme.value_term(w) is not None:
        used.append("value_term")
    return used


def audit_position(
    scheme: PositionScheme,
    *,
    head_dim: int | None = None,
    n_heads: int | None = None,
    max_positions: int = 256,
    offsets: Iterable[int] = (1, 2, 5, 16),
    seed: int = 0,
) -> AuditReport:
    """Check that a positional scheme is relative, norm-preserving and honours its offsets.

    Args:
        scheme: the scheme, e.g. ``Rotary(16)``, ``ALiBi(4)``, ``T5RelativeBias(4)``.
        head_dim: ``Dh`` of the random queries/keys; default the scheme's own
            ``head_dim`` if it has one, else 16.
        n_heads: ``H``; default the scheme's own ``n_heads`` if it has one, else 2.
        max_positions: positions ``N`` of the ``offset_only`` check (``0 .. N - 1``)
            and the largest shift of ``shift_invariant``; capped by the scheme's
            ``max_len``. At least 2.
        offsets: the offsets ``j - i`` compared by ``offset_only`` (with their
            negatives and 0; those ``>= N`` skipped), and shifts for ``shift_invariant``.
        seed: seed of the private generator of the random queries, keys and weights.

    Returns:
        An :class:`~attnlab.analysis.properties.AuditReport` (``d_model`` is
        ``Dh``, ``dtype`` "float64") with the checks offset_only,
        norm_preserved, shift_invariant and offsets_consistent; each check's
        ``value`` is the measured worst error and ``detail`` says it in words.

    Raises:
        TypeError: if ``scheme`` is not an ``PositionScheme`` or a size is not an integer.
        ValueError: for a ``head_dim``/``n_heads`` that contradicts the scheme's,
            ``max_positions < 2``, a non-positive offset, or a ``max_len`` below 2.

    Example:
        >>> from attnlab.encodings.alibi import ALiBi
        >>> report = audit_position(ALiBi(4))
        >>> [(c.name, c.verdict) for c in report.checks]  # doctest: +NORMALIZE_WHITESPACE
        [('offset_only', 'pass'), ('norm_preserved', 'n/a'), ('shift_invariant', 'pass'),
         ('offsets_consistent', 'pass')]
    """
    if not isinstance(scheme, PositionScheme):
        raise TypeError(f"scheme must be an PositionScheme, got {type(scheme).__name__}")
    Dh = _resolve("head_dim", head_dim, scheme, _DEFAULT_HEAD_DIM)
    H = _resolve("n_heads", n_heads, scheme, _DEFAULT_HEADS)
    N = check_int("max_positions", max_positions, minimum=2)
    offsets = _check_offsets(offsets)
    seed = check_int("seed", seed)
    if scheme.max_len is not None:
        if scheme.max_len < 2:
            raise ValueError(f"the scheme's max_len must be at least 2 to audit, got max_len={scheme.max_len}")
        N = min(N, scheme.max_len)
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    W = min(N, _WINDOW)
    # Causal weights (rows sum to 1 over j <= i), so that a query's row restricted
    # to keys 0..i is the whole row, as in cached decoding.
    causal = torch.ones(W, W, dtype=torch.bool).tril()  # [W, W]
    weights = randn(_B, H, W, W).masked_fill(~causal, -math.inf).softmax(-1)  # [B, H, W, W]
    with torch.no_grad():
        used = _uses(scheme, randn(_B, H, W, Dh), weights)
        checks = (
            _offset_only(scheme, randn, H, Dh, N, offsets, used),
            _norm_preserved(scheme, randn, H, Dh, N, offsets, used),
            _shift_invariant(scheme, randn, H, Dh, N, W, offsets, weights),
            _offsets_consistent(scheme, randn, H, Dh, W, weights),
        )
    return AuditReport(n_positions=N, n_audited=N, d_model=Dh, dtype="float64", checks=checks)


def _none_note(used: list[str]) -> str:
    return "" if used else " (the scheme adds nothing positional, so this holds trivially)"


def _offset_only(scheme: PositionScheme, randn: _Randn, H: int, Dh: int, N: int, offsets: list[int],
                 used: list[str]) -> PropertyCheck:
    # One query vector and one key vector repeated at every position: any change
    # along a diagonal j - i = d can only come from the absolute positions.
    q = randn(_B, H, 1, Dh).expand(_B, H, N, Dh)  # [B, H, N, Dh]
    k = randn(_B, H, 1, Dh).expand(_B, H, N, Dh)  # [B, H, N, Dh]
    scores, scale = _scores(scheme, q, k, 0, 0)  # [B, H, N, N]
    diagonals = sorted({0, *offsets, *(-o for o in offsets)})
    checked = [d for d in diagonals if abs(d) < N - 1]  # at least two pairs to compare
    spreads = []
    for d in checked:
        diag = scores.diagonal(offset=d, dim1=-2, dim2=-1)  # [B, H, N - |d|]: score(i, i + d)
        spreads.append(_gap(diag.amax(-1), diag.amin(-1)).max().item())
    tol = _tolerance(scale, N - 1)
    worst = max(spreads)
    d_worst = checked[spreads.index(worst)]
    extra = {"offsets": checked, "spread": spreads, "uses": used}
    skipped = sorted(set(diagonals) - set(checked))
    note = f"; offsets {skipped} skipped (need two pairs within {N} positions)" if skipped else ""
    if worst <= tol:
        detail = (f"score(i, i + d) is the same for every i: worst spread {worst:.2g} (d = {d_worst}) "
                  f"<= {tol:.2g} over positions 0..{N - 1}{note}{_none_note(used)}")
        return PropertyCheck("offset_only", "pass", worst, tol, detail, extra)
    detail = (f"scores depend on absolute position, not only on j - i: score(i, i + {d_worst}) varies "
              f"by {worst:.4g} over i (> {tol:.2g}){note}")
    return PropertyCheck("offset_only", "fail", worst, tol, detail, extra)


def _norm_preserved(scheme: PositionScheme, randn: _Randn, H: int, Dh: int, N: int, offsets: list[int],
                    used: list[str]) -> PropertyCheck:
    tol = 16.0 * _U
    if "rotate" not in used:
        return PropertyCheck("norm_preserved", "n/a", None, tol,
                             "the scheme does not rotate queries or keys, so there is no norm to keep",
                             {"uses": used})
    x = randn(_B, H, N, Dh)  # [B, H, N, Dh]
    norms = x.norm(dim=-1)  # [B, H, N]
    starts = [s for s in (0, max(offsets), N) if scheme.max_len is None or s + N <= scheme.max_len]
    worst = 0.0
    for start in starts:
        rq, rk = scheme.rotate(x, x, q_offset=start, k_offset=start)
        for r in (rq, rk):
            rel = ((r.to(torch.float64).norm(dim=-1) - norms).abs() / norms).max().item()
            worst = max(worst, rel)
    extra = {"starts": starts, "uses": used}
    if worst <= tol:
        detail = (f"|rotate(x)| = |x| at every position: worst relative change {worst:.2g} <= {tol:.2g} "
                  f"(positions {starts[0]}..{starts[-1] + N - 1})")
        return PropertyCheck("norm_preserved", "pass", worst, tol, detail, extra)
    detail = f"rotation changes vector norms by up to {worst:.4g} (relative, > {tol:.2g})"
    return PropertyCheck("norm_preserved", "fail", worst, tol, detail, extra)


def _shift_invariant(scheme: PositionScheme, randn: _Randn, H: int, Dh: int, N: int, W: int, offsets: list[int],
                     weights: Tensor) -> PropertyCheck:
    q, k = randn(_B, H, W, Dh), randn(_B, H, W, Dh)  # [B, H, W, Dh] each
    base, scale = _scores(scheme, q, k, 0, 0)  # [B, H, W, W]
    base_v = scheme.value_term(weights)  # [B, H, W, Dh] or None
    shifts = sorted({*offsets, N})
    if scheme.max_len is not None:
        shifts = [a for a in shifts if a + W <= scheme.max_len]
    if not shifts:
        return PropertyCheck("shift_invariant", "n/a", None, None,
                             f"no shift fits in the scheme's max_len={scheme.max_len} with {W} positions")
    tol = _tolerance(scale, max(shifts) + W - 1)
    errors, v_errors = [], []
    for a in shifts:
        shifted, _ = _scores(scheme, q, k, a, a)
        errors.append(_gap(shifted, base).max().item())
        if base_v is not None:
            moved = scheme.value_term(weights, q_offset=a, k_offset=a)
            assert moved is not None, "a scheme with a value term has one at every offset"
            v_errors.append(_gap(moved.to(torch.float64), base_v.to(torch.float64)).max().item())
    worst = max(errors)
    a_worst = shifts[errors.index(worst)]
    extra: dict[str, Any] = {"shifts": shifts, "score_error": errors}
    ok = worst <= tol
    detail = f"shifting queries and keys by a changes scores by at most {worst:.2g} (a = {a_worst}; tol {tol:.2g})"
    if base_v is not None:
        v_tol = _tolerance(base_v.abs().max().item(), max(shifts) + W - 1)
        v_worst = max(v_errors)
        extra.update(value_error=v_errors, value_tolerance=v_tol)
        ok = ok and v_worst <= v_tol
        detail += f" and the value term by {v_worst:.2g} (tol {v_tol:.2g})"
    detail += f", over shifts {shifts} of a {W}-position window"
    if not ok:
        detail = "not shift invariant: " + detail
    return PropertyCheck("shift_invariant", "pass" if ok else "fail", worst, tol, detail, extra)


def _offsets_consistent(scheme: PositionScheme, randn: _Randn, H: int, Dh: int, W: int,
                        weights: Tensor) -> PropertyCheck:
    q, k = randn(_B, H, W, Dh), randn(_B, H, W, Dh)  # [B, H, W, Dh] each
    full, scale = _scores(scheme, q, k, 0, 0)  # [B, H, W, W]
    full_v = scheme.value_term(weights)  # [B, H, W, Dh] or None
    rows = sorted({0, 1, W // 2, W - 1})
    worst, v_worst = 0.0, 0.0
    for p in rows:
        # One query at position p against the cached keys 0..p.
        step, _ = _scores(scheme, q[:, :, p : p + 1], k[:, :, : p + 1], p, 0)  # [B, H, 1, p + 1]
        worst = max(worst, _gap(step, full[:, :, p : p + 1, : p + 1]).max().item())
        if full_v is not None:
            v = scheme.value_term(weights[:, :, p : p + 1, : p + 1], q_offset=p, k_offset=0)  # [B, H, 1, Dh]
            assert v is not None, "a scheme with a value term has one at every offset"
            v_worst = max(v_worst, _gap(v.to(torch.float64), full_v[:, :, p : p + 1].to(torch.float64)).max().item())
    tol = _tolerance(scale, W - 1)
    ok = worst <= tol
    detail = (f"a query at position p with keys 0..p (q_offset = p) gets row p of the full scores to "
              f"{worst:.2g} (tol {tol:.2g})")
    extra: dict[str, Any] = {"rows": rows}
    if full_v is not None:
        v_tol = _tolerance(full_v.abs().max().item(), W - 1)
        ok = ok and v_worst <= v_tol
        detail += f" and of the value term to {v_worst:.2g} (tol {v_tol:.2g})"
        extra.update(value_error=v_worst, value_tolerance=v_tol)
    if not ok:
        detail = "offsets are not honoured: " + detail
    return PropertyCheck("offsets_consistent", "pass" if ok else "fail", worst, tol, detail, extra)
