"""Per-test state shared between the plugin and library code that runs inside a test.

Library helpers (self-healing generation, the suite runner, the judge) call :func:`record_finding`
without knowing whether they run under pytest, on an xdist worker, or in a plain script. Under the
plugin, findings recorded during a test travel on that test's report to the controller, which puts
them in the session report and the JSON results. Outside a test they are kept in a module list that
scripts can read with :func:`drain_unattached`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic is imported only once a finding or measurement is made
    from pytest_aimeasure.models import Finding, FindingKind, Measurement


@dataclass
class ItemRecord:
    """What one running test produced for the instrument."""

    nodeid: str
    item_id: str | None = None
    findings: list[Finding] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    artifact_keys: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


_current: ContextVar[ItemRecord | None] = ContextVar("aimeasure_current_item", default=None)
_unattached: list[Finding] = []


@contextmanager
def running(nodeid: str) -> Iterator[ItemRecord]:
    """Make ``nodeid`` the current test for :func:`record_finding` (used by the plugin)."""
    record = ItemRecord(nodeid=nodeid)
    token = _current.set(record)
    try:
        yield record
    finally:
        _current.reset(token)


def current() -> ItemRecord | None:
    """The record of the test running now, or None outside a test."""
    return _current.get()


def record_finding(
    kind: FindingKind,
    message: str,
    *,
    subject: str | None = None,
    severity: str = "warn",
    detail: dict[str, Any] | None = None,
    excerpt: str | None = None,
) -> Finding:
    """Record a finding against the running test (or keep it unattached outside a test).

    Example, from a helper that had to repair its input::

        record_finding("repair", "repaired unreachable scene(s) in story-7: s4, s9",
                       subject="story-7", detail={"nodes": ["s4", "s9"]})
    """
    from pytest_aimeasure.models import Finding

    record = _current.get()
    finding = Finding(
        kind=kind,
        severity=severity,  # type: ignore[arg-type]  # validated by pydantic
        subject=subject or (record.nodeid if record else "session"),
        message=message,
        nodeid=record.nodeid if record else None,
        detail=detail or {},
        excerpt=excerpt,
    )
    if record is None:
        _unattached.append(finding)
    else:
        record.findings.append(finding)
    return finding


def drain_unattached() -> list[Finding]:
    """Findings recorded outside any test, oldest first; the list is emptied."""
    out = list(_unattached)
    _unattached.clear()
    return out
