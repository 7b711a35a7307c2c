"""The instrument's error bars: pure functions, no I/O, no numpy/scipy.

Notation follows the "Statistics" section of the design notes: one dimension has items i = 1..m,
item i has n_i judge samples with mean x̄_i and sample variance v_i (ddof 1).

Choices made here (and why):

* **Variance floor.** Temperature-0 repeats are often identical, so a raw variance of 0 would give
  a zero-width interval and make any one-point change "significant". Every interval and test uses
  ``max(variance, var_floor)``; the default 1/12 is the variance of rounding to an integer, the
  least noise a 1–5 integer score can honestly claim.
* **Pooled within-item variance** weights each item by its degrees of freedom (n_i − 1), the usual
  pooled estimator. With equal n it is exactly mean_i v_i and df = m(N − 1), as in the design; an
  item with a single sample adds no variance information and therefore no weight.
* **Degrees of freedom are at least 1.** A single sample (or a pool with no replicated item) has no
  variance estimate at all; we then rely on the floor and use t with df = 1 instead of pretending the
  floor is a known variance (z). The interval is very wide (n = 1: mean ± 12.71·sqrt(1/12) ≈ ±3.67
  at 95%), which is the honest answer for one sample. Intervals are not clipped to the 1–5 scale.
* **Drift p-value** is one-sided, for the regression hypothesis: H0 "no drop" (Δ ≥ 0) against
  H1 Δ < 0, ``p = P(T_df ≤ D / SE_D)``. "95% CI upper bound < 0" is exactly ``p < 0.025``, so Holm
  run at ``alpha / 2`` on these p-values reduces to the unadjusted rule for a single comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

VAR_FLOOR_DEFAULT = 1.0 / 12.0
"""Variance of the rounding error of an integer score: the least noise a 1–5 score can claim."""

MIN_ITEMS_FOR_ITEM_SE = 5
"""SE_items (spread of item means) is only estimated from this many items; fewer give a useless sd."""

DriftVerdict = Literal["regressed", "improved", "stable", "inconclusive"]

_NORMAL = NormalDist()
_EPS = 1e-15
_TINY = 1e-300
_MAX_CF_ITERATIONS = 100_000
# Past this many degrees of freedom the t distribution equals the normal to far better than the
# ~1e-6 any verdict could care about, and the continued fraction would need ~sqrt(df) steps.
_DF_NORMAL = 1e7


# --------------------------------------------------------------------------------------------------
# Student t distribution
# --------------------------------------------------------------------------------------------------


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), converges for
    x < (a + 1) / (a + b + 2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_CF_ITERATIONS + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def _regularized_beta(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b), with ``y = 1 - x`` passed separately so that x close to 1 keeps its precision."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_continued_fraction(a, b, x) / a
    return 1.0 - front * _beta_continued_fraction(b, a, y) / b


def _check_df(df: float) -> None:
    if not df > 0:  # also rejects NaN
        raise ValueError(f"degrees of freedom must be > 0, got {df}")


def t_sf(t: float, df: float) -> float:
    """Upper tail P(T > t) of Student's t with ``df`` (may be fractional or ``math.inf``)."""
    _check_df(df)
    if math.isnan(t):
        raise ValueError("t is NaN")
    if math.isinf(df) or df > _DF_NORMAL:
        return 1.0 - _NORMAL.cdf(t) if t < 0 else _NORMAL.cdf(-t)
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    t2 = t * t
    # P(|T| > |t|) = I_{df/(df+t²)}(df/2, 1/2); the complement t²/(df+t²) is computed directly.
    two_sided = _regularized_beta(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))
    return 0.5 * two_sided if t >= 0 else 1.0 - 0.5 * two_sided


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) of Student's t with ``df`` degrees of freedom."""
    return t_sf(-t, df)


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value P(|T| ≥ |t|)."""
    return min(1.0, 2.0 * t_sf(abs(t), df))


def _t_pdf(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def _cornish_fisher(z: float, df: float) -> float:
    """Asymptotic expansion of the t quantile in 1/df (Abramowitz & Stegun 26.7.5): a start value."""
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t: the t with P(T ≤ t) = p. ``df`` may be fractional or ``math.inf``.

    Exact closed forms for df = 1 and 2; otherwise a safeguarded Newton iteration on the upper tail
    (computed from the regularised incomplete beta), started from the Cornish–Fisher expansion.
    Agrees with scipy.stats.t.ppf to ~1e-8 relative (checked for df from 1 to 5e6).
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    _check_df(df)
    if math.isinf(df) or df > _DF_NORMAL:
        return _NORMAL.inv_cdf(p)
    if p == 0.5:
        return 0.0
    if df == 1.0:
        return math.tan(math.pi * (p - 0.5))
    if df == 2.0:
        return (2.0 * p - 1.0) / math.sqrt(2.0 * p * (1.0 - p))
    sign = 1.0 if p > 0.5 else -1.0
    q = min(p, 1.0 - p)  # solve t_sf(t) = q for t > 0, then apply the sign
    lo, hi = 0.0, max(_cornish_fisher(_NORMAL.inv_cdf(1.0 - q), df), 1.0)
    while t_sf(hi, df) > q:
        lo, hi = hi, hi * 2.0
    t = 0.5 * (lo + hi)
    for _ in range(200):
        excess = t_sf(t, df) - q  # > 0 means t is too small
        if excess > 0:
            lo = t
        else:
            hi = t
        step = excess / _t_pdf(t, df)
        candidate = t + step
        if not lo < candidate < hi:
            candidate = 0.5 * (lo + hi)
        if abs(candidate - t) <= 1e-13 * max(1.0, abs(t)):
            return sign * candidate
        t = candidate
    return sign * t


# --------------------------------------------------------------------------------------------------
# Descriptive statistics with error bars
# --------------------------------------------------------------------------------------------------


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample variance (ddof 1; 0 for a single value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.fsum((x - mean) ** 2 for x in values) / (n - 1)


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _two_sided_t(confidence: float, df: float) -> float:
    return t_ppf(0.5 + confidence / 2.0, df)


@dataclass(frozen=True)
class ItemStats:
    """One item's N samples: mean, raw spread, and a t interval that uses the floored variance."""

    mean: float
    var: float
    """Sample variance (ddof 1), not floored; 0 for n = 1."""
    sd: float
    n: int
    ci_low: float
    ci_high: float
    confidence: float
    df: float
    """Degrees of freedom of the interval: max(n − 1, 1)."""


