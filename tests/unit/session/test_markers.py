"""A dimension marker parsed once: DimensionSpec with the defaults written in one place."""

from __future__ import annotations

import pytest

from pytest_aimeasure.session.markers import (
    FLOOR_DEFAULT,
    MARKER_LINES,
    TOLERANCE_DEFAULT,
    DimensionSpec,
)


def test_an_empty_marker_takes_the_defaults() -> None:
    spec = DimensionSpec.from_marker(pytest.mark.dimension("tone").mark)
    assert (spec.name, spec.floor, spec.tolerance, spec.samples, spec.rubric) == (
        "tone", FLOOR_DEFAULT, TOLERANCE_DEFAULT, None, None
    )


def test_the_marker_keywords_win_and_numbers_are_floats() -> None:
    mark = pytest.mark.dimension("tone", floor=4, tolerance=1, samples="auto", judge="scripted:x").mark
    spec = DimensionSpec.from_marker(mark)
    assert spec.floor == 4.0 and isinstance(spec.floor, float)
    assert spec.tolerance == 1.0 and isinstance(spec.tolerance, float)
    assert (spec.samples, spec.judge, spec.escalate) == ("auto", "scripted:x", None)


def test_as_kwargs_fills_in_the_defaults() -> None:
    kwargs = DimensionSpec.from_marker(pytest.mark.dimension("tone", rubric="5 = warm").mark).as_kwargs()
    assert kwargs["rubric"] == "5 = warm" and kwargs["floor"] == FLOOR_DEFAULT and "name" not in kwargs


def test_pytest_markers_shows_the_defaults_from_their_one_home() -> None:
    assert f"floor={FLOOR_DEFAULT}" in MARKER_LINES[1] and f"tolerance={TOLERANCE_DEFAULT}" in MARKER_LINES[1]


def test_every_marker_keyword_is_a_field() -> None:
    from dataclasses import fields

    from pytest_aimeasure.session.markers import DIMENSION_KWARGS

    assert set(DIMENSION_KWARGS) <= {f.name for f in fields(DimensionSpec)}
