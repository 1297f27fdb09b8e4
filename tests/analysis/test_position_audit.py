"""audit_position: passes for every real scheme, fails for deliberately broken ones."""

import json

import pytest
import torch

from attnlab.analysis.position_audit import audit_position
from attnlab.encodings.alibi import ALiBi
from attnlab.encodings.cope import CoPE
from attnlab.encodings.relative import ShawRelative
from attnlab.encodings.rotary import Rotary
from attnlab.encodings.scheme import NoPosition, PositionScheme, bias_dtype
from attnlab.encodings.t5 import T5RelativeBias
from attnlab.encodings.xpos import XPos

CHECKS = ["offset_only", "norm_preserved", "shift_invariant", "offsets_consistent"]


class AbsoluteQueryBias(PositionScheme):
    """Broken: the bias grows with the query's absolute position."""

    adds_score = True

    def bias_at(self, q, *, q_pos, k_pos, k=None):
        pos = q_pos.to(bias_dtype(q.dtype))  # [T]
        return (0.01 * pos)[None, None, :, None].expand(1, 1, q.shape[2], k_pos.shape[0])


class GrowingRotary(Rotary):
    """Broken: rotates, then scales each vector by 1 + 0.001 * position."""

    def rotate(self, q, k, *, q_offset=0, k_offset=0):
        rq, rk = super().rotate(q, k, q_offset=q_offset, k_offset=k_offset)
        sq = 1 + 0.001 * torch.arange(q_offset, q_offset + q.shape[2], dtype=q.dtype)[:, None]
        sk = 1 + 0.001 * torch.arange(k_offset, k_offset + k.shape[2], dtype=k.dtype)[:, None]
        return rq * sq, rk * sk


class OffsetBlindRotary(Rotary):
    """Broken: ignores its offsets (every call starts at position 0), as a naive cache would."""

    def rotate(self, q, k, *, q_offset=0, k_offset=0):
        return super().rotate(q, k)


class AbsoluteValueTerm(ShawRelative):
    """Broken: the value term grows with the first query's position."""

    def value_term(self, weights, *, q_offset=0, k_offset=0):
        return super().value_term(weights, q_offset=q_offset, k_offset=k_offset) * (1 + 0.01 * q_offset)


class LimitedScheme(ALiBi):
    """A scheme with max_len = 40 that refuses positions beyond it."""

    max_len = 40

    def bias(self, q, n_keys, *, q_offset=0, k_offset=0, k=None):
        assert q_offset + q.shape[2] <= 40 and k_offset + n_keys <= 40, (q_offset, q.shape, k_offset, n_keys)
        return super().bias(q, n_keys, q_offset=q_offset, k_offset=k_offset, k=k)


class KeyCheckingRotary(Rotary):
    """Reads the keys (reads_keys, as CoPE): checks that bias gets the rotated queries and keys, as in attention."""

    reads_keys = True
    calls = 0

    def rotate(self, q, k, *, q_offset=0, k_offset=0):
        self.turned = super().rotate(q, k, q_offset=q_offset, k_offset=k_offset)
        return self.turned

    def bias(self, q, n_keys, *, q_offset=0, k_offset=0, k=None):
        assert k is not None, "a scheme with reads_keys must be given the keys"
        assert q is self.turned[0] and k is self.turned[1] and k.shape[2] == n_keys
        self.calls += 1
        return None


def verdicts(report):
    return {c.name: c.verdict for c in report.checks}


@pytest.mark.parametrize("scheme", [
    Rotary(16),
    Rotary(12, rotary_dim=8, convention="half", interpolation=2.0, ntk_factor=4.0),
    Rotary(8, angle_dtype=torch.float64),
], ids=["rotary", "rotary-half-partial-scaled", "rotary-float64"])
def test_rotary_passes_every_check(scheme):
    report = audit_position(scheme)
    assert [c.name for c in report.checks] == CHECKS
    assert verdicts(report) == dict.fromkeys(CHECKS, "pass")
    assert report.d_model == scheme.head_dim and report.n_positions == 256


