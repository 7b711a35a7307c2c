"""What the reports read from the run store: a run's session results, and each dimension across runs.

A run that kept its results (``results.json``, written at the session's end) is read as the session
saw them, joined with its items (``items.jsonl``); an older or interrupted run is rebuilt from its
items: measurements, findings and outcomes, without the baseline comparison it never finished.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_aimeasure.measure.models import Fingerprint, Measurement
from pytest_aimeasure.measure.repeats import repeats_interval
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, dimension_stats
from pytest_aimeasure.report.charts import TrendPoint
from pytest_aimeasure.report.results import ResultItem, SessionResults, read_run_results
from pytest_aimeasure.store.runs import Run, RunStore, StoreError

DRIFT_KINDS = frozenset(
    {"regressed", "improved", "inconclusive", "underpowered", "not_comparable", "missing", "new"}
)


def results_of_run(run: Run) -> SessionResults:
    """A stored run's session results: as the session wrote them, else rebuilt from its items."""
    kept = run.path / "results.json"
    items, _ = run.read_items()
    if kept.is_file():
        try:
            return read_run_results(kept, items)
        except ValueError as exc:
            raise StoreError(str(exc), path=kept) from None
    failed = [i for i in items if i.outcome in ("failed", "error")]
    meta = run.meta
    reasons = [f"{len(failed)} test(s) failed (gates, floors or judge errors)"] if failed else []
    if meta.status != "finished":
        reasons.append(f"the run is {meta.status}: it did not reach its end")
    return SessionResults(
        run_id=run.run_id,
        judge_model=meta.judge_model,
        passed=not reasons,
        failed_because=reasons,
        exit_status=1 if reasons else 0,
        items=[ResultItem(**i.model_dump()) for i in items],
        findings=[f for i in items for f in i.findings],
        spend={"calls": meta.judge_calls, "cost_usd": meta.spend_usd},
        started_at=meta.started_at,
        ended_at=meta.ended_at,
    )


@dataclass
class DimensionTrend:
    """One dimension across runs, oldest first (of one suite target, when the items have targets)."""

    dimension: str
    runs: list[str] = field(default_factory=list)
    points: list[TrendPoint] = field(default_factory=list)
    items: list[int] = field(default_factory=list)
    floor: float | None = None
    target: str | None = None


def _measurements(results: SessionResults) -> dict[tuple[str, str | None], list[Measurement]]:
    """A run's measurements per (dimension, suite target): two targets answer the same probes, and a
    line pooling them would move with whichever target drifted and say of neither."""
    out: dict[tuple[str, str | None], list[Measurement]] = {}
    for item in results.items:
        for m in item.measurements:
            if m.samples:
                out.setdefault((m.dimension, item.target), []).append(m)
    return out


def _interval(ms: Sequence[Measurement], var_floor: float) -> tuple[float, float, float]:
    """A run's dimension mean and 95% CI, as its session reported it."""
    pooled = repeats_interval(ms)
    if pooled is not None:
        return pooled
    stats = dimension_stats([[float(s.score) for s in m.samples] for m in ms], var_floor=var_floor)
    return stats.mean, stats.ci_low, stats.ci_high


def series_name(dimension: str, target: str | None) -> str:
    return dimension if target is None else f"{dimension} · {target}"


@dataclass
class _Rulers:
    """The rulers one series has used: a point is marked as a judge change only when the ruler that
    judged most of its items differs from the one at the point before, or when one of its items was
    judged by a ruler the series never used before (an escalation judge's first appearance). An
    escalation judge seen before is the dimension's configured second opinion, not a change."""

    primary: Fingerprint | None = None
    seen: list[Fingerprint] = field(default_factory=list)

    def changes(self, ms: Sequence[Measurement]) -> list[str]:
        rulers = [m.fingerprint.ruler() for m in ms]
        primary = max(rulers, key=rulers.count)  # ties: the first item's, as the session lists them
        fields: set[str] = set()
        if self.primary is not None:
            fields.update(self.primary.differences(primary))
            for ruler in rulers:
                if ruler not in self.seen:
                    fields.update(primary.differences(ruler) or self.primary.differences(ruler))
        self.primary = primary
        self.seen.extend(r for r in dict.fromkeys(rulers) if r not in self.seen)
        return sorted(fields)


