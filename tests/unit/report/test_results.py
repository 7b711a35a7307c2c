"""The results file's text: what results_json writes."""

from __future__ import annotations

import json

from pytest_aimeasure.compare.drift import DimensionComparison, ItemComparison, compare
from pytest_aimeasure.measure.models import Finding, Fingerprint, ItemResult, Measurement, Sample
from pytest_aimeasure.measure.stats import dimension_stats, item_stats
from pytest_aimeasure.report.results import (
    ResultItem,
    SessionResults,
    _whole_json,
    baseline_dimensions,
    results_json,
)
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile, entry_from_measurement


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


def _measurement(k: int, scores: list[int]) -> Measurement:
    nodeid = f"t.py::test_{k}"
    st = item_stats(scores)
    return Measurement(
        item_id=f"tone::{nodeid}",
        nodeid=nodeid,
        dimension="tone",
        floor=3.0,
        tolerance=0.5,
        samples=[
            Sample(index=i, dimension="tone", score=s, rationale=f"ok «{i}»\n", latency_s=1e-05)
            for i, s in enumerate(scores)
        ],
        mean=st.mean,
        sd=st.sd,
        n=st.n,
        ci_low=st.ci_low,
        ci_high=st.ci_high,
        fingerprint=Fingerprint(
            provider="p", model="m", temperature=0.0, prompt_hash="h", rubric_hash="r", plugin_major=0
        ),
    )


def _session(findings: list[Finding]) -> SessionResults:
    """Results as a session's end builds them: items with their comparison, the comparison's findings."""
    before = [_measurement(k, [4, 4, 5]) for k in range(4)]
    now = [_measurement(k, [2, 3, 2] if k < 2 else [4, 5, 4]) for k in range(4)]
    comparison = compare(
        BaselineFile(entries={m.item_id: entry_from_measurement(m) for m in before}), now, whole_suite=True
    )
    items = [
        ResultItem.model_construct(
            **ItemResult(
                nodeid=m.nodeid,
                kind="dimension",
                outcome="passed",
                item_id=m.item_id,
                measurements=[m],
                extra={"rubrics": {"tone": "5 = warm"}, "b": [{"y": 1, "x": None}], "a": {}},
            ).__dict__,
            verdict=comparison.items[m.item_id].verdict,
            comparison=comparison.items[m.item_id],
        )
        for m in now
    ]
    return SessionResults(
        passed=False,
        exit_status=1,
        items=items,
        dimensions=comparison.dimensions,
        findings=[*comparison.findings, *findings],
        spend={"zeta": 1.5, "alpha": [1, 2]},
        baseline={"path": "b.json", "update": None, "note": 'ünïcode "quoted"\ttab'},
    )


def test_the_items_and_findings_written_one_by_one_make_the_same_bytes_as_the_whole_document() -> None:
    results = _session(
        [Finding(kind="new", severity="info", subject="s", message="m", detail={"z": 1, "a": 2})]
    )
    assert results.findings and results.items  # (both lists written one element at a time)
    text = results_json(results)
    assert text == _whole_json(results)
    assert SessionResults.model_validate_json(text) == results
    empty = SessionResults(passed=True, exit_status=0, items=[], findings=[], spend={})
    assert results_json(empty) == _whole_json(empty)
    assert b'"items": []' in results_json(empty)


class _OwnFinding(Finding):
    """A finding of another class (a conftest's): written as the whole document writes it."""

    source: str = "conftest"


def test_an_element_of_another_class_is_written_as_the_whole_document_writes_it() -> None:
    results = _session([_OwnFinding(kind="new", severity="info", subject="s", message="m")])
    assert results_json(results) == _whole_json(results)
