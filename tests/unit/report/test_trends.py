"""Trends across runs: one line per dimension and suite target, readable axis labels, and a judge
change marked only where the ruler really changed between the points compared."""

from __future__ import annotations

from pytest_aimeasure.measure.models import Fingerprint, Measurement, Sample
from pytest_aimeasure.report.results import ResultItem, SessionResults
from pytest_aimeasure.report.trends import axis_labels, trends

JUDGE = Fingerprint(
    provider="anthropic",
    model="claude-haiku-4-5",
    temperature=0.0,
    samples=3,
    prompt_hash="p",
    rubric_hash="r",
    plugin_major=0,
)
ESCALATION = JUDGE.model_copy(update={"model": "claude-opus-4-1"})
NEW_PROMPT = JUDGE.model_copy(update={"prompt_hash": "p2"})


def item(name: str, score: int, *, target: str | None = None, ruler: Fingerprint = JUDGE) -> ResultItem:
    nodeid = f"test_x.py::{name}" + (f"[{target}]" if target else "")
    m = Measurement(
        item_id=f"tone::{nodeid}",
        nodeid=nodeid,
        dimension="tone",
        floor=3.0,
        tolerance=0.5,
        samples=[Sample(index=i, dimension="tone", score=score, rationale="r") for i in range(3)],
        mean=float(score),
        sd=0.0,
        n=3,
        ci_low=score - 0.5,
        ci_high=score + 0.5,
        fingerprint=ruler,
    )
    extra = {"suite": {"suite": "probes", "target": target}} if target else {}
    return ResultItem(nodeid=nodeid, kind="dimension", outcome="passed", measurements=[m], extra=extra)


def run(*items: ResultItem) -> SessionResults:
    return SessionResults(passed=True, exit_status=0, items=list(items), findings=[], spend={})


def test_each_suite_target_has_its_own_line() -> None:
    runs = [
        (
            f"20261201T1{k}0500Z-ab{k}0",
            run(item("a", 5, target="steady"), item("a", 5 - k, target="drifting")),
        )
        for k in range(3)
    ]
    series = trends(runs)
    assert sorted(series) == ["tone · drifting", "tone · steady"]
    assert [p.mean for p in series["tone · steady"].points] == [5.0, 5.0, 5.0]
    assert [p.mean for p in series["tone · drifting"].points] == [5.0, 4.0, 3.0]
    assert series["tone · drifting"].target == "drifting" and series["tone · drifting"].dimension == "tone"
    # Items without a target (plain pytest tests) keep the dimension's name.
    assert list(trends([("r1", run(item("a", 4)))])) == ["tone"]


def test_axis_labels_are_the_time_with_the_date_where_the_day_changes() -> None:
    ids = ["20261130T230500Z-7841", "20261201T000700Z-aa01", "20261201T140500Z-3fa2", "not-a-stamp"]
    assert axis_labels(ids) == {
        "20261130T230500Z-7841": "23:05\n11-30",
        "20261201T000700Z-aa01": "00:07\n12-01",
        "20261201T140500Z-3fa2": "14:05",
        "not-a-stamp": "not-a-stamp",
    }
    # Runs started in the same minute are told apart by their seconds.
    same = ["20261201T221105Z-0001", "20261201T221131Z-0002", "20261201T221500Z-0003"]
    assert list(axis_labels(same).values()) == ["22:11:05\n12-01", "22:11:31", "22:15"]


def test_an_escalation_judge_seen_before_is_no_judge_change() -> None:
    plain = run(item("a", 4), item("b", 4))
    escalated = run(item("a", 4), item("b", 3, ruler=ESCALATION), item("c", 4))
    series = trends(
        [
            ("20261201T100000Z-0001", escalated),  # mixed from the start: nothing to compare with
            ("20261201T110000Z-0002", plain),
            ("20261201T120000Z-0003", escalated),  # the same escalation judge again
            ("20261201T130000Z-0004", run(item("a", 4, ruler=NEW_PROMPT), item("b", 4, ruler=NEW_PROMPT))),
        ]
    )["tone"]
    assert [p.ruler_changed for p in series.points] == [[], [], [], ["prompt_hash"]]


def test_an_escalation_judge_appearing_for_the_first_time_is_marked_once() -> None:
    plain = run(item("a", 4), item("b", 4))
    escalated = run(item("a", 4), item("b", 3, ruler=ESCALATION), item("c", 4))
    series = trends(
        [
            ("20261201T100000Z-0001", plain),
            ("20261201T110000Z-0002", escalated),
            ("20261201T120000Z-0003", escalated),
        ]
    )["tone"]
    assert [p.ruler_changed for p in series.points] == [[], ["model"], []]


def test_the_report_draws_a_trend_for_lines_with_two_runs_and_counts_the_others() -> None:
    from pytest_aimeasure.report.html import render_html

    series = trends(
        [
            ("20261201T100000Z-0001", run(item("a", 4, target="steady"))),
            ("20261201T110000Z-0002", run(item("a", 4, target="steady"), item("a", 3, target="drifting"))),
        ]
    )
    html = render_html(run(item("a", 4, target="steady")), trends=series)
    assert html.count('class="chart trend"') == 1 and 'id="chart-trend-tone---steady"' in html
    assert "1 line(s) with one run so far are not drawn: a trend needs two runs." in html
    first = render_html(run(item("a", 4)), trends=trends([("20261201T100000Z-0001", run(item("a", 4)))]))
    assert 'class="chart trend"' not in first and "1 line(s) with one run so far" in first
