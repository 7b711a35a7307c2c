"""`--update-baseline --aimeasure-baseline-repeats K` generates K outputs of an artifact that sets no
repeats (issue 19): the baseline then measures how much the generator moves, and later runs, which
generate one output, are compared with that measured variance instead of an assumed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ONE_WORKER, read_results

# A non-deterministic generator: each call writes a different story, and the scripted judge scores
# them 5, 3, 4, 5, 3, ... Every call is logged to a file, so the count holds across xdist workers.
CONFTEST = """
import pathlib

import pytest

LOG = pathlib.Path(__file__).parent / "generated.log"


def write_story():
    with LOG.open("a") as log:
        log.write("x")
    n = len(LOG.read_text())
    return f"story draft {n} " + "vivid " * (n % 3)


@pytest.fixture(scope="session")
def story(aimeasure_artifact):
    return aimeasure_artifact("story", write_story)


def pytest_aimeasure_scripted_verdict(call, config):
    return 3 + call.artifact.count("vivid"), "as vivid as its words"
"""

TESTS = """
import pytest


@pytest.mark.dimension("vividness", rubric="5 = vivid")
def test_vivid(judge, story):
    judge.score(story)
"""

ARGS = ("--ai-judge", "--judge-model", "scripted", "-p", "no:randomly")


def _generated(path: Path) -> int:
    log = path / "generated.log"
    return len(log.read_text()) if log.exists() else 0


def _update_with_outputs(pytester: pytest.Pytester, outputs: int = 3) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_story=TESTS)
    pytester.runpytest(
        *ARGS, "--update-baseline", "--aimeasure-baseline-repeats", str(outputs)
    ).assert_outcomes(passed=1)
    assert _generated(pytester.path) == outputs


def _entry(path: Path) -> dict[str, object]:
    entries: dict[str, dict[str, object]] = json.loads((path / "aimeasure-baseline.json").read_text())[
        "entries"
    ]
    (entry,) = entries.values()
    return entry


@pytest.mark.parametrize("xdist", [[], list(ONE_WORKER)], ids=["serial", "xdist"])
def test_update_baseline_generates_three_outputs_and_later_runs_compare_with_their_spread(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_story=TESTS)
    update = pytester.runpytest(*ARGS, "--update-baseline", *xdist)  # three outputs is the default
    update.assert_outcomes(passed=1)
    assert _generated(pytester.path) == 3
    update.stdout.fnmatch_lines(
        [
            "baseline *: 1 added, *",
            "  1 entries measured over 3 outputs of each artifact that sets no repeats= "
            "(--aimeasure-baseline-repeats 3; 1 generates one)*",
        ]
    )
    entry = _entry(pytester.path)
    # Drafts 1, 2, 3 score 4, 5, 3 (three samples each): the entry keeps the three generations apart.
    assert entry["generations"] == [3, 3, 3] and entry["scores"] == [4, 4, 4, 5, 5, 5, 3, 3, 3]

    again = pytester.runpytest(*ARGS, "--aimeasure-json", "out.json", *xdist)
    again.assert_outcomes(passed=1)
    assert _generated(pytester.path) == 4  # a run that does not write the baseline generates one
    data = read_results(pytester.path / "out.json")
    (measurement,) = next(i for i in data["items"] if i["nodeid"].endswith("test_vivid"))["measurements"]
    assert measurement["repeats"] is None and measurement["n"] == 3
    dim = data["dimensions"]["vividness"]
    # Draft 4 scores 4: no change against the baseline's mean 4. The error bar comes from the
    # generator's measured spread (repeat means 4, 5, 3: variance 1, 2 df), not from the judge, whose
    # samples agree.
    assert dim["delta"] == pytest.approx(0.0) and dim["se_source"] == "repeats"
    assert dim["shared_source"] == "prior"  # one session cannot show a session-wide shift, repeats or not


def test_explicit_repeats_and_a_baseline_repeats_of_one_are_kept(pytester: pytest.Pytester) -> None:
    _update_with_outputs(pytester, 1)
    assert "generations" not in _entry(pytester.path)

    pytester.makeconftest(
        CONFTEST.replace(
            'aimeasure_artifact("story", write_story)', 'aimeasure_artifact("story", write_story, repeats=2)'
        )
    )
    (pytester.path / "aimeasure-baseline.json").unlink()
    pytester.runpytest(*ARGS, "--update-baseline", "--aimeasure-baseline-repeats", "3").assert_outcomes(
        passed=1
    )
    assert _generated(pytester.path) == 3  # the test's own repeats=2, not the option's 3
    assert _entry(pytester.path)["generations"] == [3, 3]


def test_rejudging_the_update_run_reads_its_stored_outputs_and_generates_none(
    pytester: pytest.Pytester,
) -> None:
    _update_with_outputs(pytester)
    rejudged = pytester.runpytest(*ARGS, "--aimeasure-rejudge", "latest", "--aimeasure-json", "re.json")
    rejudged.assert_outcomes(passed=1)
    assert _generated(pytester.path) == 3
    data = read_results(pytester.path / "re.json")
    (measurement,) = next(i for i in data["items"] if i["nodeid"].endswith("test_vivid"))["measurements"]
    assert measurement["repeats"]["keys"] == ["story#r1", "story#r2", "story#r3"]
    assert measurement["repeats"]["means"] == [4.0, 5.0, 3.0]


SUITE = """\
suite: tales
targets:
  - {name: teller, callable: "gen_tales:tell"}
