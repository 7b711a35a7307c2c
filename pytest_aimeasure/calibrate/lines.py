"""Calibration in a session's reports: findings ("uncalibrated ruler", stale, judge bias), the frozen
summary the reports read, and the terminal lines (κ and bias beside each dimension's scores)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from pytest_aimeasure.calibrate.file import staleness
from pytest_aimeasure.calibrate.ppi import ppi_mean
from pytest_aimeasure.calibrate.records import CalibrationFile, DimensionCalibration, ProbeResult
from pytest_aimeasure.measure.models import Finding, Measurement
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT

RECALIBRATE = "re-calibrate: pytest --ai-judge --judge-calibrate"


def summarise(
    *,
    fresh: Mapping[str, DimensionCalibration],
    errors: Mapping[str, str],
    stored: CalibrationFile | None,
    measurements: Sequence[Measurement],
    judge_model: str | None,
    fail: bool,
    item_probes: Mapping[str, ProbeResult] | None = None,
    judges: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[Finding]]:
    """The calibration summary by dimension (JSON-ready) and its findings.

    A dimension is reported when it was calibrated now, or when it was measured now and a stored
    calibration exists for it, or when ``item_probes`` (the order probe on its test items) has it.
    ``judges``: a dimension's own judge model (``judge=``), else ``judge_model``. A calibration
    describes the standing judge: an escalated item is read through its standing measurement.
    """
    by_dim: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_dim.setdefault(m.dimension, []).append(m.standing)
    summary: dict[str, Any] = {}
    names = set(fresh) | set(errors) | ({n for n in by_dim if n in stored.dimensions} if stored else set())
    item_probes = item_probes or {}
    findings = [
        _probe_finding(name, p, f"{name}::{p.probe}(items)", n=p.n)
        for name, p in sorted(item_probes.items())
        if p.significant
    ]
    for name in sorted(names | set(item_probes)):
        probes_here = [item_probes[name].model_dump(mode="json")] if name in item_probes else []
        scores = [m.mean for m in by_dim.get(name, [])]
        if name not in names:  # probed on its test items, never calibrated against anchors
            summary[name] = {"status": "not calibrated", **_scores(scores), "item_probes": probes_here}
            continue
        if name in errors:
            summary[name] = {"status": "error", "message": errors[name]}
            findings.append(
                Finding(
                    kind="uncalibrated",
                    severity="fail" if fail else "warn",
                    subject=name,
                    message=errors[name],
                )
            )
            continue
        c = fresh.get(name) or (stored.dimensions[name] if stored else None)
        assert c is not None
        prints = [m.fingerprint for m in by_dim.get(name, [])]
        stale = [] if name in fresh else staleness(c, prints, (judges or {}).get(name, judge_model))
        summary[name] = _entry(c, scores, stale, fresh=name in fresh, item_probes=probes_here)
        findings += _findings(c, stale, fresh=name in fresh, fail=fail)
    return summary, findings


def _scores(scores: Sequence[float]) -> dict[str, Any]:
    return {"score_mean": round(sum(scores) / len(scores), 4) if scores else None, "items": len(scores)}


def _entry(
    c: DimensionCalibration, scores: Sequence[float], stale: list[str], *, fresh: bool, item_probes: list[Any]
) -> dict[str, Any]:
    """A calibrated dimension's summary entry: status, verdict, this session's scores, the human scale."""
    return {
        "status": "stale" if stale else STATUS[c.verdict],
        "verdict": None if stale else c.verdict,
        "fresh": fresh,
        "stale_because": stale,
        **_scores(scores),
        "human_scale": None if stale else human_scale(c, scores),
        "calibration": c.model_dump(mode="json"),
        "item_probes": item_probes,
    }


def _findings(c: DimensionCalibration, stale: list[str], *, fresh: bool, fail: bool) -> list[Finding]:
    """A stale calibration's warning; else the verdict's finding and (fresh only) the probes' biases."""
    name = c.dimension
    if stale:
        return [
            Finding(
                kind="calibration_stale",
                severity="warn",
                subject=name,
                message=f"{name}: the stored calibration was made with another ruler "
                f"({'; '.join(stale)}); its κ and bias no longer describe this judge. {RECALIBRATE}",
                detail={"stale_because": stale},
            )
        ]
    found = _verdict_finding(c, fail=fail and fresh)
    out = [found] if found is not None else []
    return out + [_probe_finding(name, p, f"{name}::{p.probe}") for p in c.probes if p.significant and fresh]


