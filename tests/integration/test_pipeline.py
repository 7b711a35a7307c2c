"""Pipelined judging (--judge-pipeline): tests overlap their judge calls, and every path (reports,
-x, Ctrl-C, gates, xdist, plugins that run the protocol themselves) ends as it does without it.

Serial sessions run in-process (Ctrl-C's with no_reraise_ctrlc) but for pytest-timeout's. Each
behaviour that a worker changes (calls in flight, reports and their order, -x, reruns, timeouts,
repeats, pending verdicts, the short summary) also runs under xdist, with one worker: each project is
one module, which the plugin's loadfile gives to one worker (a second would start and exit idle)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.report.results import SessionResults
from pytest_aimeasure.report.trends import results_of_run
from pytest_aimeasure.session import pipeline
from pytest_aimeasure.store.runs import RunStore
from tests.conftest import ONE_WORKER, read_results, run_session

# A scripted judge that holds every call until `target` calls are in flight at once (or 60 s pass),
# and writes the most it saw in flight: with the pipeline, calls of several tests meet there.
CONFTEST = """
import asyncio, json, os, pathlib
import pytest
from pytest_aimeasure.judge.backends.scripted import ScriptedBackend

TARGET = int(os.environ.get("BARRIER", "0"))
SEEN = {"max": 0, "now": 0}
REPORTS = []


class Barrier(ScriptedBackend):
    async def judge(self, request):
        if "held" in request.context["artifact"]:
            await asyncio.sleep(60)  # a verdict that has not landed when Ctrl-C comes
        SEEN["now"] += 1
        SEEN["max"] = max(SEEN["max"], SEEN["now"])
        try:
            if TARGET:
                if not hasattr(self, "event"):
                    self.event = asyncio.Event()
                if SEEN["now"] >= TARGET:
                    self.event.set()
                try:
                    await asyncio.wait_for(self.event.wait(), 60)
                except asyncio.TimeoutError:
                    pass
            return await super().judge(request)
        finally:
            SEEN["now"] -= 1


def table(call):
    scores = json.loads(pathlib.Path(os.environ["SCORES"]).read_text())
    value = scores.get(call.nodeid.split("::")[-1], 4)
    if value == "bad":
        return {"dimension": call.dimension, "score": "five", "rationale": "not an integer"}
    return (value[call.index] if isinstance(value, list) else value), f"scripted #{call.index}"


def pytest_aimeasure_make_backend(model, config):
    return Barrier(table)


def pytest_sessionfinish(session):
    if SEEN["max"]:
        worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
        pathlib.Path(session.config.rootpath, f"inflight-{worker}.txt").write_text(str(SEEN["max"]))


def pytest_runtest_logreport(report):
    if session_root[1]:
        return  # the controller writes what it received
    props = [p for p in report.user_properties if p[0] != "aimeasure"]
    REPORTS.append([report.nodeid, report.when, report.outcome, report.longreprtext, props])
    pathlib.Path(session_root[0], "reports.json").write_text(json.dumps(REPORTS, default=str))


session_root = []


def pytest_configure(config):
    # (not PYTEST_XDIST_WORKER: this session may itself run inside an xdist worker)
    session_root[:] = [str(config.rootpath), hasattr(config, "workerinput")]
"""

ITEMS = """
import pytest


@pytest.fixture(scope="module")
def ok_story(aimeasure_artifact):
    return aimeasure_artifact("ok-story", lambda: "The fox mended the fence.")


@pytest.fixture(scope="module")
def broken_story(aimeasure_artifact):
    return aimeasure_artifact("broken-story", lambda: "")


@pytest.mark.gate
def test_gate_ok(ok_story):
    assert ok_story.text


@pytest.mark.dimension("tone", rubric="5 = right tone")
def test_tone_ok(ok_story, judge):
    judge.score(ok_story)


@pytest.mark.gate
def test_gate_broken(broken_story):
    assert broken_story.text, "the story is empty"


@pytest.mark.dimension("tone", rubric="5 = right tone")
def test_tone_broken(broken_story, judge):
    judge.score(broken_story)


