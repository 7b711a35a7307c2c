"""Targets side by side: per suite, one row per target (or per run and target) with reliability as its
own column, each dimension's mean ± CI, floor breaches, latency, tokens, cost and a one-line verdict.

:func:`comparison_tables` builds the tables from a session's results (the JSON results carry them as
``comparison_tables``); :func:`tables_from_runs` builds them from stored runs for
``aimeasure compare``; :func:`render_tables` renders either for a terminal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from tabulate import tabulate

from pytest_aimeasure.measure.models import ItemResult, Measurement
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, dimension_stats
from pytest_aimeasure.report.model import interval_text

if TYPE_CHECKING:
    from pytest_aimeasure.store.runs import RunStore

__all__ = [
    "ComparisonTables",
    "SuiteTable",
    "TableRow",
    "comparison_tables",
    "render_tables",
    "tables_from_runs",
]

TABLES_FORMAT: Literal[1] = 1
QUALITY_TIE = 0.1
"""Rows within this of the best (or within the combined error bars) share the "best quality" verdict."""
QUALITY_GAP = 0.5
"""A row this far below the best (or with a floor breach) is "quality-capped"."""
MOSTLY_RELIABLE = 0.8
FASTER_BY_S = 0.05
"""A row is "fastest" only when its median latency beats the next one by more than this (and 10%):
below it, two near-instant targets (scripted, a local function) differ by scheduling noise only."""
INLINE_DIMENSIONS = 4
"""With more dimensions than this, the terminal shows a quality column and a separate dimension table."""


class DimensionCell(BaseModel):
    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    mean: float
    ci_low: float
    ci_high: float
    items: int
    samples: int
    breaches: int


class TableRow(BaseModel):
    """One target (of one run) in one suite."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    label: str
    run: str | None = None
    target: str
    model: str
    provider: str
    items: int
    generated: int = Field(description="items with an output (generated or stored)")
    generation_errors: int
    gates_passed: int
    gate_failures: int
    judge_errors: int
    reliability: float = Field(
        description="valid_outputs / outputs: generation errors and timeouts count as failures"
    )
    outputs: int = Field(default=0, description="outputs generated or attempted: items × repeats")
    valid_outputs: int = Field(default=0, description="outputs that passed every gate")
    timeouts: int = Field(default=0, description="outputs that timed out (their own column)")
    dimensions: dict[str, DimensionCell]
    quality: float | None = Field(description="mean of the dimension means; None when nothing was judged")
    quality_half_width: float | None = Field(
        default=None, description="95% CI half-width of quality (dimension intervals combined as independent)"
    )
    floor_breaches: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    input_tokens_mean: float | None
    output_tokens_mean: float | None
    input_tokens_total: int | None
    output_tokens_total: int | None
    cost_per_generation_usd: float | None = Field(description="None when any generation's price is unknown")
    cost_known: bool
    stored_outputs: int = Field(
        default=0, description="outputs loaded from a stored run (--aimeasure-rejudge/--aimeasure-resume)"
    )
    verdict: str = ""


