"""The judge fixture through the plugin, with the offline scripted judge."""

from __future__ import annotations

import pytest

from tests.conftest import read_results

SCORER = """
def pytest_aimeasure_scripted_verdict(call, config):
    if call.dimension == "tone":
        if "I appreciate" in call.artifact:
            return [2, 2, 3][call.index], f"warmth phrase in sample {call.index}: 'I appreciate'"
        return 4, "curt and cold, as the rubric asks"
    if call.dimension == "broken":
        return {"dimension": "broken", "score": "five", "rationale": "not an integer"}
    if call.dimension == "silent":
        return {"dimension": "silent", "score": 4, "rationale": "   "}
    return None
"""

TESTS = """
import pytest

@pytest.mark.dimension("tone", floor=3.0, rubric="5 = cold, curt; 1 = warm and reassuring")
@pytest.mark.parametrize("line", ["Fine. Next item.", "I appreciate that you're willing to try."])
def test_tone(line, judge):
    judge.score(line, facts={"characters": 1})
"""


def test_floor_breach_message_shows_mean_ci_samples_lowest_rationale_and_excerpt(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FloorBreach: tone: mean 2.33 (95% CI 1.00–3.77, n=3) is below the floor 3",
            "*samples: 2, 2, 3",
            "*lowest sample (#0, score 2): warmth phrase in sample 0: 'I appreciate'",
            "*artifact excerpt:",
            "*I appreciate that you're willing to try.",
        ]
    )
    # the session report repeats it as a finding with the rationale and the artifact behind it
    result.stdout.fnmatch_lines(
        ["*[[]fail[]] floor breach: tone::*test_tone[[]I appreciate*", "*judge: #0 scored 2: warmth*"]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_judge_error_after_repeated_malformed_output_records_no_score(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("broken", rubric="anything")
        def test_broken(judge):
            judge.score("text")

        @pytest.mark.dimension("silent", rubric="anything")
        def test_silent(judge):
            judge.score("text")
        """
    )
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--judge-samples", "3", "--aimeasure-json", "out.json"
    )
    result.assert_outcomes(errors=2)
    out = result.stdout.str()
    assert (
        "judge error: no valid verdict for broken::"
        "test_judge_error_after_repeated_malformed_output_records_no_score.py::test_broken sample #0 "
        "after 3 attempts" in out
    )
    assert "samples #1 and #2 failed too (9 judge answers, none a valid verdict)" in out
    # Every answer the message counts is shown once in the test's error report, labelled with its
    # sample and attempt: the outputs agree with the calls the judge made. Only that section counts:
    # on CI (env CI set) pytest's short summary repeats the whole message.
    errors = out.split("= ERRORS =", 1)[1].split("_ ERROR at call of test_silent _", 1)[0]
    broken = [line for line in errors.splitlines() if "attempt output (" in line and '"broken"' in line]
    assert [line.split(")", 1)[0].split("(", 1)[1] for line in broken] == [
        f"sample #{sample}, attempt {attempt}" for sample in range(3) for attempt in (1, 2, 3)
    ]
    assert all(
        line.endswith('): {"dimension": "broken", "rationale": "not an integer", "score": "five"}')
        for line in broken
    )
    assert "rationale must not be blank" in out or "String should have at least 1 character" in out
    data = read_results(pytester.path / "out.json")
    by_id = {item["nodeid"].split("::")[-1]: item for item in data["items"]}
    assert by_id["test_broken"]["outcome"] == "error"
    assert by_id["test_broken"]["measurements"] == []
    assert by_id["test_broken"]["judge_error"] is True
    assert data["spend"]["calls"] == 2 * 9  # the two tests' answers, all of them shown above
    assert data["passed"] is False
    assert {f["kind"] for f in data["findings"]} == {"judge_error"}


def test_score_outside_a_dimension_test_needs_a_dimension(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_free(judge):
            m = judge.score("text", dimension="clarity", rubric="5 = clear")
            assert m.dimension == "clarity" and m.n == 3 and m.mean == 4.0

        def test_missing(judge):
            judge.score("text", rubric="r")
        """
    )
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*judge.score needs dimension= outside a @pytest.mark.dimension test*"])


def test_facts_reach_the_judge_as_ground_truth(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        def pytest_aimeasure_scripted_verdict(call, config):
            return (5, "branching given") if call.facts == {"branching_factor": 2.5} else (1, "no facts")
        """
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("pedagogy", rubric="r")
        def test_p(judge):
            assert judge.score("graph", facts={"branching_factor": 2.5}).mean == 5
        """
    )
    pytester.runpytest("--ai-judge", "--judge-model", "scripted").assert_outcomes(passed=1)


def test_measurement_reaches_junit_properties(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(TESTS)
    pytester.runpytest("--ai-judge", "--judge-model", "scripted", "--junitxml", "junit.xml")
    xml = (pytester.path / "junit.xml").read_text()
    assert '<property name="aimeasure.mean" value="4.0"' in xml
    assert '<property name="aimeasure.n" value="3"' in xml
    assert '<property name="aimeasure.verdict" value="floor_breach"' in xml
    assert '<property name="aimeasure.verdict" value="new"' in xml
    assert 'aimeasure" value="{' not in xml  # the transport payload stays out of the XML


def test_an_interrupted_session_is_recorded_as_interrupted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="r")
        def test_first(judge):
            judge.score("text")

        def test_ctrl_c():
            raise KeyboardInterrupt
        """
    )
    # In-process, told not to raise the test's KeyboardInterrupt again in this session.
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "-p", "no:randomly", no_reraise_ctrlc=True
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    from pytest_aimeasure.store.runs import RunStore

    metas, problems = RunStore(pytester.path / ".aimeasure").list_runs()
    assert problems == []
    assert [m.status for m in metas] == ["interrupted"]


# -- Ctrl-C: the summary says so and how to go on ------------------------------------------------------

INTERRUPTED = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_a_tone(judge):
    # Read: its verdict lands before the interrupt (a call not sent by Ctrl-C is never sent).
    judge.score("The fox apologised.").mean

def test_b_interrupt():
    raise KeyboardInterrupt

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_c_tone(judge):
    judge.score("The crow returned the ring.")
"""


def test_interrupted_run_says_so_and_gives_the_resume_command(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_story=INTERRUPTED)
    # In-process, told not to raise the test's KeyboardInterrupt again in this session.
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--judge-samples", "1", no_reraise_ctrlc=True,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.INTERRUPTED
    (run_dir,) = (pytester.path / ".aimeasure" / "runs").iterdir()
    run_id = run_dir.name
    result.stdout.fnmatch_lines(
        [
            "*aimeasure*",
            f"*run {run_id} was interrupted*continue it with*pytest *--ai-judge*--aimeasure-resume={run_id}*",
        ]
    )
    resumed = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--judge-samples", "1", f"--aimeasure-resume={run_id}",
        "-k", "tone",
    )  # fmt: skip
    resumed.assert_outcomes(passed=2)
    resumed.stdout.fnmatch_lines(["*judge scripted: 1 calls, 1 samples reused*"])  # only c was judged
    assert "was interrupted" not in resumed.stdout.str()


