"""The HTML report's charts: matplotlib figures rendered to inline ``<svg>`` text.

Why matplotlib's SVG backend: the charts are real ``<svg>`` elements in the page, so they need no
JavaScript, no CDN and no font download, print and zoom cleanly, and a test can count their points in
the DOM. A report with a dozen charts stays a few hundred kB, where a Vega-Lite (altair + vl-convert)
or plotly report would inline 3+ MB of JavaScript to draw the same thing. Text is kept as ``<text>``
(``svg.fonttype = none``) so the browser draws it with its own fonts: smaller files, selectable text.

Every chart is a pure function of plain data (no store, no session): the caller builds the series.
Points that a test or a reader may want to find carry an SVG id (``gid``) of the form
``<chart id>-<role>``; each data point is one ``<use>`` element inside that group.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_aimeasure.measure.models import SCORE_MAX, SCORE_MIN

REPORT_EXTRA = "pytest-aimeasure[report]"

# Colours that stay apart for colour-blind readers (Okabe-Ito).
NOW = "#0072B2"
BASE = "#7f7f7f"
FLOOR = "#D55E00"
RULER = "#CC79A7"
MAX_AXIS_LABELS = 10


class ReportDependencyError(ImportError):
    """The report's plotting library is not installed."""


def _figure_api() -> tuple[Any, Any, Any]:
    try:
        import matplotlib
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ReportDependencyError(
            f"the HTML report needs matplotlib: pip install '{REPORT_EXTRA}' ({exc})"
        ) from None
    return matplotlib, Figure, FigureCanvasSVG


@dataclass(frozen=True)
class DimensionPoint:
    """One dimension's baseline and current estimate (95% CIs) for the baseline-vs-now chart."""

    dimension: str
    now_mean: float | None
    now_ci: tuple[float, float] | None
    baseline_mean: float | None = None
    baseline_ci: tuple[float, float] | None = None
    floor: float | None = None


@dataclass(frozen=True)
class TrendPoint:
    """One run's estimate of a dimension."""

    label: str  # what the x axis shows (the run's time; its date where the day changes)
    mean: float
    ci_low: float
    ci_high: float
    ruler_changed: list[str] = field(default_factory=list)  # fingerprint fields changed since the run before
    judge: str = ""  # the model that judged most of the run's items


def _svg(fig: Any, salt: str) -> str:
    matplotlib, _, canvas_cls = _figure_api()
    buffer = io.StringIO()
    # Fixed metadata and hash salt: the same data renders the same bytes, and ids of different charts
    # in one page never collide.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        canvas_cls(fig).print_svg(buffer, metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    # Drop the XML prolog and doctype: the SVG goes inline into an HTML page.
    start = text.find("<svg")
    svg = text[start:]
    # Width and height come from CSS so that the chart scales with the page (the viewBox keeps its shape).
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r"<svg\1", svg, count=1)


def _style(ax: Any) -> None:
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.grid(True, axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=8)


def baseline_vs_now(chart_id: str, points: Sequence[DimensionPoint]) -> str:
    """Per dimension, the baseline and the current mean with their 95% CIs, and the floor."""
    _, figure_cls, _ = _figure_api()
    rows = list(points)
    height = 0.9 + 0.42 * max(len(rows), 1)
    fig = figure_cls(figsize=(6.4, height), dpi=96)
    ax = fig.add_subplot()
    _style(ax)
    ax.grid(True, axis="x", color="#e5e5e5", linewidth=0.8)
    ax.grid(False, axis="y")
    ys = list(range(len(rows)))
    base = [(y + 0.15, p) for y, p in zip(ys, rows, strict=True) if p.baseline_mean is not None]
    now = [(y - 0.15, p) for y, p in zip(ys, rows, strict=True) if p.now_mean is not None]
    if base:
        line = ax.errorbar(
            [p.baseline_mean for _, p in base],
            [y for y, _ in base],
            xerr=_xerr([(p.baseline_mean, p.baseline_ci) for _, p in base]),
            fmt="o",
            mfc="white",
            color=BASE,
            ms=6,
            capsize=3,
            label="baseline",
        )
        line[0].set_gid(f"{chart_id}-baseline")
        line[2][0].set_gid(f"{chart_id}-baseline-bars")
    if now:
        line = ax.errorbar(
            [p.now_mean for _, p in now],
            [y for y, _ in now],
            xerr=_xerr([(p.now_mean, p.now_ci) for _, p in now]),
            fmt="o",
            color=NOW,
            ms=6,
            capsize=3,
            label="now",
        )
        line[0].set_gid(f"{chart_id}-now")
        line[2][0].set_gid(f"{chart_id}-now-bars")
    for y, p in zip(ys, rows, strict=True):
        if p.floor is not None:
            ax.plot([p.floor, p.floor], [y - 0.4, y + 0.4], color=FLOOR, lw=1.5, ls="--")
    ax.set_yticks(ys, [p.dimension for p in rows])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.invert_yaxis()
    ax.set_xlim(SCORE_MIN - 0.2, SCORE_MAX + 0.2)
    ax.patch.set_gid(f"{chart_id}-area")
    ax.set_xlabel("score (mean of item means, 95% CI); dashed: floor", fontsize=8)
    if base or now:
        ax.legend(fontsize=8, loc="lower left", frameon=False, ncols=2, bbox_to_anchor=(0, 1.0))
    fig.tight_layout()
    return _svg(fig, chart_id)


