"""Drift attribution's judging: re-score the baseline's stored artifacts with today's judge.

Used at the end of a session on the controller: to confirm a suspected drop (:func:`confirmable`,
:func:`rejudge_baseline`, fresh calls; :mod:`pytest_aimeasure.compare.confirm`) and, after the
comparison, by ``--aimeasure-attribute``; and by ``aimeasure attribute BASE_RUN NOW_RUN``. Each
pooled session of a baseline entry names the run and the artifact (sha256) it judged, or each of its
generation repeats' artifacts; every artifact is read from the store and judged with today's rubric,
facts of the run that judged it, and as many samples as today's measurement took of one artifact. A
session of several generations is rejudged whole: its rejudged scores pool its generations as the
session did. Calls go through the session's :class:`~pytest_aimeasure.judge.engine.JudgeEngine`, so
they are journaled, cached (read from it only when not fresh), priced and budgeted like any other
sample. The split itself is :mod:`pytest_aimeasure.attribution.split`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_aimeasure.attribution.split import (
    ATTRIBUTED_VERDICTS,
    RUBRICS_KEY,
    DimensionAttribution,
    ItemScores,
    finding,
    settle,
    split,
)
from pytest_aimeasure.compare.confirm import CONFIRM_MAX_SESSIONS, Rejudged
from pytest_aimeasure.compare.drift import Comparison, History, baseline_history
from pytest_aimeasure.judge.engine import JudgeEngine
from pytest_aimeasure.judge.errors import JudgeError, NotJudged
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.measure.models import Finding, ItemResult, Measurement, item_id
from pytest_aimeasure.measure.sampling import PlannedItem
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, session_history
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile, EntrySource
from pytest_aimeasure.store.runs import RunStore, StoreError

REJUDGE_SUFFIX = "::baseline-rejudged"
"""Appended to an item id for the rejudged baseline's samples (the journal keeps them apart)."""


@dataclass
class Planned:
    """The rejudging one item needs: its entry's sessions whose artifacts are in the store."""

    measurement: Measurement
    entry: BaselineEntry
    rubric: str
    sessions: list[int]  # indexes into entry.session_scores()
    artifacts: dict[int, list[str]]  # session index → the sha256 of each artifact it judged
    texts: dict[str, str]  # sha256 → artifact text
    facts: dict[str, dict[str, Any] | None]  # sha256 → the facts it was judged with


@dataclass
class Attribution:
    """What the rejudging found: per dimension the split, per item the rejudged baseline entry."""

    dimensions: dict[str, DimensionAttribution] = field(default_factory=dict)
    rejudged: dict[str, BaselineEntry] = field(default_factory=dict)
    system_moved: set[str] = field(default_factory=set)
    calls: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    """Item id → why it was left out."""


