"""The instrument's formulas, checked against published tables and hand-computed data."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pytest_aimeasure.measure.stats import (
    VAR_FLOOR_DEFAULT,
    Prior,
    dimension_stats,
    drift,
    generations,
    holm,
    item_drifts,
    item_stats,
    regression_power,
    session_history,
    t_cdf,
    t_ppf,
    t_sf,
    t_two_sided_p,
)

# --------------------------------------------------------------------------------------------------
# Student t
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.7062),
        (0.975, 2, 4.3027),
        (0.975, 10, 2.2281),
        (0.95, 5, 2.0150),
        (0.80, 4, 0.9410),
        (0.975, 4, 2.7764),
        (0.975, 20, 2.0860),
        (0.95, 20, 1.7247),
        (0.995, 3, 5.8409),
        (0.90, 30, 1.3104),
    ],
)
def test_t_ppf_matches_the_printed_table(p: float, df: float, expected: float) -> None:
    assert t_ppf(p, df) == pytest.approx(expected, abs=1e-4)
    assert t_ppf(1 - p, df) == pytest.approx(-expected, abs=1e-4)


def test_t_ppf_infinite_df_is_the_normal_quantile() -> None:
    assert t_ppf(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert t_ppf(0.5, 7) == 0.0


def test_t_ppf_fractional_df_lies_between_its_integer_neighbours() -> None:
    assert t_ppf(0.975, 3) > t_ppf(0.975, 3.5) > t_ppf(0.975, 4)


@pytest.mark.parametrize(("p", "df"), [(0.0, 3), (1.0, 3), (0.5, 0), (0.5, -1), (0.5, math.nan)])
def test_t_ppf_rejects_bad_arguments(p: float, df: float) -> None:
    with pytest.raises(ValueError):
        t_ppf(p, df)


def test_t_tails_invert_the_quantile() -> None:
    for df in (1, 2.5, 4, 9, 60):
        for p in (0.6, 0.8, 0.95, 0.999):
            t = t_ppf(p, df)
            assert t_cdf(t, df) == pytest.approx(p, abs=1e-10)
            assert t_sf(t, df) == pytest.approx(1 - p, abs=1e-10)
    assert t_sf(0.0, 3) == 0.5
    assert t_two_sided_p(2.2281, 10) == pytest.approx(0.05, abs=1e-4)
    assert t_two_sided_p(-2.2281, 10) == pytest.approx(0.05, abs=1e-4)


def test_t_against_scipy_on_a_grid() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 1.5, 2, 3, 4.5, 7, 12, 30, 100, 1000, 1e6):
        for p in (1e-5, 0.001, 0.025, 0.05, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.975, 0.99, 0.9999):
            assert t_ppf(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-7, abs=1e-7)
        for t in (-12.0, -2.0, -0.3, 0.0, 0.7, 2.5, 40.0):
            assert t_sf(t, df) == pytest.approx(scipy_stats.t.sf(t, df), rel=1e-7, abs=1e-12)


# --------------------------------------------------------------------------------------------------
# Item and dimension statistics
# --------------------------------------------------------------------------------------------------


def test_item_stats_hand_computed() -> None:
    st = item_stats([3, 4, 5])
    assert (st.mean, st.var, st.sd, st.n, st.df) == (4.0, 1.0, 1.0, 3, 2.0)
    half = 4.3027 * math.sqrt(1 / 3)
    assert st.half == pytest.approx(half, abs=1e-3)
    assert st.ci_low == pytest.approx(4 - half, abs=1e-3)
    assert st.ci_high == 5.0  # 4 + 2.48, cut to the scale


def test_item_stats_identical_samples_use_the_variance_floor() -> None:
    st = item_stats([4, 4, 4])
    assert (st.var, st.sd) == (0.0, 0.0)  # reported raw...
    half = 4.3027 * math.sqrt(VAR_FLOOR_DEFAULT / 3)  # ...but the interval is not zero-width
    assert st.ci_high - st.mean == pytest.approx(half, abs=1e-3)
    assert half == pytest.approx(0.7172, abs=1e-3)


def test_item_stats_floor_only_applies_when_larger() -> None:
    assert item_stats([3, 4, 5], var_floor=2.0).half == pytest.approx(4.3027 * math.sqrt(2 / 3), abs=1e-3)
    assert item_stats([3, 4, 5], var_floor=0.5).half == pytest.approx(4.3027 * math.sqrt(1 / 3), abs=1e-3)


def test_item_stats_single_sample_gets_df_1_and_a_wide_interval() -> None:
    st = item_stats([3])
    assert (st.var, st.df) == (0.0, 1.0)
    assert st.half == pytest.approx(12.7062 * math.sqrt(1 / 12), abs=1e-3)
    assert (st.ci_low, st.ci_high) == (1.0, 5.0)  # ±3.67 around 3: cut to the scale


def test_item_stats_confidence_level() -> None:
    st = item_stats([3, 4, 5], confidence=0.90)
    assert st.half == pytest.approx(2.9200 * math.sqrt(1 / 3), abs=1e-3)
    with pytest.raises(ValueError):
        item_stats([])
    with pytest.raises(ValueError):
        item_stats([3], confidence=1.0)


def test_dimension_stats_hand_computed() -> None:
    st = dimension_stats([[3, 4, 5], [4, 4, 4], [2, 3, 4]])
    assert st.mean == pytest.approx(11 / 3)
    assert (st.m, st.n_samples) == (3, 9)
    assert st.var_within_raw == pytest.approx(2 / 3)  # mean of 1, 0, 1
    assert st.se_meas == pytest.approx(math.sqrt((2 / 3) / (3 * 3)))
    assert st.df_meas == 6.0
    assert st.sd_items == pytest.approx(math.sqrt(1 / 3))
    assert st.se_items is None  # m < 5
    assert st.se_source == "measurement"
    assert st.ci_high - st.mean == pytest.approx(2.4469 * st.se_meas, abs=1e-4)


def test_dimension_stats_repeats_are_not_items() -> None:
    # An item with 9 samples weighs the same as one with 3: the mean is over item means.
    assert dimension_stats([[5] * 9, [1, 1, 1]]).mean == 3.0


def test_dimension_stats_identical_scores_are_floored() -> None:
    st = dimension_stats([[4, 4, 4]] * 5)
    assert (st.var_within_raw, st.var_within) == (0.0, VAR_FLOOR_DEFAULT)
    assert st.se_meas == pytest.approx(math.sqrt(VAR_FLOOR_DEFAULT / 15))
    assert st.se_items == 0.0
    assert st.se_source == "measurement"


def test_dimension_stats_item_spread_wins_when_larger() -> None:
    st = dimension_stats([[1, 1, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4], [5, 5, 5]])
    assert st.se_items == pytest.approx(math.sqrt(2.5) / math.sqrt(5))
    assert (st.se_source, st.df) == ("items", 4.0)
    assert st.ci_high - 3 == pytest.approx(2.7764 * math.sqrt(0.5), abs=1e-3)


def test_dimension_stats_unequal_n() -> None:
    # Pooled variance is df-weighted (the single-sample item adds none); SE_meas = sqrt(σ²·Σ1/n_i)/m.
    st = dimension_stats([[3, 5], [4]])
    assert (st.var_within_raw, st.df_meas) == (2.0, 1.0)
    assert st.se_meas == pytest.approx(math.sqrt(2.0 * (1 / 2 + 1)) / 2)


# --------------------------------------------------------------------------------------------------
# Drift
# --------------------------------------------------------------------------------------------------

BASE = [[4, 4, 5], [3, 4, 4], [4, 5, 5], [3, 3, 4], [4, 4, 4]]
DROPPED = [[s - 1 for s in item] for item in BASE]
SE_BASE = math.sqrt((16 / 3 / 20) * (1 / 3 + 1 / 3) / 5)  # Σ(n−1)v = 16/3 over both runs, df 20


def test_drift_true_drop_of_one_across_five_items_is_regressed() -> None:
    d = drift(BASE, DROPPED, tolerance=0.5)
    assert d.verdict == "regressed"
    assert d.delta == pytest.approx(-1.0)
    assert (d.m, d.df) == (5, 20.0)
    assert d.se == pytest.approx(SE_BASE)
    assert d.ci95[1] == pytest.approx(-1.0 + 2.0860 * SE_BASE, abs=1e-4)
    assert d.ci95[1] < 0
    assert d.p_value == pytest.approx(t_cdf(-1.0 / SE_BASE, 20))
    assert d.p_value < 0.025
    # Found 80% of the time: D ≤ −0.5 binds here (2.086·SE < 0.5), so 0.5 + t_0.80·SE.
    assert d.mde == pytest.approx(0.5 + 0.8600 * SE_BASE, abs=1e-3)
    assert d.power == pytest.approx(0.5)  # a drop of exactly the tolerance: D ≤ −0.5 half the time
    # Significance alone would see a drop of 0.5 only P(T_20 ≤ 0.5/SE − 2.086) ≈ 71% of the time.
    assert d.underpowered
    assert d.se_source == "within"  # every item dropped by exactly 1: no paired spread
    assert d.base_mean == pytest.approx(4.0)
    assert d.new_mean == pytest.approx(3.0)


def test_drift_identical_runs_are_stable() -> None:
    d = drift(BASE, BASE, tolerance=0.5)
    assert d.verdict == "stable"
    assert d.delta == 0.0
    assert d.ci90[0] == pytest.approx(-1.7247 * SE_BASE, abs=1e-4)
    assert d.ci90[1] == pytest.approx(1.7247 * SE_BASE, abs=1e-4)
    assert d.p_value == pytest.approx(0.5)


def test_drift_identical_constant_scores_are_stable_thanks_to_the_floor() -> None:
    d = drift([[4, 4, 4]] * 5, [[4, 4, 4]] * 5, tolerance=0.5)
    assert d.var_within == VAR_FLOOR_DEFAULT
    assert d.se > 0
    assert d.verdict == "stable"


def test_drift_improvement_is_improved() -> None:
    d = drift(DROPPED, BASE, tolerance=0.5)
    assert d.verdict == "improved"
    assert d.ci95[0] > 0
    assert d.p_value > 0.975


def test_drift_small_noisy_change_is_inconclusive_and_underpowered() -> None:
    d = drift([[3, 4, 5]], [[3, 3, 4]], tolerance=0.5)
    assert d.verdict == "inconclusive"
    assert d.delta == pytest.approx(-2 / 3)
    se = math.sqrt((2 / 3) * (2 / 3))  # σ²_w = (2·1 + 2·1/3)/4
    assert d.se == pytest.approx(se)
    assert d.df == 4.0
    assert d.mde == pytest.approx((2.7764 + 0.9410) * se, abs=1e-3)
    assert d.underpowered


def test_drift_clear_drop_inside_the_tolerance_is_stable_not_regressed() -> None:
    # Significant (CI excludes 0) but smaller than the tolerance: equivalence wins, by design.
    base = [[4] * 10] * 10
    new = [[4] * 6 + [3] * 4] * 10
    d = drift(base, new, tolerance=0.5)
    assert d.delta == pytest.approx(-0.4)
    assert d.ci95[1] < 0
    assert d.verdict == "stable"
    assert not d.underpowered


def test_drift_drop_past_tolerance_but_not_significant_is_inconclusive() -> None:
    d = drift([[5, 1, 5]], [[1, 5, 3]], tolerance=0.5)
    assert d.delta <= -0.5
    assert d.ci95[1] > 0
    assert d.verdict == "inconclusive"


def test_drift_unequal_sample_counts() -> None:
    d = drift([[4, 5], [3]], [[3], [3, 3, 4]], tolerance=0.5)
    assert d.df == 1.0  # m − 1 (the within term would have had (2−1) + (1−1) + (1−1) + (3−1) = 3)
    assert d.var_within == pytest.approx((0.5 + 2 * (1 / 3)) / 3)
    assert d.delta == pytest.approx(((3 - 4.5) + (10 / 3 - 3)) / 2)
    assert d.se_within == pytest.approx(math.sqrt(d.var_within * ((1 / 2 + 1) + (1 + 1 / 3))) / 2)
    # The two differences (−1.5, +1/3) disagree more than the samples do: the paired spread wins.
    assert d.se_source == "paired" and d.df == 1.0
    assert d.se == pytest.approx(math.sqrt(((-1.5 - 1 / 3) ** 2 / 2) / 2))


def test_drift_rejects_unpaired_input() -> None:
    with pytest.raises(ValueError, match="pairs items by position"):
        drift([[4]], [[4], [3]], tolerance=0.5)
    with pytest.raises(ValueError):
        drift([], [], tolerance=0.5)
    with pytest.raises(ValueError):
        drift([[4]], [[]], tolerance=0.5)
    with pytest.raises(ValueError):
        drift([[4]], [[4]], tolerance=-0.1)


# --------------------------------------------------------------------------------------------------
# Holm
# --------------------------------------------------------------------------------------------------


def test_holm_textbook_example() -> None:
    # The four-hypothesis example of Holm's method: thresholds .0125, .0167, .025, .05.
    assert holm([0.01, 0.04, 0.03, 0.005], alpha=0.05) == [True, False, False, True]


def test_holm_rejects_more_than_bonferroni() -> None:
    assert holm([0.02, 0.03], alpha=0.05) == [True, True]  # Bonferroni (.025 each) keeps 0.03


def test_holm_stops_at_the_first_failure() -> None:
    # 0.049 would pass its own threshold (.05), but the step-down stops at 0.02 > .0167.
    assert holm([0.02, 0.04, 0.049], alpha=0.05) == [False, False, False]
    assert holm([0.001, 0.5, 0.011], alpha=0.05) == [True, False, True]


def test_holm_edge_cases() -> None:
    assert holm([]) == []
    assert holm([0.05]) == [True]
    assert holm([0.0500001]) == [False]
    with pytest.raises(ValueError):
        holm([0.01], alpha=0)


# --------------------------------------------------------------------------------------------------
# The noise model of issue 14: ties, paired spread, history, power
# --------------------------------------------------------------------------------------------------


def test_a_drop_of_exactly_the_tolerance_in_floating_point_is_a_drop_of_the_tolerance() -> None:
    # Six items whose means drop by 2/3, 1, 1/3, 1/3, 0 and 2/3: D is −1/2 exactly, but computed
    # in floating point it is −0.49999999999999983, which "D ≤ −0.5" used to call inconclusive.
    base = [[4, 4, 5], [4, 4, 4], [5, 4, 4], [5, 4, 4], [4, 4, 4], [4, 4, 5]]
    new = [[3, 4, 4], [3, 3, 3], [4, 4, 4], [4, 4, 4], [4, 4, 4], [3, 3, 5]]
    d = drift(base, new, tolerance=0.5)
    assert -0.5 < d.delta < -0.5 + 1e-12
    assert d.ci95[1] < 0
    assert d.verdict == "regressed"
    up = drift(new, base, tolerance=0.5)
    assert 0.5 - 1e-12 < up.delta < 0.5
    assert up.verdict == "improved"


def test_paired_spread_carries_what_moves_items_between_sessions() -> None:
    # Temperature-0 judge: every item's samples agree, but items moved ±1 between the sessions.
    base = [[4, 4, 4]] * 10
    new = [[5, 5, 5], [3, 3, 3]] * 5
    d = drift(base, new, tolerance=0.5)
    assert d.delta == 0.0
    assert d.se_source == "paired" and d.df == 9.0
    assert d.se == pytest.approx(math.sqrt((10 / 9) / 10))
    assert d.se > d.se_within  # the within-only SE (floored) would claim far more precision
    assert d.verdict == "inconclusive"  # not "stable": ±1 moves at m = 10 cannot prove equivalence


def test_item_drifts_take_their_spread_from_the_other_items() -> None:
    base = [[4, 4, 4]] * 6
    new = [[5, 5, 5], [3, 3, 3], [5, 5, 5], [3, 3, 3], [4, 4, 4], [2, 2, 2]]
    results = item_drifts(base, new, tolerances=[0.5] * 6)
    last = results[-1]
    others = [1, -1, 1, -1, 0]
    mean = sum(others) / 5
    loo = sum((x - mean) ** 2 for x in others) / 4
    assert (last.se_source, last.df) == ("paired", 4.0)
    assert last.se == pytest.approx(math.sqrt(loo))
    assert last.verdict == "inconclusive"  # −2 is within what items do between sessions here
    # With one item there is nothing to borrow from: the item test is the dimension test.
    (single,) = item_drifts([[4, 4, 4]], [[3, 3, 3]], tolerances=[0.5])
    assert single == drift([[4, 4, 4]], [[3, 3, 3]], tolerance=0.5)


def test_session_history_separates_item_movement_from_a_shared_shift() -> None:
    # Three items over four sessions; session 3 is 1 point up on every item.
    sessions = [
        [[3, 3], [4, 4], [2, 2]],
        [[3, 3], [4, 4], [2, 2]],
        [[3, 3], [4, 4], [2, 2]],
        [[4, 4], [5, 5], [3, 3]],
    ]
    h = session_history(sessions)
    assert h is not None and (h.sessions, h.core_items) == (4, 3)
    assert h.var_session == pytest.approx(0.25)  # session means 3, 3, 3, 4
    assert h.var_shared == pytest.approx(0.25)  # no residual: all of it is shared
    assert h.var_item == pytest.approx(0.25) and h.df_item == 9.0
    assert session_history(sessions[:1]) is None
    # A missing item leaves the core but still feeds the per-item variance.
    partial = session_history([[[3], None], [[4], [2]], [[3], [2]]])
    assert partial is not None and partial.core_items == 1 and partial.df_item == 3.0


def test_history_widens_the_error_bar_by_the_shared_session_shift() -> None:
    base = [[4, 4, 4]] * 8
    new = [[3, 3, 3]] * 8  # every item down one point
    alone = drift(base, new, tolerance=0.5)
    assert alone.verdict == "regressed"
    past = session_history([[[4, 4, 4]] * 8, [[4, 4, 4]] * 8, [[5, 5, 5]] * 8, [[3, 3, 3]] * 8])
    assert past is not None and past.var_shared > 0.4
    seen = drift(base, new, tolerance=0.5, history=past)
    # Whole sessions moved by a point before: a one-point move of all items is not evidence now.
    assert seen.se > alone.se and seen.verdict == "inconclusive"


def test_power_is_quoted_at_the_level_the_test_starts_at() -> None:
    se, df = 0.0707, 160.0  # m = 20, N = 5, judge σ 0.5: the example
    alone = regression_power(se, df, 0.5)
    assert alone.at_tolerance == pytest.approx(0.5)  # D ≤ −0.5 at a true drop of 0.5: a coin flip
    assert alone.mde == pytest.approx(0.5 + t_ppf(0.8, df) * se)
    assert not alone.underpowered
    # Noisier: significance binds, and a smaller level binds harder.
    one = regression_power(0.3, 20.0, 0.5)
    small = regression_power(0.3, 20.0, 0.5, level=0.025 / 21)
    assert small.at_tolerance < one.at_tolerance < 0.5
    assert small.mde > one.mde > 0.5
    assert small.underpowered and one.underpowered
    # The figure is the verdict's real probability: check it against the rule itself.
    c = max(0.5, t_ppf(1 - 0.025 / 21, 20.0) * 0.3)
    assert small.at_tolerance == pytest.approx(t_cdf((0.5 - c) / 0.3, 20.0))


# --------------------------------------------------------------------------------------------------
# Issue 19: what a one-session baseline does not know, generation repeats, the shift pretest
# --------------------------------------------------------------------------------------------------


def test_an_item_test_carries_a_between_session_prior_so_n_cannot_make_it_overconfident() -> None:
    # N = 5, a one-session baseline, nine items unchanged and one a point lower (cause 2 of issue 19).
    base = [[4] * 5] * 10
    new = [[4] * 5] * 9 + [[3] * 5]
    bare = item_drifts(base, new, tolerances=[0.5] * 10)[-1]
    assert bare.verdict == "regressed"  # the other items' spread is 0: the judge's floor alone decides
    prior = Prior()
    item = item_drifts(base, new, tolerances=[0.5] * 10, prior=prior)[-1]
    assert item.se_source == "prior" and item.shared_source == "prior"
    assert item.se == pytest.approx(math.sqrt(2 * prior.item_var + 2 * prior.shared_var))
    assert item.verdict == "inconclusive"
    # More samples do not shrink it: the prior is what N cannot measure.
    more = item_drifts([[4] * 20] * 10, [[4] * 20] * 9 + [[3] * 20], tolerances=[0.5] * 10, prior=prior)
    assert more[-1].se == pytest.approx(item.se)


def test_generations_measure_the_spread_of_repeat_means() -> None:
    g = generations([[[4, 4], [2, 2], [3, 3]]], [[5], [3]])
    # Baseline repeat means 4, 2, 3 (ss 2, df 2); now 5, 3 (ss 2, df 1).
    assert (g.ss, g.df, g.base, g.new) == (pytest.approx(4.0), 3, 3, 2)
    assert generations([[[4, 4, 4]]], [[4, 4, 4]]).df == 0  # no repeats: nothing measured


def test_repeats_set_the_between_session_term_and_a_one_session_baseline_keeps_the_shared_prior() -> None:
    base = [[4, 4, 4, 3, 3, 3, 5, 5, 5]] * 5  # three generations an item, a temperature-0 judge
    new = [[3, 3, 3, 2, 2, 2, 4, 4, 4]] * 5
    gens = [generations([[[4, 4, 4], [3, 3, 3], [5, 5, 5]]], [[3, 3, 3], [2, 2, 2], [4, 4, 4]])] * 5
    measured = drift(base, new, tolerance=0.5, generations=gens)
    d = drift(base, new, tolerance=0.5, generations=gens, prior=Prior())
    assert measured.se_source == d.se_source == "repeats"
    # Repeat means spread with variance 1 (df 2 a session, 20 in all): var(D) = 1·(1/3 + 1/3)/5 = 2/15,
    # pooled by df with the paired spread (every item moved alike: 0, df 4): (20·2/15 + 4·0)/24 = 1/9.
    assert measured.se == pytest.approx(math.sqrt(1 / 9)) and measured.df == 24
    # Every repeat of the baseline's one session shares that session's shift: repeats do not measure
    # it, so the prior's 2·σ²_c is added, a known constant (df 24·((1/9 + 0.08)/(1/9))² = 71.04).
    assert d.shared_source == "prior" and d.var_shared == pytest.approx(2 * Prior().shared_var)
    assert d.se == pytest.approx(math.sqrt(1 / 9 + 2 * Prior().shared_var))
    assert d.df == 71
    assert d.verdict == "regressed"


def test_a_one_session_baseline_without_repeats_assumes_a_session_wide_shift() -> None:
    base = [[4, 4, 4]] * 8
    new = [[3, 3, 3]] * 8
    bare = drift(base, new, tolerance=0.5)
    assumed = drift(base, new, tolerance=0.5, prior=Prior())
    assert bare.shared_source is None and assumed.shared_source == "prior"
    assert assumed.var_shared == pytest.approx(2 * Prior().shared_var)
    assert assumed.se == pytest.approx(math.sqrt(bare.se**2 + 2 * Prior().shared_var))


def test_history_adds_a_session_wide_shift_only_when_its_f_test_sees_one() -> None:
    # Comparing two measurements of the same artifacts (no prior) assumes nothing: three items over
    # four sessions moving independently show no shared shift, and its estimate is not added.
    quiet = session_history([[[3], [4], [2]], [[4], [4], [3]], [[3], [5], [2]], [[4], [4], [2]]])
    assert quiet is not None and quiet.shared_p is not None and quiet.shared_p > 0.25
    bare = drift([[3], [4], [2]], [[3], [4], [2]], tolerance=0.5, history=quiet)
    assert (bare.shared_source, bare.var_shared) == ("history", 0.0)
    # Every item up a point in one session: a shift, added.
    loud = session_history([[[3], [4], [2]], [[3], [4], [2]], [[3], [4], [2]], [[4], [5], [3]]])
    assert loud is not None and loud.shared_p == 0.0
    bare = drift([[3], [4], [2]], [[3], [4], [2]], tolerance=0.5, history=loud)
    assert bare.shared_source == "history" and bare.var_shared == pytest.approx(2 * loud.var_shared)


def test_a_few_pooled_sessions_update_the_priors_session_wide_shift_by_what_they_measured() -> None:
    # Four sessions whose items move independently: the shift's estimate is 0 (3 df). The floor this
    # replaced (sd 0.1, a known constant) let a shift of sd 0.2 through whenever a few sessions
    # happened to show none; the prior (sd 0.2, worth 4 df) is updated by the 3 df measured instead.
    quiet = session_history([[[3], [4], [2]], [[4], [4], [3]], [[3], [5], [2]], [[4], [4], [2]]])
    assert quiet is not None and quiet.var_shared == 0.0 and quiet.df_shared == 3
    d = drift([[3], [4], [2]], [[3], [4], [2]], tolerance=0.5, history=quiet, prior=Prior())
    assert d.shared_source == "history"
    assert d.var_shared == pytest.approx(2 * (4 * Prior().shared_var + 3 * 0.0) / 7)  # (1 + 1/P) = 2
    # The blend has 4 + 3 df: it is an estimate, and the df of SE² say so (Welch–Satterthwaite).
    # The between-session term has 2 (paired) + 9 (history) df.
    between = d.se**2 - d.var_shared
    assert between == pytest.approx(d.se_between**2)  # type: ignore[operator]
    assert d.df == math.floor(d.se**4 / (between**2 / 11 + d.var_shared**2 / 7)) == 16
    # Every item up a point in one session: the measured shift moves the blend up, past the prior.
    loud = session_history([[[3], [4], [2]], [[3], [4], [2]], [[3], [4], [2]], [[4], [5], [3]]])
    assert loud is not None and loud.var_shared == pytest.approx(0.25)
    d = drift([[3], [4], [2]], [[3], [4], [2]], tolerance=0.5, history=loud, prior=Prior())
    assert d.var_shared == pytest.approx(2 * (4 * Prior().shared_var + 3 * 0.25) / 7)
    assert d.var_shared > 2 * Prior().shared_var


# Ten pooled sessions of five items (three equal samples each: a temperature-0 judge) whose F test
# gives p = 0.26: room for a shift that moves whole sessions, though not enough to add its estimate.
SHIFTED = [
    [3, 4, 3, 4, 2],
    [2, 4, 3, 3, 4],
    [4, 4, 3, 4, 4],
    [2, 4, 3, 3, 2],
    [3, 4, 3, 4, 3],
    [3, 4, 2, 3, 2],
    [4, 3, 2, 3, 2],
    [2, 3, 2, 4, 3],
    [3, 3, 3, 4, 2],
    [3, 4, 3, 2, 3],
]


def test_a_pooled_baseline_whose_sessions_may_shift_is_tested_on_its_session_means_too() -> None:
    history = session_history([[[x] * 3 for x in row] for row in SHIFTED])
    assert history is not None and history.shared_p is not None and 0.25 < history.shared_p <= 0.5
    base = [[row[i] for row in SHIFTED for _ in range(3)] for i in range(5)]
    now = [[2] * 3, [3] * 3, [2] * 3, [2] * 3, [2] * 3]
    d = drift(base, now, tolerance=0.5, base_sessions=[10] * 5, history=history, prior=Prior())
    # The new session is one more session: against the spread of the ten session means (9 df), its
    # difference is exactly t-distributed whatever the shift, and here it is the more cautious test.
    assert d.se_source == "sessions" and d.df == 9
    assert d.se == pytest.approx(math.sqrt(history.var_session * (1 + 1 / 10)))  # type: ignore[operator]
    assert d.p_value == pytest.approx(t_cdf(d.delta / d.se, 9))
    assert d.p_value > 0.009  # the item-level rule alone gave 0.0037: a drop at the family's 0.9%
    # Each item's own session means hold the shift as well: its test uses them where more cautious.
    items = item_drifts(
        base, now, tolerances=[0.5] * 5, base_sessions=[10] * 5, history=history, prior=Prior()
    )
    first = items[0]
    own, own_df = history.item_spread[0]  # type: ignore[misc]
    assert first.se_source == "sessions" and first.df == own_df == 9
    assert first.se == pytest.approx(math.sqrt(own * (1 + 1 / 10)))


def test_without_the_session_level_test_ten_sessions_update_the_prior_as_nine_do() -> None:
    # The second test of compare.confirm: its history was judged in today's session, so it leaves the
    # session-level test out and weighs the shift its sessions measure against the prior (9 df).
    history = session_history([[[x] * 3 for x in row] for row in SHIFTED])
    assert history is not None and history.df_shared == 9
    base = [[row[i] for row in SHIFTED for _ in range(3)] for i in range(5)]
    now = [[2] * 3, [3] * 3, [2] * 3, [2] * 3, [2] * 3]
    args: dict[str, Any] = {"tolerance": 0.5, "base_sessions": [10] * 5, "history": history}
    none = Prior(shared_var=0.0)
    with_it = drift(base, now, prior=none, **args)
    assert with_it.se_source == "sessions"
    d = drift(base, now, prior=none, session_test=False, **args)
    blend = (4 * 0.0 + 9 * history.var_shared) / 13
    assert d.se_source == "history" and d.var_shared == pytest.approx(blend * (1 + 1 / 10))
    assert d.se < with_it.se and d.p_value < with_it.p_value


def test_the_session_level_test_joins_only_from_ten_sessions_with_room_for_a_shift() -> None:
    rows = [[[x] * 3 for x in row] for row in SHIFTED]
    base = [[row[i] for row in SHIFTED for _ in range(3)] for i in range(5)]
    now = [[2] * 3, [3] * 3, [2] * 3, [2] * 3, [2] * 3]
    # Nine sessions: too few df for it to pay; the prior, updated by their 8 df, holds the shift instead.
    nine = session_history(rows[1:])
    assert nine is not None
    d = drift([b[3:] for b in base], now, tolerance=0.5, base_sessions=[9] * 5, history=nine, prior=Prior())
    blend = (4 * Prior().shared_var + 8 * nine.var_shared) / 12
    assert d.se_source == "history" and d.var_shared == pytest.approx(blend * (1 + 1 / 9))
    # Ten sessions whose items move independently (the F test's p = 0.56): the item-level test.
    quiet = [[[x] * 3 for x in row[2 * k % 5 :] + row[: 2 * k % 5]] for k, row in enumerate(SHIFTED)]
    history = session_history(quiet)
    assert history is not None and history.shared_p is not None and history.shared_p > 0.5
    d = drift(base, now, tolerance=0.5, base_sessions=[10] * 5, history=history, prior=Prior())
    assert d.se_source == "history" and d.var_shared == 0.0  # nor the floor: the test would hold a shift


# Ten pooled sessions of five items, three outputs an item (one sample each), that moved as a whole.
OUTPUTS = [
    [[4, 4, 4], [4, 5, 4], [3, 4, 3], [5, 5, 5], [3, 3, 3]],
    [[3, 3, 3], [4, 5, 4], [3, 3, 2], [3, 3, 4], [3, 3, 3]],
    [[4, 3, 3], [4, 3, 4], [2, 3, 3], [5, 4, 4], [3, 3, 3]],
    [[3, 3, 3], [4, 4, 3], [3, 3, 4], [5, 3, 4], [3, 3, 4]],
    [[3, 2, 3], [4, 4, 4], [4, 4, 3], [4, 4, 4], [4, 3, 3]],
    [[3, 4, 5], [5, 5, 5], [4, 5, 3], [5, 5, 5], [3, 5, 4]],
    [[2, 2, 2], [3, 4, 4], [3, 3, 2], [4, 3, 3], [3, 3, 2]],
    [[3, 4, 4], [4, 4, 4], [4, 2, 4], [5, 4, 5], [4, 3, 3]],
    [[2, 3, 4], [3, 5, 4], [3, 3, 2], [4, 4, 3], [2, 3, 2]],
    [[2, 3, 3], [4, 5, 5], [3, 2, 2], [4, 4, 4], [3, 3, 3]],
]


def test_the_session_level_test_adds_what_this_sessions_one_output_varies_beyond_the_baselines_three() -> (
    None
):
    # Every update generated three outputs an item, today's run one: the baseline's session means
    # average three outputs, today's item means one, so the measured generation variance makes up
    # the difference, Σ_i (1/k_now − 1/k_session)·σ²_gen / m².
    history = session_history(OUTPUTS)
    assert history is not None and history.shared_p is not None and history.shared_p <= 0.5
    base = [[s for session in OUTPUTS for s in session[i]] for i in range(5)]
    now = [[2], [3], [2], [3], [2]]
    gens = [generations([[[s] for s in session[i]] for session in OUTPUTS], [now[i]]) for i in range(5)]
    d = drift(
        base, now, tolerance=0.5, base_sessions=[10] * 5, history=history, generations=gens, prior=Prior()
    )
    gen_var = sum(g.ss for g in gens) / sum(g.df for g in gens)
    correction = gen_var * 5 * (1 / 1 - 10 / 30) / 25
    assert d.se_source == "sessions" and d.df == 9
    assert d.se == pytest.approx(math.sqrt(history.var_session * (1 + 1 / 10) + correction))  # type: ignore[operator]


def test_the_history_adds_what_this_sessions_one_output_varies_beyond_the_baselines_three() -> None:
    # The history's item variance is that of a session mean of three outputs; today's item mean is
    # one output: the between-session estimate from history adds the difference (the default path,
    # ten updates of three outputs each, failed 1.8% of unchanged runs without it).
    history = session_history(OUTPUTS)
    assert history is not None and history.var_item is not None and history.df_item is not None
    base = [[s for session in OUTPUTS for s in session[i]] for i in range(5)]
    now = [[4], [4], [3], [4], [3]]  # about where the items were: the item-level test decides
    gens = [generations([[[s] for s in session[i]] for session in OUTPUTS], [now[i]]) for i in range(5)]
    (first, *_) = item_drifts(
        base,
        now,
        tolerances=[0.5] * 5,
        base_sessions=[10] * 5,
        history=history,
        generations=gens,
        prior=Prior(),
    )
    gen_var = sum(g.ss for g in gens) / sum(g.df for g in gens)
    from_history = history.var_item * (1 + 1 / 10) + gen_var * (1 / 1 - 10 / 30)
    from_repeats = gen_var * (1 / 30 + 1 / 1)
    diffs = [n[0] - sum(b) / len(b) for b, n in zip(base, now, strict=True)]
    rest = diffs[1:]
    loo = sum((x - sum(rest) / 4) ** 2 for x in rest) / 3
    pooled = (3 * loo + sum(g.df for g in gens) * from_repeats + history.df_item * from_history) / (
        3 + sum(g.df for g in gens) + history.df_item
    )
    assert first.se_between == pytest.approx(math.sqrt(pooled))


def test_every_interval_of_a_mean_of_scores_stays_on_the_scale() -> None:
    from pytest_aimeasure.measure.repeats import repeat_stats
    from pytest_aimeasure.measure.stats import scale_interval

    # The case: repeats=3 scored 4, 2, 5 reached -0.13; an escalated 3.67 read [-0.13, 7.46].
    assert repeat_stats([[4], [2], [5]]).ci_low == 1.0
    st = item_stats([1, 5, 5])
    assert (st.ci_low, st.ci_high) == (1.0, 5.0) and st.half > 2
    dim = dimension_stats([[5, 5, 5]] * 5)
    assert dim.ci_high == 5.0 and dim.ci_low == pytest.approx(5 - dim.half)
    assert scale_interval(4.9, 0.3) == (pytest.approx(4.6), 5.0)
    assert scale_interval(3.0, 0.5) == (2.5, 3.5)  # an interval inside the scale is the t interval
