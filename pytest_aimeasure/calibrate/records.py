"""What a calibration found, per dimension: pydantic models shared by the runner, the stored
calibration file, the JSON results and the reports."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_aimeasure.measure.models import Fingerprint

MIN_KAPPA_DEFAULT = 0.6
"""Quadratic-weighted κ below this marks the ruler uncalibrated (0.61 starts "substantial" agreement
in Landis & Koch 1977; a judge that cannot reach it ranks artifacts differently from people)."""
MAX_ABS_BIAS_DEFAULT = 0.5
"""|mean judge − human| above this (half a level) marks the ruler uncalibrated."""
MIN_ANCHORS_FOR_NOISE = 10
"""Anchors needed (each judged ≥ 2 times) before their measured noise replaces the variance floor."""
MIN_VAR_FLOOR = 0.01
"""The measured variance floor never goes below this: N identical samples on every anchor do not
prove the judge noiseless, only that its noise is below what the anchors can resolve."""

ProbeName = Literal["length", "self_preference", "range", "order"]


class Thresholds(BaseModel):
    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    min_kappa: float = MIN_KAPPA_DEFAULT
    max_abs_bias: float = MAX_ABS_BIAS_DEFAULT


class AnchorScore(BaseModel):
    """One anchor's human labels and the judge's samples."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str
    human: dict[str, int]
    judge: list[int]


class LevelBias(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    level: int = Field(description="human consensus level")
    n: int
    mean_bias: float
    judge_mean: float


class Agreement(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    kappa: float | None = Field(description="quadratic-weighted Cohen's κ, judge vs human consensus")
    alpha: float | None = Field(description="Krippendorff's α (interval) over every human rater + the judge")
    spearman: float | None
    exact: float = Field(description="share of anchors where the judge's level equals the consensus")
    within_one: float
    confusion: list[list[int]] = Field(description="rows: human level 1..5, columns: judge level 1..5")


class Bias(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    mean: float = Field(description="mean over anchors of (judge mean − human mean)")
    ci_low: float | None
    ci_high: float | None
    by_level: list[LevelBias]


class Repeatability(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    samples: int
    within_sd: float = Field(description="pooled within-anchor SD of the judge's samples")
    all_agree: float = Field(description="share of anchors where all N samples gave the same score")
    var_floor: float | None = Field(
        default=None, description="measured variance floor that replaces the fixed one (enough anchors only)"
    )


class ProbeResult(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    probe: ProbeName
    effect: float
    ci_low: float | None
    ci_high: float | None
    n: int
    significant: bool
    message: str


class Trust(BaseModel):
    """The trust verdict (calibrate/trust.py): can this judge gate a release on this dimension?"""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    verdict: Literal["trusted", "untrusted", "inconclusive"]
    kappa_ci_low: float | None = Field(description="95% jackknife interval of κ (Fisher z)")
    kappa_ci_high: float | None
    reasons: list[str] = Field(default_factory=list, description="why untrusted or inconclusive")
    budget: int | None = Field(
        default=None,
        description="inconclusive: anchors in all that would likely (80%) decide it; None: decided, or "
        "no practical number would",
    )


class DimensionCalibration(BaseModel):
    """One dimension's calibration against its anchor set."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    dimension: str
    judge_model: str
    fingerprint: Fingerprint
    anchor_files: list[str]
    anchors: int
    raters: int = Field(description="most human labels on one anchor")
    agreement: Agreement
    bias: Bias
    repeatability: Repeatability
    human_alpha: float | None = Field(description="inter-rater α (interval); the ceiling for the judge")
    thresholds: Thresholds
    passed: bool = Field(description="not untrusted: the verdict is trusted or inconclusive")
    problems: list[str] = Field(default_factory=list, description="why the ruler is not trusted")
    trust: Trust | None = Field(default=None, description="None in a calibration file written before it")
    probes: list[ProbeResult] = Field(default_factory=list)
    scores: list[AnchorScore] = Field(default_factory=list)

    def anchor_means(self) -> tuple[list[float], list[float]]:
        """Per anchor, the humans' mean label and the judge's mean score (the PPI's labelled set)."""
        human = [sum(s.human.values()) / len(s.human) for s in self.scores]
        judge = [sum(s.judge) / len(s.judge) for s in self.scores]
        return human, judge

    @property
    def verdict(self) -> Literal["trusted", "untrusted", "inconclusive"]:
        """The trust verdict; a calibration stored before verdicts read its pass/fail."""
        if self.trust is not None:
            return self.trust.verdict
        return "trusted" if self.passed else "untrusted"


class CalibrationFile(BaseModel):
    """``aimeasure-calibration.json``: the latest calibration of each dimension, kept with the baseline."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    format: Literal[1] = 1
    dimensions: dict[str, DimensionCalibration] = Field(default_factory=dict)