@pytest.mark.dimension("tone", rubric="5 = right tone")
@pytest.mark.parametrize("case", ["a", "b", "c", "d"])
def test_tone(case, judge, record_property):
    judge.score(f"artifact {case}")
    record_property("after", case)


@pytest.mark.dimension("clarity", rubric="5 = clear")
def test_reads_its_mean(judge):
    m = judge.score("artifact read")
    assert m.mean == 4.0 and m.n == 3


@pytest.mark.dimension("clarity", rubric="5 = clear")
def test_breach_read_in_test(judge):
    m = judge.score("artifact low read")
    print("never here", m.mean)


@pytest.mark.dimension("clarity", rubric="5 = clear")
def test_fails_by_itself(judge):
    judge.score("artifact own failure")
    assert 1 == 2, "the test's own assertion"


@pytest.mark.dimension("clarity", rubric="5 = clear")
def test_judge_error(judge):
    judge.score("artifact broken verdict")


def test_plain():
    pass
"""

SCORES = {"test_tone[b]": [2, 2, 3], "test_breach_read_in_test": [1, 2, 1], "test_judge_error": "bad"}

BASE = ("--ai-judge", "--judge-model", "scripted", "--judge-cache=off", "-p", "no:randomly")
BASE += ("-p", "no:cacheprovider")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "scores.json").write_text(json.dumps(SCORES))
    monkeypatch.setenv("SCORES", str(pytester.path / "scores.json"))
    monkeypatch.delenv("BARRIER", raising=False)
    return pytester


def in_flight(path: Path) -> int:
    return max(int(p.read_text()) for p in path.glob("inflight-*.txt"))


XDIST = pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])


def nx(xdist: bool) -> tuple[str, ...]:
    return ONE_WORKER if xdist else ()


@XDIST
def test_calls_of_several_tests_are_in_flight_at_once(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: bool
) -> None:
    project.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        @pytest.mark.parametrize("case", range(4))
        def test_tone(case, judge):
            judge.score(f"artifact {case}")
        """
    )
    # Four tests of two samples each meet at the barrier only if none waits for its own verdict.
    monkeypatch.setenv("BARRIER", "8")
    result = run_session(project, *BASE, "--judge-samples", "2", *nx(xdist))
    result.assert_outcomes(passed=4)
    assert in_flight(project.path) == 8
    for old in project.path.glob("inflight-*.txt"):
        old.unlink()
    monkeypatch.setenv("BARRIER", "2")  # a test's own two samples meet; no more ever come
    result = run_session(project, *BASE, "--judge-samples", "2", "--judge-pipeline", "0", *nx(xdist))
    result.assert_outcomes(passed=4)
    assert in_flight(project.path) == 2  # one test at a time: its own samples only


def _normal(run_dir: Path) -> dict[str, Any]:
    """Reports, JSON results and baseline of a run, without timings, run ids and the concurrency the
    adaptive limit reached (it grows with each answer, so it depends on how fast calls came back)."""
    data = read_results(run_dir / "out.json")
    timing = re.compile(r"latency|duration|_at$|run_id|elapsed|updated|created|limit_reached")

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items() if not timing.search(k)}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, str):
            return re.sub(r"\d{8}T\d{6}Z-[0-9a-f]{4}", "RUN", value)
        return value

    baseline = json.loads((run_dir / "aimeasure-baseline.json").read_text())
    return {
        # (a traceback shows the repr of the test's locals: object addresses differ between runs)
        # (under xdist a failure's text starts with the worker that ran it, which varies by run)
        "reports": sorted(
            json.loads(
                re.sub(
                    r"\[gw\d+\] [^\\\"]*(\\n)?",
                    "",
                    re.sub(r" at 0x[0-9a-f]+", " at 0x", (run_dir / "reports.json").read_text()),
                )
            )
        ),
        "results": scrub(data),
        "baseline": scrub(baseline),
    }


