"""Confirming a suspected drop by judging the baseline's outputs again (issue 19), end to end: pytest
sessions judging stored artifacts through the real anthropic SDK against the local provider server,
whose scorer reads each artifact's quality (``QUALITY=n``) from the prompt and, in a lucky session,
scores most stories a point high (a judge whose whole session ran high: the shift the drift rule
must allow for against a one-session baseline). Calls are counted on the server, by the artifact
they judged.

The sizes are chosen so that the drift rule alone decides the other way from the rule with its
second test: a real drop of 1 on 7 of 10 items (Δ −0.7) is inconclusive against one session and
confirmed once the baseline's outputs are judged again; a lucky session on 8 of 10 items (Δ −0.8)
fails an unchanged run without the second test and passes with it.

Each case runs in one process and under xdist (the controller confirms after its worker measured)."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest
from tests.conftest import ONE_WORKER, read_results
from tests.integration.test_report import browser, open_report

__all__ = ["browser"]  # the real browser's fixture, shared with the report's tests

MODEL = "anthropic/claude-sonnet-4-6"
QUALITIES = [3, 4] * 5
ITEMS = len(QUALITIES)
DROPPED = 7  # items GEN_DROP lowers
LUCKY = 8  # items a lucky session's judge scores a point high
N = 3
XDIST = pytest.mark.parametrize("xdist", [(), ONE_WORKER], ids=["one-process", "xdist"])

# GEN_DROP lowers every artifact's quality: a real change of the system under test.
TEST_MODULE = f"""
    import os
    import pytest

    QUALITIES = {QUALITIES}

    @pytest.mark.parametrize("k", range(len(QUALITIES)))
    @pytest.mark.dimension("clarity", rubric="5 = clear; 1 = muddled", floor=1.5)
    def test_clarity(k, judge, aimeasure_artifact):
        drop = int(os.environ.get("GEN_DROP", "0")) if k < {DROPPED} else 0
        story = aimeasure_artifact(f"story-{{k}}", lambda: f"Story {{k}}. QUALITY={{QUALITIES[k] - drop}}")
        judge.score(story)
