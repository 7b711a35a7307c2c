"""Bias on real test items, through the real anthropic SDK against the local provider server:
self-preference for Python artifacts (``aimeasure_artifact(generator=...)`` or a label naming a model),
and the order probe when a test hands the judge several artifacts (``judge.score(a, b)``)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from pytest_aimeasure.testing import SeenRequest
from tests.conftest import ONE_WORKER, read_results

MODEL = "anthropic/claude-test"


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    argv = ("--ai-judge", "--judge-model", MODEL, "--aimeasure-json", "out.json", *args)
    result = pytester.runpytest(*argv)  # under -n the workers inherit the environment, with the server's URL
    return result, read_results(pytester.path / "out.json")


# -- self-preference ------------------------------------------------------------------------------
STORIES = """
    import pytest

    @pytest.fixture(scope="module")
    def story(aimeasure_artifact):
        return aimeasure_artifact("story", lambda: "Once upon a time.", {how})

    @pytest.mark.dimension("tone", rubric="5 = warm")
    @pytest.mark.parametrize("n", [1, 2])
    def test_tone(story, judge, n):
        judge.score(story)
"""


@pytest.mark.parametrize(
    ("how", "warned"),
    [
        ('generator="anthropic/claude-haiku-4-5"', "anthropic/claude-haiku-4-5"),
        ('label="claude-haiku-4-5"', "claude-haiku-4-5"),  # a label that names a model counts
        ('label="gen-v2", generator="openai/gpt-4o-mini"', None),  # another family
        ('label="gen-v2"', None),  # nothing says who wrote it
    ],
)
def test_an_artifact_written_by_the_judges_family_is_warned_about_once(
    pytester: pytest.Pytester, serve: Any, how: str, warned: str | None
) -> None:
    serve(lambda seen: 4)
    pytester.makepyfile(test_story=textwrap.dedent(STORIES.replace("{how}", how)))
    result, data = run(pytester)
    assert result.ret == 0, result.stdout.str()
    found = [f for f in data["findings"] if f["kind"] == "self_preference"]
    if warned is None:
        assert found == []
        return
    assert len(found) == 1, found  # two items share it: one warning naming both
    f = found[0]
    assert f["severity"] == "warn"
    assert f["subject"] == f"tone::{warned}"
    assert f["detail"]["family"] == "anthropic"
    assert f["detail"]["items"] == ["test_story.py::test_tone[1]", "test_story.py::test_tone[2]"]
    assert f"written by {warned} and is judged by {MODEL}" in f["message"]
    result.stdout.fnmatch_lines(
        [
            "*[[]warn[]] self preference: tone::*",
            f"*tone: artifact story was written by {warned}*",
            "*(2 items)",
        ]
    )


def test_a_generator_that_is_not_a_model_name_fails_the_test(pytester: pytest.Pytester, serve: Any) -> None:
    serve(lambda seen: 4)
    pytester.makepyfile(test_story=textwrap.dedent(STORIES.replace("{how}", "generator=''")))
    result = pytester.runpytest("--ai-judge", "--judge-model", MODEL)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*aimeasure_artifact('story'): generator='' must be a model name*"])


# -- the order probe ------------------------------------------------------------------------------
PAIRS = """
    import pytest

    @pytest.mark.dimension("fairness", rubric="5 = the two replies are compared fairly", floor=1.0)
    @pytest.mark.parametrize("n", [1, 2, 3])
    def test_fairness(judge, aimeasure_artifact, n):
        first = aimeasure_artifact(f"alpha-{n}", lambda: f"ALPHA reply {n}")
        judge.score(first, f"BETA reply {n}")
"""


def first_part_wins(seen: SeenRequest) -> int:
    """A judge that prefers whatever it reads first."""
    return 5 if seen.prompt.index("ALPHA") < seen.prompt.index("BETA") else 3


def order_blind(seen: SeenRequest) -> int:
    return 4


def test_several_artifacts_are_shown_as_numbered_parts_and_judged_once_without_the_probe(
    pytester: pytest.Pytester, serve: Any
) -> None:
    server = serve(first_part_wins)
    pytester.makepyfile(test_pairs=textwrap.dedent(PAIRS))
    result, data = run(pytester)
    assert result.ret == 0, result.stdout.str()
    assert server.judge_calls == 3 * 3  # no probe without --judge-bias
    prompt = server.requests[0].prompt
    assert "--- artifact 1 of 2 ---\nALPHA reply" in prompt
    assert "--- artifact 2 of 2 ---\nBETA reply" in prompt
    item = next(i for i in data["items"] if i["nodeid"] == "test_pairs.py::test_fairness[1]")
    assert item["artifact_keys"] == ["alpha-1"]
    assert "fairness" not in data["calibration_summary"]


@pytest.mark.parametrize("xdist", [(), ONE_WORKER], ids=["serial", "xdist"])
def test_order_probe_flags_a_judge_that_prefers_the_first_artifact(
    pytester: pytest.Pytester, serve: Any, xdist: tuple[str, ...]
) -> None:
    server = serve(first_part_wins)
    pytester.makepyfile(test_pairs=textwrap.dedent(PAIRS))
    result, data = run(pytester, "--judge-bias", "--junitxml", "junit.xml", *xdist)
    assert result.ret == 0, result.stdout.str()
    assert server.judge_calls == 2 * 3 * 3  # each item judged again, reversed
    entry = data["calibration_summary"]["fairness"]
    assert entry["status"] == "not calibrated"
    (probe,) = entry["item_probes"]
    assert probe["probe"] == "order"
    assert probe["effect"] == pytest.approx(-2.0)
    assert probe["n"] == 3 and probe["significant"] and probe["ci_high"] < 0
    (finding,) = [f for f in data["findings"] if f["kind"] == "judge_bias"]
    assert finding["severity"] == "warn" and finding["subject"] == "fairness::order(items)"
    assert "the judge's score moves with the order" in finding["message"]
    result.stdout.fnmatch_lines(["*Judge bias probes:*", "fairness: order (test items judged again*-2.00*"])
    # The probe's re-judging is not a measurement: the items and the baseline see only the plain ones.
    assert {m["item_id"] for i in data["items"] for m in i["measurements"]} == {
        f"fairness::test_pairs.py::test_fairness[{n}]" for n in (1, 2, 3)
    }
    assert 'name="aimeasure.order_shift" value="-2.0000"' in (pytester.path / "junit.xml").read_text()


def test_order_probe_passes_an_order_blind_judge(pytester: pytest.Pytester, serve: Any) -> None:
    serve(order_blind)
    pytester.makepyfile(test_pairs=textwrap.dedent(PAIRS))
    result, data = run(pytester, "--judge-bias")
    assert result.ret == 0, result.stdout.str()
    (probe,) = data["calibration_summary"]["fairness"]["item_probes"]
    assert probe["effect"] == 0.0 and not probe["significant"]
    assert probe["ci_low"] < 0 < probe["ci_high"]  # the variance floor keeps a repeatable judge honest
    assert not [f for f in data["findings"] if f["kind"] == "judge_bias"]
