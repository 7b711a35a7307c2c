"""How well the judge agrees with human labels: κ, α, ρ, agreement rates, confusion, bias, noise.

Pure Python on purpose: the formulas are a few lines each, and the libraries that hold them
(``krippendorff``, scikit-learn) pull numpy into every environment the plugin is installed in.
Each formula is tested against a published reference value (tests/test_calibrate_agreement.py).

Levels are the integer scores 1..5. A judge's anchor score is the mean of its N samples; where a
formula needs a level (κ, the confusion matrix, agreement rates), that mean is rounded half up,
and so is the mean of the human labels (the *human consensus*).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pytest_aimeasure.measure.models import SCORE_MAX, SCORE_MIN
from pytest_aimeasure.measure.stats import t_ppf

LEVELS = tuple(range(SCORE_MIN, SCORE_MAX + 1))


def level(value: float) -> int:
    """The score level of a mean: rounded half up (2.5 → 3), clamped to 1..5."""
    return min(SCORE_MAX, max(SCORE_MIN, math.floor(value + 0.5)))


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def sample_var(values: Sequence[float]) -> float:
    """Sample variance (ddof 1); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.fsum((v - m) ** 2 for v in values) / (len(values) - 1)


def confusion(human: Sequence[int], judge: Sequence[int]) -> list[list[int]]:
    """Counts by (human level, judge level): row = human 1..5, column = judge 1..5."""
    table = [[0] * len(LEVELS) for _ in LEVELS]
    for h, j in zip(human, judge, strict=True):
        table[h - SCORE_MIN][j - SCORE_MIN] += 1
    return table


def weighted_kappa(
    a: Sequence[int], b: Sequence[int], *, weights: Literal["quadratic", "linear", "none"] = "quadratic"
) -> float | None:
    """Cohen's weighted κ of two ratings of the same units on levels 1..5 (Cohen 1968).

    κ_w = 1 − Σ w·O / Σ w·E, with disagreement weights w_ij = (i−j)²/(k−1)² (quadratic),
    |i−j|/(k−1) (linear) or [i≠j] (none: Cohen's 1960 κ), O the observed proportions and E the
    product of the margins. None when it is undefined (both raters used one and the same level).
    """
    if len(a) != len(b) or not a:
        raise ValueError("weighted_kappa needs two equally long, non-empty rating lists")
    k = len(LEVELS)
    observed = confusion(a, b)
    rows = [sum(r) for r in observed]
    cols = [sum(observed[i][j] for i in range(k)) for j in range(k)]
    n = len(a)

    def w(i: int, j: int) -> float:
        if weights == "quadratic":
            return (i - j) ** 2 / (k - 1) ** 2
        if weights == "linear":
            return abs(i - j) / (k - 1)
        return float(i != j)

    disagree_obs = math.fsum(w(i, j) * observed[i][j] / n for i in range(k) for j in range(k))
    disagree_exp = math.fsum(w(i, j) * rows[i] * cols[j] / (n * n) for i in range(k) for j in range(k))
    if disagree_exp == 0:
        return None
    return 1.0 - disagree_obs / disagree_exp


def krippendorff_alpha(
    units: Sequence[Sequence[float]], *, metric: Literal["interval", "nominal"] = "interval"
) -> float | None:
    """Krippendorff's α over units, each the values its raters gave (any number; missing ones left out).

    α = 1 − D_o / D_e with D_o = (1/n) Σ_u 1/(m_u−1) Σ_{i≠j in u} δ²(v_i, v_j) and
    D_e = 1/(n(n−1)) Σ_{i≠j over all pairable values} δ²(v_i, v_j), n the number of pairable
    values (units with one value are not pairable and are dropped). δ² = (v_i − v_j)² for the
    interval metric, [v_i ≠ v_j] for nominal (Krippendorff 2011, "Computing Krippendorff's
    Alpha-Reliability"). None when there is no variation at all (D_e = 0) or no pairable unit.
    """

    def delta(x: float, y: float) -> float:
        return (x - y) ** 2 if metric == "interval" else float(x != y)

    pairable = [list(u) for u in units if len(u) >= 2]
    values = [v for u in pairable for v in u]
    n = len(values)
    if n < 2:
        return None
    d_o = (
        math.fsum(
            math.fsum(delta(x, y) for i, x in enumerate(u) for j, y in enumerate(u) if i != j) / (len(u) - 1)
            for u in pairable
        )
        / n
    )
    # Σ over ordered pairs of distinct positions: 2 × Σ over unordered pairs.
    if metric == "interval":
        m = mean(values)
        d_e = 2 * n * math.fsum((v - m) ** 2 for v in values) / (n * (n - 1))
    else:
        counts: dict[float, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        d_e = (n * n - sum(c * c for c in counts.values())) / (n * (n - 1))
    if d_e == 0:
        return None
    return 1.0 - d_o / d_e


def _ranks(values: Sequence[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions), 1-based."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    if len(x) != len(y) or len(x) < 2:
        return None
    mx, my = mean(x), mean(y)
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = math.fsum((a - mx) ** 2 for a in x)
    syy = math.fsum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's ρ: Pearson's r of the average ranks (ties handled). None when either is constant."""
    return pearson(_ranks(x), _ranks(y))


@dataclass(frozen=True)
class MeanCI:
    """A mean with its 95% t interval (None bounds with fewer than two values)."""

    mean: float
    ci_low: float | None
    ci_high: float | None
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None and (self.ci_low > 0 or self.ci_high < 0)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> MeanCI:
    """Mean and t interval. Identical values give a zero-width interval: that is what was measured."""
    m = mean(values)
    n = len(values)
    if n < 2:
        return MeanCI(m, None, None, n)
    half = t_ppf(0.5 + confidence / 2, n - 1) * math.sqrt(sample_var(values) / n)
    return MeanCI(m, m - half, m + half, n)


def sd_ratio_ci(
    judge: Sequence[float], human: Sequence[float], *, resamples: int = 2000, seed: int = 13
) -> tuple[float, float, float] | None:
    """SD(judge)/SD(human) over anchors with a 95% percentile bootstrap interval (anchors resampled in
    pairs, a fixed seed, so the same data always give the same interval). None when the humans do
    not vary."""
    if len(judge) < 3 or sample_var(human) == 0:
        return None
    ratio = math.sqrt(sample_var(judge) / sample_var(human))
    rng = random.Random(seed)
    n = len(judge)
    draws: list[float] = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        hv = sample_var([human[i] for i in picks])
        if hv == 0:
            continue
        draws.append(math.sqrt(sample_var([judge[i] for i in picks]) / hv))
    if len(draws) < resamples // 2:
        return None
    draws.sort()
    return ratio, draws[int(0.025 * (len(draws) - 1))], draws[int(0.975 * (len(draws) - 1))]
