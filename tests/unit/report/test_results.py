"""The results file's text: what results_json writes."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_aimeasure.compare.drift import DimensionComparison, ItemComparison
from pytest_aimeasure.measure.models import Fingerprint
from pytest_aimeasure.measure.stats import dimension_stats
from pytest_aimeasure.report.model import SessionReport
from pytest_aimeasure.report.publish import publish, run_results_path
from pytest_aimeasure.report.results import (
    SessionResults,
    baseline_dimensions,
    read_results,
    results_json,
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


def test_the_run_keeps_the_same_object_compact_and_the_json_option_gets_it_sorted_and_indented(
    tmp_path: Path,
) -> None:
    results = SessionResults(
        run_id="20261202T000000Z-abcd",
        passed=True,
        exit_status=0,
        items=[],
        findings=[],
        spend={"zeta": 1, "alpha": {"b": [1, 2], "a": None}},
    )
    report = SessionReport(results)
    publish(report, json_path=tmp_path / "out.json", html_path=None, store=tmp_path / "store")
    kept = run_results_path(tmp_path / "store", "20261202T000000Z-abcd").read_bytes()
    asked = (tmp_path / "out.json").read_bytes()
    assert asked == results_json(results)
    # The run's copy is one line in the models' field order (what tools read), the same object.
    assert kept.count(b"\n") == 1 and kept.endswith(b"\n")
    assert list(json.loads(kept)) == list(SessionResults.model_fields)
    assert json.loads(kept) == json.loads(asked)
    assert read_results(run_results_path(tmp_path / "store", "20261202T000000Z-abcd")) == results
