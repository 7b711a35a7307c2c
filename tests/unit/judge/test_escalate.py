"""Escalation's rule and its path through the engine (scripted backends, one per model), and how the
comparison treats an item escalated in one session only."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.compare.drift import compare
from pytest_aimeasure.judge.adaptive import Reference
from pytest_aimeasure.judge.backends.scripted import ScriptedBackend, ScriptedCall
from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings
from pytest_aimeasure.judge.errors import NotJudged
from pytest_aimeasure.judge.escalate import escalation_reasons
from pytest_aimeasure.judge.generations import ameasure_repeats
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.measure.artifact import Artifact
from pytest_aimeasure.measure.models import Measurement
from pytest_aimeasure.measure.sampling import SamplePlan
from pytest_aimeasure.measure.stats import item_stats
from pytest_aimeasure.report.results import ResultItem, SessionResults
from pytest_aimeasure.session.fixture import floor_message
from pytest_aimeasure.session.merge import MergeError, merge
from pytest_aimeasure.store.baseline import (
    BaselineFile,
    dumps_baseline,
    entry_from_measurement,
    parse_baseline,
)

N = 3


@pytest.mark.parametrize(
    ("scores", "floor", "reasons"),
    [
        ([4, 4, 4], 3.0, []),
        ([3, 4, 4], 3.0, []),  # one point apart, all at or above the floor
        ([2, 4, 4], 3.0, ["disagreement", "straddles_floor"]),
        ([3, 5, 5], 3.0, ["disagreement"]),  # two points apart, all at or above the floor
        ([2, 3, 3], 3.0, ["straddles_floor"]),  # one point apart, across the floor
        ([2, 2, 2], 3.0, []),  # clearly below: the floor verdict is settled
        ([4, 4, 5], 4.5, ["straddles_floor"]),
        ([], 3.0, []),
    ],
)
def test_escalation_rule(scores: list[int], floor: float, reasons: list[str]) -> None:
    assert escalation_reasons(scores, floor) == reasons


class Judges:
    """One scripted backend per model; each model's scores per artifact, cycled per sample index."""

    def __init__(self, scores: dict[str, dict[str, list[int]]]) -> None:
        self.scores = scores
        self.calls: Counter[tuple[str, str]] = Counter()

    def make(self, model: str) -> ScriptedBackend:
        def score(call: ScriptedCall) -> int:
            self.calls[(model, call.artifact)] += 1
            cycle = self.scores[model][call.artifact]
            return cycle[call.index % len(cycle)]

        return ScriptedBackend(score, name=model)


class CountingBudget:
    """Admits ``left`` calls, then refuses."""

    def __init__(self, left: int) -> None:
        self.left = left
        self.reserved = 0

    def reserve(self, estimate_usd: float, *, may_wait: bool = False) -> Any | None:
        if self.left <= 0:
            return None
        self.left -= 1
        self.reserved += 1
        return object()

    def settle(self, reservation: Any, actual_usd: float | None) -> None:
        pass


@pytest.fixture
def judges() -> Judges:
    return Judges(
        {
            "scripted:weak": {"split": [2, 4, 4], "clear": [4, 4, 4], "r1": [2, 2, 2], "r2": [4, 4, 4]},
            "scripted:strong": {"split": [3, 3, 3], "clear": [1, 1, 1], "r1": [3, 3, 3], "r2": [3, 3, 3]},
        }
    )


def engine_for(judges: Judges, **kwargs: Any) -> Iterator[JudgeEngine]:
    engine = JudgeEngine(JudgeSettings(model="scripted:weak"), make_backend=judges.make, **kwargs)
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def engine(judges: Judges) -> Iterator[JudgeEngine]:
    yield from engine_for(judges)


def spec(artifact: str, **kwargs: Any) -> ItemSpec:
    return ItemSpec(
        nodeid=f"test_x.py::test[{artifact}]",
        item_id=f"tone::test_x.py::test[{artifact}]",
        dimension="tone",
        rubric="5 = calm",
        artifact=artifact,
        samples=N,
        floor=3.0,
        **kwargs,
    )


