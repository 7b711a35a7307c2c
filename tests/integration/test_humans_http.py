"""Humans in the loop over HTTP (the real anthropic SDK against the local provider server): the trust
verdict of a judge one point high, its PPI-corrected mean against the human truth, and ``aimeasure
label`` picking items, writing a template, and recording a rater's scores from stdin."""

from __future__ import annotations

import io
import re
import sys
import textwrap
from typing import Any

import pytest
import yaml

from pytest_aimeasure.testing import SeenRequest
from tests.conftest import read_results

MODEL = "anthropic/claude-test"
JITTER = [1, 1, 0, 2, 1, 1, 2, 0, 1, 1]  # the judge's error per artifact: +0.9 on average
HUMANS = [1, 2, 3, 2, 3, 1, 2, 3, 3, 2, 1, 2]  # human levels (≤ 3, so level + 2 stays on the scale)


def plus_one_judge(seen: SeenRequest) -> int:
    """Reads the artifact's planted human level and error, and scores like a judge ~1 point high."""
    found = re.search(r"HUMAN=(\d) JITTER=(\d)", seen.prompt)
    assert found, seen.prompt
    return min(5, int(found.group(1)) + int(found.group(2)))


def artifact(i: int) -> str:
    return f"HUMAN={HUMANS[i % len(HUMANS)]} JITTER={JITTER[i % len(JITTER)]}: reply {i} of the help desk."


def anchors_yaml(count: int) -> str:
    lines = ["dimension: tone", "anchors:"]
    for i in range(count):
        lines += [
            f"  - id: a{i:02d}",
            f"    text: '{artifact(i)}'",
            f"    labels: {{ann: {HUMANS[i % len(HUMANS)]}}}",
        ]
    return "\n".join(lines) + "\n"


ITEMS = 30
TEST_MODULE = f"""
    import pytest

    TEXTS = {[artifact(100 + i) for i in range(ITEMS)]!r}

    @pytest.mark.dimension("tone", rubric="5 = calm and precise", anchors="anchors/tone.yaml", floor=1.0)
    @pytest.mark.parametrize("i", range({ITEMS}))
    def test_tone(judge, i):
        judge.score(TEXTS[i])
"""
TRUE_HUMAN_MEAN = sum(HUMANS[(100 + i) % len(HUMANS)] for i in range(ITEMS)) / ITEMS


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_tone=textwrap.dedent(TEST_MODULE))
    (pytester.path / "anchors").mkdir()
    return pytester


def calibrate(project: pytest.Pytester, anchors: int) -> tuple[pytest.RunResult, dict[str, Any]]:
    (project.path / "anchors" / "tone.yaml").write_text(anchors_yaml(anchors))
    result = project.runpytest(
        "--ai-judge", "--judge-model", MODEL, "--judge-samples", "1", "--judge-calibrate=fail",
        "--aimeasure-json", "out.json", "-p", "no:randomly",
    )  # fmt: skip
    return result, read_results(project.path / "out.json")["calibration_summary"]["tone"]


def test_a_plus_one_judge_is_inconclusive_on_12_anchors_untrusted_on_60_and_ppi_corrects_it(
    project: pytest.Pytester, serve: Any
) -> None:
    serve(plus_one_judge)
    result, entry = calibrate(project, 12)
    trust = entry["calibration"]["trust"]
    assert trust["verdict"] in ("inconclusive", "untrusted")
    if trust["verdict"] == "inconclusive":
        assert trust["budget"] is not None and trust["budget"] > 12
        assert result.ret == 0  # inconclusive is not a failure, even under =fail
        result.stdout.fnmatch_lines(["*inconclusive ruler: tone*anchors in all*Inconclusive means*"])

    result, entry = calibrate(project, 60)
    assert entry["verdict"] == "untrusted" and entry["status"] == "uncalibrated"
    assert result.ret == 1
    assert entry["calibration"]["bias"]["ci_low"] > 0.5
    hs = entry["human_scale"]
    assert hs["items"] == ITEMS and hs["anchors"] == 60
    assert hs["judge_mean"] > TRUE_HUMAN_MEAN + 0.7  # the judge alone is one point high ...
    assert hs["ci_low"] <= TRUE_HUMAN_MEAN <= hs["ci_high"]  # ... the corrected mean is not
    assert 0 < hs["lambda"] <= 1
    result.stdout.fnmatch_lines(["*tone: on the human scale*beside the judge's*PPI++*60 anchors*"])
    # The HTML report's calibration figure carries the verdict and the human-scale estimate.
    (figure,) = read_results(project.path / "out.json")["calibration"]
    assert "trust verdict: untrusted" in figure["notes"][1]
    assert any(n.startswith("human scale (PPI++") for n in figure["notes"])


