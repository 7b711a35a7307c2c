"""The committed baseline file: format, diff-friendliness, error messages, merging and concurrency."""

from __future__ import annotations

import difflib
import json
import multiprocessing
import os
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.measure.models import Fingerprint, Measurement, Sample
from pytest_aimeasure.measure.stats import item_stats
from pytest_aimeasure.store.baseline import (
    BaselineEntry,
    BaselineError,
    BaselineFile,
    SessionCoverage,
    dumps_baseline,
    entry_from_measurement,
    keep_reason,
    load_baseline,
    merge_entries,
    update_baseline,
)
from tests.scripted import SCRIPTED_FINGERPRINT as FP

NODE_A = "tests/test_x.py::test_a"
ID_A = f"tone::{NODE_A}"


def fingerprint(**overrides: Any) -> Fingerprint:
    values: dict[str, Any] = {
        "provider": "anthropic",
        "model": "claude-judge-1",
        "temperature": 0.0,
        "samples": 3,
        "prompt_hash": "p1",
        "rubric_hash": "r1",
        "plugin_major": 0,
    }
    return Fingerprint(**(values | overrides))


def measurement(
    nodeid: str = NODE_A,
    scores: list[int] | None = None,
    *,
    dimension: str = "tone",
    fp: Fingerprint | None = None,
    floor: float = 3.0,
    tolerance: float = 0.5,
) -> Measurement:
    scores = scores if scores is not None else [4, 4, 5]
    st = item_stats(scores)
    return Measurement(
        item_id=f"{dimension}::{nodeid}",
        nodeid=nodeid,
        dimension=dimension,
        floor=floor,
        tolerance=tolerance,
        samples=[Sample(index=i, dimension=dimension, score=s, rationale="ok") for i, s in enumerate(scores)],
        mean=st.mean,
        sd=st.sd,
        n=st.n,
        ci_low=st.ci_low,
        ci_high=st.ci_high,
        fingerprint=fp or fingerprint(samples=len(scores)),
    )


def write_baseline(path: Path, *measurements: Measurement) -> str:
    update_baseline(path, measurements, whole_suite=False, prune=False)
    return path.read_text()


# --------------------------------------------------------------------------------------------------
# Format
# --------------------------------------------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "aimeasure-baseline.json"
    a, b = measurement(scores=[3, 4, 4]), measurement("tests/test_x.py::test_b", dimension="clarity")
    summary = update_baseline(path, [a, b], whole_suite=False, prune=False)
    assert summary.added == sorted([a.item_id, b.item_id])
    assert summary.written
    loaded = load_baseline(path)
    assert loaded is not None
    assert loaded.entries == {a.item_id: entry_from_measurement(a), b.item_id: entry_from_measurement(b)}
    entry = loaded.entries[a.item_id]
    assert (entry.scores, entry.mean, entry.n, entry.floor, entry.tolerance) == (
        [3, 4, 4],
        3.6667,
        3,
        3.0,
        0.5,
    )
    assert entry.fingerprint == a.fingerprint
    assert set(loaded.dimensions) == {"tone", "clarity"}
    assert (loaded.dimensions["tone"].m, loaded.dimensions["tone"].n) == (1, 3)
    assert dumps_baseline(loaded) == path.read_text()


def test_text_is_sorted_indented_rounded_with_a_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    text = write_baseline(path, measurement(scores=[3, 4, 4]), measurement("tests/test_x.py::test_0"))
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"
    assert not re.search(r"\d\.\d{5,}", text)  # 3.6666666 is written 3.6667
    assert '"mean": 3.6667' in text
    entry = json.loads(text)["entries"][ID_A]
    # Nothing that differs between machines or runs: no timestamps, hosts, run ids, rationales.
    assert set(entry) == {"dimension", "nodeid", "scores", "mean", "n", "floor", "tolerance", "fingerprint"}


