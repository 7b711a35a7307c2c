"""The session's comparison with the baseline: per-item and per-dimension drift, Holm, findings.

Pure: no pytest, no I/O. The session loads the baseline and collects the measurements and hands both
here; the returned :class:`Comparison` goes into the session results as it is.

Rules:

* Items pair by their stable id (``dimension::nodeid``). An item without an entry is *new*; one whose
  fingerprint differs from its entry's is *not comparable* (a different ruler, not a drift). The
  number of samples is not part of the fingerprint: a baseline taken at N = 3 compares with N = 5.
* A dimension pools its comparable items (:func:`pytest_aimeasure.measure.stats.drift`: the paired spread
  of the item differences, the within-sample judge term as a lower bound, and the between-session
  variance of the history). It is *not comparable* as soon as one of its measured items is, since its
  mean would then mix two rulers; *new* when nothing pairs. Its tolerance is the smallest of its
  items' tolerances (the strictest reading).
* History: earlier sessions of the same items under the same ruler *and the same system*. By default
  they are the sessions the baseline pools (``--update-baseline`` pools a session only when the
  ruler is unchanged and the comparison found no real change, so they differ by noise alone). Runs
  from the store in general would not do: a regression that persisted over a few runs would enter
  the history as "noise" and hide itself. A caller may pass other sessions it knows to be alike.
* Each comparable item gets its own verdict (:func:`pytest_aimeasure.measure.stats.item_drifts`): one
  difference has no spread of its own, so its between-session noise comes from the other items of
  its dimension and from history.
* Holm family: every regression hypothesis the session tested, i.e. each comparable item and each
  comparable dimension of two or more items, with the one-sided p-value of "Δ < 0", at level
  ``alpha / 2`` (so that a family of one reproduces the 95%-CI rule exactly). A dimension of one item
  is the same test as that item: it is counted once and shares the item's verdict. The family is
  every test, not just the candidates that already looked regressed: correcting only the
  pre-selected candidates would be no correction at all when a single false alarm stands out.
  Improvements are not corrected; they cannot fail the run. A regression Holm does not confirm
  becomes *inconclusive* (``demoted``). Power figures use the family's size.
* Missing entries (in the baseline, not measured) are reported for the whole baseline when
  ``whole_suite``, otherwise only for ``selected_ids`` (items the session selected but that produced
  no measurement); with ``gone_ids`` (the baseline's retention rule: tests that no longer exist) only
  those. A measurement without samples counts as not measured.
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_aimeasure.measure.models import Finding, Fingerprint, Measurement
from pytest_aimeasure.measure.stats import (
    VAR_FLOOR_DEFAULT,
    Drift,
    SessionHistory,
    dimension_stats,
    drift,
    holm,
    item_drifts,
    session_history,
)
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile

Verdict = Literal["new", "not_comparable", "missing", "regressed", "improved", "stable", "inconclusive"]

History = Sequence[Mapping[str, Sequence[int]]]
"""Earlier sessions, oldest first, each mapping item id → that session's scores of the item, all of
the same system under the same ruler as this session's measurement of the item."""


def baseline_history(entries: Mapping[str, BaselineEntry]) -> list[dict[str, list[int]]]:
    """The sessions the baseline pools, as history: an entry's k-th newest session goes into the
    k-th newest history session (items pooled by the same updates line up)."""
    depth = max((e.pooled for e in entries.values()), default=1)
    if depth < 2:
        return []
    sessions: list[dict[str, list[int]]] = [{} for _ in range(depth)]
    for item_id, entry in entries.items():
        for back, scores in enumerate(reversed(entry.session_scores()), start=1):
            sessions[depth - back][item_id] = scores
    return sessions

REBASELINE = "pytest --ai-judge --update-baseline"
_FINGERPRINT_FIELDS = list(Fingerprint.model_fields)


