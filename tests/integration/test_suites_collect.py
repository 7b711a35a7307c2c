"""Suite files under pytest: collection, ids, collection errors, and each item outcome (offline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import read_results

GENERATOR = """
import json, pathlib

CALLS = pathlib.Path(__file__).with_name("calls.jsonl")

def answer(prompt, *, prompt_id, variables):
    with CALLS.open("a") as fh:
        fh.write(json.dumps({"prompt": prompt, "id": prompt_id}) + "\\n")
    if prompt_id == "explodes":
        raise RuntimeError("the model fell over")
    if prompt_id == "warm":
        return "I appreciate that you asked! Let's find a time."
    return f"No. ({variables.get('thing', 'nothing')})"

async def shout(prompt, *, prompt_id):
    return "NO."

def slow(prompt):
    import time
    time.sleep(1.0)
    return "late"
"""

SUITE = """\
suite: demo
description: offline demo
targets:
  - {name: mine, callable: "gen_demo:answer"}
  - {name: loud, callable: "gen_demo:shout"}
prompts:
  - id: cold
    text: "Decline the {{thing}}."
    category: tone
    variables: {thing: meeting}
  - id: warm
    text: Say hi warmly.
    category: greeting
gates:
  - name: no warmth phrases
    must_not_include: ["I appreciate"]
  - length: {max_words: 20}
dimensions:
  - {name: tone, rubric: "5: curt; 1: warm", samples: 2}
"""

SCORER = """
import json, pathlib

def pytest_aimeasure_scripted_verdict(call, config):
    with pathlib.Path(__file__).with_name("judged.jsonl").open("a") as fh:
        fh.write(json.dumps({"nodeid": call.nodeid, "dimension": call.dimension}) + "\\n")
    if call.dimension == "tone" and "NO." in call.artifact:
        return 2, "shouting is not curt, it is rude"
    if call.dimension == "broken":
        return {"dimension": "broken", "score": "five", "rationale": "not a number"}
    return 4, "curt enough"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(gen_demo=GENERATOR)
    return pytester


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_collects_one_item_per_prompt_and_target_with_readable_ids(project: pytest.Pytester) -> None:
    project.makefile(".aimeasure.yaml", demo=SUITE)
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "demo.aimeasure.yaml::demo::cold[[]mine[]]",
            "demo.aimeasure.yaml::demo::cold[[]loud[]]",
            "demo.aimeasure.yaml::demo::warm[[]mine[]]",
            "demo.aimeasure.yaml::demo::warm[[]loud[]]",
            "4 tests collected*",
        ]
    )
    # categories and target names are keywords
    by_category = project.runpytest("--collect-only", "-q", "-k", "greeting")
    by_category.stdout.fnmatch_lines(["demo.aimeasure.yaml::demo::warm[[]mine[]]", "*2/4 tests collected*"])
    by_target = project.runpytest("--collect-only", "-q", "-k", "loud and tone")
    by_target.stdout.fnmatch_lines(["demo.aimeasure.yaml::demo::cold[[]loud[]]", "*1/4 tests collected*"])
    assert lines(project.path / "calls.jsonl") == []  # collecting calls nothing


def test_yml_suffix_is_collected_and_other_yaml_is_not(project: pytest.Pytester) -> None:
    project.makefile(".aimeasure.yml", other=SUITE.replace("suite: demo", "suite: other"))
    project.makefile(".yaml", config="not: a suite")
    result = project.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["other.aimeasure.yml::other::cold[[]mine[]]", "4 tests collected*"])


def test_malformed_yaml_is_one_collection_error_naming_file_and_line(project: pytest.Pytester) -> None:
    project.makefile(
        ".aimeasure.yaml", broken="suite: demo\ntargets:\n  - model: scripted\nprompts: [\n  - id: a\n"
    )
    project.makefile(".aimeasure.yaml", fine=SUITE.replace("suite: demo", "suite: fine"))
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "collected 4 items / 1 error",
            "*ERROR collecting broken.aimeasure.yaml*",
            "invalid suite file *broken.aimeasure.yaml: line 5: YAML syntax error*",
        ]
    )
    # the other file is fine and runs when collection errors are tolerated
    tolerant = project.runpytest("--continue-on-collection-errors")
    tolerant.assert_outcomes(errors=1, skipped=3, failed=1)