@XDIST
def test_reports_json_and_baseline_are_the_same_with_the_pipeline_on_and_off(
    project: pytest.Pytester, xdist: bool
) -> None:
    project.makepyfile(test_items=ITEMS)
    runs = {}
    for name, depth in (("off", "0"), ("on", "32")):
        result = run_session(
            project,
            *BASE,
            "--judge-pipeline",
            depth,
            "--update-baseline",
            "--aimeasure-json",
            "out.json",
            *nx(xdist),
        )
        result.assert_outcomes(passed=7, failed=4, skipped=1, errors=1)
        # The run keeps each item once (its items.jsonl line) and reads back as the session saw it.
        store = RunStore(project.path / ".aimeasure")
        run = store.open_run(store.latest())
        try:
            seen = SessionResults.model_validate(read_results(project.path / "out.json"))
            assert results_of_run(run) == seen
        finally:
            run.close()
        target = project.path / name
        target.mkdir()
        for file in ("out.json", "aimeasure-baseline.json", "reports.json"):
            (project.path / file).rename(target / file)
        runs[name] = _normal(target)
    assert runs["on"]["reports"] == runs["off"]["reports"]
    assert runs["on"]["results"] == runs["off"]["results"]
    assert runs["on"]["baseline"] == runs["off"]["baseline"]
    # ... and they say what they should
    by_test = {(r[0].split("::")[-1], r[1]): r for r in runs["on"]["reports"]}
    assert by_test[("test_tone[b]", "call")][2] == "failed"
    assert "FloorBreach: tone: mean 2.33" in by_test[("test_tone[b]", "call")][3]
    assert by_test[("test_tone_broken", "call")][2] == "skipped"  # its gate failed
    assert by_test[("test_breach_read_in_test", "call")][2] == "failed"
    assert "the test's own assertion" in by_test[("test_fails_by_itself", "call")][3]
    assert "judge error: no valid verdict" in by_test[("test_judge_error", "call")][3]
    props = [p[0] for p in by_test[("test_tone[a]", "teardown")][4]]
    assert props[:2] == ["aimeasure.dimension", "aimeasure.mean"] and "after" in props


# Under xdist pipelined only: a verdict's report crosses from the worker the same way when the test
# waited for it, and waiting (--judge-pipeline 0) has its own serial variant.
@pytest.mark.parametrize(
    ("xdist", "depth"),
    [(False, "0"), (False, "32"), (True, "32")],
    ids=["waits-serial", "pipelined-serial", "pipelined-xdist"],
)
def test_short_summary_and_line_traceback_carry_the_verdicts_message(
    project: pytest.Pytester, xdist: bool, depth: str
) -> None:
    project.makepyfile(
        test_short="""
        import pytest

        @pytest.mark.dimension("tone", floor=3.0, rubric="5 = right tone")
        @pytest.mark.parametrize("case", ["a", "b"])
        def test_tone(case, judge):
            judge.score(f"artifact {case}")

        @pytest.mark.dimension("clarity", rubric="5 = clear")
        def test_judge_error(judge):
            judge.score("artifact broken verdict")
        """
    )
    scores = {"test_tone[b]": [2, 2, 3], "test_judge_error": "bad"}
    (project.path / "scores.json").write_text(json.dumps(scores))
    args = (*BASE, "--judge-pipeline", depth, *nx(xdist), "--junitxml", "junit.xml")
    # --tb=line points at the call of judge.score with the whole first line...
    result = run_session(project, *args, "--tb=line")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    where = f"{project.path}/test_short.py:6"
    result.stdout.fnmatch_lines(
        [f"{where}: FloorBreach: tone: mean 2.33 (95% CI 1.00–3.77, n=3) is below the floor 3"]
    )
    # ... the one-line summary names the verdict, not only the test...
    result = run_session(project, *args, "-rA", "-vv")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "ERROR test_short.py::test_judge_error - judge error: no valid verdict*",
            "FAILED test_short.py::test_tone[[]b[]] - FloorBreach: tone: mean 2.33 (95% CI 1.00–3.77, n=3) "
            "is below the floor 3",
        ],
        consecutive=False,
    )
    # ... the same session's failure section still shows the whole verdict, without a traceback ...
    result.stdout.fnmatch_lines(["FloorBreach: tone: mean 2.33*", "samples: 2, 2, 3", "lowest sample (#0*"])
    assert "Traceback" not in result.stdout.str() and "raise " not in result.stdout.str()
    # ... and JUnit's failure message is the verdict's.
    junit = (project.path / "junit.xml").read_text()
    assert 'message="FloorBreach: tone: mean 2.33' in junit