class _DriftFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    baseline_mean: float | None = None
    now_mean: float | None = None
    now_ci: tuple[float, float] | None = None
    delta: float | None = None
    delta_ci: tuple[float, float] | None = Field(default=None, description="95% CI of delta")
    delta_ci90: tuple[float, float] | None = Field(default=None, description="90% CI (the TOST interval)")
    se: float | None = None
    df: float | None = None
    se_source: Literal["within", "paired", "history"] | None = Field(
        default=None, description="the estimate that set se: within-sample, paired spread, or history"
    )
    mde: float | None = Field(default=None, description="true drop called regressed 80% of the time")
    power: float | None = Field(default=None, description="P(regressed | a true drop of the tolerance)")
    underpowered: bool | None = None
    tolerance: float | None = None
    changed_fields: list[str] = Field(default_factory=list)
    p_value: float | None = Field(default=None, description="one-sided p of the regression test")
    holm_rejected: bool | None = Field(default=None, description="Holm confirms a drop (None: not tested)")
    demoted: bool = Field(default=False, description="regressed before Holm, inconclusive after")


class ItemComparison(_DriftFields):
    item_id: str
    dimension: str
    nodeid: str
    compared_on: Literal["standing_judge"] | None = Field(
        default=None,
        description="escalated in one session only: compared on the standing judge's scores both hold",
    )
    baseline_n: int | None = None
    baseline_sessions: int | None = Field(default=None, description="sessions the baseline entry pools")
    now_n: int | None = None


class DimensionComparison(_DriftFields):
    dimension: str
    m: int = Field(default=0, description="paired (comparable) items the drift is computed over")
    history_sessions: int = Field(default=0, description="earlier sessions the between-session variance uses")
    items_new: list[str] = Field(default_factory=list)
    items_not_comparable: list[str] = Field(default_factory=list)


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: dict[str, ItemComparison] = Field(default_factory=dict)
    dimensions: dict[str, DimensionComparison] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    alpha: float = 0.05
    holm_family: int = Field(default=0, description="regression hypotheses Holm corrected over")

    @property
    def has_regressions(self) -> bool:
        return any(c.verdict == "regressed" for c in (*self.items.values(), *self.dimensions.values()))

    @property
    def has_not_comparable(self) -> bool:
        return any(c.verdict == "not_comparable" for c in (*self.items.values(), *self.dimensions.values()))

    def moved(self) -> set[str]:
        """Item ids that changed for real (the item or its dimension regressed or improved): a baseline
        update replaces their entries instead of pooling across sessions."""
        dims = {d for d, c in self.dimensions.items() if c.verdict in ("regressed", "improved")}
        return {
            i
            for i, c in self.items.items()
            if c.verdict in ("regressed", "improved") or (c.dimension in dims and c.verdict != "missing")
        }


# --------------------------------------------------------------------------------------------------


def _r(x: float) -> float:
    return round(x, 4)


def _pair(lo_hi: tuple[float, float]) -> list[float]:
    # A list, as JSON will give it back: findings must survive the session-results round trip.
    return [_r(lo_hi[0]), _r(lo_hi[1])]


def _drift_fields(result: Drift) -> dict[str, Any]:
    return {
        "verdict": result.verdict,
        "delta": result.delta,
        "delta_ci": result.ci95,
        "delta_ci90": result.ci90,
        "se": result.se,
        "df": result.df,
        "se_source": result.se_source,
        "mde": result.mde,
        "power": result.power,
        "underpowered": result.underpowered,
        "tolerance": result.tolerance,
        "p_value": result.p_value,
    }


def _ordered_fields(fields: Collection[str]) -> list[str]:
    return [name for name in _FINGERPRINT_FIELDS if name in fields]


def _fingerprint_change(fields: Sequence[str], old: Fingerprint, new: Fingerprint) -> dict[str, Any]:
    return {name: {"baseline": getattr(old, name), "now": getattr(new, name)} for name in fields}