def test_floor_on_the_human_scale_uses_the_stored_calibration(project: pytest.Pytester, serve: Any) -> None:
    serve(plus_one_judge)
    project.makepyfile(
        test_tone=textwrap.dedent(
            f"""
            import pytest

            @pytest.mark.dimension("tone", rubric="5 = calm and precise", anchors="anchors/tone.yaml",
                                   floor=3.5, floor_scale="human")
            def test_tone(judge):
                judge.score({artifact(3)!r})  # human 2, judged 4
            """
        )
    )
    (project.path / "anchors" / "tone.yaml").write_text(anchors_yaml(60))
    args = ("--ai-judge", "--judge-model", MODEL, "--junitxml", "junit.xml")
    first = project.runpytest(*args)  # no calibration yet: the judge's scale, said so
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(
        ["*floor_scale='human' but no current calibration of 'tone'*", "*on the judge's scale*"]
    )
    project.runpytest(*args, "--judge-calibrate")
    again = project.runpytest(*args)
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*tone: on the human scale * is below the floor 3.5 (judge mean 4.00*"])
    assert re.search(
        r'name="aimeasure.human_mean" value="[23]\.\d+"', (project.path / "junit.xml").read_text()
    )


def _label_project(project: pytest.Pytester) -> None:
    (project.path / "anchors" / "tone.yaml").write_text(anchors_yaml(12))
    project.runpytest("--ai-judge", "--judge-model", MODEL, "--judge-samples", "2")


def test_label_writes_a_template_of_the_items_worth_a_label(project: pytest.Pytester, serve: Any) -> None:
    from pytest_aimeasure.cli.main import main

    serve(plus_one_judge)
    _label_project(project)
    assert main(["label", "--dimension", "tone", "-n", "5", "-o", "anchors/tone-new.yaml"]) == 0
    data = yaml.safe_load((project.path / "anchors" / "tone-new.yaml").read_text())
    assert data["dimension"] == "tone" and data["rubric"] == "5 = calm and precise"
    assert len(data["anchors"]) == 5
    for a in data["anchors"]:
        assert a["labels"] == {} and a["text"].startswith("HUMAN=") and a["note"].startswith("picked: ")
        assert len(a["judge"]) == 2
    # The picks spread over the judge's levels: the first levels differ while others are uncovered.
    levels = [round(sum(a["judge"]) / 2) for a in data["anchors"]]
    assert len(set(levels[:3])) == 3
    # An unlabelled template is a clear error until a human fills it in.
    from pytest_aimeasure.calibrate.anchors import AnchorError, load_anchor_file

    with pytest.raises(
        AnchorError, match=r"anchors\[0\]\.labels: needs at least one human score.*aimeasure label"
    ):
        load_anchor_file(project.path / "anchors" / "tone-new.yaml")
    assert main(["label", "--dimension", "mood", "-o", "x.yaml"]) == 2


def test_label_interactive_records_scores_from_stdin_and_appends(
    project: pytest.Pytester, serve: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_aimeasure.calibrate.anchors import load_anchor_file
    from pytest_aimeasure.cli.main import main

    serve(plus_one_judge)
    _label_project(project)
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("4\nseven\n2\ns\nq\n"))
    args = [
        "label",
        "--dimension",
        "tone",
        "-n",
        "4",
        "-o",
        "anchors/new.yaml",
        "--interactive",
        "--rater",
        "eve",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "rubric: 5 = calm and precise" in out and "the judge scored: " in out
    assert "type a whole number from 1 to 5, s or q" in out  # "seven" was asked again
    assert "stopped: 2 labelled" in out
    loaded = load_anchor_file(project.path / "anchors" / "new.yaml")
    assert [a.labels for a in loaded.anchors] == [{"eve": 4}, {"eve": 2}]
    # A second session appends, and never offers an item already in the file.
    monkeypatch.setattr(sys, "stdin", io.StringIO("3\n"))
    assert main([*args[:4], "1", *args[5:]]) == 0
    again = load_anchor_file(project.path / "anchors" / "new.yaml")
    assert len(again.anchors) == 3 and len({a.id for a in again.anchors}) == 3
    assert again.anchors[2].labels == {"eve": 3}


def test_label_until_decided_stops_once_the_verdict_is_decided(
    project: pytest.Pytester, serve: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_aimeasure.cli.main import main

    serve(plus_one_judge)
    _label_project(project)
    capsys.readouterr()
    # A rater who scores every item 5: far from the judge, so the verdict turns untrusted early.
    monkeypatch.setattr(sys, "stdin", io.StringIO("5\n" * 30))
    args = ["label", "--dimension", "tone", "-n", "30", "-o", "anchors/new.yaml", "--interactive"]
    assert main([*args, "--rater", "eve", "--until-decided"]) == 0
    out = capsys.readouterr().out
    stopped = re.search(r"the trust verdict is decided \((\w+)\) after (\d+) new labels", out)
    assert stopped is not None and stopped.group(1) == "untrusted"
    assert 3 <= int(stopped.group(2)) < 30
