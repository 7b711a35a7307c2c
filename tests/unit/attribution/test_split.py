"""Drift attribution's pure parts: the split with its error bars, the finding, and the baseline's
record of which run and artifact each pooled session came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_aimeasure.attribution.split import DimensionAttribution, ItemScores, finding, settle, split
from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.measure.repeats import pool
from pytest_aimeasure.store.baseline import BaselineError, load_baseline, merge_entries, update_baseline
from tests.unit.store.test_baseline import ID_A, fingerprint, measurement

SHA_1, SHA_2, SHA_3 = "1" * 64, "2" * 64, "3" * 64


def items(judge_shift: int, system_shift: int, qualities: list[int]) -> list[ItemScores]:
    return [
        ItemScores(
            item_id=f"d::t[{k}]",
            base=[[q] * 3],
            rejudged=[[q + judge_shift] * 3],
            now=[q + judge_shift + system_shift] * 3,
            tolerance=0.5,
        )
        for k, q in enumerate(qualities)
    ]


def test_the_parts_add_up_and_each_has_its_own_interval() -> None:
    a = split("d", items(-1, 0, [3, 4, 3, 4, 3, 4]))
    assert a.total == pytest.approx(-1.0)
    assert a.judge.delta + a.system.delta == pytest.approx(a.total)
    assert a.judge.delta == pytest.approx(-1.0) and a.judge.verdict == "regressed"
    assert a.judge.ci95[0] < -1.0 < a.judge.ci95[1] < 0
    assert a.system.delta == pytest.approx(0.0) and a.system.verdict == "stable"
    assert a.system.ci95[0] < 0 < a.system.ci95[1]
    assert a.moved == "judge"
    b = split("d", items(0, -1, [3, 4, 3, 4, 3, 4]))
    assert (b.moved, b.system.verdict, b.judge.verdict) == ("system", "regressed", "stable")


def test_noisy_system_parts_widen_only_the_system_interval() -> None:
    # The judge part is the same on every item; the generator moved items by ±1 both ways.
    scores = items(-1, 0, [3, 4, 3, 4, 3, 4])
    noisy = [
        ItemScores(i.item_id, i.base, i.rejudged, [s + (1 if k % 2 else -1) for s in i.now], i.tolerance)
        for k, i in enumerate(scores)
    ]
    quiet, loud = split("d", scores), split("d", noisy)
    assert loud.judge == quiet.judge
    assert loud.system.se > quiet.system.se and loud.system.se_source == "paired"
    assert loud.system.delta == pytest.approx(0.0)


def test_finding_says_which_part_moved_and_fails_only_on_a_system_regression() -> None:
    judge = finding(split("d", items(-1, 0, [3, 4, 3, 4])))
    assert judge.severity == "warn"
    assert "of Δ -1.00, -1.00 [" in judge.message and "is the judge on unchanged artifacts" in judge.message
    system = finding(split("d", items(0, -1, [3, 4, 3, 4])))
    assert system.severity == "fail" and "the system moved, the judge did not" in system.message
    assert finding(split("d", items(0, -1, [3, 4, 3, 4])), fail_on_regression=False).severity == "warn"
    assert finding(split("d", items(0, 0, [3, 4, 3, 4]))).severity == "info"


def test_settle_clears_the_failures_an_attribution_explains() -> None:
    a: DimensionAttribution = split("d", items(-1, 0, [3, 4]))
    found = [
        Finding(kind="not_comparable", severity="fail", subject="d", message="x"),
        Finding(kind="regressed", severity="fail", subject="d::t[0]", nodeid="t[0]", message="y"),
        Finding(kind="regressed", severity="fail", subject="other", message="z"),
    ]
    assert [f.severity for f in settle(found, {"d": a})] == ["info", "info", "fail"]
    partial = a.model_copy(update={"skipped": {"d::t[9]": "the baseline's artifacts are not in the store"}})
    assert [f.severity for f in settle(found, {"d": partial})] == ["fail", "fail", "fail"]


def test_items_must_pair_sessions() -> None:
    with pytest.raises(ValueError, match="same sessions"):
        ItemScores("i", base=[[3]], rejudged=[[3], [4]], now=[3], tolerance=0.5)
    with pytest.raises(ValueError, match="no item"):
        split("d", [])


# -- the baseline's sources ------------------------------------------------------------------------


def test_entries_record_run_and_artifact_of_each_pooled_session(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    first = measurement().model_copy(update={"artifact_sha256": SHA_1})
    second = measurement(scores=[3, 4, 4]).model_copy(update={"artifact_sha256": SHA_2})
    update_baseline(path, [first], whole_suite=False, prune=False, run_id="run-1", pool=5)
    update_baseline(path, [second], whole_suite=False, prune=False, run_id="run-2", pool=5)
    entry = json.loads(path.read_text())["entries"][ID_A]
    assert entry["sessions"] == [3, 3]
    assert entry["sources"] == [
        {"run": "run-1", "artifact_sha256": SHA_1},
        {"run": "run-2", "artifact_sha256": SHA_2},
    ]


def test_a_file_without_sources_still_loads_and_pools(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    update_baseline(path, [measurement()], whole_suite=False, prune=False)
    data = json.loads(path.read_text())
    data["entries"][ID_A].pop("sources", None)
    path.write_text(json.dumps(data))
    loaded = load_baseline(path)
    assert loaded is not None and loaded.entries[ID_A].sources is None
    now = measurement(scores=[3, 4, 4]).model_copy(update={"artifact_sha256": SHA_2})
    update_baseline(path, [now], whole_suite=False, prune=False, run_id="run-2", pool=5)
    entry = json.loads(path.read_text())["entries"][ID_A]
    assert entry["sources"] == [
        {"run": None, "artifact_sha256": None},
        {"run": "run-2", "artifact_sha256": SHA_2},
    ]


def test_sources_that_do_not_match_the_sessions_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    update_baseline(path, [measurement()], whole_suite=False, prune=False, run_id="r")
    data = json.loads(path.read_text())
    data["entries"][ID_A]["sources"].append({"run": "x", "artifact_sha256": None})
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="sources lists 2 sessions but the entry pools 1"):
        load_baseline(path)


def test_a_session_of_generation_repeats_records_each_outputs_artifact(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    parts = [
        (k, measurement(scores=scores).model_copy(update={"artifact_sha256": sha}))
        for k, (scores, sha) in enumerate([([4, 4], SHA_1), ([5, 5], SHA_2), ([3, 3], SHA_3)])
    ]
    repeated = pool(parts, generated=3, artifact_key="story")
    update_baseline(path, [repeated], whole_suite=False, prune=False, run_id="run-1", pool=5)
    update_baseline(
        path, [measurement(scores=[4, 4])], whole_suite=False, prune=False, run_id="run-2", pool=5
    )
    entry = json.loads(path.read_text())["entries"][ID_A]
    assert entry["generations"] == [2, 2, 2, 2]
    first, second = entry["sources"]
    # The session's own sha names the set; each output is a stored artifact attribution can read.
    assert (
        first["generations"] == [SHA_1, SHA_2, SHA_3] and first["artifact_sha256"] == repeated.artifact_sha256
    )
    assert second == {"run": "run-2", "artifact_sha256": None}  # one output: no generations key
    loaded = load_baseline(path)
    assert loaded is not None
    assert [s.artifacts() for s in loaded.entries[ID_A].session_sources()] == [[SHA_1, SHA_2, SHA_3], []]


def test_generation_artifacts_that_do_not_match_the_sessions_generations_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    parts = [
        (k, measurement().model_copy(update={"artifact_sha256": sha})) for k, sha in enumerate([SHA_1, SHA_2])
    ]
    update_baseline(
        path, [pool(parts, generated=2, artifact_key="s")], whole_suite=False, prune=False, run_id="r"
    )
    data = json.loads(path.read_text())
    data["entries"][ID_A]["sources"][0]["generations"].append(SHA_3)
    path.write_text(json.dumps(data))
    with pytest.raises(
        BaselineError, match="session 1's source lists 3 generation artifacts but the session judged 2"
    ):
        load_baseline(path)


def test_a_rejudged_entry_replaces_the_old_one_only_while_the_file_still_holds_it(tmp_path: Path) -> None:
    old_fp, new_fp = fingerprint(), fingerprint(model="claude-judge-2")
    base = measurement(scores=[4, 4, 4], fp=old_fp).model_copy(update={"artifact_sha256": SHA_1})
    entries, _ = merge_entries({}, [base], whole_suite=False, prune=False, run_id="r1")
    rejudged = entries[ID_A].model_copy(update={"scores": [3, 3, 3], "mean": 3.0, "fingerprint": new_fp})
    now = measurement(scores=[3, 3, 3], fp=new_fp).model_copy(update={"artifact_sha256": SHA_1})
    kept, summary = merge_entries(
        entries, [now], whole_suite=False, prune=False, run_id="r2", pool=5, rejudged={ID_A: rejudged}
    )
    assert summary.pooled == [ID_A]
    assert kept[ID_A].scores == [3] * 6 and kept[ID_A].fingerprint == new_fp
    stale = rejudged.model_copy(update={"sources": None})  # made from another version of the entry
    replaced, summary = merge_entries(
        entries, [now], whole_suite=False, prune=False, run_id="r2", pool=5, rejudged={ID_A: stale}
    )
    assert summary.updated == [ID_A] and replaced[ID_A].scores == [3, 3, 3]
