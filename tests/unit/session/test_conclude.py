"""The session's end: a warning many items repeat is shown once, naming the items; a finding
recorded word for word several times is shown once, with its count."""

from __future__ import annotations

import gc

import pytest

from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.session.conclude import _collector_paused, _identical_once, _one_per_subject


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


def test_a_finding_recorded_word_for_word_several_times_is_shown_once_with_its_count() -> None:
    repair = finding("repair", "story-3", "t.py::a")
    other = finding("repair", "story-4", "t.py::a")
    out = _identical_once([repair, other, repair, repair])
    assert [(f.subject, f.message) for f in out] == [
        ("story-3", "repair story-3 (recorded 3 times)"),
        ("story-4", "repair story-4"),
    ]
    assert out[1] is other  # recorded once: kept as it was


def test_findings_that_say_the_same_but_differ_elsewhere_are_not_merged() -> None:
    said = finding("repair", "story-3", "t.py::a")
    louder = said.model_copy(update={"severity": "fail"})
    detailed = said.model_copy(update={"detail": {"edges": 2}})
    out = _identical_once([said, louder, detailed, said])
    twice = said.model_copy(update={"message": f"{said.message} (recorded 2 times)"})
    assert out == [twice, louder, detailed]


def test_the_collector_paused_for_the_sessions_end_comes_back_as_it_was_even_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), _collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("a step of the end failed")
    assert gc.isenabled()
    gc.disable()  # (an embedding program that runs without the collector keeps it off)
    try:
        with _collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