# -- a lone surrogate in an artifact: a clear error naming it, never a raw UnicodeEncodeError ---------


def test_lone_surrogate_in_an_artifact_is_an_error_naming_the_artifact(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_surrogate="""
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_keyed(aimeasure_artifact, judge):
            story = aimeasure_artifact("story-7", lambda: "bad \\ud800 text")
            judge.score(story)

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_plain(judge):
            judge.score("bad \\udfff text")

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_json(aimeasure_artifact, judge):
            judge.score(aimeasure_artifact("scene-2", lambda: {"title": "bad \\ud83d"}))

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_fine(judge):
            judge.score("good text")
        """
    )
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--judge-samples", "1", "--aimeasure-json", "out.json"
    )
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    assert "UnicodeEncodeError" not in out and "Traceback" not in out
    result.stdout.fnmatch_lines(
        [
            "*artifact 'story-7' is not valid Unicode text: a lone surrogate U+D800 at character 4*",
            "*artifact passed to judge.score (test_surrogate.py::test_plain) is not valid Unicode text:"
            " a lone surrogate U+DFFF at character 4*",
            "*artifact 'scene-2' is not valid Unicode text: a lone surrogate U+D83D at character *",
        ],
        consecutive=False,
    )
    data = read_results(pytester.path / "out.json")
    by_name = {i["nodeid"].split("::")[-1]: i for i in data["items"]}
    assert [by_name[n]["measurements"] for n in ("test_keyed", "test_plain", "test_json")] == [[], [], []]
    assert len(by_name["test_fine"]["measurements"]) == 1
    assert data["spend"]["calls"] == 1  # nothing was sent for the bad ones


def test_a_measuring_sessions_judge_fixture_knows_its_test_without_the_request_fixture(
    pytester: pytest.Pytester,
) -> None:
    # pytest builds the `request` fixture's definition anew at each use (three an item, each reading
    # a signature): the measuring session's `judge` knows its test without it.
    pytester.makeconftest(
        SCORER
        + """
def pytest_collection_modifyitems(items):
    for item in items:
        print("FIXTURES", item.name, ",".join(sorted(item.fixturenames)))
"""
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", floor=1.0, rubric="5 = cold, curt; 1 = warm and reassuring")
        @pytest.mark.parametrize("line", ["Fine.", "Next."])
        def test_tone(line, judge):
            m = judge.score(line)
            assert m.nodeid.endswith(f"test_tone[{line}]")  # its own test's, not another's
        """
    )
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted", "-p", "no:randomly", "-s")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["FIXTURES test_tone[[]Fine.[]] judge,line", "FIXTURES test_tone[[]Next.[]] judge,line"]
    )
