"""The session's comparison with the baseline: per-item and per-dimension drift, the family of
regression tests, findings.

Pure: no pytest, no I/O. The session loads the baseline and collects the measurements and hands both
here; the returned :class:`Comparison` goes into the session results as it is.

Rules:

* Items pair by their stable id (``dimension::nodeid``). An item without an entry is *new*; one whose
  fingerprint differs from its entry's is *not comparable* (a different ruler, not a drift). The
  number of samples is not part of the fingerprint: a baseline taken at N = 3 compares with N = 5.
* A dimension pools its comparable items (:func:`pytest_aimeasure.measure.stats.drift`: the judge's
  within-sample term as a lower bound; the between-session term pooled from the paired spread of the
  item differences, the generation repeats both sessions measured, and the history; the
  session-wide shift from history; from ten pooled sessions, when its F test leaves room for a
  shift, also the test against the spread of the baseline's session means, the more cautious
  deciding). What a one-session baseline cannot measure is assumed from a
  conservative prior (:data:`pytest_aimeasure.measure.stats.CONSERVATIVE_PRIOR`) unless repeats
  measured it. It is *not comparable* as soon as one of its measured items is, since its mean would
  then mix two rulers; *new* when nothing pairs. Its tolerance is the smallest of its items'.
* History: earlier sessions of the same items under the same ruler *and the same system*. By default
  they are the sessions the baseline pools (``--update-baseline`` pools a session only when the
  ruler is unchanged and the comparison found no real change, so they differ by noise alone). Runs
  from the store in general would not do: a regression that persisted over a few runs would enter
  the history as "noise" and hide itself. A caller may pass other sessions it knows to be alike.
* Each comparable item gets its own verdict (:func:`pytest_aimeasure.measure.stats.item_drifts`).
* The family: every regression hypothesis the session tested (each comparable dimension, each paired
  item) under one gatekeeping procedure at the one-sided level ``alpha / 2``
  (:mod:`pytest_aimeasure.compare.family`): dimensions first, with most of the level; items with
  the rest, and with their dimension's once it is rejected. A dimension of one item is the same test
  as that item: counted once, sharing its verdict. Improvements are not corrected; they cannot fail
  the run. A regression the procedure does not confirm becomes *inconclusive* (``demoted``). Power
  figures use the level each test starts at.
* A dimension whose session-wide shift is assumed (not measured) and whose baseline outputs the
  store holds (``confirmable``) shares its level with a second test against those outputs judged
  again today, run only when the first leaves it suspected (:mod:`pytest_aimeasure.compare.confirm`):
  the family tests it with the two tests' weighted Bonferroni p-value.
* A change is reported once, at the level where it was decided: a dimension that regressed (or
  improved) is one finding, with the items that moved with it as its detail; an item finding only
  when its dimension did not decide.
* Missing entries (in the baseline, not measured) are reported for the whole baseline when
  ``whole_suite``, otherwise only for ``selected_ids`` (items the session selected but that produced
  no measurement); with ``gone_ids`` (the baseline's retention rule: tests that no longer exist) only
  those. A measurement without samples counts as not measured.
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_aimeasure.compare.advice import (
    POOL_ADVISED,
    Design,
    advise,
    drop_text,
    pooled_mde,
    projected_mde,
)
from pytest_aimeasure.compare.confirm import (
    CONFIRM_MAX_SESSIONS,
    CONFIRM_PRIOR,
    CONFIRM_SHARE,
    Confirmation,
    Rejudged,
    combined_p,
    suspected,
)
from pytest_aimeasure.compare.family import Group, item_level_after_dimension, reject, start_levels
from pytest_aimeasure.measure.models import Finding, Fingerprint, Measurement
from pytest_aimeasure.measure.stats import (
    CONSERVATIVE_PRIOR,
    SHARED_MIN_SESSIONS,
    VAR_FLOOR_DEFAULT,
    Drift,
    Generations,
    Prior,
    SessionHistory,
    dimension_stats,
    drift,
    generations,
    item_drifts,
    session_history,
)
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile

Verdict = Literal["new", "not_comparable", "missing", "regressed", "improved", "stable", "inconclusive"]

History = Sequence[Mapping[str, Sequence[int]]]
"""Earlier sessions, oldest first, each mapping item id → that session's scores of the item, all of
the same system under the same ruler as this session's measurement of the item."""


def baseline_history(entries: Mapping[str, BaselineEntry]) -> list[dict[str, list[int]]]:
    """The sessions the baseline pools, as history: an entry's k-th newest session goes into the
    k-th newest history session (items pooled by the same updates line up)."""
    depth = max((e.pooled for e in entries.values()), default=1)
    if depth < 2:
        return []
    sessions: list[dict[str, list[int]]] = [{} for _ in range(depth)]
    for item_id, entry in entries.items():
        for back, scores in enumerate(reversed(entry.session_scores()), start=1):
            sessions[depth - back][item_id] = scores
    return sessions


