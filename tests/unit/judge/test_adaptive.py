"""Adaptive sampling (``samples="auto"``): the looks, the stopping rule, the engine's loop, the cache key,
the settings. In a session: tests/integration/test_adaptive.py; over HTTP: test_adaptive_http.py."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_aimeasure.judge.adaptive import (
    STOP_ALPHA,
    ItemRule,
    Reference,
    adaptive_summary,
    look_levels,
    open_decisions,
    repeats_itself,
    sample_adaptively,
    spending,
)
from pytest_aimeasure.judge.backends.scripted import ScriptedBackend, ScriptedCall
from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings, SampleKey
from pytest_aimeasure.judge.errors import NotJudged
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.measure.models import AdaptiveRecord, Fingerprint, Measurement, Sample
from pytest_aimeasure.measure.sampling import SamplePlan, call_range, samples_problem
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT
from pytest_aimeasure.session import options

PLAN = SamplePlan()


FLOOR_RULE = ItemRule(floor=3.0, tolerance=0.5, var_floor=VAR_FLOOR_DEFAULT)


def test_default_looks_are_3_5_7_9_and_the_maximum_is_always_a_look() -> None:
    assert PLAN.looks == (3, 5, 7, 9)
    assert SamplePlan(3, 8, 2).looks == (3, 5, 7, 8)
    assert SamplePlan(4, 4, 2).looks == (4,)
    assert SamplePlan(2, 6, 1).looks == (2, 3, 4, 5, 6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1, 9, 2), "minimum must be >= 2"),
        ((5, 4, 1), "maximum 4 is below the minimum 5"),
        ((3, 9, 0), "step"),
    ],
)
def test_a_bad_plan_says_what_is_wrong(args: tuple[int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplePlan(*args)


def test_the_levels_are_the_pocock_type_spending_increments_and_add_up_to_alpha() -> None:
    levels = look_levels(PLAN)
    assert math.isclose(sum(levels), STOP_ALPHA)
    assert math.isclose(levels[0], STOP_ALPHA * math.log(1 + (math.e - 1) / 3))  # f = 3/9
    assert math.isclose(spending(1.0), STOP_ALPHA)
    assert list(levels) == sorted(levels, reverse=True)  # Pocock-type: spends early
    assert all(level > 0 for level in levels)


def test_the_early_stops_are_valid_wrong_side_stops_stay_under_alpha_over_2() -> None:
    """The property the design promises: an item whose true mean lies above the floor is stopped on the
    floor's other side (interval wholly below it) at most alpha/2 of the time, over all looks together.
    Checked by Monte Carlo on continuous normal scores near the floor (the design's model), seeded."""
    rng = random.Random(14)
    reps, wrong = 4000, 0
    for _ in range(reps):
        stream = [3.05 + rng.gauss(0.0, 0.6) for _ in range(PLAN.maximum)]
        for level, n in zip(look_levels(PLAN), PLAN.looks, strict=True):
            if not open_decisions(stream[:n], level=level, floor=3.0, tolerance=0.5, var_floor=0.01):  # type: ignore[arg-type]
                wrong += sum(stream[:n]) / n < 3.0
                break
    # alpha/2 = 5%; 4000 draws put the estimate's sd near 0.35%: a naive rule (each look at 10%) fails.
    assert wrong / reps <= STOP_ALPHA / 2, wrong / reps


def test_testing_each_look_at_the_full_alpha_would_not_be_valid() -> None:
    """The same Monte Carlo with every look at the full two-sided 10%: more wrong-side stops than
    alpha/2 (why the levels are spent, not repeated). Guards the test above from being vacuous."""
    rng = random.Random(14)
    reps, wrong = 4000, 0
    for _ in range(reps):
        stream = [3.05 + rng.gauss(0.0, 0.6) for _ in range(PLAN.maximum)]
        for n in PLAN.looks:
            if not open_decisions(stream[:n], level=STOP_ALPHA, floor=3.0, tolerance=0.5, var_floor=0.01):  # type: ignore[arg-type]
                wrong += sum(stream[:n]) / n < 3.0
                break
    assert wrong / reps > STOP_ALPHA / 2


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([5, 5, 5], ()),
        ([4, 4, 4], ()),  # 4 ± 4.54·sqrt((1/12)/3) = 4 ± 0.76: clear of 3
        ([1, 1, 2], ()),
        ([3, 3, 3], ("floor",)),
        ([3, 4, 3], ("floor",)),
        ([2, 3, 3], ("floor",)),
    ],
)
def test_the_floor_is_open_while_it_lies_inside_the_items_interval(
    scores: list[int], expected: tuple[str, ...]
) -> None:
    level = look_levels(PLAN)[0]
    assert (
        open_decisions(scores, level=level, floor=3.0, tolerance=0.5, var_floor=VAR_FLOOR_DEFAULT) == expected
    )