class SuiteTable(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    suite: str
    dimensions: list[str]
    prompts: int
    rows: list[TableRow]
    notes: list[str] = Field(default_factory=list)


class ComparisonTables(BaseModel):
    """The ``comparison_tables`` section of the JSON results."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    format: Literal[1] = TABLES_FORMAT
    suites: dict[str, SuiteTable] = Field(default_factory=dict)


# -- building ----------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _suite_info(result: ItemResult) -> dict[str, Any] | None:
    info = result.extra.get("suite")
    return info if isinstance(info, dict) else None


def _output_counts(infos: list[dict[str, Any]]) -> tuple[int, int, int, int]:
    """(generation errors, outputs, valid outputs, timeouts): reliability counts outputs; with repeats,
    every repeat of an item is one (a suite's repeats: K)."""
    errors = sum(1 for i in infos if (i.get("generation") or {}).get("error"))
    outputs = valid = timeouts = 0
    for info in infos:
        counts = info.get("repeats")
        if isinstance(counts, dict):
            first_failed = 1 if (info.get("generation") or {}).get("error") else 0
            errors += int(counts.get("generation_errors", 0)) - first_failed
            outputs += int(counts.get("total", 0))
            valid += int(counts.get("valid", 0))
            timeouts += int(counts.get("timed_out", 0))
        else:
            outputs += 1
            valid += 1 if (info.get("gates") or {}).get("passed") else 0
            generation = info.get("generation") or {}
            timed_out = generation.get("timed_out") or "timeout_s" in str(generation.get("error") or "")
            timeouts += 1 if timed_out else 0
    return errors, outputs, valid, timeouts


def _dimension_cells(results: list[ItemResult], var_floor: float) -> dict[str, DimensionCell]:
    by_dimension: dict[str, list[Measurement]] = {}
    for r in results:
        for m in r.measurements:
            by_dimension.setdefault(m.dimension, []).append(m)
    cells: dict[str, DimensionCell] = {}
    for name, ms in sorted(by_dimension.items()):
        stats = dimension_stats([m.scores for m in ms], var_floor=var_floor)
        cells[name] = DimensionCell(
            mean=round(stats.mean, 4),
            ci_low=round(stats.ci_low, 4),
            ci_high=round(stats.ci_high, 4),
            items=stats.m,
            samples=stats.n_samples,
            breaches=sum(1 for m in ms if m.breached),
        )
    return cells


def _row(label: str, run: str | None, results: list[ItemResult], var_floor: float) -> TableRow:
    infos = [(r, _suite_info(r) or {}) for r in results]
    first = infos[0][1]
    generations = [i.get("generation") or {} for _, i in infos]
    gates_passed = sum(1 for _, i in infos if (i.get("gates") or {}).get("passed"))
    errors, outputs, valid, timeouts = _output_counts([i for _, i in infos])
    cells = _dimension_cells(results, var_floor)
    produced = [g for g in generations if not g.get("error")]
    latencies = [float(g["latency_s"]) for g in produced if g.get("latency_s") is not None]
    tokens_in = [int(g["input_tokens"]) for g in produced if g.get("input_tokens") is not None]
    tokens_out = [int(g["output_tokens"]) for g in produced if g.get("output_tokens") is not None]
    costs = [g.get("cost_usd") for g in produced]
    cost_known = bool(costs) and all(c is not None for c in costs)
    p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
    return TableRow(
        label=label,
        run=run,
        target=str(first.get("target", "?")),
        model=str(first.get("target_model", "?")),
        provider=str(first.get("provider", "?")),
        items=len(results),
        generated=len(produced),
        generation_errors=errors,
        gates_passed=gates_passed,
        gate_failures=sum(
            1
            for g, (_, i) in zip(generations, infos, strict=False)
            if not g.get("error") and not (i.get("gates") or {}).get("passed")
        ),
        judge_errors=sum(1 for r in results if r.judge_error),
        reliability=round(valid / outputs, 4) if outputs else 0.0,
        outputs=outputs,
        valid_outputs=valid,
        timeouts=timeouts,
        dimensions=cells,
        quality=round(sum(c.mean for c in cells.values()) / len(cells), 4) if cells else None,
        quality_half_width=round(
            math.sqrt(sum(((c.ci_high - c.ci_low) / 2) ** 2 for c in cells.values())) / len(cells), 4
        )
        if cells
        else None,
        floor_breaches=sum(c.breaches for c in cells.values()),
        latency_p50_s=None if p50 is None else round(p50, 4),
        latency_p95_s=None if p95 is None else round(p95, 4),
        input_tokens_mean=round(sum(tokens_in) / len(tokens_in), 1) if tokens_in else None,
        output_tokens_mean=round(sum(tokens_out) / len(tokens_out), 1) if tokens_out else None,
        input_tokens_total=sum(tokens_in) if tokens_in else None,
        output_tokens_total=sum(tokens_out) if tokens_out else None,
        cost_per_generation_usd=round(sum(float(c) for c in costs if c is not None) / len(costs), 8)
        if cost_known
        else None,
        cost_known=cost_known,
        stored_outputs=sum(1 for g in produced if g.get("source") == "stored"),
    )


def _clearly_lowest(value: float | None, values: list[float | None], margin: float) -> bool:
    """``value`` is the lowest of ``values`` and below every other one by more than ``margin`` and 10%."""
    known = [v for v in values if v is not None]
    if value is None or len(known) < 2 or value != min(known):
        return False
    others = sorted(known)[1:]
    return others[0] - value > margin and value < others[0] * 0.9


def _verdict(row: TableRow, rows: list[TableRow]) -> str:
    if row.generated == 0:
        return "ruled out: no output"
    if row.reliability >= 1:
        reliable = "reliable"
    elif row.reliability >= MOSTLY_RELIABLE:
        reliable = "mostly reliable"
    else:
        reliable = "unreliable"
    judged = [r for r in rows if r.quality is not None]
    if row.quality is None:
        text = f"{reliable}; not judged"
    elif len(judged) < 2:
        text = f"{reliable}, below a floor" if row.floor_breaches else f"{reliable}, above every floor"
    else:
        best = max(judged, key=lambda r: r.quality or 0.0)
        gap = (best.quality or 0.0) - row.quality
        # Not measurably below the best: the gap is within the combined error bars (or tiny).
        noise = math.hypot(row.quality_half_width or 0.0, best.quality_half_width or 0.0)
        if gap <= max(QUALITY_TIE, noise) and not row.floor_breaches:
            text = "best quality" + (", reliable" if reliable == "reliable" else f", but {reliable}")
        elif gap >= QUALITY_GAP or row.floor_breaches:
            text = f"{reliable}, quality-capped"
        else:
            text = f"{reliable}, near the best quality"
    extras: list[str] = []
    if _clearly_lowest(row.latency_p50_s, [r.latency_p50_s for r in rows if r.generated], FASTER_BY_S):
        extras.append("fastest")
    if _clearly_lowest(
        row.cost_per_generation_usd, [r.cost_per_generation_usd for r in rows if r.generated], 0.0
    ):
        extras.append("cheapest")
    return text + (f"; {', '.join(extras)}" if extras else "")


def _rulers(results: list[ItemResult]) -> set[str]:
    return {
        f"{m.fingerprint.provider}/{m.fingerprint.model} (prompt {m.fingerprint.prompt_hash})"
        for r in results
        for m in r.measurements
    }


def build_tables(
    groups: Sequence[tuple[str | None, list[ItemResult]]],
    *,
    min_rows: int = 2,
    var_floor: float = VAR_FLOOR_DEFAULT,
) -> dict[str, Any]:
    """Tables from ``(run id or None, results)`` groups; a suite needs ``min_rows`` rows to get one.
    Rows are labelled ``target``, or ``run/target`` when more than one group is given."""
    per_suite: dict[str, dict[tuple[str, str | None], list[ItemResult]]] = {}
    prompts: dict[str, set[str]] = {}
    labelled = len(groups) > 1
    for run, results in groups:
        for result in results:
            info = _suite_info(result)
            if info is None:
                continue
            suite = str(info.get("suite", "?"))
            per_suite.setdefault(suite, {}).setdefault((str(info.get("target", "?")), run), []).append(result)
            prompts.setdefault(suite, set()).add(str(info.get("prompt_id", "")))
    tables = ComparisonTables()
    order = {run: i for i, (run, _) in enumerate(groups)}
    for suite, by_row in per_suite.items():
        if len(by_row) < min_rows:
            continue
        targets_seen: list[str] = []
        for target, _ in by_row:
            if target not in targets_seen:
                targets_seen.append(target)
        # The same target's rows sit together, runs in the order given: before/after reads across.
        keys = sorted(by_row, key=lambda k: (targets_seen.index(k[0]), order.get(k[1], 0)))
        rows = [
            _row(f"{run}/{target}" if labelled and run else target, run, by_row[(target, run)], var_floor)
            for target, run in keys
        ]
        for row in rows:
            row.verdict = _verdict(row, rows)
        notes: list[str] = []
        rulers = _rulers([r for results in by_row.values() for r in results])
        if len(rulers) > 1:
            notes.append(
                "scores come from more than one judge or prompt (" + "; ".join(sorted(rulers)) + "): "
                "compare rows judged by the same ruler only"
            )
        if any(row.stored_outputs for row in rows):
            notes.append(
                "stored outputs (--aimeasure-rejudge/--aimeasure-resume) show the figures of the run that "
                "generated them"
            )
        dims = sorted({name for row in rows for name in row.dimensions})
        tables.suites[suite] = SuiteTable(
            suite=suite, dimensions=dims, prompts=len(prompts.get(suite, ())), rows=rows, notes=notes
        )
    if not tables.suites:
        return {}
    return tables.model_dump(mode="json")


def comparison_tables(results: list[ItemResult], *, var_floor: float = VAR_FLOOR_DEFAULT) -> dict[str, Any]:
    """The session's suite tables (JSON-able); ``{}`` unless some suite measured two or more targets."""
    return build_tables([(None, results)], min_rows=2, var_floor=var_floor)


def tables_from_runs(store: RunStore, run_ids: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Tables from stored runs (their ``items.jsonl``); ``run_ids`` must be resolved ids. Returns the
    tables and the problems met reading the runs."""
    groups: list[tuple[str | None, list[ItemResult]]] = []
    problems: list[str] = []
    for run_id in run_ids:
        run = store.open_run(run_id)
        try:
            items, item_problems = run.read_items()
        finally:
            run.close()
        problems += [f"{run_id}: {p}" for p in item_problems]
        groups.append((run_id, items))
    return build_tables(groups, min_rows=1), problems


# -- rendering ---------------------------------------------------------------------------------------
def _money(value: float | None, known: bool) -> str:
    if not known or value is None:
        return "unknown"
    if value == 0:
        return "$0"
    return "<$0.0001" if value < 0.0001 else f"${value:.4f}"


def _cell(cell: DimensionCell | None) -> str:
    if cell is None:
        return "-"
    return interval_text(cell.mean, (cell.ci_low, cell.ci_high))


def _reliability(row: TableRow) -> str:
    text = f"{row.valid_outputs}/{row.outputs}" if row.outputs else f"{row.gates_passed}/{row.items}"
    notes = []
    if row.generation_errors:
        notes.append(f"{row.generation_errors} gen error{'s' if row.generation_errors > 1 else ''}")
    if row.judge_errors:
        notes.append(f"{row.judge_errors} judge error{'s' if row.judge_errors > 1 else ''}")
    return text + (f" ({', '.join(notes)})" if notes else "")


def _latency(row: TableRow) -> str:
    if row.latency_p50_s is None or row.latency_p95_s is None:
        return "-"
    return f"{row.latency_p50_s:.2f}s / {row.latency_p95_s:.2f}s"


def _tokens(row: TableRow) -> str:
    if row.input_tokens_mean is None and row.output_tokens_mean is None:
        return "-"

    def fmt(value: float | None) -> str:
        return "?" if value is None else f"{value:.0f}"

    return f"{fmt(row.input_tokens_mean)}/{fmt(row.output_tokens_mean)}"


def render_tables(tables: dict[str, Any]) -> list[str]:
    """Terminal lines for :func:`comparison_tables` / :func:`tables_from_runs` output."""
    if not tables:
        return []
    parsed = ComparisonTables.model_validate(tables)
    lines: list[str] = []
    for name, table in parsed.suites.items():
        if lines:
            lines.append("")
        inline = len(table.dimensions) <= INLINE_DIMENSIONS
        lines.append(
            f"Suite {name}: {len(table.rows)} rows, {table.prompts} prompts, "
            f"{len(table.dimensions)} dimension{'s' if len(table.dimensions) != 1 else ''} "
            "(mean ± 95% CI half-width, or [low, high] where the 1–5 scale cuts it)"
        )
        headers = ["target", "model", "reliability (gates)", "timed out"]
        headers += table.dimensions if inline else [f"quality ({len(table.dimensions)} dims)"]
        headers += ["breaches", "latency p50/p95", "tokens in/out", "$/gen", "verdict"]
        rows = []
        for row in table.rows:
            cells = [row.label, row.model, _reliability(row), f"{row.timeouts}/{row.outputs or row.items}"]
            if inline:
                cells += [_cell(row.dimensions.get(d)) for d in table.dimensions]
            else:
                cells.append("-" if row.quality is None else f"{row.quality:.2f}")
            cells += [
                str(row.floor_breaches),
                _latency(row),
                _tokens(row),
                _money(row.cost_per_generation_usd, row.cost_known),
                row.verdict,
            ]
            rows.append(cells)
        lines += tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True).splitlines()
        if not inline:
            lines.append("")
            matrix = [[d, *(_cell(row.dimensions.get(d)) for row in table.rows)] for d in table.dimensions]
            lines += tabulate(
                matrix,
                headers=["dimension", *(r.label for r in table.rows)],
                tablefmt="simple",
                disable_numparse=True,
            ).splitlines()
        lines += [f"note: {note}" for note in table.notes]
    return lines
