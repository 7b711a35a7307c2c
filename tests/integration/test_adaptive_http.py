"""Adaptive sampling end to end: pytest sessions under ``--judge-samples auto`` judging through the real
anthropic SDK against the local provider server, with and without xdist; every call counted on the
server, per artifact. Under xdist: workers sampling adaptively (and reading the baseline for the drift
decision), and an idle worker importing no transport."""

from __future__ import annotations

import json
import textwrap
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from pytest_aimeasure.testing import ProviderServer, SeenRequest
from tests.conftest import read_results, run_session

MODEL = "anthropic/claude-test"

THREE_ITEMS = """
    import pytest

    @pytest.mark.dimension("tone", rubric="5 = calm and precise; 1 = shouting")
    @pytest.mark.parametrize("text", ["CLEAR-the fox apologised", "GOOD-the fox left", "BORDER-it sulked"])
    def test_tone(judge, text):
        judge.score(text)
"""

# Which process ran how many tests, and whether it imported the judge's transport (httpx, for anthropic/).
SDK_CONFTEST = """
import json, pathlib, sys

RAN = []


def pytest_runtest_logstart(nodeid):
    RAN.append(nodeid)


def pytest_sessionfinish(session):
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    seen = {"tests": len(RAN), "httpx": "httpx" in sys.modules}
    pathlib.Path(session.config.rootpath, f"sdk-{worker}.json").write_text(json.dumps(seen))
"""

DRIFTING = """
    import pathlib

    import pytest

    @pytest.mark.dimension("tone", floor=2.0, rubric="5 = calm and precise; 1 = shouting")
    def test_tone(judge):
        judge.score(pathlib.Path(__file__).with_name("story.txt").read_text())  # what the generator wrote
"""


class ScoresByArtifact:
    """The server's scorer: each artifact (by its text's prefix) gets its own cycle of scores, one step
    per call to it, and its calls are counted."""

    def __init__(self, cycles: dict[str, list[int]]) -> None:
        self.cycles = cycles
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, seen: SeenRequest) -> int:
        prefix = next(p for p in self.cycles if p in seen.prompt)
        with self._lock:
            k = self.calls[prefix]
            self.calls[prefix] += 1
        cycle = self.cycles[prefix]
        return cycle[k % len(cycle)]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", running.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        yield running


Run = Callable[..., pytest.RunResult]


@pytest.fixture(params=[False, True], ids=["one-process", "xdist"])
def run(request: pytest.FixtureRequest, pytester: pytest.Pytester) -> Run:
    """A session in this process, or (the xdist variant) with ``workers`` xdist workers (two unless
    said); ``workers=0`` keeps a session of the xdist variant in-process where only its outputs matter
    to the next one."""

    def session(*args: str, workers: int = 2) -> pytest.RunResult:
        argv = ("--ai-judge", "--judge-model", MODEL, "--judge-samples", "auto", "--aimeasure-json")
        argv += ("out.json",)
        xdist = ("-n", str(workers)) if request.param and workers else ()
        return run_session(pytester, *argv, *xdist, *args)

    return session


def test_clear_items_stop_at_the_minimum_and_a_borderline_item_takes_more(
    pytester: pytest.Pytester, server: ProviderServer, run: Run, request: pytest.FixtureRequest
) -> None:
    """5,5,5 and 4,4,4 against a floor of 3 are settled after 3 calls; 3,4,3,4,... keeps the floor
    inside its interval at every look, so it takes the maximum, 9, and says the floor stayed open."""
    scores = ScoresByArtifact({"CLEAR-": [5], "GOOD-": [4], "BORDER-": [3, 4]})
    server.scorer = scores
    pytester.makepyfile(test_items=textwrap.dedent(THREE_ITEMS))
    pytester.makeconftest(SDK_CONFTEST)
    result = run()
    result.assert_outcomes(passed=3)
    assert dict(scores.calls) == {"CLEAR-": 3, "GOOD-": 3, "BORDER-": 9}
    if "xdist" in request.node.callspec.id:
        # One module runs on one worker: the other, given no test, never imports the judge's transport.
        seen = [json.loads(p.read_text()) for p in pytester.path.glob("sdk-gw*.json")]
        assert sorted((s["tests"], s["httpx"]) for s in seen) == [(0, False), (3, True)]
    assert server.judge_calls == 15

    data = read_results(pytester.path / "out.json")
    by_text = {item["nodeid"].split("[")[1].split("-")[0]: item["measurements"][0] for item in data["items"]}
    assert {k: (m["n"], m["adaptive"]["stopped"], m["adaptive"]["open"]) for k, m in by_text.items()} == {
        "CLEAR": (3, "settled", []),
        "GOOD": (3, "settled", []),
        "BORDER": (9, "maximum", ["floor"]),
    }
    assert by_text["BORDER"]["mean"] == pytest.approx(31 / 9)
    assert data["sampling"] == {
        "items": 3,
        "minimum": 3,
        "maximum": 9,
        "samples": 15,
        "mean_samples": 5.0,
        "at_minimum": 2,
        "stopped": {"settled": 2, "agreed": 0, "maximum": 1, "budget": 0},
        "open_at_stop": {"floor": 1, "drift": 0},
    }
    assert data["spend"]["calls"] == 15
    line = "adaptive sampling: 3 items, n=3..9, mean 5.0 samples an item; 2 stopped at 3, 1 reached 9"
    line += " (floor open 1)"
    assert line in result.stdout.str()


def test_an_open_drift_decision_takes_more_samples_and_a_rerun_reuses_them(
    pytester: pytest.Pytester, server: ProviderServer, run: Run
) -> None:
    """Session 1 (--update-baseline): 4,4,4, clear of the floor of 2, no baseline yet: 3 calls. Session
    2, a new output of the generator: 4,3,4,3,... (3.67 → 3.56) is as clear of the floor, but
    x̄_base − tolerance = 3.5 stays inside its interval: the drift decision keeps it sampling to 9
    (xdist workers read the baseline too: the one session the xdist variant runs with workers). Session
    3, the same output again: all 9 samples come from the cache (the count is not in the cache key),
    none from the server."""
    pytester.makepyfile(test_drift=textwrap.dedent(DRIFTING))
    story = pytester.path / "story.txt"
    story.write_text("DRIFT-the fox mended the fence")
    first = ScoresByArtifact({"DRIFT-": [4]})
    server.scorer = first
    run("--update-baseline", workers=0).assert_outcomes(passed=1)
    assert first.calls["DRIFT-"] == 3

    story.write_text("DRIFT-the fox mended the fence, then the gate")
    second = ScoresByArtifact({"DRIFT-": [4, 3]})
    server.scorer = second
    result = run(workers=1)  # one module: one worker (ONE_WORKER)
    result.assert_outcomes(passed=1)
    assert second.calls["DRIFT-"] == 9
    measurement = read_results(pytester.path / "out.json")["items"][0]["measurements"][0]
    assert (measurement["n"], measurement["adaptive"]["open"]) == (9, ["drift"])

    third = ScoresByArtifact({"DRIFT-": [1]})  # any call now would show as a 1
    server.scorer = third
    result = run(workers=0)
    result.assert_outcomes(passed=1)
    assert third.calls["DRIFT-"] == 0
    again = read_results(pytester.path / "out.json")["items"][0]["measurements"][0]
    assert [s["score"] for s in again["samples"]] == [s["score"] for s in measurement["samples"]]
