"""Phases as the reports show them."""

from __future__ import annotations

from pytest_aimeasure.report.phases import Phase


def test_a_heading_keeps_the_phase_names_case() -> None:
    # The HTML report used to lower-case it ("Phase json").
    assert Phase("JSON").heading == "Phase JSON"
    assert Phase(None).heading == "No phase"