def test_an_unsettled_item_is_rejudged_by_the_stronger_model(engine: JudgeEngine, judges: Judges) -> None:
    m = engine.measure(spec("split", escalate="scripted:strong"))
    assert judges.calls == Counter({("scripted:weak", "split"): N, ("scripted:strong", "split"): N})
    assert m.scores == [3, 3, 3] and m.judge == "scripted:strong" and m.fingerprint.model == "scripted:strong"
    assert m.escalation is not None
    assert m.escalation.reasons == ["disagreement", "straddles_floor"] and m.escalation.spread == 2
    standing = m.escalation.standing
    assert standing.scores == [2, 4, 4] and standing.fingerprint.model == "scripted:weak"
    assert standing.judge == "scripted:weak" and standing.escalation is None
    assert standing.excerpt == "" and m.excerpt == "split"  # the artifact is kept once
    assert not m.breached  # the stronger judge's 3.0 decides: not below the floor 3


def test_a_settled_item_costs_no_more_calls(engine: JudgeEngine, judges: Judges) -> None:
    m = engine.measure(spec("clear", escalate="scripted:strong"))
    assert judges.calls == Counter({("scripted:weak", "clear"): N})
    assert m.escalation is None and m.scores == [4, 4, 4]


def test_a_dimensions_judge_replaces_the_sessions(engine: JudgeEngine, judges: Judges) -> None:
    m = engine.measure(spec("clear", judge="scripted:strong"))
    assert judges.calls == Counter({("scripted:strong", "clear"): N})
    assert m.scores == [1, 1, 1] and m.judge == "scripted:strong"


def test_escalation_calls_pass_the_budget(judges: Judges) -> None:
    budget = CountingBudget(left=N + 1)  # the standing samples, and one escalated call
    for engine in engine_for(judges, budget=budget):
        with pytest.raises(NotJudged):
            engine.measure(spec("split", escalate="scripted:strong"))
    assert budget.reserved == N + 1
    assert judges.calls[("scripted:strong", "split")] == 1


PLAN = SamplePlan(3, 9, 2)


def auto(artifact: str, **kwargs: Any) -> ItemSpec:
    return replace(spec(artifact, **kwargs), samples=PLAN.maximum, adaptive=PLAN)


def test_auto_sampling_and_escalation_together() -> None:
    """The standing judge samples look by look and escalation reads its final samples; the stronger
    judge samples by the same plan, against the baseline scores taken under its own ruler only."""
    judges = Judges(
        {
            "scripted:weak": {"split": [2, 4, 4], "steady": [4]},
            "scripted:strong": {"split": [4], "steady": [4]},
        }
    )
    base = ((4, 4, 3), (4, 3, 4))  # mean 3.67: 4, 4, 4 leaves the drift decision open at 3 samples
    for engine in engine_for(judges):
        weak_fp = engine.measure(spec("steady")).fingerprint
        strong_fp = engine.measure(spec("steady", judge="scripted:strong")).fingerprint
        judges.calls.clear()

        m = engine.measure(auto("split", escalate="scripted:strong"))
        standing = m.escalation.standing if m.escalation is not None else None
        assert standing is not None and standing.adaptive is not None
        # Escalation fired on the standing judge's final samples, all of them looked at adaptively.
        assert judges.calls[("scripted:weak", "split")] == standing.n > PLAN.minimum
        assert m.escalation is not None and "straddles_floor" in m.escalation.reasons
        # The stronger judge took its own looks: unanimous 4s with no reference settle at the minimum.
        assert m.adaptive is not None and (m.n, m.adaptive.stopped) == (PLAN.minimum, "settled")
        assert judges.calls[("scripted:strong", "split")] == PLAN.minimum and m.judge == "scripted:strong"

        # A baseline entry under the stronger judge's ruler is its reference: the drift decision keeps
        # it sampling; the same entry is no reference for the standing judge (another ruler).
        judges.calls.clear()
        m = engine.measure(auto("split", escalate="scripted:strong", reference=Reference(base, strong_fp)))
        assert m.adaptive is not None and "drift" in m.adaptive.open and m.n > PLAN.minimum
        assert judges.calls[("scripted:strong", "split")] == m.n
        assert m.escalation is not None and m.escalation.standing.n == standing.n

        # An escalated entry's standing scores are the standing judge's reference (it is not
        # escalated here: one score every time); without them it settles at the minimum.
        judges.calls.clear()
        escalated_entry = Reference(base, strong_fp, standing=Reference(base, weak_fp))
        m = engine.measure(auto("steady", escalate="scripted:strong", reference=escalated_entry))
        assert m.escalation is None and m.adaptive is not None and "drift" in m.adaptive.open
        assert judges.calls == Counter({("scripted:weak", "steady"): m.n}) and m.n > PLAN.minimum
        m = engine.measure(auto("steady", escalate="scripted:strong", reference=Reference(base, strong_fp)))
        assert m.escalation is None and m.n == PLAN.minimum