REBASELINE = "pytest --ai-judge --update-baseline"
ALPHA = 0.02
"""Twice the family-wise rate of false regressions a session may claim: a session fails at most 1% of
unchanged runs (one-sided level alpha / 2). A drop alone is "regressed" at the 95% CI; the family
confirms it at this level."""
_FINGERPRINT_FIELDS = list(Fingerprint.model_fields)


class _DriftFields(BaseModel):
    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    verdict: Verdict
    baseline_mean: float | None = None
    now_mean: float | None = None
    now_ci: tuple[float, float] | None = None
    delta: float | None = None
    delta_ci: tuple[float, float] | None = Field(default=None, description="95% CI of delta")
    delta_ci90: tuple[float, float] | None = Field(default=None, description="90% CI (the TOST interval)")
    se: float | None = None
    df: float | None = None
    se_source: Literal["within", "paired", "repeats", "history", "prior", "sessions"] | None = Field(
        default=None,
        description="the estimate that set se: the within-sample term, or the between-session term "
        "and where most of its degrees of freedom came from (paired spread, repeats, history, prior), "
        "or the spread of the baseline's session means (sessions: a shift may move whole sessions)",
    )
    shared_source: Literal["history", "prior"] | None = Field(
        default=None, description="where the session-wide shift in se came from (None: not added)"
    )
    mde: float | None = Field(default=None, description="true drop called regressed 80% of the time")
    power: float | None = Field(default=None, description="P(regressed | a true drop of the tolerance)")
    level: float | None = Field(default=None, description="one-sided level the test starts at")
    underpowered: bool | None = None
    tolerance: float | None = None
    changed_fields: list[str] = Field(default_factory=list)
    p_value: float | None = Field(default=None, description="one-sided p of the regression test")
    rejected: bool | None = Field(
        default=None, description="the family's procedure confirms a drop (None: not tested)"
    )
    demoted: bool = Field(default=False, description="regressed alone, inconclusive after the family")


class ItemComparison(_DriftFields):
    item_id: str
    dimension: str
    nodeid: str
    compared_on: Literal["standing_judge"] | None = Field(
        default=None,
        description="escalated in one session only: compared on the standing judge's scores both hold",
    )
    baseline_n: int | None = None
    baseline_sessions: int | None = Field(default=None, description="sessions the baseline entry pools")
    now_n: int | None = None


class DimensionComparison(_DriftFields):
    dimension: str
    m: int = Field(default=0, description="paired (comparable) items the drift is computed over")
    history_sessions: int = Field(default=0, description="earlier sessions the between-session variance uses")
    baseline_sessions: int | None = Field(
        default=None, description="sessions the baseline holds for the paired items (the fewest)"
    )
    advice: str | None = Field(
        default=None, description="what it can detect and what would let it detect more (power)"
    )
    mde_pooled: float | None = Field(
        default=None, description="about the MDE a baseline pooled from POOL_ADVISED sessions would give"
    )
    items_new: list[str] = Field(default_factory=list)
    items_not_comparable: list[str] = Field(default_factory=list)
    confirmation: Confirmation | None = Field(
        default=None,
        description="the second test, against the baseline's outputs judged again today (None: not planned)",
    )


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    items: dict[str, ItemComparison] = Field(default_factory=dict)
    dimensions: dict[str, DimensionComparison] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    alpha: float = ALPHA
    family: int = Field(default=0, description="regression hypotheses the gatekeeping procedure covered")
    baseline_sessions: int | None = Field(
        default=None, description="sessions the baseline holds for the compared items (the fewest)"
    )
    baseline_note: str | None = Field(
        default=None, description="how many sessions the baseline holds, and what pooling would buy"
    )

    @property
    def has_regressions(self) -> bool:
        return any(c.verdict == "regressed" for c in (*self.items.values(), *self.dimensions.values()))

    @property
    def has_not_comparable(self) -> bool:
        return any(c.verdict == "not_comparable" for c in (*self.items.values(), *self.dimensions.values()))

    def suspected(self) -> list[str]:
        """Dimensions whose planned second test is worth running and has not run
        (:mod:`pytest_aimeasure.compare.confirm`)."""
        return [
            name
            for name, d in self.dimensions.items()
            if d.confirmation is not None
            and not d.confirmation.ran
            and suspected(d.delta, d.tolerance, d.verdict)
        ]

    def moved(self) -> set[str]:
        """Item ids that changed for real (the item or its dimension regressed or improved): a baseline
        update replaces their entries instead of pooling across sessions."""
        dims = {d for d, c in self.dimensions.items() if c.verdict in ("regressed", "improved")}
        return {
            i
            for i, c in self.items.items()
            if c.verdict in ("regressed", "improved") or (c.dimension in dims and c.verdict != "missing")
        }


# --------------------------------------------------------------------------------------------------


