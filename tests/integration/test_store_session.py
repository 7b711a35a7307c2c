"""The run store end to end through the plugin (issue 4), against the local provider server.

Every test here runs real pytest sessions (pytester) whose judge is the anthropic SDK pointed at a
:class:`~pytest_aimeasure.testing.server.ProviderServer` on 127.0.0.1, so judge calls are real HTTP
requests that the server counts. Generation is deterministic, and ``generate`` raises when
``AIM_FORBID_GENERATE`` is set: a session that must not generate proves it by passing.

What is shown: a run killed with SIGKILL keeps every journaled sample and ``--aimeasure-resume`` asks only for
the rest (and generates nothing again); an unchanged rerun makes no judge call; two xdist workers
journal and index at once; ``--judge-cache=replay`` serves stored samples and turns a miss into a
per-item error; ``--aimeasure-rejudge`` scores stored artifacts and never generates, a missing or unreadable
artifact is a per-test error, and a resumed rejudge still never generates; the budget stops new
calls (one ledger for all workers); the spend of a priced model matches litellm's own arithmetic;
``--judge-dry-run`` calls nothing; bad store paths, unknown run ids and a resume with another judge
are usage errors before any call; ``latest`` is the run started last; ``aimeasure history`` /
``show`` read the runs produced here. Rerun, rejudge, the budget and a corrupt cache also run under ``-n 2``.

Most tests start from a copy of one recorded run (``recorded_store``) instead of recording again.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.cli import main as cli
from pytest_aimeasure.judge.backends.litellm import import_litellm
from pytest_aimeasure.store.runs import RunStore, read_journal
from pytest_aimeasure.testing.server import ProviderServer, SeenRequest
from tests.conftest import ForkedPytest, read_results, run_pytest_here, xdist_workers

STORIES = 8
SAMPLES = 3
TOTAL_SAMPLES = STORIES * SAMPLES
UNPRICED_MODEL = "anthropic/claude-test"  # not in litellm's price map: cost unknown
PRICED_MODEL = "anthropic/claude-sonnet-4-6"  # in litellm's price map

TEST_MODULE = """
import os

import pytest

PREFIX = {prefix!r}
BROKEN = {broken!r}  # the story whose generation goes wrong, if any


def generate(i):
    if os.environ.get("AIM_FORBID_GENERATE"):
        raise RuntimeError(f"generate was called for {{PREFIX}}story-{{i}} (AIM_FORBID_GENERATE is set)")
    with open("generated.log", "a") as log:  # one line per call, in whichever process made it
        log.write(f"{{PREFIX}}story-{{i}}\\n")
    if i == BROKEN:
        return "(the generator returned an error page)"
    return f"{{PREFIX}}Story {{i}}: the fox flatters the crow, the crow sings, and the cheese falls."


@pytest.fixture(params=range({stories}), ids=lambda i: f"s{{i}}")
def story(request, aimeasure_artifact):
    i = request.param
    return aimeasure_artifact(f"{{PREFIX}}story-{{i}}", lambda: generate(i), label="gen-v1")


@pytest.mark.gate
def test_gate(story):
    assert story.text.startswith(PREFIX + "Story ")


@pytest.mark.dimension("tone", rubric={rubric!r}, floor=2.0)
def test_tone(story, judge):
    judge.score(story)
"""

RUBRIC = "5 = warm and playful; 1 = cold and curt"
BASE_ARGS = ("-p", "no:randomly", "-p", "no:cacheprovider", "--ai-judge")


def module_source(
    *, prefix: str = "", stories: int = STORIES, rubric: str = RUBRIC, broken: int | None = None
) -> str:
    return TEST_MODULE.format(prefix=prefix, stories=stories, rubric=rubric, broken=broken)


@dataclass
class Project:
    """A pytester project judged by the anthropic backend against ``server``."""

    pytester: pytest.Pytester
    server: ProviderServer
    model: str = UNPRICED_MODEL

    @property
    def path(self) -> Path:
        return self.pytester.path

    @property
    def store(self) -> RunStore:
        return RunStore(self.path / ".aimeasure")

    def args(self, *extra: str, json_name: str | None = None) -> list[str]:
        out = [*BASE_ARGS, "--judge-model", self.model]
        if json_name:
            out += ["--aimeasure-json", json_name]
        return [*out, *extra]

    def run(self, *extra: str, json_name: str | None = "out.json", xdist: bool = False) -> pytest.RunResult:
        """One session in this process, its controller's with xdist workers if ``xdist`` (one for each
        test module, two at most)."""
        args = self.args(*extra, json_name=json_name)
        return self.pytester.runpytest(*args, *(xdist_workers(self.path) if xdist else ()))

    def results(self, name: str = "out.json") -> dict[str, Any]:
        return read_results(self.path / name)

    def calls_during(
        self, *extra: str, xdist: bool = False, json_name: str | None = "out.json"
    ) -> tuple[pytest.RunResult, int]:
        before = self.server.judge_calls
        result = self.run(*extra, json_name=json_name, xdist=xdist)
        return result, self.server.judge_calls - before


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as srv:
        yield srv


def point_at(monkeypatch: pytest.MonkeyPatch, server: ProviderServer) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("AIM_FORBID_GENERATE", raising=False)


@pytest.fixture
def project(pytester: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> Project:
    point_at(monkeypatch, server)
    pytester.makepyfile(test_story=module_source())
    return Project(pytester, server)


def samples_by_source(data: dict[str, Any]) -> Counter[str]:
    return Counter(s["source"] for item in data["items"] for m in item["measurements"] for s in m["samples"])


def outcomes(data: dict[str, Any], kind: str) -> dict[str, str]:
    return {i["nodeid"].split("::")[-1]: i["outcome"] for i in data["items"] if i["kind"] == kind}


@pytest.fixture(scope="session")
def recorded_store(tmp_path_factory: pytest.TempPathFactory, _imported_outside_pytester: None) -> Path:
    """One complete judged run of ``module_source()``, recorded once (per xdist worker) in this process
    against its own server; tests copy its store instead of recording again."""
    folder = tmp_path_factory.mktemp("recorded")
    (folder / "test_story.py").write_text(module_source())
    with ProviderServer() as srv:
        env = {"ANTHROPIC_BASE_URL": srv.url, "ANTHROPIC_API_KEY": "test-key", "AIM_FORBID_GENERATE": None}
        args = (*BASE_ARGS, "--judge-model", UNPRICED_MODEL, "--aimeasure-json", "out.json")
        code, out = run_pytest_here(folder, *args, env=env)
        assert code == 0, out
        assert srv.judge_calls == TOTAL_SAMPLES
    return folder


def means(data: dict[str, Any]) -> dict[str, float]:
    return {i["nodeid"]: i["measurements"][0]["mean"] for i in data["items"] if i["measurements"]}


def record(project: Project, recorded_store: Path) -> str:
    """Give ``project`` the store of a first, complete judged run of the same tests (and its JSON
    as ``out.json``); returns that run's id."""
    shutil.copytree(recorded_store / ".aimeasure", project.path / ".aimeasure")
    shutil.copy(recorded_store / "out.json", project.path / "out.json")
    run_id = str(project.results()["run_id"])
    assert project.store.run_ids() == [run_id]
    return run_id


