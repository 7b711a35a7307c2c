"""pytest's conventions: prefixed flags, the report header, an
aimeasure section that follows -q/-v and colours its verdicts, misuse inside a test as a test failure."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ONE_WORKER, run_session

JUDGE = ("--ai-judge", "--judge-model", "scripted", "-p", "no:randomly")

SCORER = """
def pytest_aimeasure_scripted_verdict(call, config):
    return {"tone": 4, "clarity": 2}.get(call.dimension, 4), f"scripted {call.dimension}"
"""

TONE = """
import pytest

@pytest.mark.dimension("tone", floor=3.0, rubric="5 = warm")
@pytest.mark.parametrize("n", range(6))
def test_tone(judge, n):
    judge.score(f"Hello there, friend number {n}.")
"""

TWO_DIMENSIONS = (
    TONE
    + """

@pytest.mark.dimension("clarity", floor=3.0, rubric="5 = clear")
def test_clarity(judge):
    judge.score("Thing do stuff maybe.")
"""
)

ONE_GOOD_DIMENSION = """
import pytest

@pytest.mark.dimension("tone", floor=3.0, rubric="5 = warm")
def test_tone(judge):
    judge.score("Hello there, friend.")
"""

SEEN = """
from pytest_aimeasure.session import options

def test_seen(pytestconfig):
    print("SEEN", repr(options.get(pytestconfig, "{dest}")))
"""


# -- the report header ----------------------------------------------------------------------------
@pytest.mark.parametrize("xdist", [False, True])
def test_the_header_names_the_instrument_when_the_judge_is_on(pytester: pytest.Pytester, xdist: bool) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(test_story=ONE_GOOD_DIMENSION)
    args = [*JUDGE, "--judge-samples=5", "--aimeasure-store=runs"] + (list(ONE_WORKER) if xdist else [])
    result = run_session(pytester, *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["aimeasure: judge scripted, 5 samples, baseline aimeasure-baseline.json (none yet), store runs"]
    )
    assert result.stdout.str().count("aimeasure: judge scripted") == 1


def test_the_header_names_the_mode(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(test_story=ONE_GOOD_DIMENSION)
    pytester.runpytest(*JUDGE, "--update-baseline").assert_outcomes(passed=1)
    result = pytester.runpytest(*JUDGE, "--aimeasure-rejudge=latest", "--aimeasure-drift=warn")
    result.stdout.fnmatch_lines(
        [
            "aimeasure: judge scripted, 3 samples, baseline aimeasure-baseline.json, store .aimeasure; "
            "rejudging run latest, drift warn"
        ]
    )


def test_no_header_line_when_the_plugin_is_inert(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ONE_GOOD_DIMENSION)
    result = pytester.runpytest()
    result.assert_outcomes(skipped=1)
    assert "aimeasure:" not in result.stdout.str()
    assert "= aimeasure =" not in result.stdout.str()


# -- the section at -q / default / -v, and colour -----------------------------------------------
def section(text: str) -> str:
    return text.split("= aimeasure =", 1)[1]


@pytest.fixture
def failing_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """tone passes (4 over floor 3, six items) and is in the baseline; clarity (2) breaches its floor."""
    pytester.makeconftest(SCORER)
    pytester.makepyfile(test_story=TONE)
    pytester.runpytest(*JUDGE, "--update-baseline").assert_outcomes(passed=6)
    pytester.makepyfile(test_story=TWO_DIMENSIONS)
    return pytester


def test_quiet_shows_the_verdict_and_the_failing_findings_only(failing_project: pytest.Pytester) -> None:
    result = failing_project.runpytest(*JUDGE, "-q")
    result.assert_outcomes(passed=6, failed=1)
    text = section(result.stdout.str())
    assert "aimeasure failed the run: 1 test(s) failed" in text
    assert "[fail] floor breach: clarity::test_story.py::test_clarity" in text
    assert "items measured" not in text  # the spend line
    assert "Next:" not in text
    assert "judge: " not in text  # no rationale block under -q
    assert "stable" not in text


def test_default_shows_spend_findings_and_advice_not_items(failing_project: pytest.Pytester) -> None:
    result = failing_project.runpytest(*JUDGE)
    text = section(result.stdout.str())
    assert "7 items measured" in text
    assert "[fail] floor breach: clarity::test_story.py::test_clarity" in text
    assert "judge: #0 scored 2: scripted clarity" in text
    assert "stable: tone (6 items)" in text
    assert "Items measured:" not in text


def test_verbose_adds_each_item(failing_project: pytest.Pytester) -> None:
    result = failing_project.runpytest(*JUDGE, "-v")
    text = section(result.stdout.str())
    assert "stable: tone (6 items)" in text
    lines = text.splitlines()
    start = lines.index("Items measured:")
    items = "\n".join(lines[start : start + 10])
    assert re.search(
        r"clarity::test_story.py::test_clarity\s+2.00 ± [\d.]+\s+3\s+below the floor 3; new", items
    )
    for n in range(6):
        # one item alone is underpowered: its verdict says so (the dimension's is "stable", above)
        assert re.search(
            rf"tone::test_story.py::test_tone\[{n}\]\s+4.00 ± [\d.]+\s+3\s+inconclusive \(MDE", items
        )


RED, GREEN, ESC = "\x1b[31m", "\x1b[32m", "\x1b["


def test_verdicts_are_coloured_like_pytest_summary(failing_project: pytest.Pytester) -> None:
    result = failing_project.runpytest(*JUDGE, "--color=yes")
    text = section(result.stdout.str())
    failed = next(line for line in text.splitlines() if "aimeasure failed the run" in line)
    breach = next(line for line in text.splitlines() if "[fail] floor breach" in line)
    stable = next(line for line in text.splitlines() if "stable: tone" in line)
    assert RED in failed and RED in breach and GREEN in stable


def test_no_colour_under_color_no(failing_project: pytest.Pytester) -> None:
    result = failing_project.runpytest(*JUDGE, "--color=no")
    text = section(result.stdout.str())
    assert "aimeasure failed the run" in text
    assert ESC not in text


def test_a_clean_run_is_green(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(test_story=TONE)
    pytester.runpytest(*JUDGE, "--update-baseline").assert_outcomes(passed=6)
    result = pytester.runpytest(*JUDGE, "--color=yes", "-q")
    line = next(x for x in section(result.stdout.str()).splitlines() if "nothing needs a look" in x)
    assert GREEN in line


# -- misuse inside a test fails that test, cleanly -----------------------------------------------
MISUSE = """
import pytest

