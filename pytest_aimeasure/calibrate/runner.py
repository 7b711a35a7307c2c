"""Judge every anchor through the session's engine (the same prompt path, journal, cache and budget as
real items), then measure the judge against the humans: agreement, bias, repeatability, probes."""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_aimeasure.calibrate import agreement as ag
from pytest_aimeasure.calibrate import bias as pr
from pytest_aimeasure.calibrate.anchors import Anchor
from pytest_aimeasure.calibrate.records import (
    MIN_ANCHORS_FOR_NOISE,
    MIN_VAR_FLOOR,
    Agreement,
    AnchorScore,
    Bias,
    DimensionCalibration,
    LevelBias,
    ProbeResult,
    Repeatability,
    Thresholds,
)
from pytest_aimeasure.judge.engine import JudgeEngine, JudgeError, NotJudged
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.measure.models import Fingerprint, Measurement


@dataclass
class CalibrationTarget:
    """One dimension to calibrate: its anchors and the rubric its real items are judged with."""

    dimension: str
    rubric: str
    anchors: list[Anchor]
    files: list[str]
    thresholds: Thresholds = field(default_factory=Thresholds)
    judge: str | None = None
    """The dimension's own judge model (``judge=``); None: the session's."""


@dataclass
class CalibrationRun:
    results: dict[str, DimensionCalibration] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    """Dimensions that could not be calibrated, and why (judge error, budget)."""


def anchor_item_id(dimension: str, anchor_id: str, variant: str = "") -> str:
    return f"{dimension}::anchor:{anchor_id}" + (f"::{variant}" if variant else "")


def _spec(target: CalibrationTarget, anchor: Anchor, samples: int, text: str, variant: str = "") -> ItemSpec:
    item = anchor_item_id(target.dimension, anchor.id, variant)
    return ItemSpec(
        nodeid=f"anchors::{item}",
        item_id=item,
        dimension=target.dimension,
        rubric=target.rubric,
        artifact=text,
        samples=samples,
        floor=1.0,
        facts=anchor.facts,
        judge=target.judge,
    )


def _specs(target: CalibrationTarget, samples: int, probes: bool) -> list[tuple[str, str, ItemSpec]]:
    """(anchor id, variant, spec) for every call the calibration of ``target`` makes."""
    out = [(a.id, "", _spec(target, a, samples, a.text)) for a in target.anchors]
    if probes:
        out += [
            (a.id, "padded", _spec(target, a, samples, pr.padded(a.text), "padded")) for a in target.anchors
        ]
        out += [
            (a.id, "reversed", _spec(target, a, samples, pr.reordered(a), "reversed"))
            for a in target.anchors
            if a.parts
        ]
    return out


def planned_calls(targets: Sequence[CalibrationTarget], samples: int, probes: bool) -> int:
    """Judge calls a calibration makes (for the dry run)."""
    return sum(len(_specs(t, samples, probes)) * samples for t in targets)


async def acalibrate(
    engine: JudgeEngine,
    targets: Sequence[CalibrationTarget],
    *,
    samples: int,
    probes: bool,
    judge_model: str,
) -> CalibrationRun:
    run = CalibrationRun()

    async def one(target: CalibrationTarget) -> None:
        planned = _specs(target, samples, probes)
        found = await asyncio.gather(
            *(engine.ameasure(spec) for _, _, spec in planned), return_exceptions=True
        )
        by_variant: dict[str, dict[str, Measurement]] = defaultdict(dict)
        for (anchor_id, variant, _), result in zip(planned, found, strict=True):
            if isinstance(result, NotJudged):
                run.errors[target.dimension] = f"not calibrated: {result} (anchor {anchor_id})"
                return
            if isinstance(result, JudgeError | Exception):
                run.errors[target.dimension] = f"not calibrated: judge error on anchor {anchor_id}: {result}"
                return
            if isinstance(result, BaseException):
                raise result
            by_variant[variant][anchor_id] = result
        plain = by_variant[""]
        fingerprint = next(iter(plain.values())).fingerprint
        run.results[target.dimension] = analyse(
            target,
            {k: m.scores for k, m in plain.items()},
            fingerprint=fingerprint,
            judge_model=target.judge or judge_model,
            padded={k: m.scores for k, m in by_variant["padded"].items()} if probes else None,
            reversed_={k: m.scores for k, m in by_variant["reversed"].items()} if probes else None,
        )

    await asyncio.gather(*(one(t) for t in targets))
    return run


def calibrate(
    engine: JudgeEngine, targets: Sequence[CalibrationTarget], *, samples: int, probes: bool, judge_model: str
) -> CalibrationRun:
    return engine.run(acalibrate(engine, targets, samples=samples, probes=probes, judge_model=judge_model))


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4) + 0.0


