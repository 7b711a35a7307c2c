"""The session as Markdown: the GitHub job summary (``GITHUB_STEP_SUMMARY``) and
``aimeasure summary RUN --markdown``.

Judge rationales and artifact excerpts are untrusted text: they are flattened to one line, and the
characters that would open HTML or break a table (``<``, ``>``, ``|``, backticks) are escaped.
"""

from __future__ import annotations

from pytest_aimeasure.compare.drift import DimensionComparison
from pytest_aimeasure.report.advice import next_command
from pytest_aimeasure.report.model import DimensionRow, SessionReport, as_report, interval_text
from pytest_aimeasure.report.results import SessionResults

SEVERITY_ORDER = {"fail": 0, "warn": 1, "info": 2}
MAX_FINDINGS = 50
TEXT_CHARS = 300


def escape(text: str, limit: int = TEXT_CHARS) -> str:
    flat = " ".join(str(text).split())
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    for raw, safe in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "'")):
        flat = flat.replace(raw, safe)
    return flat


def _delta(d: DimensionComparison | None) -> str:
    if d is None or d.delta is None:
        return "—"
    text = f"{d.delta:+.2f}"
    if d.delta_ci is not None:
        text += f" [{d.delta_ci[0]:+.2f}, {d.delta_ci[1]:+.2f}]"
    return text


def _dimension_line(row: DimensionRow) -> str:
    now = interval_text(row.now_mean, row.now_ci, "—")
    base_text = interval_text(row.baseline_mean, row.baseline_ci, "—")
    verdict_text = row.verdict.replace("_", " ")
    if row.comparison is not None and row.comparison.demoted:
        verdict_text += " (not confirmed)"
    confirmation = row.comparison.confirmation if row.comparison is not None else None
    if confirmation is not None and confirmation.confirmed:
        verdict_text += " (confirmed by judging the baseline's outputs again)"
    delta = _delta(row.comparison)
    return f"| {escape(row.name)} | {now} | {base_text} | {delta} | {row.m} | **{verdict_text}** |"


def _dimension_tables(report: SessionReport) -> list[str]:
    """A table per phase (when any dimension or gate has one), each headed by its gates' count."""
    results = report.results
    sections = (
        [(f"### Dimensions: {g.title}", g.gate_text(), g.dimensions) for g in report.phases]
        if report.phases
        else [("### Dimensions", None, sorted(results.dimensions))]
    )
    lines: list[str] = []
    for heading, gates, names in sections if results.dimensions or report.phases else []:
        lines += ["", heading, ""]
        if gates:
            lines += [f"Gates: {escape(gates)}", ""]
        if not names:
            continue
        lines += [
            "| dimension | now (95% CI) | baseline | Δ (95% CI) | items | verdict |",
            "|---|---|---|---|---|---|",
        ]
        lines += [_dimension_line(row) for row in map(report.row, names) if row and row.comparison]
    return lines


def summary_markdown(given: SessionReport | SessionResults) -> str:
    """The Markdown summary of one session (or a merge of shards)."""
    report = as_report(given)
    results = report.results
    lines: list[str] = []
    verdict = "✅ passed" if results.passed else "❌ failed"
    lines.append(f"## aimeasure: {verdict}")
    facts = []
    if results.run_id:
        facts.append(f"run `{escape(results.run_id)}`")
    if results.shards:
        facts.append(f"{len(results.shards)} shards merged")
    if results.judge_model:
        facts.append(f"judge `{escape(results.judge_model)}`")
    measured = sum(1 for i in results.items if i.measurements)
    facts.append(f"{len(results.items)} tests, {measured} judged")
    calls = results.spend.get("calls")
    if calls is not None:
        facts.append(f"{calls} judge calls")
    cost = results.spend.get("cost_usd")
    facts.append("spend unknown" if cost is None else f"spend ${cost:.4f}")
    lines += ["", " · ".join(facts)]
    if results.failed_because:
        lines += ["", "**Why it failed:**"]
        lines += [f"- {escape(reason)}" for reason in results.failed_because]

    lines += _dimension_tables(report)

    shown = sorted(results.findings, key=lambda f: SEVERITY_ORDER[f.severity])
    if shown:
        lines += ["", f"### Findings ({len(shown)})", ""]
        for f in shown[:MAX_FINDINGS]:
            item = f.nodeid if f.nodeid and f.nodeid not in f.subject else None
            where = f"`{escape(f.subject, 200)}`" + (f" (`{escape(item, 200)}`)" if item else "")
            lines.append(f"- **{f.severity}** {f.kind.replace('_', ' ')} {where}: {escape(f.message)}")
            if f.rationale:
                lines.append(f"  - judge: {escape(f.rationale)}")
            if f.excerpt:
                lines.append(f"  - artifact: {escape(f.excerpt, 200)}")
        if len(shown) > MAX_FINDINGS:
            lines.append(
                f"- … {len(shown) - MAX_FINDINGS} more: `aimeasure show {results.run_id or 'latest'}`"
            )
    else:
        lines += ["", "No findings."]
    lines += ["", "**Next:**", "", "```", next_command(report), "```"]
    return "\n".join(lines) + "\n"