def _xerr(pairs: Sequence[tuple[float | None, tuple[float, float] | None]]) -> list[list[float]]:
    low, high = [], []
    for mean, ci in pairs:
        assert mean is not None
        low.append(max(mean - ci[0], 0.0) if ci else 0.0)
        high.append(max(ci[1] - mean, 0.0) if ci else 0.0)
    return [low, high]


def trend(chart_id: str, dimension: str, points: Sequence[TrendPoint], floor: float | None) -> str:
    """One dimension across runs, oldest first: the mean, its 95% CI as a band, the floor, and a
    vertical marker at each run whose ruler (judge fingerprint) differs from the run before."""
    _, figure_cls, _ = _figure_api()
    fig = figure_cls(figsize=(6.4, 2.6), dpi=96)
    ax = fig.add_subplot()
    _style(ax)
    xs = list(range(len(points)))
    ax.fill_between(
        xs,
        [p.ci_low for p in points],
        [p.ci_high for p in points],
        color=NOW,
        alpha=0.18,
        lw=0,
        label="95% CI",
        gid=f"{chart_id}-band",
    )
    (line,) = ax.plot(xs, [p.mean for p in points], "o-", color=NOW, ms=5, lw=1.5, label="mean")
    line.set_gid(f"{chart_id}-points")
    if floor is not None:
        ax.axhline(floor, color=FLOOR, ls="--", lw=1.2, label=f"floor {floor:g}")
    changed = [x for x, p in zip(xs, points, strict=True) if p.ruler_changed]
    for x in changed:
        ax.axvline(x - 0.5, color=RULER, lw=1.2, ls=":")
    if changed:
        (marks,) = ax.plot(
            [x - 0.5 for x in changed],
            [SCORE_MAX + 0.1] * len(changed),
            "v",
            color=RULER,
            ms=7,
            ls="none",
            label="judge changed",
        )
        marks.set_gid(f"{chart_id}-ruler")
    # Level labels, at most MAX_AXIS_LABELS of them: rotated or crowded run ids were unreadable.
    step = -(-len(points) // MAX_AXIS_LABELS)
    labels = [p.label if x % step == 0 else "" for x, p in zip(xs, points, strict=True)]
    ax.set_xticks(xs, labels, fontsize=7)
    ax.set_xlim(-0.6, max(len(points) - 0.4, 0.6))
    ax.set_ylim(SCORE_MIN - 0.2, SCORE_MAX + 0.3)
    ax.set_ylabel(dimension, fontsize=9)
    ax.legend(fontsize=7, loc="lower left", frameon=False, ncols=4, bbox_to_anchor=(0, 1.0))
    fig.tight_layout()
    return _svg(fig, chart_id)


def reliability(chart_id: str, points: Sequence[tuple[float, float, int]], title: str) -> str:
    """A calibration figure: judge score (x) against the reference score (y) per anchor bin, with the
    number of anchors as point size, and the diagonal of perfect agreement."""
    _, figure_cls, _ = _figure_api()
    fig = figure_cls(figsize=(3.4, 3.2), dpi=96)
    ax = fig.add_subplot()
    _style(ax)
    ax.plot([SCORE_MIN, SCORE_MAX], [SCORE_MIN, SCORE_MAX], color=BASE, lw=1, ls="--")
    if points:
        xs, ys, _ = zip(*points, strict=True)
        (line,) = ax.plot(xs, ys, "o", color=NOW, ms=6)
        line.set_gid(f"{chart_id}-points")
        for x, y, n in points:
            ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlim(SCORE_MIN - 0.3, SCORE_MAX + 0.3)
    ax.set_ylim(SCORE_MIN - 0.3, SCORE_MAX + 0.3)
    ax.set_xlabel("reference score", fontsize=8)
    ax.set_ylabel("judge score", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _svg(fig, chart_id)