@pytest.mark.parametrize("scheme", [ALiBi(4), T5RelativeBias(3), T5RelativeBias(2, bidirectional=False),
                                    ShawRelative(8, max_relative_position=3),
                                    ShawRelative(8, max_relative_position=3, on_values=False), NoPosition()],
                         ids=["alibi", "t5", "t5-causal", "shaw", "shaw-keys", "nope"])
def test_biases_pass_and_norms_are_not_applicable(scheme):
    report = audit_position(scheme, max_positions=64)
    assert report.passed
    assert verdicts(report) == {"offset_only": "pass", "norm_preserved": "n/a", "shift_invariant": "pass",
                                "offsets_consistent": "pass"}


def test_shaw_checks_the_value_term():
    report = audit_position(ShawRelative(8, max_relative_position=3), max_positions=64)
    assert "value term" in report["shift_invariant"].detail
    assert "value_error" in report["offsets_consistent"].extra


def test_absolute_bias_fails():
    report = audit_position(AbsoluteQueryBias(), max_positions=64)
    assert not report.passed
    assert verdicts(report) == {"offset_only": "fail", "norm_preserved": "n/a", "shift_invariant": "fail",
                                "offsets_consistent": "pass"}
    # score(i, i + d) grows by 0.01 per position: over 64 positions a spread of ~0.6
    assert report["offset_only"].value > 0.5
    assert "absolute position" in report["offset_only"].detail


def test_growing_rotation_fails_norms_and_offsets():
    v = verdicts(audit_position(GrowingRotary(8), max_positions=64))
    assert v["norm_preserved"] == "fail" and v["offset_only"] == "fail" and v["shift_invariant"] == "fail"


def test_offset_blind_rotary_fails_only_consistency():
    report = audit_position(OffsetBlindRotary(8), max_positions=64)
    assert verdicts(report) == {"offset_only": "pass", "norm_preserved": "pass", "shift_invariant": "pass",
                                "offsets_consistent": "fail"}
    assert report["offsets_consistent"].detail.startswith("offsets are not honoured")


def test_absolute_value_term_fails_shift_invariance():
    v = verdicts(audit_position(AbsoluteValueTerm(8, max_relative_position=2), max_positions=64))
    assert v["shift_invariant"] == "fail" and v["offset_only"] == "pass"


def test_max_len_is_respected():
    report = audit_position(LimitedScheme(2))
    assert report.passed and report.n_positions == 40
    assert report["shift_invariant"].extra["shifts"] == [1, 2, 5]


def test_deterministic_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a = audit_position(Rotary(8), max_positions=32, seed=3).to_dict()
    assert torch.equal(torch.get_rng_state(), state)
    b = audit_position(Rotary(8), max_positions=32, seed=3).to_dict()
    assert a == b
    json.dumps(a)  # serialisable, as the CLI's audit output is
    assert "offset_only" in audit_position(ALiBi(2), max_positions=16).format()


def test_sizes_come_from_the_scheme():
    assert audit_position(ALiBi(3), max_positions=8).d_model == 16  # default head_dim
    assert audit_position(NoPosition(), head_dim=4, n_heads=1, max_positions=8).d_model == 4


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: audit_position(torch.nn.Linear(2, 2)), TypeError, r"scheme.*Linear"),
    (lambda: audit_position(Rotary(8), head_dim=16), ValueError, r"head_dim=16.*head_dim=8"),
    (lambda: audit_position(ALiBi(4), n_heads=2), ValueError, r"n_heads=2.*n_heads=4"),
    (lambda: audit_position(ALiBi(4), max_positions=1), ValueError, r"max_positions.*1"),
    (lambda: audit_position(ALiBi(4), offsets=[0]), ValueError, r"offsets\[0\].*0"),
    (lambda: audit_position(ALiBi(4), offsets=[]), ValueError, r"offsets"),
    (lambda: audit_position(ALiBi(4), offsets="12"), TypeError, r"offsets.*'12'"),
    (lambda: audit_position(ALiBi(4), head_dim=2.5), TypeError, r"head_dim.*2\.5"),
])
def test_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_schemes_that_need_keys_get_the_rotated_keys():
    scheme = KeyCheckingRotary(8)
    report = audit_position(scheme, max_positions=32)
    assert scheme.calls > 10  # every score the audit computed asked for the bias, with the keys
    assert verdicts(report) == dict.fromkeys(CHECKS, "pass")