def test_changing_two_scores_is_a_small_diff(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    others = [measurement(f"tests/test_x.py::test_{k}", [4, 4, 4, 5, 5]) for k in range(3)]
    before = write_baseline(path, *others, measurement(scores=[4, 4, 4, 4, 4]))
    after = write_baseline(path, measurement(scores=[4, 3, 4, 2, 4]))
    diff = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    removed = sorted(line[1:].strip() for line in diff if line.startswith("-"))
    added = sorted(line[1:].strip() for line in diff if line.startswith("+"))
    # Exactly: the two score lines and the entry's mean, plus the dimension aggregate's mean, sd and
    # CI bounds, which are derived from every entry's scores and so honestly move too (4 lines).
    entry_removed, entry_added = ["4,", "4,", '"mean": 4.0,'], ["3,", "2,", '"mean": 3.4,']
    aggregate_removed = ['"ci_high": 4.5248,', '"ci_low": 4.0752,', '"mean": 4.3,', '"sd": 0.2']
    aggregate_added = ['"ci_high": 4.459,', '"ci_low": 3.841,', '"mean": 4.15,', '"sd": 0.5']
    assert removed == sorted(entry_removed + aggregate_removed)
    assert added == sorted(entry_added + aggregate_added)


# --------------------------------------------------------------------------------------------------
# Loading and its error messages
# --------------------------------------------------------------------------------------------------


def test_load_missing_file_is_none(tmp_path: Path) -> None:
    assert load_baseline(tmp_path / "nope.json") is None


def test_corrupt_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "aimeasure-baseline.json"
    path.write_text('{\n  "format": 1,\n  "entries": {}\n  "dimensions": {}\n}\n')
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    message = str(info.value)
    assert str(path) in message
    assert "line 4, column 3" in message
    assert f"git checkout -- {path}" in message
    assert "pytest --ai-judge --update-baseline" in message


def test_merge_conflict_markers_are_named(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    good = write_baseline(path, measurement())
    lines = good.splitlines()
    path.write_text(
        "\n".join([*lines[:3], "<<<<<<< HEAD", *lines[3:5], "=======", ">>>>>>> main", *lines[5:]])
    )
    with pytest.raises(BaselineError, match="merge-conflict markers"):
        load_baseline(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text("")
    with pytest.raises(BaselineError, match="it is empty"):
        load_baseline(path)


@pytest.mark.parametrize(
    ("fmt", "says"),
    [
        (3, "has format 3; this plugin reads baseline formats 1 and 2 (it was written by a newer"),
        ("1", 'has format "1"'),
    ],
)
def test_wrong_format_number(tmp_path: Path, fmt: object, says: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"format": fmt, "entries": {}, "dimensions": {}}))
    with pytest.raises(BaselineError, match=re.escape(says)):
        load_baseline(path)


def test_missing_format_number(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"entries": {}}))
    says = "has no format number; this plugin reads baseline formats 1 and 2"
    with pytest.raises(BaselineError, match=says):
        load_baseline(path)


def _edited(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text())
    edit(data["entries"][ID_A])
    path.write_text(json.dumps(data, indent=2))


def test_validation_error_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, measurement())
    _edited(path, lambda e: e["scores"].__setitem__(2, 7))
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    message = str(info.value)
    assert f"entries.{ID_A}.scores.2: Input should be less than or equal to 5 (got 7)" in message
    assert str(path) in message and "git checkout --" in message


def test_validation_error_for_extra_and_inconsistent_fields(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, measurement())
    _edited(path, lambda e: e.update(timestamp="2024-01-01"))
    with pytest.raises(
        BaselineError, match=re.escape(f"entries.{ID_A}.timestamp: Extra inputs are not permitted")
    ):
        load_baseline(path)
    path = tmp_path / "other.json"
    write_baseline(path, measurement())
    _edited(path, lambda e: e.update(mean=4.9))  # e.g. a merge that kept one side's mean
    with pytest.raises(
        BaselineError, match=re.escape(f"entries.{ID_A}: mean is 4.9 but the scores average 4.3333")
    ):
        load_baseline(path)


def test_string_score_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, measurement())
    _edited(path, lambda e: e["scores"].__setitem__(0, "4"))
    with pytest.raises(BaselineError, match=re.escape(f"entries.{ID_A}.scores.0")):
        load_baseline(path)