def _history_of(ids: Sequence[str], history: History) -> SessionHistory | None:
    rows = [[session.get(i) for i in ids] for session in history]
    return session_history(rows) if rows else None


def _on_shared_ruler(entries: dict[str, BaselineEntry], measured: dict[str, Measurement]) -> set[str]:
    """Items escalated in one session only, compared on the judge both sessions hold: the standing one.

    An escalated measurement (and an escalated baseline entry) keeps the standing judge's scores next
    to the stronger judge's. When the baseline entry was measured by today's standing judge, or holds
    standing scores under today's ruler, the two are paired on the standing judge: one ruler, so the
    difference is a drift. Swaps ``entries`` / ``measured`` to those views in place; anything else
    with differing fingerprints stays not comparable."""
    swapped: set[str] = set()
    for item_id, m in measured.items():
        entry = entries.get(item_id)
        if entry is None or entry.fingerprint == m.fingerprint:
            continue
        if m.escalation is not None and m.escalation.standing.fingerprint == entry.fingerprint:
            measured[item_id] = m.escalation.standing  # escalated now, not in the baseline session
            swapped.add(item_id)
        elif entry.standing is not None and entry.standing.fingerprint == m.fingerprint:
            entries[item_id] = entry.on_standing_judge()  # escalated in the baseline session, not now
            swapped.add(item_id)
    return swapped


def compare(
    baseline: BaselineFile | None,
    measurements: Sequence[Measurement],
    *,
    whole_suite: bool,
    selected_ids: Collection[str] | None = None,
    gone_ids: Collection[str] | None = None,
    var_floor: float = VAR_FLOOR_DEFAULT,
    alpha: float = 0.05,
    var_floors: Mapping[str, float] | None = None,
    history: History | None = None,
) -> Comparison:
    """Compare the session's measurements with the baseline; see the module docstring for the rules.
    ``var_floors``: a calibrated dimension's measured noise floor instead of ``var_floor``.
    ``history`` None: the sessions the baseline pools (:func:`baseline_history`)."""
    # Tens of thousands of small objects are made here while the session's whole heap (every
    # measurement, sample and rationale) is alive: the cyclic collector would rescan that heap over
    # and over, which cost more than the comparison itself at 10,000 items. Nothing made here forms
    # a cycle that needs collecting before the function returns.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _compare(
            baseline,
            measurements,
            whole_suite,
            selected_ids,
            gone_ids,
            var_floor,
            alpha,
            var_floors or {},
            history,
        )
    finally:
        if paused:
            gc.enable()


