"""The session's results as JSON (``--aimeasure-json PATH``): the machine interface for CI and tools.

The schema is :class:`SessionResults` (``SessionResults.model_json_schema()`` prints it). It is
versioned by ``format``; fields are only ever added within a format number.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_aimeasure import __version__
from pytest_aimeasure.compare import DimensionComparison, ItemComparison
from pytest_aimeasure.models import Finding, ItemResult

RESULTS_FORMAT = 1


class ResultItem(ItemResult):
    """One test: its outcome, its measurement (samples, mean, CI, fingerprint) and its verdict."""

    verdict: str | None = Field(default=None, description="the item's comparison with the baseline")
    comparison: ItemComparison | None = None


class SessionResults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal[1] = 1
    plugin_version: str = __version__
    run_id: str | None = None
    judge_model: str | None = None
    passed: bool
    failed_because: list[str] = Field(default_factory=list, description="why the run failed, if it did")
    exit_status: int
    items: list[ResultItem]
    dimensions: dict[str, DimensionComparison] = Field(default_factory=dict)
    findings: list[Finding]
    spend: dict[str, Any]
    baseline: dict[str, Any] = Field(default_factory=dict, description="path, and what an update did")
    comparison_tables: dict[str, Any] = Field(default_factory=dict, description="suite target tables")


def write_results(path: Path, results: SessionResults) -> None:
    """Write atomically: CI readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_results(state: Any, outcome: Any, exit_status: int) -> SessionResults:
    comparison = outcome.comparison
    items: list[ResultItem] = []
    for result in sorted(state.results.values(), key=lambda r: r.nodeid):
        item_cmp = comparison.items.get(result.item_id) if comparison is not None and result.item_id else None
        items.append(
            ResultItem(
                **result.model_dump(),
                verdict=item_cmp.verdict if item_cmp is not None else None,
                comparison=item_cmp,
            )
        )
    recording = state.recording
    return SessionResults(
        run_id=recording.run_id if recording is not None else None,
        judge_model=state.settings.model,
        passed=outcome.passed,
        failed_because=outcome.failed_because,
        exit_status=exit_status,
        items=items,
        dimensions=comparison.dimensions if comparison is not None else {},
        findings=outcome.findings,
        spend=state.spend(),
        baseline={
            "path": str(state.settings.baseline),
            "update": outcome.baseline_update,
            "note": outcome.baseline_note,
        },
        comparison_tables=outcome.tables,
    )
