"""Which items a human label helps most (``aimeasure label``): escalated items, items whose samples
straddle the floor, the widest intervals, and the judge levels the anchor set covers least.

Picked one at a time: each pick counts toward its level, so the next pick prefers another level.
A label where the judge is unsure narrows the trust verdict's interval most, and a spread of
levels gives κ's denominator (the chance disagreement) room: benchmarks/trust_sim.py part 4
measures the width against as many random anchors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_aimeasure.calibrate.agreement import level


@dataclass(frozen=True)
class Candidate:
    """One measured item as the chooser sees it: the judge's samples and their interval."""

    scores: tuple[int, ...]
    ci_low: float
    ci_high: float
    floor: float | None = None
    escalated: bool = False

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores)

    @property
    def straddles(self) -> bool:
        return self.floor is not None and min(self.scores) < self.floor <= max(self.scores)

    def reasons(self, covered: int) -> list[str]:
        out = ["escalated"] if self.escalated else []
        out += [f"samples straddle the floor {self.floor:g}"] if self.straddles else []
        if self.ci_high - self.ci_low >= 1.0:
            out.append(f"wide interval ({self.ci_high - self.ci_low:.1f})")
        out.append(f"judge level {level(self.mean)} has {covered} anchor{'s' * (covered != 1)}")
        return out


def _value(c: Candidate, covered: int) -> float:
    """How much a human label on ``c`` helps: unsure judgements first, then thin levels."""
    return 2.0 * c.escalated + 1.5 * c.straddles + min(c.ci_high - c.ci_low, 4.0) / 4 + 1.0 / (1 + covered)


def pick(candidates: Sequence[Candidate], n: int, covered: Mapping[int, int] | None = None) -> list[int]:
    """The indices of the ``n`` candidates worth a label, best first. ``covered``: anchors already
    labelled per level (1..5)."""
    counts = Counter(covered or {})
    left = list(range(len(candidates)))
    chosen: list[int] = []
    while left and len(chosen) < n:
        best = max(left, key=lambda i: (_value(candidates[i], counts[level(candidates[i].mean)]), -i))
        chosen.append(best)
        left.remove(best)
        counts[level(candidates[best].mean)] += 1
    return chosen


def spread_picks(judge_levels: Sequence[int], labelled: int, n: int = 20) -> list[int]:
    """For the simulation: the first ``labelled`` levels are anchors already, the rest a pool of
    single-sample judgements; the pool indices chosen."""
    covered = Counter(judge_levels[:labelled])
    pool = [Candidate((lv,), lv, lv) for lv in judge_levels[labelled:]]
    return pick(pool, n, covered)