def _r(x: float) -> float:
    return round(x, 4)


def _pair(lo_hi: tuple[float, float]) -> list[float]:
    # A list, as JSON will give it back: findings must survive the session-results round trip.
    return [_r(lo_hi[0]), _r(lo_hi[1])]


def _drift_fields(result: Drift) -> dict[str, Any]:
    return {
        "verdict": result.verdict,
        "delta": result.delta,
        "delta_ci": result.ci95,
        "delta_ci90": result.ci90,
        "se": result.se,
        "df": result.df,
        "se_source": result.se_source,
        "shared_source": result.shared_source,
        "mde": result.mde,
        "power": result.power,
        "level": result.level,
        "underpowered": result.underpowered,
        "tolerance": result.tolerance,
        "p_value": result.p_value,
    }


def _ordered_fields(fields: Collection[str]) -> list[str]:
    return [name for name in _FINGERPRINT_FIELDS if name in fields]


def _fingerprint_change(fields: Sequence[str], old: Fingerprint, new: Fingerprint) -> dict[str, Any]:
    return {name: {"baseline": getattr(old, name), "now": getattr(new, name)} for name in fields}


def _history_of(ids: Sequence[str], history: History) -> SessionHistory | None:
    rows = [[session.get(i) for i in ids] for session in history]
    return session_history(rows) if rows else None


def _on_shared_ruler(
    entries: dict[str, BaselineEntry], measured: dict[str, Measurement]
) -> tuple[set[str], set[str]]:
    """Items escalated in one session only, compared on the judge both sessions hold: the standing one.

    An escalated measurement (and an escalated baseline entry) keeps the standing judge's scores next
    to the stronger judge's. When the baseline entry was measured by today's standing judge, or holds
    standing scores under today's ruler, the two are paired on the standing judge: one ruler, so the
    difference is a drift. Swaps ``entries`` / ``measured`` to those views in place; anything else
    with differing fingerprints stays not comparable. Returns (the items swapped, the items whose
    fingerprints still differ): each pair's fingerprints are compared once, here."""
    swapped: set[str] = set()
    differing: set[str] = set()
    for item_id, m in measured.items():
        entry = entries.get(item_id)
        if entry is None or entry.fingerprint == m.fingerprint:
            continue
        if m.escalation is not None and m.escalation.standing.fingerprint == entry.fingerprint:
            measured[item_id] = m.escalation.standing  # escalated now, not in the baseline session
            swapped.add(item_id)
        elif entry.standing is not None and entry.standing.fingerprint == m.fingerprint:
            entries[item_id] = entry.on_standing_judge()  # escalated in the baseline session, not now
            swapped.add(item_id)
        else:
            differing.add(item_id)
    return swapped, differing


def _generation_groups(m: Measurement) -> list[list[int]]:
    """A measurement's scores by generation repeat (one group without repeats)."""
    groups: dict[int, list[int]] = {}
    for s in m.samples:
        groups.setdefault(s.repeat or 0, []).append(s.score)
    return [groups[k] for k in sorted(groups)]


@dataclass
class _Pairing:
    """The session's measurements set against the baseline's entries, item by item."""

    entries: dict[str, BaselineEntry]
    measured: dict[str, Measurement]
    items: dict[str, ItemComparison] = field(default_factory=dict)
    fingerprint_changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_dimension: dict[str, list[str]] = field(default_factory=dict)
    paired: dict[str, list[str]] = field(default_factory=dict)
    commons: dict[str, dict[str, Any]] = field(default_factory=dict)

    def not_comparable_dimensions(self) -> set[str]:
        return {c.dimension for c in self.items.values() if c.verdict == "not_comparable"}


def _pair_items(baseline: BaselineFile | None, measurements: Sequence[Measurement]) -> _Pairing:
    """Each measured item: new, not comparable, or paired with its entry (``commons`` holds the
    fields its comparison will carry)."""
    pairing = _Pairing(
        entries=dict(baseline.entries) if baseline is not None else {},
        measured={m.item_id: m for m in measurements if m.samples},
    )
    on_standing, differing = _on_shared_ruler(pairing.entries, pairing.measured)
    for item_id, m in sorted(pairing.measured.items()):
        pairing.by_dimension.setdefault(m.dimension, []).append(item_id)
        common: dict[str, Any] = {
            "item_id": item_id,
            "dimension": m.dimension,
            "nodeid": m.nodeid,
            "now_mean": m.mean,
            "now_ci": (m.ci_low, m.ci_high),
            "now_n": len(m.samples),
        }
        if item_id in on_standing:
            common["compared_on"] = "standing_judge"
        entry = pairing.entries.get(item_id)
        if entry is None:
            pairing.items[item_id] = ItemComparison(verdict="new", **common)
            continue
        common |= {"baseline_mean": entry.mean, "baseline_n": entry.n, "baseline_sessions": entry.pooled}
        # Only where the fingerprints differ: differences() dumps both models, too slow to run on
        # every one of 10,000 items.
        changed = entry.fingerprint.differences(m.fingerprint) if item_id in differing else []
        if changed:
            pairing.items[item_id] = ItemComparison(
                verdict="not_comparable", changed_fields=changed, **common
            )
            pairing.fingerprint_changes[item_id] = _fingerprint_change(
                changed, entry.fingerprint, m.fingerprint
            )
            continue
        pairing.paired.setdefault(m.dimension, []).append(item_id)
        pairing.commons[item_id] = common
    return pairing