class _Facts:
    """The facts each stored artifact was judged with, read from the runs that judged them."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._runs: dict[str, dict[tuple[str, str], dict[str, Any] | None]] = {}

    def of(self, run_id: str | None, item_id: str, sha: str) -> tuple[bool, dict[str, Any] | None]:
        if run_id is None:
            return False, None
        if run_id not in self._runs:
            found: dict[tuple[str, str], dict[str, Any] | None] = {}
            try:
                for result in self.store.open_run(run_id).items():
                    for m in result.measurements:
                        if m.artifact_sha256:
                            found[(m.item_id, m.artifact_sha256)] = m.facts
                        if m.repeats is not None and m.facts is None:
                            # Repeats judged without facts; with facts, which generation had which
                            # is not recorded, so those stay unknown (today's then may not stand in).
                            found.update(((m.item_id, sha), None) for sha in m.repeats.shas)
            except StoreError:
                pass
            self._runs[run_id] = found
        key = (item_id, sha)
        return (True, self._runs[run_id][key]) if key in self._runs[run_id] else (False, None)


def plan(
    store: RunStore,
    entries: Mapping[str, BaselineEntry],
    measurements: Sequence[Measurement],
    rubrics: Mapping[str, str],
) -> tuple[list[Planned], dict[str, str]]:
    """(what to rejudge, item id → why it cannot be). ``rubrics``: item id → today's rubric."""
    planned: list[Planned] = []
    skipped: dict[str, str] = {}
    facts = _Facts(store)
    for m in measurements:
        entry = entries.get(m.item_id)
        if entry is None or not m.samples:
            continue
        rubric = rubrics.get(m.item_id)
        if rubric is None:
            skipped[m.item_id] = "today's rubric is unknown"
            continue
        sessions: list[int] = []
        artifacts: dict[int, list[str]] = {}
        texts: dict[str, str] = {}
        found_facts: dict[str, dict[str, Any] | None] = {}
        for index, source in enumerate(entry.session_sources()):
            found = _session_artifacts(store, facts, m, source, texts)
            if found is None:
                continue
            sessions.append(index)
            artifacts[index] = source.artifacts()
            for sha, (text, judged_with) in found.items():
                texts[sha] = text
                found_facts[sha] = judged_with
        if not sessions:
            unrecorded = entry.generations and not any(s.generations for s in entry.session_sources())
            skipped[m.item_id] = (
                "its baseline entry pooled generation repeats recorded before their artifacts were "
                "(update the baseline again to attribute it)"
                if unrecorded
                else "the baseline's artifacts are not in the store"
            )
            continue
        planned.append(Planned(m, entry, rubric, sessions, artifacts, texts, found_facts))
    return planned, skipped


def _session_artifacts(
    store: RunStore, facts: _Facts, m: Measurement, source: EntrySource, known_texts: Mapping[str, str]
) -> dict[str, tuple[str, dict[str, Any] | None]] | None:
    """Each artifact of one pooled session with its text and the facts it was judged with, or None
    when one of them cannot be rejudged (a session is rejudged whole or not at all)."""
    shas = source.artifacts()
    if not shas:
        return None
    out: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for sha in shas:
        # Pooled sessions of an unchanged artifact share its sha: read the file once.
        text = known_texts.get(sha) or _artifact_text(store, sha)
        if text is None:
            return None
        known, judged_with = facts.of(source.run, m.item_id, sha)
        if not known:
            if m.facts is not None and sha != m.artifact_sha256:
                return None  # facts describe their artifact: today's do not fit an old one
            judged_with = m.facts
        out[sha] = (text, judged_with)
    return out


def _artifact_text(store: RunStore, sha: str) -> str | None:
    try:
        return store.read_artifact(sha).decode("utf-8")
    except (StoreError, UnicodeDecodeError):
        return None


def samples_per_artifact(m: Measurement) -> int:
    """How many samples today's measurement took of one artifact (of one generation repeat when it
    pooled several): what each rejudged artifact gets."""
    k = m.repeats.k if m.repeats is not None else 1
    return max(1, round(len(m.samples) / k))


def count_calls(planned: Sequence[Planned]) -> dict[str, int]:
    """Dimension → judge calls the rejudging makes at most (before the sample cache): each stored
    artifact of an item is judged as many times as today's measurement judged one artifact."""
    calls: dict[str, int] = {}
    for p in planned:
        m = p.measurement
        calls[m.dimension] = calls.get(m.dimension, 0) + len(p.texts) * samples_per_artifact(m)
    return calls


def stored_artifacts(store: RunStore, entry: BaselineEntry) -> set[str]:
    """The artifacts (sha256) of the entry's pooled sessions that the store holds."""
    shas = {sha for s in entry.session_sources() for sha in s.artifacts()}
    return {sha for sha in shas if store.artifact_path(sha).is_file()}