def _compare(
    baseline: BaselineFile | None,
    measurements: Sequence[Measurement],
    whole_suite: bool,
    selected_ids: Collection[str] | None,
    gone_ids: Collection[str] | None,
    var_floor: float,
    alpha: float,
    var_floors: Mapping[str, float],
    history: History | None,
) -> Comparison:
    entries: dict[str, BaselineEntry] = dict(baseline.entries) if baseline is not None else {}
    measured = {m.item_id: m for m in measurements if m.samples}
    on_standing = _on_shared_ruler(entries, measured)
    items: dict[str, ItemComparison] = {}
    fingerprint_changes: dict[str, dict[str, Any]] = {}
    by_dimension: dict[str, list[str]] = {}
    paired_by_dimension: dict[str, list[str]] = {}
    commons: dict[str, dict[str, Any]] = {}

    for item_id, m in sorted(measured.items()):
        by_dimension.setdefault(m.dimension, []).append(item_id)
        common: dict[str, Any] = {
            "item_id": item_id,
            "dimension": m.dimension,
            "nodeid": m.nodeid,
            "now_mean": m.mean,
            "now_ci": (m.ci_low, m.ci_high),
            "now_n": len(m.samples),
        }
        if item_id in on_standing:
            common["compared_on"] = "standing_judge"
        entry = entries.get(item_id)
        if entry is None:
            items[item_id] = ItemComparison(verdict="new", **common)
            continue
        common |= {"baseline_mean": entry.mean, "baseline_n": entry.n, "baseline_sessions": entry.pooled}
        # Equality first: differences() dumps both models, too slow to run on every one of 10,000 items.
        changed = [] if entry.fingerprint == m.fingerprint else entry.fingerprint.differences(m.fingerprint)
        if changed:
            items[item_id] = ItemComparison(verdict="not_comparable", changed_fields=changed, **common)
            fingerprint_changes[item_id] = _fingerprint_change(changed, entry.fingerprint, m.fingerprint)
            continue
        paired_by_dimension.setdefault(m.dimension, []).append(item_id)
        commons[item_id] = common

    # Holm's family, known before any test so that every power figure can use its size: each paired
    # item, and each comparable dimension of two or more items (one item: the same test, counted once).
    not_comparable_dims = {c.dimension for c in items.values() if c.verdict == "not_comparable"}
    family_size = sum(len(ids) for ids in paired_by_dimension.values()) + sum(
        1 for d, ids in paired_by_dimension.items() if len(ids) > 1 and d not in not_comparable_dims
    )
    family_size = max(family_size, 1)

    item_drift: dict[str, Drift] = {}
    dimension_drifts: dict[str, Drift] = {}
    dimensions: dict[str, DimensionComparison] = {}
    for name in sorted(by_dimension):
        floor = var_floors.get(name, var_floor)  # a calibrated dimension's measured noise
        paired = paired_by_dimension.get(name, [])
        base_scores = [entries[i].scores for i in paired]
        new_scores = [measured[i].scores for i in paired]
        sessions = [entries[i].pooled for i in paired]
        # Only the paired items' sessions: the session also compares one item at a time.
        sessions_of = history if history is not None else baseline_history({i: entries[i] for i in paired})
        past = _history_of(paired, sessions_of) if paired and sessions_of else None
        if paired:
            results = item_drifts(
                base_scores,
                new_scores,
                tolerances=[measured[i].tolerance for i in paired],
                var_floor=floor,
                base_sessions=sessions,
                history=past,
                family=family_size,
                alpha=alpha,
            )
            for item_id, result in zip(paired, results, strict=True):
                item_drift[item_id] = result
                items[item_id] = ItemComparison(**commons[item_id], **_drift_fields(result))
        members = by_dimension[name]
        new_ids = [i for i in members if items[i].verdict == "new"]
        bad = [items[i] for i in members if items[i].verdict == "not_comparable"]
        common = {
            "dimension": name,
            "m": len(paired),
            "items_new": new_ids,
            "history_sessions": past.sessions if past is not None else 0,
        }
        if bad:
            fields = _ordered_fields({f for c in bad for f in c.changed_fields})
            dimensions[name] = DimensionComparison(
                verdict="not_comparable",
                changed_fields=fields,
                items_not_comparable=[c.item_id for c in bad],
                **common,
            )
        elif not paired:
            now = dimension_stats([measured[i].scores for i in new_ids], var_floor=floor)
            dimensions[name] = DimensionComparison(
                verdict="new", now_mean=now.mean, now_ci=(now.ci_low, now.ci_high), **common
            )
        else:
            if len(paired) == 1:
                result = item_drift[paired[0]]  # the same test as the item: item_drifts used drift()
            else:
                result = drift(
                    base_scores,
                    new_scores,
                    tolerance=min(measured[i].tolerance for i in paired),
                    var_floor=floor,
                    base_sessions=sessions,
                    history=past,
                    family=family_size,
                    alpha=alpha,
                )
                dimension_drifts[name] = result
            now = dimension_stats(new_scores, var_floor=floor)
            dimensions[name] = DimensionComparison(
                baseline_mean=result.base_mean,
                now_mean=result.new_mean,
                now_ci=(now.ci_low, now.ci_high),
                **common,
                **_drift_fields(result),
            )

    # Holm over every regression hypothesis tested in this session (items and dimensions).
    family: list[tuple[list[_DriftFields], Drift]] = []
    for item_id, result in item_drift.items():
        tied: list[_DriftFields] = [items[item_id]]
        dimension = items[item_id].dimension
        if dimension not in not_comparable_dims and dimensions[dimension].m == 1:
            tied.append(dimensions[dimension])
        family.append((tied, result))
    family += [([dimensions[d]], r) for d, r in dimension_drifts.items()]
    assert len(family) == family_size or not family
    rejected = holm([r.p_value for _, r in family], alpha=alpha / 2)
    for (comparisons, _), is_rejected in zip(family, rejected, strict=True):
        for comparison in comparisons:
            comparison.holm_rejected = is_rejected
            if comparison.verdict == "regressed" and not is_rejected:
                comparison.verdict = "inconclusive"
                comparison.demoted = True

    missing_ids = sorted(
        item_id
        for item_id in entries
        if item_id not in measured
        and (whole_suite or (selected_ids is not None and item_id in selected_ids))
        and (gone_ids is None or item_id in gone_ids)
    )
    for item_id in missing_ids:
        entry = entries[item_id]
        items[item_id] = ItemComparison(
            verdict="missing",
            item_id=item_id,
            dimension=entry.dimension,
            nodeid=entry.nodeid,
            baseline_mean=entry.mean,
            baseline_n=entry.n,
            baseline_sessions=entry.pooled,
        )

    findings = _findings(items, dimensions, fingerprint_changes, whole_suite, len(family))
    return Comparison(
        items=items, dimensions=dimensions, findings=findings, alpha=alpha, holm_family=len(family)
    )


