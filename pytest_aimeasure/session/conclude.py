"""The end of a session on the controller: findings, the baseline comparison and update, the exit
status (set, never raised), the JSON results and the run's final record."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pytest

from pytest_aimeasure.measure.models import Finding, Measurement
from pytest_aimeasure.session.outcome import (
    Outcome,
    SessionFailure,
    drift_severities,
    failed_tests_reason,
    session_failures,
)
from pytest_aimeasure.store.cost import usage_findings

if TYPE_CHECKING:
    from pytest_aimeasure.attribution.rejudge import Attribution
    from pytest_aimeasure.report.model import SessionReport
    from pytest_aimeasure.report.results import SessionResults
    from pytest_aimeasure.session.state import SessionState

def _floor_breach(m: Measurement, nodeid: str) -> Finding:
    lowest = m.lowest
    return Finding(
        kind="floor_breach",
        severity="fail",
        subject=m.item_id,
        nodeid=nodeid,
        message=f"{m.dimension}: mean {m.mean:.2f} (95% CI {m.ci_low:.2f}–{m.ci_high:.2f}) "
        f"below the floor {m.floor:g}; samples {', '.join(map(str, m.scores))}",
        rationale=f"#{lowest.index} scored {lowest.score}: {lowest.rationale}",
        excerpt=m.excerpt,
        detail={"mean": round(m.mean, 4), "floor": m.floor, "scores": m.scores},
    )


def _escalated(m: Measurement, nodeid: str) -> Finding:
    assert m.escalation is not None
    w = m.escalation.standing
    return Finding(
        kind="escalated",
        severity="info",
        subject=m.item_id,
        nodeid=nodeid,
        message=(
            f"{m.dimension}: escalated to {m.fingerprint.model} ({m.escalation.reason_text}): the "
            f"standing judge {w.fingerprint.model} scored mean {w.mean:.2f} (samples "
            f"{', '.join(map(str, w.scores))}), the stronger judge {m.mean:.2f} (samples "
            f"{', '.join(map(str, m.scores))}); the stronger judge's mean decides the floor verdict and "
            "goes to the baseline"
        ),
        excerpt=m.excerpt,
        detail={
            "reasons": list(m.escalation.reasons),
            "standing": {"model": w.fingerprint.model, "mean": round(w.mean, 4), "scores": w.scores},
            "escalated": {"model": m.fingerprint.model, "mean": round(m.mean, 4), "scores": m.scores},
        },
    )


def _floor_and_error_findings(state: SessionState) -> list[Finding]:
    out: list[Finding] = []
    for result in state.results.values():
        out += [_floor_breach(m, result.nodeid) for m in result.measurements if m.breached]
        out += [_escalated(m, result.nodeid) for m in result.measurements if m.escalation is not None]
        if result.judge_error:
            out.append(
                Finding(
                    kind="judge_error",
                    severity="fail",
                    subject=result.item_id or result.nodeid,
                    nodeid=result.nodeid,
                    message=result.message or "judge error",
                )
            )
    return out


def _one_per_subject(findings: list[Finding], kind: str) -> list[Finding]:
    """One finding of ``kind`` per subject: a warning that many items repeat (the same generator
    judged by its own family) is shown once, naming the items."""
    out: list[Finding] = []
    first: dict[str, int] = {}
    items: dict[str, list[str]] = {}
    for f in findings:
        if f.kind != kind:
            out.append(f)
            continue
        items.setdefault(f.subject, []).append(f.nodeid or f.subject)
        if f.subject not in first:
            first[f.subject] = len(out)
            out.append(f)
    for subject, at in first.items():
        nodeids = sorted(set(items[subject]))
        if len(nodeids) > 1:
            f = out[at]
            out[at] = f.model_copy(
                update={
                    "message": f"{f.message} ({len(nodeids)} items)",
                    "nodeid": None,
                    "detail": {**f.detail, "items": nodeids},
                }
            )
    return out


def preload() -> None:
    """Import what the session's end needs now, on the main thread, before any judging: on CPython
    < 3.13 an import that compiles source while the judge thread formats a traceback can crash
    ast.parse."""
    import pytest_aimeasure.compare.drift
    import pytest_aimeasure.report.model
    import pytest_aimeasure.report.publish
    import pytest_aimeasure.report.results
    import pytest_aimeasure.report.terminal  # noqa: F401


def conclude(state: SessionState, session: pytest.Session) -> tuple[Outcome, SessionReport]:
    from pytest_aimeasure.store.baseline import coverage_from_results, gone_entries
    s = state.settings
    outcome = Outcome(interrupted=session.exitstatus == pytest.ExitCode.INTERRUPTED)
    whole = state.whole_suite(session)
    measurements = [m for r in state.results.values() for m in r.measurements]
    # The one rule for what an update may remove (baseline.keep_reason) also decides what is
    # "missing": a test that ran without a value (a failed gate, a budget stop, a judge error) is not.
    cover = coverage_from_results(
        state.results.values(),
        whole_suite=whole,
        prune=s.prune_baseline,
        collected=state.collected,
        failed_collectors=state.failed_collectors,
    )
    outcome.gone = gone_entries(state.baseline, cover, {m.item_id for m in measurements if m.samples})
    attribution: Attribution | None = None
    findings: list[Finding] = []
    for result in state.results.values():
        findings += result.findings
    findings = _one_per_subject(findings, "self_preference")
    findings += _floor_and_error_findings(state)
    findings += usage_findings(measurements)

    if s.drift != "off" and (measurements or state.baseline is not None):
        from pytest_aimeasure.compare.drift import compare

        outcome.comparison = compare(
            state.baseline,
            measurements,
            whole_suite=whole,
            gone_ids=outcome.gone,
            var_floor=s.var_floor,
            var_floors=state.var_floors(measurements),  # dimensions whose noise a calibration measured
        )
        drift_findings = drift_severities(
            outcome.comparison.findings, drift=s.drift, update_baseline=s.update_baseline
        )
        if s.attribute and state.recording is not None and state.baseline is not None:
            from pytest_aimeasure.attribution.rejudge import attribute_session, rubrics_of

            attribution, drift_findings = attribute_session(
                state.engine(),
                state.recording.store,
                state.baseline,
                outcome.comparison,
                measurements,
                rubrics_of(state.results.values()),
                drift_findings,
                var_floor=s.var_floor,
                var_floors=state.var_floors(measurements),
                fail=s.drift == "fail",
            )
            outcome.attribution = {d: a.model_dump(mode="json") for d, a in attribution.dimensions.items()}
        findings += drift_findings
    if state.recording is not None:
        findings += state.recording.session_findings()
    outcome.calibration, calibration_findings = state.calibration_summary(measurements)
    findings += calibration_findings

    if any(r.extra.get("suite") for r in state.results.values()):
        from pytest_aimeasure.report.targets import comparison_tables

        outcome.tables = comparison_tables(list(state.results.values()), var_floor=s.var_floor)
    state.config.hook.pytest_aimeasure_findings(findings=findings, config=state.config)
    outcome.findings = findings

    failures: list[SessionFailure] = []
    if s.update_baseline and not session.shouldstop:
        from pytest_aimeasure.store.baseline import BaselineError, update_baseline

        judge_errors = [r.item_id or "" for r in state.results.values() if r.judge_error]
        try:
            summary = update_baseline(
                s.baseline,
                measurements,
                whole_suite=whole,
                prune=s.prune_baseline,
                judge_error_ids=[j for j in judge_errors if j],
                # Pooling needs the comparison to know which items really changed; without it
                # (--aimeasure-drift off) an update replaces, as a changed item must not be averaged in.
                pool=s.baseline_pool if outcome.comparison is not None else 1,
                coverage=cover,
                moved=(outcome.comparison.moved() | (attribution.system_moved if attribution else set()))
                if outcome.comparison is not None
                else (),
                run_id=state.recording.run_id if state.recording is not None else None,
                # After attribution the entries hold today's judge's scores of their own artifacts:
                # the comparison chain goes on under the new ruler instead of starting over.
                rejudged=attribution.rejudged if attribution is not None else None,
            )
            outcome.baseline_update = summary.model_dump(mode="json")
        except BaselineError as exc:
            outcome.baseline_note = str(exc)
            outcome.failed_because.append(f"the baseline was not updated: {exc}")
            failures.append(SessionFailure("baseline", s.baseline.name, str(exc)))

    found, reasons = session_failures(findings)
    outcome.failures = failures + found
    outcome.failed_because += reasons
    if session.testsfailed:
        outcome.failed_because.insert(0, failed_tests_reason(session.testsfailed))
    outcome.passed = not outcome.failed_because
    if outcome.failed_because and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

    from pytest_aimeasure.report.model import SessionReport
    from pytest_aimeasure.report.publish import publish

    # The reports read this one model only, never the live session state.
    frozen = SessionReport(
        results=build_results(state, outcome, int(session.exitstatus), whole_suite=whole),
        comparison=outcome.comparison,
        settings=s.for_reports(),
        args=tuple(state.config.invocation_params.args),
        interrupted=outcome.interrupted,
        gone=tuple(outcome.gone),
        has_baseline=state.baseline is not None,
        live=True,
    )
    publish(
        frozen,
        json_path=s.json_path,
        html_path=s.html_path,
        store=s.store if state.recording is not None else None,
    )
    if state.recording is not None:
        state.recording.finish(
            list(state.results.values()),
            spend=state.spend(),
            generators=state.artifacts.labels(),
            interrupted=outcome.interrupted,
            passed=outcome.passed,
            failed_because=outcome.failed_because,
        )
    return outcome, frozen


def build_results(
    state: SessionState, outcome: Outcome, exit_status: int, *, whole_suite: bool | None = None
) -> SessionResults:
    """The session's results (the JSON model), read from the state once, at its end."""
    from pytest_aimeasure.calibrate.lines import calibration_figures
    from pytest_aimeasure.judge.adaptive import adaptive_summary
    from pytest_aimeasure.report.results import (
        CalibrationFigure,
        ResultItem,
        SessionResults,
        baseline_dimensions,
    )

    comparison = outcome.comparison
    items: list[ResultItem] = []
    for result in sorted(state.results.values(), key=lambda r: r.nodeid):
        item_cmp = comparison.items.get(result.item_id) if comparison is not None and result.item_id else None
        items.append(
            ResultItem(
                # The fields as they are (models, not dumped dicts): re-validating every sample of
                # every item was a second's work per few thousand items at the session's end.
                **dict(result),
                verdict=item_cmp.verdict if item_cmp is not None else None,
                comparison=item_cmp,
            )
        )
    recording = state.recording
    return SessionResults(
        run_id=recording.run_id if recording is not None else None,
        judge_model=state.settings.model,
        passed=outcome.passed,
        failed_because=outcome.failed_because,
        exit_status=exit_status,
        items=items,
        dimensions=comparison.dimensions if comparison is not None else {},
        findings=outcome.findings,
        spend=state.spend(),
        baseline={
            "path": str(state.settings.baseline),
            "update": outcome.baseline_update,
            "note": outcome.baseline_note,
        },
        comparison_tables=outcome.tables,
        baseline_dimensions=(
            baseline_dimensions(
                state.baseline, comparison.dimensions, comparison.items, state.settings.var_floor
            )
            if comparison is not None
            else {}
        ),
        started_at=recording.run.meta.started_at if recording is not None else None,
        ended_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        var_floor=state.settings.var_floor,
        drift=state.settings.drift,  # type: ignore[arg-type]  # one of the option's choices
        whole_suite=whole_suite,
        calibration=[CalibrationFigure.model_validate(f) for f in calibration_figures(outcome.calibration)],
        calibration_summary=outcome.calibration,
        attribution=outcome.attribution,
        sampling=adaptive_summary([m for r in state.results.values() for m in r.measurements]),
    )
