"""The drift rule on the path users take (issue 19), one test per cause the issue reproduced.

1. A drop the pooled baseline shows clearly must fail the run: the dimension test is no longer taxed
   by the powerless item tests (gatekeeping instead of Holm over items and dimension).
2. At N = 5 with a one-session baseline, one item moving a point while the others held still must
   not fail the run: an item test carries a between-session term N cannot shrink.
3. A lucky one-session baseline must not fail an unchanged run, and the report says how many
   sessions the baseline holds and what pooling would buy.

The scripted judge reads each session's scores from ``session.json`` (item → its samples).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import read_results
from tests.scripted import SCRIPTED_ARGS

CONFTEST = """
import json, pathlib

def pytest_aimeasure_scripted_verdict(call, config):
    table = json.loads(pathlib.Path(config.rootpath, "session.json").read_text())
    k = int(call.nodeid.split("[")[-1].rstrip("]"))
    return table[k][call.index], f"item {k} #{call.index}"
"""

ITEMS = """
import pytest

@pytest.mark.dimension("clarity", rubric="5 = clear", floor=1.0)
@pytest.mark.parametrize("k", range(5))
def test_clarity(k, judge):
    judge.score(f"output of item {k}")
"""


def run(pytester: pytest.Pytester, scores: list[list[int]], *extra: str) -> tuple[int, Any, str]:
    (pytester.path / "session.json").write_text(json.dumps(scores))
    samples = str(len(scores[0]))
    result = pytester.runpytest(
        *SCRIPTED_ARGS, "--judge-samples", samples, "--aimeasure-json", "out.json", *extra
    )
    return int(result.ret), read_results(pytester.path / "out.json"), result.stdout.str()


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_clarity=ITEMS)
    return pytester


def constant(means: list[int], n: int) -> list[list[int]]:
    """A temperature-0 judge: every sample of an item agrees."""
    return [[m] * n for m in means]


def test_a_clear_drop_against_a_pooled_baseline_fails_the_run(project: pytest.Pytester) -> None:
    # Five unchanged sessions of a moving generator, pooled by --update-baseline.
    for means in ([5, 3, 4, 3, 4], [3, 4, 5, 4, 3], [4, 5, 3, 3, 4], [4, 3, 4, 5, 4], [3, 4, 4, 3, 5]):
        code, _, _ = run(project, constant(means, 3), "--update-baseline")
        assert code == 0
    baseline = json.loads((project.path / "aimeasure-baseline.json").read_text())
    assert all(e["sessions"] == [3] * 5 for e in baseline["entries"].values())

    code, data, _ = run(project, constant([3, 3, 3, 2, 3], 3))
    clarity = data["dimensions"]["clarity"]
    assert (code, clarity["verdict"]) == (pytest.ExitCode.TESTS_FAILED, "regressed")
    # D = −1.04 over five items, SE ≈ 0.36 (24 df): one-sided p ≈ 0.004. Holm over the dimension and its
    # five item tests asked p ≤ 0.025/6 and let the run pass; the dimension now starts at 0.9 · 1%.
    assert clarity["delta"] == pytest.approx(-1.04)
    assert clarity["p_value"] < 0.009
    assert (clarity["verdict"], clarity["rejected"]) == ("regressed", True)
    assert code == pytest.ExitCode.TESTS_FAILED
    assert any("regressions against the baseline" in r for r in data["failed_because"])
    # One change, one finding: the dimension that decided it.
    assert [(f["kind"], f["subject"]) for f in data["findings"] if f["kind"] == "regressed"] == [
        ("regressed", "clarity")
    ]


def test_one_item_moving_a_point_at_n5_against_a_one_session_baseline_passes(
    project: pytest.Pytester,
) -> None:
    code, _, _ = run(project, constant([4, 3, 4, 3, 4], 5), "--update-baseline")
    assert code == 0
    code, data, _ = run(project, constant([4, 3, 3, 3, 4], 5))
    assert code == pytest.ExitCode.OK, data["failed_because"]
    moved = next(i["comparison"] for i in data["items"] if i["nodeid"].endswith("[2]"))
    # The other items held still, so their spread is 0, and the samples agree: only the prior's
    # between-session term says how far one item moves between sessions.
    assert moved["delta"] == pytest.approx(-1.0)
    assert moved["se_source"] == "prior" and moved["se"] > 0.7
    assert moved["verdict"] == "inconclusive"
    assert code == pytest.ExitCode.OK, data["failed_because"]


def test_a_lucky_one_session_baseline_does_not_fail_an_unchanged_run_and_says_it_is_one_session(
    project: pytest.Pytester,
) -> None:
    lucky = [[5, 4, 5], [4, 5, 4], [5, 5, 4], [4, 5, 5], [5, 4, 4]]
    code, _, _ = run(project, lucky, "--update-baseline")
    assert code == 0
    code, data, out = run(project, [[4, 4, 4], [4, 4, 3], [4, 5, 4], [4, 3, 4], [4, 4, 4]])
    clarity = data["dimensions"]["clarity"]
    assert code == pytest.ExitCode.OK, data["failed_because"]
    # D = −0.6 past the tolerance, but one session cannot rule out a shift of the whole session.
    assert clarity["delta"] == pytest.approx(-0.6)
    assert clarity["shared_source"] == "prior" and clarity["verdict"] == "inconclusive"
    assert code == pytest.ExitCode.OK, data["failed_because"]
    assert clarity["baseline_sessions"] == 1
    assert "the baseline holds 1 session; pooled from 5 sessions" in out
