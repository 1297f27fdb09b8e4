"""audit: the positional-encoding lab's requirements as numbers, against its figures and float64 formulas.

Golden numbers come from the positional-encoding lab (the distance figure of section 1.3.3, the lcm
140 of bases 4, 5, 7) or are recomputed here from closed-form float64 formulas,
never copied from the audit's own output.
"""

import json
import math

import numpy as np
import pytest
import torch

from attnlab.analysis import AuditReport, PropertyCheck, audit
from attnlab.encodings import PositionalEncoding, fixed_base, sinusoidal

NAMES = ["bounded", "unique", "shift_invariant", "monotonic", "linear_shift", "precision"]


def lab_float32_table(max_len: int, d_model: int) -> torch.Tensor:
    """The positional-encoding lab's own formula: angles computed in float32, so they drift with the position."""
    position = torch.arange(0, max_len).float().unsqueeze(1)  # [L, 1] float32
    angular_speed = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(angular_speed * position)
    table[:, 1::2] = torch.cos(angular_speed * position)
    return table


def sinusoid_distance(k: int, d_model: int) -> float:
    """||PE[p+k] - PE[p]|| for the even-D paper table: sqrt(sum_i 2 - 2 cos(k w_i)), float64."""
    return math.sqrt(sum(2 - 2 * math.cos(k * 10000.0 ** (-2 * i / d_model))
                         for i in range(d_model // 2)))


def learned_table(max_len: int, d_model: int, seed: int = 7) -> torch.Tensor:
    """A learned table as initialised before training: i.i.d. normal values."""
    return torch.randn(max_len, d_model, generator=torch.Generator().manual_seed(seed))


# --- the report's shape --------------------------------------------------------------------------

def test_report_fields_and_check_order():
    report = audit(sinusoidal(10, 8))
    assert isinstance(report, AuditReport)
    assert (report.n_positions, report.n_audited, report.d_model) == (10, 10, 8)
    assert report.dtype == "float32"
    assert [c.name for c in report.checks] == NAMES
    assert all(isinstance(c, PropertyCheck) for c in report.checks)
    assert all(c.verdict in ("pass", "fail", "partial", "n/a") for c in report.checks)
    assert report["unique"] is report.checks[1]
    assert report.passed


def test_unknown_property_is_a_key_error_listing_the_names():
    with pytest.raises(KeyError, match="shift_invariant"):
        audit(sinusoidal(10, 8))["periodic"]


def test_checks_are_frozen():
    check = audit(sinusoidal(10, 8))["bounded"]
    with pytest.raises(AttributeError):
        check.verdict = "fail"


# --- the positional-encoding lab's numbers ------------------------------------------------------

def test_pe_lab_distances_and_k_star():
    # The positional-encoding lab, section 1.3.3: distances from position 0 in the d_model=8 table are
    # 0.9641, 1.6949, 2.0175, 1.8619: they stop growing after offset 3.
    mono = audit(sinusoidal(10, 8))["monotonic"]
    assert mono.verdict == "partial"
    assert mono.value == 3
    assert mono.extra["k_star"] == 3
    assert mono.extra["offsets"][:4] == [1, 2, 3, 4]
    np.testing.assert_allclose(mono.extra["mean_distance"][:4], [0.9641, 1.6949, 2.0175, 1.8619],
                               atol=1e-4)
    assert "k* = 3" in mono.detail


def test_mean_distances_match_the_float64_formula():
    mono = audit(sinusoidal(64, 8, dtype=torch.float64))["monotonic"]
    expected = [sinusoid_distance(k, 8) for k in range(1, 64)]
    np.testing.assert_allclose(mono.extra["mean_distance"], expected, rtol=0, atol=1e-12)


def test_a_table_whose_distances_keep_growing_passes_monotonic():
    # Rates of at most 0.3 rad per position turn less than half a circle over 10
    # positions, so every term 2 - 2cos(k w_i) of the squared distance grows with k.
    p = torch.arange(10, dtype=torch.float64)[:, None]
    w = torch.tensor([0.3, 0.1, 0.03, 0.01], dtype=torch.float64)
    table = torch.cat([torch.sin(p * w), torch.cos(p * w)], dim=1)  # [10, 8]
    mono = audit(table)["monotonic"]
    assert mono.verdict == "pass"
    assert mono.value == 9


# --- bounded, unique, shift_invariant on sinusoids ----------------------------------------------

@pytest.mark.parametrize("layout", ["interleaved", "concat", "t2t"])
@pytest.mark.parametrize("d_model", [8, 32, 33])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_sinusoids_pass_bounded_unique_shift_invariant(layout, d_model, dtype):
    report = audit(sinusoidal(300, d_model, layout=layout, dtype=dtype))
    for name in ("bounded", "unique", "shift_invariant", "linear_shift"):
        assert report[name].verdict == "pass", report[name].detail
    assert report["bounded"].value <= 1.0
    # Shift invariance is exact in theory: only rounding of the stored values remains.
    assert report["shift_invariant"].value <= report["shift_invariant"].tolerance


def test_odd_d_model_t2t_is_exactly_shift_invariant():
    # t2t pads an odd table with a zero column, which every distance ignores.
    report = audit(sinusoidal(300, 7, layout="t2t", dtype=torch.float64))
    assert report["shift_invariant"].verdict == "pass"
    assert report["shift_invariant"].value < 1e-12


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_odd_d_model_lone_sine_breaks_shift_invariance(layout):
    # With D = 7 the last sine (rate w3 = 10000**(-6/7)) has no cosine partner, so
    # ||PE[p+k] - PE[p]||^2 = sum_{i<3} (2 - 2cos(k w_i)) + (sin((p+k) w3) - sin(p w3))^2
    # depends on p: by up to 1.2e-5 over the first 300 positions. (shift_matrix
    # refuses odd D for the same reason.) Expected spread from that float64 formula:
    n, w = 300, [10000.0 ** (-2 * i / 7) for i in range(4)]
    worst = 0.0
    for k in range(1, n - 1):
        pairs = sum(2 - 2 * math.cos(k * wi) for wi in w[:3])
        d = [math.sqrt(pairs + (math.sin((p + k) * w[3]) - math.sin(p * w[3])) ** 2)
             for p in range(n - k)]
        worst = max(worst, max(d) - min(d))
    report = audit(sinusoidal(n, 7, layout=layout, dtype=torch.float64))
    check = report["shift_invariant"]
    assert check.verdict == "fail"
    assert check.value == pytest.approx(worst, rel=1e-6)
    assert 1e-5 < worst < 2e-5
    assert report["bounded"].verdict == report["unique"].verdict == "pass"


def test_bounded_uses_the_bound():
    table = 2 * sinusoidal(20, 8, dtype=torch.float64)
    assert audit(table)["bounded"].verdict == "fail"
    assert "2.0000 > 1" in audit(table)["bounded"].detail
    assert audit(table, bound=2)["bounded"].verdict == "pass"


def test_fixed_base_repeats_at_the_lcm_140():
    check = audit(fixed_base(200))["unique"]
    assert check.verdict == "fail"
    assert check.extra["pair"] == [0, 140]
    assert "positions 0 and 140" in check.detail
    # Positions p and p + 140 coincide for p = 0..59.
    assert check.extra["n_repeated_pairs"] == 60
    assert not audit(fixed_base(200)).passed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_fixed_base_is_unique_below_the_lcm(dtype):
    report = audit(fixed_base(100, dtype=dtype))
    assert report["unique"].verdict == "pass"
    # The closest two dials: offsets 20 (4*5) leave only base 7 apart, by 2 sin(pi/7) = 0.8678.
    assert report["unique"].value == pytest.approx(2 * math.sin(math.pi / 7), abs=2e-3)
    assert report["shift_invariant"].verdict == "pass"
    assert report["linear_shift"].verdict == "pass"


def test_learned_random_table_fails_the_distance_properties():
    report = audit(learned_table(64, 8))
    assert report["unique"].verdict == "pass"
    assert report["shift_invariant"].verdict == "fail"
    assert report["shift_invariant"].value > 0.1
    assert report["monotonic"].verdict == "fail"
    assert report["linear_shift"].verdict == "fail"


# --- linear_shift ------------------------------------------------------------------------------

def test_linear_shift_passes_for_sinusoids():
    check = audit(sinusoidal(64, 8))["linear_shift"]
    assert check.verdict == "pass"
    assert check.extra["offsets"] == [1, 2, 3, 4, 5, 6, 7, 8, 16]  # 1..8 and powers of two <= 31
    assert check.value < 1e-6


def test_linear_shift_is_na_when_rows_do_not_exceed_columns():
    # 10 positions, D = 8: offset k leaves 10 - k <= 8 rows for every k >= 2.
    check = audit(sinusoidal(10, 8), offsets=[2, 5])["linear_shift"]
    assert check.verdict == "n/a"
    assert check.value is None
    assert check.extra["residual"] == [None, None]
    assert "N - k > D" in check.detail
    # A random table of the same shape would "fit" too: that is why it is n/a, not pass.
    assert audit(learned_table(10, 8), offsets=[2, 5])["linear_shift"].verdict == "n/a"


def test_linear_shift_fails_for_a_random_learned_table():
    check = audit(learned_table(64, 8), offsets=range(1, 9))["linear_shift"]
    assert check.verdict == "fail"
    assert check.value > 0.1
    assert all(r > 0.1 for r in check.extra["residual"])


def test_offsets_accepts_numpy_and_tensor_integers():
    a = audit(sinusoidal(64, 8), offsets=np.array([3, 1]))["linear_shift"]
    b = audit(sinusoidal(64, 8), offsets=torch.tensor([1, 3]))["linear_shift"]
    assert a.extra["offsets"] == b.extra["offsets"] == [1, 3]


# --- precision -----------------------------------------------------------------------------------

def test_precision_of_our_float32_table():
    reference = sinusoidal(10000, 16, dtype=torch.float64)
    check = audit(sinusoidal(10000, 16), reference=reference)["precision"]
    assert check.verdict == "pass"
    assert check.value <= 1e-6
    assert check.tolerance == 1e-6


def test_precision_of_the_labs_float32_formula_fails():
    reference = sinusoidal(10000, 16, dtype=torch.float64)
    report = audit(lab_float32_table(10000, 16), reference=reference)
    check = report["precision"]
    # The float32 angle p * w drifts with p: ~7e-4 at position 10,000 for D = 512, >1e-4 here.
    assert check.verdict == "fail"
    assert check.value > 1e-4
    assert check.extra["worst_position"] > 1000
    # It is looked at over all rows, while the pairwise checks stop at 1024 positions.
    assert report.n_audited == 1024 and report.n_positions == 10000
    assert "first 1024 of 10000 positions" in report["unique"].detail


def test_precision_is_looser_for_half_precision():
    reference = sinusoidal(500, 16, dtype=torch.float64)
    check = audit(sinusoidal(500, 16, dtype=torch.float16), reference=reference)["precision"]
    assert check.verdict == "pass"
    assert 1e-5 < check.value <= check.tolerance < 1e-2


def test_precision_is_na_without_reference():
    check = audit(sinusoidal(10, 8))["precision"]
    assert (check.verdict, check.value) == ("n/a", None)


# --- inputs --------------------------------------------------------------------------------------

def test_accepts_a_pe_buffer_and_numpy():
    pe = PositionalEncoding(50, 8).pe  # [1, 50, 8]
    from_buffer = audit(pe)
    from_numpy = audit(pe[0].numpy())
    assert from_buffer.n_positions == from_numpy.n_positions == 50
    assert from_buffer.to_dict() == from_numpy.to_dict()


def test_max_positions_truncates_the_pairwise_checks():
    report = audit(sinusoidal(300, 8), max_positions=50)
    assert (report.n_positions, report.n_audited) == (300, 50)
    assert len(report["monotonic"].extra["mean_distance"]) == 49
    assert "first 50 of 300 positions" in report["shift_invariant"].detail
    assert "first 50 of 300 positions" in report.format()


def test_tiny_tables_are_na_not_pass():
    report = audit(sinusoidal(1, 4))
    assert [report[n].verdict for n in NAMES[1:5]] == ["n/a"] * 4
    assert report.passed


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(table=torch.zeros(2, 5, 4)), ValueError, r"table.*\[2, 5, 4\]"),
        (dict(table=torch.zeros(5)), ValueError, r"table.*\[5\]"),
        (dict(table=torch.zeros(0, 4)), ValueError, r"table.*\[0, 4\]"),
        (dict(table="sinusoidal"), TypeError, "table.*str"),
        (dict(table=torch.zeros(3, 2, dtype=torch.complex64)), TypeError, "table.*complex"),
        (dict(reference=torch.zeros(10, 7)), ValueError, r"reference.*\[10, 8\].*\[10, 7\]"),
        (dict(reference=[[0.0]]), TypeError, "reference.*list"),
        (dict(max_positions=0), ValueError, "max_positions.*0"),
        (dict(max_positions=2.5), TypeError, "max_positions.*2.5"),
        (dict(offsets=[1, 0]), ValueError, r"offsets\[1\].*0"),
        (dict(offsets=[-3]), ValueError, r"offsets\[0\].*-3"),
        (dict(offsets=[]), ValueError, "offsets"),
        (dict(offsets=4), TypeError, "offsets.*4"),
        (dict(offsets=[1.5]), TypeError, r"offsets\[0\].*1.5"),
        (dict(bound=0), ValueError, "bound.*0"),
    ],
)
def test_bad_arguments(kwargs, exc, words):
    kwargs.setdefault("table", sinusoidal(10, 8))
    with pytest.raises(exc, match=words):
        audit(**kwargs)


def test_non_finite_table_is_refused_with_its_position():
    table = sinusoidal(10, 8)
    table[6, 3] = float("nan")
    with pytest.raises(ValueError, match="table.*position 6, column 3"):
        audit(table)


# --- output --------------------------------------------------------------------------------------

def test_to_dict_round_trips_through_json():
    report = audit(fixed_base(200), reference=fixed_base(200, dtype=torch.float64))
    d = report.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert [c["name"] for c in d["checks"]] == NAMES
    assert d["passed"] is False
    by_name = {c["name"]: c for c in d["checks"]}
    assert by_name["unique"]["extra"]["pair"] == [0, 140]
    assert len(by_name["monotonic"]["extra"]["mean_distance"]) == 199
    assert len(by_name["shift_invariant"]["extra"]["spread"]) == 198


def test_format_is_a_table_with_every_property():
    report = audit(sinusoidal(10, 8))
    text = report.format()
    assert str(report) == text
    lines = text.splitlines()
    assert "property" in lines[1] and "verdict" in lines[1] and "detail" in lines[1]
    for name in NAMES:
        assert any(line.startswith(name) for line in lines), name
    assert "max |value| = 1.0000 <= 1" in text