# --------------------------------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------------------------------


def _numbers(c: _DriftFields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.baseline_mean is not None:
        out["baseline_mean"] = _r(c.baseline_mean)
    if c.now_mean is not None:
        out["now_mean"] = _r(c.now_mean)
    if c.now_ci is not None:
        out["now_ci"] = _pair(c.now_ci)
    if c.delta is not None and c.delta_ci is not None and c.delta_ci90 is not None:
        out |= {"delta": _r(c.delta), "delta_ci": _pair(c.delta_ci), "delta_ci90": _pair(c.delta_ci90)}
    if c.mde is not None and c.power is not None:
        out |= {
            "mde": _r(c.mde),
            "power": _r(c.power),
            "underpowered": c.underpowered,
            "tolerance": c.tolerance,
            "se_source": c.se_source,
        }
    if c.p_value is not None:
        out |= {"p_value": c.p_value, "holm_rejected": c.holm_rejected}
    return out


def _change_text(c: _DriftFields) -> str:
    """'3.67 → 2.33 ± 0.45 (Δ −1.33, 95% CI [−2.1, −0.6], tolerance 0.5)'."""
    assert c.baseline_mean is not None and c.now_mean is not None and c.now_ci is not None
    assert c.delta is not None and c.delta_ci is not None
    half = (c.now_ci[1] - c.now_ci[0]) / 2
    return (
        f"{c.baseline_mean:.2f} → {c.now_mean:.2f} ± {half:.2f} "
        f"(Δ {c.delta:+.2f}, 95% CI [{c.delta_ci[0]:+.2f}, {c.delta_ci[1]:+.2f}], tolerance {c.tolerance:g})"
    )


def _drift_finding(
    c: _DriftFields, subject: str, nodeid: str | None, family: int, always_inconclusive: bool
) -> Finding | None:
    if c.verdict not in ("regressed", "improved", "inconclusive"):
        return None
    if (
        not always_inconclusive
        and c.verdict == "inconclusive"
        and not c.demoted
        and c.delta is not None
        and c.tolerance is not None
        and abs(c.delta) < c.tolerance
    ):
        return None  # the common case at 10,000 items: decided before building any detail
    detail = _numbers(c)
    label = f"dimension {subject!r}" if nodeid is None else subject
    if c.verdict == "regressed":
        return Finding(
            kind="regressed",
            severity="fail",
            subject=subject,
            nodeid=nodeid,
            message=f"{label} regressed: {_change_text(c)}",
            detail=detail,
        )
    if c.verdict == "improved":
        return Finding(
            kind="improved",
            severity="warn",
            subject=subject,
            nodeid=nodeid,
            message=f"{label} improved: {_change_text(c)}; the baseline is stale, re-baseline: {REBASELINE}",
            detail=detail,
        )
    if c.verdict != "inconclusive":
        return None
    assert c.delta is not None and c.tolerance is not None and c.mde is not None
    if c.demoted:
        detail["holm_family"] = family
        return Finding(
            kind="inconclusive",
            severity="warn",
            subject=subject,
            nodeid=nodeid,
            message=(
                f"{label} looks lower, {_change_text(c)}, but the drop does not survive the Holm correction "
                f"over the {family} regression tests of this session (one-sided p = {c.p_value:.2g}); "
                "not failing the run"
            ),
            detail=detail,
        )
    # A per-item "can't tell" at small N is the normal state; only a visible move is worth a look.
    if not always_inconclusive and abs(c.delta) < c.tolerance:
        return None
    assert c.power is not None
    kind: Literal["underpowered", "inconclusive"] = "underpowered" if c.underpowered else "inconclusive"
    power = (
        f"a true drop of {c.tolerance:g} would be called regressed {c.power:.0%} of the time, "
        f"one of {c.mde:.2f} 80% of the time"
    )
    if c.underpowered:
        power = f"too few items or samples to see a change of {c.tolerance:g}: {power}"
    return Finding(
        kind=kind,
        severity="warn" if c.underpowered else "info",
        subject=subject,
        nodeid=nodeid,
        message=f"{label} inconclusive: {_change_text(c)}; {power}",
        detail=detail,
    )


def _findings(
    items: dict[str, ItemComparison],
    dimensions: dict[str, DimensionComparison],
    fingerprint_changes: dict[str, dict[str, Any]],
    whole_suite: bool,
    family: int,
) -> list[Finding]:
    findings: list[Finding] = []
    for name, d in dimensions.items():
        if d.verdict == "not_comparable":
            findings.append(
                Finding(
                    kind="not_comparable",
                    severity="fail",
                    subject=name,
                    message=(
                        f"dimension {name!r}: the judge's fingerprint changed "
                        f"({', '.join(d.changed_fields)}) for {len(d.items_not_comparable)} item(s); "
                        f"not comparable, re-baseline: {REBASELINE}"
                    ),
                    detail={
                        "changed_fields": d.changed_fields,
                        "items": {i: fingerprint_changes[i] for i in d.items_not_comparable},
                    },
                )
            )
        elif d.items_new:
            findings.append(
                Finding(
                    kind="new",
                    severity="info",
                    subject=name,
                    message=(
                        f"dimension {name!r}: {len(d.items_new)} item(s) have no baseline entry; "
                        f"record them with {REBASELINE}"
                    ),
                    detail={"items": d.items_new},
                )
            )
        finding = _drift_finding(d, name, None, family, always_inconclusive=True)
        if finding is not None:
            findings.append(finding)
    for item_id, c in items.items():
        if c.verdict == "missing":
            scope = "the whole suite ran" if whole_suite else "it was selected"
            findings.append(
                Finding(
                    kind="missing",
                    severity="warn",
                    subject=item_id,
                    nodeid=c.nodeid,
                    message=(
                        f"{item_id}: in the baseline but not measured although {scope}; if the test was "
                        f"removed or renamed, re-baseline the whole suite to drop its entry: {REBASELINE}"
                    ),
                    detail={"baseline_mean": c.baseline_mean},
                )
            )
            continue
        finding = _drift_finding(c, item_id, c.nodeid, family, always_inconclusive=False)
        if finding is not None:
            findings.append(finding)
    return findings