def _family_shape(pairing: _Pairing) -> list[Group]:
    """The family's groups, known before any test so that every power figure can use its level: a
    comparable dimension of two or more items is a dimension test and its items; of one item, one
    test; the paired items of a dimension that is not comparable, item tests only."""
    broken = pairing.not_comparable_dimensions()
    groups = []
    for name, ids in sorted(pairing.paired.items()):
        if name in broken:
            groups.append(Group(name, None, dict.fromkeys(ids, 1.0)))
        else:
            groups.append(Group(name, 1.0, dict.fromkeys(ids, 1.0) if len(ids) > 1 else {}))
    return groups


@dataclass(frozen=True)
class _Rule:
    """What every test of the session shares."""

    var_floor: float
    var_floors: Mapping[str, float]
    level: float
    """The family's one-sided level, alpha / 2."""
    history: History | None
    prior: Prior | None
    confirmable: Collection[str] = ()
    rejudged: Rejudged | None = None


@dataclass
class _Tested:
    """One dimension's tests: its comparison, its items' drifts, its own drift (two or more items),
    and the p-value the family tests it with (None: its own drift's)."""

    comparison: DimensionComparison
    items: dict[str, Drift] = field(default_factory=dict)
    own: Drift | None = None
    p_value: float | None = None
    second: Drift | None = None


def _levels(groups: Sequence[Group], name: str, level: float) -> tuple[float, float]:
    """(the dimension test's, an item test's) starting level in ``name``'s group."""
    group = next(g for g in groups if g.name == name)
    start = start_levels(groups, level)
    if group.dimension_p is None:
        return level, start[("items", name)] / len(group.item_ps)
    dimension = start[("dimension", name)]
    if not group.item_ps:
        return dimension, dimension
    return dimension, item_level_after_dimension(groups, name, level)


def _generations(entries: Sequence[BaselineEntry], now: Sequence[Measurement]) -> list[Generations] | None:
    """Each item's generation repeats in the baseline and now; None when no item has any."""
    if all(e.generations is None for e in entries) and not any(s.repeat for m in now for s in m.samples):
        return None  # (every session one group: no df) without building each item's groups
    gens = [
        generations(e.session_generations(), _generation_groups(m)) for e, m in zip(entries, now, strict=True)
    ]
    return gens if any(g.df for g in gens) else None


def _unpaired(name: str, pairing: _Pairing, common: dict[str, Any], floor: float) -> DimensionComparison:
    """A dimension's comparison before its paired items are tested: not comparable when one of its
    items is, else new (replaced by the drift when items pair)."""
    members = [pairing.items[i] for i in pairing.by_dimension[name] if i in pairing.items]
    bad = [c for c in members if c.verdict == "not_comparable"]
    if bad:
        fields = _ordered_fields({f for c in bad for f in c.changed_fields})
        ids = [c.item_id for c in bad]
        return DimensionComparison(
            verdict="not_comparable", changed_fields=fields, items_not_comparable=ids, **common
        )
    new = [pairing.measured[c.item_id].scores for c in members if c.verdict == "new"]
    if not new:
        return DimensionComparison(verdict="new", **common)
    now = dimension_stats(new, var_floor=floor)
    return DimensionComparison(verdict="new", now_mean=now.mean, now_ci=(now.ci_low, now.ci_high), **common)


