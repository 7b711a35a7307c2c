"""The self-contained HTML report: one file, no script, no network, charts as inline SVG.

Input is frozen data only: the session's :class:`SessionResults` (a live session's, a stored run's, or a
merge of shards), optionally the dimension trends across stored runs
(:func:`pytest_aimeasure.report.trends.trends`) and calibration figures
(``SessionResults.calibration``, or passed in). Everything that comes from outside the plugin (artifact
text, judge rationales, test ids) is escaped by the template engine (Jinja2 autoescape): an artifact
that holds ``<script>`` shows as text.

The page has no JavaScript at all: the per-item samples and rationales sit in ``<details>`` elements
that any browser opens on click, and the page prints as it shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_aimeasure.compare.advice import MAX_DROP
from pytest_aimeasure.measure.version import __version__
from pytest_aimeasure.report import charts
from pytest_aimeasure.report.advice import next_command
from pytest_aimeasure.report.charts import REPORT_EXTRA, DimensionPoint, ReportDependencyError
from pytest_aimeasure.report.markdown import SEVERITY_ORDER
from pytest_aimeasure.report.model import SessionReport, as_report, interval_text
from pytest_aimeasure.report.results import CalibrationFigure, SessionResults
from pytest_aimeasure.report.trends import DimensionTrend
from pytest_aimeasure.store.fileio import atomic_write

EXCERPT_CHARS = 1200


MIN_TREND_POINTS = 2
"""Runs a line needs before the report draws its trend."""


def _environment() -> Any:
    try:
        import jinja2
    except ImportError as exc:
        raise ReportDependencyError(
            f"the HTML report needs Jinja2: pip install '{REPORT_EXTRA}' ({exc})"
        ) from None
    return jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_aimeasure.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower() or "x"


def _clip(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dimension_rows(report: SessionReport) -> list[dict[str, Any]]:
    return [
        {
            "name": row.name,
            "now": row.now_mean,
            "now_ci": row.now_ci,
            "baseline": row.baseline_mean,
            "baseline_ci": row.baseline_ci,
            "delta": d.delta,
            "delta_ci": d.delta_ci,
            "mde": d.mde,
            # (No drop of a mean of 1-5 scores goes past MAX_DROP: "4.44" would read as one.)
            "mde_beyond": d.mde is not None and d.mde > MAX_DROP,
            "m": row.m,
            "verdict": d.verdict,
            "demoted": d.demoted,
            "confirmed": d.confirmation is not None and d.confirmation.confirmed,
            "changed": d.changed_fields,
            "floor": row.floor,
        }
        for row in report.dimensions
        if (d := row.comparison) is not None
    ]


def _items(results: SessionResults) -> list[dict[str, Any]]:
    rows = []
    for item in results.items:
        rows.append(
            {
                "nodeid": item.nodeid,
                "item_id": item.item_id or item.nodeid,
                "kind": item.kind,
                "outcome": item.outcome,
                "verdict": item.verdict,
                "comparison": item.comparison,
                "message": item.message,
                "measurements": item.measurements,
                "target": item.target,
            }
        )
    order = {"error": 0, "failed": 1, "passed": 2, "skipped": 3}
    rows.sort(key=lambda r: (order.get(str(r["outcome"]), 4), str(r["nodeid"])))
    return rows


def _phase_groups(
    report: SessionReport, rows: list[dict[str, Any]]
) -> list[tuple[str | None, str | None, list[dict[str, Any]]]]:
    """(heading, gates text, rows) per phase; one untitled group when no phase is set."""
    if not report.phases:
        return [(None, None, rows)]
    by_name = {r["name"]: r for r in rows}
    return [
        (g.heading, g.gate_text(), [by_name[n] for n in g.dimensions if n in by_name]) for g in report.phases
    ]


def _overview(dimension_rows: list[dict[str, Any]]) -> str | None:
    if not dimension_rows:
        return None
    return charts.baseline_vs_now(
        "dims",
        [
            DimensionPoint(
                dimension=r["name"],
                now_mean=r["now"],
                now_ci=r["now_ci"],
                baseline_mean=r["baseline"],
                baseline_ci=r["baseline_ci"],
                floor=r["floor"],
            )
            for r in dimension_rows
        ],
    )


def _trend_views(trends: Mapping[str, DimensionTrend]) -> list[dict[str, Any]]:
    """A chart per line with two runs or more: a one-point "trend" says nothing, and a first run's
    report would open on a chart per dimension and target that each hold one dot."""
    views = []
    for name, series in sorted(trends.items()):
        if len(series.points) < MIN_TREND_POINTS:
            continue
        chart_id = f"trend-{_slug(name)}"
        views.append(
            {
                "name": name,
                "id": chart_id,
                "svg": charts.trend(chart_id, name, series.points, series.floor),
                "rows": list(zip(series.runs, series.points, series.items, strict=True)),
                "floor": series.floor,
            }
        )
    return views


def _calibration_views(figures: Sequence[CalibrationFigure]) -> list[dict[str, Any]]:
    views = []
    for figure in figures:
        chart_id = f"calibration-{_slug(figure.dimension)}"
        points = [(b.reference, b.judge, b.n) for b in figure.bins]
        views.append(
            {
                "figure": figure,
                "id": chart_id,
                "svg": charts.reliability(chart_id, points, figure.dimension) if points else None,
            }
        )
    return views


def render_html(
    given: SessionReport | SessionResults,
    *,
    trends: Mapping[str, DimensionTrend] | None = None,
    calibration: Sequence[CalibrationFigure] | None = None,
    title: str | None = None,
) -> str:
    """The report as one HTML string."""
    env = _environment()
    report = as_report(given)
    results = report.results
    dimension_rows = _dimension_rows(report)
    overview = _overview(dimension_rows)
    trend_views = _trend_views(trends or {})
    trends_waiting = sum(1 for s in (trends or {}).values() if len(s.points) < MIN_TREND_POINTS)
    calibration_views = _calibration_views(calibration if calibration is not None else results.calibration)
    findings = sorted(results.findings, key=lambda f: SEVERITY_ORDER[f.severity])
    template = env.get_template("report.html.j2")
    return str(
        template.render(
            title=title or f"aimeasure report{' — ' + results.run_id if results.run_id else ''}",
            r=results,
            findings=findings,
            counts={s: sum(1 for f in findings if f.severity == s) for s in SEVERITY_ORDER},
            dimension_rows=dimension_rows,
            dimension_groups=_phase_groups(report, dimension_rows),
            overview=overview,
            trends=trend_views,
            trends_waiting=trends_waiting,
            tables=(results.comparison_tables or {}).get("suites", {}),
            items=_items(results),
            calibration=calibration_views,
            next_command=next_command(report),
            clip=_clip,
            interval=interval_text,
            version=__version__,
            max_drop=f"{MAX_DROP:g}",
        )
    )


def write_html(
    path: Path,
    results: SessionReport | SessionResults,
    *,
    trends: Mapping[str, DimensionTrend] | None = None,
    calibration: Sequence[CalibrationFigure] | None = None,
) -> Path:
    """Render and write atomically (a half-written report is never left behind)."""
    text = render_html(results, trends=trends, calibration=calibration)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)  # a report is for sharing: the umask's permissions, never 0600
    return path
