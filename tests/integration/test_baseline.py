"""Baseline comparison and update through the plugin, with the scripted judge and known scores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ONE_WORKER, read_results
from tests.scripted import SCRIPTED_ARGS, scores_conftest

CONFTEST = scores_conftest()

FIVE_ITEMS = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
@pytest.mark.parametrize("case", ["a", "b", "c", "d", "e"])
def test_tone(case, judge):
    judge.score(f"artifact {case}")
"""

ARGS = SCRIPTED_ARGS


def scores(pytester: pytest.Pytester, per_item: dict[str, list[int]]) -> None:
    (pytester.path / "scores.json").write_text(json.dumps(per_item))


def five(values: list[int]) -> dict[str, list[int]]:
    return {f"test_tone[{c}]": values for c in "abcde"}


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_tone=FIVE_ITEMS)
    scores(pytester, five([4, 4, 4]))
    result = pytester.runpytest(*ARGS, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    return pytester


def run(pytester: pytest.Pytester, *extra: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest(*ARGS, "--aimeasure-json", "out.json", *extra)
    return result, read_results(pytester.path / "out.json")


def verdicts(data: dict[str, Any]) -> dict[str, str]:
    return {item["nodeid"].split("::")[-1]: item["verdict"] for item in data["items"]}


def test_true_drop_of_one_point_across_five_items_is_regressed_and_fails(project: pytest.Pytester) -> None:
    scores(project, five([3, 3, 3]))
    result, data = run(project)
    assert data["dimensions"]["tone"]["verdict"] == "regressed"
    # The family covers every comparable item and dimension: single items may stay inconclusive
    assert set(verdicts(data).values()) <= {"regressed", "inconclusive"}
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert any("regressions against the baseline" in r for r in data["failed_because"])
    result.stdout.fnmatch_lines(["*tone (dimension, 5 items)*4.00*3.00*-1.00*regressed*"])
    result.stdout.fnmatch_lines(
        ["*accept it with  pytest --ai-judge --judge-model scripted *--update-baseline"]
    )


def test_unchanged_scores_are_stable_and_quiet(project: pytest.Pytester) -> None:
    result, data = run(project)
    assert data["dimensions"]["tone"]["verdict"] == "stable"
    assert result.ret == 0
    assert data["passed"] is True
    result.stdout.fnmatch_lines(
        ["aimeasure: nothing needs a look against aimeasure-baseline.json; stable: tone (5 items)."]
    )


def test_improvement_is_reported_as_stale_baseline_and_never_fails(project: pytest.Pytester) -> None:
    scores(project, five([5, 5, 5]))
    result, data = run(project)
    assert data["dimensions"]["tone"]["verdict"] == "improved"
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*improved (baseline stale)*"])


def test_changed_judge_is_not_comparable_never_regressed(project: pytest.Pytester) -> None:
    project.makepyfile(judgemod="TABLE = {'tone': [3, 3, 3]}")
    result = project.runpytest(
        "--ai-judge",
        "--judge-model",
        "scripted:judgemod:TABLE",
        "-p",
        "no:randomly",
        "--aimeasure-json",
        "out.json",
    )
    data = read_results(project.path / "out.json")
    assert data["dimensions"]["tone"]["verdict"] == "not_comparable"
    assert "regressed" not in verdicts(data).values()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*not comparable (model)*re-baseline*"])
    # re-baselining after a deliberate judge change is the fix, and passes
    result = project.runpytest(
        "--ai-judge", "--judge-model", "scripted:judgemod:TABLE", "-p", "no:randomly", "--update-baseline"
    )
    assert result.ret == 0
    entry = json.loads((project.path / "aimeasure-baseline.json").read_text())["entries"]
    assert {e["fingerprint"]["model"] for e in entry.values()} == {"scripted:judgemod:TABLE"}


@pytest.mark.parametrize(("drift", "expected"), [("warn", 0), ("off", 0), ("fail", 1)])
def test_drift_option_governs_regressions(project: pytest.Pytester, drift: str, expected: int) -> None:
    scores(project, five([3, 3, 3]))
    result, data = run(project, f"--aimeasure-drift={drift}")
    assert result.ret == expected
    assert data["passed"] is (expected == 0)


def test_noisy_small_change_is_inconclusive_with_its_mde_and_passes(project: pytest.Pytester) -> None:
    scores(
        project,
        {
            "test_tone[a]": [4, 2, 5],
            "test_tone[b]": [4, 4, 3],
            "test_tone[c]": [5, 3, 4],
            "test_tone[d]": [4, 4, 4],
            "test_tone[e]": [3, 5, 4],
        },
    )
    result, data = run(project)
    dim = data["dimensions"]["tone"]
    assert dim["verdict"] == "inconclusive"
    assert dim["mde"] > 0
    assert result.ret == 0


def test_update_merges_keeps_unrun_entries_and_prunes_only_on_whole_suite(project: pytest.Pytester) -> None:
    baseline = project.path / "aimeasure-baseline.json"
    before = json.loads(baseline.read_text())["entries"]
    assert len(before) == 5
    scores(project, five([2, 2, 2]))
    result = project.runpytest(
        *ARGS, "test_tone.py::test_tone[a]", "test_tone.py::test_tone[b]", "--update-baseline"
    )
    result.stdout.fnmatch_lines(
        ["*baseline *: 0 added, 2 updated, 0 removed, 0 unchanged, 3 kept (not run)*"]
    )
    after = json.loads(baseline.read_text())["entries"]
    assert set(after) == set(before)
    assert after["tone::test_tone.py::test_tone[a]"]["scores"] == [2, 2, 2]
    assert after["tone::test_tone.py::test_tone[c]"]["scores"] == [4, 4, 4]
    # a subset run with --prune-baseline removes entries of tests that did not run
    project.runpytest(*ARGS, "test_tone.py::test_tone[a]", "--update-baseline", "--prune-baseline")
    assert set(json.loads(baseline.read_text())["entries"]) == {"tone::test_tone.py::test_tone[a]"}
    # a renamed test: the whole suite ran, so the stale entry goes without --prune-baseline
    project.makepyfile(test_tone=FIVE_ITEMS.replace('"e"]', '"e", "f"]'))
    scores(project, {**five([4, 4, 4]), "test_tone[f]": [4, 4, 4]})
    project.runpytest(*ARGS, "--update-baseline")
    entries = json.loads(baseline.read_text())["entries"]
    assert len(entries) == 6


def test_judge_error_keeps_the_old_entry_and_says_so(project: pytest.Pytester) -> None:
    table = five([4, 4, 4])
    table["test_tone[c]"] = ["bad", "bad", "bad"]  # type: ignore[list-item]
    scores(project, table)
    result = project.runpytest(*ARGS, "--update-baseline")
    result.stdout.fnmatch_lines(["*: 0 added, * 0 removed, *, 1 kept (judge error)"])
    entries = json.loads((project.path / "aimeasure-baseline.json").read_text())["entries"]
    assert entries["tone::test_tone.py::test_tone[c]"]["scores"] == [4, 4, 4]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{ not json", "line 1"),
        ('{"format": 99, "entries": {}, "dimensions": {}}', "format"),
        ('{"format": 1, "entries": {"x": {"scores": "high"}}, "dimensions": {}}', "entries.x"),
    ],
)
def test_corrupt_baseline_is_a_usage_error_and_left_untouched(
    project: pytest.Pytester, content: str, expected: str
) -> None:
    baseline = project.path / "aimeasure-baseline.json"
    baseline.write_bytes(content.encode())
    result = project.runpytest(*ARGS, "--update-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "aimeasure-baseline.json" in err and expected in err
    assert baseline.read_bytes() == content.encode()


def test_same_results_with_and_without_xdist(project: pytest.Pytester) -> None:
    scores(project, five([2, 2, 2]))
    serial = project.runpytest(*ARGS, "--aimeasure-json", "serial.json")
    parallel = project.runpytest(*ARGS, *ONE_WORKER, "--aimeasure-json", "parallel.json")
    assert serial.ret == parallel.ret == 1

    def essence(path: Path) -> list[tuple[Any, ...]]:
        data = read_results(path)
        return [
            *sorted(
                (
                    i["nodeid"],
                    i["outcome"],
                    i["verdict"],
                    i["measurements"][0]["mean"] if i["measurements"] else None,
                )
                for i in data["items"]
            ),
            ("dimension", data["dimensions"]["tone"]["verdict"]),
        ]

    assert essence(project.path / "serial.json") == essence(project.path / "parallel.json")
    serial_essence = essence(project.path / "serial.json")
    # Every item two points down: the dimension decides; one item against one session carries the
    # prior's between-session variance and stays inconclusive on its own.
    assert ("test_tone.py::test_tone[a]", "passed", "inconclusive", 2.0) in serial_essence
    assert ("dimension", "regressed") in serial_essence


# Two plain processes: under xdist the controller writes the baseline with the same code and lock, so
# two -n 2 sessions race as these do (an update under xdist: test_baseline_retention.py's [xdist]).
def test_two_processes_updating_at_once_lose_no_entry(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_one=FIVE_ITEMS, test_two=FIVE_ITEMS.replace('"tone"', '"clarity"'))
    scores(pytester, five([4, 4, 3]))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                *ARGS,
                name,
                "--update-baseline",
                "--aimeasure-store",
                f".store-{name}",
            ],
            cwd=pytester.path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name in ("test_one.py", "test_two.py")
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out.decode()
    entries = json.loads((pytester.path / "aimeasure-baseline.json").read_text())["entries"]
    assert len(entries) == 10
    assert {e.split("::")[0] for e in entries} == {"tone", "clarity"}
    # The lock that kept them apart lives outside the project (issue 10, item 9).
    assert not [p.name for p in pytester.path.iterdir() if p.suffix in (".lock", ".tmp")]
