"""The one report model: the facts every report shows, computed once from the session's results.

The terminal, Markdown, HTML and JUnit reports take a :class:`SessionReport` and only format it: the
gate counts, the dimension rows, the judges, the new and stable dimensions are computed here, once,
so two reports cannot disagree about them. A live session builds it at its end
(:mod:`pytest_aimeasure.session.conclude`); a stored run or a merge of shards builds it from its
results alone (:meth:`SessionReport.of`), without the live facts (settings, command line).

Nothing in a report changes the model: the renderers are pure functions of it (a test renders every
report and checks the model dumps the same before and after), so no defensive copy is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT
from pytest_aimeasure.report.phases import Phase, phases

if TYPE_CHECKING:
    from pytest_aimeasure.compare.drift import Comparison, DimensionComparison
    from pytest_aimeasure.measure.models import Measurement
    from pytest_aimeasure.report.results import ResultItem, SessionResults

__all__ = ["DimensionRow", "GateCounts", "ReportSettings", "SessionReport", "interval_text"]


def interval_text(mean: float | None, ci: tuple[float, float] | None, missing: str = "-") -> str:
    """'3.20 ± 0.45', or '4.67 [3.10, 5.00]' when the interval was cut to the 1–5 scale (asymmetric:
    a '±' would claim the part off the scale)."""
    if mean is None:
        return missing
    if ci is None:
        return f"{mean:.2f}"
    low, high = ci
    if abs((mean - low) - (high - mean)) > 1e-9:
        return f"{mean:.2f} [{low:.2f}, {high:.2f}]"
    return f"{mean:.2f} ± {(high - low) / 2:.2f}"


@dataclass(frozen=True)
class ReportSettings:
    """The settings' values the reports show (the session's ``Settings`` stays in the session)."""

    model: str | None = None
    samples_text: str = "3 samples"
    """'3 samples', or 'samples auto (3..9, step 2)'."""
    baseline: Path = Path("aimeasure-baseline.json")
    store: Path = Path(".aimeasure")
    judging: bool = True
    update_baseline: bool = False
    var_floor: float = VAR_FLOOR_DEFAULT
    dry_run: bool = False
    rejudge: str | None = None
    resume: str | None = None
    drift: str = "fail"
    batch: bool = False
    attribute: bool = False
    sample_minimum: int = 3
    sample_maximum: int = 3
    default_repeats: int = 1
    """Outputs generated of an artifact that set no repeats (more while writing the baseline)."""


@dataclass(frozen=True)
class GateCounts:
    """Gates checked and failed: gate tests, and the gates suite items run inside themselves."""

    checked: int = 0
    failed: int = 0

    def text(self) -> str:
        return f"{self.checked} gates ({self.failed} failed)"


@dataclass(frozen=True)
class DimensionRow:
    """One dimension as every report's dimension table shows it."""

    name: str
    measured: int
    """Items measured this session."""
    m: int
    """Items the comparison paired (the new ones when none was paired; the measured ones uncompared)."""
    now_mean: float | None
    now_ci: tuple[float, float] | None
    baseline_mean: float | None
    baseline_ci: tuple[float, float] | None
    breaches: int
    floor: float | None
    comparison: DimensionComparison | None

    @property
    def verdict(self) -> str:
        return self.comparison.verdict if self.comparison is not None else "not_compared"


def _gate_counts(items: Sequence[ResultItem]) -> GateCounts:
    gates = [r for r in items if r.kind == "gate"]
    failed = sum(1 for r in gates if r.outcome in ("failed", "error"))
    # Suite items run their gates inside the item: count them too.
    suite_gates = [r.extra["suite"].get("gates") or {} for r in items if "suite" in r.extra]
    checked = len(gates) + sum(int(g.get("checked", 0)) for g in suite_gates)
    failed += sum(len(g.get("failed", [])) for g in suite_gates)
    return GateCounts(checked, failed)


def _measurements(items: Sequence[ResultItem]) -> list[Measurement]:
    return [m for r in items for m in r.measurements]