# --------------------------------------------------------------------------------------------------
# Updating
# --------------------------------------------------------------------------------------------------


def test_invalid_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    corrupt = b'{"format": 1, "entries": {\n  "x": oops\n}\n'
    path.write_bytes(corrupt)
    stat = path.stat()
    with pytest.raises(BaselineError, match="line 2"):
        update_baseline(path, [measurement()], whole_suite=True, prune=True)
    assert path.read_bytes() == corrupt
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]  # no temp file, no lock file left


def test_items_that_did_not_run_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    a, b = measurement(), measurement("tests/test_x.py::test_b")
    write_baseline(path, a, b)
    summary = update_baseline(path, [measurement(scores=[2, 2, 2])], whole_suite=False, prune=False)
    assert (summary.updated, summary.kept, summary.removed) == ([a.item_id], [b.item_id], [])
    loaded = load_baseline(path)
    assert loaded is not None and set(loaded.entries) == {a.item_id, b.item_id}
    assert loaded.entries[a.item_id].scores == [2, 2, 2]


@pytest.mark.parametrize(("whole_suite", "prune"), [(True, False), (False, True)])
def test_stale_entries_removed_on_whole_suite_or_prune(
    tmp_path: Path, whole_suite: bool, prune: bool
) -> None:
    path = tmp_path / "b.json"
    a, b = measurement(), measurement("tests/test_y.py::test_b", dimension="clarity")
    write_baseline(path, a, b)
    summary = update_baseline(path, [a], whole_suite=whole_suite, prune=prune)
    assert (summary.removed, summary.unchanged) == ([b.item_id], [a.item_id])
    loaded = load_baseline(path)
    assert loaded is not None
    assert set(loaded.entries) == {a.item_id}
    assert set(loaded.dimensions) == {"tone"}  # the aggregate of the emptied dimension goes too