def test_no_floor_no_floor_decision() -> None:
    level = look_levels(PLAN)[0]
    assert (
        open_decisions([3, 3, 3], level=level, floor=None, tolerance=0.5, var_floor=VAR_FLOOR_DEFAULT) == ()
    )


def test_drift_is_open_while_baseline_plus_or_minus_tolerance_lies_inside_the_interval() -> None:
    level = look_levels(PLAN)[0]
    base = [[4, 4, 4], [4, 4, 4], [4, 4, 4]]  # mean 4; drift thresholds at 3.5 and 4.5
    kwargs: dict[str, Any] = {"level": level, "floor": 1.0, "tolerance": 0.5, "var_floor": VAR_FLOOR_DEFAULT}
    assert open_decisions([4, 4, 4], reference=base, **kwargs) == ()  # clearly unchanged
    assert open_decisions([2, 2, 2], reference=base, **kwargs) == ()  # clearly dropped
    assert open_decisions([3, 4, 4], reference=base, **kwargs) == ("drift",)  # 3.67: near 3.5
    assert open_decisions([5, 4, 5], reference=base, **kwargs) == ("drift",)  # 4.67: near 4.5
    assert open_decisions([3, 4, 4], **kwargs) == ()  # no baseline entry: no drift decision


def test_the_baselines_sessions_are_groups_its_movement_between_sessions_is_not_judge_noise() -> None:
    """Entry sessions 3,3,3 / 5,5,5: within each the judge agreed; pooled as one sample they would
    claim a variance of 1.2 and keep a clear item open."""
    level = look_levels(PLAN)[0]
    kwargs: dict[str, Any] = {"level": level, "floor": 1.0, "tolerance": 0.5, "var_floor": VAR_FLOOR_DEFAULT}
    assert open_decisions([4, 4, 4], reference=[[3, 3, 3], [5, 5, 5]], **kwargs) == ()
    assert open_decisions([4, 4, 4], reference=[[3, 3, 3, 5, 5, 5]], **kwargs) == ("drift",)


def test_a_judge_that_repeats_itself() -> None:
    assert not repeats_itself([3, 3, 4], None, look=3)
    assert not repeats_itself([3, 3, 3], None, look=0)  # three equal draws of a noisy judge are common
    assert repeats_itself([3, 3, 3, 3, 3], None, look=1)
    assert repeats_itself([3, 3, 3], [[4, 4, 4], [3, 3, 3]], look=0)  # every session agreed with itself
    assert not repeats_itself([3, 3, 3], [[4, 4, 3], [3, 3, 3]], look=0)


def drive(
    stream: Sequence[int], rule: ItemRule = FLOOR_RULE, **kwargs: Any
) -> tuple[list[int], AdaptiveRecord, int]:
    calls = 0

    async def draw(start: int, stop: int) -> list[Sample]:
        nonlocal calls
        calls += stop - start
        return [Sample(index=i, dimension="tone", score=stream[i], rationale="r") for i in range(start, stop)]

    samples, record = asyncio.run(sample_adaptively(PLAN, draw, lambda got: rule, **kwargs))
    return [s.score for s in samples], record, calls


def test_a_clear_item_stops_at_the_minimum() -> None:
    scores, record, calls = drive([5] * 9)
    assert (scores, calls) == ([5, 5, 5], 3)
    assert record == AdaptiveRecord(minimum=3, maximum=9, step=2, stopped="settled", open=[])


def test_a_borderline_item_takes_the_maximum_and_says_what_stayed_open() -> None:
    scores, record, calls = drive([3, 4] * 5)
    assert calls == 9 and len(scores) == 9
    assert (record.stopped, record.open) == ("maximum", ["floor"])


def test_an_item_that_settles_at_a_later_look_stops_there() -> None:
    # 4,4,3 (mean 3.67, sd 0.58) is open at 3; two more 4s (3.8, 5 samples) settle it.
    _, record, calls = drive([4, 4, 3, 4, 4, 4, 4, 4, 4])
    assert (calls, record.stopped) == (5, "settled")


