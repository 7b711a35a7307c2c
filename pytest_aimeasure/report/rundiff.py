"""Two stored runs side by side: item by item and per dimension, with the baseline's statistics.

The earlier run plays the baseline: its measurements become baseline entries, and the later run is
compared with them by :func:`pytest_aimeasure.compare.drift.compare`, so the verdicts, CIs and the family
correction are exactly those a committed baseline of the earlier run would give.
"""

from __future__ import annotations

import math

from tabulate import tabulate

from pytest_aimeasure.compare.drift import Comparison, compare
from pytest_aimeasure.report.results import SessionResults
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile


def as_baseline(results: SessionResults) -> BaselineFile:
    entries: dict[str, BaselineEntry] = {}
    for item in results.items:
        for m in item.measurements:
            scores = [s.score for s in m.samples]
            if not scores:
                continue
            entries[m.item_id] = BaselineEntry(
                dimension=m.dimension,
                nodeid=m.nodeid,
                scores=scores,
                mean=math.fsum(scores) / len(scores),
                n=len(scores),
                floor=m.floor,
                tolerance=m.tolerance,
                fingerprint=m.fingerprint,
            )
    return BaselineFile(entries=entries)


def compare_runs(before: SessionResults, after: SessionResults) -> Comparison:
    measurements = [m for item in after.items for m in item.measurements]
    return compare(as_baseline(before), measurements, whole_suite=True, var_floor=after.var_floor)


def _ci(pair: tuple[float, float] | None, signed: bool = False) -> str:
    if pair is None:
        return ""
    fmt = "{:+.2f}" if signed else "{:.2f}"
    return f" [{fmt.format(pair[0])}, {fmt.format(pair[1])}]"


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def render_comparison(comparison: Comparison, before: str, after: str) -> list[str]:
    """Terminal lines: per dimension, then item by item (before, after, Δ with 95% CI, verdict)."""
    lines = [
        f"{before} → {after}: the earlier run as the baseline (paired by item id, one family of "
        f"{comparison.family} regression tests)"
    ]
    if comparison.dimensions:
        rows = [
            [
                name,
                _num(d.baseline_mean),
                _num(d.now_mean) + _ci(d.now_ci),
                _num(d.delta, True) + _ci(d.delta_ci, True),
                str(d.m),
                d.verdict + (" (not confirmed)" if d.demoted else ""),
            ]
            for name, d in sorted(comparison.dimensions.items())
        ]
        lines += ["", "dimensions"]
        lines += tabulate(
            rows,
            headers=["dimension", "before", "after (95% CI)", "Δ (95% CI)", "items", "verdict"],
            disable_numparse=True,
        ).splitlines()
    if comparison.items:
        rows = [
            [
                item_id,
                _num(c.baseline_mean),
                _num(c.now_mean) + _ci(c.now_ci),
                _num(c.delta, True) + _ci(c.delta_ci, True),
                c.verdict + (f": {', '.join(c.changed_fields)} changed" if c.changed_fields else ""),
            ]
            for item_id, c in sorted(comparison.items.items())
        ]
        lines += ["", "items"]
        lines += tabulate(
            rows, headers=["item", "before", "after (95% CI)", "Δ (95% CI)", "verdict"], disable_numparse=True
        ).splitlines()
    return lines