def trends(
    runs: Sequence[tuple[str, SessionResults]], *, var_floor: float = VAR_FLOOR_DEFAULT
) -> dict[str, DimensionTrend]:
    """Per dimension (and suite target), one point per run that measured it (``runs`` oldest first):
    the mean of the item means with its 95% CI, and the ruler fields that changed (see _Rulers)."""
    out: dict[str, DimensionTrend] = {}
    rulers: dict[str, _Rulers] = {}
    labels = axis_labels([run_id for run_id, _ in runs])
    for run_id, results in runs:
        for (dimension, target), ms in sorted(_measurements(results).items(), key=lambda kv: str(kv[0])):
            mean, low, high = _interval(ms, var_floor)
            name = series_name(dimension, target)
            ruler = rulers.setdefault(name, _Rulers())
            changed = ruler.changes(ms)
            series = out.setdefault(name, DimensionTrend(dimension, target=target))
            series.runs.append(run_id)
            series.items.append(len(ms))
            series.points.append(
                TrendPoint(
                    label=labels[run_id],
                    mean=mean,
                    ci_low=low,
                    ci_high=high,
                    ruler_changed=changed,
                    judge=ruler.primary.model if ruler.primary is not None else "",
                )
            )
            series.floor = max(m.floor for m in ms)
    return out


def axis_labels(run_ids: Sequence[str]) -> dict[str, str]:
    """What a chart's x axis shows for each run (oldest first): its time, with the date on a second
    line at the first run and wherever the day changes (``14:05``, ``14:05\n12-01``), and seconds
    when another run started in the same minute. The run id's random suffix is left to the table
    under the chart: on the axis it only crowded the labels."""
    stamps = {r: s for r in run_ids if len(s := r.partition("-")[0]) == 16 and s[8] == "T"}
    minutes = Counter(s[:13] for s in stamps.values())
    out: dict[str, str] = {}
    day = None
    for run_id in run_ids:
        stamp = stamps.get(run_id)
        if stamp is None:
            out[run_id] = run_id
            continue
        when = f"{stamp[9:11]}:{stamp[11:13]}" + (f":{stamp[13:15]}" if minutes[stamp[:13]] > 1 else "")
        date = f"{stamp[4:6]}-{stamp[6:8]}"
        out[run_id] = when if date == day else f"{when}\n{date}"
        day = date
    return out


def load_runs(store: RunStore, run_ids: Sequence[str]) -> tuple[list[tuple[str, SessionResults]], list[str]]:
    """The results of ``run_ids`` (resolved ids), oldest first, and the problems met reading them."""
    out: list[tuple[str, SessionResults]] = []
    problems: list[str] = []
    for run_id in run_ids:
        run = store.open_run(run_id)
        try:
            out.append((run_id, results_of_run(run)))
        except StoreError as exc:
            problems.append(str(exc))
        finally:
            run.close()
    out.sort(key=lambda pair: (pair[1].started_at or "", pair[0]))
    return out, problems


def trends_from_store(store: Path, *, upto: str | None = None, limit: int = 30) -> dict[str, DimensionTrend]:
    """Trends over the store's finished runs (at most the newest ``limit``), up to and including ``upto``."""
    run_store = RunStore(store)
    metas, _ = run_store.list_runs()  # newest first
    if upto is not None:
        ids = [m.run_id for m in metas]
        metas = metas[ids.index(upto) :] if upto in ids else metas
    chosen = [m.run_id for m in metas if m.status != "running" or m.run_id == upto][:limit]
    runs, _ = load_runs(run_store, chosen)
    return trends(runs)
