"""Shard merge: the results of a CI matrix's shards as one session.

Each shard (``pytest -k ...``, pytest-split, one machine of a matrix) writes its results with
``--aimeasure-json``. :func:`merge` puts their items together and redoes what a single process would
have done at its end: one comparison with the baseline (one family-wise correction over all the regression
tests, not per shard), one set of findings, one verdict, and optionally one baseline update. Shards
judged with different rulers cannot be one session: they are refused with the fields named.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_aimeasure.compare.drift import Comparison, compare
from pytest_aimeasure.judge.adaptive import adaptive_summary
from pytest_aimeasure.judge.engine import merge_spend
from pytest_aimeasure.measure.models import Finding, Fingerprint
from pytest_aimeasure.measure.repeats import choice_summary
from pytest_aimeasure.report.results import ResultItem, SessionResults, baseline_dimensions
from pytest_aimeasure.report.trends import DRIFT_KINDS
from pytest_aimeasure.session.outcome import drift_severities, failed_tests_reason, session_failures
from pytest_aimeasure.store.baseline import (
    BaselineError,
    BaselineFile,
    coverage_from_results,
    gone_entries,
    load_baseline,
    update_baseline,
)


class MergeError(Exception):
    """The shards cannot be merged; the message names the shard files and what differs."""


def _rulers(results: SessionResults) -> list[tuple[tuple[str, str], Fingerprint]]:
    """Each dimension's ruler: its standing judge's, and the one its escalated items were judged with
    (a dimension may have its own judge; escalation depends on the samples, not on the shard)."""
    out: list[tuple[tuple[str, str], Fingerprint]] = []
    for item in results.items:
        for m in item.measurements:
            found = [(("standing" if m.escalation is None else "escalated"), m.fingerprint)]
            if m.escalation is not None:
                found.append(("standing", m.escalation.standing.fingerprint))
            for role, fp in found:
                entry = ((m.dimension, role), fp.ruler())
                if entry not in out:
                    out.append(entry)
    return out


def _check_rulers(shards: Sequence[tuple[str, SessionResults]]) -> None:
    references: dict[tuple[str, str], tuple[str, Fingerprint]] = {}
    for name, results in shards:
        for key, fp in _rulers(results):
            reference = references.get(key)
            if reference is None:
                references[key] = (name, fp)
                continue
            fields = reference[1].differences(fp)
            if fields:
                what = ", ".join(f"{f} ({getattr(reference[1], f)!r} vs {getattr(fp, f)!r})" for f in fields)
                raise MergeError(
                    f"shard {name} was judged with a different judge fingerprint than {reference[0]} "
                    f"(dimension {key[0]!r}): {what}; shards of one session must use the same judges "
                    "(re-run the odd shard)"
                )


def _spend(shards: Sequence[SessionResults]) -> dict[str, Any]:
    # Counts add up; the in-flight maximum, the limit reached and the rate-limit pause are the
    # busiest shard's (shards may run apart, each with a limit of its own per provider).
    return merge_spend(
        [{k: v for k, v in r.spend.items() if v is None or isinstance(v, (int, float))} for r in shards],
        together=False,
    )


def merge(
    shards: Sequence[tuple[str, SessionResults]],
    *,
    baseline_path: Path,
    whole_suite: bool = True,
    update: bool = False,
    prune: bool = False,
) -> SessionResults:
    """One session's results from the shards' (named by their file). See the module docstring."""
    if not shards:
        raise MergeError("nothing to merge: give the shards' results files (written by --aimeasure-json)")
    _check_rulers(shards)
    var_floor, drift = _shared_settings(shards)
    items, run_of, findings = _pooled(shards)
    try:
        baseline = load_baseline(baseline_path)
    except BaselineError as exc:
        raise MergeError(str(exc)) from None
    measurements = [m for item in items.values() for m in item.measurements]
    # The one rule for what an update may remove (baseline.keep_reason), over every shard's tests.
    cover = coverage_from_results(items.values(), whole_suite=whole_suite, prune=prune, collected=set(items))
    gone = gone_entries(baseline, cover, {m.item_id for m in measurements if m.samples})
    comparison = None
    if drift != "off" and (measurements or baseline is not None):
        comparison = compare(
            baseline, measurements, whole_suite=whole_suite, gone_ids=gone, var_floor=var_floor
        )
        findings += drift_severities(comparison.findings, drift=drift, update_baseline=update)
    failed_because: list[str] = []
    written: dict[str, Any] = {"path": str(baseline_path), "update": None, "note": None}
    if update:
        judge_errors = [i.item_id for i in items.values() if i.judge_error and i.item_id]
        try:
            summary = update_baseline(
                baseline_path,
                measurements,
                whole_suite=whole_suite,
                prune=prune,
                judge_error_ids=judge_errors,
                coverage=cover,
                run_id=run_of,
            )
            written["update"] = summary.model_dump(mode="json")
        except BaselineError as exc:
            written["note"] = str(exc)
            failed_because.append(f"the baseline was not updated: {exc}")
    failed_because += session_failures(findings)[1]
    failed_tests = sum(1 for i in items.values() if i.outcome in ("failed", "error"))
    if failed_tests:
        failed_because.insert(0, failed_tests_reason(failed_tests))
    return _merged_results(
        shards, items, comparison, baseline, findings, failed_because, written, whole_suite=whole_suite
    )


def _shared_settings(shards: Sequence[tuple[str, SessionResults]]) -> tuple[float, Any]:
    """The variance floor and drift mode all shards ran with (one session has one of each)."""
    floors = {r.var_floor for _, r in shards}
    drifts = {r.drift for _, r in shards}
    for label, values in (("--judge-var-floor", floors), ("--aimeasure-drift", drifts)):
        if len(values) > 1:
            raise MergeError(f"the shards ran with different {label} values ({sorted(map(str, values))})")
    return floors.pop(), drifts.pop()


def _pooled(
    shards: Sequence[tuple[str, SessionResults]],
) -> tuple[dict[str, ResultItem], dict[str, str], list[Finding]]:
    """The shards' items by node id, the run each item's measurements came from (the baseline's
    sources name it), and their findings but the drift ones (redone over the whole family)."""
    items: dict[str, ResultItem] = {}
    origin: dict[str, str] = {}
    run_of: dict[str, str] = {}
    findings: list[Finding] = []
    for name, results in shards:
        for item in results.items:
            if item.nodeid in items:
                raise MergeError(
                    f"{item.nodeid} ran in two shards ({origin[item.nodeid]} and {name}): shards must "
                    "split the tests, not repeat them"
                )
            items[item.nodeid] = item
            origin[item.nodeid] = name
            if results.run_id is not None:
                run_of.update((m.item_id, results.run_id) for m in item.measurements)
        findings += [f for f in results.findings if f.kind not in DRIFT_KINDS]
    return items, run_of, findings


def _merged_results(
    shards: Sequence[tuple[str, SessionResults]],
    items: dict[str, ResultItem],
    comparison: Comparison | None,
    baseline: BaselineFile | None,
    findings: list[Finding],
    failed_because: list[str],
    written: dict[str, Any],
    *,
    whole_suite: bool,
) -> SessionResults:
    """The merged session's results: its items with their verdicts, as one process would write them."""
    merged_items = []
    for nodeid in sorted(items):
        item = items[nodeid]
        c = comparison.items.get(item.item_id) if comparison is not None and item.item_id else None
        merged_items.append(item.model_copy(update={"verdict": c.verdict if c else None, "comparison": c}))
    first = shards[0][1]
    var_floor = first.var_floor
    measured = [m for item in merged_items for m in item.measurements]
    return SessionResults(
        run_id=None,
        judge_model=first.judge_model,
        passed=not failed_because,
        failed_because=failed_because,
        exit_status=1 if failed_because else 0,
        items=merged_items,
        dimensions=comparison.dimensions if comparison is not None else {},
        findings=findings,
        spend=_spend([r for _, r in shards]),
        baseline=written,
        comparison_tables=_tables(merged_items, var_floor),
        baseline_dimensions=(
            baseline_dimensions(baseline, comparison.dimensions, comparison.items, var_floor)
            if comparison is not None
            else {}
        ),
        started_at=min((r.started_at for _, r in shards if r.started_at), default=None),
        ended_at=max((r.ended_at for _, r in shards if r.ended_at), default=None),
        var_floor=var_floor,
        drift=first.drift,
        whole_suite=whole_suite,
        shards=[name for name, _ in shards],
        sampling=adaptive_summary(measured),
        generations=choice_summary(measured),
    )


def _tables(items: list[ResultItem], var_floor: float) -> dict[str, Any]:
    """The suites' comparison tables, when suites ran."""
    if not any(i.extra.get("suite") for i in items):
        return {}
    from pytest_aimeasure.report.targets import comparison_tables

    return comparison_tables(list(items), var_floor=var_floor)
