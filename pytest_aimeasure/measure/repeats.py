"""Generation repeats: K outputs of one generator for one item, counted by gates and pooled by the judge.

One green run on a non-deterministic generator is not evidence. ``aimeasure_artifact(key, generate,
repeats=K)`` (and a suite's ``repeats: K``) generates K outputs, each stored under its own key
(``key#r1`` … ``key#rK``). A gate checks every repeat with :func:`each_repeat` and reports
"2/3 valid"; ``judge.score`` judges every repeat that passed its gates N times (K·N calls) and pools
them into one measurement of the item.

The item's error bar is a two-level (one-way random effects) decomposition. With repeat means ȳ_k
(k = 1..K) of N samples each:

- judge noise σ²_judge: the pooled within-repeat sample variance (df Σ(N_k − 1));
- between repeats s²_b: the sample variance of the repeat means; its expectation is
  σ²_gen + σ²_judge/N, so the generation part is σ²_gen = max(0, s²_b − σ²_judge/N);
- the item mean is the mean of the repeat means, with SE = sqrt(max(s²_b, floor) / K) (df K − 1): it
  carries the generation variance. The variance floor (1/12, the rounding variance of one integer
  score) applies to the repeat means too: three repeats a temperature-0 judge scores 3, 3, 3 agree
  by luck as often as not, and s²_b = 0 would claim a precision nobody measured. When the judge's
  own term sqrt(max(σ²_judge, floor)/N/K) is larger it is used, with df Σ(N_k − 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aimeasure.measure.stats import (
    CONSERVATIVE_PRIOR,
    VAR_FLOOR_DEFAULT,
    generations,
    items_interval,
    pooled_within,
    scale_interval,
    t_ppf,
)

if TYPE_CHECKING:
    from pytest_aimeasure.measure.models import Evidence, Measurement, RepeatsChoice

CHOSEN_REPEATS = 3
"""The outputs ``repeats="auto"`` draws where the generator's variance dominates: the count the power
tables of docs/concepts.md measure (a 0.75 drop at m = 5 under a moving generator: 8% caught with
one output per session, 32% with three)."""



# -- statistics (pure) -----------------------------------------------------------------------------
@dataclass(frozen=True)
class RepeatStats:
    """An item's samples grouped by generation repeat, with the two variance parts."""

    k: int
    means: tuple[float, ...]
    mean: float
    """Mean of the repeat means: every repeat counts once."""
    var_between: float
    var_judge: float
    """Pooled within-repeat variance, raw (not floored)."""
    var_generation: float
    se: float
    df: float
    ci_low: float
    ci_high: float
    source: str
    """Which term set the SE: "repeats" (between-repeat spread), "floor" (the variance floor on the
    repeat means) or "judge" (the judge's within-repeat term)."""


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1)


def repeat_stats(
    groups: Sequence[Sequence[float]], *, var_floor: float = VAR_FLOOR_DEFAULT, confidence: float = 0.95
) -> RepeatStats:
    """The two-level decomposition of ``groups`` (one list of judge scores per repeat); see the module
    docstring for the formulas."""
    if not groups or any(not g for g in groups):
        raise ValueError("every repeat needs at least one score")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    k = len(groups)
    means = tuple(math.fsum(g) / len(g) for g in groups)
    mean, var_between = _mean_var(means)
    df_within = sum(len(g) - 1 for g in groups)
    var_judge = math.fsum((len(g) - 1) * _mean_var(g)[1] for g in groups) / df_within if df_within else 0.0
    inv_n = math.fsum(1.0 / len(g) for g in groups) / k
    var_generation = max(0.0, var_between - var_judge * inv_n)
    judge_term = max(var_judge, var_floor) * inv_n
    # A repeat's mean is one draw of the generator scored in integers: repeats that agree by luck
    # (all 3s from a temperature-0 judge) still carry at least the rounding variance of one draw.
    between = max(var_between, var_floor) if k > 1 else 0.0
    if k > 1 and between > judge_term:
        se, df = math.sqrt(between / k), float(k - 1)
        source = "repeats" if var_between >= var_floor else "floor"
    else:
        se, df, source = math.sqrt(judge_term / k), float(max(df_within, 1)), "judge"
    half = t_ppf(0.5 + confidence / 2.0, df) * se
    ci_low, ci_high = scale_interval(mean, half)
    return RepeatStats(
        k=k,
        means=means,
        mean=mean,
        var_between=var_between,
        var_judge=var_judge,
        var_generation=var_generation,
        se=se,
        df=df,
        ci_low=ci_low,
        ci_high=ci_high,
        source=source,
    )


