"""Per-test state shared between the plugin and library code that runs inside a test.

Library helpers (self-healing generation, the suite runner, the judge) call :func:`record_finding`
without knowing whether they run under pytest, on an xdist worker, or in a plain script. Under the
plugin, findings recorded during a test travel on that test's report to the controller, which puts
them in the session report and the JSON results. Outside a test they are kept in a module list that
scripts can read with :func:`drain_unattached`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pydantic is imported only once a finding or measurement is made
    from pytest_aimeasure.measure.models import Finding, FindingKind, Measurement


PIPELINE_ASIDE = "pipeline"
"""Key of a test record's (and so its item result's) ``extra``: why the judge pipeline stepped
aside for the item (it was judged while its test ran), for the terminal's note."""

class Deferred(Protocol):
    """A verdict still on its way (the judge's pending measurement): the pipeline waits for it and
    settles it after the test's protocol ran."""

    def done(self) -> bool:
        """Has the judge answered (or failed)? Never blocks."""

    def wait(self, timeout: float | None = None) -> None:
        """Block until :meth:`done` (or ``timeout`` seconds passed)."""

    def on_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once :meth:`done` (at once if it is; else from the judge's thread)."""

    def settle(self) -> BaseException | None:
        """Apply the landed verdict to the test's record (once); the exception that decides the
        test's outcome (a floor breach, a judge error, a skip), or None."""

    def cancel(self) -> None:
        """Give up on a verdict that has not landed (Ctrl-C); what landed stays journaled."""

    @property
    def settled(self) -> bool:
        """Was the verdict applied already (the test read the measurement)?"""


@dataclass
class ItemRecord:
    """What one running test produced for the instrument."""

    nodeid: str
    item_id: str | None = None
    findings: list[Finding] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    artifact_keys: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    defer: bool = False
    """The pipeline runs this test: ``judge.score`` may return before the judge answers."""
    deferred: list[Deferred] = field(default_factory=list)
    """Verdicts submitted by this test that the test itself did not wait for."""


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


@contextmanager
def attached(record: ItemRecord) -> Iterator[ItemRecord]:
    """Make an existing record current again: a pipelined test's verdict lands after its protocol
    ran, and what it records (findings, the report's payload) belongs to that test."""
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
    from pytest_aimeasure.measure.models import Finding

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
