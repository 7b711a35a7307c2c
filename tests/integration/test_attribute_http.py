"""Drift attribution end to end: pytest sessions judging stored artifacts through the real anthropic SDK
against the local provider server, whose scorer reads each artifact's quality (``QUALITY=n``) from the
prompt and answers like the judge model the request names: ``claude-old`` faithfully, ``claude-new`` one
point lower. Calls are counted on the server.

Under xdist: the controller attributing a judge swap after its workers measured, and the update that
follows; the sessions around them run in one process only."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from pytest_aimeasure.testing import ProviderServer, SeenRequest
from tests.conftest import ONE_WORKER, read_results

OLD, NEW = "anthropic/claude-old", "anthropic/claude-new"
PRICED = "anthropic/claude-sonnet-4-6"  # the server answers any model; this one has a price
QUALITIES = [4, 5, 4, 5, 4, 5]
ITEMS = len(QUALITIES)
N = 3

# GEN_DROP lowers every artifact's quality: a real change of the system under test.
TEST_MODULE = f"""
    import os
    import pytest

    QUALITIES = {QUALITIES}

    @pytest.mark.parametrize("k", range(len(QUALITIES)))
    @pytest.mark.dimension("clarity", rubric="5 = clear; 1 = muddled", floor=1.5)
    def test_clarity(k, judge, aimeasure_artifact):
        drop = int(os.environ.get("GEN_DROP", "0"))
        story = aimeasure_artifact(f"story-{{k}}", lambda: f"Story {{k}}. QUALITY={{QUALITIES[k] - drop}}")
        judge.score(story)
