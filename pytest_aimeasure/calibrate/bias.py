"""Bias probes: does the judge's score move with things that are not quality?

* length: the same anchor with neutral, content-free padding appended; the change in score;
* order: an anchor of several artifacts (``parts:``) with their order reversed; the change in score;
* self-preference: the judge's bias on anchors written by its own model family minus its bias on
  the others;
* range use: the spread of the judge's scores over the anchors against the humans' (a judge that
  never gives 1 or 2 compresses the range).

Each is an effect with a 95% interval; "significant" means the interval excludes no effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_aimeasure.calibrate.agreement import mean, mean_ci, sample_var, sd_ratio_ci
from pytest_aimeasure.calibrate.anchors import Anchor
from pytest_aimeasure.calibrate.records import ProbeResult
from pytest_aimeasure.judge.families import family_clash
from pytest_aimeasure.measure.artifact import join_parts
from pytest_aimeasure.measure.stats import t_ppf

PADDING_SENTENCE = (
    "This sentence is neutral padding added by a length check; it carries no information about the "
    "text above and should not change its grade."
)
MIN_PADDING_CHARS = 400


def padded(text: str) -> str:
    """``text`` followed by content-free padding about as long as the text itself (≥ 400 characters)."""
    target = max(len(text), MIN_PADDING_CHARS)
    sentences = [PADDING_SENTENCE] * max(1, math.ceil(target / (len(PADDING_SENTENCE) + 1)))
    return text.rstrip() + "\n\n" + " ".join(sentences)


def reordered(anchor: Anchor) -> str:
    """The anchor's parts shown in reverse order."""
    return join_parts(tuple(reversed(anchor.parts)))


def paired_shift(probe: str, what: str, deltas: Sequence[float]) -> ProbeResult | None:
    """An effect measured as per-anchor differences (probe score − plain score)."""
    if not deltas:
        return None
    ci = mean_ci(deltas)
    significant = ci.excludes_zero
    bounds = (
        f" [95% CI {ci.ci_low:+.2f}, {ci.ci_high:+.2f}]"
        if ci.ci_low is not None and ci.ci_high is not None
        else ""
    )
    verdict = "the judge's score moves with it" if significant else "no significant effect"
    return ProbeResult(
        probe=probe,  # type: ignore[arg-type]
        effect=ci.mean,
        ci_low=ci.ci_low,
        ci_high=ci.ci_high,
        n=ci.n,
        significant=significant,
        message=f"{what}: mean change {ci.mean:+.2f}{bounds} over {ci.n} anchors; {verdict}",
    )


def self_preference(
    anchors: Sequence[Anchor], judge_means: dict[str, float], judge_model: str
) -> ProbeResult | None:
    """Bias (judge − human) on anchors of the judge's own family minus bias on the others (Welch)."""
    own: list[float] = []
    other: list[float] = []
    for a in anchors:
        if a.generator is None or a.id not in judge_means:
            continue
        bias = judge_means[a.id] - a.human_mean
        (own if family_clash(a.generator, judge_model) else other).append(bias)
    if len(own) < 2 or len(other) < 2:
        return None
    effect = mean(own) - mean(other)
    va, vb = sample_var(own) / len(own), sample_var(other) / len(other)
    se = math.sqrt(va + vb)
    if se == 0:
        low = high = effect
    else:
        df = (va + vb) ** 2 / (va**2 / (len(own) - 1) + vb**2 / (len(other) - 1))  # Welch
        half = t_ppf(0.975, max(df, 1.0)) * se
        low, high = effect - half, effect + half
    significant = low > 0 or high < 0
    return ProbeResult(
        probe="self_preference",
        effect=effect,
        ci_low=low,
        ci_high=high,
        n=len(own) + len(other),
        significant=significant,
        message=(
            f"self-preference: bias on {len(own)} anchors written by the judge's family minus bias on "
            f"{len(other)} others: {effect:+.2f} [95% CI {low:+.2f}, {high:+.2f}]; "
            + ("the judge favours its own family" if significant else "no significant effect")
        ),
    )


def range_use(judge: Sequence[float], human: Sequence[float]) -> ProbeResult | None:
    """SD(judge)/SD(human) over the anchors (1 = the same range; < 1 compressed)."""
    found = sd_ratio_ci(judge, human)
    if found is None:
        return None
    ratio, low, high = found
    significant = high < 1 or low > 1
    used = sorted({min(5, max(1, math.floor(j + 0.5))) for j in judge})
    humans = sorted({min(5, max(1, math.floor(h + 0.5))) for h in human})
    how = "compressed" if ratio < 1 else "stretched"
    return ProbeResult(
        probe="range",
        effect=ratio,
        ci_low=low,
        ci_high=high,
        n=len(judge),
        significant=significant,
        message=(
            f"range use: judge SD / human SD = {ratio:.2f} [95% CI {low:.2f}, {high:.2f}]; judge levels "
            f"{used}, human levels {humans}" + (f"; the judge's range is {how}" if significant else "")
        ),
    )


def order_shift(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], var_floor: float) -> ProbeResult | None:
    """The order probe on a dimension's test items: each pair is (samples as given, samples with the
    artifacts in reverse order). The effect is the mean over items of the change in the item's mean.

    Its standard error is the spread of the per-item changes (df m−1), never below the within-item
    noise of both judgings (each item's variance floored at ``var_floor``); with one item, that noise
    alone (df n₁+n₂−2). A temperature-0 judge that repeats itself is not taken to be exact.
    """
    pairs = [(p, r) for p, r in pairs if p and r]
    if not pairs:
        return None
    deltas = [mean(r) - mean(p) for p, r in pairs]
    m = len(deltas)
    effect = mean(deltas)
    within = mean(
        [max(sample_var(p), var_floor) / len(p) + max(sample_var(r), var_floor) / len(r) for p, r in pairs]
    )
    se_within = math.sqrt(within / m)
    if m >= 2:
        se, df = max(math.sqrt(sample_var(deltas) / m), se_within), m - 1
    else:
        p, r = pairs[0]
        se, df = se_within, max(len(p) + len(r) - 2, 1)
    half = t_ppf(0.975, df) * se
    low, high = effect - half, effect + half
    significant = low > 0 or high < 0
    return ProbeResult(
        probe="order",
        effect=effect,
        ci_low=low,
        ci_high=high,
        n=m,
        significant=significant,
        message=(
            f"order (test items judged again with their artifacts reversed): mean change {effect:+.2f} "
            f"[95% CI {low:+.2f}, {high:+.2f}] over {m} item{'s' if m != 1 else ''}; "
            + ("the judge's score moves with the order" if significant else "no significant effect")
        ),
    )