def pool(
    parts: Sequence[tuple[int, Measurement]],
    *,
    generated: int,
    artifact_key: str | None,
    var_floor: float = VAR_FLOOR_DEFAULT,
) -> Measurement:
    """One measurement of an item from its judged repeats (``(repeat index, measurement)``, 0-based):
    every sample kept (tagged with its repeat), the mean over repeats and the interval of
    :func:`repeat_stats`."""
    import hashlib

    from pytest_aimeasure.measure.models import RepeatSummary

    if not parts:
        raise ValueError("no judged repeat to pool")
    first = parts[0][1]
    stats = repeat_stats([m.scores for _, m in parts], var_floor=var_floor, confidence=first.confidence)
    samples = [s.model_copy(update={"repeat": index + 1}) for index, m in parts for s in m.samples]
    _, var_all = _mean_var([float(s.score) for s in samples])
    shas = [m.artifact_sha256 or "" for _, m in parts]
    # Adaptive sampling stopped each repeat on its own: the pooled item reports the least settled one.
    records = [m.adaptive for _, m in parts if m.adaptive is not None]
    adaptive = None
    if records:
        order = ("settled", "agreed", "maximum", "budget")
        adaptive = records[0].model_copy(
            update={
                "stopped": max((r.stopped for r in records), key=order.index),
                "open": sorted({d for r in records for d in r.open}),
            }
        )
    return first.model_copy(
        update={
            "samples": samples,
            "mean": stats.mean,
            "sd": math.sqrt(var_all),
            "n": len(samples),
            "ci_low": stats.ci_low,
            "ci_high": stats.ci_high,
            "artifact_key": artifact_key,
            # The set's identity: another draw of any repeat is another artifact.
            "artifact_sha256": hashlib.sha256("\n".join(shas).encode()).hexdigest(),
            "adaptive": adaptive,
            "repeats": RepeatSummary(
                k=stats.k,
                generated=generated,
                keys=[m.artifact_key for _, m in parts],
                shas=shas if all(shas) else [],
                means=[round(x, 6) for x in stats.means],
                var_between=stats.var_between,
                var_judge=stats.var_judge,
                var_generation=stats.var_generation,
                se=stats.se,
                df=stats.df,
            ),
        }
    )


# -- where to spend: generations or judge samples (repeats="auto") --------------------------------
_EVIDENCE_ORDER: tuple[Evidence, ...] = ("repeats", "sessions", "prior", "unmeasured", "none")
Sessions = Sequence[Sequence[Sequence[float]]]
"""An entry's scores: its pooled sessions, each a list of generation groups (one without repeats)."""


@dataclass(frozen=True)
class EntryHistory:
    """One baseline entry, as ``repeats="auto"`` reads it: its scores and its judge's noise."""

    sessions: Sessions
    var_judge: float
    """The judge's within-output variance on the entry's dimension, pooled over every entry of the
    dimension: a property of the judge, which one item's few samples measure poorly (three samples of
    a judge of sd 0.5 agree by chance often enough to pass for a judge that repeats itself)."""


def histories(entries: Iterable[tuple[str | None, str, Sessions]]) -> dict[str, list[EntryHistory]]:
    """``(artifact key, dimension, sessions)`` of each baseline entry → each artifact key's entries,
    each with its dimension's pooled judge variance. Entries without a key are left out."""
    by_dimension: dict[str, list[Sequence[float]]] = {}
    listed = list(entries)
    for _, dimension, sessions in listed:
        by_dimension.setdefault(dimension, []).extend(g for session in sessions for g in session if g)
    noise = {d: pooled_within(groups, 0.0)[0] for d, groups in by_dimension.items()}
    out: dict[str, list[EntryHistory]] = {}
    for key, dimension, sessions in listed:
        if key is not None:
            out.setdefault(key, []).append(EntryHistory(sessions, noise[dimension]))
    return out