def text_artifact(key: str, text: str) -> Artifact:
    sha = hashlib.sha256(text.encode()).hexdigest()
    return Artifact(key=key, value=text, text=text, sha256=sha, media_type="text")


def test_repeats_escalate_on_the_pooled_samples_and_rejudge_every_repeat(
    engine: JudgeEngine, judges: Judges
) -> None:
    repeats = [(i, text_artifact(f"a#r{i + 1}", t)) for i, t in enumerate(["r1", "r2"])]
    # Each repeat alone is settled (2,2,2 and 4,4,4); pooled they disagree by 2 and straddle the floor.
    item = spec("r1", escalate="scripted:strong")
    m = engine.run(ameasure_repeats(engine, item, repeats, generated=2, group_key="a"))
    assert judges.calls == Counter(
        {
            ("scripted:weak", "r1"): N,
            ("scripted:weak", "r2"): N,
            ("scripted:strong", "r1"): N,
            ("scripted:strong", "r2"): N,
        }
    )
    assert m.escalation is not None and m.repeats is not None and m.repeats.k == 2
    assert m.scores == [3] * 6 and {s.model for s in m.samples} == {"scripted:strong"}
    assert sorted(m.escalation.standing.scores) == [2, 2, 2, 4, 4, 4]


# -- the comparison ------------------------------------------------------------------------------------


def measured(engine: JudgeEngine, artifact: str, **kwargs: Any) -> Measurement:
    return engine.measure(spec(artifact, **kwargs))


def baseline_of(*ms: Measurement) -> BaselineFile:
    entries = {m.item_id: entry_from_measurement(m) for m in ms}
    # Through the file format, as a session reads it.
    return parse_baseline(dumps_baseline(BaselineFile(entries=entries)), Path("b.json"))


def test_escalated_now_not_in_the_baseline_compares_on_the_standing_judge(
    engine: JudgeEngine, judges: Judges
) -> None:
    judges.scores["scripted:weak"]["split"] = [3, 4, 4]
    base = baseline_of(measured(engine, "split", escalate="scripted:strong"))
    judges.scores["scripted:weak"]["split"] = [2, 4, 4]
    now = measured(engine, "split", escalate="scripted:strong")
    assert now.escalation is not None
    c = compare(base, [now], whole_suite=True)
    item = c.items[now.item_id]
    # Compared (not "not comparable"): a -1/3 move within [2, 4, 4]'s spread settles nothing.
    assert item.compared_on == "standing_judge" and item.verdict == "inconclusive"
    assert item.now_mean == pytest.approx(10 / 3) and item.baseline_mean == pytest.approx(11 / 3, abs=1e-4)
    assert c.dimensions["tone"].verdict not in ("not_comparable", "new")
    assert c.dimensions["tone"].delta == pytest.approx(-1 / 3, abs=1e-4)


def test_escalated_in_the_baseline_not_now_compares_on_the_standing_scores_it_kept(
    engine: JudgeEngine, judges: Judges
) -> None:
    base = baseline_of(measured(engine, "split", escalate="scripted:strong"))
    entry = next(iter(base.entries.values()))
    assert entry.fingerprint.model == "scripted:strong" and entry.scores == [3, 3, 3]
    assert entry.standing is not None and entry.standing.scores == [2, 4, 4]
    judges.scores["scripted:weak"]["split"] = [3, 4, 4]
    now = measured(engine, "split", escalate="scripted:strong")
    assert now.escalation is None
    item = compare(base, [now], whole_suite=True).items[now.item_id]
    assert item.compared_on == "standing_judge" and item.verdict == "inconclusive"
    assert item.baseline_mean == pytest.approx(10 / 3) and item.baseline_n == 3
    assert item.now_mean == pytest.approx(11 / 3)


