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
  at 95%), which is the honest answer for one sample.
* **Intervals stay on the scale.** A mean of 1–5 scores lies in [1, 5], so every interval of one
  (an item's, a pooled item's, a dimension's) is the t interval intersected with [1, 5]
  (:func:`scale_interval`). Intersecting a confidence interval with the parameter's range keeps its
  coverage exactly: the true mean is always inside [1, 5], so the cut interval holds it exactly when
  the t interval does. Nothing decided by the interval changes (a floor is on the scale too), and a
  cut interval is visibly asymmetric around its mean, which the reports print as ``[low, high]``
  instead of ``± half``. A transformed interval (logit of the rescaled mean, Wilson-style) would also
  stay inside, but it is undefined for a mean at 1 or 5, the common case of a temperature-0 judge that
  gives every sample a 5, and it would move every interval that never touched a bound.
* **Drift p-value** is one-sided, for the regression hypothesis: H0 "no drop" (Δ ≥ 0) against
  H1 Δ < 0, ``p = P(T_df ≤ D / SE_D)``. "95% CI upper bound < 0" is exactly ``p < 0.025``, so Holm
  run at ``alpha / 2`` on these p-values reduces to the unadjusted rule for a single comparison.
* **Drift noise model.** A generator is usually non-deterministic and a temperature-0 judge repeats
  itself, so an item's quality moves between sessions while its N samples agree: the within-sample
  spread alone mistakes that movement for drift (it failed 57% of A/A sessions at N = 5 in such a
  setting). SE_D therefore takes the largest of several estimates of what moves D between sessions
  (the within-sample judge term is only the lower bound): the paired spread of the items'
  differences, and, given earlier sessions of the same items under the same ruler, the
  between-session variance measured from them, including a shift shared by all items of a session
  that no single-session statistic can see. Taking the largest, not the sum: each estimates the
  same variance (the paired spread already holds the within noise), so adding would count it twice.
  A shift that moves whole sessions is held, from ten pooled sessions, by also testing D against
  the spread of the baseline's session means, which is exact under any shift (SESSION_PRETEST).
* **Power** is the probability of the actual verdict, Holm's family and the D ≤ −tolerance
  requirement included; see :func:`regression_power`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

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
# Whole df up to this use the finite series (item tests, one after another, call t_sf thousands of
# times); its tails are trusted down to this size (absolute error ~1e-16, so ~1e-10 relative).
_SERIES_MAX_DF = 64
_SERIES_MIN_TAIL = 1e-6


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


def _t_sf_whole_df(t: float, df: int) -> float | None:
    """P(T > t) for a whole number of degrees of freedom by the finite series of Abramowitz & Stegun
    26.7.3–4 (O(df) steps, ~20x faster than the continued fraction); None in the far tail, where
    1 − A would lose relative precision to cancellation."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    series = term = 1.0
    if df % 2:
        for k in range(1, (df - 3) // 2 + 1):
            term *= 2.0 * k / (2.0 * k + 1.0) * c2
            series += term
        inside = theta + (math.sin(theta) * math.cos(theta) * series if df > 1 else 0.0)
        a = 2.0 / math.pi * inside
    else:
        for k in range(1, (df - 2) // 2 + 1):
            term *= (2.0 * k - 1.0) / (2.0 * k) * c2
            series += term
        a = math.sin(theta) * series
    tail = 0.5 * (1.0 - a)
    if tail < _SERIES_MIN_TAIL:
        return None
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=65536)
def t_sf(t: float, df: float) -> float:
    """Upper tail P(T > t) of Student's t with ``df`` (may be fractional or ``math.inf``).

    Cached: a session's item tests repeat the same few (t, df) pairs many times, since scores are
    small integers and items of one dimension share their spread."""
    _check_df(df)
    if math.isnan(t):
        raise ValueError("t is NaN")
    if math.isinf(df) or df > _DF_NORMAL:
        return 1.0 - _NORMAL.cdf(t) if t < 0 else _NORMAL.cdf(-t)
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if df <= _SERIES_MAX_DF and df == int(df):
        fast = _t_sf_whole_df(t, int(df))
        if fast is not None:
            return fast
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


SCALE = (1.0, 5.0)
"""The judge's score scale: every mean of scores lies in it."""


def scale_interval(mean: float, half: float, scale: tuple[float, float] = SCALE) -> tuple[float, float]:
    """``mean ± half`` intersected with ``scale``: the one interval of a mean of 1–5 scores. Coverage is
    unchanged (the true mean is on the scale); a cut interval is asymmetric around ``mean``."""
    low, high = scale
    return max(mean - half, low), min(mean + half, high)


def difference_interval(low: float, high: float, scale: tuple[float, float] = SCALE) -> tuple[float, float]:
    """An interval for the difference of two means on ``scale``, intersected with what such a
    difference can be (±4 on 1–5): coverage is unchanged, and two items no longer read ±13."""
    span = scale[1] - scale[0]
    return max(low, -span), min(high, span)


def items_interval(items: Sequence[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The mean of items given as (mean, ci_low, ci_high), and its interval from the items' own
    intervals taken as independent: half = sqrt(Σ h_i²) / m, h_i the uncut side of item i's interval.
    One item gives its own interval back. For items that pool generation repeats, whose intervals
    carry the generation variance that the judge's samples pooled across items do not see."""
    if not items:
        raise ValueError("a dimension needs at least one item")
    m = len(items)
    mean = math.fsum(x for x, _, _ in items) / m
    half = math.sqrt(math.fsum(max(x - lo, hi - x) ** 2 for x, lo, hi in items)) / m
    return (mean, *scale_interval(mean, half))


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
    """The t interval on the scale (:func:`scale_interval`)."""
    confidence: float
    df: float
    """Degrees of freedom of the interval: max(n − 1, 1)."""
    half: float = 0.0
    """The t interval's half-width before it is cut to the scale."""


def item_stats(
    scores: Sequence[float], *, var_floor: float = VAR_FLOOR_DEFAULT, confidence: float = 0.95
) -> ItemStats:
    """Mean, sample variance and a t confidence interval for one item's samples.

    The interval is mean ± t_{(1+c)/2, df} · sqrt(max(var, var_floor) / n), df = max(n − 1, 1), cut
    to the 1–5 scale.
    """
    if not scores:
        raise ValueError("an item needs at least one score")
    _check_confidence(confidence)
    n = len(scores)
    mean, var = _mean_var(scores)
    df = float(max(n - 1, 1))
    half = _two_sided_t(confidence, df) * math.sqrt(max(var, var_floor) / n)
    low, high = scale_interval(mean, half)
    return ItemStats(
        mean=mean,
        var=var,
        sd=math.sqrt(var),
        n=n,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        df=df,
        half=half,
    )


def pooled_within(items: Sequence[Sequence[float]], var_floor: float) -> tuple[float, float, float]:
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
    """The t interval on the scale (:func:`scale_interval`)."""
    confidence: float
    half: float = 0.0
    """The t interval's half-width before it is cut to the scale."""


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
    raw, var_within, df_meas = pooled_within(items, var_floor)
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
    low, high = scale_interval(mean, half)
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
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        half=half,
    )


# --------------------------------------------------------------------------------------------------
# Drift against a baseline
# --------------------------------------------------------------------------------------------------

TIE_TOLERANCE = 1e-9
"""D is compared with ±tolerance up to this much, so that −0.4999999999999999 (a drop of 0.5 after
rounding) counts as a drop of 0.5. Two different values of D made of 1–5 scores lie at least
1/(m·N_base·N_new) apart, far more than this for any real session."""

POWER_TARGET = 0.80
"""The detection probability the minimum detectable effect is quoted at."""

SeSource = Literal["within", "paired", "repeats", "history", "prior", "sessions"]


@dataclass(frozen=True)
class SessionHistory:
    """How much a dimension's paired items move between sessions, measured from earlier sessions of
    the same items under the same ruler (see :func:`session_history`)."""

    sessions: int
    """Earlier sessions holding at least one of the items."""
    var_item: float | None
    """Variance of one item's session mean from session to session, pooled over items (df-weighted):
    generation, session-level judge and within-sample noise, and any shift shared by a session."""
    df_item: float | None
    var_session: float | None
    """Variance of a session's mean over the core items (those every session holds)."""
    df_session: float | None
    var_shared: float
    """σ²_c ≥ 0, the shift common to every item of a session (two-way ANOVA, method of moments over
    the core items). The paired spread cannot see it: it moves all items alike."""
    df_shared: float | None
    core_items: int
    shared_p: float | None = None
    """p of the F test for a session-wide shift (MS_sessions / MS_residual); None without one."""
    item_spread: tuple[tuple[float, float] | None, ...] = ()
    """Per item, (variance, df) of its own session means over the sessions that hold it (None with
    fewer than two): a shift shared by a session is in it, so an item's session-level test holds."""


def _f_sf(f: float, d1: float, d2: float) -> float:
    """P(F_{d1,d2} > f)."""
    if f <= 0:
        return 1.0
    return _regularized_beta(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f), d1 * f / (d2 + d1 * f))


def session_history(sessions: Sequence[Sequence[Sequence[float] | None]]) -> SessionHistory | None:
    """Between-session variance from earlier sessions: ``sessions[j][i]`` holds the scores of item i in
    earlier session j (None when that session did not measure it). All rows list the same items, in
    the order the drift pairs them. None when fewer than two sessions hold any of the items."""
    rows = [list(row) for row in sessions if any(cell for cell in row)]
    if len(rows) < 2:
        return None
    m = len(rows[0])
    if any(len(row) != m for row in rows):
        raise ValueError("every session must list the same items")
    means = [[math.fsum(c) / len(c) if c else None for c in row] for row in rows]
    weighted, df_item = 0.0, 0
    spread: list[tuple[float, float] | None] = []
    for i in range(m):
        xs = [row[i] for row in means if row[i] is not None]
        if len(xs) > 1:
            v = _mean_var(xs)[1]  # type: ignore[arg-type]
            weighted += (len(xs) - 1) * v
            df_item += len(xs) - 1
            spread.append((v, float(len(xs) - 1)))
        else:
            spread.append(None)
    h = len(rows)
    core = [i for i in range(m) if all(row[i] is not None for row in means)]
    var_session = df_session = df_shared = shared_p = None
    var_shared = 0.0
    if core:
        grid = [[float(row[i]) for i in core] for row in means]  # type: ignore[arg-type]
        session_means = [math.fsum(r) / len(core) for r in grid]
        var_session, df_session = _mean_var(session_means)[1], float(h - 1)
        if len(core) > 1:
            grand = math.fsum(session_means) / h
            item_means = [math.fsum(r[k] for r in grid) / h for k in range(len(core))]
            residual = math.fsum(
                (x - item_means[k] - sm + grand) ** 2
                for r, sm in zip(grid, session_means, strict=True)
                for k, x in enumerate(r)
            ) / ((len(core) - 1) * (h - 1))
            # E[MS_sessions] = σ²_residual + k·σ²_c with MS_sessions = k·var(session means).
            var_shared = max(0.0, var_session - residual / len(core))
            df_shared = float(h - 1)
            ms_sessions = len(core) * var_session
            if residual > 0:
                shared_p = _f_sf(ms_sessions / residual, h - 1.0, (len(core) - 1.0) * (h - 1.0))
            else:
                shared_p = 0.0 if ms_sessions > 0 else 1.0
    return SessionHistory(
        sessions=h,
        var_item=weighted / df_item if df_item else None,
        df_item=float(df_item) if df_item else None,
        var_session=var_session,
        df_session=df_session,
        var_shared=var_shared,
        df_shared=df_shared,
        core_items=len(core),
        shared_p=shared_p,
        item_spread=tuple(spread),
    )


@dataclass(frozen=True)
class Power:
    """What the regression rule can see at the level its test starts at, the D ≤ −tolerance
    requirement included."""

    at_tolerance: float
    """P(verdict "regressed" | a true drop of exactly the tolerance). At most 0.5 by construction:
    the rule asks D ≤ −tolerance, which a drop of exactly the tolerance meets half the time."""
    mde: float
    """The true drop the rule calls regressed with probability POWER_TARGET."""
    underpowered: bool
    """The noise, not the tolerance, limits detection: even the significance requirement alone
    (one-sided, at the test's level) would miss a drop of the tolerance more than 1 − POWER_TARGET
    of the time, i.e. (t_{1−level} + t_{0.80})·SE > tolerance."""


def regression_power(se: float, df: float, tolerance: float, *, level: float = 0.025) -> Power:
    """Power of the regression verdict at a true drop of ``tolerance``, and its minimum detectable effect.

    "Regressed" needs D ≤ −tolerance and a one-sided p ≤ ``level`` (the share of the session's α the
    test starts with; a level passed on by rejected tests is larger, so this is a lower bound), i.e.
    D ≤ −c with c = max(tolerance, t_{1−level}·SE). With D ~ Δ + SE·T_df:
    P(regressed | Δ = −δ) = P(T ≤ (δ − c)/SE).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    t_sig = t_ppf(1.0 - level, df)
    t_power = t_ppf(POWER_TARGET, df)
    c = max(tolerance, t_sig * se)
    return Power(
        at_tolerance=t_cdf((tolerance - c) / se, df),
        mde=c + t_power * se,
        underpowered=(t_sig + t_power) * se > tolerance,
    )


@dataclass(frozen=True)
class Prior:
    """What a one-session baseline cannot measure, assumed instead of ignored (issue 19).

    One session shows how much items differ, not how much each moves between sessions, nor how much a
    whole session moves. Without these terms, raising N shrinks an item test's error bar to the
    judge's sample-to-sample noise, and a lucky first baseline fails unchanged runs."""

    item_var: float = 0.25
    """τ²: variance of one item's session mean between sessions (sd 0.5, the default tolerance), a
    floor under an item test's between-session term while no repeats or history measured it."""
    shared_var: float = 0.04
    """σ²_c: variance of a shift shared by every item of a session (sd 0.2), added alone until
    SHARED_MIN_SESSIONS pooled sessions measure it, then updated by them (``shared_df``); generation
    repeats do not measure it (every repeat of a session shares its shift). Of sd 0.18, 0.19 and
    0.20, the least that keeps a lucky first baseline (+0.4 on every item, the issue's case) under 2%
    of unchanged runs at m = 5, 10 and 20, with and without repeats, with a margin for the
    simulation's own error (benchmarks/noise_model_sim.py: 0.19 gave 2.0% [1.3, 3.1] at m = 5)."""

    shared_df: float = 4.0
    """The prior's weight, in degrees of freedom, once three to nine pooled sessions measure the
    shift: σ²_c is then (ν₀·shared_var + (P − 1)·σ̂²_c) / (ν₀ + P − 1) with ν₀ + P − 1 df, the
    conjugate (scaled inverse χ²) update of the prior by the history's two-way estimate σ̂²_c, so the
    prior counts as much as five pooled sessions. A few sessions measure the shift poorly: its
    estimate is near zero as often as not while a real shift of the prior's size goes on, and the
    floor this replaced (sd 0.1, no df) let a shift of sd 0.2 fail 1.1–2.2% of unchanged runs from
    three and five pooled sessions. Of ν₀ = 2, 3 and 4, the largest: at m = 10 they failed 1.1%, 0.9%
    and 0.7% (benchmarks/noise_model_sim.py, 3,000 sessions a case); 6 and 8 no fewer than 4 (0.9%
    over 8,000) for more detection lost. From SESSION_TEST_SESSIONS pooled sessions the
    session-level test holds a shift instead, and the prior is dropped."""


CONSERVATIVE_PRIOR = Prior()

SHARED_PRETEST = 0.25
"""The history's session-wide shift is added only when its F test gives p ≤ this ("sometimes pool",
Bancroft 1944): without a shift the truncated estimate max(0, ·) is positive half the time and would
inflate every error bar by a shift that is not there (12% on the issue's pooled example)."""

SHARED_MIN_SESSIONS = 3
"""Pooled sessions from which the session-wide shift is measured instead of assumed (df ≥ 2)."""

SESSION_TEST_SESSIONS = 10
"""Pooled sessions from which a drift is also tested against the spread of the baseline's session
means (see SESSION_PRETEST), and the prior's share of the session-wide shift is dropped."""

SESSION_PRETEST = 0.5
"""From SESSION_TEST_SESSIONS pooled sessions, when the history's F test leaves room for a
session-wide shift (p ≤ this), a drift must also pass the session-level test: D against the spread
of the baseline's session means over the paired items, s²_G·(1 + 1/P) with P − 1 df. The new session
is one more session, so under any shift that t is exact; the verdict is that of the more cautious of
the two tests (an intersection-union test: with either test at level α when the other's assumptions
fail, rejecting only when both reject keeps α). Measured (benchmarks/noise_model_sim.py, a shift of
sd 0.2, ten pooled sessions, three seeds): 0.9–1.3% false fails → 0.7–0.9% at m = 5, 0.9–1.4% →
0.8–0.9% at m = 10; without a shift a 0.75 drop at m = 5 is caught 50% instead of 54% of the time.
At 0.4 one seed of 4,000 sessions kept 1.1% at m = 5, for 1–3 points more detection (docs/concepts.md)."""


@dataclass(frozen=True)
class Generations:
    """One item's generation repeats, in the baseline and now: how far its repeat means spread."""

    ss: float
    """Sum over sessions of Σ_k (ȳ_k − ȳ)², the squared deviations of a session's repeat means."""
    df: int
    """Σ over sessions of (K − 1)."""
    base: int
    """Generations behind the baseline's mean (one per session without repeats)."""
    new: int
    """Generations behind this session's mean."""


def generations(base: Sequence[Sequence[Sequence[float]]], new: Sequence[Sequence[float]]) -> Generations:
    """``base``: the baseline's sessions, each a list of generation groups of scores; ``new``: this
    session's groups. A session without repeats is one group."""
    ss, df = 0.0, 0
    for groups in (*base, new):
        if len(groups) > 1:
            means = [math.fsum(g) / len(g) for g in groups]
            ss += _mean_var(means)[1] * (len(means) - 1)
            df += len(groups) - 1
    return Generations(ss=ss, df=df, base=sum(len(session) for session in base), new=len(new))


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
    power: float
    """P(regressed | a true drop of the tolerance) at ``level`` (see :class:`Power`)."""
    mde: float
    """The true drop called regressed 80% of the time at ``level``, with D ≤ −tolerance."""
    underpowered: bool
    """The noise keeps the rule from seeing a drop of the tolerance (see :class:`Power`)."""
    verdict: DriftVerdict
    m: int
    tolerance: float
    var_within: float
    """The floored pooled within-item variance σ²_w that the within term uses."""
    base_mean: float
    new_mean: float
    se_source: SeSource = "within"
    """Which estimate set SE: the within-sample judge term, or the between-session term and where
    most of its degrees of freedom came from (paired spread, repeats, history, or the prior)."""
    se_within: float = 0.0
    se_between: float | None = None
    """The between-session term (what moves the items independently), before the shared shift."""
    df_between: float | None = None
    """Its degrees of freedom (None: no between-session estimate)."""
    var_shared: float = 0.0
    """The session-wide shift's variance added to SE² (measured from history, or the prior)."""
    shared_source: Literal["history", "prior"] | None = None
    level: float = 0.025
    """The one-sided level the power figures are quoted at."""


def _check_pairs(base: Sequence[Sequence[float]], new: Sequence[Sequence[float]], tolerance: float) -> None:
    if len(base) != len(new):
        raise ValueError(f"drift pairs items by position: {len(base)} baseline vs {len(new)} new items")
    if not base:
        raise ValueError("drift needs at least one paired item")
    if any(not scores for scores in (*base, *new)):
        raise ValueError("every paired item needs at least one score in both runs")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")


def _pair_within(a: Sequence[float], b: Sequence[float], var_floor: float) -> tuple[float, float]:
    """(floored pooled within variance, df) of two samples: pooled_within's numbers, computed from
    sums (exact for integer scores), because it runs once per item."""
    ss = 0.0
    for scores in (a, b):
        if len(scores) > 1:
            total = sum(scores)
            ss += sum(x * x for x in scores) - total * total / len(scores)
    df = len(a) + len(b) - 2
    raw = ss / df if df > 0 else 0.0
    return max(raw, var_floor), float(max(df, 1))


def _satterthwaite(a: float, df_a: float, b: float, df_b: float | None) -> float:
    """Welch–Satterthwaite df of a + b, rounded down (conservative, and the t quantiles stay cached).
    ``df_b`` None: b is assumed (a prior), a known constant with no sampling error of its own, so
    only a's uncertainty is left: df = df_a·((a + b)/a)²."""
    if b <= 0 or a <= 0:
        return df_a
    b_term = 0.0 if df_b is None else b * b / df_b
    return float(max(1, math.floor((a + b) ** 2 / (a * a / df_a + b_term))))


Estimate = tuple[SeSource, float, float]
"""(source, variance, df) of one estimate of the same between-session variance."""


def _pool(estimates: Sequence[Estimate]) -> Estimate | None:
    """Estimates of one variance pooled by their degrees of freedom (the efficient combination of
    independent estimates); the source is the one that brought the most degrees of freedom."""
    total = math.fsum(df for _, _, df in estimates)
    if not estimates or total <= 0:
        return None
    variance = math.fsum(v * df for _, v, df in estimates) / total
    return max(estimates, key=lambda e: e[2])[0], variance, total


@dataclass(frozen=True)
class _Shared:
    var: float
    df: float | None
    source: Literal["history", "prior"] | None


def _shared(
    history: SessionHistory | None, pooled: float, prior: Prior | None, session_test: bool = True
) -> _Shared:
    """The session-wide shift's variance in D: assumed by the prior for a baseline of fewer than
    SHARED_MIN_SESSIONS pooled sessions; from there to SESSION_TEST_SESSIONS (without
    ``session_test``: from there on) the prior updated by the history's measure of it
    (:attr:`Prior.shared_df`); from there measured alone (added when its F test sees a shift), the
    session-level test holding a shift the F test misses. Generation repeats do not measure it:
    every repeat of a session shares that session's shift, so a lucky one-session baseline is as
    lucky with repeats as without."""
    factor = 1.0 + 1.0 / pooled
    if (
        history is not None
        and history.df_shared is not None
        and (prior is None or history.df_shared >= SHARED_MIN_SESSIONS - 1)
    ):
        if prior is not None and not (session_test and _session_tested(history)):
            # Few sessions: the prior updated by what they measured, weighed by degrees of freedom.
            df = prior.shared_df + history.df_shared
            blend = (prior.shared_df * prior.shared_var + history.df_shared * history.var_shared) / df
            return _Shared(blend * factor, df, "history")
        if history.shared_p is not None and history.shared_p > SHARED_PRETEST:
            return _Shared(0.0, None, "history")  # no sign of a shift: its truncated estimate is bias
        return _Shared(history.var_shared * factor, history.df_shared, "history")
    if prior is None:
        return _Shared(0.0, None, None)
    return _Shared(prior.shared_var * factor, None, "prior")


def prior_share(prior: Prior, sessions: int) -> float:
    """The share of the prior's session-wide shift a baseline of ``sessions`` pooled sessions keeps
    where they measured none: all of it below SHARED_MIN_SESSIONS, ν₀/(ν₀ + P − 1) up to
    SESSION_TEST_SESSIONS, none from there (:func:`_shared`)."""
    if sessions < SHARED_MIN_SESSIONS:
        return 1.0
    if sessions >= SESSION_TEST_SESSIONS:
        return 0.0
    return prior.shared_df / (prior.shared_df + sessions - 1)


def _session_tested(history: SessionHistory | None) -> bool:
    """Whether the history holds enough sessions for the session-level test (SESSION_TEST_SESSIONS)."""
    return history is not None and history.sessions >= SESSION_TEST_SESSIONS


def _session_pretest(history: SessionHistory | None) -> bool:
    """Whether the session-level test joins: enough sessions, and the history's F test leaves room
    for a session-wide shift (p ≤ SESSION_PRETEST)."""
    return (
        _session_tested(history)
        and history is not None
        and history.shared_p is not None
        and history.shared_p <= SESSION_PRETEST
    )


def _session_level(
    history: SessionHistory | None, m: int, pooled: float, new_extra: float, least: float
) -> tuple[float, float] | None:
    """(variance, df) of D from the spread of the baseline's session means over the m paired items:
    s²_G·(1 + 1/P) + ``new_extra`` (what this session's design adds, :func:`_design_correction`),
    at least ``least`` (the judge's within term), with the history's sessions − 1 df. None when the
    F test sees no sign of a shift or a history session lacks one of the items."""
    if (
        not _session_pretest(history)
        or history is None
        or history.var_session is None
        or history.df_session is None
        or history.core_items != m
    ):
        return None
    return max(history.var_session * (1.0 + 1.0 / pooled) + new_extra, least), history.df_session


def _design_correction(
    base: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    base_sessions: Sequence[int] | None,
    gen: tuple[float, int] | None,
    generations: Sequence[Generations] | None,
    var_within: float,
) -> float:
    """What this session's item means vary by beyond one of the baseline's sessions: fewer outputs
    an item (an update generates three, a run one) or fewer judge samples. The baseline's session
    means were measured with more, so their spread understates this session's; the difference is
    added from the measured generation (else within-sample) variance, and never taken away."""
    m = len(base)
    sessions = base_sessions or [1] * m
    if gen is not None and generations is not None:
        terms = math.fsum(1.0 / g.new - p / g.base for g, p in zip(generations, sessions, strict=True))
        return max(0.0, gen[0] * terms / (m * m))
    terms = math.fsum(1.0 / len(b) - p / len(a) for a, b, p in zip(base, new, sessions, strict=True))
    return max(0.0, var_within * terms / (m * m))


def _either(decided: dict[str, Any], alternative: tuple[float, float] | None) -> dict[str, Any] | None:
    """The session-level test's decision when it is the more cautious of the two (its two-sided
    tail is larger), else None: the intersection-union rule (see :data:`SESSION_PRETEST`)."""
    if alternative is None:
        return None
    alt = _decide(
        delta=decided["delta"],
        variance=alternative[0],
        df=alternative[1],
        tolerance=decided["tolerance"],
        level=decided["level"],
    )
    p, q = decided["p_value"], alt["p_value"]
    return alt if min(q, 1.0 - q) > min(p, 1.0 - p) else None


def _generation_var(gens: Sequence[Generations] | None, var_floor: float) -> tuple[float, int] | None:
    """The dimension's per-generation variance pooled over its items (floored), with its df."""
    df = sum(g.df for g in gens) if gens else 0
    if not gens or df == 0:
        return None
    return max(math.fsum(g.ss for g in gens) / df, var_floor), df


def _decide(*, delta: float, variance: float, df: float, tolerance: float, level: float) -> dict[str, Any]:
    se = math.sqrt(variance)
    t95, t90 = t_ppf(0.975, df), t_ppf(0.95, df)
    ci95 = (delta - t95 * se, delta + t95 * se)
    ci90 = (delta - t90 * se, delta + t90 * se)
    verdict: DriftVerdict
    if delta <= -tolerance + TIE_TOLERANCE and ci95[1] < 0:
        verdict = "regressed"
    elif delta >= tolerance - TIE_TOLERANCE and ci95[0] > 0:
        verdict = "improved"
    elif -tolerance < ci90[0] and ci90[1] < tolerance:
        verdict = "stable"
    else:
        verdict = "inconclusive"
    power = regression_power(se, df, tolerance, level=level)
    return {
        "delta": delta,
        "se": se,
        "df": df,
        "ci95": difference_interval(*ci95),  # cut after the verdict, which the cut cannot change
        "ci90": difference_interval(*ci90),
        "p_value": t_cdf(delta / se, df),
        "power": power.at_tolerance,
        "mde": power.mde,
        "underpowered": power.underpowered,
        "verdict": verdict,
        "tolerance": tolerance,
        "level": level,
    }


def _combine(
    within: tuple[float, float], between: Estimate | None, shared: _Shared
) -> tuple[SeSource, float, float]:
    """SE² = max(within, between) + shared: the between-session term already holds the judge's
    within noise (so the two are not added), the session-wide shift is a separate component."""
    v_within, df_w = within
    source: SeSource = "within"
    v, df = v_within, df_w
    if between is not None and between[1] > v_within:
        source, v, df = between
    return source, v + shared.var, _satterthwaite(v, df, shared.var, shared.df)


def drift(
    base: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    *,
    tolerance: float,
    var_floor: float = VAR_FLOOR_DEFAULT,
    base_sessions: Sequence[int] | None = None,
    history: SessionHistory | None = None,
    generations: Sequence[Generations] | None = None,
    prior: Prior | None = None,
    level: float = 0.025,
    session_test: bool = True,
) -> Drift:
    """Paired drift of a dimension: ``new`` against ``base`` (item i of one pairs with item i of the other).

    SE_D² = max(within, between) + shared, where

    * within: σ²_w/m² · Σ_i (1/n_i,base + 1/n_i,new), σ²_w pooled over both runs (df-weighted,
      floored), df = Σ(n − 1), at least 1: the judge's sample-to-sample noise only, a lower bound;
    * between: what moves the items independently between sessions, the df-weighted pool of the
      estimates there are: the paired spread sd(d_i)²/m (df m − 1, m ≥ 2); generation repeats,
      σ²_gen·Σ_i(1/k_i,base + 1/k_i,new)/m² with σ²_gen the items' pooled variance of repeat means
      (df Σ(K − 1)); history, var_item·(1 + 1/P)/m (df of the history). With none of them (one item,
      no repeats, no history) and a ``prior``: τ²·(1 + 1/P)/m;
    * shared: the shift common to a whole session, σ²_c·(1 + 1/P): the prior's below
      SHARED_MIN_SESSIONS history sessions, the prior updated by the history's estimate (weighed by
      df, :attr:`Prior.shared_df`) below SESSION_TEST_SESSIONS, the history's alone from there
      (:func:`_shared`).

    From SESSION_TEST_SESSIONS history sessions whose F test leaves room for a shift, D is also
    tested against the spread of the baseline's session means (exact under any shift, P − 1 df), and
    the more cautious of the two tests decides (SESSION_PRETEST). ``session_test`` False leaves it
    out, and the prior is then updated by the history however many sessions it holds: the second
    test of :mod:`pytest_aimeasure.compare.confirm`, whose history was judged in today's session, so
    that a judge-side shift is gone from it.

    P is the number of sessions the baseline pools (the fewest over the items; ``base_sessions`` gives
    it per item, default 1). Without ``prior`` nothing is assumed (a rule for two measurements of the
    same artifacts, as attribution's judge part compares). Verdicts, in order: regressed
    (D ≤ −tol and 95% upper < 0), improved (D ≥ +tol and 95% lower > 0), stable (90% CI inside
    (−tol, +tol)), else inconclusive; D is compared with ±tol up to TIE_TOLERANCE. ``level`` (the
    one-sided α share the test starts at) only shapes the power figures.
    """
    _check_pairs(base, new, tolerance)
    m = len(base)
    pooled = float(min(base_sessions)) if base_sessions else 1.0
    base_means = [math.fsum(s) / len(s) for s in base]
    new_means = [math.fsum(s) / len(s) for s in new]
    diffs = [b - a for a, b in zip(base_means, new_means, strict=True)]
    _raw, var_within, df_w = pooled_within([*base, *new], var_floor)
    inverse_ns = math.fsum(1.0 / len(a) + 1.0 / len(b) for a, b in zip(base, new, strict=True))
    v_within = var_within * inverse_ns / (m * m)
    gen = _generation_var(generations, var_floor)
    # The history's session means were measured with the baseline sessions' outputs and samples an
    # item; today's may vary more (an update generates three outputs, a run one).
    correction = _design_correction(base, new, base_sessions, gen, generations, var_within)
    between = _pool(_dimension_estimates(diffs, gen, generations, history, pooled, correction))
    if between is None and prior is not None:
        between = ("prior", prior.item_var * (1.0 + 1.0 / pooled) / m, df_w)
    shared = _shared(history, pooled, prior, session_test)
    decided, source = _settle(
        math.fsum(diffs) / m,
        (v_within, df_w),
        between,
        shared,
        _session_level(history, m, pooled, correction, v_within) if session_test else None,
        tolerance=tolerance,
        level=level,
    )
    return _drift_result(
        decided,
        source,
        m=m,
        means=(math.fsum(base_means) / m, math.fsum(new_means) / m),
        var_within=var_within,
        v_within=v_within,
        between=between,
        shared=shared,
    )


def _dimension_estimates(
    diffs: Sequence[float],
    gen: tuple[float, int] | None,
    generations: Sequence[Generations] | None,
    history: SessionHistory | None,
    pooled: float,
    correction: float,
) -> list[Estimate]:
    """The dimension's estimates of its between-session variance, as :func:`drift` pools them:
    the paired spread, the generation repeats, the history (plus ``correction``, what today's design
    varies by beyond a baseline session's, :func:`_design_correction`)."""
    m = len(diffs)
    estimates: list[Estimate] = []
    if m > 1:
        estimates.append(("paired", _mean_var(diffs)[1] / m, float(m - 1)))
    if gen is not None and generations is not None:
        inverse_ks = math.fsum(1.0 / g.base + 1.0 / g.new for g in generations)
        estimates.append(("repeats", gen[0] * inverse_ks / (m * m), float(gen[1])))
    if history is not None and history.var_item is not None and history.df_item is not None:
        estimates.append(
            ("history", history.var_item * (1.0 + 1.0 / pooled) / m + correction, history.df_item)
        )
    return estimates


def _settle(
    delta: float,
    within: tuple[float, float],
    between: Estimate | None,
    shared: _Shared,
    alternative: tuple[float, float] | None,
    *,
    tolerance: float,
    level: float,
) -> tuple[dict[str, Any], SeSource]:
    """The verdict of one drift test and where its SE came from: SE² from its parts
    (:func:`_combine`), then the session-level ``alternative`` (variance, df) where it is the more
    cautious (:func:`_either`)."""
    source, variance, df = _combine(within, between, shared)
    decided = _decide(delta=delta, variance=variance, df=df, tolerance=tolerance, level=level)
    cautious = _either(decided, alternative)
    if cautious is not None:
        return cautious, "sessions"
    return decided, source


def _drift_result(
    decided: dict[str, Any],
    source: SeSource,
    *,
    m: int,
    means: tuple[float, float],
    var_within: float,
    v_within: float,
    between: Estimate | None,
    shared: _Shared,
) -> Drift:
    """A :class:`Drift` from a settled test and the parts of its SE; ``means``: (baseline, now)."""
    return Drift(
        **decided,
        m=m,
        var_within=var_within,
        base_mean=means[0],
        new_mean=means[1],
        se_source=source,
        se_within=math.sqrt(v_within),
        se_between=None if between is None else math.sqrt(between[1]),
        df_between=None if between is None else between[2],
        var_shared=shared.var,
        shared_source=shared.source,
    )


def item_drifts(
    base: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    *,
    tolerances: Sequence[float],
    var_floor: float = VAR_FLOOR_DEFAULT,
    base_sessions: Sequence[int] | None = None,
    history: SessionHistory | None = None,
    generations: Sequence[Generations] | None = None,
    prior: Prior | None = None,
    level: float = 0.025,
) -> list[Drift]:
    """The drift of each item of one dimension on its own (item i of ``base`` pairs with item i of ``new``).

    An item has one difference d_i, so its between-session variance comes from its dimension, as the
    df-weighted pool of: the variance of the *other* items' differences (leave-one-out, df m − 2,
    m ≥ 3, so that a real drop of this item does not hide itself), the dimension's generation variance
    σ²_gen·(1/k_base + 1/k_new), and the history's var_item·(1 + 1/P_i). While neither repeats nor
    history measured it, the ``prior``'s τ²·(1 + 1/P_i) is its floor: other items that happened not
    to move say little about this one, and N (the judge's precision) must not stand in for it.
    SE² = max(the item's own within term, between) + shared, as in :func:`drift`. With one item,
    this is :func:`drift`.
    """
    _check_pairs(base, new, min(tolerances, default=0.0))
    m = len(base)
    if len(tolerances) != m or (base_sessions is not None and len(base_sessions) != m):
        raise ValueError("one tolerance (and base session count) per paired item")
    if m == 1:
        return [
            drift(
                base,
                new,
                tolerance=tolerances[0],
                var_floor=var_floor,
                base_sessions=base_sessions,
                history=history,
                generations=generations,
                prior=prior,
                level=level,
            )
        ]
    base_means = [sum(s) / len(s) for s in base]
    new_means = [sum(s) / len(s) for s in new]
    diffs = [b - a for a, b in zip(base_means, new_means, strict=True)]
    d_mean = math.fsum(diffs) / m
    gen = _generation_var(generations, var_floor)
    dimension = _ItemsOf(
        diffs=diffs,
        spread=(d_mean, math.fsum((d - d_mean) ** 2 for d in diffs)),
        gen=gen,
        generations=generations,
        history=history,
        prior=prior,
        measured=gen is not None or (history is not None and history.var_item is not None),
        # An item's own session means hold the shift too: its session-level test, as the dimension's.
        shift_possible=_session_pretest(history) and history is not None and len(history.item_spread) == m,
        var_floor=var_floor,
        level=level,
    )
    return [
        _item_drift(
            dimension,
            i,
            base[i],
            new[i],
            tolerance=tolerances[i],
            pooled=float(base_sessions[i]) if base_sessions else 1.0,
            means=(base_means[i], new_means[i]),
        )
        for i in range(m)
    ]


@dataclass(frozen=True)
class _ItemsOf:
    """What the item tests of one dimension share (:func:`item_drifts`)."""

    diffs: Sequence[float]
    spread: tuple[float, float]
    """The mean of the differences and their sum of squares about it, computed once."""
    gen: tuple[float, int] | None
    generations: Sequence[Generations] | None
    history: SessionHistory | None
    prior: Prior | None
    measured: bool
    """Repeats or history measured the between-session term (else the prior's τ² floors it)."""
    shift_possible: bool
    """The session-level test joins (:func:`_session_pretest`)."""
    var_floor: float
    level: float


def _item_drift(
    dimension: _ItemsOf,
    i: int,
    base: Sequence[float],
    new: Sequence[float],
    *,
    tolerance: float,
    pooled: float,
    means: tuple[float, float],
) -> Drift:
    """Item ``i``'s drift test (``base``, ``new``: its scores; ``pooled``: its baseline's sessions)."""
    generations = dimension.generations
    history = dimension.history
    var_within, df_w = _pair_within(base, new, dimension.var_floor)
    extra = _design_correction(
        [base],
        [new],
        [int(pooled)],
        dimension.gen,
        [generations[i]] if generations is not None else None,
        var_within,
    )
    estimates = _item_estimates(
        i, dimension.diffs, dimension.spread, dimension.gen, generations, history, pooled, extra
    )
    v_within = var_within * (1.0 / len(base) + 1.0 / len(new))
    between = _pool(estimates)
    prior = dimension.prior
    if prior is not None and not dimension.measured:
        floor = prior.item_var * (1.0 + 1.0 / pooled)
        if between is None or between[1] < floor:
            between = ("prior", floor, between[2] if between is not None else df_w)
    shared = _shared(history, pooled, prior)
    spread_i = history.item_spread[i] if dimension.shift_possible and history is not None else None
    alternative = None
    if spread_i is not None:
        own, own_df = spread_i
        alternative = (max(own * (1.0 + 1.0 / pooled) + extra, v_within), own_df)
    decided, source = _settle(
        dimension.diffs[i],
        (v_within, df_w),
        between,
        shared,
        alternative,
        tolerance=tolerance,
        level=dimension.level,
    )
    return _drift_result(
        decided,
        source,
        m=1,
        means=means,
        var_within=var_within,
        v_within=v_within,
        between=between,
        shared=shared,
    )


def _item_estimates(
    i: int,
    diffs: Sequence[float],
    spread: tuple[float, float],
    gen: tuple[float, int] | None,
    generations: Sequence[Generations] | None,
    history: SessionHistory | None,
    pooled: float,
    extra: float,
) -> list[Estimate]:
    """Item ``i``'s estimates of its between-session variance, as :func:`item_drifts` pools them.
    ``spread``: the mean of the differences and their sum of squares about it, computed once;
    ``extra``: what today's design varies by beyond a baseline session's (:func:`_design_correction`),
    added to the history's estimate, which was measured with the baseline sessions' design."""
    m = len(diffs)
    d_mean, d_ss = spread
    estimates: list[Estimate] = []
    if m > 2:
        # Leave-one-out sum of squares: removing d_i from a sample moves its mean by (d_i − mean)/(m−1).
        v_loo = max(0.0, (d_ss - (diffs[i] - d_mean) ** 2 * m / (m - 1)) / (m - 2))
        estimates.append(("paired", v_loo, float(m - 2)))
    if gen is not None and generations is not None:
        g = generations[i]
        estimates.append(("repeats", gen[0] * (1.0 / g.base + 1.0 / g.new), float(gen[1])))
    if history is not None and history.var_item is not None and history.df_item is not None:
        estimates.append(("history", history.var_item * (1.0 + 1.0 / pooled) + extra, history.df_item))
    return estimates


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
