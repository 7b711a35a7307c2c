"""The reports' summary is frozen all the way down: a report that tries to change what it read fails,
and the next report (and the session's own record) reads what the first one did."""

from __future__ import annotations

import json

import pytest

# A report of its own, run after the plugin concluded: it tries every kind of change to the summary
# and writes down which were refused, then what it reads afterwards.
CONFTEST = """
import json, pathlib
import pytest

def pytest_aimeasure_scripted_verdict(call, config):
    return 4 if "tone" in call.dimension else 3, "scripted"

ATTEMPTS = {
    "assign a field": lambda s: setattr(s.results, "passed", False),
    "append a finding": lambda s: s.results.findings.append(s.results.findings[0]),
    "drop a dimension": lambda s: s.results.dimensions.clear(),
    "change a measurement": lambda s: setattr(s.results.items[0].measurements[0], "mean", 1.0),
    "change a sample list": lambda s: s.results.items[0].measurements[0].samples.pop(),
    "change the spend": lambda s: s.results.spend.update(calls=0),
    "change a verdict": lambda s: setattr(s.comparison.dimensions["tone"], "verdict", "regressed"),
    "replace the results": lambda s: setattr(s, "results", None),
}

@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    summary = config.pluginmanager.get_plugin("aimeasure-session").summary
    refused = {}
    for name, attempt in ATTEMPTS.items():
        try:
            attempt(summary)
            refused[name] = False
        except Exception as exc:
            refused[name] = type(exc).__name__
    after = summary.results.model_dump(mode="json")
    out = pathlib.Path(config.rootpath, "attempts.json")
    out.write_text(json.dumps({"refused": refused, "after": after}))
"""

TESTS = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
@pytest.mark.parametrize("case", ["a", "b"])
def test_tone(case, judge):
    judge.score(f"reply {case}")

@pytest.mark.dimension("clarity", rubric="5 = clear", floor=4.0)
def test_clarity(judge):
    judge.score("an answer")
"""


def test_a_report_cannot_change_what_the_next_report_reads(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_subject=TESTS)
    args = ("--ai-judge", "--judge-model", "scripted", "--judge-cache=off", "-p", "no:randomly")
    result = pytester.runpytest(*args, "--update-baseline")
    assert result.ret == 1  # clarity's floor breach: a finding to try appending
    result = pytester.runpytest(*args, "--aimeasure-json", "out.json")
    assert result.ret == 1, result.stdout.str()
    report = json.loads((pytester.path / "attempts.json").read_text())
    assert report["refused"] == {
        "assign a field": "ValidationError",  # pydantic: "Instance is frozen"
        "append a finding": "TypeError",
        "drop a dimension": "TypeError",
        "change a measurement": "ValidationError",
        "change a sample list": "TypeError",
        "change the spend": "TypeError",
        "change a verdict": "ValidationError",
        "replace the results": "FrozenInstanceError",
    }
    # What the report read afterwards is what the session wrote: nothing changed under it.
    written = json.loads((pytester.path / "out.json").read_text())
    assert report["after"] == written
    assert written["passed"] is False and written["dimensions"]["tone"]["verdict"] == "stable"
    assert "floor_breach" in [f["kind"] for f in written["findings"]] and written["spend"]["calls"] == 3 * 3


def test_read_only_copies_serialize_as_the_original_and_share_nothing() -> None:
    from pytest_aimeasure.measure.models import Finding
    from pytest_aimeasure.report.summary import ReadOnlyDict, ReadOnlyList, read_only

    finding = Finding(kind="budget", severity="fail", subject="s", message="m", detail={"k": [1]})
    original = {"findings": [finding], "n": (1, [2])}
    copy = read_only(original)
    assert isinstance(copy, ReadOnlyDict) and isinstance(copy["findings"], ReadOnlyList)
    frozen = copy["findings"][0]  # type: ignore[index]
    assert isinstance(frozen, Finding)  # still a Finding to every reader
    assert frozen.model_dump() == finding.model_dump()
    assert frozen.model_dump_json() == finding.model_dump_json()
    with pytest.raises(TypeError, match="read-only"):
        frozen.detail["k"].append(2)
    assert copy["n"] == (1, [2]) and isinstance(copy["n"][1], ReadOnlyList)  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        copy["n"][1].append(3)  # type: ignore[index]
    original["findings"].append(original["findings"][0])  # type: ignore[attr-defined]
    assert len(copy["findings"]) == 1  # a copy: the live object moves on, the summary does not
