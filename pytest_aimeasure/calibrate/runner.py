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
from pytest_aimeasure.calibrate import trust as tr
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
    Trust,
)
from pytest_aimeasure.judge.engine import JudgeEngine
from pytest_aimeasure.judge.errors import JudgeError, NotJudged
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
    diffs = [j - h for j, h in zip(judge_means, human_means, strict=True)]
    bias_ci = ag.mean_ci(diffs)
    probes = _probes(anchors, judge, judge_means, human_means, judge_model, padded, reversed_)
    trust = _trust(target.thresholds, human_means, judge_means, bias_ci, probes)
    rated = [list(a.labels.values()) for a in anchors if len(a.labels) >= 2]
    return DimensionCalibration(
        dimension=target.dimension,
        judge_model=judge_model,
        fingerprint=fingerprint,
        anchor_files=sorted(target.files),
        anchors=len(anchors),
        raters=max(len(a.labels) for a in anchors),
        agreement=_agreement(anchors, human_means, judge_means),
        bias=_bias(diffs, bias_ci, human_means, judge_means),
        repeatability=_repeatability(anchors, judge),
        human_alpha=_r(ag.krippendorff_alpha(rated)) if rated else None,
        thresholds=target.thresholds,
        passed=trust.verdict != "untrusted",
        problems=trust.reasons,
        trust=trust,
        probes=probes,
        scores=[
            AnchorScore(id=a.id, human=a.labels, judge=list(judge[a.id]))
            for a in sorted(anchors, key=lambda a: a.id)
        ],
    )


def _agreement(anchors: Sequence[Anchor], human_means: list[float], judge_means: list[float]) -> Agreement:
    human_levels = [ag.level(h) for h in human_means]
    judge_levels = [ag.level(j) for j in judge_means]
    n = len(anchors)
    pairs = list(zip(human_levels, judge_levels, strict=True))
    return Agreement(
        kappa=_r(ag.weighted_kappa(human_levels, judge_levels)),
        alpha=_r(
            ag.krippendorff_alpha(
                [[*a.labels.values(), jm] for a, jm in zip(anchors, judge_means, strict=True)]
            )
        ),
        spearman=_r(ag.spearman(human_means, judge_means)),
        exact=round(sum(h == j for h, j in pairs) / n, 4),
        within_one=round(sum(abs(h - j) <= 1 for h, j in pairs) / n, 4),
        confusion=ag.confusion(human_levels, judge_levels),
    )


def _bias(diffs: list[float], ci: ag.MeanCI, human_means: list[float], judge_means: list[float]) -> Bias:
    by_level: dict[int, list[int]] = defaultdict(list)
    for i, h in enumerate(human_means):
        by_level[ag.level(h)].append(i)
    return Bias(
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


def _repeatability(anchors: Sequence[Anchor], judge: dict[str, list[int]]) -> Repeatability:
    n_samples = min(len(judge[a.id]) for a in anchors)
    pooled = ag.mean([ag.sample_var(judge[a.id]) for a in anchors])
    enough = len(anchors) >= MIN_ANCHORS_FOR_NOISE and n_samples >= 2
    return Repeatability(
        samples=n_samples,
        within_sd=round(math.sqrt(pooled), 4),
        all_agree=round(sum(len(set(judge[a.id])) == 1 for a in anchors) / len(anchors), 4),
        var_floor=round(max(pooled, MIN_VAR_FLOOR), 4) if enough else None,
    )


def _probes(
    anchors: Sequence[Anchor],
    judge: dict[str, list[int]],
    judge_means: list[float],
    human_means: list[float],
    judge_model: str,
    padded: dict[str, list[int]] | None,
    reversed_: dict[str, list[int]] | None,
) -> list[ProbeResult]:
    found: list[ProbeResult | None] = []
    for variant, name, text in (
        (padded, "length", "length (neutral padding appended)"),
        (reversed_, "order", "order (several artifacts, order reversed)"),
    ):
        if variant is not None:
            deltas = [ag.mean(variant[a.id]) - ag.mean(judge[a.id]) for a in anchors if variant.get(a.id)]
            found.append(pr.paired_shift(name, text, deltas))
    if padded is not None:
        by_id = {a.id: jm for a, jm in zip(anchors, judge_means, strict=True)}
        found.append(pr.self_preference(anchors, by_id, judge_model))
        found.append(pr.range_use(judge_means, human_means))
    results = [p for p in found if p is not None]
    for p in results:
        p.effect = round(p.effect, 4) + 0.0
        p.ci_low, p.ci_high = _r(p.ci_low), _r(p.ci_high)
    return results


def _trust(
    th: Thresholds,
    human_means: list[float],
    judge_means: list[float],
    bias: ag.MeanCI,
    probes: list[ProbeResult],
) -> Trust:
    """The trust verdict: κ's interval (on the levels, as κ itself) and bias's against the thresholds."""
    kappa = tr.kappa_ci([ag.level(h) for h in human_means], [ag.level(j) for j in judge_means])
    found = tr.verdict(
        kappa,
        bias,
        min_kappa=th.min_kappa,
        max_abs_bias=th.max_abs_bias,
        failed_probes=[p.probe for p in probes if p.significant],
    )
    return Trust(
        verdict=found.verdict,
        kappa_ci_low=_r(kappa.low) if kappa is not None else None,
        kappa_ci_high=_r(kappa.high) if kappa is not None else None,
        reasons=found.reasons,
        budget=found.budget,
    )