def item_stats(
    scores: Sequence[float], *, var_floor: float = VAR_FLOOR_DEFAULT, confidence: float = 0.95
) -> ItemStats:
    """Mean, sample variance and a t confidence interval for one item's samples.

    The interval is mean ± t_{(1+c)/2, df} · sqrt(max(var, var_floor) / n), df = max(n − 1, 1).
    """
    if not scores:
        raise ValueError("an item needs at least one score")
    _check_confidence(confidence)
    n = len(scores)
    mean, var = _mean_var(scores)
    df = float(max(n - 1, 1))
    half = _two_sided_t(confidence, df) * math.sqrt(max(var, var_floor) / n)
    return ItemStats(
        mean=mean,
        var=var,
        sd=math.sqrt(var),
        n=n,
        ci_low=mean - half,
        ci_high=mean + half,
        confidence=confidence,
        df=df,
    )


def _pooled_within(items: Sequence[Sequence[float]], var_floor: float) -> tuple[float, float, float]:
    """(raw pooled within-item variance, floored variance, df) over the given items."""
    weighted = 0.0
    df = 0
    for scores in items:
        if len(scores) > 1:
            weighted += (len(scores) - 1) * _mean_var(scores)[1]
            df += len(scores) - 1
    raw = weighted / df if df else 0.0
    return raw, max(raw, var_floor), float(max(df, 1))


@dataclass(frozen=True)
class DimensionStats:
    """A dimension's mean over items with both error bars of the design."""

    mean: float
    """Mean of the item means: every item counts once, however many samples it has."""
    m: int
    n_samples: int
    """Total samples over all items."""
    var_within_raw: float
    """Pooled within-item variance before the floor."""
    var_within: float
    """max(var_within_raw, var_floor): the σ²_w used in SE_meas."""
    se_meas: float
    df_meas: float
    sd_items: float | None
    """sd of the item means (ddof 1); None for a single item."""
    se_items: float | None
    """sd_items / sqrt(m), only for m ≥ 5."""
    df_items: float | None
    se: float
    """The larger applicable SE, used for the interval."""
    df: float
    se_source: Literal["measurement", "items"]
    ci_low: float
    ci_high: float
    confidence: float


def dimension_stats(
    items: Sequence[Sequence[float]], *, var_floor: float = VAR_FLOOR_DEFAULT, confidence: float = 0.95
) -> DimensionStats:
    """Mean over item means, SE_meas = sqrt(σ²_w/m² · Σ 1/n_i) (= sqrt(σ²_w/(m·N)) for equal N) with
    df = Σ(n_i − 1), SE_items = sd(x̄_i)/sqrt(m) with df = m − 1 when m ≥ 5; the interval uses the
    larger of the two (the measurement one when they tie or SE_items does not apply)."""
    if not items:
        raise ValueError("a dimension needs at least one item")
    if any(not scores for scores in items):
        raise ValueError("every item needs at least one score")
    _check_confidence(confidence)
    m = len(items)
    means = [math.fsum(scores) / len(scores) for scores in items]
    mean = math.fsum(means) / m
    raw, var_within, df_meas = _pooled_within(items, var_floor)
    se_meas = math.sqrt(var_within * math.fsum(1.0 / len(scores) for scores in items)) / m
    sd_items = math.sqrt(_mean_var(means)[1]) if m > 1 else None
    se_items: float | None = None
    df_items: float | None = None
    se, df = se_meas, df_meas
    source: Literal["measurement", "items"] = "measurement"
    if m >= MIN_ITEMS_FOR_ITEM_SE and sd_items is not None:
        se_items, df_items = sd_items / math.sqrt(m), float(m - 1)
        if se_items > se_meas:
            se, df, source = se_items, df_items, "items"
    half = _two_sided_t(confidence, df) * se
    return DimensionStats(
        mean=mean,
        m=m,
        n_samples=sum(len(scores) for scores in items),
        var_within_raw=raw,
        var_within=var_within,
        se_meas=se_meas,
        df_meas=df_meas,
        sd_items=sd_items,
        se_items=se_items,
        df_items=df_items,
        se=se,
        df=df,
        se_source=source,
        ci_low=mean - half,
        ci_high=mean + half,
        confidence=confidence,
    )


