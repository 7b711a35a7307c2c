"""The real red first (issue 22.4 and 22.5): a failed gate is a FAIL finding with its assertion, "no
baseline yet" is one line for the run, the reason names every failing test, and a collection error is
not told that nothing needs a look nor to resume."""

from __future__ import annotations

import pytest

from pytest_aimeasure.cli import main as cli
from tests.conftest import read_results
from tests.scripted import RED_FIRST_TESTS, SCRIPTED_ARGS, scores_conftest

TESTS = (
    RED_FIRST_TESTS
    + """
@pytest.mark.dimension("wit", rubric="5 = witty", floor=4.0)
def test_wit(judge):
    judge.score("witty")
"""
)


def test_a_failed_gate_is_a_fail_finding_and_no_baseline_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(scores_conftest(default=[4, 4, 4]))
    (pytester.path / "scores.json").write_text('{"test_wit": [2, 2, 2]}')
    pytester.makepyfile(test_subject=TESTS)
    result = pytester.runpytest(*SCRIPTED_ARGS, "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=2, failed=2)
    data = read_results(pytester.path / "out.json")
    gates = [f for f in data["findings"] if f["kind"] == "gate_failed" and f["severity"] == "fail"]
    assert [g["subject"] for g in gates] == ["test_subject.py::test_gate"]
    assert "1 of 6 walks failed on seed5" in gates[0]["message"]
    new = [f for f in data["findings"] if f["kind"] == "new"]
    assert len(new) == 1 and "3 dimension(s): clarity, tone, wit" in new[0]["message"]
    reason = data["failed_because"][0]
    assert "test_subject.py::test_gate" in reason and "test_subject.py::test_wit" in reason
    result.stdout.fnmatch_lines(["*[[]fail[]] gate failed: test_subject.py::test_gate", "*1 of 6 walks*"])


WALKS = """
import pytest

WALKS_FAILED = (
    "2 of 6 walks failed on seed5:\\n"
    "  - worst: loop: revisited budget-freeze after 5 turns\\n"
    "  - random(seed=1): dead end at town-hall\\n"
    "\\n"
    "strategy  result  path\\n"
    "best      ok      kickoff -> go-live"
)

@pytest.mark.gate
def test_walks():
    raise AssertionError(WALKS_FAILED)

@pytest.mark.gate
def test_schema():
    assert 1 + 1 == 3, "the reply is not JSON"
"""


@pytest.mark.parametrize("mode", [pytest.param((), id="plain"), pytest.param(("-n", "2"), id="xdist")])
def test_a_failed_gate_whose_message_ends_with_a_colon_shows_what_follows_it(
    pytester: pytest.Pytester, mode: tuple[str, ...]
) -> None:
    # The walker gate's first line says that walks failed; the lines after the colon say which and
    # how, and the table after the blank line is for the test's own report.
    pytester.makeconftest(scores_conftest(default=[4, 4, 4]))
    (pytester.path / "scores.json").write_text("{}")
    pytester.makepyfile(test_walks=WALKS)
    result = pytester.runpytest(*SCRIPTED_ARGS, *mode, "--aimeasure-json", "out.json")
    result.assert_outcomes(failed=2)
    data = read_results(pytester.path / "out.json")
    gates = {
        f["subject"]: f["message"]
        for f in data["findings"]
        if f["kind"] == "gate_failed" and f["severity"] == "fail"
    }
    assert gates["test_walks.py::test_walks"] == (
        "gate failed: AssertionError: 2 of 6 walks failed on seed5: - worst: loop: revisited "
        "budget-freeze after 5 turns - random(seed=1): dead end at town-hall"
    )
    # A first line without a colon is the whole summary (pytest's explanation of the assert stays
    # in pytest's own report).
    assert gates["test_walks.py::test_schema"] == "gate failed: AssertionError: the reply is not JSON"
    result.stdout.fnmatch_lines(
        ["*[[]fail[]] gate failed: test_walks.py::test_walks", "*- worst: loop: revisited budget-freeze*"]
    )


def test_the_run_that_writes_the_baseline_lists_no_new_finding(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(scores_conftest(default=[4, 4, 4]))
    pytester.makepyfile(test_subject=TESTS.split("@pytest.mark.gate")[0] + "def test_ok():\n    pass\n")
    (pytester.path / "scores.json").write_text("{}")
    result = pytester.runpytest(*SCRIPTED_ARGS, "--update-baseline", "--aimeasure-json", "out.json")
    assert result.ret == 0
    data = read_results(pytester.path / "out.json")
    assert [f for f in data["findings"] if f["kind"] == "new"] == []
    assert "record" not in result.stdout.str().split("aimeasure ====")[-1]


def test_a_collection_error_is_neither_fine_nor_interrupted(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(scores_conftest(default=[4, 4, 4]))
    (pytester.path / "scores.json").write_text("{}")
    pytester.makepyfile(test_broken="import no_such_module_here\n", test_fine=TESTS)
    result = pytester.runpytest(*SCRIPTED_ARGS)
    text = result.stdout.str()
    assert "error" in text.lower()
    assert "nothing needs a look" not in text
    assert "--aimeasure-resume" not in text and "interrupted: continue" not in text


def test_show_reads_each_red_whole_with_its_rationale_and_artifact(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    # The session's "Next:" sends the reader to `aimeasure show` for the artifacts and rationales
    # behind the reds: a floor breach and a failed gate are the session's findings, not an item's.
    pytester.makeconftest(scores_conftest(default=[4, 4, 4], rationale=": the reply rambles"))
    (pytester.path / "scores.json").write_text('{"test_wit": [2, 2, 2]}')
    pytester.makepyfile(test_subject=TESTS)
    result = pytester.runpytest(*SCRIPTED_ARGS, "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=2, failed=2)
    run_id = read_results(pytester.path / "out.json")["run_id"]
    capsys.readouterr()
    assert cli.main(["--store", str(pytester.path / ".aimeasure"), "show", run_id]) == 0
    out = capsys.readouterr().out
    reds = out.split("reds: read the artifact, not the score\n")[1].split("\nfindings\n")[0]
    assert "[fail] gate failed: test_subject.py::test_gate" in reds
    assert "gate failed: AssertionError: 1 of 6 walks failed on seed5" in reds
    assert "[fail] floor breach: wit::test_subject.py::test_wit" in reds
    assert "judge: #0 scored 2: scripted test_wit #0: the reply rambles" in reds
    assert "artifact:" in reds
    # The rest stays a line each, after the reds.
    rest = out.split("\nfindings\n")[1]
    assert "info new" in rest and "info new" not in reds and "[fail]" not in rest