def _probe_finding(name: str, p: ProbeResult, subject: str, n: int | None = None) -> Finding:
    detail: dict[str, Any] = {"probe": p.probe, "effect": p.effect, "ci": [p.ci_low, p.ci_high]}
    if n is not None:
        detail["n"] = n
    return Finding(
        kind="judge_bias", severity="warn", subject=subject, message=f"{name}: {p.message}", detail=detail
    )


STATUS = {"trusted": "calibrated", "untrusted": "uncalibrated", "inconclusive": "inconclusive"}
"""The summary's ``status`` of each trust verdict (a stale calibration is ``stale`` whatever it said)."""
INCONCLUSIVE_MEANS = (
    "the anchors cannot yet tell whether this judge agrees with people well enough: its interval "
    "straddles the threshold. Not a failure, even under --judge-calibrate=fail (that fails on untrusted "
    "only); label more anchors (aimeasure label) to decide it"
)


def _verdict_finding(c: DimensionCalibration, *, fail: bool) -> Finding | None:
    """An untrusted ruler's finding (a failure under --judge-calibrate=fail), or an inconclusive one's
    (a warning with its label budget)."""
    detail = {"kappa": c.agreement.kappa, "bias": c.bias.mean, "problems": c.problems, "verdict": c.verdict}
    if c.verdict == "untrusted":
        return Finding(
            kind="uncalibrated",
            severity="fail" if fail else "warn",
            subject=c.dimension,
            message=f"uncalibrated ruler: {c.dimension}: untrusted: "
            + "; ".join(c.problems)
            + f" (against {c.anchors} human-labelled anchors). Read its scores with care.",
            detail=detail,
        )
    if c.verdict != "inconclusive":
        return None
    budget = c.trust.budget if c.trust is not None else None
    need = (
        f"about {budget} anchors in all ({budget - c.anchors} more) would likely decide it"
        if budget is not None
        else "no practical number of anchors is likely to decide it (the agreement sits on the threshold)"
    )
    return Finding(
        kind="uncalibrated",
        severity="warn",
        subject=c.dimension,
        message=f"inconclusive ruler: {c.dimension}: " + "; ".join(c.problems) + f"; {need}. "
        f"Inconclusive means {INCONCLUSIVE_MEANS}.",
        detail={**detail, "budget": budget},
    )


def human_scale(c: DimensionCalibration, item_means: Sequence[float]) -> dict[str, Any] | None:
    """The session's mean on the human scale (PPI++ from the calibration's anchors), or None without
    items or with fewer than two anchors."""
    found = ppi_mean(item_means, *c.anchor_means())
    if found is None:
        return None
    return {
        "mean": round(found.mean, 4),
        "ci_low": round(found.ci_low, 4),
        "ci_high": round(found.ci_high, 4),
        "lambda": round(found.lam, 4),
        "judge_mean": round(found.judge_mean, 4),
        "items": found.items,
        "anchors": found.anchors,
    }


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


CALIBRATION_HEADERS = (
    "dimension",
    "score now",
    "anchors",
    "κ [95% CI]",
    "α",
    "bias [95% CI]",
    "within SD / all agree",
    "human α",
    "ruler",
)

_RULER = {
    "calibrated": "trusted",
    "uncalibrated": "UNTRUSTED",
    "inconclusive": "inconclusive",
    "stale": "stale: re-calibrate",
}
"""A calibration status as the table's ruler column says it."""


def calibration_lines(summary: Mapping[str, Any], *, var_floor: float = VAR_FLOOR_DEFAULT) -> list[str]:
    """The terminal section: each dimension's κ and bias beside its scores this session."""
    if not summary:
        return []
    rows: list[list[str]] = []
    notes: list[str] = []
    for name, entry in sorted(summary.items()):
        notes += [f"{name}: {ProbeResult.model_validate(p).message}" for p in entry.get("item_probes", [])]
        if entry["status"] == "not calibrated":
            continue
        if entry["status"] == "error":
            rows.append([name, "", "", "", "", "", "", "", entry["message"]])
            continue
        c = DimensionCalibration.model_validate(entry["calibration"])
        rows.append(_calibration_row(name, entry, c))
        notes += _calibration_notes(name, entry, c, var_floor)
    lines = [""]
    if not rows:
        return [*lines, "Judge bias probes:", *notes]
    lines.append("Calibration (judge vs human anchors):")
    table = tabulate(rows, headers=CALIBRATION_HEADERS, tablefmt="simple", disable_numparse=True)
    return [*lines, *table.splitlines(), *notes]


