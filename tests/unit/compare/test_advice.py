"""Power as advice: what a dimension detects, and what more items, repeats or pooling would buy."""

from __future__ import annotations

from pytest_aimeasure.compare.advice import Design, advise, pooled_mde, projected_mde
from pytest_aimeasure.measure.stats import Prior, drift

# A temperature-0 judge and a moving generator: five items, their means moved ±1 between sessions.
BASE = [[4, 4, 4], [3, 3, 3], [4, 4, 4], [3, 3, 3], [4, 4, 4]]
NOW = [[3, 3, 3], [4, 4, 4], [3, 3, 3], [3, 3, 3], [4, 4, 4]]


def test_the_projection_reproduces_today_and_falls_with_items_repeats_and_pooling() -> None:
    result = drift(BASE, NOW, tolerance=0.5, prior=Prior(), level=0.009)
    design = Design(m=5, n=3, k=1.0, sessions=1)
    assert projected_mde(result, design) == result.mde  # nothing changed: today's figure
    by_items = [projected_mde(result, design, m=m) for m in (6, 10, 20, 40)]
    assert by_items == sorted(by_items, reverse=True) and by_items[-1] < result.mde
    # The judge repeats itself (within floor 1/12 over 3 samples): the rest is the generator's, so
    # repeats shrink it; a pooled baseline drops the prior's shift and shrinks (1 + 1/P). Neither more
    # items nor repeats lift the prior's session-wide shift: its SE² 2·0.04 alone keeps the MDE
    # above 0.9 however many there are.
    assert projected_mde(result, design, m=200) > 0.9 and projected_mde(result, design, k=10) > 0.9
    assert projected_mde(result, design, k=4) < result.mde
    assert projected_mde(result, design, sessions=5) < result.mde


def test_advice_names_what_reaches_one_and_a_half_tolerances() -> None:
    result = drift(BASE, NOW, tolerance=0.5, prior=Prior(), level=0.009)
    one_session = Design(m=5, n=3, k=1.0, sessions=1)
    # Against one session the prior's session-wide shift stays whatever the number of items or
    # repeats, so neither reaches 0.75: pooling, which measures the shift, is what is named.
    assert advise(result, one_session) == (
        f"detects a drop of {result.mde:.2f} at 80%; a baseline pooled from 5 sessions (--update-baseline "
        f"on unchanged runs) would detect about {pooled_mde(result, one_session):.2f}"
    )
    # Five sessions measure the shift with 4 df: half the prior's is kept (its 4 df of 8), not none.
    assert pooled_mde(result, one_session) < result.mde - 0.15
    assert pooled_mde(result, one_session) > projected_mde(result, one_session, sessions=10)
    # Against a pooled baseline whose history found no session-wide shift, items and repeats both can.
    pooled = drift(BASE, NOW, tolerance=0.5, level=0.009)
    assert advise(pooled, Design(m=5, n=3, k=1.0, sessions=5)) == (
        f"detects a drop of {pooled.mde:.2f} at 80%; with 16 items, or 4 generation repeats an item "
        "(repeats=), it would detect about 0.75"
    )
    # A test that already detects 0.75 says only that.
    strong = drift([[4] * 3] * 40, [[4] * 3] * 40, tolerance=0.5, level=0.009)
    assert (
        advise(strong, Design(m=40, n=3, k=1.0, sessions=5)) == f"detects a drop of {strong.mde:.2f} at 80%"
    )


def test_a_drop_no_mean_of_1_to_5_scores_can_make_is_named_as_none() -> None:
    # Two items that swapped places: one degree of freedom asks for a drop of tens of points.
    result = drift([[4, 4, 4], [3, 3, 3]], [[3, 3, 3], [4, 4, 4]], tolerance=0.5, prior=Prior(), level=0.009)
    assert result.mde > 4
    # Nor would five pooled sessions bring it on the scale: nothing else is offered.
    assert advise(result, Design(m=2, n=3, k=1.0, sessions=1)) == (
        "detects a drop of more than 4 (none on the 1–5 scale) at 80%"
    )
    # Its interval for the change is what a change of two 1–5 means can be, not ±13.
    assert result.ci95 == (-4.0, 4.0) and result.verdict == "inconclusive"