def kept_outputs(store: RunStore, entries: Mapping[str, BaselineEntry]) -> frozenset[str]:
    """Item ids whose baseline entry assumes the session-wide shift or measures it with few df (at most
    CONFIRM_MAX_SESSIONS pooled sessions) and whose every judged artifact the store holds: read at the
    session's start, before today's outputs are stored (a deterministic generator stores the very
    same files), so that which dimensions get a second test does not depend on today's data."""
    wanted: dict[str, set[str]] = {}
    for key, entry in entries.items():
        if entry.pooled <= CONFIRM_MAX_SESSIONS and entry.sources is not None:
            shas = {sha for source in entry.session_sources() for sha in source.artifacts()}
            if shas:
                wanted[key] = shas
    # One listing a shard folder the entries need, not a stat an artifact: at 10,000 entries the
    # stats took 0.16 s of the session's start.
    stored: set[str] = set()
    for shard in {sha[:2] for shas in wanted.values() for sha in shas}:
        with contextlib.suppress(OSError):
            stored.update(os.listdir(store.artifacts_dir / shard))
    return frozenset(key for key, shas in wanted.items() if shas <= stored)


def confirmable(
    kept: Collection[str],
    entries: Mapping[str, BaselineEntry],
    measurements: Sequence[Measurement],
    rubrics: Mapping[str, str],
) -> set[str]:
    """Dimensions a suspected drop can be confirmed in (:mod:`pytest_aimeasure.compare.confirm`): every
    measured item with a baseline entry had its outputs in the store at the session's start (``kept``,
    :func:`kept_outputs`) and its rubric is known. Decided from the baseline and the store alone,
    before any score is compared."""
    out: set[str] = set()
    lacking: set[str] = set()
    for m in measurements:
        if m.item_id not in entries or not m.samples:
            continue
        if m.item_id in kept and m.item_id in rubrics:
            out.add(m.dimension)
        else:
            lacking.add(m.dimension)
    return out - lacking


def planned_calls(
    store: RunStore, entries: Mapping[str, BaselineEntry], items: Iterable[PlannedItem]
) -> dict[str, int]:
    """Dimension → judge calls ``--aimeasure-attribute`` makes at most for the collected ``items``
    (as ``--judge-dry-run`` plans them), before any test
    has run: each stored artifact of an item's baseline entry judged as many times as the item at most.
    Only dimensions the comparison then finds regressed, improved or not comparable are rejudged, so
    this is an upper bound."""
    calls: dict[str, int] = {}
    for planned in items:
        entry = entries.get(item_id(planned.dimension, planned.nodeid))
        if entry is None:
            continue
        found = len(stored_artifacts(store, entry)) * planned.most
        if found:
            calls[planned.dimension] = calls.get(planned.dimension, 0) + found
    return calls


def _spec(p: Planned, sha: str, judge: str | None, *, fresh: bool = False) -> ItemSpec:
    m = p.measurement
    return ItemSpec(
        nodeid=m.nodeid,
        item_id=m.item_id + REJUDGE_SUFFIX,
        dimension=m.dimension,
        rubric=p.rubric,
        artifact=p.texts[sha],
        samples=samples_per_artifact(m),
        floor=m.floor,
        tolerance=m.tolerance,
        facts=p.facts[sha],
        phase=m.phase,
        artifact_sha256=sha,
        judge=judge,
        fresh=fresh,
    )


def attribute(
    engine: JudgeEngine,
    store: RunStore,
    entries: Mapping[str, BaselineEntry],
    measurements: Sequence[Measurement],
    rubrics: Mapping[str, str],
    *,
    dimensions: Collection[str],
    var_floor: float = VAR_FLOOR_DEFAULT,
    var_floors: Mapping[str, float] | None = None,
    history: History | None = None,
    alpha: float = 0.05,
    same_judge: bool = True,
) -> Attribution:
    """Rejudge the baseline artifacts of the items of ``dimensions`` and split each dimension's change.
    ``history`` None: the sessions the baseline pools (as in the comparison). ``same_judge``: each
    item is rejudged by the judge that measured it today (a dimension's own ``judge=``, or the model
    it was escalated to), never escalated again, so the rejudged baseline and today's measurement
    share one ruler; False: by the engine's model (``aimeasure attribute --judge-model``)."""
    chosen = [m for m in measurements if m.dimension in dimensions]
    planned, skipped = plan(store, entries, chosen, rubrics)
    before = engine.spend.calls
    rejudged, paid = _judge_again(engine, planned, skipped, same_judge=same_judge)
    out = Attribution(calls=engine.spend.calls - before, skipped=skipped)
    by_dimension = _item_scores(planned, rejudged, skipped, out.rejudged)
    floors = var_floors or {}
    for name in sorted({m.dimension for m in chosen}):
        items = by_dimension.get(name, [])
        if not items:
            continue
        members = {m.item_id for m in chosen if m.dimension == name}
        left_out = {i: why for i, why in skipped.items() if i in members}
        ids = [i.item_id for i in items]
        sessions_of = history if history is not None else baseline_history({i: entries[i] for i in ids})
        rows = [[s.get(i) for i in ids] for s in sessions_of]
        past = session_history(rows) if rows else None
        parts = split(
            name, items, var_floor=floors.get(name, var_floor), history=past, skipped=left_out, alpha=alpha
        ).model_copy(update={"calls": paid.get(name, 0)})
        out.dimensions[name] = parts
        if parts.system.moved:
            out.system_moved.update(ids)
    return out


