"""Generation repeats' statistics: the two-level decomposition and the repeat keys (through the plugin:
tests/integration/test_repeats.py)."""

from __future__ import annotations

import math

import pytest

from pytest_aimeasure.measure.artifact import RepeatCount, repeat_key
from pytest_aimeasure.measure.models import RepeatsChoice
from pytest_aimeasure.measure.repeats import (
    CHOSEN_REPEATS,
    Sessions,
    choose_repeats,
    histories,
    repeat_stats,
)


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


# -- repeats="auto": where the next measurement spends ---------------------------------------------
def _choose(*entries: Sessions, samples: int = 3, dimensions: tuple[str, ...] = ()) -> RepeatsChoice:
    """The choice for one artifact judged by ``entries`` (each its own dimension unless given)."""
    names = dimensions or tuple(f"d{i}" for i in range(len(entries)))
    index = histories(("story", name, sessions) for name, sessions in zip(names, entries, strict=True))
    choice = choose_repeats(index["story"], samples=samples)
    assert choice is not None
    return choice


def test_nothing_to_decide_from_without_an_entry() -> None:
    assert choose_repeats([], samples=3) is None


def test_a_judge_that_repeats_itself_gets_more_outputs_from_the_prior() -> None:
    choice = _choose([[[4, 4, 4]]])
    assert (choice.repeats, choice.spend, choice.evidence) == (CHOSEN_REPEATS, "generations", "prior")
    assert (choice.var_generation, choice.var_judge) == (0.25, 0.0)


def test_a_judge_that_varies_gets_the_samples_while_the_generator_is_unmeasured() -> None:
    choice = _choose([[[2, 3, 4]]])
    assert (choice.repeats, choice.spend, choice.evidence) == (1, "judge samples", "unmeasured")
    assert choice.var_judge == pytest.approx(1 / 3)


def test_repeats_that_move_more_than_the_judge_get_more_outputs() -> None:
    # Repeat means 10/3, 14/3, 7/3 (variance 111/81); the judge's within variance is 1/3, a third
    # of it in a repeat's mean: the generator's part is 111/81 - 1/9.
    choice = _choose([[[3, 3, 4], [5, 5, 4], [2, 2, 3]]])
    assert (choice.repeats, choice.evidence) == (CHOSEN_REPEATS, "repeats")
    assert choice.var_generation == pytest.approx(111 / 81 - 1 / 9)


def test_repeats_whose_means_agree_leave_the_samples_to_a_noisy_judge() -> None:
    choice = _choose([[[2, 4, 3], [3, 2, 4], [4, 3, 2]]])
    assert (choice.repeats, choice.spend, choice.var_generation) == (1, "judge samples", 0.0)


def test_pooled_sessions_measure_the_generator_without_repeats() -> None:
    choice = _choose([[[3, 3, 3]], [[5, 5, 5]], [[4, 4, 4]]])
    assert (choice.repeats, choice.evidence, choice.var_generation) == (CHOSEN_REPEATS, "sessions", 1.0)


def test_a_deterministic_judge_counts_at_least_the_rounding_variance() -> None:
    # Three repeats scored 3, 3, 3 agree by luck as often as not: still the only thing that can move.
    choice = _choose([[[3, 3, 3], [3, 3, 3], [3, 3, 3]]])
    assert (choice.repeats, choice.var_generation) == (CHOSEN_REPEATS, pytest.approx(1 / 12))


def test_the_judge_samples_an_output_gets_set_the_judges_share() -> None:
    # Repeat means 3.5 and 4.5 (variance 0.5) of pairs of within variance 0.5: the generator's part is
    # 0.5 - 0.5/2 = 0.25. The judge's share of an output with 3 samples, 0.5/3, is smaller; with 1, larger.
    entry = [[[3, 4], [4, 5]]]
    three, one = _choose(entry, samples=3), _choose(entry, samples=1)
    assert three.var_generation == pytest.approx(0.5 - 0.5 / 2)
    assert (three.repeats, one.repeats) == (CHOSEN_REPEATS, 1)


def test_an_artifact_judged_on_several_dimensions_sums_their_parts() -> None:
    # One dimension's judge repeats itself (prior 0.25 for its generator); the other's judge is noisy
    # (variance 4/3, 4/9 an output mean) and its generator unmeasured: 0.25 < 4/9, samples first.
    choice = _choose([[[4, 4, 4]]], [[[1, 3, 3]]])
    assert (choice.repeats, choice.entries, choice.evidence) == (1, 2, "prior")


def test_the_judges_noise_is_pooled_over_its_dimension_not_read_from_one_item() -> None:
    # This item's three samples agreed, but on the same dimension the judge varied on another item:
    # the judge is noisy (pooled variance 0.5 over 4 df), not one that repeats itself.
    index = histories([("story", "charm", [[[4, 4, 4]]]), ("poem", "charm", [[[2, 3, 4]]])])
    choice = choose_repeats(index["story"], samples=3)
    assert choice is not None
    assert (choice.repeats, choice.evidence, choice.var_judge) == (1, "unmeasured", pytest.approx(0.5 / 3))
    assert histories([(None, "charm", [[[4]]])]) == {}  # an entry without a key is left out
