"""Confirming a suspected drop by judging the baseline's outputs again today (issue 19).

Against a baseline of fewer than ``SHARED_MIN_SESSIONS`` pooled sessions the drift rule cannot measure
how much a whole session moves, so it assumes a shift of the prior's size
(:data:`pytest_aimeasure.measure.stats.CONSERVATIVE_PRIOR`). That assumption keeps a lucky first
baseline from failing unchanged runs, and it costs most of what the rule detects on the default path
(one ``--update-baseline``): no rule can tell a lucky baseline from a real drop with those data. From
three to ten pooled sessions it measures the shift with 2-9 df (keeping part of the prior's below
ten), and is weak there for the same reason (docs/concepts.md, "What no rule can do while it holds
a shift").

More data can. The run store keeps the outputs the baseline judged; judged again in today's session,
by today's judge, with fresh calls, they and today's outputs share one session, and a shift that
lives in the session's judging cancels from their difference. So a dimension whose shift the rule
assumed, or measured from at most ten pooled sessions (the default pool), has a second test planned
(*confirmable*: every item's baseline outputs are in the store), and it is run only when the first
leaves the dimension *suspected* (it looks lower by the tolerance, not confirmed): today's outputs
against the baseline's outputs judged again, with no session-wide shift assumed
(:data:`CONFIRM_PRIOR`). Every pooled session's outputs are judged again
(:data:`CONFIRM_MAX_SESSIONS`), and from three sessions their spread, judged today, is the second
test's history, without the session-level test: a judge-side shift is gone from sessions judged in
one session, and there its 9 df cost more detection than they hold.

Error control: the two tests test one hypothesis (the dimension did not drop), so they enter the
family (:mod:`pytest_aimeasure.compare.family`) as one test whose p-value is their weighted
Bonferroni combination, ``min(p1 / (1 − c), p2 / c)`` with ``c`` = :data:`CONFIRM_SHARE`. That
combination is a valid p-value whatever the two tests' dependence (P(p* ≤ t) ≤ (1 − c)·t + c·t), so
the family's procedure keeps its guarantee. A second test that is not run counts as p2 = 1: running
it only on a suspected dimension can only lower the rejection rate, never raise it. The split is
fixed before any score is seen (it depends on the baseline and the store, not on today's data).

What it cannot hold: a shift that lives in the generator (every output of one session better), which
rejudging keeps (from three pooled sessions the second test adds the part its history measures, but
2-9 df measure it poorly). docs/concepts.md, "Confirming a suspected drop", gives the simulation's
figures (``benchmarks/rejudge_confirm_sim.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from pytest_aimeasure.measure.stats import (
    CONSERVATIVE_PRIOR,
    SESSION_TEST_SESSIONS,
    TIE_TOLERANCE,
    Drift,
    Prior,
)
from pytest_aimeasure.store.baseline import BaselineEntry

CONFIRM_SHARE = 0.85
"""The part of a confirmable dimension's level its second test starts with (the first keeps the rest:
against an assumed shift it catches only large drops, and a run whose rejudging failed still fails
on one). Of 0.5, 0.7 and 0.85 (the default path, a moving generator, a drop of 0.75, 800 runs of each
kind a case): 0.5 caught 33% / 77% at m = 5 / 10, 0.7 40% / 81%, 0.85 42% / 82%. Over every case of
benchmarks/rejudge_confirm_sim.py (2,000 runs, same seeds), 0.85 against 0.7 caught 1-3 points more
in each, 59% -> 61% from five updates of three outputs at m = 5 (the issue's pooled target is 60%);
the bounded unchanged cases stayed at most 0.8% and a lucky first baseline 1.4% -> 1.2%, and a
generator-side shift of sd 0.2, which the second test does not hold, failed 0.3-0.5 points more of
unchanged runs (m = 10 after one update: 5.3% -> 5.8%)."""

CONFIRM_MAX_SESSIONS = SESSION_TEST_SESSIONS
"""The most pooled sessions a baseline may hold for a second test to be planned: the default pool
(``--aimeasure-baseline-pool``), since every pooled session's outputs are judged again, and a larger
pool buys the rule a session-level test of more df instead. From three sessions the rule holds a
shift it measures with few df (the prior updated by them below ten, the session-level test with 9
df at ten), and is weak there; the second test reads the spread of those sessions, judged today, as
its history: a judge-side shift is gone from it, a generator-side one is not. Measured
(benchmarks/rejudge_confirm_sim.py, 2,000 runs a case, a 0.75 drop, share 0.7): from five sessions
39% -> 45% and 68% -> 82% at m = 5 and 10 (0.91 of the limit), from three 49% -> 74% at m = 10; a
generator-side shift of sd 0.2 every session then fails 1.3-2.2% of unchanged runs instead of
0.9-1.0%. From ten (share 0.85), with the session-level test left out of the second test (it cost
detection there: m = 5, 48% -> 42-45% with it), 50% -> 56% at m = 5 and 82% -> 88% at m = 10; ten
updates of three outputs 55% -> 63% at m = 5, for about 51 fresh calls an item on a dropped run."""

CONFIRM_PRIOR = Prior(item_var=CONSERVATIVE_PRIOR.item_var, shared_var=0.0)
"""The second test's prior: items move between sessions as the rule assumes, and no session-wide shift
(the baseline's outputs and today's were judged in one session). A shift of sd 0.1 assumed here as
well cut detection at m = 10 from 77% to 61% (at a share of 0.5, as above)."""


@dataclass(frozen=True)
class Rejudged:
    """The baseline's outputs judged again today, for the suspected dimensions: item id → the entry as
    today's judge scores its artifacts (same sessions and generations), and dimension → the fresh
    judge calls that took."""

    entries: Mapping[str, BaselineEntry] = field(default_factory=dict)
    calls: Mapping[str, int] = field(default_factory=dict)


class Confirmation(BaseModel):
    """A confirmable dimension's second test: today's outputs against the baseline's outputs judged
    again today (``ran`` False: the first test left nothing to confirm, or the rejudging failed)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    level: float = Field(description="one-sided level the second test starts at")
    ran: bool = False
    calls: int = Field(default=0, description="fresh judge calls the rejudging made")
    rejudged_mean: float | None = Field(default=None, description="the baseline's outputs, judged today")
    delta: float | None = None
    delta_ci: tuple[float, float] | None = Field(default=None, description="95% CI of delta")
    se: float | None = None
    df: float | None = None
    p_value: float | None = None
    verdict: str | None = Field(default=None, description="the second test's own drift verdict")
    confirmed: bool = Field(default=False, description="the drop was confirmed by the second test")
    why_not: str | None = Field(default=None, description="why a suspected drop was not rejudged")

    @classmethod
    def of(cls, level: float, second: Drift | None, calls: int = 0) -> Confirmation:
        if second is None:
            return cls(level=level)
        return cls(
            level=level,
            ran=True,
            calls=calls,
            rejudged_mean=second.base_mean,
            delta=second.delta,
            delta_ci=second.ci95,
            se=second.se,
            df=second.df,
            p_value=second.p_value,
            verdict=second.verdict,
        )

    def text(self) -> str:
        """'3.50 → 2.80 (Δ −0.70, 95% CI [−1.05, −0.35], 30 fresh judge calls)': the baseline's outputs
        judged again today, then today's."""
        assert self.rejudged_mean is not None and self.delta is not None and self.delta_ci is not None
        return (
            f"{self.rejudged_mean:.2f} → {self.rejudged_mean + self.delta:.2f} (Δ {self.delta:+.2f}, 95% CI "
            f"[{self.delta_ci[0]:+.2f}, {self.delta_ci[1]:+.2f}], {self.calls} fresh judge calls)"
        )


def combined_p(first: float, second: float | None) -> float:
    """The dimension's one p-value when a second test is planned (see the module docstring);
    ``second`` None: not run (p2 = 1)."""
    p2 = 1.0 if second is None else second
    return min(1.0, first / (1.0 - CONFIRM_SHARE), p2 / CONFIRM_SHARE)


def suspected(delta: float | None, tolerance: float | None, verdict: str) -> bool:
    """A dimension the first test leaves looking lower by the tolerance without confirming the drop:
    the one the second test is run for."""
    if delta is None or tolerance is None or verdict == "regressed":
        return False
    return delta <= -tolerance + TIE_TOLERANCE
