"""Generation repeats: K outputs per artifact, gates counted over them, the judge pooling them."""

from __future__ import annotations

import math

import pytest

from pytest_aimeasure.measure.artifact import RepeatCount
from pytest_aimeasure.measure.repeats import repeat_key, repeat_stats
from tests.conftest import read_results


# -- the two-level decomposition on hand-computed data ------------------------------------------------
def test_variance_parts_on_known_data() -> None:
    # Repeat means 13/3, 7/3, 3 (grand mean 29/9); their variance (ddof 1) is 28/27. Within repeats the
    # sums of squares are 2/3, 2/3 and 0 over 6 df: judge variance 2/9. Generation variance is
    # 28/27 − (2/9)/3 = 26/27. The item's SE is sqrt((28/27)/3) with K − 1 = 2 df.
    s = repeat_stats([[4, 4, 5], [2, 3, 2], [3, 3, 3]])
    assert s.means == pytest.approx((13 / 3, 7 / 3, 3.0))
    assert s.mean == pytest.approx(29 / 9)
    assert s.var_between == pytest.approx(28 / 27)
    assert s.var_judge == pytest.approx(2 / 9)
    assert s.var_generation == pytest.approx(26 / 27)
    assert s.se == pytest.approx(math.sqrt(28 / 81))
    assert s.df == 2.0 and s.source == "repeats"
    assert s.var_generation + s.var_judge / 3 == pytest.approx(s.var_between)  # the parts add up
    # t(0.975, 2) = 4.302653: the generation variance widens the interval far beyond the judge's, to a
    # half-width of 2.53 around 3.22, past both ends of the 1-5 scale, where it is bounded.
    assert 4.302653 * s.se > max(s.mean - 1.0, 5.0 - s.mean)
    assert (s.ci_low, s.ci_high) == (1.0, 5.0)


def test_identical_repeats_are_floored_not_infinitely_precise() -> None:
    # Repeats that agree exactly (s²_b = 0) agree by luck as often as not: the repeat means' variance
    # is floored at 1/12 (one integer score's rounding), SE = sqrt((1/12)/2) with K − 1 = 1 df.
    s = repeat_stats([[3, 3, 3], [3, 3, 3]])
    assert s.var_between == 0.0 and s.var_generation == 0.0 and s.var_judge == 0.0
    assert s.source == "floor" and s.df == 1.0
    assert s.se == pytest.approx(math.sqrt((1 / 12) / 2))


def test_judge_noise_alone_is_not_called_generation_variance() -> None:
    # Repeat means 3.5 and 3.0: s²_b = 0.125; judge variance: (0.5 + 0.5 + 0 + 0)... computed by hand:
    # [3, 4] has variance 0.5, [3, 3] has 0; pooled over 2 df: 0.25. σ²_judge/N = 0.125 = s²_b, so the
    # generation part is 0 and the judge term sets the SE.
    s = repeat_stats([[3, 4], [3, 3]])
    assert s.var_between == pytest.approx(0.125)
    assert s.var_judge == pytest.approx(0.25)
    assert s.var_generation == pytest.approx(0.0)
    assert s.source == "judge"
    assert s.se == pytest.approx(math.sqrt(0.25 / 2 / 2))


def test_repeat_keys_and_counts_read_as_documented() -> None:
    assert repeat_key("story-7", 0) == "story-7#r1"
    assert str(RepeatCount(2, 3)) == "2/3 valid"
    with pytest.raises(ValueError, match="at least one score"):
        repeat_stats([[3], []])


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


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
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


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
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