def _judge_again(
    engine: JudgeEngine,
    planned: Sequence[Planned],
    skipped: dict[str, str],
    *,
    same_judge: bool = True,
    fresh: bool = False,
) -> tuple[dict[tuple[str, str], Measurement], dict[str, int]]:
    """Judge every planned artifact again: ((item id, sha256) → its measurement, dimension → the
    judge calls made, cache hits excluded). An item whose rejudging failed goes to ``skipped``.
    ``fresh``: no sample from the cache (see :attr:`ItemSpec.fresh`)."""
    jobs = [(p, sha) for p in planned for sha in p.texts]

    async def judge_all() -> list[Measurement | BaseException]:
        calls = (
            engine.ameasure(_spec(p, sha, p.measurement.judge if same_judge else None, fresh=fresh))
            for p, sha in jobs
        )
        return await asyncio.gather(*calls, return_exceptions=True)

    results = engine.run(judge_all()) if jobs else []
    rejudged: dict[tuple[str, str], Measurement] = {}
    paid: dict[str, int] = {}
    for (p, sha), judged in zip(jobs, results, strict=True):
        if isinstance(judged, Measurement):
            rejudged[(p.measurement.item_id, sha)] = judged
            made = sum(1 for s in judged.samples if s.source == "judge")
            paid[judged.dimension] = paid.get(judged.dimension, 0) + made
        elif isinstance(judged, (JudgeError, NotJudged)):
            skipped[p.measurement.item_id] = f"rejudging failed: {judged}"
        else:
            raise judged
    return rejudged, paid


def rejudge_baseline(
    engine: JudgeEngine,
    store: RunStore,
    entries: Mapping[str, BaselineEntry],
    measurements: Sequence[Measurement],
    rubrics: Mapping[str, str],
    *,
    dimensions: Collection[str],
) -> tuple[Rejudged, dict[str, str]]:
    """The baseline's outputs of ``dimensions``' items judged again today with fresh calls, each by
    the judge that measured the item today, to confirm a suspected drop
    (:mod:`pytest_aimeasure.compare.confirm`): (the rejudged entries of the items whose every pooled
    session was rejudged under today's ruler, item id → why another was not)."""
    chosen = [m for m in measurements if m.dimension in dimensions]
    planned, skipped = plan(store, entries, chosen, rubrics)
    rejudged, paid = _judge_again(engine, planned, skipped, fresh=True)
    entries_again: dict[str, BaselineEntry] = {}
    _item_scores(planned, rejudged, skipped, entries_again)
    return Rejudged(entries=entries_again, calls=paid), skipped


