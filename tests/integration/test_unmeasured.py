"""A @pytest.mark.dimension test that never calls judge.score must not pass silently."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ONE_WORKER, run_session

SOURCE = """
import pathlib
import pytest

@pytest.fixture(scope="module")
def story():
    return "A short story."

@pytest.mark.gate
def test_gate(story):
    assert not pathlib.Path(__file__).with_name("gate_fails").exists(), "broken"

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
def test_forgot_to_score(judge):
    text = "A short story."  # measured nothing

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
def test_measures_only_long_stories(judge):
    story = "short"
    if len(story) < 100:
        pytest.skip("only long stories are graded for tone")
    judge.score(story)

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
def test_scored(story, judge):
    judge.score(story)

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
def test_behind_the_gate(story, judge):
    judge.score(story)
"""

ARGS = ("--ai-judge", "--judge-model", "scripted", "--judge-cache=off", "-p", "no:randomly", "-rs")


@pytest.mark.parametrize("mode", [pytest.param((), id="plain"), pytest.param(ONE_WORKER, id="xdist")])
def test_dimension_test_without_a_score_fails_and_says_how_to_skip(
    pytester: pytest.Pytester, mode: tuple[str, ...]
) -> None:
    pytester.makepyfile(test_dims=SOURCE)
    result = run_session(pytester, *ARGS, *mode, "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*_ test_forgot_to_score _*", "dimension 'tone': the test passed without calling judge.score*"]
    )
    result.stdout.fnmatch_lines(["*SKIPPED*only long stories are graded for tone*"])
    assert "pytest.skip(" in result.stdout.str()  # the message says how to measure conditionally
    items = {
        i["nodeid"].split("::")[-1]: i for i in json.loads((pytester.path / "out.json").read_text())["items"]
    }
    assert items["test_forgot_to_score"]["outcome"] == "failed"
    assert items["test_measures_only_long_stories"]["outcome"] == "skipped"


def test_gate_skipped_dimension_is_not_a_missing_score(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dims=SOURCE)
    (pytester.path / "gate_fails").write_text("")
    result = pytester.runpytest(*ARGS, "test_dims.py::test_gate", "test_dims.py::test_behind_the_gate")
    result.assert_outcomes(failed=1, skipped=1)  # the gate fails; its dimension is skipped, not failed
    result.stdout.fnmatch_lines(["*SKIPPED*gate failed: test_dims.py::test_gate*"])


BEHIND_GATES = """
import pytest

@pytest.fixture(scope="module")
def story():
    return "A short story."

@pytest.mark.gate
def test_story_gate(story):
    assert False, "broken"

@pytest.mark.gate
def test_draft_gate(aimeasure_artifact):
    aimeasure_artifact("draft", lambda: "A draft.")
    assert False, "broken"

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
def test_linked_by_its_fixture(story, judge):
    judge.score(story)

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
def test_scoring_a_condemned_artifact(judge, aimeasure_artifact):
    draft = aimeasure_artifact("draft", lambda: "A draft.")
    judge.score(draft)
"""


def test_a_skip_behind_a_failed_gate_points_at_the_test(pytester: pytest.Pytester) -> None:
    path = pytester.makepyfile(test_gated=BEHIND_GATES)
    lines = path.read_text().splitlines()
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(failed=2, skipped=2)
    # -rs names the test's own line, not the plugin's: for a test skipped before it ran, where pytest
    # places a test (its decorator, the line above its def); for one skipped in judge.score, that call.
    linked = lines.index("def test_linked_by_its_fixture(story, judge):")
    assert lines[linked - 1].startswith("@pytest.mark.dimension")
    scored = lines.index("    judge.score(draft)") + 1
    result.stdout.fnmatch_lines(
        [
            f"SKIPPED [[]1[]] test_gated.py:{linked}: gate failed: test_gated.py::test_story_gate",
            f"SKIPPED [[]1[]] test_gated.py:{scored}: gate failed: test_gated.py::test_draft_gate",
        ],
        consecutive=False,
    )
    assert "pytest_aimeasure" not in "".join(line for line in result.outlines if line.startswith("SKIPPED"))


def test_without_ai_judge_nothing_changes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dims=SOURCE)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, skipped=4)
