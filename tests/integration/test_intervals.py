"""One interval per measurement, on the 1–5 scale, in every report (issue 22, items 1 and 2).

The issue's case: an item that pools three generation repeats scored 4, 2 and 5 has a t interval of
3.67 ± 3.79, which reached −0.13 and 7.46; its dimension's table read the interval of the judge samples pooled
without the generation variance ([2.23, 5.11] with two samples a repeat)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytest_aimeasure.report.markdown import summary_markdown
from pytest_aimeasure.report.results import SessionResults
from tests.conftest import read_results
from tests.integration.test_report import browser, open_report  # noqa: F401  (the browser fixture)

CONFTEST = """
import pytest

CALLS = {"n": 0}

def generate():
    CALLS["n"] += 1
    return f"story r{CALLS['n']}"

@pytest.fixture(scope="module")
def story(aimeasure_artifact):
    return aimeasure_artifact("story", generate, repeats=3)

def pytest_aimeasure_scripted_verdict(call, config):
    # Each repeat's two samples agree: the spread is the generator's, between the repeats.
    return {"story r1": 4, "story r2": 2, "story r3": 5}[call.artifact], "scored the repeat"
"""

TESTS = """
import pytest

@pytest.mark.dimension("vivid", floor=1.0, rubric="5 = vivid", phase="content")
def test_vivid(story, judge):
    judge.score(story)
"""

ARGS = (
    *("--ai-judge", "--judge-model", "scripted", "--judge-samples", "2", "--judge-cache=off"),
    *("-p", "no:randomly", "-v", "--aimeasure-json", "out.json", "--aimeasure-html", "report.html"),
)
NUMBER = r"-?\d+\.\d\d"


@pytest.fixture
def wide(pytester: pytest.Pytester) -> tuple[pytest.RunResult, pytest.Pytester]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_story=TESTS)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=1)
    return result, pytester


def test_the_interval_of_a_mean_of_scores_stays_on_the_scale(wide: tuple[pytest.RunResult, Any]) -> None:
    result, pytester = wide
    data = read_results(pytester.path / "out.json")
    m = data["items"][0]["measurements"][0]
    assert m["mean"] == pytest.approx(11 / 3)
    assert (m["ci_low"], m["ci_high"]) == (1.0, 5.0)  # 3.67 ± 3.79 cut to the scale
    assert data["dimensions"]["vivid"]["now_ci"] == [1.0, 5.0]
    section = result.stdout.str().split("aimeasure ====")[-1]
    numbers = [float(x) for x in re.findall(NUMBER, section)]
    assert numbers and all(x >= 0 for x in numbers), section
    # A cut interval is asymmetric: it reads [low, high], not a ± that would claim the part off the scale.
    assert "3.67 [1.00, 5.00]" in section and "3.67 ±" not in section
    markdown = summary_markdown(SessionResults.model_validate(data))
    assert "| vivid | 3.67 [1.00, 5.00] |" in markdown


def test_one_interval_per_item_in_every_table(wide: tuple[pytest.RunResult, Any]) -> None:
    result, pytester = wide
    text = result.stdout.str()
    item_row = next(line for line in text.splitlines() if line.startswith("vivid::"))
    phase_row = next(line for line in text.splitlines() if line.startswith("vivid ") and "new" in line)
    interval = "3.67 [1.00, 5.00]"
    assert interval in item_row and interval in phase_row, (item_row, phase_row)
    html = (pytester.path / "report.html").read_text()
    assert "[2.23, 5.00]" not in html and "2.23" not in text  # the judge-only interval (pooled samples)


def test_the_bars_stay_inside_the_chart(wide: tuple[pytest.RunResult, Any], browser: Any) -> None:  # noqa: F811
    _, pytester = wide
    page, problems, _ = open_report(browser, pytester.path / "report.html")
    try:
        assert problems == []
        area = page.locator("#dims-area").bounding_box()
        bars = page.locator("#dims-now-bars path").all()
        assert area is not None and bars
        for bar in bars:
            box = bar.bounding_box()
            assert box is not None
            assert area["x"] <= box["x"] and box["x"] + box["width"] <= area["x"] + area["width"], (area, box)
        # one interval per item: the dimension table and the items table read the same
        cells = [c.inner_text() for c in page.locator("td.num").all()]
        assert sum("[1.00, 5.00]" in c for c in cells) >= 2, cells
    finally:
        page.close()