def _item_scores(
    planned: Sequence[Planned],
    rejudged: Mapping[tuple[str, str], Measurement],
    skipped: dict[str, str],
    whole: dict[str, BaselineEntry],
) -> dict[str, list[ItemScores]]:
    """Each planned item's three measurements (baseline, baseline rejudged, now), by dimension; an
    item whose rejudged ruler differs from today's is skipped. A fully rejudged entry goes to
    ``whole``."""
    by_dimension: dict[str, list[ItemScores]] = {}
    for p in planned:
        m = p.measurement
        if m.item_id in skipped:
            continue
        scores = p.entry.session_scores()
        again = [[rejudged[(m.item_id, sha)] for sha in p.artifacts[i]] for i in p.sessions]
        if any(r.fingerprint != m.fingerprint for session in again for r in session):
            skipped[m.item_id] = "the rejudged baseline's ruler differs from today's measurement's"
            continue
        by_dimension.setdefault(m.dimension, []).append(
            ItemScores(
                item_id=m.item_id,
                base=[scores[i] for i in p.sessions],
                rejudged=[[s for r in session for s in r.scores] for session in again],
                now=m.scores,
                tolerance=m.tolerance,
            )
        )
        if len(p.sessions) == p.entry.pooled:
            whole[m.item_id] = _rejudged_entry(p.entry, again)
    return by_dimension


def _rejudged_entry(entry: BaselineEntry, again: Sequence[Sequence[Measurement]]) -> BaselineEntry:
    """The entry as today's judge scores its artifacts (``again``: each session's rejudged artifacts,
    one per generation): same sessions, generations and sources, the new ruler."""
    scores = [s for session in again for m in session for s in m.scores]
    generations = [len(m.scores) for session in again for m in session]
    sessions = [sum(len(m.scores) for m in session) for session in again]
    return BaselineEntry.model_validate(
        entry.model_dump(mode="json")
        | {
            "scores": scores,
            "n": len(scores),
            "mean": round(sum(scores) / len(scores), 4),
            "sessions": sessions if len(sessions) > 1 else None,
            "generations": generations if len(generations) > len(again) else None,
            "fingerprint": again[0][0].fingerprint.model_dump(mode="json"),
        }
    )


def rubrics_of(results: Iterable[ItemResult]) -> dict[str, str]:
    """Item id → the rubric its test judged with (recorded by the ``judge`` fixture)."""
    out: dict[str, str] = {}
    for result in results:
        recorded = result.extra.get(RUBRICS_KEY) or {}
        for m in result.measurements:
            rubric = recorded.get(m.dimension)
            if isinstance(rubric, str):
                out[m.item_id] = rubric
    return out


def attribute_session(
    engine: JudgeEngine,
    store: RunStore,
    baseline: BaselineFile,
    comparison: Comparison,
    measurements: Sequence[Measurement],
    rubrics: Mapping[str, str],
    findings: Sequence[Finding],
    *,
    var_floor: float = VAR_FLOOR_DEFAULT,
    var_floors: Mapping[str, float] | None = None,
    fail: bool = True,
) -> tuple[Attribution, list[Finding]]:
    """Attribute the dimensions the comparison found regressed, improved or not comparable; return the
    attribution and the comparison's findings settled by it, with one attribution finding a dimension."""
    dimensions = {d for d, c in comparison.dimensions.items() if c.verdict in ATTRIBUTED_VERDICTS}
    if not dimensions:
        return Attribution(), list(findings)
    result = attribute(
        engine,
        store,
        baseline.entries,
        measurements,
        rubrics,
        dimensions=dimensions,
        var_floor=var_floor,
        var_floors=var_floors,
        alpha=comparison.alpha,
    )
    settled = settle(findings, result.dimensions)
    settled += [finding(a, fail_on_regression=fail) for a in result.dimensions.values()]
    for name in sorted(dimensions - set(result.dimensions)):
        why = {i: reason for i, reason in result.skipped.items() if i.split("::", 1)[0] == name}
        reasons = set(why.values())
        settled.append(
            Finding(
                kind="attribution",
                severity="info",
                subject=name,
                message=f"dimension {name!r} could not be attributed: "
                + (
                    f"{reasons.pop()} ({len(why)} item(s))"
                    if len(reasons) == 1
                    else "none of its items' baseline artifacts could be rejudged (they are recorded only "
                    "for artifacts made with aimeasure_artifact, by runs that updated the baseline with this "
                    "plugin version or later)"
                ),
                detail={"skipped": why} if why else {},
            )
        )
    return result, settled
