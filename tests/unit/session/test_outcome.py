"""The session's failure rules (outcome.py), shared by a session's end and the shard merge."""

from __future__ import annotations

from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.session.outcome import (
    FAILURE_KINDS,
    SessionFailure,
    drift_severities,
    failed_tests_reason,
    session_failures,
)


def finding(kind: str, severity: str = "fail", subject: str = "tone") -> Finding:
    return Finding(kind=kind, severity=severity, subject=subject, message=f"{kind} of {subject}")


def test_drift_severities_follow_the_drift_mode_and_the_update() -> None:
    found = [finding("regressed"), finding("not_comparable", subject="clarity"), finding("budget")]
    assert [f.severity for f in drift_severities(found, drift="fail", update_baseline=False)] == [
        "fail",
        "fail",
        "fail",
    ]
    assert [f.severity for f in drift_severities(found, drift="warn", update_baseline=False)] == [
        "warn",
        "fail",
        "fail",
    ]
    assert [f.severity for f in drift_severities(found, drift="warn", update_baseline=True)] == [
        "warn",
        "info",
        "fail",
    ]
    assert found[0].severity == "fail"  # copies: the comparison's findings are not changed


def test_session_failures_name_each_failing_finding_and_each_reason_once_in_order() -> None:
    found = [
        finding("budget", subject="tone::a"),
        finding("regressed", subject="tone"),
        finding("regressed", severity="warn", subject="clarity"),
        finding("budget", subject="tone::b"),
        finding("floor_breach", subject="tone::c"),  # a failed test shows it: not a session failure
        finding("uncalibrated", subject="tone"),
    ]
    failures, reasons = session_failures(found)
    assert failures == [
        SessionFailure("drift", "tone", "regressed of tone"),
        SessionFailure("budget", "tone::a", "budget of tone::a"),
        SessionFailure("budget", "tone::b", "budget of tone::b"),
        SessionFailure("uncalibrated", "tone", "uncalibrated of tone"),
    ]
    reason = {kind: text for kind, _, text in FAILURE_KINDS}
    assert reasons == [reason["drift"], reason["budget"], reason["uncalibrated"]]
    assert session_failures([finding("regressed", severity="warn")]) == ([], [])
    assert failed_tests_reason(2) == "2 test(s) failed (gates, floors or judge errors)"
    assert failed_tests_reason(2, ["t.py::a", "t.py::b"]) == (
        "2 test(s) failed (gates, floors or judge errors): t.py::a, t.py::b"
    )