"""


def scorer(seen: SeenRequest) -> int:
    found = re.search(r"QUALITY=(\d)", seen.prompt)
    assert found, seen.prompt
    return int(found.group(1)) - (1 if seen.model == "claude-new" else 0)


@pytest.fixture
def server(serve: Callable[[Callable[[SeenRequest], int]], ProviderServer]) -> ProviderServer:
    return serve(scorer)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_clarity=textwrap.dedent(TEST_MODULE))
    return pytester


Session = Callable[..., tuple[pytest.RunResult, dict[str, Any]]]


def session(pytester: pytest.Pytester, model: str, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    argv = ("--ai-judge", "--judge-model", model, "--judge-samples", str(N), "--aimeasure-json", "out.json")
    argv += args
    if "--update-baseline" in args:
        # One output an update: the chain under test is the judge's. Attribution over the outputs an
        # update generates by default is test_baseline_repeats'.
        argv += ("--aimeasure-baseline-repeats", "1")
    result = pytester.runpytest(*argv)  # under -n the workers inherit the environment, with the server's URL
    return result, read_results(pytester.path / "out.json")


def attribution_finding(data: dict[str, Any]) -> dict[str, Any]:
    found = [f for f in data["findings"] if f["kind"] == "attribution"]
    assert len(found) == 1, data["findings"]
    finding: dict[str, Any] = found[0]
    return finding


def test_a_judge_swap_on_unchanged_artifacts_is_attributed_to_the_judge(
    project: pytest.Pytester, server: ProviderServer
) -> None:
    result, _ = session(project, OLD, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    baseline_path = project.path / "aimeasure-baseline.json"
    baseline = json.loads(baseline_path.read_text())
    entry = baseline["entries"]["clarity::test_clarity.py::test_clarity[0]"]
    assert entry["sources"][0]["artifact_sha256"] and entry["sources"][0]["run"]

    # Without attribution the swap is "not comparable" and fails the run.
    result, data = session(project, NEW)
    assert result.ret == 1
    assert data["dimensions"]["clarity"]["verdict"] == "not_comparable"

    # Attributed in one process, then by the controller (rejudging the baseline's artifacts) after
    # its two xdist workers measured.
    for xdist in ((), ONE_WORKER):
        server.reset_stats()
        result, data = session(project, NEW, "--aimeasure-attribute", "--judge-cache=off", *xdist)
        assert result.ret == 0, result.stdout.str()
        # Today's items and the baseline's artifacts, each judged N times by the new model, none by the old.
        assert server.calls_by_model == {"claude-new": 2 * ITEMS * N}
        finding = attribution_finding(data)
        a = data["attribution"]["clarity"]
        assert a["m"] == ITEMS and a["skipped"] == {}
        assert a["moved"] == "judge"
        assert a["total"] == pytest.approx(-1.0)
        assert a["judge"]["delta"] == pytest.approx(-1.0)
        low, high = a["judge"]["ci95"]
        assert low < -1.0 < high < 0  # the judge moved: its interval holds -1 and excludes 0
        assert a["system"]["delta"] == pytest.approx(0.0)
        low, high = a["system"]["ci95"]
        assert low < 0 < high and high - low < 1.0  # the system did not move, with a tight interval
        assert "of Δ -1.00, -1.00 [" in finding["message"]
        assert "is the judge on unchanged artifacts" in finding["message"]
        assert finding["severity"] == "warn"
        not_comparable = [f for f in data["findings"] if f["kind"] == "not_comparable"]
        assert [f["severity"] for f in not_comparable] == ["info"]  # measured now, not a reason to fail
        result.stdout.fnmatch_lines(["*clarity*attributed (the judge moved, the system did not)*"])

    # The update after it keeps the chain: the old artifacts' sessions, rescored by the new judge,
    # pool with today's under the new ruler (cache off: from the cache, today's samples would be
    # a re-read of the rejudged session, which is not pooled twice). In one process, then from the
    # same baseline again with two workers.
    before_update = baseline_path.read_text()
    for xdist in ((), ONE_WORKER):
        baseline_path.write_text(before_update)
        args = ("--aimeasure-attribute", "--update-baseline", "--judge-cache=off", *xdist)
        result, data = session(project, NEW, *args)
        assert result.ret == 0, result.stdout.str()
        baseline = json.loads(baseline_path.read_text())
        for k, quality in enumerate(QUALITIES):
            entry = baseline["entries"][f"clarity::test_clarity.py::test_clarity[{k}]"]
            assert entry["fingerprint"]["model"] == "claude-new", xdist
            assert entry["sessions"] == [N, N]
            assert entry["scores"] == [quality - 1] * (2 * N)
            assert len(entry["sources"]) == 2
    result, data = session(project, NEW)
    assert result.ret == 0
    assert data["dimensions"]["clarity"]["verdict"] == "stable"


def test_a_changed_artifact_under_the_same_judge_is_attributed_to_the_system(
    project: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = session(project, OLD, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    monkeypatch.setenv("GEN_DROP", "1")
    server.reset_stats()
    result, data = session(project, OLD, "--aimeasure-attribute")
    assert data["dimensions"]["clarity"]["verdict"] == "regressed"
    # Today's new artifacts are judged; the baseline's come back from the sample cache.
    assert server.calls_by_model == {"claude-old": ITEMS * N}
    a = data["attribution"]["clarity"]
    assert a["moved"] == "system"
    assert a["judge"]["delta"] == pytest.approx(0.0)
    low, high = a["judge"]["ci95"]
    assert low < 0 < high
    assert a["system"]["delta"] == pytest.approx(-1.0)
    assert a["system"]["verdict"] == "regressed"
    assert a["system"]["ci95"][1] < 0
    finding = attribution_finding(data)
    assert finding["severity"] == "fail"  # a real drop under one ruler fails the run
    assert result.ret == 1
    assert "the system moved, the judge did not" in finding["message"]


def test_attribution_needs_the_judge(project: pytest.Pytester) -> None:
    result = project.runpytest("--aimeasure-attribute")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--aimeasure-attribute*add --ai-judge*"])


def test_aimeasure_attribute_splits_the_change_between_two_stored_runs(
    project: pytest.Pytester, server: ProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_aimeasure.cli.main import main

    _, base = session(project, OLD)
    _, now = session(project, NEW)
    server.reset_stats()
    capsys.readouterr()
    out = project.path / "attribution.json"
    store = str(project.path / ".aimeasure")

    # --dry-run: what it would judge and cost, calling nothing
    argv = ["--store", store, "attribute", base["run_id"], now["run_id"], "--dry-run"]
    assert main([*argv, "--judge-model", PRICED]) == 0
    printed = capsys.readouterr().out
    assert server.calls == 0
    assert f"{ITEMS} stored artifact(s) of {ITEMS} item(s), {ITEMS * N} judge calls with {PRICED}" in printed
    assert re.search(rf"^clarity\s+{ITEMS * N}$", printed, re.MULTILINE), printed
    assert re.search(r"^estimated cost: \$\d+\.\d{4} \(assuming", printed, re.MULTILINE), printed
    assert main(argv) == 0  # NOW_RUN's judge has no price: the count stands, the cost is unknown
    printed = capsys.readouterr().out
    assert f"{ITEMS * N} judge calls with {NEW}" in printed and "estimated cost: unknown" in printed
    assert server.calls == 0

    status = main(["--store", store, "attribute", base["run_id"], now["run_id"], "--json", str(out)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    # NOW_RUN's judge rescored the base run's artifacts: one call per sample, counted on the server.
    assert server.calls_by_model == {"claude-new": ITEMS * N}
    a = json.loads(out.read_text())["dimensions"]["clarity"]
    assert (a["moved"], a["m"]) == ("judge", ITEMS)
    assert a["judge"]["delta"] == pytest.approx(-1.0) and a["system"]["delta"] == pytest.approx(0.0)
    assert "is the judge on unchanged artifacts" in printed
    assert main(["--store", store, "attribute", base["run_id"], "no-such-run"]) == 2


def test_the_judge_dry_run_counts_and_prices_the_attribution_calls(
    project: pytest.Pytester, server: ProviderServer
) -> None:
    from pytest_aimeasure.report.terminal import DRY_RUN_PROMPT_CHARS
    from pytest_aimeasure.store.cost import estimate_call_usd

    result, _ = session(project, OLD, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    server.reset_stats()
    argv = ("--ai-judge", "--judge-model", PRICED, "--judge-samples", str(N), "--judge-dry-run")
    result = project.runpytest(*argv, "--aimeasure-attribute")
    assert result.ret == 0, result.stdout.str()
    assert server.calls == 0
    one = estimate_call_usd("claude-sonnet-4-6", DRY_RUN_PROMPT_CHARS, 1024, provider="anthropic")
    assert one is not None
    # Every item's one stored baseline artifact, judged N times: as many calls as today's items take.
    result.stdout.fnmatch_lines(
        [
            f"aimeasure dry run: {ITEMS} dimension items, {ITEMS * N} judge calls with {PRICED}",
            f"--aimeasure-attribute: up to {ITEMS * N} more calls re-judging the baseline's stored*",
            "dimension*calls*attribution (at most)",
            f"clarity*{ITEMS * N}*{ITEMS * N}",
            f"estimated cost: ${one * ITEMS * N:.4f} + up to ${one * ITEMS * N:.4f} for attribution*",
        ]
    )
    # Without the baseline's artifacts in the store there is nothing to rejudge.
    for path in sorted((project.path / ".aimeasure" / "artifacts").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    result = project.runpytest(*argv, "--aimeasure-attribute")
    assert result.ret == 0 and server.calls == 0
    result.stdout.fnmatch_lines(["--aimeasure-attribute: up to 0 more calls*", f"clarity*{ITEMS * N}*0"])
    # Without --aimeasure-attribute the plan has no attribution column.
    result = project.runpytest(*argv)
    result.stdout.fnmatch_lines(["dimension*calls", f"clarity*{ITEMS * N}"])
    result.stdout.no_fnmatch_line("*attribution (at most)*")
    result.stdout.no_fnmatch_line("*--aimeasure-attribute*")
