"""Shard merge: three ``-k`` shards merged are the same session as one process running everything.

Under xdist: a shard run with workers merges into the same baseline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.cli.main import main as cli_main
from tests.conftest import ONE_WORKER
from tests.scripted import SCRIPTED_ARGS, scores_conftest

CONFTEST = scores_conftest()

TESTS = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
@pytest.mark.parametrize("case", ["a1", "a2", "b1", "b2", "c1", "c2"])
def test_tone(case, judge):
    judge.score(f"tone {case}")

@pytest.mark.dimension("clarity", rubric="5 = clear", floor=1.0)
@pytest.mark.parametrize("case", ["a1", "b1", "c1"])
def test_clarity(case, judge):
    judge.score(f"clarity {case}")
"""

ARGS = SCRIPTED_ARGS
SHARDS = ("a1 or a2", "b1 or b2", "c1 or c2")


def set_scores(pytester: pytest.Pytester, tone: dict[str, list[int]], clarity: list[int]) -> None:
    table = {f"test_tone[{c}]": tone.get(c, tone["*"]) for c in ("a1", "a2", "b1", "b2", "c1", "c2")}
    table |= {f"test_clarity[{c}]": clarity for c in ("a1", "b1", "c1")}
    (pytester.path / "scores.json").write_text(json.dumps(table))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_subject=TESTS)
    pytester.makeini("[pytest]\n")
    return pytester


def merge(
    pytester: pytest.Pytester, out: Path, *extra: str, baseline: str = "aimeasure-baseline.json"
) -> int:
    shards = [str(pytester.path / f"shard{i}.json") for i in range(len(SHARDS))]
    return cli_main(["merge", *shards, "-o", str(out), "--baseline", str(pytester.path / baseline), *extra])


def run_shards(pytester: pytest.Pytester, *extra: str, workers_for: int | None = None) -> None:
    """Each shard in a session of its own; shard ``workers_for``'s with xdist (one module: one worker)."""
    for i, expr in enumerate(SHARDS):
        xdist = ONE_WORKER if i == workers_for else ()
        pytester.runpytest(*ARGS, "-k", expr, "--aimeasure-json", f"shard{i}.json", *extra, *xdist)


_RUN = re.compile(r'"run": "([^"]+)"')


def _runs(baseline_text: str) -> set[str]:
    return set(_RUN.findall(baseline_text))


def _without_runs(baseline_text: str) -> str:
    return _RUN.sub('"run": "..."', baseline_text)


def shard_runs(pytester: pytest.Pytester) -> list[str]:
    return [json.loads((pytester.path / f"shard{i}.json").read_text())["run_id"] for i in range(len(SHARDS))]


def verdicts(data: dict[str, Any]) -> tuple[bool, dict[str, str], dict[str, str | None]]:
    return (
        data["passed"],
        {name: d["verdict"] for name, d in data["dimensions"].items()},
        {i["nodeid"]: i["verdict"] for i in data["items"]},
    )


def test_three_shards_merged_equal_one_process(project: pytest.Pytester) -> None:
    set_scores(project, {"*": [4, 4, 4]}, [3, 3, 4])
    # the baseline: one process versus three shards merged with --update-baseline
    assert project.runpytest(*ARGS, "--update-baseline").ret == 0
    whole = (project.path / "aimeasure-baseline.json").read_text()
    (project.path / "aimeasure-baseline.json").rename(project.path / "whole-baseline.json")
    # The shards each in one process, then again with one shard run by an xdist worker: what the
    # controller writes of its workers' items merges as one process's results do.
    for workers_for in (None, 0):
        run_shards(project, workers_for=workers_for)
        assert merge(project, project.path / "merged0.json", "--update-baseline") == 0
        merged = (project.path / "aimeasure-baseline.json").read_text()
        # Equal but for the runs the entries' sources name: one process's run there, the shards' here.
        assert json.loads(merged)["entries"] and _runs(merged) == set(shard_runs(project))
        assert _without_runs(merged) == _without_runs(whole), workers_for
        if workers_for is None:
            (project.path / "aimeasure-baseline.json").unlink()  # each merge writes a new baseline

    # a drop across the shards: one comparison with one family over every test (a drop of only some
    # items is, at six items, within what items move between sessions: the paired spread, issue 14)
    drop = {"a1": [2, 2, 3], "a2": [2, 3, 2], "b1": [3, 2, 2], "b2": [2, 3, 2], "c1": [3, 2, 2]}
    set_scores(project, {"*": [2, 2, 3], **drop}, [3, 3, 4])
    one = project.runpytest(*ARGS, "--aimeasure-json", "one.json")
    run_shards(project)
    code = merge(project, project.path / "merged.json")
    one_data = json.loads((project.path / "one.json").read_text())
    merged = json.loads((project.path / "merged.json").read_text())
    assert verdicts(merged) == verdicts(one_data)
    assert merged["dimensions"]["tone"]["verdict"] == "regressed"
    assert merged["dimensions"]["tone"]["rejected"] is True
    assert merged["failed_because"] == one_data["failed_because"]
    assert code == 1 and one.ret == pytest.ExitCode.TESTS_FAILED
    assert len(merged["shards"]) == 3
    # each shard alone saw a smaller family: the merge's family is all of it
    shard_sizes = [len(json.loads((project.path / f"shard{i}.json").read_text())["items"]) for i in range(3)]
    assert sum(shard_sizes) == len(merged["items"]) == 9