def analyse(
    target: CalibrationTarget,
    judge: dict[str, list[int]],
    *,
    fingerprint: Fingerprint,
    judge_model: str,
    padded: dict[str, list[int]] | None = None,
    reversed_: dict[str, list[int]] | None = None,
) -> DimensionCalibration:
    """The calibration of one dimension from the judge's samples per anchor id (pure)."""
    anchors = [a for a in target.anchors if judge.get(a.id)]
    human_means = [a.human_mean for a in anchors]
    judge_means = [ag.mean(judge[a.id]) for a in anchors]
    human_levels = [ag.level(h) for h in human_means]
    judge_levels = [ag.level(j) for j in judge_means]
    n = len(anchors)

    exact = sum(h == j for h, j in zip(human_levels, judge_levels, strict=True)) / n
    within = sum(abs(h - j) <= 1 for h, j in zip(human_levels, judge_levels, strict=True)) / n
    agreement = Agreement(
        kappa=_r(ag.weighted_kappa(human_levels, judge_levels)),
        alpha=_r(
            ag.krippendorff_alpha(
                [[*a.labels.values(), jm] for a, jm in zip(anchors, judge_means, strict=True)]
            )
        ),
        spearman=_r(ag.spearman(human_means, judge_means)),
        exact=round(exact, 4),
        within_one=round(within, 4),
        confusion=ag.confusion(human_levels, judge_levels),
    )
    diffs = [j - h for j, h in zip(judge_means, human_means, strict=True)]
    ci = ag.mean_ci(diffs)
    by_level: dict[int, list[int]] = defaultdict(list)
    for i, lvl in enumerate(human_levels):
        by_level[lvl].append(i)
    bias = Bias(
        mean=round(ci.mean, 4) + 0.0,
        ci_low=_r(ci.ci_low),
        ci_high=_r(ci.ci_high),
        by_level=[
            LevelBias(
                level=lvl,
                n=len(idx),
                mean_bias=round(ag.mean([diffs[i] for i in idx]), 4) + 0.0,
                judge_mean=round(ag.mean([judge_means[i] for i in idx]), 4),
            )
            for lvl, idx in sorted(by_level.items())
        ],
    )
    n_samples = min(len(judge[a.id]) for a in anchors)
    variances = [ag.sample_var(judge[a.id]) for a in anchors]
    pooled = ag.mean(variances)
    enough = n >= MIN_ANCHORS_FOR_NOISE and n_samples >= 2
    repeatability = Repeatability(
        samples=n_samples,
        within_sd=round(math.sqrt(pooled), 4),
        all_agree=round(sum(len(set(judge[a.id])) == 1 for a in anchors) / n, 4),
        var_floor=round(max(pooled, MIN_VAR_FLOOR), 4) if enough else None,
    )
    rated = [list(a.labels.values()) for a in anchors if len(a.labels) >= 2]
    human_alpha = _r(ag.krippendorff_alpha(rated)) if rated else None

    problems: list[str] = []
    th = target.thresholds
    if agreement.kappa is None:
        problems.append("κ is undefined (the judge or the humans used one level only)")
    elif agreement.kappa < th.min_kappa:
        problems.append(f"κ {agreement.kappa:.2f} < min_kappa {th.min_kappa:g}")
    if abs(bias.mean) > th.max_abs_bias:
        problems.append(f"|bias| {abs(bias.mean):.2f} > max_abs_bias {th.max_abs_bias:g}")

    probe_results: list[ProbeResult] = []
    if padded is not None:
        deltas = [ag.mean(padded[a.id]) - ag.mean(judge[a.id]) for a in anchors if padded.get(a.id)]
        found = pr.paired_shift("length", "length (neutral padding appended)", deltas)
        if found is not None:
            probe_results.append(found)
    if reversed_ is not None:
        deltas = [ag.mean(reversed_[a.id]) - ag.mean(judge[a.id]) for a in anchors if reversed_.get(a.id)]
        found = pr.paired_shift("order", "order (several artifacts, order reversed)", deltas)
        if found is not None:
            probe_results.append(found)
    if padded is not None:
        sp = pr.self_preference(
            anchors, {a.id: jm for a, jm in zip(anchors, judge_means, strict=True)}, judge_model
        )
        if sp is not None:
            probe_results.append(sp)
        rg = pr.range_use(judge_means, human_means)
        if rg is not None:
            probe_results.append(rg)
    for p in probe_results:
        p.effect = round(p.effect, 4) + 0.0
        p.ci_low, p.ci_high = _r(p.ci_low), _r(p.ci_high)

    return DimensionCalibration(
        dimension=target.dimension,
        judge_model=judge_model,
        fingerprint=fingerprint,
        anchor_files=sorted(target.files),
        anchors=n,
        raters=max(len(a.labels) for a in anchors),
        agreement=agreement,
        bias=bias,
        repeatability=repeatability,
        human_alpha=human_alpha,
        thresholds=th,
        passed=not problems,
        problems=problems,
        probes=probe_results,
        scores=[
            AnchorScore(id=a.id, human=a.labels, judge=list(judge[a.id]))
            for a in sorted(anchors, key=lambda a: a.id)
        ],
    )
