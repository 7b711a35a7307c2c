"""The spend line says only what happened: a session whose judge calls came one at a time (the
scripted judge answers each at once) filled no limit, so it reached none."""

from __future__ import annotations

import pytest

from tests.conftest import read_results
from tests.scripted import RED_FIRST_TESTS, SCRIPTED_ARGS, scores_conftest

MODES = [pytest.param((), id="plain"), pytest.param(("-n", "2"), id="xdist")]


@pytest.mark.parametrize("mode", MODES)
def test_a_session_that_filled_no_limit_says_no_limit_reached(
    pytester: pytest.Pytester, mode: tuple[str, ...]
) -> None:
    pytester.makeconftest(scores_conftest(default=[4, 4, 4]))
    (pytester.path / "scores.json").write_text("{}")
    pytester.makepyfile(test_subject=RED_FIRST_TESTS)
    result = pytester.runpytest(*SCRIPTED_ARGS, *mode, "--aimeasure-json", "out.json")
    spend = read_results(pytester.path / "out.json")["spend"]
    assert spend["calls"] == 6 and 1 <= spend["max_in_flight"] <= 2
    assert spend["limit_reached"] == 0
    (line,) = [line for line in result.outlines if " calls, " in line]
    assert f"at most {spend['max_in_flight']} in flight" in line and "limit reached" not in line