def _test_dimension(name: str, pairing: _Pairing, rule: _Rule, groups: Sequence[Group]) -> _Tested:
    floor = rule.var_floors.get(name, rule.var_floor)  # a calibrated dimension's measured noise
    paired = pairing.paired.get(name, [])
    entries = [pairing.entries[i] for i in paired]
    measured = [pairing.measured[i] for i in paired]
    # Only the paired items' sessions: the session also compares one item at a time.
    sessions_of = (
        rule.history
        if rule.history is not None
        else baseline_history(dict(zip(paired, entries, strict=True)))
    )
    past = _history_of(paired, sessions_of) if paired and sessions_of else None
    new_ids = [
        i for i in pairing.by_dimension[name] if i in pairing.items and pairing.items[i].verdict == "new"
    ]
    common: dict[str, Any] = {
        "dimension": name,
        "m": len(paired),
        "items_new": new_ids,
        "history_sessions": past.sessions if past is not None else 0,
    }
    tested = _Tested(_unpaired(name, pairing, common, floor))
    if not paired:
        return tested
    dimension_level, item_level = _levels(groups, name, rule.level)
    gens = _generations(entries, measured)
    args: dict[str, Any] = {
        "var_floor": floor,
        "base_sessions": [e.pooled for e in entries],
        "history": past,
        "generations": gens,
        "prior": rule.prior,
    }
    base_scores, new_scores = [e.scores for e in entries], [m.scores for m in measured]
    tolerances = [m.tolerance for m in measured]
    results = item_drifts(base_scores, new_scores, tolerances=tolerances, level=item_level, **args)
    tested.items = dict(zip(paired, results, strict=True))
    if tested.comparison.verdict == "not_comparable":
        return tested
    own = results[0]  # one item: the same test as the item (item_drifts used drift())
    if len(paired) > 1:
        own = tested.own = drift(
            base_scores, new_scores, tolerance=min(tolerances), level=dimension_level, **args
        )
    confirmation = None
    if name in rule.confirmable and _shift_held(own, entries):
        # The shift was assumed or measured with few df, and the store holds the baseline's outputs:
        # the level is shared with a second test against those outputs judged again today.
        own = drift(
            base_scores,
            new_scores,
            tolerance=min(tolerances),
            level=dimension_level * (1.0 - CONFIRM_SHARE),
            **args,
        )
        if len(paired) > 1:
            tested.own = own
        confirmation = _second_test(tested, own, paired, new_scores, measured, rule, args, dimension_level)
    design = Design(
        m=len(paired),
        n=sum(len(m.samples) for m in measured) / len(measured),
        k=sum(g.new for g in gens) / len(gens) if gens else 1.0,
        sessions=min(e.pooled for e in entries),
        confirm_level=confirmation.level if confirmation is not None else None,
    )
    now = dimension_stats(new_scores, var_floor=floor)
    tested.comparison = DimensionComparison(
        baseline_mean=own.base_mean,
        now_mean=own.new_mean,
        now_ci=(now.ci_low, now.ci_high),
        baseline_sessions=design.sessions,
        advice=advise(own, design),
        mde_pooled=pooled_mde(own, design) if design.sessions < POOL_ADVISED else None,
        confirmation=confirmation,
        **common,
        **(_drift_fields(own) | ({"mde": projected_mde(own, design)} if confirmation is not None else {})),
    )
    return tested


def _shift_held(first: Drift, entries: Sequence[BaselineEntry]) -> bool:
    """The rule holds a session-wide shift it assumed or measured from at most CONFIRM_MAX_SESSIONS
    pooled sessions: where a second test is worth its share of the level."""
    return first.shared_source is not None and min(e.pooled for e in entries) <= CONFIRM_MAX_SESSIONS


def _second_test(
    tested: _Tested,
    first: Drift,
    paired: Sequence[str],
    new_scores: Sequence[Sequence[int]],
    measured: Sequence[Measurement],
    rule: _Rule,
    args: Mapping[str, Any],
    dimension_level: float,
) -> Confirmation:
    """A confirmable dimension's second test, at its share of the level, when the baseline's outputs
    of every paired item were judged again today (``rule.rejudged``; not run otherwise), and the
    p-value the family tests the dimension with: both tests' combined (``first`` at the rest)."""
    level = dimension_level * CONFIRM_SHARE
    tested.p_value = combined_p(first.p_value, None)
    rejudged = rule.rejudged
    again = [rejudged.entries.get(i) for i in paired] if rejudged is not None else []
    if rejudged is None or any(e is None for e in again):
        return Confirmation(level=level)
    entries = [e for e in again if e is not None]
    history = args["history"]
    if min(e.pooled for e in entries) >= SHARED_MIN_SESSIONS:
        # Every pooled session judged today: their spread holds no judge-side shift, a
        # generator-side one it does (weighed against a prior of none, as three to nine sessions
        # weigh it: from ten the session-level test's 9 df cost more detection than they hold).
        rows = baseline_history(dict(zip(paired, entries, strict=True)))
        history = _history_of(paired, rows) if rows else None
    second = drift(
        [e.scores for e in entries],
        new_scores,
        tolerance=first.tolerance,
        var_floor=args["var_floor"],
        base_sessions=[e.pooled for e in entries],
        history=history,
        generations=_generations(entries, measured),
        prior=CONFIRM_PRIOR,
        level=level,
        session_test=False,
    )
    tested.second = second
    tested.p_value = combined_p(first.p_value, second.p_value)
    return Confirmation.of(level, second, rejudged.calls.get(measured[0].dimension, 0))