def test_a_judge_that_gives_one_score_on_the_floor_stops_at_the_second_look() -> None:
    _, record, calls = drive([3] * 9)
    assert (calls, record.stopped, record.open) == (5, "agreed", ["floor"])


def test_a_budget_stop_after_the_first_look_keeps_the_samples_it_has() -> None:
    calls = 0

    async def draw(start: int, stop: int) -> list[Sample]:
        nonlocal calls
        if start:
            raise NotJudged("budget", "not judged: budget")
        calls += stop - start
        return [Sample(index=i, dimension="tone", score=3 + i % 2, rationale="r") for i in range(start, stop)]

    samples, record = asyncio.run(
        sample_adaptively(PLAN, draw, lambda got: FLOOR_RULE, stop_early=lambda e: isinstance(e, NotJudged))
    )
    assert (len(samples), record.stopped, record.open) == (3, "budget", ["floor"])


def test_a_failure_of_the_first_look_propagates() -> None:
    async def draw(start: int, stop: int) -> list[Sample]:
        raise NotJudged("budget", "not judged: budget")

    with pytest.raises(NotJudged):
        asyncio.run(sample_adaptively(PLAN, draw, lambda got: FLOOR_RULE, stop_early=lambda e: True))


FP = Fingerprint(
    provider="scripted",
    model="scripted",
    temperature=0.0,
    prompt_hash="p",
    rubric_hash="r",
    tool_mode="scripted",
    plugin_major=0,
)


class MemorySink:
    """The run store's part the engine uses, in memory."""

    def __init__(self) -> None:
        self.stored: dict[SampleKey, Sample] = {}

    def lookup(
        self, key: SampleKey, *, item_id: str | None = None, nodeid: str | None = None
    ) -> Sample | None:
        return self.stored.get(key)

    def record(self, key: SampleKey, *, item_id: str, nodeid: str, sample: Sample, sync: bool = True) -> None:
        self.stored[key] = sample

    def sync(self) -> None:
        """Nothing to make durable in memory."""

    def describe_key(self, key: SampleKey) -> str:
        return "nothing"


def counting_engine(
    scores: dict[str, Sequence[int]], sink: MemorySink | None = None
) -> tuple[JudgeEngine, list[int]]:
    """An engine whose scripted judge scores an artifact by sample index; ``calls`` lists the indices."""
    calls: list[int] = []

    def scorer(call: ScriptedCall) -> int:
        calls.append(call.index)
        return int(scores[call.artifact][call.index % len(scores[call.artifact])])

    engine = JudgeEngine(
        JudgeSettings(model="scripted"), make_backend=lambda name: ScriptedBackend(scorer), sink=sink
    )
    return engine, calls


def auto_spec(artifact: str, **fields: Any) -> ItemSpec:
    return ItemSpec(
        nodeid=f"t.py::test_{artifact}",
        item_id=f"tone::t.py::test_{artifact}",
        dimension="tone",
        rubric="5 = calm",
        artifact=artifact,
        samples=PLAN.maximum,
        floor=3.0,
        adaptive=PLAN,
        **fields,
    )


def test_the_engine_samples_adaptively_and_records_why_it_stopped() -> None:
    engine, calls = counting_engine({"clear": [5], "borderline": [3, 4]})
    try:
        clear = engine.measure(auto_spec("clear"))
        assert (clear.n, sorted(calls)) == (3, [0, 1, 2])
        assert clear.adaptive is not None and clear.adaptive.stopped == "settled"
        calls.clear()
        borderline = engine.measure(auto_spec("borderline"))
        assert sorted(calls) == list(range(9)) and borderline.n == 9
        assert borderline.adaptive is not None
        assert (borderline.adaptive.stopped, borderline.adaptive.open) == ("maximum", ["floor"])
        assert borderline.mean == pytest.approx(31 / 9)
    finally:
        engine.close()


def test_the_engine_uses_the_baseline_entry_only_under_the_same_ruler() -> None:
    """4,4,4 against an entry of 3.67 (threshold 4.17 inside the interval): drift keeps it open to
    the maximum, but only when the entry's fingerprint is the samples'; another ruler: no drift."""
    engine, _ = counting_engine({"item": [4]})
    try:
        base = ((4, 4, 3), (4, 3, 4))
        same = engine.measure(
            auto_spec("item", reference=Reference(base, engine.measure(auto_spec("item")).fingerprint))
        )
        assert same.adaptive is not None and "drift" in same.adaptive.open and same.n > 3
        other = engine.measure(auto_spec("item", reference=Reference(base, FP)))
        assert other.adaptive is not None and (other.n, other.adaptive.stopped) == (3, "settled")
    finally:
        engine.close()


