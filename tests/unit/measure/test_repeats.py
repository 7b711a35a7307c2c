"""Generation repeats' statistics: the two-level decomposition and the repeat keys (through the plugin:
tests/integration/test_repeats.py)."""

from __future__ import annotations

import math

import pytest

from pytest_aimeasure.measure.artifact import RepeatCount
from pytest_aimeasure.measure.repeats import repeat_key, repeat_stats


# -- the two-level decomposition on hand-computed data ------------------------------------------------
def test_variance_parts_on_known_data() -> None:
    # Repeat means 13/3, 7/3, 3 (grand mean 29/9); their variance (ddof 1) is 28/27. Within repeats the
    # sums of squares are 2/3, 2/3 and 0 over 6 df: judge variance 2/9. Generation variance is
    # 28/27 − (2/9)/3 = 26/27. The item's SE is sqrt((28/27)/3) with K − 1 = 2 df.
    s = repeat_stats([[4, 4, 5], [2, 3, 2], [3, 3, 3]])
    assert s.means == pytest.approx((13 / 3, 7 / 3, 3.0))
    assert s.mean == pytest.approx(29 / 9)
    assert s.var_between == pytest.approx(28 / 27)
    assert s.var_judge == pytest.approx(2 / 9)
    assert s.var_generation == pytest.approx(26 / 27)
    assert s.se == pytest.approx(math.sqrt(28 / 81))
    assert s.df == 2.0 and s.source == "repeats"
    assert s.var_generation + s.var_judge / 3 == pytest.approx(s.var_between)  # the parts add up
    # t(0.975, 2) = 4.302653: the generation variance widens the interval far beyond the judge's, to a
    # half-width of 2.53 around 3.22, past both ends of the 1-5 scale, where it is bounded.
    assert 4.302653 * s.se > max(s.mean - 1.0, 5.0 - s.mean)
    assert (s.ci_low, s.ci_high) == (1.0, 5.0)


def test_identical_repeats_are_floored_not_infinitely_precise() -> None:
    # Repeats that agree exactly (s²_b = 0) agree by luck as often as not: the repeat means' variance
    # is floored at 1/12 (one integer score's rounding), SE = sqrt((1/12)/2) with K − 1 = 1 df.
    s = repeat_stats([[3, 3, 3], [3, 3, 3]])
    assert s.var_between == 0.0 and s.var_generation == 0.0 and s.var_judge == 0.0
    assert s.source == "floor" and s.df == 1.0
    assert s.se == pytest.approx(math.sqrt((1 / 12) / 2))


def test_judge_noise_alone_is_not_called_generation_variance() -> None:
    # Repeat means 3.5 and 3.0: s²_b = 0.125; judge variance: (0.5 + 0.5 + 0 + 0)... computed by hand:
    # [3, 4] has variance 0.5, [3, 3] has 0; pooled over 2 df: 0.25. σ²_judge/N = 0.125 = s²_b, so the
    # generation part is 0 and the judge term sets the SE.
    s = repeat_stats([[3, 4], [3, 3]])
    assert s.var_between == pytest.approx(0.125)
    assert s.var_judge == pytest.approx(0.25)
    assert s.var_generation == pytest.approx(0.0)
    assert s.source == "judge"
    assert s.se == pytest.approx(math.sqrt(0.25 / 2 / 2))


def test_repeat_keys_and_counts_read_as_documented() -> None:
    assert repeat_key("story-7", 0) == "story-7#r1"
    assert str(RepeatCount(2, 3)) == "2/3 valid"
    with pytest.raises(ValueError, match="at least one score"):
        repeat_stats([[3], []])