def _apply_family(
    pairing: _Pairing, tested: Mapping[str, _Tested], shape: Sequence[Group], level: float
) -> None:
    """Run the gatekeeping procedure over the session's regression tests; a regression it does not
    confirm becomes inconclusive (demoted)."""
    groups = []
    for g in shape:
        t = tested[g.name]
        own = t.own if t.own is not None else next(iter(t.items.values()))
        item_ps = {i: t.items[i].p_value for i in g.item_ps}
        p = t.p_value if t.p_value is not None else own.p_value
        groups.append(Group(g.name, p if g.dimension_p is not None else None, item_ps))
    rejected = reject(groups, level)
    for g in groups:
        decided: list[_DriftFields] = []
        if g.dimension_p is not None:
            dimension = tested[g.name].comparison
            dimension.rejected = g.name in rejected.dimensions
            _confirm(dimension, tested[g.name].second)
            decided.append(dimension)
            if not g.item_ps:  # one item: the same test
                (only,) = tested[g.name].items
                pairing.items[only].rejected = dimension.rejected
                decided.append(pairing.items[only])
        for item_id in g.item_ps:
            pairing.items[item_id].rejected = item_id in rejected.items
            decided.append(pairing.items[item_id])
        for c in decided:
            if c.verdict == "regressed" and not c.rejected:
                c.verdict = "inconclusive"
                c.demoted = True


def _confirm(dimension: DimensionComparison, second: Drift | None) -> None:
    """A drop the second test found (its own verdict regressed) and the family rejected is the
    dimension's regression, whatever the first test's verdict said."""
    c = dimension.confirmation
    if c is None or second is None or not dimension.rejected or second.verdict != "regressed":
        return
    dimension.confirmation = c.model_copy(update={"confirmed": True})
    dimension.verdict = "regressed"


def _missing(
    pairing: _Pairing,
    whole_suite: bool,
    selected_ids: Collection[str] | None,
    gone_ids: Collection[str] | None,
) -> None:
    for item_id in sorted(pairing.entries):
        if item_id in pairing.measured:
            continue
        if not (whole_suite or (selected_ids is not None and item_id in selected_ids)):
            continue
        if gone_ids is not None and item_id not in gone_ids:
            continue
        entry = pairing.entries[item_id]
        pairing.items[item_id] = ItemComparison(
            verdict="missing",
            item_id=item_id,
            dimension=entry.dimension,
            nodeid=entry.nodeid,
            baseline_mean=entry.mean,
            baseline_n=entry.n,
            baseline_sessions=entry.pooled,
        )


def _baseline_note(dimensions: Mapping[str, DimensionComparison]) -> str | None:
    """'the baseline holds 1 session; pooled from 5 (...) 'tone' would detect a drop of about 0.62
    instead of 0.95'; None when no dimension compared."""
    compared = [d for d in dimensions.values() if d.baseline_sessions is not None]
    if not compared:
        return None
    fewest = min(d.baseline_sessions or 0 for d in compared)
    note = f"the baseline holds {fewest} session{'' if fewest == 1 else 's'}"
    gains = [
        f"{d.dimension!r} {drop_text(d.mde)} → {drop_text(d.mde_pooled)}"
        for d in compared
        if d.mde is not None and d.mde_pooled is not None and d.mde_pooled < d.mde - 0.01
    ]
    if gains:
        note += (
            f"; pooled from {POOL_ADVISED} sessions (--update-baseline on unchanged runs) it would "
            f"detect smaller drops (80% of the time, about): {', '.join(gains)}"
        )
    return note


def compare(
    baseline: BaselineFile | None,
    measurements: Sequence[Measurement],
    *,
    whole_suite: bool,
    selected_ids: Collection[str] | None = None,
    gone_ids: Collection[str] | None = None,
    var_floor: float = VAR_FLOOR_DEFAULT,
    alpha: float = ALPHA,
    var_floors: Mapping[str, float] | None = None,
    history: History | None = None,
    prior: Prior | None = CONSERVATIVE_PRIOR,
    confirmable: Collection[str] = (),
    rejudged: Rejudged | None = None,
) -> Comparison:
    """Compare the session's measurements with the baseline; see the module docstring for the rules.
    ``var_floors``: a calibrated dimension's measured noise floor instead of ``var_floor``.
    ``history`` None: the sessions the baseline pools (:func:`baseline_history`). ``prior``: what a
    one-session baseline assumes about between-session movement (None: nothing). ``confirmable``:
    dimensions whose baseline outputs the store holds, each given a second test where the shift is
    assumed; ``rejudged``: those outputs judged again today, for the dimensions
    :meth:`Comparison.suspected` named (:mod:`pytest_aimeasure.compare.confirm`)."""
    # Tens of thousands of small objects are made here while the session's whole heap (every
    # measurement, sample and rationale) is alive: the cyclic collector would rescan that heap over
    # and over, which cost more than the comparison itself at 10,000 items. Nothing made here forms
    # a cycle that needs collecting before the function returns.
    paused = gc.isenabled()
    gc.disable()
    try:
        pairing = _pair_items(baseline, measurements)
        rule = _Rule(var_floor, var_floors or {}, alpha / 2, history, prior, frozenset(confirmable), rejudged)
        shape = _family_shape(pairing)
        tested = {name: _test_dimension(name, pairing, rule, shape) for name in sorted(pairing.by_dimension)}
        for t in tested.values():
            for item_id, result in t.items.items():
                pairing.items[item_id] = ItemComparison(**pairing.commons[item_id], **_drift_fields(result))
        _apply_family(pairing, tested, shape, rule.level)
        _missing(pairing, whole_suite, selected_ids, gone_ids)
        dimensions = {name: t.comparison for name, t in tested.items()}
        family = sum((g.dimension_p is not None) + len(g.item_ps) for g in shape)
        findings = _findings(pairing.items, dimensions, pairing.fingerprint_changes, whole_suite, family)
        sessions = [d.baseline_sessions for d in dimensions.values() if d.baseline_sessions is not None]
        return Comparison(
            baseline_note=_baseline_note(dimensions),
            items=pairing.items,
            dimensions=dimensions,
            findings=findings,
            alpha=alpha,
            family=family,
            baseline_sessions=min(sessions, default=None),
        )
    finally:
        if paused:
            gc.enable()


