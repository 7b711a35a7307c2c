"""Generation repeats: K outputs per artifact, gates counted over them, the judge pooling them."""

from __future__ import annotations

import pytest

from tests.conftest import ONE_WORKER, read_results

# -- through the plugin ------------------------------------------------------------------------------
CONFTEST = """
import json
import pytest

CALLS = {"n": 0}

def flaky_generator():
    CALLS["n"] += 1
    if CALLS["n"] % 3 == 0:  # fails one time in three
        return "not json at all"
    return json.dumps({"story": "good " * CALLS["n"]})

@pytest.fixture(scope="module")
def story(aimeasure_artifact):
    return aimeasure_artifact("story", flaky_generator, repeats=3)

def pytest_aimeasure_scripted_verdict(call, config):
    # Repeat 1 ("good") scores 4, repeat 2 ("good good") 2: the generator moves the quality.
    if call.dimension == "vivid":
        return (4 if call.artifact.count("good") == 1 else 2), "counted the goods"
    return None
"""

TESTS = """
import json
import pytest
from pytest_aimeasure import each_repeat

@pytest.mark.gate
def test_is_json(story):
    each_repeat(story, lambda r: json.loads(r.text))

@pytest.mark.dimension("vivid", floor=2.5, rubric="5 = vivid")
def test_vivid(story, judge):
    judge.score(story)
"""


@pytest.mark.parametrize("xdist", [[], list(ONE_WORKER)], ids=["serial", "xdist"])
def test_a_generator_that_fails_one_time_in_three_reads_two_of_three(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_story=TESTS)
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--judge-samples", "2", "--aimeasure-json", "out.json",
        "-p", "no:randomly", *xdist,
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*story: 2/3 valid (1 failed: #3 story#r3: JSONDecodeError*"])
    result.stdout.fnmatch_lines(["*Gates over repeats*", "*test_is_json*story*2/3*"])
    data = read_results(pytester.path / "out.json")
    gate = next(i for i in data["items"] if i["nodeid"].endswith("test_is_json"))
    assert gate["extra"]["repeats"][0]["passed"] == 2 and gate["extra"]["repeats"][0]["total"] == 3
    dim = next(i for i in data["items"] if i["nodeid"].endswith("test_vivid"))
    m = dim["measurements"][0]
    # The two valid repeats were judged (2 samples each) and pooled; the failed one was not paid for.
    assert m["n"] == 4 and sorted(s["repeat"] for s in m["samples"]) == [1, 1, 2, 2]
    assert [s["score"] for s in sorted(m["samples"], key=lambda s: s["repeat"])] == [4, 4, 2, 2]
    rep = m["repeats"]
    assert rep["k"] == 2 and rep["generated"] == 3 and rep["keys"] == ["story#r1", "story#r2"]
    assert rep["means"] == [4.0, 2.0] and m["mean"] == pytest.approx(3.0)
    assert rep["var_between"] == pytest.approx(2.0) and rep["var_judge"] == 0.0
    assert rep["var_generation"] == pytest.approx(2.0)
    # The interval carries the generation variance: SE = sqrt(2/2) = 1, t(0.975, 1) = 12.706: 3 ± 12.7,
    # cut to the scale.
    assert (m["ci_low"], m["ci_high"]) == (1.0, 5.0)
    assert data["spend"]["calls"] == 4
    result.stdout.fnmatch_lines(["*Repeats*", "*vivid::*test_vivid*2 of 3*3.00*2.000*0.000*"])


# -- suites: repeats: K ------------------------------------------------------------------------------
SUITE_GENERATOR = """
import threading

_lock = threading.Lock()
_calls = {"n": 0}

def flaky(prompt):
    with _lock:
        _calls["n"] += 1
        n = _calls["n"]
    if n % 3 == 0:  # one call in three times out
        raise TimeoutError("the model did not answer")
    return "A short, fine answer."

def steady(prompt):
    return "A short, steady answer."
"""

SUITE = """\
suite: rep
repeats: 3
targets:
  - {name: flaky, callable: "gen_rep:flaky"}
  - {name: steady, callable: "gen_rep:steady"}
prompts:
  - {id: hello, text: "Say hello."}
gates:
  - length: {max_words: 20}
dimensions:
  - {name: clarity, rubric: "5 = clear", samples: 2, phase: content}
"""

SUITE_SCORER = """
def pytest_aimeasure_scripted_verdict(call, config):
    return (4 if "steady" in call.artifact else 3), "clear enough"
"""


# Under xdist with one worker: one suite file is one loadfile scope (see ONE_WORKER).
@pytest.mark.parametrize("xdist", [[], list(ONE_WORKER)], ids=["serial", "xdist"])
def test_suite_repeats_count_reliability_and_timeouts(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makepyfile(gen_rep=SUITE_GENERATOR)
    pytester.makeconftest(SUITE_SCORER)
    pytester.makefile(".aimeasure.yaml", rep=SUITE)
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json", "-p", "no:randomly", *xdist
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*2/3 valid for target flaky on prompt hello (1/3 timed out)*"])
    result.stdout.fnmatch_lines(["*target*reliability (gates)*timed out*", "*flaky*2/3 (1 gen error)*1/3*"])
    result.stdout.fnmatch_lines(["*steady*3/3*0/3*"])
    data = read_results(pytester.path / "out.json")
    row = {r["target"]: r for r in data["comparison_tables"]["suites"]["rep"]["rows"]}
    assert (row["flaky"]["valid_outputs"], row["flaky"]["outputs"], row["flaky"]["timeouts"]) == (2, 3, 1)
    assert row["flaky"]["reliability"] == pytest.approx(2 / 3, abs=1e-4)
    assert (row["steady"]["valid_outputs"], row["steady"]["outputs"], row["steady"]["timeouts"]) == (3, 3, 0)
    items = {i["extra"]["suite"]["target"]: i for i in data["items"]}
    flaky = items["flaky"]["measurements"][0]
    assert flaky["repeats"]["k"] == 2 and flaky["repeats"]["generated"] == 3 and flaky["n"] == 4
    assert flaky["phase"] == "content"
    steady = items["steady"]["measurements"][0]
    assert steady["repeats"]["k"] == 3 and steady["n"] == 6 and steady["mean"] == 4.0
    keys = steady["repeats"]["keys"]
    assert keys == [f"suite:rep.aimeasure.yaml::rep::hello[steady]#r{i}" for i in (1, 2, 3)]
    assert data["spend"]["calls"] == 10  # 2 samples × (2 valid + 3) repeats: the timed-out one costs nothing


def test_rejudge_scores_the_stored_repeats_without_generating(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_story=TESTS)
    args = ["--ai-judge", "--judge-model", "scripted", "--judge-samples", "2", "-p", "no:randomly"]
    pytester.runpytest(*args).assert_outcomes(passed=1, failed=1)
    # The generator now breaks every output: a rejudge must never call it, and finds the same count.
    pytester.makeconftest(CONFTEST.replace('if CALLS["n"] % 3 == 0', "if True"))
    again = pytester.runpytest(*args, "--aimeasure-rejudge", "latest", "--aimeasure-json", "re.json")
    again.assert_outcomes(passed=1, failed=1)
    again.stdout.fnmatch_lines(["*story: 2/3 valid (1 failed: #3 story#r3*"])
    data = read_results(pytester.path / "re.json")
    m = next(i for i in data["items"] if i["nodeid"].endswith("test_vivid"))["measurements"][0]
    assert m["repeats"]["means"] == [4.0, 2.0]
