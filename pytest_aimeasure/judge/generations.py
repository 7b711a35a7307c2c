"""Judging an item's generation repeats: each repeat N samples, pooled into one measurement.

Each repeat gets the item's full N samples (not N/K): the judge noise must be estimated within each
repeat to be told apart from the generator's, and with N/K a repeat may get a single sample. An item
with K repeats therefore costs K·N judge calls (``--judge-dry-run`` counts them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_aimeasure.judge.escalate import with_escalation
from pytest_aimeasure.measure.repeats import pool

if TYPE_CHECKING:
    from pytest_aimeasure.judge.engine import JudgeEngine
    from pytest_aimeasure.judge.item import ItemSpec
    from pytest_aimeasure.measure.artifact import Artifact
    from pytest_aimeasure.measure.models import Measurement


async def ameasure_repeats(
    engine: JudgeEngine,
    spec: ItemSpec,
    repeats: Sequence[tuple[int, Artifact]],
    *,
    generated: int,
    group_key: str | None,
    facts_of: Callable[[Artifact], dict[str, Any] | None] | None = None,
) -> Measurement:
    """Judge ``repeats`` (``(0-based repeat index, artifact)``, those that passed their gates) and pool
    them. ``generated`` is how many repeats there were in all. Escalation (``spec.escalate``) looks at
    the pooled samples and re-judges every repeat with the stronger model, so one item never mixes
    two judges."""
    if spec.escalate is not None:

        async def pooled(one: ItemSpec) -> Measurement:
            return await ameasure_repeats(
                engine, one, repeats, generated=generated, group_key=group_key, facts_of=facts_of
            )

        return await with_escalation(spec, pooled)
    specs = [
        (
            index,
            replace(
                spec,
                artifact=artifact.text,
                artifact_key=artifact.key,
                artifact_sha256=artifact.sha256,
                sample_offset=index * spec.samples,
                facts=facts_of(artifact) if facts_of is not None else spec.facts,
            ),
        )
        for index, artifact in repeats
    ]
    outcomes = await asyncio.gather(*(engine.ameasure(s) for _, s in specs), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome  # the first problem, as for one artifact (a budget stop, a judge error)
    parts = [
        (index, m) for (index, _), m in zip(specs, outcomes, strict=True) if not isinstance(m, BaseException)
    ]
    ruler = parts[0][1].standing.fingerprint if parts else None
    var_floor = engine.settings.var_floor_of(spec.dimension, ruler)
    return pool(parts, generated=generated, artifact_key=group_key, var_floor=var_floor)