@XDIST
def test_maxfail_stops_once_the_failure_lands_and_started_tests_finish(
    project: pytest.Pytester, xdist: bool
) -> None:
    project.makepyfile(
        """
        import pathlib, pytest

        @pytest.fixture(autouse=True)
        def started(request):
            with open("started.txt", "a") as f:
                f.write(request.node.nodeid + "\\n")

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        @pytest.mark.parametrize("case", ["a", "b", "c", "d", "e", "f", "g", "h"])
        def test_tone(case, judge):
            judge.score(f"artifact {case}")
        """
    )
    (project.path / "scores.json").write_text(json.dumps({"test_tone[b]": 1}))
    # One pending verdict at most: test c waits for b's, which fails, so c never starts.
    result = run_session(project, *BASE, "-x", "--judge-pipeline", "1", *nx(xdist))
    result.stdout.fnmatch_lines(["*stopping after 1 failures*"])
    started = set((project.path / "started.txt").read_text().split())
    reports = json.loads((project.path / "reports.json").read_text())
    assert {r[0] for r in reports} == started, "every test that started was reported"
    assert {s.split("::")[-1] for s in started} == {"test_tone[a]", "test_tone[b]"}
    assert [r[0].split("::")[-1] for r in reports if r[2] == "failed"] == ["test_tone[b]"]


def test_ctrl_c_logs_what_landed_gives_up_the_rest_and_the_run_says_interrupted(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        def test_first(judge):
            assert judge.score("artifact first").mean == 4  # waits: it has landed

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        @pytest.mark.parametrize("case", ["a", "b"])
        def test_held(case, judge):
            judge.score(f"held artifact {case}")  # does not land before the interrupt

        def test_interrupt():
            raise KeyboardInterrupt
        """
    )
    # In-process, told not to raise the test's KeyboardInterrupt again in this session.
    args = (*BASE, "--judge-samples", "1", "--aimeasure-json", "out.json")
    result = project.runpytest(*args, no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    reports = json.loads((project.path / "reports.json").read_text())
    # Only test_first's verdict landed. A held call still in flight is given up unlogged; one the
    # interrupt kept from being sent (queued behind others, common on a loaded machine) is logged
    # as a skip that says so, and noted (never a pass or a failure: no verdict landed).
    calls = [r for r in reports if r[1] == "call"]
    landed = {r[0].split("::")[-1] for r in calls if r[2] != "skipped"}
    assert landed == {"test_first"}
    assert {r[0] for r in reports} == {r[0] for r in calls}  # no item without its verdict's report
    noted = [r for r in calls if r[2] == "skipped"]
    assert all(
        r[0].split("::")[-1].startswith("test_held") and "interrupted before this call was sent" in r[3]
        for r in noted
    ), noted
    metas = list((project.path / ".aimeasure" / "runs").glob("*/meta.json"))
    assert [json.loads(m.read_text())["status"] for m in metas] == ["interrupted"]
    data = read_results(project.path / "out.json")
    judged = [i["nodeid"].split("::")[-1] for i in data["items"] if i["outcome"] != "skipped"]
    assert judged == ["test_first"]


def test_a_ctrl_c_while_a_landed_verdict_decides_its_test_interrupts_the_run_not_fails_the_test(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", floor=3.0, rubric="5 = right tone")
        def test_first(judge):
            judge.score("artifact first")

        def test_after():
            pass
        """
    )
    (project.path / "scores.json").write_text(json.dumps({"test_first": 1}))

    real = pipeline._raiser
    signalled: list[BaseException] = []

    def interrupted(verdict: BaseException) -> Any:
        if signalled:
            return real(verdict)
        signalled.append(verdict)

        def call() -> None:
            raise KeyboardInterrupt  # the Ctrl-C, landing while the breach is made the test's call

        return call

    # (in-process: the session's pipeline is this module)
    monkeypatch.setattr(pipeline, "_raiser", interrupted)
    result = project.runpytest(*BASE, "--judge-samples", "1", no_reraise_ctrlc=True)
    assert signalled, "the landed breach was made the test's call"
    # As anywhere in pytest's own protocol the interrupt is the session's, not test_first's failure:
    # the run ends interrupted, and test_first, whose verdict had landed, is logged with it (as on
    # any Ctrl-C) and fails by its breach. (Before, it failed by the KeyboardInterrupt, and the run
    # went on to its end as if no Ctrl-C had come.)
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    reports = json.loads((project.path / "reports.json").read_text())
    calls = {r[0].split("::")[-1]: r for r in reports if r[1] == "call"}
    assert calls["test_first"][2] == "failed" and "KeyboardInterrupt" not in calls["test_first"][3]
    assert "below the floor" in calls["test_first"][3], calls["test_first"][3]


