"""The terminal summary's spend line: one count per fact (issue 22.6), so its figures add up; and a
finding's lines."""

from __future__ import annotations

from typing import Any

from pytest_aimeasure.compare.drift import Comparison, DimensionComparison
from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.report.model import SessionReport
from pytest_aimeasure.report.results import SessionResults
from pytest_aimeasure.report.terminal import summary_lines

SPEND: dict[str, Any] = {
    "calls": 12,
    "cached": 0,
    "retries": 0,
    "transport_retries": 0,
    "input_tokens": 1200,
    "output_tokens": 300,
    "cost_usd": 0.01,
    "max_in_flight": 4,
    "limit_reached": 4,
    "rate_limited": 0,
    "rate_limit_wait_s": 0.0,
}


def spend_line(**spend: Any) -> str:
    results = SessionResults(
        run_id="20261201T120000Z-abcd",
        judge_model="anthropic/claude-test",
        passed=True,
        exit_status=0,
        items=[],
        findings=[],
        spend={**SPEND, **spend},
    )
    return next(line for line in summary_lines(SessionReport(results=results)) if " calls, " in line)


def test_calls_retried_after_a_rate_limit_are_the_retries_the_line_counts() -> None:
    line = spend_line(transport_retries=4, rate_limited=4, rate_limit_wait_s=2.5)
    assert "12 calls, 0 samples reused, 4 retries (4 after a failed call), 1,200 tokens in" in line
    assert line.endswith(", at most 4 in flight (limit reached 4), 4 rate-limited (paused 2.5s)")
    assert "0 retries" not in line and "calls retried" not in line


def test_retries_after_an_invalid_verdict_and_a_failed_call_add_up_to_one_count() -> None:
    line = spend_line(retries=2, transport_retries=1)
    assert "3 retries (2 after an invalid verdict, 1 after a failed call)" in line
    assert "rate-limited" not in line


def test_one_retry_is_one_retry_and_none_is_said_plainly() -> None:
    assert "1 retry (1 after an invalid verdict)," in spend_line(retries=1)
    assert "0 retries," in spend_line()


def test_a_stored_run_without_the_transport_figures_reads_its_retries() -> None:
    old = {k: v for k, v in SPEND.items() if k not in ("transport_retries", "rate_limited", "max_in_flight")}
    results = SessionResults(
        run_id="r", judge_model="scripted", passed=True, exit_status=0, items=[], findings=[], spend=old
    )
    (line,) = [line for line in summary_lines(SessionReport(results=results)) if " calls, " in line]
    assert "0 retries, 1,200 tokens in" in line


def test_a_finding_wraps_between_words_not_inside_a_hyphenated_name() -> None:
    # "budget-freeze" and "town-hall" straddle the 110th column: wrapped at a hyphen, a line would
    # end in "budget-" or "town-".
    message = (
        "gate failed: AssertionError: 1 of 6 walks failed on adventure-seed5: - worst: loop: revisited "
        + ("budget-freeze in the same state after 5 turns")
    )
    rationale = "x" * 90 + " town-hall is a dead end"
    finding = Finding(kind="gate_failed", severity="fail", subject="t", message=message, rationale=rationale)
    results = SessionResults(
        run_id="r",
        judge_model="scripted",
        passed=False,
        exit_status=1,
        items=[],
        findings=[finding],
        spend=SPEND,
    )
    text = "\n".join(str(line) for line in summary_lines(SessionReport(results=results)))
    assert "budget-freeze" in text and "town-hall" in text


def test_an_inconclusive_dimension_reads_its_advice_after_a_colon_not_in_nested_parentheses() -> None:
    advice = "detects a drop of 0.73 at 80% (judging the baseline's outputs again when it looks lower)"
    # It moved by more than its tolerance: a dimension that did not is not in the drift table.
    tone = DimensionComparison(
        dimension="tone", verdict="inconclusive", delta=-0.6, tolerance=0.5, advice=advice
    )
    results = SessionResults(
        run_id="r", judge_model="scripted", passed=True, exit_status=0, items=[], findings=[], spend=SPEND
    )
    summary = SessionReport(results=results, comparison=Comparison(dimensions={"tone": tone}))
    (row,) = [line for line in summary_lines(summary) if line.startswith("tone (dimension")]
    assert row.rstrip().endswith(f"inconclusive: {advice}")
