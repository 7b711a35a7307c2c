"""What CI reads besides the exit status: the session's own failures as test reports, and each
item's verdict in the JUnit XML (``--junitxml``).

A session can fail with every test passed: a drift, a changed judge, a budget stop, a baseline that
could not be written. Each such failure is logged as a failing test report named
``aimeasure::<kind>[<subject>]`` (e.g. ``aimeasure::drift[tone]``) through pytest's own
``pytest_runtest_logreport`` hook, so every report consumer counts it: JUnit XML has a failing test
case (``classname="aimeasure" name="drift[tone]"``), the terminal's summary line says ``1 failed``
and its short summary names the reason.

An item's ``aimeasure.verdict`` property is the session's verdict after the family-wise correction,
which exists only once every item is measured: the property is added to the JUnit file after pytest wrote
it, next to the item's ``aimeasure.item`` property.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_aimeasure.store.fileio import atomic_write

if TYPE_CHECKING:
    from pytest_aimeasure.report.model import SessionReport


class SessionFailure(Protocol):
    """One reason the session failed that no test's own outcome shows (the session's own type)."""

    @property
    def kind(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def message(self) -> str: ...


FAILURE_PROPERTY = "aimeasure.session_failure"
ITEM_PROPERTY = "aimeasure.item"
VERDICT_PROPERTY = "aimeasure.verdict"


def failure_nodeid(failure: SessionFailure) -> str:
    return f"aimeasure::{failure.kind}[{failure.subject}]"


def failure_reports(failures: Iterable[SessionFailure], location: str) -> list[pytest.TestReport]:
    """setup, call (failed) and teardown reports for each failure, as pytest makes them for a test."""
    reports: list[pytest.TestReport] = []
    for failure in failures:
        nodeid = failure_nodeid(failure)
        common: dict[str, Any] = {
            "nodeid": nodeid,
            "location": (location, None, f"aimeasure {failure.kind}[{failure.subject}]"),
            "keywords": {},
            "user_properties": [(FAILURE_PROPERTY, failure.kind)],
        }
        reports += [
            pytest.TestReport(outcome="passed", longrepr=None, when="setup", **common),
            pytest.TestReport(outcome="failed", longrepr=failure.message, when="call", **common),
            pytest.TestReport(outcome="passed", longrepr=None, when="teardown", **common),
        ]
    return reports


def is_failure_report(report: pytest.TestReport) -> bool:
    return any(name == FAILURE_PROPERTY for name, _ in getattr(report, "user_properties", ()))


def item_verdicts(summary: SessionReport) -> dict[str, str]:
    """Each measured item's verdict as the session concluded it (after the family-wise correction)."""
    comparison = summary.comparison
    out: dict[str, str] = {}
    for result in summary.results.items:
        for m in result.measurements:
            compared = comparison.items.get(m.item_id) if comparison is not None else None
            if m.breached:
                out[m.item_id] = "floor_breach"
            elif compared is not None:
                out[m.item_id] = compared.verdict
            else:
                out[m.item_id] = "not_compared" if summary.has_baseline else "new"
    return out


def add_verdicts(path: Path, verdicts: Mapping[str, str]) -> None:
    """Put an ``aimeasure.verdict`` property after each ``aimeasure.item`` property of the JUnit file.

    The file is edited as text: right after each item property, as pytest's junitxml writes it
    (ElementTree's serialisation), the verdict's property as ElementTree writes it. Parsing the file
    and serialising it again was a quarter of a second of CPU at 5,000 items (ElementTree writes in
    Python), and it rewrote the rest of pytest's text (a carriage return in a test's captured output
    came back as a line feed)."""
    try:
        text = path.read_bytes()
    except OSError:
        return  # no file (junitxml disabled or failed): nothing to annotate, pytest reports its own error
    after = {_property(ITEM_PROPERTY, item): _property(VERDICT_PROPERTY, v) for item, v in verdicts.items()}
    inserted = 0

    def insert(match: re.Match[bytes]) -> bytes:
        nonlocal inserted
        verdict = after.get(match[0])
        if verdict is None:
            return match[0]
        inserted += 1
        return match[0] + verdict

    annotated = _ITEM_PROPERTY.sub(insert, text)
    if inserted:
        atomic_write(path, annotated)


_ITEM_PROPERTY = re.compile(rb'<property name="' + re.escape(ITEM_PROPERTY.encode()) + rb'" value="[^"]*" />')
_ESCAPED = frozenset('&<>"\r\n\t')


def _property(name: str, value: str) -> bytes:
    """``<property name=... value=... />`` as ElementTree writes it (pytest's junitxml uses it)."""
    if _ESCAPED.isdisjoint(value):
        return f'<property name="{name}" value="{value}" />'.encode()
    return ET.tostring(ET.Element("property", name=name, value=value), encoding="unicode").encode()
