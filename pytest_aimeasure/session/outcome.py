"""What a session concluded (controller only): findings, the comparison, the baseline update, the
reasons it failed. Written by :mod:`pytest_aimeasure.session.conclude`, read into the reports' summary."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_aimeasure.compare.drift import Comparison
    from pytest_aimeasure.measure.models import Finding

__all__ = [
    "FAILURE_KINDS",
    "Outcome",
    "SessionFailure",
    "drift_severities",
    "failed_tests_reason",
    "session_failures",
]

# Session-level failures no test's own outcome shows, in the order the summary names them:
# (the JUnit case's kind, the finding kind, the reason in failed_because).
FAILURE_KINDS = (
    ("drift", "regressed", "regressions against the baseline (--aimeasure-drift=fail)"),
    (
        "not_comparable",
        "not_comparable",
        "measurements not comparable with the baseline: the judge changed; re-baseline",
    ),
    ("attribution", "attribution", "the system regressed under today's judge (--aimeasure-attribute)"),
    ("budget", "budget", "items not judged: the judge budget ran out"),
    (
        "uncalibrated",
        "uncalibrated",
        "uncalibrated ruler: the judge disagrees with the human anchors (--judge-calibrate=fail)",
    ),
)


@dataclass(frozen=True)
class SessionFailure:
    """One reason the session failed that no test's own outcome shows: a drift, a changed judge, a
    budget stop, a baseline that could not be written. Each becomes a failing JUnit test case."""

    kind: str  # "drift", "not_comparable", "budget", "baseline"
    subject: str  # the dimension, item id or file concerned
    message: str


@dataclass
class Outcome:
    """What the session concluded (controller only)."""

    findings: list[Finding] = field(default_factory=list)
    comparison: Comparison | None = None
    baseline_update: dict[str, Any] | None = None
    baseline_note: str | None = None
    failed_because: list[str] = field(default_factory=list)
    failures: list[SessionFailure] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # baseline entries whose tests no longer exist
    passed: bool = True
    tables: dict[str, Any] = field(default_factory=dict)  # suites: targets side by side
    interrupted: bool = False  # Ctrl-C: the run can be continued with --aimeasure-resume
    calibration: dict[str, Any] = field(default_factory=dict)  # per dimension: κ, bias, status
    attribution: dict[str, Any] = field(default_factory=dict)  # per dimension: judge and system parts


def drift_severities(findings: Iterable[Finding], *, drift: str, update_baseline: bool) -> list[Finding]:
    """The comparison's findings with the severities the session gives them: a regression only warns
    under ``--aimeasure-drift=warn``; a changed ruler is ``info`` in a session that re-baselines
    (re-baselining is the fix for it: say it happened, don't fail on it)."""
    out: list[Finding] = []
    for f in findings:
        if drift == "warn" and f.kind == "regressed":
            f = f.model_copy(update={"severity": "warn"})
        if update_baseline and f.kind == "not_comparable":
            f = f.model_copy(update={"severity": "info"})
        out.append(f)
    return out


def session_failures(findings: Iterable[Finding]) -> tuple[list[SessionFailure], list[str]]:
    """The findings that fail the session (severity ``fail`` of a kind in :data:`FAILURE_KINDS`): one
    failure each, and the reasons for ``failed_because``, in :data:`FAILURE_KINDS` order."""
    findings = list(findings)
    failures: list[SessionFailure] = []
    reasons: list[str] = []
    for kind, finding_kind, reason in FAILURE_KINDS:
        found = [f for f in findings if f.kind == finding_kind and f.severity == "fail"]
        failures += [SessionFailure(kind, f.subject, f.message) for f in found]
        if found:
            reasons.append(reason)
    return failures, reasons


def failed_tests_reason(count: int, nodeids: Sequence[str] = ()) -> str:
    """``failed_because``'s first reason when tests failed, naming each of them."""
    shown = [*nodeids[:10], f"… ({len(nodeids) - 10} more)"] if len(nodeids) > 10 else list(nodeids)
    named = f": {', '.join(shown)}" if shown else ""
    return f"{count} test(s) failed (gates, floors or judge errors){named}"