@XDIST
def test_rerunfailures_items_step_aside_and_are_rerun(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: bool
) -> None:
    project.makepyfile(
        """
        import pathlib, pytest

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        @pytest.mark.parametrize("case", ["a", "b"])
        def test_tone(case, judge):
            judge.score(f"artifact {case}")

        @pytest.mark.flaky(reruns=2)
        @pytest.mark.dimension("tone", rubric="5 = right tone")
        def test_flaky(judge):
            attempts = pathlib.Path("attempts.txt")
            attempts.write_text(attempts.read_text() + "x" if attempts.exists() else "x")
            judge.score(f"artifact attempt {len(attempts.read_text())}")
        """
    )
    (project.path / "scores.json").write_text(json.dumps({"test_flaky": 1}))
    # the first attempt breaches the floor, the second is scored 4 (the rule reads the attempt)
    project.makeconftest(
        CONFTEST.replace(
            'value = scores.get(call.nodeid.split("::")[-1], 4)',
            'value = 1 if "attempt 1" in call.artifact else scores.get("-", 4)',
        )
    )
    result = run_session(project, *BASE, "--aimeasure-json", "out.json", *nx(xdist))
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*3 passed*1 rerun*"])
    result.stdout.fnmatch_lines(
        ["aimeasure pipeline: 1 item(s) judged without the pipeline: pytest-rerunfailures reruns it*"]
    )
    data = read_results(project.path / "out.json")
    flaky = [i for i in data["items"] if i["nodeid"].endswith("test_flaky")]
    assert flaky[0]["extra"]["pipeline"].startswith("judged without the pipeline")
    assert flaky[0]["outcome"] == "passed" and [m["mean"] for m in flaky[0]["measurements"]] == [4.0]