# --------------------------------------------------------------------------------------------------
# kill -9 in the middle of a judged run, then --aimeasure-resume
# --------------------------------------------------------------------------------------------------


def _complete_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def settle_server(server: ProviderServer, quiet: float = 0.5, limit: float = 10.0) -> None:
    """Wait (bounded) until the server has nothing in flight and its count stood still for ``quiet`` s."""
    deadline = time.monotonic() + limit
    seen, since = server.calls, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if server.calls != seen or server.in_flight:
            seen, since = server.calls, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


def test_sigkill_mid_run_keeps_every_journaled_sample_and_resume_requests_only_the_rest(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first SAMPLES judge calls are answered; every later one is held until the kill (at most
    # 30 s), so the session is killed with some samples journaled and the rest in flight. A latency
    # alone raced the poll: the judge's calls go together, and all of them could be journaled
    # before the poll saw the first ones (then nothing was left to resume).
    project.server.latency = 0.05
    release = threading.Event()
    arrivals = itertools.count()

    def first_ones_only(seen: SeenRequest) -> int:
        if next(arrivals) >= SAMPLES:
            release.wait(30)
        return 4

    project.server.scorer = first_ones_only
    proc = ForkedPytest(project.path, *project.args())
    journal: Path | None = None
    at_kill = 0
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            found = sorted((project.path / ".aimeasure" / "runs").glob("*/journal-*.jsonl"))
            if found:
                journal = found[0]
                at_kill = _complete_lines(journal)
                if at_kill >= SAMPLES:  # at least one item done: kill in the middle of the next ones
                    break
            time.sleep(0.01)
        still_running = proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        release.set()  # the killed session's held calls end (their client is gone)
    assert still_running, "the session ended before it could be killed"
    assert journal is not None and proc.returncode == -signal.SIGKILL

    # Every sample journaled before the kill is intact: each newline-terminated line parses.
    raw = journal.read_bytes()
    lines = raw.count(b"\n")
    records, problems = read_journal(journal)
    assert len(records) == lines, problems
    assert SAMPLES <= lines < TOTAL_SAMPLES
    assert all(problem.startswith(f"{journal}: torn last line") for problem in problems)
    assert len({(r.key, r.item_id) for r in records}) == len(records)
    for r in records:
        assert r.item_id.startswith("tone::test_story.py::test_tone[s")
        assert r.sample.source == "judge" and r.sample.score == 4 and 0 <= r.key.index < SAMPLES
    journaled = len(records)
    run_id = journal.parent.name
    store = project.store
    assert store.open_run(run_id).meta.status == "running"
    assert {m.run_id: m.status for m in store.list_runs()[0]} == {run_id: "interrupted"}
    assert cli.main(["--store", str(store.root), "history"]) == 0
    assert "interrupted" in capsys.readouterr().out

    # A kill between write() and its newline cannot be produced with SIGKILL (one write per line),
    # so simulate the torn tail such a crash leaves: half of a line, no newline. It must be skipped
    # and reported, never break the resume.
    first_line = raw.split(b"\n", 1)[0]
    with journal.open("ab") as handle:
        handle.write(first_line[: len(first_line) // 2])

    settle_server(project.server)  # what the killed process had sent is counted before we start
    result, calls = project.calls_during("--aimeasure-resume")
    assert result.ret == 0, result.stdout.str()
    assert calls == TOTAL_SAMPLES - journaled
    data = project.results()
    assert data["run_id"] == run_id
    assert samples_by_source(data) == {"journal": journaled, "judge": TOTAL_SAMPLES - journaled}
    assert data["spend"]["calls"] == TOTAL_SAMPLES - journaled
    assert data["spend"]["cached"] == journaled
    resume_findings = [f for f in data["findings"] if f["kind"] == "resume"]
    assert len(resume_findings) == 1 and "torn last line skipped" in resume_findings[0]["message"]
    result.stdout.fnmatch_lines(["*[[]warn[]] resume: " + run_id])
    assert "jsonl: torn last line skipped" in " ".join(result.stdout.str().split())  # wrapped text

    # The resumed run is complete: every item has its record, every tone item its N samples.
    run = store.open_run(run_id)
    assert run.meta.status == "finished"
    # ...and its figures cover the whole run, both sessions: journal = meta = history.
    assert run.meta.judge_calls == TOTAL_SAMPLES  # was: only the calls of the resuming session
    assert run.meta.reused_samples == 0
    assert cli.main(["--store", str(store.root), "show", run_id]) == 0
    assert f"{TOTAL_SAMPLES} calls, 0 samples reused" in capsys.readouterr().out
    items = {i.nodeid: i for i in run.items()}
    assert len(items) == 2 * STORIES
    tone = [i for i in items.values() if i.kind == "dimension"]
    assert all(i.outcome == "passed" and i.measurement and i.measurement.n == SAMPLES for i in tone)
    samples, read_problems = run.samples()
    assert len(samples) == TOTAL_SAMPLES
    assert len(read_problems) == 1 and "skipped" in read_problems[0]  # the fragment, now a whole bad line
    # Gates run first, so the killed session had generated and recorded every artifact; the resumed
    # one loaded them from the run's manifest and generated none again.
    keys = [f"story-{i}" for i in range(STORIES)]
    assert set(run.artifacts()) == set(keys)
    assert Counter((project.path / "generated.log").read_text().split()) == Counter(keys)


# --------------------------------------------------------------------------------------------------
# unchanged rerun, replay, rejudge: serially and with xdist workers
# --------------------------------------------------------------------------------------------------

MODES = [pytest.param(False, id="serial"), pytest.param(True, id="xdist")]


def test_unchanged_rerun_makes_no_judge_call(project: Project, recorded_store: Path) -> None:
    first = record(project, recorded_store)
    first_data = project.results()
    result, calls = project.calls_during()
    assert result.ret == 0, result.stdout.str()
    assert calls == 0
    data = project.results()
    assert data["run_id"] != first
    assert data["spend"]["calls"] == 0 and data["spend"]["cached"] == TOTAL_SAMPLES
    assert samples_by_source(data) == {"cache": TOTAL_SAMPLES}
    assert means(data) == means(first_data)
    result.stdout.fnmatch_lines([f"*judge {UNPRICED_MODEL}: 0 calls, {TOTAL_SAMPLES} samples reused*"])


def test_two_workers_record_at_once_and_an_unchanged_rerun_under_xdist_makes_no_call(
    project: Project,
) -> None:
    # Two modules (different artifacts): whatever the scheduling, both workers judge, journal and
    # index samples at the same time.
    project.pytester.makepyfile(test_other=module_source(prefix="other-"))
    total = 2 * TOTAL_SAMPLES
    result, calls = project.calls_during(xdist=True)
    assert result.ret == 0, result.stdout.str()
    assert calls == total
    first = project.results()
    run = project.store.open_run(first["run_id"])
    journals = sorted(run.path.glob("journal-*.jsonl"))
    assert [p.name for p in journals] == ["journal-gw0.jsonl", "journal-gw1.jsonl"]
    per_file = [read_journal(p) for p in journals]
    assert all(problems == [] and records for records, problems in per_file)
    assert sum(len(records) for records, _ in per_file) == total
    samples, problems = run.samples()
    assert len(samples) == total and problems == []

    result, calls = project.calls_during(xdist=True)
    assert result.ret == 0, result.stdout.str()
    assert calls == 0
    data = project.results()
    assert data["spend"]["calls"] == 0 and data["spend"]["cached"] == total
    assert samples_by_source(data) == {"cache": total}
    assert means(data) == means(first)


# In one process: workers read the sample cache as test_two_workers_record_at_once_and_an_unchanged_
# rerun_under_xdist_makes_no_call's rerun does, and a judge error raised in a worker crosses to the
# controller as test_bad_input's lone-surrogate error [xdist] and test_pipeline's pending error [xdist] do.
def test_replay_serves_stored_samples_and_a_miss_is_an_error_naming_what_is_missing(
    project: Project, recorded_store: Path
) -> None:
    record(project, recorded_store)
    result, calls = project.calls_during("--judge-cache=replay")
    assert result.ret == 0, result.stdout.str()
    assert calls == 0
    assert samples_by_source(project.results()) == {"cache": TOTAL_SAMPLES}

    # A new story was never judged: replay must not call the judge for it, and says what is missing;
    # the stored ones are served as before.
    project.pytester.makepyfile(test_story=module_source(stories=STORIES + 1))
    result, calls = project.calls_during("--judge-cache=replay")
    assert calls == 0
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = project.results()
    assert samples_by_source(data) == {"cache": TOTAL_SAMPLES}
    tone = outcomes(data, "dimension")
    assert tone.pop(f"test_tone[s{STORIES}]") == "error"
    assert set(tone.values()) == {"passed"}
    missing = next(i for i in data["items"] if i["nodeid"].endswith(f"test_tone[s{STORIES}]"))
    assert missing["judge_error"] is True
    message = missing["message"]
    assert "--judge-cache=replay" in message and "no stored sample #" in message
    assert f"tone::test_story.py::test_tone[s{STORIES}]" in message and "claude-test" in message
    assert [f["kind"] for f in data["findings"] if f["severity"] == "fail"] == ["judge_error"]
    result.stdout.fnmatch_lines([f"*ERROR*test_tone[[]s{STORIES}[]]*"])


@pytest.mark.parametrize("xdist", MODES)
def test_rejudge_scores_stored_artifacts_and_never_generates(
    project: Project, recorded_store: Path, xdist: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = record(project, recorded_store)
    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")  # generate raises from now on
    project.server.set_scores({"tone": 5})
    if not xdist:
        result, calls = project.calls_during(f"--aimeasure-rejudge={recorded}", "--judge-cache=off")
        assert result.ret == 0, result.stdout.str()
        assert calls == TOTAL_SAMPLES  # really re-scored, not served from the cache
        data = project.results()
        assert set(outcomes(data, "gate").values()) == {"passed"}  # gates ran on the stored artifacts
        assert {m["mean"] for i in data["items"] for m in i["measurements"]} == {5.0}
        assert all("the fox flatters the crow" in r.prompt for r in project.server.requests)
        run = project.store.open_run(data["run_id"])
        assert run.meta.rejudge_of == recorded
        # the rejudge run lists the artifacts it scored, so it can itself be rejudged
        assert set(run.artifacts()) == {f"story-{i}" for i in range(STORIES)}
        recorded = "latest"

    # A test whose artifact the run never stored is an error, not a silent regeneration, and the
    # other tests are still scored on their stored artifacts.
    project.pytester.makepyfile(test_story=module_source(stories=STORIES + 1))
    result, calls = project.calls_during(f"--aimeasure-rejudge={recorded}", "--judge-cache=off", xdist=xdist)
    assert calls == TOTAL_SAMPLES
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = project.results()
    assert {m["mean"] for i in data["items"] for m in i["measurements"]} == {5.0}
    new = f"s{STORIES}"
    gates = outcomes(data, "gate")
    assert gates.pop(f"test_gate[{new}]") == "error" and set(gates.values()) == {"passed"}
    tone = outcomes(data, "dimension")
    assert tone.pop(f"test_tone[{new}]") == "error" and set(tone.values()) == {"passed"}
    rejudged = project.store.open_run(data["run_id"]).meta.rejudge_of
    assert rejudged is not None and rejudged in project.store.run_ids()
    out = result.stdout.str()
    assert "generate was called" not in out and not (project.path / "generated.log").exists()
    summary = f"ERROR test_story.py::test_tone[[]{new}[]] - Failed: --aimeasure-rejudge *"
    result.stdout.fnmatch_lines([summary])
    assert out.count(f"the run has no stored artifact 'story-{STORIES}'; it is never regenerated") >= 2
    message = next(i["message"] for i in data["items"] if i["nodeid"].endswith(f"test_tone[{new}]"))
    assert f"the run has no stored artifact 'story-{STORIES}'" in message
    assert "never regenerated under --aimeasure-rejudge" in message


def test_rejudge_of_an_artifact_gone_from_the_store_is_a_per_test_error(
    project: Project, recorded_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = record(project, recorded_store)
    refs = project.store.open_run(recorded).artifacts()
    project.store.artifact_path(refs["story-3"].sha256).unlink()
    project.store.artifact_path(refs["story-5"].sha256).write_text("edited by hand")
    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")
    result, calls = project.calls_during("--aimeasure-rejudge", "--judge-cache=off")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert calls == (STORIES - 2) * SAMPLES
    data = project.results()
    broken = {"s3": "is missing from the store", "s5": "is corrupt"}
    for kind in ("gate", "dimension"):
        found = outcomes(data, kind)
        assert {k.split("[")[1].rstrip("]") for k, v in found.items() if v == "error"} == set(broken)
        assert {v for k, v in found.items() if k.split("[")[1].rstrip("]") not in broken} == {"passed"}
    for item in data["items"]:
        tag = item["nodeid"].split("[")[1].rstrip("]")
        if tag in broken:
            assert (
                f"the stored artifact 'story-{tag[1]}' cannot be read, and it is never regenerated"
                in (item["message"])
            )
    out = result.stdout.str()
    for tag, reason in broken.items():
        sha = refs[f"story-{tag[1]}"].sha256
        assert out.count(f"the stored artifact 'story-{tag[1]}' cannot be read") >= 2  # gate and tone
        assert f"{sha} {reason}" in out
    assert "generate was called" not in out


def test_a_failed_gate_skips_the_dimensions_of_its_own_artifact_only(project: Project) -> None:
    # Every story comes from the same session-scoped aimeasure_artifact fixture; the gate of story 3
    # failing must condemn story 3, not everything that fixture handed out.
    project.pytester.makepyfile(test_story=module_source(broken=3))
    result, calls = project.calls_during()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert calls == (STORIES - 1) * SAMPLES
    data = project.results()
    assert outcomes(data, "gate") == {
        f"test_gate[s{i}]": "failed" if i == 3 else "passed" for i in range(STORIES)
    }
    assert outcomes(data, "dimension") == {
        f"test_tone[s{i}]": "skipped" if i == 3 else "passed" for i in range(STORIES)
    }
    assert all("(the generator returned" not in r.prompt for r in project.server.requests)


# --------------------------------------------------------------------------------------------------
# money: the budget, the spend of a priced model, the dry run
# --------------------------------------------------------------------------------------------------


def long_verdict(seen: SeenRequest) -> dict[str, Any]:
    """A verdict whose rationale is ~300 tokens, so a call costs about what the budget estimates
    (the estimate counts 300 output tokens): spending past the limit would show in the spend."""
    return {"dimension": seen.dimension, "score": 4, "rationale": "The fox is charming. " * 57}


@pytest.mark.parametrize("xdist", MODES)
def test_budget_stops_new_calls_and_items_left_are_not_judged_findings(project: Project, xdist: bool) -> None:
    project.model = PRICED_MODEL
    project.server.scorer = long_verdict
    # Two modules, so that under -n 2 both workers judge at the same time.
    project.pytester.makepyfile(test_other=module_source(prefix="other-"))
    items = 2 * STORIES
    budget = 0.05  # a call costs ~$0.005: room for about three items out of sixteen
    result, calls = project.calls_during(f"--judge-budget-usd={budget}", "--judge-cache=off", xdist=xdist)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = project.results()
    assert data["passed"] is False
    assert "items not judged: the judge budget ran out" in data["failed_because"]
    spend = data["spend"]
    assert spend["calls"] == calls
    assert 0 < spend["cost_usd"] <= budget
    assert 0 < calls < items * SAMPLES
    tone = [i for i in data["items"] if i["kind"] == "dimension"]
    judged = [i for i in tone if i["outcome"] == "passed"]
    stopped = [i for i in tone if i["outcome"] == "skipped"]
    assert judged and stopped and len(judged) + len(stopped) == items
    assert all("not judged: budget ($" in i["message"] for i in stopped)
    # (the items the budget stopped while pending did call judge.score: not "never scored")
    assert "without calling judge.score" not in result.stdout.str()
    findings = [f for f in data["findings"] if f["kind"] == "budget"]
    assert sorted(f["subject"] for f in findings) == sorted(i["item_id"] for i in stopped)
    assert {f["severity"] for f in findings} == {"fail"}
    assert all(f["message"].startswith("not judged: budget ($") for f in findings)
    result.stdout.fnmatch_lines(["*aimeasure failed the run: items not judged: the judge budget ran out*"])
    if not xdist:
        # One process, items one after another: the stop is one point in the run.
        order = [
            i["outcome"]
            for i in sorted(
                tone,
                key=lambda i: (i["nodeid"].split("[")[0], int(i["nodeid"].rsplit("[s", 1)[1].rstrip("]"))),
            )
        ]
        first_stop = order.index("skipped")
        assert set(order[first_stop:]) == {"skipped"}


def test_spend_of_a_priced_model_equals_litellms_figure(
    project: Project, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    usages: list[dict[str, int]] = []
    respond = server._respond

    def recording_respond(seen: SeenRequest, accept: Any = None) -> Any:
        reply = respond(seen, accept)
        usages.append(dict(reply.payload["usage"]))  # what the server reported to the client
        return reply

    monkeypatch.setattr(server, "_respond", recording_respond)
    project.model = PRICED_MODEL
    result = project.run()
    assert result.ret == 0, result.stdout.str()
    assert len(usages) == TOTAL_SAMPLES

    # litellm's own arithmetic, from the litellm this process imported before its first pytester
    # session (tests/integration/conftest.py), so its import finder cannot break later sessions.
    litellm = import_litellm()

    def litellm_costs(pairs: list[tuple[int, int]]) -> list[float]:
        return [
            sum(litellm.cost_per_token(model=PRICED_MODEL, prompt_tokens=i, completion_tokens=o))
            for i, o in pairs
        ]

    data = project.results()
    samples = [s for i in data["items"] for m in i["measurements"] for s in m["samples"]]
    pairs = [(u["input_tokens"], u["output_tokens"]) for u in usages]
    pairs += [(s["usage"]["input_tokens"], s["usage"]["output_tokens"]) for s in samples]
    costs = litellm_costs(pairs)
    server_costs, sample_costs = costs[: len(usages)], costs[len(usages) :]
    expected_total = sum(server_costs)
    assert expected_total > 0
    spend = data["spend"]
    assert spend["input_tokens"] == sum(u["input_tokens"] for u in usages)
    assert spend["output_tokens"] == sum(u["output_tokens"] for u in usages)
    assert spend["cost_usd"] == pytest.approx(expected_total, abs=1e-6)  # the JSON rounds to 1e-6
    for sample, cost in zip(samples, sample_costs, strict=True):
        assert sample["cost_usd"] == pytest.approx(cost, rel=1e-9)
    assert project.store.open_run(data["run_id"]).meta.spend_usd == pytest.approx(expected_total, abs=1e-6)


def test_unknown_price_is_unknown_never_zero(project: Project) -> None:
    project.pytester.makeini("[pytest]\naimeasure_store = runs-here\n")  # and the store goes there
    result = project.run()
    assert result.ret == 0
    data = project.results()
    assert data["spend"]["calls"] == TOTAL_SAMPLES and data["spend"]["cost_usd"] is None
    result.stdout.fnmatch_lines([f"*judge {UNPRICED_MODEL}: {TOTAL_SAMPLES} calls*cost unknown*"])
    store = RunStore(project.path / "runs-here")
    assert store.run_ids() == [data["run_id"]]
    assert store.open_run(data["run_id"]).meta.spend_usd is None
    assert not (project.path / ".aimeasure").exists()


def test_dry_run_counts_calls_and_estimates_cost_without_calling_anything(project: Project) -> None:
    from pytest_aimeasure.report.terminal import DRY_RUN_PROMPT_CHARS
    from pytest_aimeasure.store.cost import estimate_call_usd

    project.model = PRICED_MODEL
    project.pytester.makepyfile(test_other=module_source(prefix="other-", stories=2))
    result, calls = project.calls_during("--judge-dry-run", "--judge-samples=5", json_name=None)
    assert result.ret == 0, result.stdout.str()
    assert calls == 0 and project.server.calls == 0
    items = STORIES + 2
    result.stdout.no_fnmatch_line("*passed*")
    one = estimate_call_usd("claude-sonnet-4-6", DRY_RUN_PROMPT_CHARS, 1024, provider="anthropic")
    assert one is not None
    result.stdout.fnmatch_lines(
        [
            f"aimeasure dry run: {items} dimension items, {items * 5} judge calls with {PRICED_MODEL}",
            f"estimated cost: ${one * items * 5:.4f} *nothing was called*",
        ]
    )
    assert not (project.path / ".aimeasure" / "runs").exists() or not project.store.run_ids()

    # only the selected tests count
    result, calls = project.calls_during("--judge-dry-run", "-k", "s0 or s1", json_name=None)
    assert result.ret == 0 and calls == 0
    result.stdout.fnmatch_lines([f"aimeasure dry run: 4 dimension items, {4 * SAMPLES} judge calls with *"])


# --------------------------------------------------------------------------------------------------
# bad input: fail at session start, before any judge call
# --------------------------------------------------------------------------------------------------


def test_store_that_cannot_be_written_is_a_usage_error_before_any_call(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project.path / "blocker").write_text("a regular file: nothing can be created under it\n")
    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")
    result, calls = project.calls_during("--aimeasure-store", "blocker/store", json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert calls == 0 and project.server.calls == 0
    err = result.stderr.str()
    assert "blocker/store" in err and "is not writable" in err and "--aimeasure-store" in err
    result.stdout.no_fnmatch_line("*passed*")

    # the ini twin points at the same kind of path: same error
    project.pytester.makeini("[pytest]\naimeasure_store = blocker/from-ini\n")
    result, calls = project.calls_during(json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and calls == 0
    assert "blocker/from-ini" in result.stderr.str()


def test_budget_with_an_unpriced_model_is_a_usage_error_before_any_call(project: Project) -> None:
    result, calls = project.calls_during("--judge-budget-usd=1", json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and calls == 0
    result.stderr.fnmatch_lines(
        [
            f"*--judge-budget-usd: no price for '{UNPRICED_MODEL}' in litellm's price map, so spend cannot "
            "be bounded*"
        ]
    )


@pytest.mark.parametrize("flag", ["--aimeasure-rejudge", "--aimeasure-resume"])
def test_unknown_run_id_lists_the_known_ones(project: Project, recorded_store: Path, flag: str) -> None:
    recorded = record(project, recorded_store)
    result, calls = project.calls_during(f"{flag}=nope", json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert calls == 0
    err = result.stderr.str()
    assert "no run 'nope'" in err and f"known runs, newest first: {recorded}" in err


def test_resuming_an_interrupted_rejudge_still_never_generates(
    project: Project, recorded_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = record(project, recorded_store)
    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")
    # A rejudge that got through two stories only (as if interrupted there).
    result, calls = project.calls_during(
        f"--aimeasure-rejudge={recorded}", "--judge-cache=off", "-k", "s0 or s1"
    )
    assert result.ret == 0, result.stdout.str()
    assert calls == 2 * SAMPLES
    rejudge_run = project.results()["run_id"]
    assert set(project.store.open_run(rejudge_run).artifacts()) == {"story-0", "story-1"}

    result, calls = project.calls_during(f"--aimeasure-resume={rejudge_run}", "--judge-cache=off")
    assert result.ret == 0, result.stdout.str()
    assert calls == TOTAL_SAMPLES - 2 * SAMPLES
    data = project.results()
    assert data["run_id"] == rejudge_run
    assert samples_by_source(data) == {"journal": 2 * SAMPLES, "judge": TOTAL_SAMPLES - 2 * SAMPLES}
    run = project.store.open_run(rejudge_run)
    assert run.meta.rejudge_of == recorded
    assert set(run.artifacts()) == {f"story-{i}" for i in range(STORIES)}


def test_resume_with_another_judge_model_is_a_usage_error(project: Project, recorded_store: Path) -> None:
    recorded = record(project, recorded_store)
    project.model = "anthropic/claude-other"
    result, calls = project.calls_during(f"--aimeasure-resume={recorded}", json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and calls == 0
    result.stderr.fnmatch_lines(
        [
            f"*--aimeasure-resume {recorded}: the run was judged with {UNPRICED_MODEL}, this session would "
            "judge with "
            f"anthropic/claude-other*resume with --judge-model {UNPRICED_MODEL}*"
        ]
    )
    # Bare --aimeasure-resume passes over a run it could not reuse, and says why and what to do.
    result, calls = project.calls_during("--aimeasure-resume", json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and calls == 0
    result.stderr.fnmatch_lines(
        [
            "*no run in * holds samples or artifacts of these tests judged with anthropic/claude-other*",
            f"  {recorded}: judged with {UNPRICED_MODEL}, not anthropic/claude-other "
            f"(resume it with --judge-model {UNPRICED_MODEL})",
        ]
    )
    assert project.store.open_run(recorded).meta.status == "finished"


# --------------------------------------------------------------------------------------------------
# what a run records, and the aimeasure command on it
# --------------------------------------------------------------------------------------------------


def test_run_records_metadata_artifacts_once_and_the_cli_reads_it(
    project: Project,
    recorded_store: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = record(project, recorded_store)
    project.run()  # unchanged rerun: same artifacts, stored once
    second = project.results()["run_id"]
    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")
    project.run("--aimeasure-rejudge", json_name="rejudge.json")
    third = project.results("rejudge.json")["run_id"]

    store = project.store
    meta = store.open_run(first).meta
    assert meta.status == "finished" and meta.started_at and meta.ended_at
    assert meta.plugin_version and meta.judge_model == UNPRICED_MODEL
    assert meta.generators == ["gen-v1"]
    assert [fp.model for fp in meta.fingerprints] == ["claude-test"]
    assert meta.fingerprints[0].temperature == 0.0  # N is not part of the ruler (issue 14)
    assert meta.argv[0] == "pytest" and "--ai-judge" in meta.argv and UNPRICED_MODEL in meta.argv
    assert meta.items == 2 * STORIES and meta.judge_calls == TOTAL_SAMPLES
    assert store.open_run(second).meta.judge_calls == 0
    assert store.open_run(third).meta.rejudge_of == second
    blobs = [p for p in store.artifacts_dir.rglob("*") if p.is_file()]
    assert len(blobs) == STORIES  # content-addressed: three runs, eight artifacts, stored once
    journals = sorted(store.open_run(first).path.glob("journal-*.jsonl"))
    assert [p.name for p in journals] == ["journal-controller.jsonl"]
    records, problems = read_journal(journals[0])
    assert len(records) == TOTAL_SAMPLES and problems == []
    # the rerun made no judge call; its journal still lists every sample its measurements used,
    # marked as reused, so one run's folder is a complete record
    rerun_records, _ = read_journal(store.open_run(second).path / "journal-controller.jsonl")
    assert len(rerun_records) == TOTAL_SAMPLES
    assert {r.sample.source for r in rerun_records} == {"cache"}

    assert cli.main(["--store", str(store.root), "history"]) == 0
    out = capsys.readouterr().out
    assert all(run_id in out for run_id in (first, second, third))
    assert out.count("finished") == 3
    assert cli.main(["--store", str(store.root), "show", "latest"]) == 0
    out = capsys.readouterr().out
    assert f"run {third}: finished" in out and f"rejudge of {second}" in out
    assert "test_story.py::test_tone[s0] / tone" in out and "gates and other tests" in out
    assert cli.main(["--store", str(store.root), "show", "nope"]) == 2
    assert first in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# choosing a run: bare --aimeasure-rejudge / -resume, broken folders, no phantom runs (issue 10, item 4)
# --------------------------------------------------------------------------------------------------


def break_a_newer_run_folder(store: RunStore) -> str:
    """A run folder named newer than every run, whose meta.json is garbage."""
    broken = "29991231T235959Z-dead"
    (store.runs_dir / broken).mkdir()
    (store.runs_dir / broken / "meta.json").write_text("{garbage")
    return broken


def test_a_broken_run_folder_blocks_neither_latest_nor_rejudge_nor_resume(
    project: Project,
    recorded_store: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recorded = record(project, recorded_store)
    broken = break_a_newer_run_folder(project.store)
    assert project.store.resolve("latest") == recorded
    assert cli.main(["--store", str(project.store.root), "show", "latest"]) == 0
    assert f"run {recorded}: finished" in capsys.readouterr().out

    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")
    result, calls = project.calls_during("--aimeasure-rejudge", "--judge-cache=off")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert calls == TOTAL_SAMPLES
    rejudge = project.results()["run_id"]
    assert project.store.open_run(rejudge).meta.rejudge_of == recorded

    result, calls = project.calls_during("--aimeasure-resume")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert calls == 0 and project.results()["run_id"] == rejudge  # the newest readable run
    assert broken in project.store.run_ids()  # left alone, and still listed as broken
    assert cli.main(["--store", str(project.store.root), "history"]) == 0
    assert f"broken: {project.store.runs_dir / broken / 'meta.json'}" in capsys.readouterr().out


def test_bare_rejudge_picks_the_latest_run_that_holds_the_selected_tests(
    project: Project, recorded_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    story_run = record(project, recorded_store)
    project.pytester.makepyfile(test_other=module_source(prefix="other-", stories=2))
    result = project.run("test_other.py", json_name="other.json")
    assert result.ret == 0, result.stdout.str()
    other_run = project.results("other.json")["run_id"]
    assert project.store.resolve("latest") == other_run

    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")
    result, calls = project.calls_during("--aimeasure-rejudge", "--judge-cache=off", "test_story.py")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert calls == TOTAL_SAMPLES
    assert project.store.open_run(project.results()["run_id"]).meta.rejudge_of == story_run

    # No run holds tests of a module never run: a usage error naming every candidate and why.
    project.pytester.makepyfile(test_third=module_source(prefix="third-", stories=1))
    before = project.store.run_ids()
    result, calls = project.calls_during("test_third.py", "--aimeasure-rejudge", json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and calls == 0
    err = result.stderr.str()
    assert "no run in" in err and "holds stored artifacts of test_third.py" in err
    for run_id in before:
        assert f"  {run_id}: ran no test under test_third.py" in err
    assert project.store.run_ids() == before  # and it left no run behind


def test_a_rejudge_or_resume_that_fails_before_judging_leaves_no_phantom_run(
    project: Project, recorded_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = record(project, recorded_store)
    store = project.store
    meta_before = (store.runs_dir / recorded / "meta.json").read_bytes()
    monkeypatch.setenv("AIM_FORBID_GENERATE", "1")

    # fails at session start, after the run would have been opened (a missing cache is no such
    # failure: replay rebuilds it from the run journals)
    result, calls = project.calls_during("--aimeasure-rejudge", "--judge-budget-usd=1", json_name=None)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and calls == 0
    assert store.run_ids() == [recorded]

    # fails at collection: no test runs, nothing is judged
    project.pytester.makepyfile(test_broken="import no_such_module_here\n")
    for flag in ("--aimeasure-rejudge", "--aimeasure-resume"):
        result, calls = project.calls_during(flag, json_name=None)
        assert result.ret == pytest.ExitCode.INTERRUPTED and calls == 0, result.stdout.str()
        assert store.run_ids() == [recorded]
        assert store.resolve("latest") == recorded
    meta = store.open_run(recorded).meta
    assert meta.status == "finished" and meta.judge_calls == TOTAL_SAMPLES
    assert json.loads((store.runs_dir / recorded / "meta.json").read_bytes()) == json.loads(meta_before)


# --------------------------------------------------------------------------------------------------
# resumed runs keep their history (item 5); a corrupt cache (item 6); files and locks (item 9)
# --------------------------------------------------------------------------------------------------


def test_resuming_a_finished_run_keeps_its_figures(project: Project) -> None:
    project.model = PRICED_MODEL
    result, calls = project.calls_during()
    assert result.ret == 0, result.stdout.str()
    assert calls == TOTAL_SAMPLES
    run_id = project.results()["run_id"]
    first = project.store.open_run(run_id).meta
    assert first.judge_calls == TOTAL_SAMPLES and first.spend_usd and first.spend_usd > 0

    result, calls = project.calls_during("--aimeasure-resume")
    assert result.ret == 0, result.stdout.str()
    assert calls == 0 and project.results()["run_id"] == run_id
    again = project.store.open_run(run_id).meta
    assert (again.judge_calls, again.spend_usd) == (TOTAL_SAMPLES, first.spend_usd)  # was: 0, $0
    assert again.reused_samples == 0
    samples, _ = project.store.open_run(run_id).samples()
    assert sum(s.sample.cost_usd or 0 for s in samples) == pytest.approx(first.spend_usd, abs=1e-6)


@pytest.mark.parametrize("xdist", MODES)
def test_a_corrupt_cache_is_rebuilt_from_the_journals_and_the_user_told(
    project: Project, recorded_store: Path, xdist: bool
) -> None:
    record(project, recorded_store)
    cache = project.store.cache_path
    cache.write_bytes(b"\x00 this is not a sqlite database \xff" * 300)
    result, calls = project.calls_during(xdist=xdist)
    assert result.ret == 0, result.stdout.str()
    assert calls == 0  # every sample reused: the run did not pay again
    data = project.results()
    assert samples_by_source(data) == {"cache": TOTAL_SAMPLES}
    [finding] = [f for f in data["findings"] if f["kind"] == "cache"]
    assert finding["severity"] == "warn"
    assert str(cache) in finding["message"]
    assert f"rebuilt it from the run journals: {TOTAL_SAMPLES} samples indexed" in finding["message"]
    result.stdout.fnmatch_lines(["*[[]warn[]] cache: cache*"])
    assert "rebuilt it from the run journals" in " ".join(result.stdout.str().split())

    # Said once: the cache is healthy again (read in-process: the file is what the workers left).
    result, calls = project.calls_during()
    assert result.ret == 0 and calls == 0
    assert [f for f in project.results()["findings"] if f["kind"] == "cache"] == []


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_files_the_plugin_writes_follow_the_umask_and_no_lock_file_is_left_in_the_project(
    project: Project, umask: int
) -> None:
    old = os.umask(umask)
    try:
        result = project.run("--update-baseline")
    finally:
        os.umask(old)
    assert result.ret == 0, result.stdout.str()
    run = project.store.open_run(project.results()["run_id"])
    expected = 0o666 & ~umask
    written = [
        project.path / "aimeasure-baseline.json",
        project.path / "out.json",
        run.path / "meta.json",
        run.path / "owner.json",
        run.path / "journal-controller.jsonl",
        run.path / "items.jsonl",
        *[p for p in project.store.artifacts_dir.rglob("*") if p.is_file()],
    ]
    modes = {str(p.relative_to(project.path)): oct(p.stat().st_mode & 0o777) for p in written}
    assert set(modes.values()) == {oct(expected)}, modes
    assert [p.name for p in project.path.iterdir() if p.suffix in (".lock", ".tmp")] == []
