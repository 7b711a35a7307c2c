"""The session's end: a warning many items repeat is shown once, naming the items."""

from __future__ import annotations

from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.session.conclude import _one_per_subject


def finding(kind: str, subject: str, nodeid: str) -> Finding:
    return Finding(kind=kind, severity="warn", subject=subject, message=f"{kind} {subject}", nodeid=nodeid)  # type: ignore[arg-type]


def test_one_self_preference_warning_per_generator_names_its_items() -> None:
    findings = [
        finding("self_preference", "tone::gpt", "t.py::a"),
        finding("floor_warning", "tone::t.py::a", "t.py::a"),
        finding("self_preference", "tone::gpt", "t.py::b"),
        finding("self_preference", "tone::claude", "t.py::c"),
    ]
    out = _one_per_subject(findings, "self_preference")
    assert [(f.kind, f.subject) for f in out] == [
        ("self_preference", "tone::gpt"),
        ("floor_warning", "tone::t.py::a"),
        ("self_preference", "tone::claude"),
    ]
    merged = out[0]
    assert merged.message == "self_preference tone::gpt (2 items)"
    assert merged.nodeid is None and merged.detail["items"] == ["t.py::a", "t.py::b"]
    assert out[2] == findings[3]  # one item: kept as it was
