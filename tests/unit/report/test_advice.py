"""Each piece of advice checked against the state it describes (issue 22.5): the reports' "Next" lines
are derived from the one report model, so they cannot contradict the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_aimeasure.compare.drift import DimensionComparison
from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.report.advice import next_command, next_steps
from pytest_aimeasure.report.markdown import summary_markdown
from pytest_aimeasure.report.model import ReportSettings, SessionReport
from pytest_aimeasure.report.results import SessionResults
from pytest_aimeasure.report.terminal import summary_lines

ARGS = ("--ai-judge", "--judge-model", "scripted", "-p", "no:randomly")
SPEND = {"calls": 3, "cached": 0, "retries": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}


def report(*, update: dict[str, Any] | None = None, passed: bool = True, **fields: Any) -> SessionReport:
    results = SessionResults(
        run_id="20261201T120000Z-abcd",
        judge_model="scripted",
        passed=passed,
        exit_status=0 if passed else 1,
        items=[],
        findings=fields.pop("findings", []),
        spend=SPEND,
        dimensions={"tone": DimensionComparison(dimension="tone", verdict="new", items_new=["t"])},
        baseline={"path": "aimeasure-baseline.json", "update": update},
        failed_because=fields.pop("failed_because", []),
    )
    settings = ReportSettings(model="scripted", baseline=Path("aimeasure-baseline.json"), **fields)
    return SessionReport(results=results, settings=settings, args=ARGS, live=True)


UPDATE = {"added": ["t"], "updated": [], "removed": [], "unchanged": [], "kept_because": {}}


def test_a_run_without_a_baseline_is_told_to_record_one_with_its_own_judge() -> None:
    first = report()
    command = "pytest --ai-judge --judge-model scripted -p no:randomly --update-baseline"
    assert next_command(first).startswith(command)
    assert "record the first baseline" in next_command(first)
    # the Markdown "Next" line is the same command: --judge-model kept
    assert "--judge-model scripted" in summary_markdown(first).split("**Next:**")[1]


def test_a_stored_run_keeps_its_judge_in_the_advice() -> None:
    stored = SessionReport.of(report().results)
    assert "--judge-model scripted --update-baseline" in next_command(stored)


def test_the_run_that_wrote_the_baseline_is_not_told_to_record_it() -> None:
    wrote = report(update=UPDATE, update_baseline=True)
    assert "record the first baseline" not in next_command(wrote)
    assert "--update-baseline" not in next_command(wrote)
    lines = summary_lines(wrote)
    assert not any("record" in line or "new items" in line for line in lines), lines
    assert wrote.new_count == 0


def test_a_failed_run_never_says_nothing_needs_a_look() -> None:
    reason = "1 test(s) failed (gates, floors or judge errors): t.py::x"
    failed = report(passed=False, failed_because=[reason])
    for verbosity in (-1, 0, 1):
        text = "\n".join(summary_lines(failed, verbosity=verbosity))
        assert "nothing needs a look" not in text and "failed the run" in text


def test_quiet_points_at_findings_only_when_the_default_lists_them() -> None:
    finding = Finding(kind="floor_warning", severity="warn", subject="tone::t", message="near the floor")
    listed = report(findings=[finding])
    quiet = "\n".join(summary_lines(listed, verbosity=-1))
    default = "\n".join(summary_lines(listed, verbosity=0))
    assert "findings need a look" in quiet and "near the floor" in default
    # the run's one "no baseline yet" line is not a finding the default lists one by one: -q is quiet
    new = Finding(kind="new", severity="info", subject="baseline", message="no baseline entry yet")
    quiet_new = "\n".join(summary_lines(report(findings=[new]), verbosity=-1))
    assert "findings need a look" not in quiet_new


def test_an_interrupted_run_is_told_to_resume_and_only_then() -> None:
    assert not any("--aimeasure-resume" in s for s in next_steps(report(), 0))
    interrupted = SessionReport(
        results=report().results, settings=report().settings, args=ARGS, interrupted=True, live=True
    )
    assert any("--aimeasure-resume=20261201T120000Z-abcd" in s for s in next_steps(interrupted, 0))
