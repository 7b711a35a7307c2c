"""What a session concluded (controller only): findings, the comparison, the baseline update, the
reasons it failed. Written by :mod:`pytest_aimeasure.conclude`, read into the reports' summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_aimeasure.compare import Comparison
    from pytest_aimeasure.models import Finding

__all__ = ["Outcome", "SessionFailure"]


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
    interrupted: bool = False  # Ctrl-C: the run can be continued with --resume
    calibration: dict[str, Any] = field(default_factory=dict)  # per dimension: κ, bias, status
    attribution: dict[str, Any] = field(default_factory=dict)  # per dimension: judge and system parts
