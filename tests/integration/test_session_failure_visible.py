"""A failing run never looks green: drift, a changed judge, a budget stop show in the JUnit XML (a
failing test case each), in the terminal's summary line, and in ``aimeasure history``; and an item's
JUnit verdict is the session's verdict after the family-wise correction."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.cli import main as cli
from tests.conftest import ONE_WORKER, read_results, run_session
from tests.integration.test_baseline import ARGS, CONFTEST, FIVE_ITEMS, five, scores
from tests.integration.test_store_session import PRICED_MODEL, Project, long_verdict, module_source

MODES = [pytest.param((), id="plain"), pytest.param(ONE_WORKER, id="xdist")]


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_tone=FIVE_ITEMS)
    scores(pytester, five([4, 4, 4]))
    result = pytester.runpytest(*ARGS, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    return pytester


def junit_cases(path: Path) -> dict[tuple[str, str], ET.Element]:
    root = ET.parse(path).getroot()
    return {(c.get("classname", ""), c.get("name", "")): c for c in root.iter("testcase")}


def properties(case: ET.Element) -> list[tuple[str | None, str | None]]:
    return [(p.get("name"), p.get("value")) for p in case.iter("property")]


def suite_counts(path: Path) -> dict[str, int]:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}


@pytest.mark.parametrize("mode", MODES)
def test_drift_fails_a_junit_case_the_summary_line_and_history(
    recorded: pytest.Pytester, mode: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    scores(recorded, five([3, 3, 3]))  # every item drops a point: within the floor, so every test passes
    result = run_session(
        recorded, *ARGS, *mode, "-q", "--junitxml", "junit.xml", "--aimeasure-json", "out.json"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = read_results(recorded.path / "out.json")
    assert data["dimensions"]["tone"]["verdict"] == "regressed"
    regressed_items = [i["item_id"] for i in data["items"] if i["verdict"] == "regressed"]
    assert all(i["outcome"] == "passed" for i in data["items"])

    # JUnit: one failing case per session failure, so `failures` is not 0 with every test passed.
    junit = recorded.path / "junit.xml"
    cases = junit_cases(junit)
    drift = cases[("aimeasure", "drift[tone]")]
    failure = drift.find("failure")
    assert failure is not None and "dimension 'tone' regressed" in (failure.get("message") or "")
    assert suite_counts(junit)["failures"] == 1 + len(regressed_items)
    for item_id in regressed_items:
        assert cases[("aimeasure", f"drift[{item_id}]")].find("failure") is not None

    # The terminal's summary says why the exit status is 1.
    out = result.stdout.str()
    assert any(
        line.startswith("FAILED aimeasure::drift[tone] - dimension 'tone' regressed: 4.00 → 3.00")
        for line in result.outlines
    ), out
    assert result.outlines[-1].startswith(f"{1 + len(regressed_items)} failed, 5 passed")
    assert "aimeasure failed the run: regressions against the baseline" in out

    # History: the run failed, and why.
    assert cli.main(["--store", str(recorded.path / ".aimeasure"), "history", "--limit", "1"]) == 0
    history = capsys.readouterr().out
    assert "failed: regressions against the baseline" in history, history


@pytest.mark.parametrize("mode", MODES)
def test_junit_item_verdict_is_the_session_verdict_after_the_family(
    recorded: pytest.Pytester, mode: tuple[str, ...]
) -> None:
    # One item collapses by three points, the others hold: significant on its own at 95%, but the
    # item starts with a tenth of the dimension's 1% share, and the dimension (Δ −0.6) is not rejected.
    scores(recorded, five([4, 4, 4]) | {"test_tone[a]": [1, 1, 1]})
    run_session(recorded, *ARGS, *mode, "--junitxml", "junit.xml", "--aimeasure-json", "out.json")
    data = read_results(recorded.path / "out.json")
    session = {i["nodeid"].split("::")[-1]: i for i in data["items"]}
    # The case this test is about: a per-item drop that the family-wise correction does not confirm.
    demoted = [n for n, i in session.items() if i["comparison"]["demoted"]]
    assert demoted == ["test_tone[a]"], "expected the family to demote the collapsed item's regression"
    assert all(session[n]["verdict"] == "inconclusive" for n in demoted)
    cases = junit_cases(recorded.path / "junit.xml")
    for name, item in session.items():
        props = properties(cases[("test_tone", name)])
        assert [v for k, v in props if k == "aimeasure.verdict"] == [item["verdict"]], name
        assert ("aimeasure.item", item["item_id"]) in props


def test_not_comparable_judge_fails_a_junit_case(recorded: pytest.Pytester) -> None:
    recorded.makepyfile(judgemod="TABLE = {'tone': [4, 4, 4]}")
    result = recorded.runpytest(
        "--ai-judge",
        "--judge-model",
        "scripted:judgemod:TABLE",
        "-p",
        "no:randomly",
        "--junitxml",
        "junit.xml",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    junit = recorded.path / "junit.xml"
    case = junit_cases(junit)[("aimeasure", "not_comparable[tone]")]
    assert case.find("failure") is not None
    assert suite_counts(junit)["failures"] == 1
    assert any(
        line.startswith("FAILED aimeasure::not_comparable[tone] - dimension 'tone': the judge")
        for line in result.outlines
    ), result.stdout.str()


# In one process: under xdist the controller writes the session's cases from its findings as for drift
# (test_drift_fails_a_junit_case_the_summary_line_and_history[xdist]), and the budget's findings come
# from the workers' stopped items (test_store_session's test_budget_stops_new_calls_...[xdist]).
def test_budget_stop_fails_junit_cases(project: Project) -> None:
    project.model = PRICED_MODEL
    project.server.scorer = long_verdict
    result = project.run("--judge-budget-usd=0.02", "--judge-cache=off", "--junitxml", "junit.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = project.results()
    stopped = sorted(
        i["item_id"] for i in data["items"] if i["kind"] == "dimension" and i["outcome"] == "skipped"
    )
    assert stopped
    cases = junit_cases(project.path / "junit.xml")
    budget = sorted(
        name.removeprefix("budget[").removesuffix("]") for cls, name in cases if cls == "aimeasure"
    )
    assert budget == stopped
    assert all(cases[("aimeasure", f"budget[{i}]")].find("failure") is not None for i in stopped)


def test_old_run_meta_without_a_result_still_lists(
    recorded: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    store = recorded.path / ".aimeasure"
    metas = list(store.glob("runs/*/meta.json"))
    assert metas
    for meta in metas:
        data: dict[str, Any] = json.loads(meta.read_text())
        assert data["passed"] is True  # this run passed, and says so
        del data["passed"], data["failed_because"]  # as a plugin before this change wrote it
        meta.write_text(json.dumps(data))
    assert cli.main(["--store", str(store), "history"]) == 0
    out = capsys.readouterr().out
    assert "result" in out and "broken" not in out


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Any:
    from pytest_aimeasure.testing.server import ProviderServer
    from tests.integration.test_store_session import point_at

    with ProviderServer() as server:
        point_at(monkeypatch, server)
        pytester.makepyfile(test_story=module_source())
        yield Project(pytester, server)