def choose_repeats(
    entries: Sequence[EntryHistory], *, samples: int, updating: bool = False
) -> RepeatsChoice | None:
    """Where an artifact's next measurement should spend: more outputs, or more judge samples of one.

    ``entries``: each baseline entry that judged the artifact (:func:`histories`). ``samples``: the
    judge samples one output gets at least (N, or the minimum of ``auto``). No entry: nothing to
    decide from, so None (the default count), unless the session writes the baseline
    (``updating``): then :data:`CHOSEN_REPEATS` outputs, whose spread measures both parts for every
    later choice (and for the drift rule, which compares later runs with the generator's measured
    movement instead of a prior).

    An output's mean varies by σ²_gen (the generator) + σ²_judge/N (the judge). More judge samples
    shrink only the second part, more outputs both. So the outputs go up (to :data:`CHOSEN_REPEATS`)
    when the generator's part, summed over the artifact's entries, is larger than the judge's; then
    the judge's samples of each output are what ``--judge-samples`` says (``auto`` stops at its
    minimum where the judge repeats itself). Otherwise one output, and ``auto`` adds judge samples.

    σ²_judge is the entry's dimension's pooled within-output variance. σ²_gen is measured from the
    spread of the entry's repeat means within sessions, else of its pooled sessions' means (both minus
    the judge's share, floored at 0). An entry of one session without repeats has not measured it:
    when the judge gives one score every time (σ²_judge = 0), the judge cannot be what moves, and the
    prior (τ², sd 0.5 between sessions) stands for the generator; when the judge varies, the
    unmeasured part counts 0, and the judge's samples go first until a baseline with repeats or pooled
    sessions measures the generator. Where the judge gives one score every time, a measured σ²_gen
    counts at least the rounding variance of one integer score (1/12): so such an artifact always gets
    more outputs, the only thing that can move its scores (a generator that never moves gains
    nothing from ``"auto"``).
    """
    from pytest_aimeasure.measure.models import RepeatsChoice

    if not entries:
        if not updating:
            return None
        return RepeatsChoice(
            repeats=CHOSEN_REPEATS,
            spend="generations",
            var_generation=0.0,
            var_judge=0.0,
            evidence="none",
            entries=0,
        )
    total_gen = total_judge = 0.0
    best = len(_EVIDENCE_ORDER) - 1
    for entry in entries:
        if not any(g for session in entry.sessions for g in session):
            continue
        var_gen, evidence = _generation_part(entry)
        total_gen += var_gen
        total_judge += entry.var_judge / samples
        best = min(best, _EVIDENCE_ORDER.index(evidence))
    more = total_gen > total_judge
    return RepeatsChoice(
        repeats=CHOSEN_REPEATS if more else 1,
        spend="generations" if more else "judge samples",
        var_generation=total_gen,
        var_judge=total_judge,
        evidence=_EVIDENCE_ORDER[best],
        entries=len(entries),
    )


def _generation_part(entry: EntryHistory) -> tuple[float, Evidence]:
    """An entry's σ²_gen and where it came from (see :func:`choose_repeats`)."""
    sessions, var_judge = entry.sessions, entry.var_judge
    groups = [g for session in sessions for g in session if g]
    spread = generations(sessions, [])
    evidence: Evidence
    if spread.df > 0:
        inv_n = math.fsum(1.0 / len(g) for g in groups) / len(groups)
        var_gen, evidence = max(0.0, spread.ss / spread.df - var_judge * inv_n), "repeats"
    elif len(sessions) > 1:
        flat = [f for f in ([x for g in session for x in g] for session in sessions) if f]
        means = [math.fsum(f) / len(f) for f in flat]
        inv_session = math.fsum(1.0 / len(f) for f in flat) / len(flat)
        var_gen, evidence = max(0.0, _mean_var(means)[1] - var_judge * inv_session), "sessions"
    elif var_judge == 0.0:
        var_gen, evidence = CONSERVATIVE_PRIOR.item_var, "prior"
    else:
        var_gen, evidence = 0.0, "unmeasured"
    if var_judge == 0.0:
        # A few integer means agree by luck as often as not (3, 3, 3 from a generator of sd 0.5):
        # an estimate of 0 is not evidence that nothing moves, so it counts the rounding variance.
        var_gen = max(var_gen, VAR_FLOOR_DEFAULT)
    return var_gen, evidence


def choice_summary(measurements: Sequence[Measurement]) -> dict[str, Any]:
    """What ``repeats="auto"`` chose in a session (the JSON's ``generations``; {} when nothing asked):
    artifacts decided, how many got more outputs, the outputs drawn, the judge calls they took (every
    dimension's samples of them) and the evidence behind the choices (artifacts by best evidence)."""
    chosen: dict[str, tuple[RepeatsChoice, list[Measurement]]] = {}
    for m in measurements:
        if m.chosen is not None:
            chosen.setdefault(m.artifact_key or m.item_id, (m.chosen, []))[1].append(m)
    if not chosen:
        return {}
    choices = [c for c, _ in chosen.values()]
    evidence: dict[str, int] = {}
    for c in choices:
        evidence[c.evidence] = evidence.get(c.evidence, 0) + 1
    return {
        "artifacts": len(chosen),
        "more_outputs": sum(1 for c in choices if c.spend == "generations"),
        "outputs": sum(c.repeats for c in choices),
        "calls": sum(len(m.samples) for _, ms in chosen.values() for m in ms),
        "evidence": dict(sorted(evidence.items())),
    }


# -- gate records over repeats ---------------------------------------------------------------------
def gate_counts(extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The :func:`~pytest_aimeasure.measure.artifact.each_repeat` records of one test result
    (``ItemResult.extra``)."""
    value = extra.get("repeats")
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def repeats_interval(measurements: Sequence[Measurement]) -> tuple[float, float, float] | None:
    """A dimension's (mean, low, high) from its items' own intervals when one of them pooled
    generation repeats (the judge samples pooled across items leave out the generation variance), or
    None when none did and the samples' interval stands. Every report of a dimension reads this."""
    if not any(m.repeats is not None for m in measurements):
        return None
    return items_interval([(m.mean, m.ci_low, m.ci_high) for m in measurements])
