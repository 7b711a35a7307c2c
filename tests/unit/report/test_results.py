"""The results file's text: what results_json writes."""

from __future__ import annotations

import json

from pytest_aimeasure.report.results import SessionResults, results_json


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
