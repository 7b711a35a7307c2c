"""How many judge samples an item takes: a fixed N, or ``auto`` (adaptive sampling).

A ground-floor module: the option parser, the markers, the suite model and the judge all read the
setting through it, so "auto" means one thing everywhere. The stopping rule itself lives with the
instrument (:mod:`pytest_aimeasure.judge.adaptive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

__all__ = ["AUTO", "MAX_REPEATS", "MAX_SAMPLES", "SamplePlan", "Samples", "call_range", "samples_problem"]

AUTO = "auto"
MAX_SAMPLES = 100
"""The most judge samples of one item (as repeats are capped at 100): past it the error bar hardly
narrows, and a typo (``--judge-samples 100000000``) must not fill the disk with calls."""
MAX_REPEATS = 100
"""The most generation outputs one artifact key may have (``repeats=``, ``--aimeasure-baseline-repeats``)."""
Samples = int | Literal["auto"]
"""A dimension's samples setting: a fixed N >= 1, or ``"auto"``."""


@dataclass(frozen=True)
class SamplePlan:
    """Adaptive sampling's looks: ``minimum``, ``minimum + step``, …, up to ``maximum`` (always a look)."""

    minimum: int = 3
    maximum: int = 9
    step: int = 2

    def __post_init__(self) -> None:
        if self.minimum < 2:
            raise ValueError(f"the minimum must be >= 2 (one sample has no spread), got {self.minimum}")
        if self.maximum < self.minimum:
            raise ValueError(f"the maximum {self.maximum} is below the minimum {self.minimum}")
        if self.step < 1:
            raise ValueError(f"the step must be >= 1, got {self.step}")

    @property
    def looks(self) -> tuple[int, ...]:
        """The sample counts after which the stopping rule looks at the data, e.g. (3, 5, 7, 9)."""
        counts = list(range(self.minimum, self.maximum + 1, self.step))
        if counts[-1] != self.maximum:
            counts.append(self.maximum)
        return tuple(counts)

    def describe(self) -> str:
        return f"auto ({self.minimum}..{self.maximum}, step {self.step})"


def samples_problem(value: object) -> str | None:
    """Why ``value`` is not a samples setting (a whole number >= 1 or "auto"), or None."""
    if value == AUTO:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"{value!r} must be a whole number >= 1 or 'auto'"
    if value > MAX_SAMPLES:
        return f"{value!r} is above the limit of {MAX_SAMPLES} samples per item; use at most {MAX_SAMPLES}"
    return None


def call_range(samples: Samples, plan: SamplePlan) -> tuple[int, int]:
    """(fewest, most) judge calls of one item: (N, N) for a fixed N, the plan's range for ``auto``."""
    if samples == AUTO:
        return plan.minimum, plan.maximum
    assert isinstance(samples, int)
    return samples, samples


class PlannedItem(NamedTuple):
    """One item a test will measure, as the dry run plans it: from ``fewest`` to ``most`` judge calls
    (equal for a fixed N; the plan's range under ``samples="auto"``) with ``judge`` (None: the
    session's model), and at worst ``most`` again with ``escalate``."""

    nodeid: str
    dimension: str
    fewest: int
    most: int
    judge: str | None = None
    escalate: str | None = None