@pytest.mark.dimension("tone", floor=3.0, rubric="5 = warm")
def test_twice(judge):
    judge.score("one")
    judge.score("two")

@pytest.mark.dimension("tone", floor=3.0)
def test_no_rubric(judge):
    judge.score("one")

@pytest.mark.dimension("tone", floor=3.0, rubric="5 = warm")
def test_disagrees(judge):
    judge.score("one", dimension="clarity")

def test_no_dimension(judge):
    judge.score("one", rubric="5 = warm")

@pytest.mark.dimension("tone", floor=3.0, rubric="5 = warm")
def test_fine(judge):
    judge.score("one")
"""


@pytest.mark.parametrize(
    ("test", "message"),
    [
        ("test_twice", "a dimension test measures one item; it called judge.score twice.*"),
        ("test_no_rubric", "no rubric for dimension 'tone': pass rubric= to @pytest.mark.dimension*"),
        ("test_disagrees", "judge.score(dimension='clarity') disagrees with @pytest.mark.dimension('tone')*"),
        ("test_no_dimension", "judge.score needs dimension= outside a @pytest.mark.dimension test"),
    ],
)
def test_misuse_fails_the_test_without_a_traceback(
    pytester: pytest.Pytester, test: str, message: str
) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(test_misuse=MISUSE)
    result = pytester.runpytest(*JUDGE, "-k", f"{test} or test_fine")
    result.assert_outcomes(passed=1, failed=1)  # the run goes on: not a usage error of the session
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*_ {test} _*", f"test_misuse.py::{test}: {message}"])
    result.stdout.no_fnmatch_line("*UsageError*")
    result.stdout.no_fnmatch_line(">*judge.score(*")  # pytrace=False: no traceback into the test's code
