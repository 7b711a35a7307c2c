"""The drift rule against a generator whose item quality moves between sessions (issue 14, item 0).

The scripted judge is deterministic (all N samples of an item agree, as at temperature 0), but each
session's output of item k is better or worse by a seeded N(0, 0.5²) amount, like a
non-deterministic generator. The old rule took its error bar from the samples' spread alone and
failed such A/A sessions (57% of them at N = 5); the new one must pass them, and still fail a real
drop of one point across the items.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import ONE_WORKER, read_results

CONFTEST = """
import json, pathlib, random

def pytest_aimeasure_scripted_verdict(call, config):
    state = json.loads(pathlib.Path(config.rootpath, "session.json").read_text())
    k = int(call.nodeid.split("[")[-1].rstrip("]"))
    # This session's output of item k: its own quality, moved by the generator's session noise.
    quality = 2.5 + (k % 5) * 0.4 + random.Random(f"{k}/{state['session']}").gauss(0.0, 0.5)
    score = min(5, max(1, int(quality + state["shift"] + 0.5)))
    return score, f"item {k}, session {state['session']}"
"""

ITEMS = """
import pytest

@pytest.mark.dimension("clarity", rubric="5 = clear", floor=1.0)
@pytest.mark.parametrize("k", range(12))
def test_clarity(k, judge):
    judge.score(f"output of item {k}")
"""

ARGS = ("--ai-judge", "--judge-model", "scripted", "--judge-cache=off", "-p", "no:randomly")


def session(pytester: pytest.Pytester, number: int, *extra: str, shift: float = 0.0) -> tuple[int, Any]:
    (pytester.path / "session.json").write_text(json.dumps({"session": number, "shift": shift}))
    result = pytester.runpytest(*ARGS, "--aimeasure-json", "out.json", *extra)
    return int(result.ret), read_results(pytester.path / "out.json")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_clarity=ITEMS)
    for number in range(4):  # the team re-baselined over four sessions, N = 3
        code, _ = session(pytester, number, "--update-baseline", "--judge-samples", "3")
        assert code == 0
    return pytester


def _moved_items(data: dict[str, Any]) -> int:
    deltas = [(item.get("comparison") or {}).get("delta") for item in data["items"]]
    return sum(1 for delta in deltas if delta is not None and abs(delta) >= 1)


def _passes_as_a_a(code: int, data: dict[str, Any], number: int) -> None:
    dimension = data["dimensions"]["clarity"]
    assert code == 0, (number, dimension, data["failed_because"])
    assert dimension["verdict"] != "not_comparable"  # N is not part of the fingerprint
    assert dimension["history_sessions"] == 4  # the pooled sessions give the between-session spread


def test_aa_sessions_of_a_moving_generator_pass_and_a_one_point_drop_fails(project: pytest.Pytester) -> None:
    baseline = json.loads((project.path / "aimeasure-baseline.json").read_text())
    assert baseline["format"] == 2
    entry = next(iter(baseline["entries"].values()))
    assert entry["sessions"] == [3, 3, 3, 3]  # pooled, not the last session frozen
    assert "samples" not in entry["fingerprint"]

    moved = 0
    for number in range(10, 14):  # four A/A sessions, at N = 5: more samples, same ruler
        code, data = session(project, number, "--judge-samples", "5")
        _passes_as_a_a(code, data, number)
        moved += _moved_items(data)
    # The samples of an item agree, yet items moved by a point or more between sessions: the old rule
    # (SE from the samples' spread, floored at 1/12) called such moves significant.
    assert moved >= 4
    # The first again under xdist (the rule itself is the controller's; one module, one worker), then
    # the drop, in one process and under xdist.
    code, data = session(project, 10, "--judge-samples", "5", *ONE_WORKER)
    _passes_as_a_a(code, data, 10)
    for xdist in ((), ONE_WORKER):
        code, data = session(project, 20, "--judge-samples", "5", *xdist, shift=-1.0)
        assert data["dimensions"]["clarity"]["verdict"] == "regressed", xdist
        assert code == pytest.ExitCode.TESTS_FAILED
        assert any("regressions against the baseline" in r for r in data["failed_because"])
