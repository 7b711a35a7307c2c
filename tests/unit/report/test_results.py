"""The results file's text: what results_json writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_aimeasure.compare.drift import DimensionComparison, ItemComparison
from pytest_aimeasure.measure.models import Fingerprint, ItemResult
from pytest_aimeasure.measure.stats import dimension_stats
from pytest_aimeasure.report.model import SessionReport
from pytest_aimeasure.report.publish import publish, run_results_path
from pytest_aimeasure.report.results import (
    ResultItem,
    SessionResults,
    baseline_dimensions,
    read_results,
    read_run_results,
    results_json,
    stored_results_json,
)
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile


def test_the_text_is_indented_with_every_objects_keys_sorted_and_reads_back_the_same() -> None:
    results = SessionResults(
        passed=True,
        exit_status=0,
        items=[],
        findings=[],
        spend={"zeta": 1, "alpha": {"b": [{"y": 1, "x": 2}], "a": None}},
        baseline={"path": "b.json", "update": None, "note": "ünïcode"},
    )
    text = results_json(results)
    data = json.loads(text)
    # The same bytes as the standard library's sorted, indented encoder (bar its ASCII escapes).
    assert text == (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()
    assert list(data) == sorted(data)
    assert list(data["spend"]) == ["alpha", "zeta"] and list(data["spend"]["alpha"]) == ["a", "b"]
    assert list(data["spend"]["alpha"]["b"][0]) == ["x", "y"]
    assert SessionResults.model_validate(data) == results


def _entry(dimension: str, scores: list[int]) -> BaselineEntry:
    fingerprint = Fingerprint(
        provider="scripted", model="m", temperature=0.0, prompt_hash="p", rubric_hash="r", plugin_major=0
    )
    mean = sum(scores) / len(scores)
    return BaselineEntry(
        dimension=dimension, nodeid=f"t.py::{dimension}", scores=scores, mean=mean, n=len(scores),
        floor=1.0, tolerance=0.5, fingerprint=fingerprint,
    )  # fmt: skip


def test_each_dimensions_baseline_figures_are_over_its_own_paired_entries_only() -> None:
    entries = {
        "tone::a": _entry("tone", [5, 5, 4]),
        "clarity::a": _entry("clarity", [1, 2, 1]),
        "tone::b": _entry("tone", [3, 4, 3]),
        "clarity::b": _entry("clarity", [2, 2, 3]),
        "clarity::unpaired": _entry("clarity", [5, 5, 5]),  # not comparable now (no delta)
    }
    items = {
        item_id: ItemComparison(
            verdict="stable" if item_id != "clarity::unpaired" else "not_comparable",
            item_id=item_id,
            dimension=item_id.split("::")[0],
            nodeid="t.py::x",
            delta=0.0 if item_id != "clarity::unpaired" else None,
        )
        for item_id in [*entries, "tone::new"]  # tone::new: no entry in the baseline
    }
    dimensions = {
        name: DimensionComparison(verdict="stable", dimension=name) for name in ("tone", "clarity", "empty")
    }
    out = baseline_dimensions(BaselineFile(entries=entries), dimensions, items, var_floor=0.05)
    assert list(out) == ["tone", "clarity"]  # a dimension with no paired entry has no figures
    for name, ids in (("tone", ["tone::a", "tone::b"]), ("clarity", ["clarity::a", "clarity::b"])):
        own = dimension_stats([[float(s) for s in entries[i].scores] for i in ids], var_floor=0.05)
        assert out[name].m == 2
        assert (out[name].mean, out[name].ci_low, out[name].ci_high) == (own.mean, own.ci_low, own.ci_high)
    assert out["tone"].mean != out["clarity"].mean


def test_the_run_keeps_each_item_once_compact_and_the_json_option_gets_it_whole_sorted_and_indented(
    tmp_path: Path,
) -> None:
    record = ItemResult(nodeid="t.py::test_a", kind="dimension", outcome="passed", message="ünïcode")
    verdict = ItemComparison(
        item_id="tone::a", dimension="tone", nodeid="t.py::test_a", verdict="stable", delta=0.0
    )
    results = SessionResults(
        run_id="20261202T000000Z-abcd",
        passed=True,
        exit_status=0,
        items=[ResultItem(**record.model_dump(), verdict="stable", comparison=verdict)],
        findings=[],
        spend={"zeta": 1, "alpha": {"b": [1, 2], "a": None}},
    )
    report = SessionReport(results)
    publish(report, json_path=tmp_path / "out.json", html_path=None, store=tmp_path / "store")
    path = run_results_path(tmp_path / "store", "20261202T000000Z-abcd")
    kept, asked = json.loads(path.read_bytes()), (tmp_path / "out.json").read_bytes()
    assert asked == results_json(results)
    # The run's copy is one line in the models' field order (what tools read) ...
    assert path.read_bytes().count(b"\n") == 1
    assert list(kept) == list(SessionResults.model_fields)
    # ... whose items hold what the session's end added: the rest is each item's items.jsonl line
    assert kept["items"] == [
        {"nodeid": "t.py::test_a", "verdict": "stable", "comparison": verdict.model_dump(mode="json")}
    ]
    assert {k: v for k, v in kept.items() if k != "items"} == {
        k: v for k, v in json.loads(asked).items() if k != "items"
    }
    assert read_run_results(path, [record]) == results


def test_a_runs_results_that_name_a_test_its_items_do_not_hold_are_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    record = ItemResult(nodeid="t.py::test_a", kind="dimension", outcome="passed")
    results = _one_run(record)
    path = tmp_path / "results.json"
    path.write_bytes(stored_results_json(results))
    with pytest.raises(
        ValueError, match=r"results\.json names the test t\.py::test_a, which the run's items"
    ):
        read_run_results(path, [])


def test_a_runs_results_written_whole_by_an_earlier_version_are_read_as_they_are(tmp_path: Path) -> None:
    record = ItemResult(nodeid="t.py::test_a", kind="dimension", outcome="failed", message="then")
    results = _one_run(record, passed=False)
    path = tmp_path / "results.json"
    path.write_bytes(results.model_dump_json().encode())
    now = record.model_copy(update={"message": "a later line"})
    assert read_run_results(path, [now]) == results


def test_a_runs_results_named_as_a_results_file_are_read_with_the_items_beside_them(tmp_path: Path) -> None:
    record = ItemResult(nodeid="t.py::test_a", kind="gate", outcome="passed")
    results = _one_run(record)
    (tmp_path / "items.jsonl").write_text(record.model_dump_json() + "\n")
    (tmp_path / "results.json").write_bytes(stored_results_json(results))
    assert read_results(tmp_path / "results.json") == results
    (tmp_path / "items.jsonl").unlink()
    with pytest.raises(ValueError, match=r"results\.json is not an aimeasure results file .*items\.0\.kind"):
        read_results(tmp_path / "results.json")


def _one_run(record: ItemResult, *, passed: bool = True) -> SessionResults:
    """A run's results holding one test, ``record``, with no verdict."""
    return SessionResults(
        run_id="r",
        passed=passed,
        exit_status=0 if passed else 1,
        items=[ResultItem(**record.model_dump())],
        findings=[],
        spend={},
    )