def test_schema_errors_are_one_collection_error_with_every_line_and_field(project: pytest.Pytester) -> None:
    project.makefile(
        ".aimeasure.yaml",
        bad="""\
suite: demo
targets:
  - {name: mine, callable: "gen_demo:answer"}
prompts:
  - id: cold
    txt: hello
dimensions:
  - name: tone
    floor: 7
    rubric: r
""",
    )
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "invalid suite file *bad.aimeasure.yaml: 3 problems",
            "  line 5: prompts[[]0[]].text: required field is missing",
            "  line 6: prompts[[]0[]].txt: unknown field 'txt' (did you mean 'text'?)*",
            "  line 9: dimensions[[]0[]].floor: Input should be less than or equal to 5",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_unknown_provider_or_callable_is_a_collection_error_before_any_call(project: pytest.Pytester) -> None:
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
targets:
  - {name: mine, callable: "gen_demo:answer"}
  - {name: typo, model: "opneai/gpt-4o-mini"}
  - {name: gone, callable: "no_such_pipeline_xyz:run"}
prompts:
  - {id: cold, text: hi}
gates:
  - callable: "gen_demo:no_such_check"
""",
    )
    result = project.runpytest("--ai-judge", "--judge-model", "scripted")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "invalid suite file *demo.aimeasure.yaml: 3 problems",
            "  line 4: targets[[]1[]].model: target model 'opneai/gpt-4o-mini': litellm has no provider "
            "'opneai' (did you mean*'openai'*",
            "  line 5: targets[[]2[]].callable: target gone: cannot import 'no_such_pipeline_xyz'*",
            "  line 9: gates[[]0[]].callable: gate 'gen_demo' has no attribute 'no_such_check'*",
        ]
    )
    assert lines(project.path / "calls.jsonl") == []  # the valid target was never called


def test_generation_failure_is_an_error_and_the_rest_of_the_suite_goes_on(project: pytest.Pytester) -> None:
    project.makeconftest(SCORER)
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
targets:
  - {name: mine, callable: "gen_demo:answer"}
  - {name: loud, callable: "gen_demo:shout"}
prompts:
  - {id: explodes, text: boom}
  - {id: cold, text: "decline the {{thing}}", variables: {thing: call}}
dimensions:
  - {name: quality, rubric: "5: fine", samples: 2}
""",
    )
    result = project.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of demo::explodes[[]mine[]]*",
            "generation failed for target mine (gen_demo:answer): RuntimeError: the model fell over",
            "*[[]fail[]] generation error: demo.aimeasure.yaml::demo::explodes[[]mine[]]*",
        ]
    )
    data = read_results(project.path / "out.json")
    items = {i["nodeid"]: i for i in data["items"]}
    failed = items["demo.aimeasure.yaml::demo::explodes[mine]"]
    assert failed["outcome"] == "error"
    assert failed["measurements"] == []
    suite = failed["extra"]["suite"]
    assert suite["generation"]["error"] == "RuntimeError: the model fell over"
    assert suite["gates"]["passed"] is False
    ok = items["demo.aimeasure.yaml::demo::cold[mine]"]
    assert ok["outcome"] == "passed"
    assert ok["extra"]["suite"]["generation"]["error"] is None
    assert ok["artifact_keys"] == ["suite:demo.aimeasure.yaml::demo::cold[mine]"]
    # the callable got the rendered prompt and its variables
    assert [c for c in lines(project.path / "calls.jsonl") if c["id"] == "cold"] == [
        {"prompt": "decline the call", "id": "cold"}
    ]
    # the failed item was never judged; the others were, once per sample
    judged = lines(project.path / "judged.jsonl")
    assert sorted({j["nodeid"] for j in judged}) == [
        "demo.aimeasure.yaml::demo::cold[loud]",
        "demo.aimeasure.yaml::demo::cold[mine]",
        "demo.aimeasure.yaml::demo::explodes[loud]",
    ]
    assert len(judged) == 6
    rows = {r["target"]: r for r in data["comparison_tables"]["suites"]["demo"]["rows"]}
    assert (rows["mine"]["generation_errors"], rows["mine"]["reliability"]) == (1, 0.5)
    assert rows["mine"]["cost_known"] is False  # a callable has no price unless it declares one
    assert (rows["loud"]["generation_errors"], rows["loud"]["reliability"]) == (0, 1.0)


