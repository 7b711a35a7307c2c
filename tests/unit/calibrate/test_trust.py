"""The trust verdict's statistics (calibrate/trust.py), PPI++ (calibrate/ppi.py) and the label chooser
(calibrate/choose.py), against hand-computed values and their defining properties."""

from __future__ import annotations

import math

import pytest

from pytest_aimeasure.calibrate.agreement import mean_ci, weighted_kappa
from pytest_aimeasure.calibrate.choose import Candidate, pick
from pytest_aimeasure.calibrate.ppi import human_only, ppi_mean, slope, to_human, tuned_lambda
from pytest_aimeasure.calibrate.trust import kappa_ci, label_budget, verdict

HUMAN = [1, 2, 3, 4, 5, 2, 3, 4, 1, 5, 3, 2, 4, 3, 5]
JUDGE = [1, 2, 4, 4, 5, 3, 3, 4, 2, 4, 3, 2, 5, 3, 5]


def test_kappa_interval_is_the_jackknife_on_fishers_z() -> None:
    ci = kappa_ci(HUMAN, JUDGE)
    assert ci is not None
    kappa = weighted_kappa(HUMAN, JUDGE)
    assert ci.kappa == kappa and ci.low < kappa < ci.high <= 1
    zs = [
        math.atanh(weighted_kappa(HUMAN[:i] + HUMAN[i + 1 :], JUDGE[:i] + JUDGE[i + 1 :]) or 0)
        for i in range(15)
    ]
    mz = sum(zs) / 15
    se = math.sqrt(14 / 15 * sum((z - mz) ** 2 for z in zs))
    assert ci.se_z == pytest.approx(se)
    assert math.atanh(ci.high) - math.atanh(kappa) == pytest.approx(2.144787 * se, rel=1e-5)  # t(14)
    assert math.atanh(kappa) - math.atanh(ci.low) == pytest.approx(2.144787 * se, rel=1e-5)


def test_a_perfect_table_gets_a_lower_bound_below_one() -> None:
    ci = kappa_ci([1, 2, 3, 4, 5] * 3, [1, 2, 3, 4, 5] * 3)
    assert ci is not None and ci.high == 1.0 and 0.6 < ci.low < 1.0


# The adventure example's voice anchors: five leaks both sides put at 2, seven clean lines the judge
# puts at 5, where the humans say 5 but once 4. Leaving that one anchor out leaves a perfect table.
ONE_OFF_HUMAN = [2, 2, 2, 2, 2, 5, 5, 4, 5, 5, 5, 5]
ONE_OFF_JUDGE = [2, 2, 2, 2, 2, 5, 5, 5, 5, 5, 5, 5]


def test_one_disagreeing_anchor_gets_an_interval_near_its_kappa() -> None:
    ci = kappa_ci(ONE_OFF_HUMAN, ONE_OFF_JUDGE)
    assert ci is not None and ci.kappa == pytest.approx(50 / 51)  # Σw·O = 1/16/12, Σw·E = 51/16/12
    # The jackknife's SE on κ's scale, carried to z at κ: a leave-one-out κ of 1 has no finite z.
    leave_out = [
        weighted_kappa(ONE_OFF_HUMAN[:i] + ONE_OFF_HUMAN[i + 1 :], ONE_OFF_JUDGE[:i] + ONE_OFF_JUDGE[i + 1 :])
        for i in range(12)
    ]
    assert leave_out[7] == 1.0
    ks = [k for k in leave_out if k is not None]
    mk = sum(ks) / 12
    se_kappa = math.sqrt(11 / 12 * sum((k - mk) ** 2 for k in ks))
    assert ci.se_z == pytest.approx(se_kappa / (1 - ci.kappa**2))
    half = 2.200985 * ci.se_z  # t(11)
    assert ci.low == pytest.approx(math.tanh(math.atanh(ci.kappa) - half), rel=1e-5)
    assert ci.high == pytest.approx(math.tanh(math.atanh(ci.kappa) + half), rel=1e-5)
    # Narrow (it was [-1.00, 1.00]), yet one seen disagreement leaves more doubt than none.
    perfect = kappa_ci(ONE_OFF_JUDGE, ONE_OFF_JUDGE)
    assert perfect is not None and perfect.kappa == 1.0
    assert 0.8 < ci.low < perfect.low < ci.kappa < ci.high < 1.0


