"""Calibration end to end: pytest sessions judging anchor sets through the real anthropic SDK against the
local provider server, whose scorer reads each anchor's human label (``HUMAN=n``) from the prompt and
answers like a faithful, a generous or a length-sensitive judge would."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from pytest_aimeasure.testing import SeenRequest
from tests.conftest import ONE_WORKER, read_results

MODEL = "anthropic/claude-test"
LEVELS = [1, 2, 3, 4] * 3  # twelve anchors across the levels a +1 judge can still reach
LONG_PROMPT = 600  # the padded anchors' prompts are longer than this, the plain ones shorter


def anchor_yaml() -> str:
    lines = ["dimension: tone", "anchors:"]
    for i, h in enumerate(LEVELS):
        lines += [
            f"  - id: a{i:02d}",
            f"    text: 'HUMAN={h}: reply number {i} of the help desk.'",
            f"    labels: {{ann: {h}, bob: {h}}}",
        ]
    return "\n".join(lines) + "\n"


TEST_MODULE = """
    import pytest

    @pytest.mark.dimension("tone", rubric="5 = calm and precise", anchors="anchors/tone.yaml", min_kappa=0.8)
    def test_tone(judge):
        judge.score("HUMAN=4: the real reply")
"""


def human(seen: SeenRequest) -> int:
    found = re.search(r"HUMAN=(\d)", seen.prompt)
    assert found, seen.prompt
    return int(found.group(1))


def faithful(seen: SeenRequest) -> int:
    return human(seen)


def generous(seen: SeenRequest) -> int:
    return min(5, human(seen) + 1)


def length_sensitive(seen: SeenRequest) -> int:
    return min(5, human(seen) + (1 if len(seen.prompt) > LONG_PROMPT else 0))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_tone=textwrap.dedent(TEST_MODULE))
    (pytester.path / "anchors").mkdir()
    (pytester.path / "anchors" / "tone.yaml").write_text(anchor_yaml())
    return pytester


def calibrated(
    pytester: pytest.Pytester, *args: str, model: str = MODEL
) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest("--ai-judge", "--judge-model", model, "--aimeasure-json", "out.json", *args)
    return result, read_results(pytester.path / "out.json")


def tone(data: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = data["calibration_summary"]["tone"]
    return entry


def test_generous_judge_shows_bias_of_one_and_is_untrusted(project: pytest.Pytester, serve: Any) -> None:
    serve(generous)
    result, data = calibrated(project, "--judge-calibrate=fail")
    entry = tone(data)
    c = entry["calibration"]
    assert c["anchors"] == 12
    assert c["bias"]["mean"] == pytest.approx(1.0)
    assert c["bias"]["ci_low"] > 0  # every anchor one point high: the interval excludes 0
    assert c["agreement"]["kappa"] < 0.8
    # κ's interval straddles min_kappa 0.6; the bias interval [+1, +1] lies beyond ±0.5: untrusted.
    assert c["trust"]["kappa_ci_low"] < 0.6 < c["trust"]["kappa_ci_high"]
    assert c["trust"]["verdict"] == "untrusted" and c["trust"]["budget"] is None
    assert c["problems"] == ["bias +1.00 [+1.00, +1.00] lies beyond ±0.5"]
    assert entry["status"] == "uncalibrated" and entry["verdict"] == "untrusted"
    assert c["agreement"]["exact"] == 0.0 and c["agreement"]["within_one"] == 1.0
    assert [b["mean_bias"] for b in c["bias"]["by_level"]] == [1.0, 1.0, 1.0, 1.0]
    assert c["human_alpha"] == 1.0  # the two raters agree everywhere
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*uncalibrated ruler: tone*", "*aimeasure failed the run*uncalibrated ruler*"]
    )
    assert any(f["kind"] == "uncalibrated" and f["severity"] == "fail" for f in data["findings"])
    stored = json.loads((project.path / "aimeasure-calibration.json").read_text())
    assert stored["dimensions"]["tone"]["bias"]["mean"] == 1.0
    # The HTML report's figure: the judge's mean at each human level, one point above the diagonal.
    (figure,) = data["calibration"]
    assert figure["dimension"] == "tone" and figure["anchors"] == 12
    points = [(b["reference"], b["judge"], b["n"]) for b in figure["bins"]]
    assert points == [(1, 2, 3), (2, 3, 3), (3, 4, 3), (4, 5, 3)]
    assert figure["agreement"]["weighted_kappa"] == c["agreement"]["kappa"]
    assert figure["bias"]["mean"] == 1.0 and "ruler: uncalibrated" in figure["notes"]


def test_faithful_judge_passes(project: pytest.Pytester, serve: Any) -> None:
    server = serve(faithful)
    result, data = calibrated(project, "--judge-calibrate=fail", "--judge-samples", "2")
    c = tone(data)["calibration"]
    assert c["agreement"]["kappa"] == 1.0 and c["agreement"]["alpha"] == 1.0
    assert c["bias"]["mean"] == 0.0
    assert c["repeatability"]["all_agree"] == 1.0
    # Twelve anchors × two samples measured the noise: it replaces the fixed floor (at its minimum).
    assert c["repeatability"]["var_floor"] == 0.01
    assert tone(data)["status"] == "calibrated"
    assert result.ret == 0
    assert server.judge_calls == 12 * 2 + 2  # every anchor N times, plus the real item
    result.stdout.fnmatch_lines(
        [
            "*Calibration (judge vs human anchors)*",
            "*tone*12*1.00 [[]0.90, 1.00]*trusted*",
            "*replaces the fixed*",
        ]
    )


def test_calibration_reuses_cached_samples(project: pytest.Pytester, serve: Any) -> None:
    server = serve(faithful)
    calibrated(project, "--judge-calibrate")
    first = server.judge_calls
    _, data = calibrated(project, "--judge-calibrate")
    assert server.judge_calls == first  # the sample cache answered every anchor and the item
    assert tone(data)["calibration"]["bias"]["mean"] == 0.0


@pytest.mark.parametrize(("scorer", "flagged"), [(length_sensitive, True), (faithful, False)])
def test_length_probe(
    project: pytest.Pytester, serve: Any, scorer: Callable[[SeenRequest], int], flagged: bool
) -> None:
    server = serve(scorer)
    result, data = calibrated(project, "--judge-calibrate", "--judge-bias")
    plain = [len(r.prompt) for r in server.requests if "neutral padding" not in r.prompt]
    padded = [len(r.prompt) for r in server.requests if "neutral padding" in r.prompt]
    assert max(plain) < LONG_PROMPT < min(padded)  # the scorer's premise holds
    (length,) = [p for p in tone(data)["calibration"]["probes"] if p["probe"] == "length"]
    assert length["n"] == 12
    assert length["significant"] is flagged
    assert length["effect"] == pytest.approx(1.0 if flagged else 0.0)
    findings = [f for f in data["findings"] if f["kind"] == "judge_bias" and f["subject"] == "tone::length"]
    assert bool(findings) is flagged
    assert result.ret == 0  # a probe warns; it does not fail the run


def test_changed_judge_model_marks_calibration_stale(project: pytest.Pytester, serve: Any) -> None:
    serve(faithful)
    calibrated(project, "--judge-calibrate")
    result, data = calibrated(project, model="anthropic/claude-other")
    entry = tone(data)
    assert entry["status"] == "stale"
    assert any("claude-test" in reason and "claude-other" in reason for reason in entry["stale_because"])
    (stale,) = [f for f in data["findings"] if f["kind"] == "calibration_stale"]
    assert "re-calibrate" in stale["message"]
    result.stdout.fnmatch_lines(["*stale: re-calibrate*"])
    # The same model again: the stored calibration still describes the ruler.
    _, again = calibrated(project)
    assert tone(again)["status"] == "calibrated"


def test_calibrate_under_xdist_gives_the_serial_figures(project: pytest.Pytester, serve: Any) -> None:
    serve(length_sensitive)
    calibrated(project, "--judge-calibrate", "--judge-bias", "--judge-cache=off")
    serial = json.loads((project.path / "aimeasure-calibration.json").read_text())
    (project.path / "aimeasure-calibration.json").unlink()
    result = project.runpytest(
        "--ai-judge",
        "--judge-model",
        MODEL,
        "--judge-calibrate",
        "--judge-bias",
        "--judge-cache=off",
        *ONE_WORKER,
        "-p",
        "xdist",
    )
    assert result.ret == 0, result.stdout.str()
    parallel = json.loads((project.path / "aimeasure-calibration.json").read_text())
    assert parallel == serial
    assert serial["dimensions"]["tone"]["bias"]["mean"] == 0.0


def test_bad_anchor_file_is_one_clear_error(project: pytest.Pytester, serve: Any) -> None:
    serve(faithful)
    text = anchor_yaml().replace("labels: {ann: 3, bob: 3}", "labels: {ann: 3, bob: 7}", 1)
    (project.path / "anchors" / "tone.yaml").write_text(text)
    result = project.runpytest("--ai-judge", "--judge-model", MODEL, "--judge-calibrate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = text.splitlines().index("    labels: {ann: 3, bob: 7}") + 1
    result.stderr.fnmatch_lines(
        [f"*anchors/tone.yaml:{line}: anchor file: anchors[[]2[]].labels: bob: *1 to 5, got 7"]
    )


def test_cli_calibrate_writes_json_and_fails_on_an_uncalibrated_ruler(
    project: pytest.Pytester, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_aimeasure.cli.main import main

    serve(generous)
    anchors = str(project.path / "anchors" / "tone.yaml")
    out = project.path / "cli.json"
    code = main(
        ["calibrate", anchors, "--judge-model", MODEL, "--rubric", "5 = calm", "--json", str(out), "--bias"]
    )
    printed = capsys.readouterr().out
    assert code == 1
    assert "uncalibrated ruler: tone" in printed
    data = json.loads(out.read_text())
    assert data["dimensions"]["tone"]["bias"]["mean"] == pytest.approx(1.0)
    assert {p["probe"] for p in data["dimensions"]["tone"]["probes"]} >= {"length", "range"}
    serve(faithful)
    assert main(["calibrate", anchors, "--judge-model", MODEL, "--rubric", "5 = calm"]) == 0
    # No rubric anywhere: one clear usage error.
    assert main(["calibrate", anchors, "--judge-model", MODEL]) == 2
    assert "no rubric for dimension 'tone'" in capsys.readouterr().err
    # The artifacts' size cap holds for anchors too, and the same flag raises it.
    server = serve(faithful)
    capped = ["calibrate", anchors, "--judge-model", MODEL, "--rubric=r", "--judge-max-artifact-chars=5"]
    assert main(capped) == 2
    assert "characters, above the limit of 5 sent to the judge" in capsys.readouterr().err
    assert server.calls == 0


def ruler_property(pytester: pytest.Pytester) -> list[str]:
    xml = (pytester.path / "junit.xml").read_text()
    return re.findall(r'name="aimeasure\.ruler" value="([^"]*)"', xml)


def test_junit_items_carry_the_stored_ruler_status(project: pytest.Pytester, serve: Any) -> None:
    serve(generous)
    calibrated(project, "--judge-calibrate", "--junitxml", "junit.xml")
    assert ruler_property(project) == []  # no calibration was stored when the test ended
    calibrated(project, "--junitxml", "junit.xml")
    assert ruler_property(project) == ["untrusted"]
    calibrated(project, "--junitxml", "junit.xml", model="anthropic/claude-other")
    assert ruler_property(project) == ["stale"]
    serve(faithful)  # the same judge model: sample afresh, not from the cache
    calibrated(project, "--judge-calibrate", "--judge-cache=off")
    calibrated(project, "--junitxml", "junit.xml")
    assert ruler_property(project) == ["trusted"]


@pytest.mark.parametrize("change", ["rubric", "prompt"])
def test_a_stale_calibration_supplies_no_variance_floor(
    project: pytest.Pytester, serve: Any, change: str
) -> None:
    from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, item_stats

    serve(faithful)
    calibrated(project, "--judge-calibrate", "--judge-samples", "2")
    stored = json.loads((project.path / "aimeasure-calibration.json").read_text())
    assert stored["dimensions"]["tone"]["repeatability"]["var_floor"] == 0.01

    def half_width(data: dict[str, Any]) -> float:
        # The low side: above the mean 4, a wide interval is cut at the scale's top.
        (m,) = [m for i in data["items"] for m in i["measurements"]]
        assert [s["score"] for s in m["samples"]] == [4, 4]
        return float(m["mean"] - m["ci_low"])

    # The same ruler: the measured noise floor sets the item's error bar.
    _, fresh = calibrated(project, "--judge-samples", "2")
    assert tone(fresh)["status"] == "calibrated"
    calibrated_half = item_stats([4, 4], var_floor=0.01).half
    assert half_width(fresh) == pytest.approx(calibrated_half)

    if change == "rubric":
        project.makepyfile(
            test_tone=textwrap.dedent(TEST_MODULE).replace("calm and precise", "calm, precise and kind")
        )
    else:
        project.makeconftest(
            "def pytest_aimeasure_judge_prompt(prompt, dimension, config):\n"
            "    prompt.system += ' Be brief.'\n"
        )
    _, stale = calibrated(project, "--judge-samples", "2")
    assert tone(stale)["status"] == "stale"
    default_half = item_stats([4, 4], var_floor=VAR_FLOOR_DEFAULT).half
    assert half_width(stale) == pytest.approx(default_half)
    assert default_half > 2.5 * calibrated_half  # the stale floor made the bar about 3x too narrow
