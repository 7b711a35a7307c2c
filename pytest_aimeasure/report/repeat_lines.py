"""The terminal's repeat tables: gates counted over generation repeats, and the items that pooled them.

A reader sees "2/3 valid" for a gate (or a suite item) whose generator failed once in three, and for a
pooled item the generation variance next to the judge's, so a wide interval is traced to its source.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tabulate import tabulate

from pytest_aimeasure.measure.models import ItemResult
from pytest_aimeasure.measure.repeats import gate_counts
from pytest_aimeasure.report.model import interval_text


def suite_counts(extra: dict[str, Any]) -> dict[str, Any] | None:
    """A suite item's counts over its repeats (``extra["suite"]["repeats"]``), if it had repeats."""
    suite = extra.get("suite")
    counts = suite.get("repeats") if isinstance(suite, dict) else None
    return counts if isinstance(counts, dict) else None


def gate_rows(results: Iterable[ItemResult]) -> list[list[str]]:
    rows: list[list[str]] = []
    for r in sorted(results, key=lambda r: r.nodeid):
        for check in gate_counts(r.extra):
            rows.append([r.nodeid, str(check.get("artifact")), f"{check['passed']}/{check['total']}", "-"])
        counts = suite_counts(r.extra)
        if counts is not None:
            total = int(counts.get("total", 0))
            rows.append(
                [
                    r.nodeid,
                    "suite output",
                    f"{counts.get('valid', 0)}/{total}",
                    f"{counts.get('timed_out', 0)}/{total}",
                ]
            )
    return rows


def pooled_rows(results: Iterable[ItemResult]) -> list[list[str]]:
    rows: list[list[str]] = []
    for r in sorted(results, key=lambda r: r.nodeid):
        for m in r.measurements:
            rep = m.repeats
            if rep is None:
                continue
            rows.append(
                [
                    m.item_id,
                    f"{rep.k} of {rep.generated}",
                    interval_text(m.mean, (m.ci_low, m.ci_high)),
                    ", ".join(f"{x:.2f}" for x in rep.means),
                    f"{rep.var_generation:.3f}",
                    f"{rep.var_judge:.3f}",
                ]
            )
    return rows


def repeat_lines(results: Iterable[ItemResult]) -> list[str]:
    """Both tables (each only when something used repeats)."""
    items = list(results)
    lines: list[str] = []
    gates = gate_rows(items)
    if gates:
        lines += ["", "Gates over repeats (valid outputs / generated):"]
        lines += tabulate(
            gates,
            headers=["test", "artifact", "valid", "timed out"],
            tablefmt="simple",
            disable_numparse=True,
        ).splitlines()
    pooled = pooled_rows(items)
    if pooled:
        lines += ["", "Repeats pooled per item (the 95% CI carries the generation variance):"]
        lines += tabulate(
            pooled,
            headers=[
                "item",
                "repeats judged",
                "mean (95% CI)",
                "repeat means",
                "generation var",
                "judge var",
            ],
            tablefmt="simple",
            disable_numparse=True,
        ).splitlines()
    return lines