def test_gate_failure_fails_the_item_without_a_judge_call(project: pytest.Pytester) -> None:
    project.makeconftest(SCORER)
    project.makefile(".aimeasure.yaml", demo=SUITE)
    result = project.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=1, failed=3)  # warm[mine] fails a gate; loud fails its floor twice
    result.stdout.fnmatch_lines(
        [
            "*_ demo::warm[[]mine[]] _*",
            "gates failed for target mine on prompt warm (not judged):",
            "  - no warmth phrases: found 'I appreciate' at char 0: *",
            "output excerpt:",
            "    I appreciate that you asked! Let's find a time.",
        ]
    )
    judged = {j["nodeid"] for j in lines(project.path / "judged.jsonl")}
    assert "demo.aimeasure.yaml::demo::warm[mine]" not in judged
    assert "demo.aimeasure.yaml::demo::cold[mine]" in judged
    data = read_results(project.path / "out.json")
    warm = next(i for i in data["items"] if i["nodeid"] == "demo.aimeasure.yaml::demo::warm[mine]")
    assert warm["extra"]["suite"]["gates"] == {
        "passed": False,
        "checked": 2,
        "failed": [
            {
                "gate": "no warmth phrases",
                "problems": [
                    "found 'I appreciate' at char 0: \"I appreciate that you asked! Let's find a…\""
                ],
            }
        ],
    }
    assert [f["kind"] for f in warm["findings"]] == ["gate_failed"]


def test_floor_breach_fails_like_a_dimension_test_and_feeds_the_baseline(project: pytest.Pytester) -> None:
    project.makeconftest(SCORER)
    project.makefile(".aimeasure.yaml", demo=SUITE)
    result = project.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json")
    result.stdout.fnmatch_lines(
        [
            "*_ demo::cold[[]loud[]] _*",
            "tone: mean 2.00 (95% CI 1.00–*, n=2) is below the floor 3",
            "samples: 2, 2",
            "lowest sample (#0, score 2): shouting is not curt, it is rude",
            "artifact excerpt:",
            "    NO.",
        ]
    )
    data = read_results(project.path / "out.json")
    cold = next(i for i in data["items"] if i["nodeid"] == "demo.aimeasure.yaml::demo::cold[mine]")
    assert cold["item_id"] == "tone::demo.aimeasure.yaml::demo::cold[mine]"
    (m,) = cold["measurements"]
    assert (m["dimension"], m["n"], m["mean"]) == ("tone", 2, 4.0)
    assert m["item_id"] == "tone::demo.aimeasure.yaml::demo::cold[mine]"
    assert m["facts"] == {"characters": 13, "words": 2, "lines": 1}  # "No. (meeting)"
    assert [f["kind"] for f in data["findings"]].count("floor_breach") == 2
    update = project.runpytest("--ai-judge", "--judge-model", "scripted", "--update-baseline")
    update.assert_outcomes(passed=1, failed=3)
    baseline = json.loads((project.path / "aimeasure-baseline.json").read_text())
    assert "tone::demo.aimeasure.yaml::demo::cold[mine]" in json.dumps(baseline)


