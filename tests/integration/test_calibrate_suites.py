"""A suite dimension's ``anchors:`` (and its ``min_kappa``/``max_abs_bias``) calibrate the judge under
``--judge-calibrate`` exactly as ``@pytest.mark.dimension(anchors=...)`` does; bad values and missing
files are errors naming the suite file, the line and the field (offline: the scripted judge)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import ONE_WORKER, read_results

GENERATOR = """
def answer(prompt, *, prompt_id):
    return "HUMAN=4: No, thank you."
"""

SUITE = """\
suite: replies
targets:
  - {name: mine, callable: "gen_replies:answer"}
prompts:
  - id: decline
    text: Decline the meeting.
dimensions:
  - name: tone
    rubric: "5: calm and precise; 1: shouting"
    anchors: anchors/tone.yaml
    min_kappa: 0.9
    max_abs_bias: 0.3
"""

# The scripted judge reads the human label planted in each artifact: faithful, or one point generous.
SCORER = """
import re

GENEROUS = {generous}

def pytest_aimeasure_scripted_verdict(call, config):
    human = int(re.search(r"HUMAN=(\\d)", call.artifact).group(1))
    return min(5, human + GENEROUS), "read the label"
"""


def anchor_yaml() -> str:
    lines = ["dimension: tone", "anchors:"]
    for i, h in enumerate([1, 2, 3, 4] * 3):
        lines += [f"  - id: a{i:02d}", f"    text: 'HUMAN={h}: reply {i}'"]
        lines.append(f"    labels: {{ann: {h}, bob: {h}}}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(gen_replies=GENERATOR)
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "anchors").mkdir()
    (pytester.path / "suites" / "anchors" / "tone.yaml").write_text(anchor_yaml())
    (pytester.path / "suites" / "replies.aimeasure.yaml").write_text(SUITE)
    return pytester


def run(pytester: pytest.Pytester, *args: str, generous: int = 0) -> tuple[pytest.RunResult, dict[str, Any]]:
    pytester.makeconftest(SCORER.replace("{generous}", str(generous)))
    argv = ("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json", "-p", "no:randomly")
    result = pytester.runpytest(*argv, *args)
    return result, read_results(pytester.path / "out.json")


# Under xdist with one worker: one suite file is one loadfile scope (a worker generates only what its
# own queue holds: test_suites_server's test_under_xdist_each_output_is_generated_once, two workers).
@pytest.mark.parametrize("xdist", [(), ONE_WORKER], ids=["serial", "xdist"])
def test_suite_anchors_calibrate_the_judge_with_the_suites_thresholds(
    project: pytest.Pytester, xdist: tuple[str, ...]
) -> None:
    result, data = run(project, "--judge-calibrate=fail", *xdist, generous=1)
    entry = data["calibration_summary"]["tone"]
    c = entry["calibration"]
    assert entry["status"] == "uncalibrated"
    assert c["anchors"] == 12 and c["anchor_files"] == ["suites/anchors/tone.yaml"]
    assert c["thresholds"] == {"min_kappa": 0.9, "max_abs_bias": 0.3}  # from the suite, not the defaults
    assert c["bias"]["mean"] == pytest.approx(1.0)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*aimeasure failed the run*uncalibrated ruler*"])
    stored = json.loads((project.path / "aimeasure-calibration.json").read_text())
    assert stored["dimensions"]["tone"]["bias"]["mean"] == 1.0


def test_suite_anchors_pass_a_faithful_judge(project: pytest.Pytester) -> None:
    result, data = run(project, "--judge-calibrate=fail")
    assert data["calibration_summary"]["tone"]["status"] == "calibrated"
    assert data["calibration_summary"]["tone"]["calibration"]["agreement"]["kappa"] == 1.0
    assert result.ret == 0, result.stdout.str()


def test_without_judge_calibrate_suite_anchors_cost_nothing(project: pytest.Pytester) -> None:
    result, data = run(project)
    assert result.ret == 0
    assert data["calibration_summary"] == {}
    assert data["spend"]["calls"] == 3  # the one suite item, N = 3


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (
            "anchors: anchors/tone.yaml",
            "anchors: anchors/typo.yaml",
            "dimensions[[]0[]].anchors",
            "anchor file 'anchors/typo.yaml' not found (paths are relative to the suite file*",
        ),
        ("min_kappa: 0.9", "min_kappa: 1.5", "dimensions[[]0[]].min_kappa", "*less than or equal to 1*"),
        ("max_abs_bias: 0.3", "max_abs_bias: -1", "dimensions[[]0[]].max_abs_bias", "*greater than*"),
        ("anchors: anchors/tone.yaml", "anchors: []", "dimensions[[]0[]].anchors", "*at least 1 item*"),
    ],
)
def test_bad_calibration_fields_are_errors_naming_file_line_and_field(
    project: pytest.Pytester, old: str, new: str, field: str, message: str
) -> None:
    suite = project.path / "suites" / "replies.aimeasure.yaml"
    suite.write_text(SUITE.replace(old, new))
    line = SUITE.splitlines().index("    " + old) + 1
    result, _ = run(project)
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    result.stdout.fnmatch_lines([f"*replies.aimeasure.yaml: line {line}: {field}: {message}"])


def test_a_bad_anchor_file_is_one_error_naming_its_line(project: pytest.Pytester) -> None:
    path = project.path / "suites" / "anchors" / "tone.yaml"
    text = anchor_yaml().replace("labels: {ann: 2, bob: 2}", "labels: {ann: 2, bob: 9}", 1)
    path.write_text(text)
    project.makeconftest(SCORER.replace("{generous}", "0"))
    result = project.runpytest("--ai-judge", "--judge-model", "scripted", "--judge-calibrate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = text.splitlines().index("    labels: {ann: 2, bob: 9}") + 1
    result.stderr.fnmatch_lines(
        [f"*anchors/tone.yaml:{line}: anchor file: anchors[[]1[]].labels: bob: *got 9"]
    )