def test_xpos_scales_so_its_norms_fail_and_cope_counts_by_order_only():
    # xPos: scores depend on n - m only (rotation and decay), but the decay scales q and k.
    assert verdicts(audit_position(XPos(8), max_positions=64)) == {
        "offset_only": "pass", "norm_preserved": "fail", "shift_invariant": "pass", "offsets_consistent": "pass"}
    # CoPE (given keys by the audit): with one repeated query and key, the counted distance is (i - j + 1) g.
    cope = CoPE(8, npos_max=6)
    with torch.no_grad():
        cope.pos_emb.normal_(generator=torch.Generator().manual_seed(0))
    report = audit_position(cope, max_positions=64)
    assert verdicts(report) == {"offset_only": "pass", "norm_preserved": "n/a", "shift_invariant": "pass",
                                "offsets_consistent": "pass"}
    assert report["offset_only"].extra["uses"] == ["bias"]


class Window(ALiBi):
    """A sliding window over ALiBi: keys farther than ``width`` get -inf (masked), as a local-attention bias does."""

    def __init__(self, n_heads, width):
        super().__init__(n_heads)
        self.width = width

    def bias(self, q, n_keys, *, q_offset=0, k_offset=0, k=None):
        term = super().bias(q, n_keys, q_offset=q_offset, k_offset=k_offset, k=k)  # [1, H, T, S]
        i = torch.arange(q_offset, q_offset + q.shape[2])[:, None]
        j = torch.arange(k_offset, k_offset + n_keys)[None, :]
        return term.masked_fill((i - j).abs() > self.width, float("-inf"))


class WindowFromAbsolutePosition(Window):
    """Broken: the window masks by the query's absolute position (-inf past position 20), not by distance."""

    def bias(self, q, n_keys, *, q_offset=0, k_offset=0, k=None):
        term = super().bias(q, n_keys, q_offset=q_offset, k_offset=k_offset, k=k)
        i = torch.arange(q_offset, q_offset + q.shape[2])[:, None]
        return term.masked_fill(i.expand_as(term[0, 0]) > 20, float("-inf"))


class NaNBias(ALiBi):
    """Broken: a NaN term at one pair."""

    def bias(self, q, n_keys, *, q_offset=0, k_offset=0, k=None):
        term = super().bias(q, n_keys, q_offset=q_offset, k_offset=k_offset, k=k).clone()
        if q.shape[2] > 3 and n_keys > 2:
            term[..., 3, 2] = float("nan")
        return term


# -inf - -inf is NaN: a scheme with -inf terms (a window, a mask) was reported "fail" with a NaN value.
@pytest.mark.parametrize("scheme", [Window(4, 3), Window(2, 0), Window(4, 100)], ids=["w3", "w0", "w100"])
def test_equal_infinities_are_equal(scheme):
    report = audit_position(scheme, max_positions=64)
    assert verdicts(report) == {"offset_only": "pass", "norm_preserved": "n/a", "shift_invariant": "pass",
                                "offsets_consistent": "pass"}, [c.detail for c in report.checks]
    assert all(c.value is None or c.value == c.value for c in report.checks)  # no NaN
    assert report["offset_only"].tolerance < 1e-2  # the scale is the finite terms', not inf


def test_an_infinity_where_the_other_is_finite_still_fails():
    report = audit_position(WindowFromAbsolutePosition(4, 3), max_positions=64)
    assert verdicts(report)["offset_only"] == "fail" and verdicts(report)["shift_invariant"] == "fail"


def test_a_nan_term_still_fails():
    report = audit_position(NaNBias(4), max_positions=64)
    assert not report.passed