def test_judge_sees_prompt_rubric_facts_and_output(project: pytest.Pytester) -> None:
    project.makeconftest(
        """
import json, pathlib
def pytest_aimeasure_scripted_verdict(call, config):
    seen = {"rubric": call.rubric, "artifact": call.artifact, "facts": call.facts}
    pathlib.Path("seen.json").write_text(json.dumps(seen))
    return 4
"""
    )
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
system: You are Dana.
targets: [{name: mine, callable: "gen_demo:answer"}]
prompts: [{id: cold, text: "Decline the {{thing}}.", variables: {thing: demo}}]
dimensions: [{name: tone, rubric: "5: curt", samples: 1}]
""",
    )
    project.runpytest("--ai-judge", "--judge-model", "scripted").assert_outcomes(passed=1)
    seen = json.loads((project.path / "seen.json").read_text())
    assert seen["artifact"] == "No. (demo)"
    assert seen["rubric"] == (
        "5: curt\n\nThe artifact is an AI system's reply to this prompt:\n"
        "<prompt>\nDecline the demo.\n</prompt>"
        "\n\nIts system prompt was:\n<system>\nYou are Dana.\n</system>"
    )
    assert seen["facts"] == {"characters": 10, "words": 2, "lines": 1}


def test_judge_error_is_an_error(project: pytest.Pytester) -> None:
    project.makeconftest(SCORER)
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
targets: [{name: mine, callable: "gen_demo:answer"}]
prompts: [{id: cold, text: hi}]
dimensions: [{name: broken, rubric: r, samples: 1}, {name: fine, rubric: r, samples: 1}]
""",
    )
    result = project.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*judge error: no valid verdict for broken::demo.aimeasure.yaml::demo::cold[[]mine[]]*"]
    )
    (item,) = read_results(project.path / "out.json")["items"]
    assert item["judge_error"] is True
    assert item["item_id"] == "broken::demo.aimeasure.yaml::demo::cold[mine]"
    assert [m["dimension"] for m in item["measurements"]] == ["fine"]  # what was measured is kept


def test_without_the_judge_outputs_are_generated_and_gated_and_dimensions_skipped(
    project: pytest.Pytester,
) -> None:
    project.makefile(".aimeasure.yaml", demo=SUITE)
    result = project.runpytest("-rsf")
    result.assert_outcomes(skipped=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]2[]] demo.aimeasure.yaml:7: generated and gated; dimension(s) tone are judged only "
            "with --ai-judge (pytest --ai-judge --judge-model MODEL)",
            "FAILED demo.aimeasure.yaml::demo::warm[[]mine[]]*",
        ]
    )
    assert len(lines(project.path / "calls.jsonl")) == 2  # mine generated both prompts


def test_suite_without_dimensions_passes_on_its_gates(project: pytest.Pytester) -> None:
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
targets: [{name: mine, callable: "gen_demo:answer"}]
prompts: [{id: cold, text: hi}]
gates: [{regex: '^No\\.'}]
""",
    )
    project.runpytest().assert_outcomes(passed=1)


def test_timeouts_make_the_item_an_error_and_name_the_setting(project: pytest.Pytester) -> None:
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
timeout_s: 30
targets:
  - {name: slow, callable: "gen_demo:slow", timeout_s: 0.2}
  - {name: mine, callable: "gen_demo:answer"}
prompts: [{id: cold, text: hi}]
""",
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["generation failed for target slow (gen_demo:slow): TimeoutError: no output after 0.2s (timeout_s)"]
    )
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
timeout_s: 0.2
targets: [{name: slow, callable: "gen_demo:slow"}]
prompts: [{id: cold, text: hi}]
""",
    )
    result = project.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["generation failed for target slow (gen_demo:slow): no result after 0.2s (the suite's timeout_s)"]
    )


def test_a_session_ends_without_waiting_for_a_target_that_never_returns(project: pytest.Pytester) -> None:
    # -x ends the session while both prompts' generations (the second scheduled ahead) are still
    # running in their threads: their jobs are cancelled and unwound, nothing is dropped pending,
    # and the process exits instead of waiting for the calls (it used to wait forever, in Python's
    # exit-time join of the loop's thread pool).
    project.makepyfile(
        gen_stuck="""
import threading

def stuck(prompt):
    threading.Event().wait()
"""
    )
    project.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
timeout_s: 0.2
targets: [{name: stuck, callable: "gen_stuck:stuck", timeout_s: 600}]
prompts: [{id: one, text: hi}, {id: two, text: hello}]
""",
    )
    result = project.runpytest_subprocess("-x", "-p", "no:randomly", timeout=60)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no result after 0.2s (the suite's timeout_s)*"])
    stderr = result.stderr.str()
    for noise in ("Task was destroyed", "was never awaited", "Event loop is closed", "Traceback"):
        assert noise not in stderr