prompts:
  - {id: fox, text: "Tell a fable."}
  - {id: owl, text: "Tell another.", repeats: 2}
dimensions:
  - {name: charm, rubric: "5 = charming", samples: 2}
"""

SUITE_GENERATOR = """
def tell(prompt):
    return "Once upon a time."
"""


def test_a_suite_prompt_without_repeats_gets_the_baseline_repeats(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(gen_tales=SUITE_GENERATOR)
    pytester.makefile(".aimeasure.yaml", tales=SUITE)
    pytester.makeini("[pytest]\naimeasure_baseline_repeats = 3\n")
    pytester.runpytest(*ARGS, "--update-baseline").assert_outcomes(passed=2)
    entries = json.loads((pytester.path / "aimeasure-baseline.json").read_text())["entries"]
    generations = {item_id.split("::")[-1]: entry.get("generations") for item_id, entry in entries.items()}
    assert generations == {"fox[teller]": [2, 2, 2], "owl[teller]": [2, 2]}  # the ini's 3; owl's own 2


@pytest.mark.parametrize("value", ["0", "101", "three"])
def test_a_bad_baseline_repeats_value_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest(*ARGS, "--aimeasure-baseline-repeats", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--aimeasure-baseline-repeats*a whole number from 1 to 100*{value}*"])


def test_attribution_rejudges_every_output_of_a_baseline_entry_that_pooled_generation_repeats(
    pytester: pytest.Pytester,
) -> None:
    _update_with_outputs(pytester)
    entry = _entry(pytester.path)
    (source,) = entry["sources"]  # type: ignore[misc]
    assert len(source["generations"]) == 3  # each output's artifact, in the order of the generations
    # Today's rubric asks more, and the scripted judge is one point stricter under it: a judge change.
    pytester.makeconftest(
        CONFTEST.replace(
            'return 3 + call.artifact.count("vivid")',
            'return 3 + call.artifact.count("vivid") - ("earns its place" in call.rubric)',
        )
    )
    pytester.makepyfile(test_story=TESTS.replace("5 = vivid", "5 = vivid, and every word earns its place"))
    result = pytester.runpytest(*ARGS, "--aimeasure-attribute", "--aimeasure-json", "out.json")
    data = read_results(pytester.path / "out.json")
    (finding,) = [f for f in data["findings"] if f["kind"] == "attribution"]
    detail = finding["detail"]
    assert detail["skipped"] == {}
    # Drafts 1-3 (4, 5, 3 before) are rejudged 3, 4, 2: three samples of each stored output, and the
    # rejudged session pools them as the baseline's session did. Draft 4 scores 4 - 1 = 3 today.
    assert detail["calls"] == 9 and _generated(pytester.path) == 4
    assert (detail["baseline_mean"], detail["rejudged_mean"], detail["now_mean"]) == (4.0, 3.0, 3.0)
    assert detail["judge"]["delta"] == pytest.approx(-1.0) and detail["system"]["delta"] == pytest.approx(0.0)
    assert data["dimensions"]["vividness"]["verdict"] == "not_comparable"
    result.stdout.fnmatch_lines(["*dimension 'vividness' attributed*of Δ -1.00*"])


# -- repeats="auto": the baseline decides where the next measurement spends ------------------------
AUTO_CONFTEST = CONFTEST.replace(
    'aimeasure_artifact("story", write_story)', 'aimeasure_artifact("story", write_story, repeats="auto")'
)


@pytest.mark.parametrize("xdist", [[], list(ONE_WORKER)], ids=["serial", "xdist"])
def test_repeats_auto_measures_the_generator_first_and_then_spends_on_it(
    pytester: pytest.Pytester, xdist: list[str]
) -> None:
    pytester.makeconftest(AUTO_CONFTEST)
    pytester.makepyfile(test_story=TESTS)
    update = pytester.runpytest(*ARGS, "--update-baseline", "--aimeasure-json", "first.json", *xdist)
    update.assert_outcomes(passed=1)
    # No entry yet, and this session writes the baseline: three outputs measure both parts.
    assert _generated(pytester.path) == 3
    assert read_results(pytester.path / "first.json")["generations"] == {
        "artifacts": 1,
        "more_outputs": 1,
        "outputs": 3,
        "calls": 9,
        "evidence": {"none": 1},
    }
    update.stdout.fnmatch_lines(["*; evidence: 1 first baseline"])
    entry = _entry(pytester.path)
    assert entry["artifact_key"] == "story" and entry["generations"] == [3, 3, 3]

    run = pytester.runpytest(*ARGS, "--judge-samples", "auto", "--aimeasure-json", "out.json", *xdist)
    run.assert_outcomes(passed=1)
    # The judge gave one score every time (drafts 1-3: 4, 5, 3) while the drafts moved (variance 1):
    # three outputs again (drafts 4-6 score 4, 5, 3), each stopped at auto's minimum, where the judge
    # agreed with itself.
    assert _generated(pytester.path) == 6
    data = read_results(pytester.path / "out.json")
    (measurement,) = next(i for i in data["items"] if i["nodeid"].endswith("test_vivid"))["measurements"]
    assert measurement["repeats"]["means"] == [4.0, 5.0, 3.0] and measurement["n"] == 9
    assert measurement["adaptive"]["stopped"] == "agreed"
    assert measurement["chosen"] == {
        "repeats": 3,
        "spend": "generations",
        "var_generation": 1.0,
        "var_judge": 0.0,
        "evidence": "repeats",
        "entries": 1,
    }
    assert data["generations"]["calls"] == 9 and data["generations"]["evidence"] == {"repeats": 1}
    run.stdout.fnmatch_lines(
        [
            'repeats="auto": 1 of 1 artifact got more outputs, where the generator moves more than the '
            "judge (3 outputs in all, 9 judge calls); evidence: 1 repeats"
        ]
    )


def test_repeats_auto_leaves_one_output_to_a_judge_that_varies_on_a_generator_that_does_not(
    pytester: pytest.Pytester,
) -> None:
    # The judge scores every draft 2, 3, 4 by sample: its own noise, which more samples reduce, is all
    # there is (each draft's mean is 3).
    pytester.makeconftest(
        AUTO_CONFTEST.replace('return 3 + call.artifact.count("vivid")', "return 2 + call.index % 3")
    )
    pytester.makepyfile(test_story=TESTS)
    pytester.runpytest(*ARGS, "--update-baseline").assert_outcomes(passed=1)
    assert _generated(pytester.path) == 3
    run = pytester.runpytest(*ARGS, "--judge-samples", "auto", "--aimeasure-json", "out.json")
    run.assert_outcomes(passed=1)
    assert _generated(pytester.path) == 4  # one output
    data = read_results(pytester.path / "out.json")
    (measurement,) = next(i for i in data["items"] if i["nodeid"].endswith("test_vivid"))["measurements"]
    assert measurement["repeats"] is None and measurement["n"] > 3  # auto added judge samples
    chosen = measurement["chosen"]
    assert (chosen["repeats"], chosen["spend"], chosen["evidence"]) == (1, "judge samples", "repeats")
    assert (chosen["var_generation"], chosen["var_judge"]) == (0.0, pytest.approx(1 / 3))
    assert data["generations"]["more_outputs"] == 0 and data["generations"]["calls"] == measurement["n"]


def test_a_suite_prompt_with_repeats_auto_is_chosen_from_the_baseline(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(gen_tales=SUITE_GENERATOR)
    pytester.makefile(
        ".aimeasure.yaml", tales=SUITE.replace('"Tell a fable."}', '"Tell a fable.", repeats: auto}')
    )
    # Before a session, the fable's outputs are one or three (2 or 6 calls); the owl's two take 4.
    pytester.runpytest(*ARGS, "--judge-dry-run").stdout.fnmatch_lines(["*6..10 judge calls*"])
    pytester.runpytest(*ARGS, "--update-baseline").assert_outcomes(passed=2)
    entries = json.loads((pytester.path / "aimeasure-baseline.json").read_text())["entries"]
    fox = next(e for item_id, e in entries.items() if item_id.endswith("fox[teller]"))
    assert fox["generations"] == [2, 2, 2] and fox["artifact_key"].endswith("fox[teller]")
    pytester.runpytest(*ARGS, "--aimeasure-json", "out.json").assert_outcomes(passed=2)
    chosen = {
        item["nodeid"].split("::")[-1]: item["measurements"][0]["chosen"]
        for item in read_results(pytester.path / "out.json")["items"]
    }
    # The scripted judge gives the fable one score on each of its outputs: more outputs again.
    assert chosen["owl[teller]"] is None
    assert (chosen["fox[teller]"]["repeats"], chosen["fox[teller]"]["evidence"]) == (3, "repeats")


@pytest.mark.parametrize("value", ["'often'", "0"])
def test_a_bad_repeats_value_names_the_artifact_and_what_is_allowed(
    pytester: pytest.Pytester, value: str
) -> None:
    pytester.makeconftest(CONFTEST.replace("write_story)", f"write_story, repeats={value})"))
    pytester.makepyfile(test_story=TESTS)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*aimeasure_artifact('story'): repeats={value}* must be a whole number from 1 to 100, or 'auto'*"]
    )
