"""The second test of a suspected drop (the baseline's outputs judged again): how its level is shared,
when it runs, and that the shared level keeps the family-wise error."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from pytest_aimeasure.attribution.rejudge import kept_outputs
from pytest_aimeasure.compare.confirm import CONFIRM_SHARE, Rejudged, combined_p
from pytest_aimeasure.compare.drift import compare
from pytest_aimeasure.session.conclude import _unplanned
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile, EntrySource, merge_entries
from pytest_aimeasure.store.runs import RunStore
from tests.unit.compare.test_drift import baseline_of, run

QUALITIES = [3, 4] * 5
TODAY = [[q - 1] * 3 if k < 7 else [q] * 3 for k, q in enumerate(QUALITIES)]  # 7 of 10 a point lower
ONCE = [[q] * 3 for q in QUALITIES]


def test_the_combined_p_value_is_the_weighted_bonferroni_of_both_tests() -> None:
    assert combined_p(0.003, None) == pytest.approx(0.003 / (1 - CONFIRM_SHARE))
    assert combined_p(0.5, 0.0007) == pytest.approx(0.0007 / CONFIRM_SHARE)
    assert combined_p(0.9, 0.9) == 1.0


def test_a_confirmable_dimension_shares_its_level_and_a_suspected_drop_asks_for_the_second_test() -> None:
    baseline, today = baseline_of(run(ONCE)), run(TODAY)
    alone = compare(baseline, today, whole_suite=True).dimensions["tone"]
    first = compare(baseline, today, whole_suite=True, confirmable={"tone"})
    tone = first.dimensions["tone"]
    assert alone.confirmation is None and alone.level is not None
    assert tone.level == pytest.approx(alone.level * (1 - CONFIRM_SHARE))
    assert tone.confirmation is not None and not tone.confirmation.ran
    assert tone.confirmation.level == pytest.approx(alone.level * CONFIRM_SHARE)
    assert (alone.verdict, tone.verdict) == ("inconclusive", "inconclusive")
    assert first.suspected() == ["tone"]

    # The baseline's outputs judged again score as before: against them the drop is confirmed.
    rejudged = Rejudged(entries=baseline.entries, calls={"tone": 30})
    second = compare(baseline, today, whole_suite=True, confirmable={"tone"}, rejudged=rejudged)
    tone = second.dimensions["tone"]
    assert tone.verdict == "regressed" and tone.rejected
    assert tone.confirmation is not None and tone.confirmation.confirmed and tone.confirmation.calls == 30
    assert tone.delta == pytest.approx(-0.7)  # the dimension keeps the rule's own figures
    assert second.suspected() == []
    (finding,) = [f for f in second.findings if f.kind == "regressed"]
    assert "confirmed by judging the baseline's outputs again today: 3.50 → 2.80" in finding.message


def test_outputs_judged_again_that_score_as_today_confirm_nothing() -> None:
    baseline, today = baseline_of(run(ONCE)), run(TODAY)
    rejudged = Rejudged(entries=baseline_of(run(TODAY)).entries, calls={"tone": 30})
    result = compare(baseline, today, whole_suite=True, confirmable={"tone"}, rejudged=rejudged)
    tone = result.dimensions["tone"]
    assert tone.verdict == "inconclusive" and not tone.rejected
    assert tone.confirmation is not None and tone.confirmation.ran and not tone.confirmation.confirmed
    assert tone.confirmation.delta == pytest.approx(0.0)
    assert not result.has_regressions


def test_an_item_not_judged_again_leaves_the_second_test_unrun() -> None:
    baseline, today = baseline_of(run(ONCE)), run(TODAY)
    partial = dict(baseline.entries)
    partial.pop(next(iter(partial)))
    rejudged = Rejudged(entries=partial, calls={"tone": 27})
    result = compare(baseline, today, whole_suite=True, confirmable={"tone"}, rejudged=rejudged)
    tone = result.dimensions["tone"]
    assert tone.confirmation is not None and not tone.confirmation.ran and tone.verdict == "inconclusive"


def pooled(*sessions: list[list[int]], pool: int = 10) -> dict[str, BaselineEntry]:
    entries: dict[str, BaselineEntry] = {}
    for scores in sessions:
        entries, _summary = merge_entries(entries, run(scores), whole_suite=True, prune=False, pool=pool)
    return entries


def test_a_baseline_of_three_pooled_sessions_confirms_a_drop_against_every_session_judged_again() -> None:
    # Three pooled sessions, the second's judge a point high on 8 of 10 items: the rule measures that
    # shift with 2 df and leaves a drop of 0.7 inconclusive. Judged again today, the three sessions
    # score alike (the judge-side shift is gone from their spread) and the drop is confirmed.
    lucky = [[min(5, q + 1)] * 3 if k < 8 else [q] * 3 for k, q in enumerate(QUALITIES)]
    baseline = BaselineFile(entries=pooled(ONCE, lucky, ONCE))
    assert {e.pooled for e in baseline.entries.values()} == {3}
    alone = compare(baseline, run(TODAY), whole_suite=True).dimensions["tone"]
    assert alone.verdict == "inconclusive" and alone.shared_source == "history" and alone.level is not None
    first = compare(baseline, run(TODAY), whole_suite=True, confirmable={"tone"})
    tone = first.dimensions["tone"]
    assert tone.confirmation is not None and tone.confirmation.level == pytest.approx(
        alone.level * CONFIRM_SHARE
    )
    assert first.suspected() == ["tone"]

    rejudged = Rejudged(entries=pooled(ONCE, ONCE, ONCE), calls={"tone": 90})
    second = compare(baseline, run(TODAY), whole_suite=True, confirmable={"tone"}, rejudged=rejudged)
    tone = second.dimensions["tone"]
    assert tone.verdict == "regressed" and tone.confirmation is not None and tone.confirmation.confirmed
    assert tone.confirmation.delta == pytest.approx(-0.7)
    # Its history is the sessions judged again (no spread), not the baseline's (the lucky session).
    assert tone.confirmation.se is not None and alone.se is not None and tone.confirmation.se < alone.se / 4


def test_ten_pooled_sessions_confirm_a_drop_without_the_session_level_test() -> None:
    # Ten pooled sessions, two of whose judges scored 8 of 10 items a point high: the rule measures
    # that shift from the ten sessions (9 df) and leaves a drop of 0.7 inconclusive. Judged again
    # today the ten sessions score alike (the judge-side shift is gone), and the drop is confirmed.
    # Before, nothing was planned from ten sessions.
    lucky = [[min(5, q + 1)] * 3 if k < 8 else [q] * 3 for k, q in enumerate(QUALITIES)]
    baseline = BaselineFile(entries=pooled(*[ONCE] * 4, lucky, *[ONCE] * 4, lucky))
    assert {e.pooled for e in baseline.entries.values()} == {10}
    alone = compare(baseline, run(TODAY), whole_suite=True).dimensions["tone"]
    assert alone.verdict == "inconclusive" and alone.shared_source == "history"
    rejudged = Rejudged(entries=pooled(*[ONCE] * 10), calls={"tone": 300})
    both = compare(baseline, run(TODAY), whole_suite=True, confirmable={"tone"}, rejudged=rejudged)
    tone = both.dimensions["tone"]
    assert tone.verdict == "regressed" and tone.confirmation is not None and tone.confirmation.confirmed
    assert tone.confirmation.calls == 300 and tone.confirmation.delta == pytest.approx(-0.7)


def test_no_second_test_is_planned_from_more_than_ten_pooled_sessions() -> None:
    baseline = BaselineFile(entries=pooled(*[ONCE] * 11, pool=11))
    assert {e.pooled for e in baseline.entries.values()} == {11}
    tone = compare(baseline, run(TODAY), whole_suite=True, confirmable={"tone"}).dimensions["tone"]
    assert tone.confirmation is None and tone.shared_source == "history"


def test_the_shared_level_keeps_unchanged_runs_under_the_familys_rate() -> None:
    # Independent judge noise, one-session baselines, ten items: each run is tested by the rule and,
    # when suspected, by a second test against a fresh judging of the baseline's outputs (the same
    # truth judged again). The rate of runs failed must stay within the family's 1%, with the
    # simulation's error, as it does for the rule alone.
    rng = random.Random(1919)
    runs, failed = 600, 0

    def judged(truth: list[float]) -> list[list[int]]:
        return [[max(1, min(5, round(t + rng.gauss(0, 0.5)))) for _ in range(3)] for t in truth]

    for _ in range(runs):
        truth = [rng.uniform(2.5, 4.5) for _ in range(10)]
        baseline, today = baseline_of(run(judged(truth))), run(judged(truth))
        result = compare(baseline, today, whole_suite=True, confirmable={"tone"})
        if result.suspected():
            again = Rejudged(entries=baseline_of(run(judged(truth))).entries, calls={})
            result = compare(baseline, today, whole_suite=True, confirmable={"tone"}, rejudged=again)
        failed += result.has_regressions
    assert failed / runs <= 0.01 + 3 * (0.01 * 0.99 / runs) ** 0.5


def test_the_advice_counts_the_second_test_where_one_is_planned() -> None:
    baseline, today = baseline_of(run(ONCE)), run(TODAY)
    alone = compare(baseline, today, whole_suite=True).dimensions["tone"]
    tone = compare(baseline, today, whole_suite=True, confirmable={"tone"}).dimensions["tone"]
    assert alone.mde is not None and tone.mde is not None and tone.advice is not None
    # Without the shift the second test sees drops the rule alone cannot: the figure says so, and
    # pooling (which would drop the second test) is no longer offered as the way to smaller drops.
    assert tone.mde < alone.mde - 0.2
    assert tone.advice.startswith(f"detects a drop of {tone.mde:.2f} at 80% (judging the baseline's outputs")
    assert "pooled" in (alone.advice or "") and "pooled" not in tone.advice
    # Pooled from five sessions the second test is still planned: the projection counts it.
    assert tone.mde_pooled is not None and alone.mde_pooled is not None
    assert tone.mde_pooled < alone.mde_pooled


def test_a_drop_not_confirmable_for_want_of_outputs_says_what_would_confirm_it() -> None:
    # Three pooled sessions without their outputs in the store: keep the store, or pool ten. Ten
    # without them: keeping the store is the way (ten sessions have a second test too).
    lucky = [[min(5, q + 1)] * 3 if k < 8 else [q] * 3 for k, q in enumerate(QUALITIES)]
    for sessions, pool_advice in (
        ([ONCE, lucky, ONCE], True),
        ([*[ONCE] * 4, lucky, *[ONCE] * 4, lucky], False),
    ):
        comparison = compare(BaselineFile(entries=pooled(*sessions)), run(TODAY), whole_suite=True)
        assert comparison.dimensions["tone"].verdict == "inconclusive"
        (finding,) = _unplanned(comparison, planned=set())
        assert finding.kind == "confirmation" and "keep the store" in finding.message
        assert ("pool 10 sessions" in finding.message) is pool_advice
        assert _unplanned(comparison, planned={"tone"}) == []


def test_the_session_plans_a_second_test_from_up_to_ten_pooled_sessions_whose_outputs_it_keeps(
    tmp_path: Path,
) -> None:
    store = RunStore(tmp_path)

    def kept(sessions: int, name: str) -> BaselineEntry:
        entry = next(iter(pooled(*[ONCE] * sessions, pool=sessions).values()))
        shas = [hashlib.sha256(f"{name}-{k}".encode()).hexdigest() for k in range(sessions)]
        for sha in shas:
            store.artifact_path(sha).parent.mkdir(parents=True, exist_ok=True)
            store.artifact_path(sha).write_text(name)
        return entry.model_copy(update={"sources": [EntrySource(artifact_sha256=s) for s in shas]})

    entries = {"ten": kept(10, "ten"), "eleven": kept(11, "eleven"), "three": kept(3, "three")}
    assert kept_outputs(store, entries) == {"ten", "three"}
    # One output of the ten gone from the store: nothing to judge again for that item.
    store.artifact_path(entries["ten"].session_sources()[4].artifacts()[0]).unlink()
    assert kept_outputs(store, entries) == {"three"}
