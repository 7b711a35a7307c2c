"""Adaptive sampling (``samples="auto"``) in a session: bad values are usage errors, the marker, the dry
run, suites, resume and rejudge. The looks, the stopping rule and the engine's loop are unit tests
(tests/unit/judge/test_adaptive.py); over HTTP: test_adaptive_http.py."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import read_results

# -- settings, markers, suites -------------------------------------------------------------------------


def test_bad_values_on_the_command_line_and_in_the_ini_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--judge-samples", "lots")
    result.stderr.fnmatch_lines(
        ["*argument --judge-samples: expected a whole number >= 1 or 'auto', got 'lots'*"]
    )
    result = pytester.runpytest("--judge-samples-min", "1")
    result.stderr.fnmatch_lines(["*argument --judge-samples-min: expected a whole number >= 2, got '1'*"])
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--judge-samples-min", "5", "--judge-samples-max", "4"
    )
    result.stderr.fnmatch_lines(["*--judge-samples-max 4 is below --judge-samples-min 5*"])
    pytester.makeini("[pytest]\naimeasure_judge_samples = sometimes\n")
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted")
    result.stderr.fnmatch_lines(
        ["*ini option aimeasure_judge_samples = 'sometimes': expected a whole number >= 1 or 'auto'*"]
    )


MARKED = """
    import pytest

    @pytest.mark.dimension("tone", rubric="5 = calm", samples={samples!r})
    def test_tone(judge):
        judge.score("CLEAR-text")
"""

SCRIPTED_CONFTEST = """
    def pytest_aimeasure_scripted_verdict(call, config):
        calls = open("calls.txt", "a")
        calls.write(f"{call.index}\\n")
        return 5
"""


def test_the_marker_takes_auto_and_a_bad_value_names_itself(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(textwrap.dedent(SCRIPTED_CONFTEST))
    pytester.makepyfile(textwrap.dedent(MARKED.format(samples="auto")))
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--judge-samples-min", "4", "--aimeasure-json", "out.json"
    )
    result.assert_outcomes(passed=1)
    assert len((pytester.path / "calls.txt").read_text().split()) == 4  # a clear item: the minimum
    result.stdout.fnmatch_lines(
        ["*adaptive sampling: 1 item, n=4..9, mean 4.0 samples an item; 1 stopped at 4*"]
    )
    pytester.makepyfile(textwrap.dedent(MARKED.format(samples="lots")))
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted")
    assert "@pytest.mark.dimension samples='lots' must be a whole number >= 1 or 'auto'" in str(
        result.stdout
    ) + str(result.stderr)


def test_the_dry_run_counts_the_range_of_calls_under_auto(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        textwrap.dedent(MARKED.format(samples="auto")),
        test_fixed=textwrap.dedent(MARKED.format(samples=2)).replace("test_tone", "test_fixed"),
    )
    result = pytester.runpytest("--judge-dry-run", "--judge-model", "scripted", "--judge-samples-max", "7")
    result.stdout.fnmatch_lines(
        [
            "aimeasure dry run: 2 dimension items, 5..9 judge calls with scripted; samples auto: 3..7 calls*",
            "tone * 5..9",
        ]
    )
    result = pytester.runpytest(
        "--judge-dry-run", "--judge-model", "scripted", "--judge-samples", "3", "-k", "fixed"
    )
    result.stdout.fnmatch_lines(["aimeasure dry run: 1 dimension items, 2 judge calls with scripted"])


SUITE_GENERATOR = """
def echo(prompt):
    return prompt
"""

AUTO_SUITE = """\
suite: auto
targets:
  - {name: echo, callable: "gen_echo:echo"}
prompts:
  - {id: clear, text: "a clear answer"}
  - {id: border, text: "a borderline answer"}
dimensions:
  - {name: tone, rubric: "5: curt; 1: warm", samples: auto}
"""

SUITE_SCORER = """
import pathlib

def pytest_aimeasure_scripted_verdict(call, config):
    with pathlib.Path(__file__).with_name("judged.txt").open("a") as fh:
        fh.write(call.artifact.split()[1] + "\\n")
    return 3 + call.index % 2 if "borderline" in call.artifact else 5
"""


def test_a_suite_dimension_samples_adaptively(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(gen_echo=SUITE_GENERATOR)
    pytester.makeconftest(SUITE_SCORER)
    pytester.makefile(".aimeasure.yaml", auto=AUTO_SUITE)
    dry = pytester.runpytest("--judge-dry-run", "--judge-model", "scripted")
    dry.stdout.fnmatch_lines(["aimeasure dry run: 2 dimension items, 6..18 judge calls with scripted*"])
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=2)
    judged = (pytester.path / "judged.txt").read_text().split()
    assert (judged.count("clear"), judged.count("borderline")) == (3, 9)
    sampling = read_results(pytester.path / "out.json")["sampling"]
    assert (sampling["items"], sampling["samples"], sampling["at_minimum"]) == (2, 12, 1)


INTERRUPTED = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_a_tone(judge):
    # Read: its verdict lands before the interrupt (a call not sent by Ctrl-C is never sent).
    judge.score("BORDER the fox sulked.").mean

def test_b_interrupt():
    raise KeyboardInterrupt

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_c_tone(judge):
    judge.score("CLEAR the crow returned the ring.")
"""

BY_ARTIFACT = """
def pytest_aimeasure_scripted_verdict(call, config):
    return 3 + call.index % 2 if call.artifact.startswith("BORDER") else 5
"""


def test_resume_and_rejudge_under_auto(pytester: pytest.Pytester) -> None:
    """Interrupted after the borderline item took its 9 samples: the resume reads all 9 from the run's
    journal (cache off) and its looks stop where they stopped, then judges the clear item (3 calls).
    A rejudge under auto judges both again, look by look: 9 + 3 calls."""
    pytester.makeconftest(BY_ARTIFACT)
    pytester.makepyfile(test_story=INTERRUPTED)
    args = ["--ai-judge", "--judge-model", "scripted", "--judge-samples", "auto", "--judge-cache", "off"]
    first = pytester.runpytest(*args, no_reraise_ctrlc=True)  # (the test's KeyboardInterrupt stays in it)
    assert first.ret == pytest.ExitCode.INTERRUPTED
    (run_dir,) = (pytester.path / ".aimeasure" / "runs").iterdir()
    resumed = pytester.runpytest(
        *args, f"--aimeasure-resume={run_dir.name}", "-k", "tone", "--aimeasure-json", "r.json"
    )
    resumed.assert_outcomes(passed=2)
    resumed.stdout.fnmatch_lines(["*judge scripted: 3 calls, 9 samples reused*"])
    measured = {
        i["nodeid"].split("::")[1]: i["measurements"][0]
        for i in read_results(pytester.path / "r.json")["items"]
    }
    assert {k: (m["n"], m["adaptive"]["stopped"]) for k, m in measured.items()} == {
        "test_a_tone": (9, "maximum"),
        "test_c_tone": (3, "settled"),
    }
    rejudged = pytester.runpytest(*args, "--aimeasure-rejudge", "latest", "-k", "tone")
    rejudged.assert_outcomes(passed=2)
    rejudged.stdout.fnmatch_lines(["*judge scripted: 12 calls, 0 samples reused*"])
