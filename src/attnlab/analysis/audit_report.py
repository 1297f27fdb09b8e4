"""The audit's result: one :class:`PropertyCheck` per property, gathered in an :class:`AuditReport`.

:func:`attnlab.analysis.audit` (a table of vectors) and
:func:`attnlab.analysis.audit_position` (a scheme inside attention) measure; the
report holds what they measured: each property's headline number, the
tolerance it was judged against, the verdict and a sentence with the numbers.
It prints as a plain-text table and serialises to JSON (``to_dict``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["VERDICTS", "AuditReport", "PropertyCheck"]

VERDICTS = ("pass", "fail", "partial", "n/a")


@dataclass(frozen=True)
class PropertyCheck:
    """One audited property: a measured number and its verdict.

    Attributes:
        name: the property (``"bounded"``, ``"unique"``, ...).
        verdict: ``"pass"``, ``"fail"``, ``"partial"`` or ``"n/a"``.
        value: the headline number (e.g. the worst spread), or None when n/a.
        tolerance: the threshold ``value`` was judged against, or None.
        detail: one plain-English sentence with the numbers.
        extra: supporting numbers (per-offset lists, the offending pair, ...),
            plain Python values only so that it serialises to JSON.

    Raises:
        ValueError: if ``verdict`` is not one of :data:`VERDICTS`.
    """

    name: str
    verdict: str
    value: float | None
    tolerance: float | None
    detail: str
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def to_dict(self) -> dict[str, Any]:
        """Returns the check as a JSON-serialisable dict (its fields; ``extra`` copied)."""
        return {
            "name": self.name,
            "verdict": self.verdict,
            "value": self.value,
            "tolerance": self.tolerance,
            "detail": self.detail,
            "extra": dict(self.extra),
        }


@dataclass(frozen=True)
class AuditReport:
    """The result of :func:`audit`: one :class:`PropertyCheck` per property, in order.

    Attributes:
        n_positions: rows ``L`` in the table.
        n_audited: rows ``N`` the O(L^2) checks used (``min(L, max_positions)``).
        d_model: columns ``D``.
        dtype: the table's dtype, e.g. ``"float32"``.
        checks: the checks, in the order bounded, unique, shift_invariant,
            monotonic, linear_shift, precision.
    """

    n_positions: int
    n_audited: int
    d_model: int
    dtype: str
    checks: tuple[PropertyCheck, ...]

    @property
    def passed(self) -> bool:
        """True when no check failed ("partial" and "n/a" do not count as failures)."""
        return all(c.verdict != "fail" for c in self.checks)

    def __getitem__(self, name: str) -> PropertyCheck:
        """The check called ``name``.

        Raises:
            KeyError: for an unknown name, listing the known ones.
        """
        for check in self.checks:
            if check.name == name:
                return check
        known = ", ".join(c.name for c in self.checks)
        raise KeyError(f"no property {name!r} in the audit; known: {known}")

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as a JSON-serialisable dict (``json.dumps`` works on it).

        Plain ints, floats, strings, lists and None only, per-offset lists included;
        ``"checks"`` is a list in the report's order.
        """
        return {
            "n_positions": self.n_positions,
            "n_audited": self.n_audited,
            "d_model": self.d_model,
            "dtype": self.dtype,
            "passed": self.passed,
            "checks": [c.to_dict() for c in self.checks],
        }

    def format(self) -> str:
        """Returns a plain-text table, one line per check: property | verdict | value | detail."""
        title = (f"Positional-encoding audit: {self.n_positions} positions x {self.d_model} dims, "
                 f"{self.dtype}")
        if self.n_audited < self.n_positions:
            title += f" (pairwise checks: first {self.n_audited} of {self.n_positions} positions)"
        rows = [("property", "verdict", "value", "detail")]
        rows += [(c.name, c.verdict, "-" if c.value is None else f"{c.value:.4g}", c.detail)
                 for c in self.checks]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [title]
        for r in rows:
            lines.append("  ".join(s.ljust(w) for s, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
        lines.append(f"overall: {'pass' if self.passed else 'fail'}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()