def test_one_disagreeing_anchor_decides_the_verdict_at_a_lower_threshold() -> None:
    ci = kappa_ci(ONE_OFF_HUMAN, ONE_OFF_JUDGE)
    assert ci is not None
    unbiased = mean_ci([0.0, 0.1, -0.1, 0.0, 0.05, -0.05])
    assert verdict(ci, unbiased, min_kappa=0.8, max_abs_bias=0.5).verdict == "trusted"
    found = verdict(ci, unbiased, min_kappa=0.9, max_abs_bias=0.5)
    assert found.verdict == "inconclusive" and found.budget is not None and 12 < found.budget < 100


def test_verdicts() -> None:
    ci = kappa_ci(HUMAN, JUDGE)
    assert ci is not None
    unbiased = mean_ci([0.0, 0.1, -0.1, 0.0, 0.05, -0.05])
    assert verdict(ci, unbiased, min_kappa=0.5, max_abs_bias=0.5).verdict == "trusted"
    assert verdict(ci, unbiased, min_kappa=0.99, max_abs_bias=0.5).verdict == "untrusted"
    found = verdict(ci, unbiased, min_kappa=ci.kappa - 0.1, max_abs_bias=0.5)
    assert found.verdict == "inconclusive" and found.budget is not None and found.budget > 15
    probe = verdict(ci, unbiased, min_kappa=0.5, max_abs_bias=0.5, failed_probes=["length"])
    assert probe.verdict == "untrusted" and probe.reasons == ["the length probe found a bias"]
    high = mean_ci([1.0, 0.9, 1.1, 1.0])
    assert verdict(ci, high, min_kappa=0.5, max_abs_bias=0.5).verdict == "untrusted"


def test_no_budget_when_the_estimate_sits_on_the_threshold() -> None:
    ci = kappa_ci(HUMAN, JUDGE)
    assert ci is not None
    assert label_budget(ci, mean_ci([0.0, 0.1, -0.1]), ci.kappa, 0.5) is None
    # Farther from the threshold, fewer anchors decide it.
    near = label_budget(ci, mean_ci([0.0, 0.1, -0.1]), ci.kappa - 0.1, 5.0)
    far = label_budget(ci, mean_ci([0.0, 0.1, -0.1]), ci.kappa - 0.2, 5.0)
    assert near is not None and far is not None and far < near


def test_ppi_at_fixed_lambda_is_the_judge_mean_minus_the_bias_or_the_humans_mean() -> None:
    human, judge, items = [2.0, 3.0, 4.0, 3.0], [3.0, 4.0, 5.0, 4.0], [4.0, 4.5, 3.5, 5.0, 4.0]
    one = ppi_mean(items, human, judge, lam=1.0)
    assert one is not None and one.mean == pytest.approx(sum(items) / 5 - 1.0)
    zero = ppi_mean(items, human, judge, lam=0.0)
    alone = human_only(human)
    assert zero is not None and alone is not None
    assert zero.mean == pytest.approx(alone[0]) and zero.lam == 0.0


def test_tuned_lambda_is_ppi_plus_plus() -> None:
    human, judge, items = [1.0, 2.0, 4.0, 3.0], [2.0, 2.0, 5.0, 4.0], [3.0, 4.0]
    cov = sum((h - 2.5) * (j - 3.25) for h, j in zip(human, judge, strict=True)) / 4
    values = judge + items
    var = sum((v - sum(values) / 6) ** 2 for v in values) / 5
    assert tuned_lambda(human, judge, items) == pytest.approx(min(1, cov / ((1 + 4 / 2) * var)))
    assert slope(human, judge) == pytest.approx(min(1, cov / (sum((j - 3.25) ** 2 for j in judge) / 4)))
    assert to_human(3.25, human, judge) == pytest.approx(2.5)  # the judge's anchor mean maps to the humans'


def test_pick_prefers_unsure_items_then_uncovered_levels() -> None:
    sure = [Candidate((4, 4), 4.0, 4.0, 3.0) for _ in range(3)]
    straddling = Candidate((2, 4), 1.0, 5.0, 3.0)
    escalated = Candidate((3, 3), 3.0, 3.0, 3.0, escalated=True)
    low = Candidate((1, 1), 1.0, 1.0, 3.0)
    order = pick([*sure, straddling, escalated, low], 4, covered={4: 5})
    assert set(order[:2]) == {3, 4}  # the straddling and the escalated one
    assert order[2] == 5  # then the uncovered level 1 before a fourth level-4 item
    assert "escalated" in escalated.reasons(0) and "straddle" in straddling.reasons(0)[0]