def test_the_sample_cache_key_holds_no_sample_count_samples_are_reused_across_n() -> None:
    """A session at N = 3, then one at N = 5 of the same item: the second judges only samples 3 and 4
    (the count left the cache key with the fingerprint); before, it judged all five again."""
    sink = MemorySink()
    engine, calls = counting_engine({"text": [4, 3]}, sink)
    fixed = ItemSpec(
        nodeid="t.py::t",
        item_id="tone::t.py::t",
        dimension="tone",
        rubric="5 = calm",
        artifact="text",
        samples=3,
    )
    try:
        engine.measure(fixed)
        assert sorted(calls) == [0, 1, 2]
        calls.clear()
        five = engine.measure(ItemSpec(**{**fixed.__dict__, "samples": 5}))
        assert sorted(calls) == [3, 4]
        assert five.n == 5 and len(sink.stored) == 5
        calls.clear()
        auto = engine.measure(auto_spec("text"))  # another item id, the same artifact and rubric
        assert sorted(calls) == [5, 6, 7, 8]
        assert auto.n == 9
    finally:
        engine.close()


def _measurement(n: int, record: AdaptiveRecord | None) -> Measurement:
    return Measurement(
        item_id=f"tone::t{n}",
        nodeid=f"t{n}",
        dimension="tone",
        floor=3.0,
        tolerance=0.5,
        samples=[Sample(index=i, dimension="tone", score=4, rationale="r") for i in range(n)],
        mean=4.0,
        sd=0.0,
        n=n,
        ci_low=3.0,
        ci_high=5.0,
        fingerprint=FP,
        adaptive=record,
    )


def test_the_session_summary_counts_items_samples_and_stops() -> None:
    settled = AdaptiveRecord(minimum=3, maximum=9, step=2, stopped="settled")
    at_max = AdaptiveRecord(minimum=3, maximum=9, step=2, stopped="maximum", open=["floor", "drift"])
    summary = adaptive_summary(
        [_measurement(3, settled), _measurement(3, settled), _measurement(9, at_max), _measurement(4, None)]
    )
    assert summary == {
        "items": 3,
        "minimum": 3,
        "maximum": 9,
        "samples": 15,
        "mean_samples": 5.0,
        "at_minimum": 2,
        "stopped": {"settled": 2, "agreed": 0, "maximum": 1, "budget": 0},
        "open_at_stop": {"floor": 1, "drift": 1},
    }
    assert adaptive_summary([_measurement(4, None)]) == {}


@pytest.mark.parametrize(("text", "value"), [("auto", "auto"), (" AUTO ", "auto"), ("5", 5)])
def test_judge_samples_takes_a_count_or_auto(text: str, value: int | str) -> None:
    assert options.samples_setting(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "many", "2.5", ""])
def test_judge_samples_rejects_anything_else(text: str) -> None:
    with pytest.raises(Exception, match="expected a whole number >= 1 or 'auto'"):
        options.samples_setting(text)


def test_samples_problem_and_call_range() -> None:
    assert samples_problem("auto") is None and samples_problem(4) is None
    assert samples_problem("sometimes") == "'sometimes' must be a whole number >= 1 or 'auto'"
    assert samples_problem(True) is not None and samples_problem(0) is not None
    assert call_range("auto", SamplePlan(4, 12, 4)) == (4, 12)
    assert call_range(5, SamplePlan()) == (5, 5)


def test_a_suite_dimension_takes_auto_and_rejects_other_words() -> None:
    from pydantic import ValidationError

    from pytest_aimeasure.suites.spec import DimensionSpec

    assert DimensionSpec(name="tone", rubric="5 = calm", samples="auto").samples == "auto"
    assert DimensionSpec(name="tone", rubric="5 = calm", samples=4).samples == 4
    with pytest.raises(ValidationError):
        DimensionSpec(name="tone", rubric="5 = calm", samples="sometimes")
    with pytest.raises(ValidationError):
        DimensionSpec(name="tone", rubric="5 = calm", samples=0)