@XDIST
def test_pytest_timeout_composes_with_the_pipeline(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: bool
) -> None:
    project.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        @pytest.mark.parametrize("case", range(3))
        def test_tone(case, judge):
            judge.score(f"artifact {case}")

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        @pytest.mark.timeout(2)
        def test_hangs(judge):
            import time
            time.sleep(60)
            judge.score("never")
        """
    )
    monkeypatch.setenv("BARRIER", "6")
    args = (*BASE, "--judge-samples", "2", "--timeout", "120", *nx(xdist))
    # Serially in a process of its own, where pytest-timeout's signal fires; under xdist it fires in
    # the worker, so the controller runs here.
    result = run_session(project, *args) if xdist else project.runpytest_subprocess(*args)
    # The timeout still fires inside a pipelined session, and the others' verdicts still land.
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*Failed: Timeout (>2.0s) from pytest-timeout*", "FAILED *::test_hangs*"])
    assert in_flight(project.path) == 6


@XDIST
def test_repeats_are_pipelined_and_pool_as_without_the_pipeline(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: bool
) -> None:
    project.makepyfile(
        """
        import pytest

        @pytest.fixture(scope="module", params=["x", "y"])
        def story(request, aimeasure_artifact):
            made = iter(range(1, 10))
            text = lambda: f"artifact {request.param} " + "good " * next(made)
            return aimeasure_artifact(f"story-{request.param}", text, repeats=2)

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        def test_tone(story, judge):
            judge.score(story)
        """
    )
    # Two tests x two repeats x two samples meet at the barrier only when the tests overlap.
    monkeypatch.setenv("BARRIER", "8")
    result = run_session(project, *BASE, "--judge-samples", "2", "--aimeasure-json", "out.json", *nx(xdist))
    result.assert_outcomes(passed=2)
    assert in_flight(project.path) == 8  # (under xdist, one worker runs both tests)
    on = read_results(project.path / "out.json")
    for old in project.path.glob("inflight-*.txt"):
        old.unlink()
    monkeypatch.setenv("BARRIER", "4")  # one test's two repeats of two samples
    result = run_session(
        project,
        *BASE,
        "--judge-samples",
        "2",
        "--judge-pipeline",
        "0",
        "--aimeasure-json",
        "out.json",
        *nx(xdist),
    )
    result.assert_outcomes(passed=2)
    assert in_flight(project.path) == 4
    off = read_results(project.path / "out.json")

    def pooled(data: dict[str, Any]) -> dict[str, Any]:
        return {
            i["nodeid"]: (i["outcome"], m["mean"], m["n"], m["repeats"]["keys"], m["repeats"]["means"])
            for i in data["items"]
            for m in i["measurements"]
        }

    assert pooled(on) == pooled(off)
    assert sorted(v[2:4] for v in pooled(on).values()) == [
        (4, ["story-x#r1", "story-x#r2"]),
        (4, ["story-y#r1", "story-y#r2"]),
    ]


@XDIST
def test_a_pending_score_counts_as_scored_and_its_judge_error_is_reported(
    project: pytest.Pytester, xdist: bool
) -> None:
    project.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        def test_judge_error(judge):
            judge.score("artifact broken verdict")  # pending: the error is known after the test

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        def test_scored(judge):
            judge.score("artifact fine")

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        def test_forgot_to_score(judge):
            pass
        """
    )
    (project.path / "scores.json").write_text(json.dumps({"test_judge_error": "bad"}))
    result = run_session(project, *BASE, "--aimeasure-json", "out.json", *nx(xdist))
    result.assert_outcomes(passed=1, failed=1, errors=1)
    reports = {
        (r[0].split("::")[-1], r[1]): r for r in json.loads((project.path / "reports.json").read_text())
    }
    assert reports[("test_scored", "call")][2] == "passed"
    error = reports[("test_judge_error", "call")]
    assert error[2] == "failed" and "judge error: no valid verdict" in error[3]
    assert "without calling judge.score" not in error[3]
    assert "passed without calling judge.score" in reports[("test_forgot_to_score", "call")][3]
    items = {i["nodeid"].split("::")[-1]: i for i in read_results(project.path / "out.json")["items"]}
    assert items["test_judge_error"]["judge_error"]
    assert [m["mean"] for m in items["test_scored"]["measurements"]] == [4.0]


def test_fixtures_are_torn_down_before_the_verdict_lands(project: pytest.Pytester) -> None:
    project.makeconftest(
        CONFTEST
        + """

def pytest_aimeasure_measured(measurement, item):
    with open("order.txt", "a") as f:
        f.write(f"measured {item.name}\\n")
"""
    )
    project.makepyfile(
        """
        import pytest

        @pytest.fixture
        def resource():
            yield "open"
            with open("order.txt", "a") as f:
                f.write("teardown\\n")

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        def test_tone(resource, judge):
            judge.score(f"artifact {resource}")
        """
    )
    run_session(project, *BASE, "--judge-pipeline", "0").assert_outcomes(passed=1)
    assert (project.path / "order.txt").read_text().split("\n")[:2] == ["measured test_tone", "teardown"]
    (project.path / "order.txt").unlink()
    run_session(project, *BASE).assert_outcomes(passed=1)
    assert (project.path / "order.txt").read_text().split("\n")[:2] == ["teardown", "measured test_tone"]


