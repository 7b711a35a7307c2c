"""Human-scale estimates: the judge's scores corrected by the judge–human relation on the anchors.

Prediction-powered inference with power tuning (PPI++; Angelopoulos, Duchi & Zrnic 2023,
arXiv 2311.01453) for a dimension's mean. The anchors are the labelled set (human mean Y, judge mean
f per anchor, n of them), the session's items the unlabelled one (judge means f̃, N of them):

    θ̂ = λ·mean(f̃) + mean(Y − λ·f)
    SE = sqrt(λ²·Var(f̃)/N + Var(Y − λ·f)/n),     interval θ̂ ± t(n−1)·SE
    λ̂ = Cov(Y, f) / ((1 + n/N)·Var(f ∪ f̃)), clipped to [0, 1]   (the power-tuning parameter)

λ = 1 is plain PPI (the judge's mean minus its measured bias), λ = 0 the humans' mean alone; the tuned
λ is never worse than either in large samples. The interval is valid when the anchors are drawn like
the items (the same generator, the same kind of input): anchors picked only from the hardest cases
correct the judge for those cases.

An item's own human-scale score (for ``floor_scale="human"``) is the same correction with N → ∞:
ŷ = mean(Y) + λ∞·(x̄ − mean(f)), λ∞ = Cov(Y, f)/Var(f) clipped to [0, 1]; the mean of these over the
items is θ̂ at that λ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_aimeasure.calibrate.agreement import mean, sample_var
from pytest_aimeasure.measure.stats import t_ppf


@dataclass(frozen=True)
class HumanScaleEstimate:
    mean: float
    ci_low: float
    ci_high: float
    lam: float
    """The power-tuning parameter λ used."""
    judge_mean: float
    """The judge's own mean over the items (what the report shows beside it)."""
    items: int
    anchors: int


def _pop_var(values: Sequence[float]) -> float:
    m = mean(values)
    return math.fsum((v - m) ** 2 for v in values) / len(values)


def _cov(x: Sequence[float], y: Sequence[float]) -> float:
    mx, my = mean(x), mean(y)
    return math.fsum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / len(x)


def tuned_lambda(human: Sequence[float], judge: Sequence[float], items: Sequence[float]) -> float:
    """PPI++'s power-tuning parameter for a mean, clipped to [0, 1] (0: the judge carries no signal)."""
    spread = sample_var([*judge, *items])
    if spread <= 0:
        return 0.0
    lam = _cov(human, judge) / ((1 + len(human) / len(items)) * spread)
    return min(1.0, max(0.0, lam))


def ppi_mean(
    items: Sequence[float],
    human: Sequence[float],
    judge: Sequence[float],
    *,
    lam: float | None = None,
    confidence: float = 0.95,
) -> HumanScaleEstimate | None:
    """The human-scale mean of the items (their judge means ``items``) from anchors with human means
    ``human`` and judge means ``judge``. None with fewer than 2 anchors or no item."""
    n, big_n = len(human), len(items)
    if n < 2 or big_n < 1 or len(judge) != n:
        return None
    lam = tuned_lambda(human, judge, items) if lam is None else lam
    rectifier = [y - lam * f for y, f in zip(human, judge, strict=True)]
    theta = lam * mean(items) + mean(rectifier)
    se = math.sqrt(lam**2 * _pop_var(items) / big_n + _pop_var(rectifier) / n)
    half = t_ppf(0.5 + confidence / 2, n - 1) * se
    return HumanScaleEstimate(theta, theta - half, theta + half, lam, mean(items), big_n, n)


def human_only(human: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """The humans' mean of the anchors with its t interval: what the anchors say without the judge."""
    n = len(human)
    if n < 2:
        return None
    half = t_ppf(0.5 + confidence / 2, n - 1) * math.sqrt(sample_var(human) / n)
    m = mean(human)
    return m, m - half, m + half


def slope(human: Sequence[float], judge: Sequence[float]) -> float:
    """λ∞ = Cov(Y, f)/Var(f) clipped to [0, 1]: how much of a judge difference is a human difference."""
    spread = _pop_var(judge)
    if spread <= 0:
        return 0.0
    return min(1.0, max(0.0, _cov(human, judge) / spread))


def to_human(score: float, human: Sequence[float], judge: Sequence[float]) -> float:
    """One item's judge mean on the human scale (``floor_scale="human"``)."""
    return mean(human) + slope(human, judge) * (score - mean(judge))