def test_judge_error_keeps_the_old_entry_even_on_a_whole_suite_run(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    a, b = measurement(), measurement("tests/test_x.py::test_b")
    write_baseline(path, a, b)
    partial_b = measurement("tests/test_x.py::test_b", [1])
    summary = update_baseline(
        path, [partial_b], whole_suite=True, prune=True, judge_error_ids={a.item_id, b.item_id}
    )
    assert summary.kept_judge_error == sorted([a.item_id, b.item_id])
    assert (summary.added, summary.updated, summary.removed) == ([], [], [])
    loaded = load_baseline(path)
    assert loaded is not None
    assert loaded.entries[b.item_id].scores == [4, 4, 5]
    assert not summary.written


def test_unchanged_value_is_not_an_update(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    before = write_baseline(path, measurement(scores=[4, 4, 5]))
    mtime = path.stat().st_mtime_ns
    summary = update_baseline(path, [measurement(scores=[5, 4, 4])], whole_suite=False, prune=False)
    assert (summary.unchanged, summary.updated, summary.written) == ([ID_A], [], False)
    assert path.read_text() == before  # the old order is kept: same scores, nothing to review
    assert path.stat().st_mtime_ns == mtime


def test_new_fingerprint_is_an_update_even_with_the_same_scores(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, measurement())
    summary = update_baseline(
        path, [measurement(fp=fingerprint(model="claude-judge-2"))], whole_suite=False, prune=False
    )
    assert summary.updated == [ID_A]
    loaded = load_baseline(path)
    assert loaded is not None and loaded.entries[ID_A].fingerprint.model == "claude-judge-2"


def test_aggregates_are_recomputed_from_merged_entries(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, measurement(scores=[2, 2, 2]), measurement("tests/test_x.py::test_b", [4, 4, 4]))
    update_baseline(path, [measurement("tests/test_x.py::test_c", [3, 3, 3])], whole_suite=False, prune=False)
    loaded = load_baseline(path)
    assert loaded is not None
    tone = loaded.dimensions["tone"]
    assert (tone.mean, tone.m, tone.n, tone.sd) == (3.0, 3, 9, 1.0)


def test_existing_file_mode_is_preserved(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, measurement())
    path.chmod(0o664)
    update_baseline(path, [measurement(scores=[1, 1, 1])], whole_suite=False, prune=False)
    assert path.stat().st_mode & 0o777 == 0o664


def test_baseline_file_model_forbids_extra_top_level_fields() -> None:
    with pytest.raises(ValueError, match="Extra inputs"):
        BaselineFile.model_validate({"format": 1, "entries": {}, "dimensions": {}, "written_at": "now"})


# --------------------------------------------------------------------------------------------------
# Concurrency
# --------------------------------------------------------------------------------------------------

UPDATES_PER_PROCESS = 30


def _update_many(path: str, prefix: str, start: Any) -> None:
    start.wait()
    for k in range(UPDATES_PER_PROCESS):
        update_baseline(
            Path(path), [measurement(f"tests/test_{prefix}.py::test_{k}")], whole_suite=False, prune=False
        )


def test_two_processes_updating_at_once_lose_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "aimeasure-baseline.json"
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    workers = [context.Process(target=_update_many, args=(str(path), p, start)) for p in ("p", "q")]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0, 0]
    loaded = load_baseline(path)
    assert loaded is not None
    assert len(loaded.entries) == 2 * UPDATES_PER_PROCESS
    assert loaded.dimensions["tone"].m == 2 * UPDATES_PER_PROCESS
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    assert os.access(path, os.R_OK)


def test_nothing_to_record_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    summary = update_baseline(path, [], whole_suite=True, prune=False, judge_error_ids={ID_A})
    assert not summary.written
    assert not path.exists()


# --------------------------------------------------------------------------------------------------
# Issue 14: N out of the fingerprint, format-1 files, pooling across sessions
# --------------------------------------------------------------------------------------------------

FORMAT_1 = {
    "format": 1,
    "entries": {
        ID_A: {
            "dimension": "tone",
            "nodeid": NODE_A,
            "scores": [4, 4, 4],
            "mean": 4.0,
            "n": 3,
            "floor": 3.0,
            "tolerance": 0.5,
            "fingerprint": {
                "provider": "anthropic",
                "model": "claude-judge-1",
                "temperature": 0.0,
                "samples": 3,
                "prompt_hash": "p1",
                "rubric_hash": "r1",
                "tool_schema_version": 1,
                "tool_mode": "forced",
                "plugin_major": 0,
            },
        }
    },
    "dimensions": {},
}


def test_a_format_1_baseline_taken_at_n3_is_comparable_with_a_session_at_n5(tmp_path: Path) -> None:
    from pytest_aimeasure.compare.drift import compare

    path = tmp_path / "b.json"
    path.write_text(json.dumps(FORMAT_1))
    baseline = load_baseline(path)
    assert baseline is not None
    assert "samples" not in baseline.entries[ID_A].fingerprint.model_dump()
    now = measurement(scores=[4, 4, 4, 4, 4])
    # Without the one-session prior (which keeps one item from proving equivalence), it is stable.
    result = compare(baseline, [now], whole_suite=True, prior=None)
    assert result.items[ID_A].verdict == "stable"
    assert not result.has_not_comparable
    # The next update writes the current format, without samples in the fingerprint.
    update_baseline(path, [now], whole_suite=False, prune=False)
    written = json.loads(path.read_text())
    assert written["format"] == 2 and "samples" not in written["entries"][ID_A]["fingerprint"]


def test_update_pools_sessions_under_an_unchanged_ruler_and_keeps_the_last_k(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    sessions = [[4, 4, 4], [5, 5, 5], [3, 3, 3, 3, 3], [4, 4, 5]]
    summaries = [
        update_baseline(path, [measurement(scores=s)], whole_suite=False, prune=False, pool=3)
        for s in sessions
    ]
    assert summaries[0].added == [ID_A]
    assert all(s.pooled == [ID_A] for s in summaries[1:])
    entry = load_baseline(path).entries[ID_A]  # type: ignore[union-attr]
    assert entry.sessions == [3, 5, 3]  # the first session fell out of the pool of 3
    assert entry.scores == [5, 5, 5, 3, 3, 3, 3, 3, 4, 4, 5]
    assert entry.pooled == 3 and entry.session_scores()[-1] == [4, 4, 5]
    assert entry.mean == pytest.approx(43 / 11, abs=1e-4)
    assert '"sessions": [\n        3,\n        5,\n        3\n      ]' in path.read_text()


def test_update_replaces_instead_of_pooling_when_the_item_moved_or_the_ruler_changed(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    update_baseline(path, [measurement(scores=[4, 4, 4])], whole_suite=False, prune=False, pool=5)
    moved = update_baseline(
        path, [measurement(scores=[2, 2, 2])], whole_suite=False, prune=False, pool=5, moved=[ID_A]
    )
    assert moved.updated == [ID_A] and moved.pooled == []
    assert load_baseline(path).entries[ID_A].scores == [2, 2, 2]  # type: ignore[union-attr]
    other_judge = measurement(scores=[3, 3, 3], fp=fingerprint(model="claude-judge-2"))
    replaced = update_baseline(path, [other_judge], whole_suite=False, prune=False, pool=5)
    entry = load_baseline(path).entries[ID_A]  # type: ignore[union-attr]
    assert replaced.updated == [ID_A] and entry.sessions is None and entry.scores == [3, 3, 3]
    # pool = 1 is the old behaviour: the last session stands.
    again = measurement(scores=[5, 5, 5], fp=other_judge.fingerprint)
    update_baseline(path, [again], whole_suite=False, prune=False)
    assert load_baseline(path).entries[ID_A].scores == [5, 5, 5]  # type: ignore[union-attr]


def test_a_session_read_back_from_the_sample_cache_is_not_pooled_twice(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    update_baseline(path, [measurement(scores=[4, 4, 5])], whole_suite=False, prune=False, pool=5)
    cached = measurement(scores=[4, 4, 5])
    from_cache = [s.model_copy(update={"source": "cache"}) for s in cached.samples]
    cached = cached.model_copy(update={"samples": from_cache})
    summary = update_baseline(path, [cached], whole_suite=False, prune=False, pool=5)
    assert summary.unchanged == [ID_A]
    assert load_baseline(path).entries[ID_A].sessions is None  # type: ignore[union-attr]


def test_pooled_sessions_must_add_up_to_the_scores(tmp_path: Path) -> None:
    data = json.loads(json.dumps(FORMAT_1))
    data["entries"][ID_A] |= {"sessions": [2, 2]}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="sessions add up to 4 samples but there are 3 scores"):
        load_baseline(path)


def repeated(groups: list[list[int]]) -> Measurement:
    """A measurement that pooled generation repeats: each sample tagged with its repeat, indexes
    restarting in each repeat (as judge.score pools them)."""
    m = measurement(scores=[s for g in groups for s in g])
    samples = [
        Sample(index=i, dimension="tone", score=s, rationale="ok", repeat=r + 1)
        for r, g in enumerate(groups)
        for i, s in enumerate(g)
    ]
    return m.model_copy(update={"samples": samples})


def test_the_baseline_keeps_the_generation_repeats_so_one_session_knows_its_generation_variance(
    tmp_path: Path,
) -> None:
    path = tmp_path / "b.json"
    update_baseline(
        path, [repeated([[4, 4, 4], [2, 2, 2], [3, 3, 3]])], whole_suite=False, prune=False, pool=5
    )
    entry = load_baseline(path).entries[ID_A]  # type: ignore[union-attr]
    # Grouped by repeat (not interleaved by sample index), with the groups' sizes.
    assert entry.scores == [4, 4, 4, 2, 2, 2, 3, 3, 3] and entry.generations == [3, 3, 3]
    assert entry.session_generations() == [[[4, 4, 4], [2, 2, 2], [3, 3, 3]]]
    # Pooling a session without repeats adds one generation; the groups stay inside their sessions.
    update_baseline(path, [measurement(scores=[3, 3])], whole_suite=False, prune=False, pool=5)
    pooled = load_baseline(path).entries[ID_A]  # type: ignore[union-attr]
    assert (pooled.sessions, pooled.generations) == ([9, 2], [3, 3, 3, 2])
    assert pooled.session_generations()[-1] == [[3, 3]]
    # A file whose repeats cross a session boundary is refused, naming the problem.
    bad = json.loads(path.read_text())
    bad["entries"][ID_A]["generations"] = [3, 3, 4, 1]
    path.write_text(json.dumps(bad))
    with pytest.raises(BaselineError, match="crosses the boundary between two pooled sessions"):
        load_baseline(path)
    # Without repeats nothing is written: the field is absent.
    plain = tmp_path / "plain.json"
    update_baseline(plain, [measurement(scores=[4, 4, 5])], whole_suite=False, prune=False)
    assert "generations" not in plain.read_text()


def entry(nodeid: str, dimension: str = "tone") -> BaselineEntry:
    return BaselineEntry(
        dimension=dimension,
        nodeid=nodeid,
        scores=[4, 4, 4],
        mean=4.0,
        n=3,
        floor=3.0,
        tolerance=0.5,
        fingerprint=FP,
    )


@pytest.mark.parametrize(
    "reason", ["gate failed", "budget stop", "judge error", "generation failed", "test failed", "skipped"]
)
@pytest.mark.parametrize(("whole_suite", "prune"), [(True, False), (False, True), (True, True)])
def test_an_item_that_ran_without_a_value_is_kept_with_its_reason(
    reason: str, whole_suite: bool, prune: bool
) -> None:
    e = entry("t.py::test_a")
    cover = SessionCoverage(
        whole_suite=whole_suite,
        prune=prune,
        collected=frozenset({"t.py::test_a"}),
        not_measured={"tone::t.py::test_a": reason},
    )
    assert keep_reason("tone::t.py::test_a", e, cover) == reason


def test_only_a_test_that_no_longer_exists_goes_on_a_whole_suite_update() -> None:
    old = {"tone::t.py::test_a": entry("t.py::test_a"), "tone::t.py::test_gone": entry("t.py::test_gone")}
    cover = SessionCoverage(whole_suite=True, collected=frozenset({"t.py::test_a"}))
    merged, summary = merge_entries(old, [], whole_suite=True, prune=False, coverage=cover)
    assert summary.removed == ["tone::t.py::test_gone"]
    assert summary.kept_because == {"not run": ["tone::t.py::test_a"]}  # selected, never reported
    assert set(merged) == {"tone::t.py::test_a"}


def test_a_subset_run_without_prune_removes_nothing() -> None:
    old = {"tone::t.py::test_gone": entry("t.py::test_gone")}
    cover = SessionCoverage(whole_suite=False, collected=frozenset())
    _, summary = merge_entries(old, [], whole_suite=False, prune=False, coverage=cover)
    assert (summary.removed, summary.kept) == ([], ["tone::t.py::test_gone"])


def test_collection_error_keeps_the_entries_of_that_file() -> None:
    cover = SessionCoverage(
        whole_suite=False, prune=True, collected=frozenset(), failed_collectors=("pkg/t.py",)
    )
    assert keep_reason("tone::pkg/t.py::test_a", entry("pkg/t.py::test_a"), cover) == "collection error"
    assert keep_reason("tone::pkg/u.py::test_a", entry("pkg/u.py::test_a"), cover) is None
    in_dir = SessionCoverage(whole_suite=False, prune=True, collected=frozenset(), failed_collectors=("pkg",))
    assert keep_reason("tone::pkg/u.py::test_a", entry("pkg/u.py::test_a"), in_dir) == "collection error"


def test_judge_errors_are_reported_both_ways(tmp_path: Path) -> None:
    old = {"tone::t.py::test_a": entry("t.py::test_a")}
    _, summary = merge_entries(old, [], whole_suite=True, prune=True, judge_error_ids={"tone::t.py::test_a"})
    assert summary.kept_judge_error == ["tone::t.py::test_a"]
    assert summary.kept_because == {"judge error": ["tone::t.py::test_a"]}
    assert summary.kept == []
