"""Comparison tables: rows per target, reliability as its own column, verdicts, rendering, stored runs."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_aimeasure.measure.models import Fingerprint, ItemResult, Measurement, RunMeta, Sample
from pytest_aimeasure.measure.stats import dimension_stats
from pytest_aimeasure.report.targets import (
    ComparisonTables,
    comparison_tables,
    percentile,
    render_tables,
    tables_from_runs,
)
from pytest_aimeasure.store.runs import RunStore
from tests.scripted import SCRIPTED_FINGERPRINT as FP


def measurement(
    nodeid: str, dimension: str, scores: list[int], floor: float = 3.0, fingerprint: Fingerprint = FP
) -> Measurement:
    mean = sum(scores) / len(scores)
    return Measurement(
        item_id=f"{dimension}::{nodeid}",
        nodeid=nodeid,
        dimension=dimension,
        floor=floor,
        tolerance=0.5,
        samples=[Sample(index=i, dimension=dimension, score=s, rationale="r") for i, s in enumerate(scores)],
        mean=mean,
        sd=0.0,
        n=len(scores),
        ci_low=mean - 0.5,
        ci_high=mean + 0.5,
        fingerprint=fingerprint,
    )


def item(
    target: str,
    prompt: str,
    *,
    scores: dict[str, list[int]] | None = None,
    latency: float | None = 1.0,
    error: str | None = None,
    gates_passed: bool = True,
    cost: float | None = 0.001,
    tokens: tuple[int, int] | None = (10, 20),
    suite: str = "s",
    model: str | None = None,
    fingerprint: Fingerprint = FP,
) -> ItemResult:
    nodeid = f"f.aimeasure.yaml::{suite}::{prompt}[{target}]"
    generation: dict[str, Any] = {
        "source": "generated",
        "latency_s": None if error else latency,
        "input_tokens": None if error or tokens is None else tokens[0],
        "output_tokens": None if error or tokens is None else tokens[1],
        "cost_usd": None if error else cost,
        "model": model,
        "error": error,
    }
    measurements = [measurement(nodeid, d, s, fingerprint=fingerprint) for d, s in (scores or {}).items()]
    return ItemResult(
        nodeid=nodeid,
        kind="other",
        outcome="error" if error else "passed",
        measurements=measurements,
        extra={
            "suite": {
                "suite": suite,
                "prompt_id": prompt,
                "target": target,
                "target_model": model or f"openai/{target}",
                "provider": "openai",
                "generation": generation,
                "gates": {"passed": gates_passed and not error, "checked": 1, "failed": []},
            }
        },
    )


@pytest.mark.parametrize(
    ("fast", "other", "fastest"),
    [
        ((0.0004, 0.0006), (0.03, 0.02), False),  # two near-instant targets: scheduling noise, no word
        ((0.001, 0.001), (0.001, 0.001), False),  # equal latencies
        ((0.5, 0.6), (2.0, 2.0), True),  # a real difference
    ],
)
def test_fastest_only_for_a_difference_above_timer_noise(
    fast: tuple[float, float], other: tuple[float, float], fastest: bool
) -> None:
    results = [
        item(target, f"p{i}", scores={"tone": [4]}, latency=s, cost=None)
        for target, latencies in (("quick", fast), ("other", other))
        for i, s in enumerate(latencies)
    ]
    rows = {r["target"]: r for r in comparison_tables(results)["suites"]["s"]["rows"]}
    assert ("fastest" in rows["quick"]["verdict"]) is fastest
    assert "fastest" not in rows["other"]["verdict"]


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)


def test_one_target_makes_no_session_table() -> None:
    assert comparison_tables([item("a", "p1", scores={"tone": [4, 4, 4]})]) == {}
    assert comparison_tables([]) == {}


def test_rows_reliability_dimensions_latency_tokens_cost_and_verdicts() -> None:
    results = [
        # strong: best quality, reliable, fast
        item("strong", "p1", scores={"tone": [5, 5, 4]}, latency=0.5),
        item("strong", "p2", scores={"tone": [5, 4, 5]}, latency=0.7),
        item("strong", "p3", scores={"tone": [4, 5, 5]}, latency=0.6),
        # capped: reliable, quality-capped (a floor breach), priced 0
        item("capped", "p1", scores={"tone": [2, 2, 3]}, latency=2.0, cost=0.0),
        item("capped", "p2", scores={"tone": [3, 3, 3]}, latency=2.0, cost=0.0),
        item("capped", "p3", scores={"tone": [3, 4, 3]}, latency=2.0, cost=0.0),
        # flaky: one generation error, one failed gate, price unknown
        item("flaky", "p1", scores={"tone": [5, 5, 5]}, latency=1.0, cost=None),
        item("flaky", "p2", error="BackendError: 500"),
        item("flaky", "p3", gates_passed=False, latency=1.0, cost=None, tokens=None),
    ]
    tables = comparison_tables(results)
    ComparisonTables.model_validate(tables)  # the JSON section round-trips through its schema
    table = tables["suites"]["s"]
    assert table["dimensions"] == ["tone"]
    assert table["prompts"] == 3
    rows = {r["target"]: r for r in table["rows"]}
    assert list(rows) == ["strong", "capped", "flaky"]
    strong, capped, flaky = rows["strong"], rows["capped"], rows["flaky"]
    expected = dimension_stats([[5, 5, 4], [5, 4, 5], [4, 5, 5]])
    assert strong["dimensions"]["tone"]["mean"] == pytest.approx(expected.mean, abs=1e-4)
    assert strong["dimensions"]["tone"]["ci_low"] == pytest.approx(expected.ci_low, abs=1e-4)
    assert strong["dimensions"]["tone"]["items"] == 3
    assert (strong["latency_p50_s"], strong["latency_p95_s"]) == (0.6, pytest.approx(0.69))
    assert (strong["input_tokens_mean"], strong["output_tokens_total"]) == (10.0, 60)
    assert strong["cost_per_generation_usd"] == pytest.approx(0.001)
    assert strong["verdict"] == "best quality, reliable; fastest"
    assert capped["floor_breaches"] == 1
    assert capped["cost_per_generation_usd"] == 0.0 and capped["cost_known"] is True
    assert capped["verdict"] == "reliable, quality-capped; cheapest"
    assert (flaky["items"], flaky["generated"], flaky["generation_errors"]) == (3, 2, 1)
    assert (flaky["gates_passed"], flaky["gate_failures"], flaky["reliability"]) == (
        1,
        1,
        pytest.approx(1 / 3, abs=1e-4),
    )
    assert flaky["cost_per_generation_usd"] is None and flaky["cost_known"] is False
    assert flaky["verdict"] == "best quality, but unreliable"

    lines = render_tables(tables)
    text = "\n".join(lines)
    assert (
        lines[0] == "Suite s: 3 rows, 3 prompts, 1 dimension "
        "(mean ± 95% CI half-width, or [low, high] where the 1–5 scale cuts it)"
    )
    header = lines[1].split()
    assert header[:8] == ["target", "model", "reliability", "(gates)", "timed", "out", "tone", "breaches"]
    assert "1/3 (1 gen error)" in text
    assert "unknown" in text and "$0 " in text and "$0.0010" in text
    assert "0.60s / 0.69s" in text


def test_many_dimensions_render_as_quality_plus_a_dimension_table() -> None:
    dims = {f"d{i}": [4, 4, 4] for i in range(5)}
    tables = comparison_tables(
        [item("a", "p", scores=dims), item("b", "p", scores={**dims, "d0": [2, 2, 2]})]
    )
    lines = render_tables(tables)
    assert "quality (5 dims)" in lines[1]
    start = next(i for i, line in enumerate(lines) if line.startswith("dimension"))
    assert lines[start].split() == ["dimension", "a", "b"]
    assert lines[start + 2].split()[:2] == ["d0", "4.00"]
    assert lines[start + 2].split()[4] == "2.00"


def test_different_rulers_are_noted() -> None:
    other = FP.model_copy(update={"model": "another-judge"})
    tables = comparison_tables(
        [item("a", "p", scores={"t": [4]}), item("b", "p", scores={"t": [4]}, fingerprint=other)]
    )
    notes = tables["suites"]["s"]["notes"]
    assert len(notes) == 1 and notes[0].startswith("scores come from more than one judge or prompt")


def test_tables_from_stored_runs_put_each_target_before_and_after_side_by_side(tmp_path: Any) -> None:
    store = RunStore(tmp_path)
    ids = []
    for n, tone in enumerate(([4, 4, 4], [2, 2, 3])):
        meta = RunMeta(
            run_id=f"2026010{n}T000000Z-000{n}",
            started_at="2026-01-01T00:00:00+00:00",
            plugin_version="0.1.0",
        )
        run = store.start_run(meta, writer="controller")
        for target in ("a", "b"):
            run.record_item(item(target, "p1", scores={"tone": tone}))
        run.close()
        ids.append(meta.run_id)
    tables, problems = tables_from_runs(store, ids)
    assert problems == []
    labels = [r["label"] for r in tables["suites"]["s"]["rows"]]
    assert labels == [f"{ids[0]}/a", f"{ids[1]}/a", f"{ids[0]}/b", f"{ids[1]}/b"]
    assert [r["run"] for r in tables["suites"]["s"]["rows"]] == [ids[0], ids[1], ids[0], ids[1]]
    # a single stored run with a single target still gets its table
    single, _ = tables_from_runs(store, ids[:1])
    assert [r["label"] for r in single["suites"]["s"]["rows"]] == ["a", "b"]
