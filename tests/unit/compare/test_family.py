"""The gatekeeping procedure over a session's regression tests: exact rejections on constructed
p-values, and its family-wise error on a seeded simulation."""

from __future__ import annotations

import random

import pytest

from pytest_aimeasure.compare.family import (
    ITEM_SHARE,
    Group,
    item_level_after_dimension,
    reject,
    start_levels,
)

LEVEL = 0.01


def test_one_dimension_starts_with_most_of_the_level_and_its_items_with_the_rest() -> None:
    groups = [Group("tone", 1.0, dict.fromkeys("abcde", 1.0))]
    levels = start_levels(groups, LEVEL)
    assert levels[("dimension", "tone")] == pytest.approx((1 - ITEM_SHARE) * LEVEL)
    assert levels[("items", "tone")] == pytest.approx(ITEM_SHARE * LEVEL)
    # Once the dimension is rejected, its whole weight goes to its items: each gets a fifth.
    assert item_level_after_dimension(groups, "tone", LEVEL) == pytest.approx(LEVEL / 5)


def test_items_are_tested_within_what_is_left_until_their_dimension_is_rejected() -> None:
    items = {"a": 0.0015, "b": 0.3, "c": 0.5}
    # The dimension is not rejected: item a (p 0.0015) is above its share 0.1·1%/3 ≈ 0.00033.
    held = reject([Group("tone", 0.05, items)], LEVEL)
    assert held.dimensions == frozenset() and held.items == frozenset()
    # Rejected: a gets 1%/3 ≈ 0.0033 and is rejected; b and c then share the level, and stay.
    passed = reject([Group("tone", 0.008, items)], LEVEL)
    assert passed.dimensions == {"tone"} and passed.items == {"a"}
    # An item that collapsed is caught even when the others hold the dimension's mean up.
    alone = reject([Group("tone", 0.3, {"a": 0.0002, "b": 0.4})], LEVEL)
    assert alone.dimensions == frozenset() and alone.items == {"a"}


def test_a_rejected_dimension_passes_half_its_weight_to_the_other_dimensions() -> None:
    # Two dimensions of one item each: 0.5% each; tone (p 0.004) is rejected, and its weight lifts
    # style's level to 1%, which confirms style's p of 0.008 (Holm's step over dimensions).
    groups = [Group("tone", 0.004, {}), Group("style", 0.008, {})]
    assert reject(groups, LEVEL).dimensions == {"tone", "style"}
    # With items tone's test starts at 0.45% and passes half of it on: style then has 0.5% + 0.225%
    # = 0.725%, below 0.8% but above 0.67%.
    with_items = [Group("tone", 0.004, {"a": 0.9, "b": 0.9}), Group("style", 0.008, {})]
    assert reject(with_items, LEVEL).dimensions == {"tone"}
    assert reject([*with_items[:1], Group("style", 0.0067, {})], LEVEL).dimensions == {"tone", "style"}


def test_a_dimension_that_is_not_comparable_leaves_its_items_the_whole_share() -> None:
    groups = [Group("tone", None, {"a": 0.004, "b": 0.5})]
    assert start_levels(groups, LEVEL) == {("items", "tone"): pytest.approx(LEVEL)}
    assert reject(groups, LEVEL).items == {"a"}  # 0.004 ≤ 1%/2


def _normal_p(rng: random.Random, shift: float) -> float:
    from statistics import NormalDist

    return NormalDist().cdf(rng.gauss(shift, 1.0))


def test_family_wise_error_stays_at_the_level_under_a_seeded_simulation() -> None:
    # Three dimensions of five items; every item null true. Item tests share the dimension's noise
    # (the worst case for Bonferroni-type bounds is independence; positive correlation only helps).
    rng = random.Random(19)
    sessions, level, errors = 4000, 0.05, 0
    for _ in range(sessions):
        groups = []
        for name in ("a", "b", "c"):
            items = {f"{name}{k}": _normal_p(rng, 0.0) for k in range(5)}
            groups.append(Group(name, _normal_p(rng, 0.0), items))
        rejected = reject(groups, level)
        errors += bool(rejected.dimensions or rejected.items)
    # The level is 5% (chosen large so that 4000 sessions measure it); the bound must hold.
    assert errors / sessions <= level + 3 * (level * (1 - level) / sessions) ** 0.5


def test_a_true_drop_in_one_dimension_does_not_raise_false_rejections_elsewhere() -> None:
    rng = random.Random(20)
    sessions, level, false = 3000, 0.05, 0
    for _ in range(sessions):
        dropped = Group("a", _normal_p(rng, -4.0), {f"a{k}": _normal_p(rng, -4.0) for k in range(3)})
        nulls = [
            Group(n, _normal_p(rng, 0.0), {f"{n}{k}": _normal_p(rng, 0.0) for k in range(3)}) for n in "bc"
        ]
        rejected = reject([dropped, *nulls], level)
        false += bool((rejected.dimensions - {"a"}) or {i for i in rejected.items if not i.startswith("a")})
    assert false / sessions <= level + 3 * (level * (1 - level) / sessions) ** 0.5
