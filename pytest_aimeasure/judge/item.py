"""One item to measure, as the judge sees it: one dimension of one artifact, with its floor,
tolerance, sampling plan and judges. Built by the judge fixture, the suite runner, calibration and
attribution; read by the engine, escalation and the repeats' pooling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aimeasure.judge.adaptive import Reference
from pytest_aimeasure.measure.sampling import SamplePlan

if TYPE_CHECKING:
    from pytest_aimeasure.measure.models import RepeatsChoice

__all__ = ["ItemSpec"]


@dataclass(frozen=True)
class ItemSpec:
    """One item to measure: one dimension of one artifact."""

    nodeid: str
    item_id: str
    dimension: str
    rubric: str
    artifact: str
    samples: int
    floor: float = 3.0
    tolerance: float = 0.5
    facts: dict[str, Any] | None = None
    phase: str | None = None
    artifact_key: str | None = None
    artifact_sha256: str | None = None
    sample_offset: int = 0
    """First sample index: generation repeat r of an item uses r·N.., so identical repeats get their
    own samples (and cache keys)."""
    adaptive: SamplePlan | None = None
    """``samples="auto"``: sample look by look (``samples`` is then the plan's maximum)."""
    reference: Reference | None = None
    """The item's baseline entry, for adaptive sampling's drift decision."""
    floor_applies: bool = True
    """False when ``judge.score`` was given no floor outside a dimension test: no floor decision."""
    judge: str | None = None
    """The dimension's judge model (``judge=``); None: the session's ``--judge-model``."""
    chosen: RepeatsChoice | None = None
    """How ``repeats="auto"`` chose the artifact's outputs (recorded in the measurement)."""
    escalate: str | None = None
    """A stronger model that re-judges the item when the standing judge's samples are unsettled
    (:mod:`pytest_aimeasure.judge.escalate`)."""
    fresh: bool = False
    """Every sample from a call, none from the sample cache: the baseline's outputs judged again to
    confirm a drop (:mod:`pytest_aimeasure.compare.confirm`) need today's judging, and the cache would
    return the baseline session's own verdicts. The samples are still journaled."""