# --------------------------------------------------------------------------------------------------
# Drift against a baseline
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    """Paired change of a set of items between a baseline run and a new run."""

    delta: float
    """D = mean over items of (x̄_i(new) − x̄_i(base))."""
    se: float
    df: float
    ci95: tuple[float, float]
    ci90: tuple[float, float]
    p_value: float
    """One-sided p of the regression test (H0 Δ ≥ 0 vs H1 Δ < 0): P(T_df ≤ D/SE)."""
    mde: float
    """Minimum detectable effect, (t_{0.975} + t_{0.80}) · SE: the |Δ| found 80% of the time."""
    underpowered: bool
    """MDE > tolerance: a real change as large as the tolerance would often go unnoticed."""
    verdict: DriftVerdict
    m: int
    tolerance: float
    var_within: float
    """The floored pooled within-item variance σ²_w that SE_D uses."""
    base_mean: float
    new_mean: float


def drift(
    base: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    *,
    tolerance: float,
    var_floor: float = VAR_FLOOR_DEFAULT,
) -> Drift:
    """Paired drift of ``new`` against ``base`` (item i of one pairs with item i of the other).

    SE_D = sqrt(σ²_w/m² · Σ_i (1/n_i,base + 1/n_i,new)), which is sqrt(σ²_w·(1/N_base + 1/N_new)/m)
    for equal N; σ²_w is pooled over both runs' items (df-weighted, floored) and df = Σ(n − 1) over
    both runs, at least 1. Verdicts, in order: regressed (D ≤ −tol and 95% upper < 0), improved
    (D ≥ +tol and 95% lower > 0), stable (90% CI inside (−tol, +tol)), else inconclusive.
    """
    if len(base) != len(new):
        raise ValueError(f"drift pairs items by position: {len(base)} baseline vs {len(new)} new items")
    if not base:
        raise ValueError("drift needs at least one paired item")
    if any(not scores for scores in (*base, *new)):
        raise ValueError("every paired item needs at least one score in both runs")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    m = len(base)
    base_means = [math.fsum(s) / len(s) for s in base]
    new_means = [math.fsum(s) / len(s) for s in new]
    base_mean = math.fsum(base_means) / m
    new_mean = math.fsum(new_means) / m
    delta = math.fsum(b - a for a, b in zip(base_means, new_means, strict=True)) / m
    _raw, var_within, df = _pooled_within([*base, *new], var_floor)
    inverse_ns = math.fsum(1.0 / len(a) + 1.0 / len(b) for a, b in zip(base, new, strict=True))
    se = math.sqrt(var_within * inverse_ns) / m
    t95, t90 = t_ppf(0.975, df), t_ppf(0.95, df)
    ci95 = (delta - t95 * se, delta + t95 * se)
    ci90 = (delta - t90 * se, delta + t90 * se)
    mde = (t95 + t_ppf(0.80, df)) * se
    verdict: DriftVerdict
    if delta <= -tolerance and ci95[1] < 0:
        verdict = "regressed"
    elif delta >= tolerance and ci95[0] > 0:
        verdict = "improved"
    elif -tolerance < ci90[0] and ci90[1] < tolerance:
        verdict = "stable"
    else:
        verdict = "inconclusive"
    return Drift(
        delta=delta,
        se=se,
        df=df,
        ci95=ci95,
        ci90=ci90,
        p_value=t_cdf(delta / se, df),
        mde=mde,
        underpowered=mde > tolerance,
        verdict=verdict,
        m=m,
        tolerance=tolerance,
        var_within=var_within,
        base_mean=base_mean,
        new_mean=new_mean,
    )


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected, in input order.

    Sorted ascending, p_(k) (k = 1..K) is rejected while p_(k) ≤ alpha / (K − k + 1); the first
    failure stops the procedure. Controls the family-wise error rate at ``alpha``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, index in enumerate(order):
        if p_values[index] > alpha / (len(p_values) - rank):
            break
        rejected[index] = True
    return rejected
