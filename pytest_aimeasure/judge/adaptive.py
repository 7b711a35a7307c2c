"""Adaptive sampling (``--judge-samples auto``): judge an item in small steps until its decisions are settled.

**Design: a group-sequential test with Lan–DeMets Pocock-type alpha spending.** The looks are fixed in
advance: after ``minimum``, ``minimum + step``, …, ``maximum`` samples (3, 5, 7, 9 by default). At look
k the item's data are tested at level α_k = α(f_k) − α(f_{k−1}), where f_k = n_k / maximum is the
information fraction and α(f) = α·ln(1 + (e − 1)·f) is the Pocock-type spending function (it spends
early, where stopping saves most: 45% of α at the first of the default looks). The levels add up to
α, so by the union bound the chance that *any* look stops on the wrong side of a boundary is at most
α (α/2 a side), whatever the correlation of the looks: a conservative, always-valid way to combine
them that needs no multivariate integral, and so stays valid with t statistics whose variance
estimate changes from look to look. α is :data:`STOP_ALPHA` (two-sided 0.10).

**What "open" means.** The item stops at the first look where every decision it feeds is settled:

* the floor: the item's (1 − α_k) t interval, mean ± t·sqrt(max(v, var_floor)/n) with df n − 1,
  lies wholly above or wholly below the floor;
* its drift against the baseline entry (when the entry's ruler is today's): the interval of the
  item's difference d = x̄_now − x̄_base, d ± t·sqrt(σ²_w·(1/n_base + 1/n)) with σ²_w pooled over
  both runs' samples (floored, df n_base + n − 2), contains neither −tolerance nor +tolerance, i.e.
  lies wholly inside (−tol, +tol), wholly below −tol, or wholly above +tol.

At the maximum it stops whatever is open, and says what was.

**Why a per-item proxy keeps the session's drift rule.** The session decides drift per item and per
dimension (paired item differences, the within-sample term as a lower bound, one family over every test).
A single item cannot see the other items, so its stopping rule watches the thresholds the session's
verdicts compare with (±tolerance) using its own judge noise, the only noise more samples reduce.
Stopping changes how many samples an item has, never the rule applied to them: the session's
comparison runs on the final samples as on any session with unequal N (the within term uses each
item's own n; the paired spread is measured from the final differences themselves). The boundaries
are symmetric around the baseline mean, so under an unchanged system the stopping rule does not push
the differences either way. What it cannot promise analytically (optional stopping can bias a mean
a little when the baseline itself is off), ``benchmarks/adaptive_sim.py`` measures with this module's
code: the A/A false-fail rate, the detection of a 0.75 drop and the calls per item next to fixed
N = 3 and N = 9, for independent judge noise, a deterministic judge with a moving generator, and a
lucky baseline.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pytest_aimeasure.measure.models import AdaptiveRecord
from pytest_aimeasure.measure.sampling import SamplePlan
from pytest_aimeasure.measure.stats import TIE_TOLERANCE, pooled_within, t_ppf

if TYPE_CHECKING:
    from pytest_aimeasure.measure.models import Fingerprint, Measurement, Sample

__all__ = [
    "STOP_ALPHA",
    "Decision",
    "ItemRule",
    "Reference",
    "adaptive_summary",
    "look_levels",
    "open_decisions",
    "repeats_itself",
    "sample_adaptively",
]

STOP_ALPHA = 0.10
"""Two-sided level spent over the looks: the chance that an early stop lands on the wrong side of a
boundary (the floor, or ±tolerance around the baseline) is at most 5% a side."""

Decision = Literal["floor", "drift"]
Stop = Literal["settled", "agreed", "maximum", "budget"]


@dataclass(frozen=True)
class Reference:
    """The item's baseline entry, for its drift decision: its raw scores, one tuple per generation of
    each session it pools (one per session without repeats), and the ruler they were taken with (only
    an entry under today's ruler is compared with)."""

    sessions: tuple[tuple[int, ...], ...]
    fingerprint: Fingerprint
    standing: Reference | None = None
    """An escalated entry's standing-judge scores (``escalate=``): the reference of today's standing
    judge, as the comparison pairs the two on that judge."""

    def under(self, fingerprint: Fingerprint) -> Reference | None:
        """The scores taken with ``fingerprint`` (the entry's, or an escalated entry's standing judge's),
        or None: another ruler, which the comparison calls "not comparable", never drift."""
        if self.fingerprint == fingerprint:
            return self
        if self.standing is not None and self.standing.fingerprint == fingerprint:
            return self.standing
        return None


def spending(fraction: float, alpha: float = STOP_ALPHA) -> float:
    """The Lan–DeMets Pocock-type spending function α·ln(1 + (e − 1)·f)."""
    return alpha * math.log1p((math.e - 1.0) * fraction)


@lru_cache(maxsize=256)
def look_levels(plan: SamplePlan, alpha: float = STOP_ALPHA) -> tuple[float, ...]:
    """The two-sided level of each look: the spending function's increments over the looks."""
    spent = [spending(n / plan.maximum, alpha) for n in plan.looks]
    return tuple(b - a for a, b in zip([0.0, *spent], spent, strict=False))


def _critical(level: float, df: float) -> float:
    return t_ppf(1.0 - level / 2.0, df)


def open_decisions(
    scores: Sequence[int],
    *,
    level: float,
    floor: float | None,
    tolerance: float,
    var_floor: float,
    reference: Sequence[Sequence[int]] | None = None,
) -> tuple[Decision, ...]:
    """The decisions still open after ``scores`` at a look of two-sided ``level``.

    The item's interval is mean ± t·sqrt(σ²/n): σ² the within-session variance of its samples pooled
    with the baseline entry's sessions when there is one (same item, same ruler: the judge's noise on
    it; each session a group, and each generation repeat of a session, so that the item's movement
    between sessions and outputs does not count as judge noise), floored, with the pooled df. "floor"
    is open when the floor lies inside it, "drift" when x̄_base − tolerance or x̄_base + tolerance does
    (given the baseline, the drift thresholds are fixed numbers on the item's mean, as the floor is;
    None ``reference``: no drift decision)."""
    if not scores:
        raise ValueError("a look needs at least one score")
    n = len(scores)
    mean = sum(scores) / n
    groups = [*(reference or ()), scores]
    _raw, variance, df = pooled_within(groups, var_floor)
    half = _critical(level, df) * math.sqrt(variance / n)
    low, high = mean - half - TIE_TOLERANCE, mean + half + TIE_TOLERANCE
    out: list[Decision] = []
    if floor is not None and low <= floor <= high:
        out.append("floor")
    if reference:
        base = sum(sum(g) for g in reference) / sum(len(g) for g in reference)
        if any(low <= edge <= high for edge in (base - tolerance, base + tolerance)):
            out.append("drift")
    return tuple(out)


def repeats_itself(scores: Sequence[int], reference: Sequence[Sequence[int]] | None, look: int) -> bool:
    """Does the judge give this item one score, whatever the number of samples?

    All of this session's samples are equal, and either every group of the baseline entry was too
    (each session, or each generation repeat of one: the same judge on the same output, time after
    time), or this is the second look or later (five
    equal samples by default; a judge with a spread of 0.5 gives that about one time in ten). More
    samples of such a judge cannot move the item's mean, so they cannot settle a decision the
    variance floor alone keeps open: the item stops ("agreed"), with the decision of the samples it has."""
    if len(set(scores)) != 1:
        return False
    sessions = [g for g in (reference or ()) if g]
    if sessions:
        return all(len(set(g)) == 1 for g in sessions)
    return look >= 1


@dataclass(frozen=True)
class ItemRule:
    """One item's stopping rule: its floor (None: none), tolerance, variance floor and baseline entry."""

    floor: float | None
    tolerance: float
    var_floor: float
    reference: Sequence[Sequence[int]] | None = None

    def open(self, scores: Sequence[int], level: float) -> tuple[Decision, ...]:
        return open_decisions(
            scores,
            level=level,
            floor=self.floor,
            tolerance=self.tolerance,
            var_floor=self.var_floor,
            reference=self.reference,
        )

    def repeats_itself(self, scores: Sequence[int], look: int) -> bool:
        return repeats_itself(scores, self.reference, look)


Draw = Callable[[int, int], Awaitable[list["Sample"]]]
"""Judge sample indices [start, stop) of the item (relative to its first sample) and return them."""


async def sample_adaptively(
    plan: SamplePlan,
    draw: Draw,
    rule: Callable[[list[Sample]], ItemRule],
    *,
    stop_early: Callable[[BaseException], bool] = lambda exc: False,
) -> tuple[list[Sample], AdaptiveRecord]:
    """Draw samples look by look until the item's rule (``rule(samples)``: the engine checks the
    baseline entry's ruler against the samples') reports nothing open, or the judge repeats itself,
    or the maximum is reached.

    ``stop_early(exc)``: an exception of a later look that ends the item with the samples it has (a
    budget stop) instead of losing them; the first look's exceptions always propagate."""
    levels = look_levels(plan)
    samples: list[Sample] = []
    still: tuple[Decision, ...] = ()
    stopped: Stop = "maximum"
    for k, n in enumerate(plan.looks):
        try:
            samples += await draw(len(samples), n)
        except Exception as exc:
            if k == 0 or not stop_early(exc):
                raise
            stopped = "budget"
            break
        item = rule(samples)
        scores = [s.score for s in samples]
        still = item.open(scores, levels[k])
        if not still:
            stopped = "settled"
            break
        if k + 1 < len(plan.looks) and item.repeats_itself(scores, k):
            stopped = "agreed"
            break
    return samples, AdaptiveRecord(
        minimum=plan.minimum,
        maximum=plan.maximum,
        step=plan.step,
        stopped=stopped,
        open=list(still),
    )


def adaptive_summary(measurements: Sequence[Measurement]) -> dict[str, Any]:
    """What adaptive sampling did in a session (the JSON's ``sampling``; {} when no item sampled
    adaptively): items, the range, the mean samples an item took, how many stopped where and why."""
    records = [(m, m.adaptive) for m in measurements if m.adaptive is not None and m.samples]
    if not records:
        return {}
    # An item with generation repeats samples each repeat adaptively: count samples per repeat.
    per_item = [len(m.samples) / (m.repeats.k if m.repeats is not None else 1) for m, _ in records]
    stopped = Counter(r.stopped for _, r in records)
    still = Counter(d for _, r in records for d in r.open)
    return {
        "items": len(records),
        "minimum": min(r.minimum for _, r in records),
        "maximum": max(r.maximum for _, r in records),
        "samples": sum(len(m.samples) for m, _ in records),
        "mean_samples": round(sum(per_item) / len(per_item), 3),
        "at_minimum": sum(1 for (_, r), n in zip(records, per_item, strict=True) if n <= r.minimum),
        "stopped": {k: stopped.get(k, 0) for k in ("settled", "agreed", "maximum", "budget")},
        "open_at_stop": {k: still.get(k, 0) for k in ("floor", "drift")},
    }
