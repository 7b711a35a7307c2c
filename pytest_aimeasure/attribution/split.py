"""Drift attribution: split a dimension's change into the judge's part and the system's part.

Pure: no pytest, no I/O, no judge. :mod:`pytest_aimeasure.attribution.rejudge` re-judges the baseline's
stored artifacts with today's judge and hands the scores here.

Three measurements of each item: the baseline ``b`` (old judge, old artifacts), the rejudged
baseline ``r`` (today's judge, the very artifacts the baseline judged) and now ``n`` (today's judge,
today's artifacts). The change n − b is the sum of

* the judge part, r − b: the same artifacts under two rulers; nothing but the judge moved;
* the system part, n − r: one ruler (today's) on old and new artifacts; nothing but the system moved.

Each part is a paired drift over the items (:func:`pytest_aimeasure.measure.stats.drift`), with its own
error bars: the judge part's carry the judge's sample and session noise (the artifacts are the same);
the system part's also the generator's, so it takes the between-session variance of the baseline's
pooled sessions as history, like the comparison itself. A part *moved* when its drift verdict is
regressed or improved (beyond the tolerance, with a 95% CI that excludes 0).

An entry that pools several sessions is rejudged session by session: every pooled session's artifact
is judged again and the entry's scores of the sessions whose artifacts are in the store pair with
their rejudged scores. An item none of whose artifacts is in the store (or whose rubric is unknown)
is left out and named in ``skipped``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, Drift, SessionHistory, drift

Moved = Literal["judge", "system", "both", "neither"]

RUBRICS_KEY = "rubrics"
"""ItemResult.extra key: dimension → the rubric the test judged with (rejudging needs its text)."""

ATTRIBUTED_VERDICTS = ("regressed", "improved", "not_comparable")
"""A dimension's comparison verdicts that attribution explains."""


@dataclass(frozen=True)
class ItemScores:
    """One item's three measurements; ``base`` and ``rejudged`` list the same sessions in one order."""

    item_id: str
    base: Sequence[Sequence[int]]
    rejudged: Sequence[Sequence[int]]
    now: Sequence[int]
    tolerance: float

    def __post_init__(self) -> None:
        if not self.base or len(self.base) != len(self.rejudged):
            raise ValueError(f"{self.item_id}: base and rejudged must list the same sessions (at least one)")
        if not self.now or any(not s for s in (*self.base, *self.rejudged)):
            raise ValueError(f"{self.item_id}: every measurement needs at least one score")


class Part(BaseModel):
    """One part of the change, with its error bars (the fields of a drift)."""

    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    delta: float
    ci95: tuple[float, float]
    ci90: tuple[float, float]
    se: float
    df: float
    se_source: str
    verdict: str
    p_value: float

    @classmethod
    def of(cls, d: Drift) -> Part:
        """The drift's fields of the same names (a Part is the JSON face of a :class:`Drift`)."""
        return cls.model_validate(d, from_attributes=True)

    @property
    def moved(self) -> bool:
        return self.verdict in ("regressed", "improved")

    def text(self) -> str:
        return f"{self.delta:+.2f} [{self.ci95[0]:+.2f}, {self.ci95[1]:+.2f}]"


class DimensionAttribution(BaseModel):
    """A dimension's change split into the judge's and the system's parts."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    dimension: str
    m: int = Field(description="items attributed")
    items: list[str]
    baseline_mean: float
    rejudged_mean: float
    now_mean: float
    total: float = Field(description="now − baseline over the attributed items: judge + system")
    judge: Part = Field(description="rejudged baseline − baseline: same artifacts, new ruler")
    system: Part = Field(description="now − rejudged baseline: same ruler, new artifacts")
    tolerance: float
    moved: Moved
    skipped: dict[str, str] = Field(default_factory=dict, description="item id → why it was left out")
    calls: int = Field(default=0, description="judge calls the rejudging made (cache hits excluded)")


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def split(
    dimension: str,
    items: Sequence[ItemScores],
    *,
    var_floor: float = VAR_FLOOR_DEFAULT,
    history: SessionHistory | None = None,
    skipped: Mapping[str, str] | None = None,
    alpha: float = 0.05,
) -> DimensionAttribution:
    """Split the dimension's change over ``items`` (at least one); see the module docstring."""
    if not items:
        raise ValueError(f"dimension {dimension!r}: no item to attribute")
    base = [[s for session in i.base for s in session] for i in items]
    rejudged = [[s for session in i.rejudged for s in session] for i in items]
    now = [list(i.now) for i in items]
    sessions = [len(i.base) for i in items]
    tolerance = min(i.tolerance for i in items)
    judge = drift(
        base, rejudged, tolerance=tolerance, var_floor=var_floor, base_sessions=sessions, level=alpha / 2
    )
    system = drift(
        rejudged,
        now,
        tolerance=tolerance,
        var_floor=var_floor,
        base_sessions=sessions,
        history=history,
        level=alpha / 2,
    )
    j, s = Part.of(judge), Part.of(system)
    moved: Moved = "neither"
    if j.moved or s.moved:
        moved = "both" if j.moved and s.moved else "judge" if j.moved else "system"
    b, r, n = (_mean([_mean(x) for x in xs]) for xs in (base, rejudged, now))
    return DimensionAttribution(
        dimension=dimension,
        m=len(items),
        items=[i.item_id for i in items],
        baseline_mean=b,
        rejudged_mean=r,
        now_mean=n,
        total=n - b,
        judge=j,
        system=s,
        tolerance=tolerance,
        moved=moved,
        skipped=dict(skipped or {}),
    )


_LEAD = {
    "judge": "the judge moved, the system did not",
    "system": "the system moved, the judge did not",
    "both": "both the judge and the system moved",
    "neither": "neither part moved beyond the tolerance",
}


def finding(a: DimensionAttribution, *, fail_on_regression: bool = True) -> Finding:
    """The attribution's finding: which part moved, each with its 95% CI. It fails the run when the
    system part regressed (one ruler, a real drop) and ``fail_on_regression``."""
    message = (
        f"dimension {a.dimension!r} attributed ({_LEAD[a.moved]}): of Δ {a.total:+.2f}, "
        f"{a.judge.text()} is the judge on unchanged artifacts and {a.system.text()} is the system "
        f"under today's judge ({a.m} item(s), tolerance {a.tolerance:g})"
    )
    if a.skipped:
        message += f"; {len(a.skipped)} item(s) could not be rejudged"
    regressed = a.system.verdict == "regressed"
    severity: Literal["fail", "warn", "info"] = (
        "fail" if regressed and fail_on_regression else "warn" if a.moved != "neither" else "info"
    )
    return Finding(
        kind="attribution",
        severity=severity,
        subject=a.dimension,
        message=message,
        detail=a.model_dump(mode="json"),
    )


def settle(findings: Sequence[Finding], attributions: Mapping[str, DimensionAttribution]) -> list[Finding]:
    """The comparison's findings once attribution has measured what moved: a dimension whose every
    compared item was attributed no longer fails on "regressed" or "not comparable" (the attribution's
    own finding says what moved and fails on a system regression); the findings stay, as info."""
    covered = {d for d, a in attributions.items() if not a.skipped}
    items = {i: d for d, a in attributions.items() if d in covered for i in a.items}
    out: list[Finding] = []
    for f in findings:
        dimension = items.get(f.subject) if f.nodeid is not None else f.subject
        if f.kind in ("regressed", "not_comparable") and dimension in covered and f.severity == "fail":
            f = f.model_copy(update={"severity": "info", "message": f.message + " (attributed below)"})
        out.append(f)
    return out