def test_no_shared_ruler_stays_not_comparable(engine: JudgeEngine, judges: Judges) -> None:
    judges.scores["scripted:other"] = {"split": [3, 3, 3]}
    base = baseline_of(measured(engine, "split", escalate="scripted:other"))
    now = measured(engine, "split", escalate="scripted:strong")
    c = compare(base, [now], whole_suite=True)
    assert c.items[now.item_id].verdict == "not_comparable" and c.items[now.item_id].compared_on is None
    assert c.dimensions["tone"].verdict == "not_comparable"
    # Both escalated, the same strong judge: compared on it, as any item.
    # (prior=None: without the one-session prior one item's two-point drop is significant on its own)
    same = compare(baseline_of(now), [replace_scores(now, [1, 1, 1])], whole_suite=True, prior=None).items[
        now.item_id
    ]
    assert same.compared_on is None and same.verdict == "regressed"
    assert same.baseline_mean == pytest.approx(3.0) and same.now_mean == pytest.approx(1.0)


def replace_scores(m: Measurement, scores: list[int]) -> Measurement:
    samples = [s.model_copy(update={"score": v}) for s, v in zip(m.samples, scores, strict=True)]
    st = item_stats(scores)
    return m.model_copy(
        update={"samples": samples, "mean": st.mean, "sd": st.sd, "ci_low": st.ci_low, "ci_high": st.ci_high}
    )


# -- aimeasure merge: shards of one session with per-dimension judges and escalations ------------------


def shard(*ms: Measurement) -> SessionResults:
    items = [
        ResultItem(nodeid=m.nodeid, kind="dimension", outcome="passed", item_id=m.item_id, measurements=[m])
        for m in ms
    ]
    return SessionResults(passed=True, exit_status=0, items=items, findings=[], spend={})


def test_merge_accepts_shards_with_per_dimension_judges_and_escalations(
    engine: JudgeEngine, judges: Judges, tmp_path: Path
) -> None:
    judges.scores["scripted:other"] = {"a": [4, 4, 4], "b": [4, 4, 4]}
    judges.scores["scripted:weak"] |= {"a": [4, 4, 4], "b": [4, 4, 4]}

    def item(artifact: str, dimension: str, **kwargs: Any) -> Measurement:
        s = spec(artifact, **kwargs)
        return engine.measure(replace(s, dimension=dimension, item_id=f"{dimension}::{s.nodeid}"))

    one = shard(
        item("split", "tone", escalate="scripted:strong"), item("a", "accuracy", judge="scripted:other")
    )
    two = shard(
        item("clear", "tone", escalate="scripted:strong"), item("b", "accuracy", judge="scripted:other")
    )
    merged = merge([("one.json", one), ("two.json", two)], baseline_path=tmp_path / "none.json")
    assert len(merged.items) == 4
    # Another judge for accuracy in one shard: refused, naming the dimension.
    three = shard(item("b", "accuracy", judge="scripted:weak"))
    refused = r"three.json was judged with a different judge fingerprint than one.json \(dimension 'accuracy'"
    with pytest.raises(MergeError, match=refused):
        merge([("one.json", one), ("three.json", three)], baseline_path=tmp_path / "none.json")


def test_a_floor_breach_after_escalation_names_both_judges(engine: JudgeEngine, judges: Judges) -> None:
    judges.scores["scripted:strong"]["split"] = [2, 2, 2]
    m = engine.measure(spec("split", escalate="scripted:strong"))
    assert m.breached
    message = floor_message(m)
    assert "samples: 2, 2, 2" in message
    assert (
        "escalated to scripted:strong (samples disagree by 2 points; samples straddle the floor 3); "
        "the standing judge scripted:weak scored 2, 4, 4 (mean 3.33)"
    ) in message
