"""Escalation: an item whose standing judge is unsettled is judged again by a stronger model.

``@pytest.mark.dimension(..., escalate="anthropic/<stronger model>")`` (a suite dimension's
``escalate:``): once the standing judge's samples are in, the item is re-judged with the stronger
model, with the same sampling (the same N; under ``samples="auto"`` the same plan, look by look, its
drift decision against baseline scores under the stronger model's ruler only), prompt and rubric,
when the standing judge's final samples

* disagree by two or more points (``max - min >= 2``: the rubric reads two ways), or
* straddle the floor (some below it, some at or above it: the floor verdict hangs on the draw).

The stronger judge's measurement is the item's: it decides the floor verdict and goes to the
baseline, and its fingerprint is the stronger model's. The standing judge's measurement is kept in
:attr:`~pytest_aimeasure.measure.models.Measurement.escalation`, so reports show both means. Escalation calls
are judge calls like any other: they pass the budget, are journaled and cached (a resumed run reads
them back instead of paying again), and ``--judge-dry-run`` counts them as a worst case (N more
calls, or the plan's maximum under ``auto``).

The decision is taken here, around whatever measures the item once (one artifact, or the pooled
generation repeats of :mod:`pytest_aimeasure.judge.generations`), so the engine's per-item path only
has to call :func:`with_escalation`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from pytest_aimeasure.measure.models import Escalation, Measurement

if TYPE_CHECKING:
    from pytest_aimeasure.judge.item import ItemSpec

__all__ = ["DISAGREEMENT_POINTS", "escalation_reasons", "with_escalation"]

DISAGREEMENT_POINTS = 2
"""Samples this many points apart (max - min) make the standing judge's verdict unsettled."""

Reason = Literal["disagreement", "straddles_floor"]


def escalation_reasons(scores: Sequence[int], floor: float) -> list[Reason]:
    """Why the standing judge's ``scores`` call for a stronger judge (empty: they do not)."""
    if not scores:
        return []
    reasons: list[Reason] = []
    if max(scores) - min(scores) >= DISAGREEMENT_POINTS:
        reasons.append("disagreement")
    if any(s < floor for s in scores) and any(s >= floor for s in scores):
        reasons.append("straddles_floor")
    return reasons


async def with_escalation(
    spec: ItemSpec, measure: Callable[[ItemSpec], Awaitable[Measurement]]
) -> Measurement:
    """Measure ``spec`` with its standing judge; when the samples are unsettled and ``spec.escalate``
    names a stronger model, measure it again with that model and return the stronger judge's
    measurement carrying the standing one. ``measure`` takes an item without ``escalate``."""
    standing = await measure(replace(spec, escalate=None))
    if spec.escalate is None or spec.escalate == spec.judge:
        return standing
    reasons = escalation_reasons(standing.scores, standing.floor)
    if not reasons:
        return standing
    stronger = await measure(replace(spec, judge=spec.escalate, escalate=None))
    kept = standing.model_copy(update={"excerpt": "", "facts": None})
    return stronger.model_copy(
        update={
            "escalation": Escalation(
                reasons=reasons, spread=max(standing.scores) - min(standing.scores), standing=kept
            )
        }
    )