def _dimension_rows(results: SessionResults) -> tuple[DimensionRow, ...]:
    by_dim: dict[str, list[Measurement]] = {}
    for m in _measurements(results.items):
        by_dim.setdefault(m.dimension, []).append(m)
    rows = []
    for name in sorted(set(by_dim) | set(results.dimensions)):
        ms = by_dim.get(name, [])
        d = results.dimensions.get(name)
        base = results.baseline_dimensions.get(name)
        now_mean = d.now_mean if d is not None and d.now_mean is not None else None
        if now_mean is None and ms:
            now_mean = sum(m.mean for m in ms) / len(ms)
        rows.append(
            DimensionRow(
                name=name,
                measured=len(ms),
                m=(d.m or len(d.items_new)) if d is not None and (d.m or d.items_new) else len(ms),
                now_mean=now_mean,
                now_ci=d.now_ci if d is not None and d.now_mean is not None else None,
                baseline_mean=base.mean if base is not None else (d.baseline_mean if d is not None else None),
                baseline_ci=(base.ci_low, base.ci_high) if base is not None else None,
                breaches=sum(1 for m in ms if m.breached),
                floor=max((m.floor for m in ms), default=None),
                comparison=d,
            )
        )
    return tuple(rows)


def _judges(results: SessionResults, model: str | None) -> tuple[str, ...]:
    """The session's judges: its model, a dimension's own judge (judge=) and escalation models."""
    models = [model] if model else []
    for m in _measurements(results.items):
        for one in (m, m.escalation.standing if m.escalation is not None else None):
            if one is not None and one.judge and one.judge not in models:
                models.append(one.judge)
    return tuple(models)


@dataclass(frozen=True)
class SessionReport:
    """What the session concluded, for the reports: its results and the facts derived from them.

    ``results`` is the ``--aimeasure-json`` model; ``comparison`` the whole comparison with the
    baseline (it also has the items that were not run); ``args`` the pytest command line in today's
    spelling, for the advice that reruns it."""

    results: SessionResults
    comparison: Comparison | None = None
    settings: ReportSettings = field(default_factory=ReportSettings)
    args: tuple[str, ...] = ()
    interrupted: bool = False
    gone: tuple[str, ...] = ()  # baseline entries whose tests no longer exist
    has_baseline: bool = False  # was there a baseline file to compare with
    live: bool = False  # built by the session that ran (settings and args are its own)
    gates: GateCounts = field(init=False)
    dimensions: tuple[DimensionRow, ...] = field(init=False)
    phases: tuple[Phase, ...] = field(init=False)
    judges: tuple[str, ...] = field(init=False)
    new_count: int = field(init=False)
    """Items measured with no baseline entry to compare with."""

    def __post_init__(self) -> None:
        results = self.results
        rows = _dimension_rows(results)
        new = sum(1 for f in results.findings if f.kind == "new")
        if self.comparison is not None:
            new = max(new, sum(1 for c in self.comparison.items.values() if c.verdict == "new"))
        if results.baseline.get("update") is not None:
            new = 0  # this run wrote them into the baseline
        for name, value in (
            ("gates", _gate_counts(results.items)),
            ("dimensions", rows),
            ("phases", tuple(phases(results.items, [r.name for r in rows]))),
            ("judges", _judges(results, self.settings.model or results.judge_model)),
            ("new_count", new),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, results: SessionResults) -> SessionReport:
        """The report of stored results (a run in the store, a merge of shards)."""
        return cls(
            results=results,
            settings=ReportSettings(
                model=results.judge_model,
                baseline=Path(results.baseline.get("path") or "aimeasure-baseline.json"),
                var_floor=results.var_floor,
                drift=results.drift,
            ),
        )

    @property
    def measured(self) -> int:
        return sum(len(r.measurements) for r in self.results.items)

    @property
    def stable(self) -> list[str]:
        """'tone (5 items)' for each stable dimension."""
        return [f"{r.name} ({r.m} items)" for r in self.dimensions if r.verdict == "stable"]

    def row(self, name: str) -> DimensionRow | None:
        return next((r for r in self.dimensions if r.name == name), None)


def as_report(given: SessionReport | SessionResults) -> SessionReport:
    """The report of ``given``: itself, or the report of stored results."""
    return given if isinstance(given, SessionReport) else SessionReport.of(given)