def _calibration_row(name: str, entry: Mapping[str, Any], c: DimensionCalibration) -> list[str]:
    """A calibrated dimension's row: its score now, κ and bias with their intervals, its ruler."""
    bias = f"{c.bias.mean:+.2f}"
    if c.bias.ci_low is not None and c.bias.ci_high is not None:
        bias += f" [{c.bias.ci_low:+.2f}, {c.bias.ci_high:+.2f}]"
    status = _RULER[entry["status"]]
    if entry["status"] == "inconclusive" and c.trust is not None and c.trust.budget is not None:
        status += f" (~{c.trust.budget} anchors)"
    kappa = _fmt(c.agreement.kappa)
    if c.trust is not None and c.trust.kappa_ci_low is not None and c.trust.kappa_ci_high is not None:
        kappa += f" [{c.trust.kappa_ci_low:.2f}, {c.trust.kappa_ci_high:.2f}]"
    return [
        name,
        _fmt(entry["score_mean"]) + (f" ({entry['items']} items)" if entry["items"] else ""),
        str(c.anchors),
        kappa,
        _fmt(c.agreement.alpha),
        bias,
        f"{c.repeatability.within_sd:.2f} / {c.repeatability.all_agree:.0%}",
        _fmt(c.human_alpha),
        status + ("" if entry["fresh"] else " (stored)"),
    ]


def _calibration_notes(
    name: str, entry: Mapping[str, Any], c: DimensionCalibration, var_floor: float
) -> list[str]:
    """The lines under the table for a calibrated dimension: its measured variance floor, its fresh
    probes, its mean on the human scale."""
    notes: list[str] = []
    if c.repeatability.var_floor is not None and not entry["stale_because"]:
        notes.append(
            f"{name}: variance floor {c.repeatability.var_floor:.4f} measured on {c.anchors} anchors × "
            f"{c.repeatability.samples} samples replaces the fixed {var_floor:.4f}"
        )
    for p in c.probes if entry["fresh"] else ():
        notes.append(f"{name}: {p.message}")
    if (hs := entry.get("human_scale")) is not None:
        notes.append(
            f"{name}: on the human scale {hs['mean']:.2f} [{hs['ci_low']:.2f}, {hs['ci_high']:.2f}] "
            f"beside the judge's {hs['judge_mean']:.2f} "
            f"(PPI++, λ {hs['lambda']:.2f}, {hs['anchors']} anchors)"
        )
    return notes


def _verdict_note(c: DimensionCalibration) -> str:
    text = f"trust verdict: {c.verdict}"
    if c.trust is not None and c.trust.kappa_ci_low is not None and c.trust.kappa_ci_high is not None:
        text += f" (κ 95% CI [{c.trust.kappa_ci_low:.2f}, {c.trust.kappa_ci_high:.2f}]"
        text += f"; ~{c.trust.budget} anchors would likely decide it)" if c.trust.budget else ")"
    return text


def calibration_figures(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The HTML report's calibration figures (``report.results.CalibrationFigure`` as dicts): per
    calibrated dimension, the judge's mean score per human level (the reliability points), the
    agreement statistics, the bias and the probes' effects, and the ruler's status as notes."""
    figures: list[dict[str, Any]] = []
    for name, entry in sorted(summary.items()):
        if "calibration" not in entry:
            continue  # an error, or only the order probe on test items
        c = DimensionCalibration.model_validate(entry["calibration"])
        a = c.agreement
        agreement = {
            "weighted_kappa": a.kappa,
            "krippendorff_alpha": a.alpha,
            "spearman": a.spearman,
            "exact": a.exact,
            "within_one": a.within_one,
            "human_alpha": c.human_alpha,
        }
        bias: dict[str, float] = {"mean": c.bias.mean}
        bias.update({p.probe: p.effect for p in c.probes if p.probe != "range"})
        notes = [f"ruler: {entry['status']}" + (" (stored)" if not entry.get("fresh") else "")]
        if entry.get("verdict") is not None:
            notes.append(_verdict_note(c))
        if (hs := entry.get("human_scale")) is not None:
            notes.append(
                f"human scale (PPI++, λ {hs['lambda']:.2f}): {hs['mean']:.2f} [{hs['ci_low']:.2f}, "
                f"{hs['ci_high']:.2f}] beside the judge's {hs['judge_mean']:.2f}"
            )
        notes += c.problems + [f"stale: {why}" for why in entry.get("stale_because", [])]
        if c.bias.ci_low is not None and c.bias.ci_high is not None:
            notes.append(f"bias 95% CI [{c.bias.ci_low:+.2f}, {c.bias.ci_high:+.2f}]")
        notes += [p.message for p in c.probes]
        figures.append(
            {
                "dimension": name,
                "anchors": c.anchors,
                "agreement": {k: v for k, v in agreement.items() if v is not None},
                "bias": bias,
                "bins": [{"reference": b.level, "judge": b.judge_mean, "n": b.n} for b in c.bias.by_level],
                "notes": notes,
            }
        )
    return figures