# --------------------------------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------------------------------


def _numbers(c: _DriftFields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if c.baseline_mean is not None:
        out["baseline_mean"] = _r(c.baseline_mean)
    if c.now_mean is not None:
        out["now_mean"] = _r(c.now_mean)
    if c.now_ci is not None:
        out["now_ci"] = _pair(c.now_ci)
    if c.delta is not None and c.delta_ci is not None and c.delta_ci90 is not None:
        out |= {"delta": _r(c.delta), "delta_ci": _pair(c.delta_ci), "delta_ci90": _pair(c.delta_ci90)}
    if c.mde is not None and c.power is not None:
        out |= {
            "mde": _r(c.mde),
            "power": _r(c.power),
            "underpowered": c.underpowered,
            "tolerance": c.tolerance,
            "se_source": c.se_source,
        }
    if c.p_value is not None:
        out |= {"p_value": c.p_value, "rejected": c.rejected}
    return out


def _change_text(c: _DriftFields) -> str:
    """'3.67 → 2.33 ± 0.45 (Δ −1.33, 95% CI [−2.1, −0.6], tolerance 0.5)'."""
    assert c.baseline_mean is not None and c.now_mean is not None and c.now_ci is not None
    assert c.delta is not None and c.delta_ci is not None
    half = (c.now_ci[1] - c.now_ci[0]) / 2
    return (
        f"{c.baseline_mean:.2f} → {c.now_mean:.2f} ± {half:.2f} "
        f"(Δ {c.delta:+.2f}, 95% CI [{c.delta_ci[0]:+.2f}, {c.delta_ci[1]:+.2f}], tolerance {c.tolerance:g})"
    )


def _moved_items(items: Sequence[ItemComparison], verdict: str) -> dict[str, dict[str, Any]]:
    """A dimension finding's detail: its items that moved the same way, each with its numbers."""
    return {c.item_id: {"verdict": c.verdict, **_numbers(c)} for c in items if c.verdict == verdict}


def _moved_text(moved: Mapping[str, Mapping[str, Any]]) -> str:
    if not moved:
        return ""
    parts = [f"{item_id} Δ {d['delta']:+.2f}" for item_id, d in moved.items()]
    return f"; item(s) that moved with it: {', '.join(parts)}"


def _decided_finding(
    c: _DriftFields, subject: str, nodeid: str | None, moved: Mapping[str, Mapping[str, Any]]
) -> Finding:
    """A regression or an improvement, reported once at the level that decided it."""
    label = f"dimension {subject!r}" if nodeid is None else subject
    detail = _numbers(c) | ({"items": dict(moved)} if moved else {})
    confirmation = c.confirmation if isinstance(c, DimensionComparison) else None
    if confirmation is not None and confirmation.ran:
        detail["confirmation"] = confirmation.model_dump(mode="json")
    if c.verdict == "regressed":
        change = f"regressed: {_change_text(c)}"
        if confirmation is not None and confirmation.confirmed:
            change = (
                f"regressed, confirmed by judging the baseline's outputs again today: {confirmation.text()}; "
                f"against the scores the baseline recorded: {_change_text(c)}"
            )
        return Finding(
            kind="regressed",
            severity="fail",
            subject=subject,
            nodeid=nodeid,
            message=f"{label} {change}{_moved_text(moved)}",
            detail=detail,
        )
    return Finding(
        kind="improved",
        severity="warn",
        subject=subject,
        nodeid=nodeid,
        message=(
            f"{label} improved: {_change_text(c)}{_moved_text(moved)}; the baseline is stale, "
            f"re-baseline: {REBASELINE}"
        ),
        detail=detail,
    )


def _open_finding(
    c: _DriftFields, subject: str, nodeid: str | None, family: int, advice: str | None
) -> Finding | None:
    """An undecided change worth a look: a drop the family did not confirm, or a dimension that moved
    by the tolerance without the evidence to call it. Quiet when nothing moved."""
    assert c.delta is not None and c.tolerance is not None
    if not c.demoted and (nodeid is not None or abs(c.delta) < c.tolerance - 1e-9):
        return None  # one item's "can't tell" is its normal state; a dimension that did not move is quiet
    label = f"dimension {subject!r}" if nodeid is None else subject
    detail = _numbers(c)
    confirmation = c.confirmation if isinstance(c, DimensionComparison) else None
    checked = ""
    if confirmation is not None and confirmation.ran:
        detail["confirmation"] = confirmation.model_dump(mode="json")
        checked = f"; the baseline's outputs judged again today: {confirmation.text()}, no drop confirmed"
    if c.demoted:
        detail["family"] = family
        return Finding(
            kind="inconclusive",
            severity="warn",
            subject=subject,
            nodeid=nodeid,
            message=(
                f"{label} looks lower, {_change_text(c)}, but the drop is not confirmed by the "
                f"family-wise correction over the {family} regression tests of this session "
                f"(one-sided p = {c.p_value:.2g}){checked}; not failing the run"
            ),
            detail=detail,
        )
    kind: Literal["underpowered", "inconclusive"] = "underpowered" if c.underpowered else "inconclusive"
    return Finding(
        kind=kind,
        severity="warn" if c.underpowered else "info",
        subject=subject,
        nodeid=nodeid,
        message=f"{label} inconclusive: {_change_text(c)}{checked}; it {advice or 'cannot tell'}",
        detail=detail,
    )


def _dimension_findings(
    name: str,
    d: DimensionComparison,
    members: Sequence[ItemComparison],
    fingerprint_changes: dict[str, dict[str, Any]],
    family: int,
) -> list[Finding]:
    findings: list[Finding] = []
    if d.verdict == "not_comparable":
        findings.append(
            Finding(
                kind="not_comparable",
                severity="fail",
                subject=name,
                message=(
                    f"dimension {name!r}: the judge's fingerprint changed "
                    f"({', '.join(d.changed_fields)}) for {len(d.items_not_comparable)} item(s); "
                    f"not comparable, re-baseline: {REBASELINE}"
                ),
                detail={
                    "changed_fields": d.changed_fields,
                    "items": {i: fingerprint_changes[i] for i in d.items_not_comparable},
                },
            )
        )
    elif d.items_new:
        findings.append(
            Finding(
                kind="new",
                severity="info",
                subject=name,
                message=(
                    f"dimension {name!r}: {len(d.items_new)} item(s) have no baseline entry; "
                    f"record them with {REBASELINE}"
                ),
                detail={"items": d.items_new},
            )
        )
    if d.verdict in ("regressed", "improved"):
        findings.append(_decided_finding(d, name, None, _moved_items(members, d.verdict)))
    elif d.verdict == "inconclusive":
        finding = _open_finding(d, name, None, family, d.advice)
        if finding is not None:
            findings.append(finding)
    return findings


def _missing_finding(item_id: str, c: ItemComparison, whole_suite: bool) -> Finding:
    scope = "the whole suite ran" if whole_suite else "it was selected"
    return Finding(
        kind="missing",
        severity="warn",
        subject=item_id,
        nodeid=c.nodeid,
        message=(
            f"{item_id}: in the baseline but not measured although {scope}; if the test was "
            f"removed or renamed, re-baseline the whole suite to drop its entry: {REBASELINE}"
        ),
        detail={"baseline_mean": c.baseline_mean},
    )


def _findings(
    items: dict[str, ItemComparison],
    dimensions: dict[str, DimensionComparison],
    fingerprint_changes: dict[str, dict[str, Any]],
    whole_suite: bool,
    family: int,
) -> list[Finding]:
    members: dict[str, list[ItemComparison]] = {}
    for c in items.values():
        members.setdefault(c.dimension, []).append(c)
    findings: list[Finding] = []
    for name, d in dimensions.items():
        findings += _dimension_findings(name, d, members.get(name, []), fingerprint_changes, family)
    for item_id, c in items.items():
        if c.verdict == "missing":
            findings.append(_missing_finding(item_id, c, whole_suite))
            continue
        above = dimensions.get(c.dimension)
        if above is not None and (
            above.verdict in ("regressed", "improved") or (above.m == 1 and above.delta is not None)
        ):
            continue  # decided at the dimension (or the same test): its finding holds the item
        if c.verdict in ("regressed", "improved"):
            findings.append(_decided_finding(c, item_id, c.nodeid, {}))
        elif c.verdict == "inconclusive" and c.delta is not None:
            finding = _open_finding(c, item_id, c.nodeid, family, None)
            if finding is not None:
                findings.append(finding)
    return findings
