"""The session's comparison with the baseline: per-item and per-dimension drift, Holm, findings.

Pure: no pytest, no I/O. The plugin loads the baseline, collects the session's measurements and
hands both here; the returned :class:`Comparison` goes into the session results as it is.

Rules:

* Items pair by their stable id (``dimension::nodeid``). An item without an entry is *new*; one whose
  fingerprint differs from its entry's is *not comparable* (a different ruler, not a drift); the rest
  get the drift verdict of :func:`pytest_aimeasure.stats.drift` on their own samples (m = 1).
* A dimension pools its comparable items (paired, the design's SE_D). It is *not comparable* as soon
  as one of its measured items is, since its mean would then mix two rulers; *new* when nothing pairs.
  Its tolerance is the smallest of its items' tolerances (the strictest reading).
* Holm family: every regression hypothesis the session tested, i.e. each comparable item and each
  comparable dimension, with the one-sided p-value of "Δ < 0", at level ``alpha / 2`` (so that a
  family of one reproduces the 95%-CI rule exactly). The family is every test, not just the
  candidates that already looked regressed: correcting only the pre-selected candidates would be no
  correction at all when a single false alarm stands out. Improvements are not corrected; they
  cannot fail the run. A regression Holm does not confirm becomes *inconclusive* (``demoted``).
* Missing entries (in the baseline, not measured) are reported for the whole baseline when
  ``whole_suite``, otherwise only for ``selected_ids`` (items the session selected but that produced
  no measurement). A measurement without samples counts as not measured.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_aimeasure.baseline import BaselineEntry, BaselineFile
from pytest_aimeasure.models import Finding, Fingerprint, Measurement
from pytest_aimeasure.stats import VAR_FLOOR_DEFAULT, Drift, dimension_stats, drift, holm

Verdict = Literal["new", "not_comparable", "missing", "regressed", "improved", "stable", "inconclusive"]

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
    mde: float | None = None
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
    baseline_n: int | None = None
    now_n: int | None = None


class DimensionComparison(_DriftFields):
    dimension: str
    m: int = Field(default=0, description="paired (comparable) items the drift is computed over")
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
        "mde": result.mde,
        "underpowered": result.underpowered,
        "tolerance": result.tolerance,
        "p_value": result.p_value,
    }


def _ordered_fields(fields: Collection[str]) -> list[str]:
    return [name for name in _FINGERPRINT_FIELDS if name in fields]


def _fingerprint_change(fields: Sequence[str], old: Fingerprint, new: Fingerprint) -> dict[str, Any]:
    return {name: {"baseline": getattr(old, name), "now": getattr(new, name)} for name in fields}


def compare(
    baseline: BaselineFile | None,
    measurements: Sequence[Measurement],
    *,
    whole_suite: bool,
    selected_ids: Collection[str] | None = None,
    var_floor: float = VAR_FLOOR_DEFAULT,
    alpha: float = 0.05,
    var_floors: Mapping[str, float] | None = None,
) -> Comparison:
    """Compare the session's measurements with the baseline; see the module docstring for the rules."""
    entries: dict[str, BaselineEntry] = baseline.entries if baseline is not None else {}
    measured = {m.item_id: m for m in measurements if m.samples}
    items: dict[str, ItemComparison] = {}
    item_drifts: dict[str, Drift] = {}
    fingerprint_changes: dict[str, dict[str, Any]] = {}

    for item_id, m in sorted(measured.items()):
        scores = m.scores
        common: dict[str, Any] = {
            "item_id": item_id,
            "dimension": m.dimension,
            "nodeid": m.nodeid,
            "now_mean": m.mean,
            "now_ci": (m.ci_low, m.ci_high),
            "now_n": len(scores),
        }
        entry = entries.get(item_id)
        if entry is None:
            items[item_id] = ItemComparison(verdict="new", **common)
            continue
        common |= {"baseline_mean": entry.mean, "baseline_n": entry.n}
        changed = entry.fingerprint.differences(m.fingerprint)
        if changed:
            items[item_id] = ItemComparison(verdict="not_comparable", changed_fields=changed, **common)
            fingerprint_changes[item_id] = _fingerprint_change(changed, entry.fingerprint, m.fingerprint)
            continue
        floor = (var_floors or {}).get(m.dimension, var_floor)  # a calibrated dimension's measured noise
        result = drift([entry.scores], [scores], tolerance=m.tolerance, var_floor=floor)
        item_drifts[item_id] = result
        items[item_id] = ItemComparison(**common, **_drift_fields(result))

    dimensions: dict[str, DimensionComparison] = {}
    dimension_drifts: dict[str, Drift] = {}
    for name in sorted({m.dimension for m in measured.values()}):
        members = [c for c in items.values() if c.dimension == name]
        new_ids = [c.item_id for c in members if c.verdict == "new"]
        bad = [c for c in members if c.verdict == "not_comparable"]
        paired = [c.item_id for c in members if c.item_id in item_drifts]
        floor = (var_floors or {}).get(name, var_floor)
        common = {"dimension": name, "m": len(paired), "items_new": new_ids}
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
            base_scores = [entries[i].scores for i in paired]
            new_scores = [measured[i].scores for i in paired]
            tolerance = min(measured[i].tolerance for i in paired)
            result = drift(base_scores, new_scores, tolerance=tolerance, var_floor=floor)
            now = dimension_stats(new_scores, var_floor=floor)
            dimension_drifts[name] = result
            dimensions[name] = DimensionComparison(
                baseline_mean=result.base_mean,
                now_mean=result.new_mean,
                now_ci=(now.ci_low, now.ci_high),
                **common,
                **_drift_fields(result),
            )

    # Holm over every regression hypothesis tested in this session (items and dimensions).
    family: list[tuple[_DriftFields, Drift]] = [(items[i], r) for i, r in item_drifts.items()]
    family += [(dimensions[d], r) for d, r in dimension_drifts.items()]
    rejected = holm([r.p_value for _, r in family], alpha=alpha / 2)
    for (comparison, _), is_rejected in zip(family, rejected, strict=True):
        comparison.holm_rejected = is_rejected
        if comparison.verdict == "regressed" and not is_rejected:
            comparison.verdict = "inconclusive"
            comparison.demoted = True

    missing_ids = sorted(
        item_id
        for item_id in entries
        if item_id not in measured and (whole_suite or (selected_ids is not None and item_id in selected_ids))
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
    if c.mde is not None:
        out |= {"mde": _r(c.mde), "underpowered": c.underpowered, "tolerance": c.tolerance}
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
    kind: Literal["underpowered", "inconclusive"] = "underpowered" if c.underpowered else "inconclusive"
    power = (
        f"too few samples to see a change of {c.tolerance:g}: minimum detectable effect {c.mde:.2f}"
        if c.underpowered
        else f"minimum detectable effect {c.mde:.2f}"
    )
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