HEAD_OF_LINE_CONFTEST = """
import asyncio, pathlib
from pytest_aimeasure.judge.backends.scripted import ScriptedBackend

STARTED = {}


class Ordered(ScriptedBackend):
    async def judge(self, request):
        artifact = request.context["artifact"]
        STARTED.setdefault(artifact, asyncio.Event()).set()
        if artifact == "first":  # lands only once the third test's call has started
            third = STARTED.setdefault("third", asyncio.Event())
            try:
                await asyncio.wait_for(third.wait(), 20)
            except asyncio.TimeoutError:
                pathlib.Path("first-waited-20s").write_text("the third call never started")
        elif artifact == "second":
            await asyncio.sleep(0.3)
        return await super().judge(request)


def pytest_aimeasure_make_backend(model, config):
    return Ordered({"tone": 4})
"""


def test_room_in_the_pipeline_opens_when_any_verdict_lands_not_only_the_oldest(
    pytester: pytest.Pytester,
) -> None:
    """Two items may be pending (--judge-pipeline 2). The first one's verdict lands only after the
    third test's call started; the second lands after 0.3 s. When the second lands there is room, so
    the third test runs and the first lands. Before, the test thread waited for the oldest pending
    item (the first), which waited for the third: the first call sat 20 s until its timeout."""
    pytester.makeconftest(HEAD_OF_LINE_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = right tone")
        @pytest.mark.parametrize("artifact", ["first", "second", "third"])
        def test_tone(artifact, judge):
            judge.score(artifact)
        """
    )
    result = run_session(pytester, *BASE, "--judge-samples", "1", "--judge-pipeline", "2")
    result.assert_outcomes(passed=3)
    assert not (pytester.path / "first-waited-20s").exists()


@XDIST
def test_a_passed_verdicts_reports_are_made_once_and_carry_what_landed(
    project: pytest.Pytester, xdist: bool
) -> None:
    """A pipelined item whose verdict passes keeps the call and teardown reports pytest made when the
    test ran (its outcome was already the final one): no plugin's ``pytest_runtest_makereport`` runs
    again for them, and they carry the verdict's properties all the same. A breach still makes them
    again (it changes the outcome). Before, every landed item's two reports were made twice."""
    project.makeconftest(
        CONFTEST
        + """

MADE = []


def pytest_runtest_makereport(item, call):
    MADE.append(f"{item.name} {call.when}")
    pathlib.Path(session_root[0], "made.txt").write_text("\\n".join(MADE))
"""
    )
    project.makepyfile(
        test_made="""
        import pytest

        @pytest.mark.dimension("tone", floor=3.0, rubric="5 = right tone")
        @pytest.mark.parametrize("case", ["a", "b"])
        def test_tone(case, judge, record_property):
            judge.score(f"artifact {case}")
            record_property("after", case)
        """
    )
    (project.path / "scores.json").write_text(json.dumps({"test_tone[b]": [2, 2, 3]}))
    result = run_session(project, *BASE, "--judge-pipeline", "32", "--aimeasure-json", "out.json", *nx(xdist))
    result.assert_outcomes(passed=1, failed=1)
    made = (project.path / "made.txt").read_text().split("\n")
    assert made.count("test_tone[a] call") == 1 and made.count("test_tone[a] teardown") == 1
    assert made.count("test_tone[b] call") == 2 and made.count("test_tone[b] teardown") == 2
    logged = json.loads((project.path / "reports.json").read_text())
    reports = {(r[0].split("::")[-1], r[1]): r for r in logged}
    verdict = ["aimeasure.dimension", "aimeasure.mean", "aimeasure.sd", "aimeasure.n", "aimeasure.ci"]
    assert [p[0] for p in reports[("test_tone[a]", "call")][4]] == [*verdict, "after"]
    assert [p[0] for p in reports[("test_tone[a]", "teardown")][4]] == [*verdict, "after", "aimeasure.item"]
    items = read_results(project.path / "out.json")["items"]
    assert [m["mean"] for i in items if i["nodeid"].endswith("[a]") for m in i["measurements"]] == [4.0]