def test_shards_with_different_judges_are_refused(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    set_scores(project, {"*": [4, 4, 4]}, [3, 3, 4])
    project.runpytest(*ARGS, "-k", SHARDS[0], "--aimeasure-json", "shard0.json")
    # Another prompt template is another ruler (the number of samples is not: issue 14).
    (project.path / "other_prompt.py").write_text(
        "def pytest_aimeasure_judge_prompt(prompt, dimension, config):\n    prompt.system += ' Be strict.'\n"
    )
    project.syspathinsert()
    project.runpytest(*ARGS, "-k", SHARDS[1], "--aimeasure-json", "shard1.json", "-p", "other_prompt")
    project.runpytest(*ARGS, "-k", SHARDS[2], "--aimeasure-json", "shard2.json")
    capsys.readouterr()
    assert merge(project, project.path / "merged.json") == 2
    err = capsys.readouterr().err
    assert "shard1.json was judged with a different judge fingerprint than" in err
    assert "prompt_hash (" in err
    assert not (project.path / "merged.json").exists()


def test_a_test_in_two_shards_is_refused(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    set_scores(project, {"*": [4, 4, 4]}, [3, 3, 4])
    project.runpytest(*ARGS, "-k", "a1", "--aimeasure-json", "shard0.json")
    project.runpytest(*ARGS, "-k", "a1", "--aimeasure-json", "shard1.json")
    project.runpytest(*ARGS, "-k", "b1", "--aimeasure-json", "shard2.json")
    capsys.readouterr()
    assert merge(project, project.path / "merged.json") == 2
    assert "ran in two shards" in capsys.readouterr().err


def test_a_shard_finding_that_fails_a_session_fails_the_merge(project: pytest.Pytester) -> None:
    """The merge fails on the same finding kinds as one session (outcome.session_failures): a
    shard's failing calibration or attribution finding is the merged session's too."""
    from pytest_aimeasure.session.outcome import FAILURE_KINDS

    set_scores(project, {"*": [4, 4, 4]}, [4, 4, 4])
    run_shards(project)
    assert merge(project, project.path / "clean.json") == 0
    shard = project.path / "shard1.json"
    data = json.loads(shard.read_text())
    data["findings"].append(
        {"kind": "uncalibrated", "severity": "fail", "subject": "tone", "message": "κ 0.1 under 0.6"}
    )
    shard.write_text(json.dumps(data))
    assert merge(project, project.path / "merged.json") == 1
    merged = json.loads((project.path / "merged.json").read_text())
    reason = next(r for kind, _, r in FAILURE_KINDS if kind == "uncalibrated")
    assert merged["passed"] is False and merged["failed_because"] == [reason]


def test_the_merge_sums_up_adaptive_sampling_as_one_process_does(project: pytest.Pytester) -> None:
    # Tone's items sit far above their floor (1.0); clarity's vary around 2, near it: more looks.
    set_scores(project, {"*": [4] * 9}, [1, 2, 3] * 3)
    project.runpytest(*ARGS, "--judge-samples", "auto", "--aimeasure-json", "one.json")
    run_shards(project, "--judge-samples", "auto")
    assert merge(project, project.path / "merged.json") == 0
    one = json.loads((project.path / "one.json").read_text())
    merged = json.loads((project.path / "merged.json").read_text())
    assert merged["sampling"] == one["sampling"]
    assert merged["sampling"]["items"] == 9 and merged["sampling"]["samples"] > 27
    assert merged["generations"] == one["generations"] == {}  # no artifact asked for repeats="auto"