"""


class Judge:
    """The server's scorer: an artifact's quality, a point higher for the first LUCKY stories in a
    lucky session."""

    def __init__(self) -> None:
        self.lucky = False
        self.lucky_items = LUCKY
        self.refuse: set[str] = set()
        """Artifacts (their text) the judge answers out of range, every time."""

    def __call__(self, seen: SeenRequest) -> int | Fault:
        found = re.search(r"Story (\d+)\. QUALITY=(\d)", seen.prompt)
        assert found, seen.prompt
        if found.group(0) in self.refuse:
            return Fault.out_of_range()
        story, quality = int(found.group(1)), int(found.group(2))
        return quality + (1 if self.lucky and story < self.lucky_items else 0)


@pytest.fixture
def judge_offset() -> Judge:
    return Judge()


@pytest.fixture
def server(serve: Callable[[Judge], ProviderServer], judge_offset: Judge) -> ProviderServer:
    return serve(judge_offset)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_clarity=textwrap.dedent(TEST_MODULE))
    return pytester


def session(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    argv: tuple[str, ...] = (
        "--ai-judge",
        "--judge-model",
        MODEL,
        "--judge-samples",
        str(N),
        "--aimeasure-json",
        "out.json",
    )
    if "--update-baseline" in args:
        argv += ("--aimeasure-baseline-repeats", "1")  # one output: the store keeps one per item
    result = pytester.runpytest(*argv, *args)
    return result, read_results(pytester.path / "out.json")


def judged_qualities(server: ProviderServer) -> list[int]:
    """The quality of the artifact each judge call the server saw since its last reset judged."""
    return sorted(int(re.search(r"QUALITY=(\d)", r.prompt).group(1)) for r in server.requests)  # type: ignore[union-attr]


def baseline_once(project: pytest.Pytester, server: ProviderServer, judge: Judge, *, lucky: bool) -> str:
    """One ``--update-baseline`` session (the default path's one session), with a lucky judge or not;
    returns the baseline file's text."""
    judge.lucky = lucky
    result, _ = session(project, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    judge.lucky = False
    server.reset_stats()
    return (project.path / "aimeasure-baseline.json").read_text()


def confirmed_drop(
    project: pytest.Pytester, server: ProviderServer, baseline: str, xdist: tuple[str, ...]
) -> tuple[pytest.RunResult, dict[str, Any]]:
    """A session after GEN_DROP whose second test confirms the drop: the run fails, the baseline file
    is left as it was, and the server judged the baseline's stored outputs (each story once, N
    times, with fresh calls) and nothing else (today's outputs come from the cache)."""
    server.reset_stats()
    result, data = session(project, *xdist)
    assert result.ret == 1, result.stdout.str()
    assert (project.path / "aimeasure-baseline.json").read_text() == baseline
    assert judged_qualities(server) == sorted(q for q in QUALITIES for _ in range(N))
    clarity = data["dimensions"]["clarity"]
    assert clarity["verdict"] == "regressed" and clarity["rejected"] is True
    c = clarity["confirmation"]
    assert c["ran"] and c["confirmed"] and c["calls"] == ITEMS * N
    assert c["delta"] == pytest.approx(-0.7)
    assert c["rejudged_mean"] == pytest.approx(sum(QUALITIES) / ITEMS)
    return result, data


@XDIST
def test_a_real_drop_against_one_session_is_confirmed_by_judging_the_baseline_again(
    project: pytest.Pytester,
    server: ProviderServer,
    judge_offset: Judge,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    baseline = baseline_once(project, server, judge_offset, lucky=False)
    monkeypatch.setenv("GEN_DROP", "1")

    # The rule alone: 7 of 10 items a point lower, but against one session it must allow for a
    # shift of the whole session, so it cannot call it.
    result, data = session(project, "--aimeasure-confirm", "off", *xdist)
    assert result.ret == 0, result.stdout.str()
    clarity = data["dimensions"]["clarity"]
    assert clarity["delta"] == pytest.approx(-0.7)
    assert clarity["verdict"] == "inconclusive" and clarity["confirmation"] is None
    assert clarity["shared_source"] == "prior"
    # The dropped items' new outputs only: the others are the baseline's, served from the cache.
    assert judged_qualities(server) == sorted(q - 1 for q in QUALITIES[:DROPPED] for _ in range(N))

    # By default the baseline's stored outputs are judged again, with fresh calls although the cache
    # holds their samples, and against them today's outputs are lower: the run fails.
    result, data = confirmed_drop(project, server, baseline, xdist)
    assert data["dimensions"]["clarity"]["confirmation"]["delta_ci"][1] < 0
    (regressed,) = [f for f in data["findings"] if f["kind"] == "regressed"]
    assert regressed["severity"] == "fail"
    assert "regressed, confirmed by judging the baseline's outputs again today" in regressed["message"]
    result.stdout.fnmatch_lines(
        ["*clarity*regressed, confirmed by judging the baseline's outputs again today: 3.50 → 2.80 (Δ -0.70*"]
    )

    # With attribution too, the confirmed drop is attributed to the system (the judge did not move).
    result, data = session(project, "--aimeasure-attribute", *xdist)
    assert result.ret == 1, result.stdout.str()
    assert data["dimensions"]["clarity"]["confirmation"]["confirmed"] is True
    assert data["attribution"]["clarity"]["moved"] == "system"


@XDIST
def test_a_real_drop_against_three_pooled_sessions_is_confirmed_by_judging_every_session_again(
    project: pytest.Pytester,
    server: ProviderServer,
    judge_offset: Judge,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    # Three updates, the second's judge a point high on 6 of 10 stories (too few to count as an
    # improvement, so the three sessions pool): the rule measures that shift with 2 df.
    judge_offset.lucky_items = 6
    for lucky in (False, True, False):
        judge_offset.lucky = lucky
        result, _ = session(project, "--update-baseline", "--judge-cache=off")
        assert result.ret == 0, result.stdout.str()
    judge_offset.lucky = False
    baseline = (project.path / "aimeasure-baseline.json").read_text()
    assert {len(e["sessions"]) for e in json.loads(baseline)["entries"].values()} == {3}
    monkeypatch.setenv("GEN_DROP", "1")

    # The rule alone leaves the drop inconclusive.
    server.reset_stats()
    result, data = session(project, "--aimeasure-confirm", "off", *xdist)
    assert result.ret == 0, result.stdout.str()
    clarity = data["dimensions"]["clarity"]
    assert clarity["verdict"] == "inconclusive" and clarity["confirmation"] is None
    assert clarity["shared_source"] == "history" and clarity["baseline_sessions"] == 3

    # Another store (its outputs are not there): nothing is planned, and the report says so.
    result, data = session(project, "--aimeasure-store", "elsewhere", *xdist)
    assert result.ret == 0, result.stdout.str()
    assert data["dimensions"]["clarity"]["confirmation"] is None
    (why,) = [f for f in data["findings"] if f["kind"] == "confirmation"]
    assert why["subject"] == "clarity" and "pool 10 sessions, which measure the shift" in why["message"]

    # By default every pooled session's outputs are judged again today (the three sessions stored
    # the same story, judged once with fresh calls); they score alike, and the drop is confirmed.
    confirmed_drop(project, server, baseline, xdist)


@XDIST
def test_a_real_drop_against_ten_pooled_sessions_is_confirmed_by_judging_every_session_again(
    project: pytest.Pytester,
    server: ProviderServer,
    judge_offset: Judge,
    monkeypatch: pytest.MonkeyPatch,
    xdist: tuple[str, ...],
) -> None:
    # Ten updates (the default pool), every other one's judge a point high on 6 of 10 stories: the
    # baseline reads 0.3 high, and its sessions' spread is a session-wide shift the rule measures
    # from the ten (9 df).
    judge_offset.lucky_items = 6
    for k in range(10):
        judge_offset.lucky = k % 2 == 0
        result, _ = session(project, "--update-baseline", "--judge-cache=off")
        assert result.ret == 0, result.stdout.str()
    judge_offset.lucky = False
    baseline = (project.path / "aimeasure-baseline.json").read_text()
    assert {len(e["sessions"]) for e in json.loads(baseline)["entries"].values()} == {10}
    monkeypatch.setenv("GEN_DROP", "1")

    # The rule alone measures the drop against the lucky sessions' scores: Δ −1.0, not the −0.7 it is.
    result, data = session(project, "--aimeasure-confirm", "off", *xdist)
    clarity = data["dimensions"]["clarity"]
    assert clarity["shared_source"] == "history" and clarity["baseline_sessions"] == 10
    assert clarity["delta"] == pytest.approx(-1.0) and clarity["confirmation"] is None
    assert clarity["verdict"] == "regressed" and result.ret == 1
    # Another store: nothing to judge again, and the rule keeps its whole level.
    result, data = session(project, "--aimeasure-store", "elsewhere", *xdist)
    assert data["dimensions"]["clarity"]["confirmation"] is None and result.ret == 1

    # By default, with the rule at its share, the ten sessions' outputs are judged again today (the
    # same stories: each once, N times): they score what the unlucky judge scores, and the drop
    # confirmed is the −0.7 it is. Before, ten sessions planned no second test.
    confirmed_drop(project, server, baseline, xdist)


@XDIST
def test_a_lucky_first_baseline_is_not_a_drop_once_its_outputs_are_judged_again(
    project: pytest.Pytester,
    server: ProviderServer,
    judge_offset: Judge,
    xdist: tuple[str, ...],
) -> None:
    # The baseline's session had a judge that scored 8 of 10 outputs a point high; nothing else moved.
    baseline_once(project, server, judge_offset, lucky=True)

    # Today's outputs are the baseline's; with the cache off (the lucky session's verdicts would be
    # served again) today's judge scores them as they are. The rule alone, at the whole level,
    # calls the lucky session's scores a drop.
    result, data = session(project, "--judge-cache=off", "--aimeasure-confirm", "off", *xdist)
    assert result.ret == 1, result.stdout.str()
    assert data["dimensions"]["clarity"]["verdict"] == "regressed"

    # Judged again today, the baseline's outputs score what today's do: no drop, the run passes and
    # the finding says what the second test saw.
    server.reset_stats()
    result, data = session(project, "--judge-cache=off", *xdist)
    assert result.ret == 0, result.stdout.str()
    assert judged_qualities(server) == sorted(2 * [q for q in QUALITIES for _ in range(N)])
    clarity = data["dimensions"]["clarity"]
    assert clarity["verdict"] == "inconclusive" and clarity["delta"] == pytest.approx(-0.8)
    c = clarity["confirmation"]
    assert c["ran"] and not c["confirmed"] and c["delta"] == pytest.approx(0.0)
    (looks_lower,) = [f for f in data["findings"] if f["kind"] == "inconclusive"]
    assert looks_lower["subject"] == "clarity"
    assert "no drop confirmed" in looks_lower["message"]
    assert looks_lower["detail"]["confirmation"]["calls"] == ITEMS * N


def test_without_the_baselines_outputs_in_the_store_the_rule_keeps_its_whole_level(
    project: pytest.Pytester, server: ProviderServer, judge_offset: Judge, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline_once(project, server, judge_offset, lucky=False)
    monkeypatch.setenv("GEN_DROP", "1")

    # Another store (a fresh clone, whose store is not committed): no second test is planned, and
    # the rule decides at the dimension's whole level (0.9% of the family's 1%), as with
    # --aimeasure-confirm off: the drop stays inconclusive, and the report says what would confirm it.
    result, data = session(project, "--aimeasure-store", "elsewhere")
    assert result.ret == 0, result.stdout.str()
    clarity = data["dimensions"]["clarity"]
    assert clarity["verdict"] == "inconclusive" and clarity["confirmation"] is None
    assert clarity["level"] == pytest.approx(0.009)
    # Today's outputs once (a new store: no sample cached), nothing judged again.
    today = [q - 1 if k < DROPPED else q for k, q in enumerate(QUALITIES)]
    assert judged_qualities(server) == sorted(q for q in today for _ in range(N))
    (why,) = [f for f in data["findings"] if f["kind"] == "confirmation"]
    assert why["subject"] == "clarity" and why["severity"] == "info"
    assert "were not in the store at the session's start" in why["message"]


def test_a_suspected_drop_costs_the_second_test_only_where_it_looks_lower(
    project: pytest.Pytester, server: ProviderServer, judge_offset: Judge
) -> None:
    baseline_once(project, server, judge_offset, lucky=False)
    result, data = session(project)
    assert result.ret == 0, result.stdout.str()
    clarity = data["dimensions"]["clarity"]
    assert clarity["delta"] == pytest.approx(0.0)
    assert clarity["confirmation"] == {**clarity["confirmation"], "ran": False, "calls": 0}
    assert judged_qualities(server) == []
    assert not [f for f in data["findings"] if f["subject"] == "clarity" and f["severity"] != "info"]
    baseline = json.loads((project.path / "aimeasure-baseline.json").read_text())
    assert len(baseline["entries"]) == ITEMS


def test_outputs_that_cannot_be_judged_again_leave_the_drop_unconfirmed_and_say_why(
    project: pytest.Pytester, server: ProviderServer, judge_offset: Judge, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline_once(project, server, judge_offset, lucky=False)
    monkeypatch.setenv("GEN_DROP", "1")
    # The judge never gives a valid verdict for the baseline's first story (today's is another text).
    judge_offset.refuse = {f"Story 0. QUALITY={QUALITIES[0]}"}

    result, data = session(project)
    assert result.ret == 0, result.stdout.str()
    clarity = data["dimensions"]["clarity"]
    assert clarity["verdict"] == "inconclusive"
    assert clarity["confirmation"]["ran"] is False  # planned, but one item was not judged again
    (why,) = [f for f in data["findings"] if f["kind"] == "confirmation"]
    assert why["subject"] == "clarity" and why["severity"] == "info"
    assert "could not be judged again to confirm it: rejudging failed" in why["message"]
    assert list(why["detail"]["skipped"]) == ["clarity::test_clarity.py::test_clarity[0]"]


def test_a_confirmed_drop_reads_so_in_the_html_report_in_a_real_browser(
    project: pytest.Pytester,
    server: ProviderServer,
    judge_offset: Judge,
    monkeypatch: pytest.MonkeyPatch,
    browser: Any,
) -> None:
    baseline_once(project, server, judge_offset, lucky=False)
    monkeypatch.setenv("GEN_DROP", "1")
    result, _ = session(project, "--aimeasure-html", "report.html")
    assert result.ret == 1, result.stdout.str()
    page, problems, _requests = open_report(browser, Path(project.path / "report.html"))
    try:
        assert problems == []
        row = page.locator("td.v-regressed").first
        assert row.is_visible()
        assert (row.text_content() or "").strip() == (
            "regressed (confirmed by judging the baseline's outputs again)"
        )
    finally:
        page.close()


def test_the_dry_run_says_what_confirming_a_suspected_drop_may_cost(
    project: pytest.Pytester, server: ProviderServer, judge_offset: Judge
) -> None:
    baseline_once(project, server, judge_offset, lucky=False)
    result = project.runpytest("--judge-dry-run", "--judge-samples", str(N))
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"--aimeasure-confirm rejudge: up to {ITEMS * N} more calls judging the baseline's stored outputs*"]
    )
    assert server.requests == []
    result = project.runpytest("--judge-dry-run", "--judge-samples", str(N), "--aimeasure-confirm", "off")
    result.stdout.no_fnmatch_line("*--aimeasure-confirm*")
