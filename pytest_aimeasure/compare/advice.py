"""Power as advice: what a dimension's test can detect, and what would let it detect more.

"inconclusive (MDE 1.05, underpowered)" on every unchanged run is noise a user learns to ignore
(issue 19). Instead each dimension says once what drop it detects 80% of the time and which change to
the design would bring that down to GOAL_FACTOR × its tolerance: more items, generation repeats
(when the generator, not the judge, is what moves), or a baseline pooled from more sessions.

The projection rebuilds the dimension's variance from its parts and changes one of them:

* an item's difference d_i has variance u = m·max(SE_within², SE_between²) today, that is
  τ²·(1 + 1/P) with τ² an item's session-mean variance and P the baseline's sessions;
* τ² = σ²_w/(N·K) + σ²_gen/K: the judge's part (N samples an item, K generations) and the rest,
  which only more generations shrink;
* SE² = τ²·(1 + 1/P)/m + the session-wide shift (once the baseline pools SHARED_MIN_SESSIONS
  sessions, only the prior's share of its update by them is kept, ``stats.prior_share``: what they
  will measure is unknown; repeats do not measure it).

The figures are projections from this session's estimates, quoted as "about".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pytest_aimeasure.compare.confirm import CONFIRM_MAX_SESSIONS
from pytest_aimeasure.measure.stats import (
    CONSERVATIVE_PRIOR,
    SCALE,
    SHARED_MIN_SESSIONS,
    Drift,
    prior_share,
    regression_power,
)

GOAL_FACTOR = 1.5
"""Advice names the design that detects a drop of this many tolerances (0.75 at tolerance 0.5)."""
MAX_DROP = SCALE[1] - SCALE[0]
"""The largest drop a mean of 1–5 scores can make: a detectable drop beyond it is none at all."""
MAX_ITEMS = 200
MAX_REPEATS = 10
POOL_ADVISED = 5


@dataclass(frozen=True)
class Design:
    """How a dimension was measured: what the advice can change."""

    m: int
    n: float
    """Judge samples an item (mean over items, all generations)."""
    k: float
    """Generations an item (1 without repeats)."""
    sessions: int
    """Sessions the baseline pools (the fewest over the items)."""
    confirm_level: float | None = None
    """The level of a planned second test against the baseline's outputs judged again
    (:mod:`pytest_aimeasure.compare.confirm`); the rule's own ``level`` is then the rest."""


def projected_mde(
    result: Drift,
    design: Design,
    *,
    m: int | None = None,
    k: float | None = None,
    sessions: int | None = None,
) -> float:
    """The drop detected 80% of the time under ``design`` with one part changed (see the module)."""
    m2, k2, p2 = m or design.m, k or design.k, sessions or design.sessions
    u = design.m * max(result.se_within, result.se_between or 0.0) ** 2
    tau = u / (1.0 + 1.0 / design.sessions)
    judge = result.var_within / (design.n / design.k) / design.k
    generation = max(0.0, tau - judge) * design.k
    tau2 = (generation + result.var_within / (design.n / design.k)) / k2
    shared = result.var_shared / (1.0 + 1.0 / design.sessions) * (1.0 + 1.0 / p2)
    if result.shared_source == "prior" and p2 >= SHARED_MIN_SESSIONS:
        # Measured then, and what it will measure is unknown: the projection keeps only the prior's
        # share of the update by those sessions (none from ten, where the session-level test holds it).
        prior_var = result.var_shared / (1.0 + 1.0 / design.sessions)
        shared = prior_share(CONSERVATIVE_PRIOR, p2) * prior_var * (1.0 + 1.0 / p2)
    se = math.sqrt(tau2 * (1.0 + 1.0 / p2) / m2 + shared)
    same = (m2, k2, p2) == (design.m, design.k, design.sessions)
    df = result.df if same else float(max(m2 - 1, 1) * max(1, math.floor(k2)))
    second = design.confirm_level if p2 <= CONFIRM_MAX_SESSIONS else None
    level = result.level
    if design.confirm_level is not None and second is None:
        level += design.confirm_level  # over ten pooled sessions: no second test, the whole level
    mde = regression_power(se, df, result.tolerance, level=level).mde
    if second is None:
        return mde
    # The second test: the same items against the baseline's outputs judged again, no shift assumed.
    se2 = math.sqrt(tau2 * (1.0 + 1.0 / p2) / m2)
    df2 = (result.df_between or result.df) if same else df
    return min(mde, regression_power(se2, df2, result.tolerance, level=second).mde)


def drop_text(mde: float) -> str:
    """A detectable drop as a reader takes it: '1.05', or 'more than 4 (none on the 1–5 scale)' when
    the test would need a drop no mean of 1–5 scores can make (two items and one degree of freedom
    ask for hundreds)."""
    return f"{mde:.2f}" if mde <= MAX_DROP else f"more than {MAX_DROP:g} (none on the 1–5 scale)"


def pooled_mde(result: Drift, design: Design) -> float:
    """About the drop a baseline pooled from POOL_ADVISED sessions would detect 80% of the time."""
    return projected_mde(result, design, sessions=POOL_ADVISED)


def _search(start: int, limit: int, goal: float, mde_at: Callable[[int], float]) -> int | None:
    """The least value in [start, limit] whose projected MDE reaches ``goal`` (it falls as the value
    grows), by bisection; None when even ``limit`` does not."""
    if start > limit or mde_at(limit) > goal:
        return None
    while start < limit:
        middle = (start + limit) // 2
        if mde_at(middle) <= goal:
            limit = middle
        else:
            start = middle + 1
    return start


def advise(result: Drift, design: Design) -> str:
    """'detects a drop of 1.05 at 80%; with 12 items, or 3 generation repeats an item, it would
    detect 0.75'. Only the changes that reach the goal are named. With a second test planned, the
    drop is the smaller of what either test detects (a drop that large is suspected by the first
    nearly always, so the second runs)."""
    mde = projected_mde(result, design)
    now = f"detects a drop of {drop_text(mde)} at 80%"
    if mde < result.mde - 1e-9 and design.sessions <= CONFIRM_MAX_SESSIONS:
        now += " (judging the baseline's outputs again when it looks lower)"
    goal = GOAL_FACTOR * result.tolerance
    if mde <= goal + 1e-9:
        return now
    options = []
    items = _search(design.m + 1, MAX_ITEMS, goal, lambda v: projected_mde(result, design, m=v))
    if items is not None:
        options.append(f"{items} items")
    first = max(2, math.ceil(design.k) + 1)
    repeats = _search(first, MAX_REPEATS, goal, lambda v: projected_mde(result, design, k=v))
    if repeats is not None:
        options.append(f"{repeats} generation repeats an item (repeats=)")
    if options:
        now += f"; with {', or '.join(options)}, it would detect about {goal:.2f}"
    if design.sessions < POOL_ADVISED:
        pooled = pooled_mde(result, design)
        if pooled < mde - 0.01 and pooled <= MAX_DROP:
            now += (
                f"; a baseline pooled from {POOL_ADVISED} sessions (--update-baseline on unchanged runs) "
                f"would detect about {drop_text(pooled)}"
            )
    return now
