"""The terminal section: what needs a look, why, and what to run next; and the header line.

The section follows pytest's verbosity: under ``-q`` only the verdict and the findings that fail;
by default what needs a look, the stable dimensions and what to run next; under ``-v`` also one
line per measured item.
Verdicts are coloured as pytest colours its own summary (red fails, yellow needs a look, green is
fine); pytest's terminal writer drops the colour under ``--color=no`` or when output is not a tty.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from pytest_aimeasure.measure.models import Finding
from pytest_aimeasure.measure.runtime import PIPELINE_ASIDE
from pytest_aimeasure.report.advice import next_steps, resume_step
from pytest_aimeasure.report.model import ReportSettings, SessionReport, interval_text
from pytest_aimeasure.report.repeat_lines import repeat_lines

if TYPE_CHECKING:
    import pytest

    from pytest_aimeasure.compare.drift import DimensionComparison, ItemComparison
    from pytest_aimeasure.measure.models import ItemResult
    from pytest_aimeasure.measure.sampling import PlannedItem

LOOK_AT = ("regressed", "not_comparable", "improved", "inconclusive")
EXCERPT_LINES = 6
SEVERITY_COLOUR = {"fail": "red", "warn": "yellow"}


class Styled(str):
    """A summary line that carries its terminal markup (pytest's TerminalWriter names: ``red``,
    ``yellow``, ``green``, ``bold``...). Plain ``str`` lines are written without markup."""

    markup: dict[str, bool]

    def __new__(cls, text: str, *colours: str) -> Styled:
        line = super().__new__(cls, text)
        line.markup = dict.fromkeys(colours, True)
        return line


def write_summary(reporter: Any, summary: SessionReport) -> None:
    """The aimeasure section on pytest's terminal reporter, at the reporter's verbosity."""
    reporter.write_sep("=", "aimeasure")
    for line in summary_lines(summary, verbosity=reporter.verbosity):
        reporter.write_line(line, **getattr(line, "markup", {}))


def header_lines(settings: ReportSettings, rootdir: Path) -> list[str]:
    """The ``pytest_report_header`` line when the judge is on: the instrument and where it keeps things."""

    def shown(path: Path) -> str:
        return str(path.relative_to(rootdir)) if path.is_relative_to(rootdir) else str(path)

    baseline = shown(settings.baseline) + ("" if settings.baseline.exists() else " (none yet)")
    text = (
        f"aimeasure: judge {settings.model or '(none configured)'}, {settings.samples_text}, "
        f"baseline {baseline}, store {shown(settings.store)}"
    )
    mode = [
        note
        for note, on in (
            ("dry run", settings.dry_run),
            (f"rejudging run {settings.rejudge}", settings.rejudge is not None),
            (f"resuming run {settings.resume}", settings.resume is not None),
            ("updating the baseline", settings.update_baseline),
            (f"drift {settings.drift}", settings.drift != "fail"),
        )
        if on
    ]
    return [text + ("; " + ", ".join(mode) if mode else "")]


_fmt_ci = interval_text


def _fmt_delta(delta: float | None, ci: tuple[float, float] | None) -> str:
    if delta is None:
        return "-"
    text = f"{delta:+.2f}"
    if ci is not None:
        text += f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    return text


def _verdict_text(c: ItemComparison | DimensionComparison) -> str:
    verdict = c.verdict.replace("_", " ")
    if getattr(c, "demoted", False):
        return "inconclusive (a drop the family-wise correction does not confirm)"
    confirmation = getattr(c, "confirmation", None)
    if c.verdict == "regressed" and confirmation is not None and confirmation.confirmed:
        return "regressed (confirmed by judging the baseline's outputs again)"
    if c.verdict == "not_comparable" and c.changed_fields:
        return f"not comparable ({', '.join(c.changed_fields)}): re-baseline"
    advice = getattr(c, "advice", None)  # dimensions say what they can detect
    if c.verdict == "inconclusive" and advice:
        return f"inconclusive: {advice}"  # (the advice has parentheses of its own)
    if c.verdict == "inconclusive" and c.mde is not None:
        from pytest_aimeasure.compare.advice import drop_text

        suffix = ", underpowered" if c.underpowered else ""
        return f"inconclusive (MDE {drop_text(c.mde)}{suffix})"
    if c.verdict == "improved":
        return "improved (baseline stale)"
    return verdict


def comparison_rows(summary: SessionReport) -> list[list[str]]:
    comparison = summary.comparison
    if comparison is None:
        return []
    rows: list[list[str]] = []
    for name, dim in sorted(comparison.dimensions.items()):
        quiet = (
            dim.verdict == "inconclusive"
            and not dim.demoted
            and abs(dim.delta or 0.0) < (dim.tolerance or 0.0)
        )
        if dim.verdict in LOOK_AT and not quiet:  # a dimension that did not move is not news
            rows.append(
                [
                    f"{name} (dimension, {dim.m} items)",
                    _fmt_ci(dim.baseline_mean, None),
                    _fmt_ci(dim.now_mean, dim.now_ci),
                    _fmt_delta(dim.delta, dim.delta_ci),
                    _verdict_text(dim),
                ]
            )
    for item_id, item in sorted(comparison.items.items()):
        if item.verdict in LOOK_AT and not (item.verdict == "inconclusive" and not item.demoted):
            rows.append(
                [
                    item_id,
                    _fmt_ci(item.baseline_mean, None),
                    _fmt_ci(item.now_mean, item.now_ci),
                    _fmt_delta(item.delta, item.delta_ci),
                    _verdict_text(item),
                ]
            )
    return rows


def _spend_line(summary: SessionReport) -> str:
    spend = summary.results.spend
    cost = spend["cost_usd"]
    cost_text = "cost unknown" if cost is None else f"${cost:.4f}"
    cache = ""
    if spend.get("cache_read_input_tokens") or spend.get("cache_creation_input_tokens"):
        cache = (
            f" (+{spend['cache_read_input_tokens']:,} read from / "
            f"{spend['cache_creation_input_tokens']:,} written to the prompt cache)"
        )
    pressure = ""
    if spend.get("max_in_flight"):
        pressure = f", at most {spend['max_in_flight']} in flight"
        if spend.get("limit_reached"):
            pressure += f" (limit reached {spend['limit_reached']})"
    if spend.get("rate_limited"):
        pressure += f", {spend['rate_limited']} rate-limited (paused {spend['rate_limit_wait_s']:.1f}s)"
    models = summary.judges
    judges = f"judge {models[0]}" if len(models) == 1 else f"judges {', '.join(models) or '(none)'}"
    return (
        f"{judges}: {spend['calls']} calls, {spend['cached']} samples reused, {_retries_text(spend)}, "
        f"{spend['input_tokens']:,} tokens in{cache} / {spend['output_tokens']:,} out, {cost_text}{pressure}"
    )


def _retries_text(spend: Mapping[str, Any]) -> str:
    """Every call made again, counted once, with why: a user reading "0 retries" beside "4 calls
    retried" could not tell which was true."""
    invalid, transport = spend.get("retries", 0), spend.get("transport_retries", 0)
    total = invalid + transport
    text = f"{total} {'retry' if total == 1 else 'retries'}"
    why = [
        f"{count} after {cause}"
        for count, cause in ((invalid, "an invalid verdict"), (transport, "a failed call"))
        if count
    ]
    return f"{text} ({', '.join(why)})" if why else text


def _indent(text: str, prefix: str = "      ") -> list[str]:
    lines = text.strip().splitlines()
    shown = lines[:EXCERPT_LINES]
    if len(lines) > EXCERPT_LINES:
        shown.append(f"… ({len(lines) - EXCERPT_LINES} more lines)")
    return [prefix + line for line in shown]


def finding_lines(f: Finding, *, full: bool = True) -> list[str]:
    """A finding: its headline (coloured by severity), message, and with ``full`` the judge's
    rationale and the artifact excerpt behind it."""
    colour = SEVERITY_COLOUR.get(f.severity)
    headline = f"  [{f.severity}] {f.kind.replace('_', ' ')}: {f.subject}"
    lines: list[str] = [
        Styled(headline, colour) if colour else headline,
        # (Not at hyphens: a scene, node or test name such as budget-freeze stays whole.)
        *textwrap.wrap(
            f.message, 110, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False
        ),
    ]
    if not full:
        return lines
    if f.rationale:
        lines += textwrap.wrap(
            "judge: " + f.rationale,
            110,
            initial_indent="      ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
    if f.excerpt:
        lines.append("      artifact:")
        lines += _indent(f.excerpt, "        ")
    return lines


def _row_colour(verdict_text: str) -> str | None:
    if verdict_text.startswith(("regressed", "below the floor")):
        return "red"
    if verdict_text.startswith("stable"):
        return "green"
    if verdict_text.startswith(("not comparable", "improved", "inconclusive")):
        return "yellow"
    return None


def _item_colour(verdict_text: str) -> str | None:
    # One item's "inconclusive" is the usual state of a single item (its MDE is wide): not a warning.
    if verdict_text.startswith("inconclusive") and "does not confirm" not in verdict_text:
        return None
    return _row_colour(verdict_text)


def _table(
    rows: list[list[str]], headers: list[str], colour_of: Callable[[str], str | None] = _row_colour
) -> list[str]:
    """A table whose rows are coloured by their verdict (the last column)."""
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True).splitlines()
    head, body = text[:2], text[2:]
    lines: list[str] = list(head)
    for row, line in zip(rows, body, strict=True):  # "simple" tables: one line per row
        colour = colour_of(row[-1])
        lines.append(Styled(line, colour) if colour else line)
    return lines


def _failed_line(summary: SessionReport) -> Styled:
    return Styled("aimeasure failed the run: " + "; ".join(summary.results.failed_because), "red", "bold")


def sampling_line(summary: dict[str, Any]) -> str | None:
    """'adaptive sampling: 12 items, n=3..9, mean 4.2 samples an item; 9 stopped at 3, 1 where the
    judge repeated itself, 2 reached 9 (floor open 2)' (None when no item sampled adaptively)."""
    if not summary:
        return None
    stopped, items = summary["stopped"], summary["items"]
    parts = [f"{summary['at_minimum']} stopped at {summary['minimum']}"]
    if stopped.get("agreed"):
        parts.append(f"{stopped['agreed']} where the judge repeated itself")
    if stopped["maximum"]:
        opened = ", ".join(f"{k} open {v}" for k, v in summary["open_at_stop"].items() if v)
        reached = f"{stopped['maximum']} reached {summary['maximum']}"
        parts.append(reached + (f" ({opened})" if opened else ""))
    if stopped["budget"]:
        parts.append(f"{stopped['budget']} cut short by the budget")
    return (
        f"adaptive sampling: {items} item{'' if items == 1 else 's'}, "
        f"n={summary['minimum']}..{summary['maximum']}, mean {summary['mean_samples']:.1f} samples an item; "
        + ", ".join(parts)
    )


_EVIDENCE = {
    "repeats": "repeats",
    "sessions": "pooled sessions",
    "prior": "a judge that repeats itself",
    "unmeasured": "generator unmeasured",
    "none": "first baseline",
}


def generations_line(summary: dict[str, Any]) -> str | None:
    """'repeats="auto": 2 of 5 artifacts got more outputs, where the generator moves more than the judge
    (8 outputs in all, 24 judge calls); evidence: 3 generator unmeasured, 2 a judge that repeats
    itself' (None when no artifact asked for repeats="auto")."""
    if not summary:
        return None
    artifacts, more = summary["artifacts"], summary["more_outputs"]
    evidence = ", ".join(f"{n} {_EVIDENCE.get(kind, kind)}" for kind, n in summary["evidence"].items())
    return (
        f'repeats="auto": {more} of {artifacts} artifact{"" if artifacts == 1 else "s"} got more outputs, '
        f"where the generator moves more than the judge ({summary['outputs']} outputs in all, "
        f"{summary['calls']} judge calls); evidence: {evidence}"
    )


SHOWN_IN_TABLE = {"regressed", "not_comparable", "improved", "inconclusive", "underpowered"}


def listed_findings(summary: SessionReport) -> list[Finding]:
    """The findings the default verbosity lists one by one (the drift table shows the others; the
    run's one "no baseline yet" line is in the closing lines): what ``-q`` points at."""
    return [f for f in summary.results.findings if f.kind not in SHOWN_IN_TABLE and f.kind != "new"]


def stepped_aside_lines(items: Sequence[ItemResult]) -> list[str]:
    """A note for the items the judge pipeline left to another plugin (judged while they ran)."""
    reasons = Counter(str(r.extra[PIPELINE_ASIDE]) for r in items if r.extra.get(PIPELINE_ASIDE))
    return [f"aimeasure pipeline: {n} item(s) {reason}" for reason, n in sorted(reasons.items())]


def summary_lines(summary: SessionReport, verbosity: int = 0) -> list[str]:
    """The section's lines at pytest's ``verbosity`` (-1 under -q, 0 by default, 1+ under -v)."""
    if verbosity < 0:
        return quiet_summary(summary)
    lines: list[str] = []
    gates = summary.gates.text()
    lines.append(
        f"{summary.measured} items measured, {gates}; {_spend_line(summary)}"
        if summary.settings.judging
        else f"{gates}; judging off (--ai-judge)"
    )
    rows = comparison_rows(summary)
    detail = listed_findings(summary)
    new_count = summary.new_count
    if summary.interrupted:
        lines.append(interrupted_line(summary))
    elif not rows and not detail and not summary.results.failed_because:
        lines.append(Styled(quiet_line(summary, new_count), "green"))
    elif summary.stable:
        lines.append(Styled("stable: " + ", ".join(summary.stable), "green"))
    if summary.comparison is not None and summary.comparison.baseline_note:
        lines.append(summary.comparison.baseline_note)
    for line in (sampling_line(summary.results.sampling), generations_line(summary.results.generations)):
        if line is not None:
            lines.append(line)
    lines += repeat_lines(summary.results.items)
    lines += phase_lines(summary)
    lines += stepped_aside_lines(summary.results.items)
    if verbosity > 0:
        lines += item_lines(summary)
    if rows:
        lines.append("")
        lines.append("Drift against the baseline (needs a look):")
        lines += _table(rows, ["item", "baseline", "now (95% CI)", "Δ [95% CI]", "verdict"])
    if detail:
        lines.append("")
        counts = Counter(f.kind for f in detail)
        lines.append(
            "Findings: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(counts.items()))
        )
        order = {"fail": 0, "warn": 1, "info": 2}
        for f in sorted(detail, key=lambda f: (order[f.severity], f.kind, f.subject)):
            lines += finding_lines(f)
    lines += _closing_lines(summary)
    lines += next_steps(summary, new_count)
    return lines


def _closing_lines(summary: SessionReport) -> list[str]:
    """Calibration, suite tables, what the baseline update did, and why the run failed."""
    lines: list[str] = []
    if summary.results.calibration_summary:
        from pytest_aimeasure.calibrate.lines import calibration_lines

        lines += calibration_lines(summary.results.calibration_summary, var_floor=summary.settings.var_floor)
    if summary.results.comparison_tables:
        from pytest_aimeasure.report.targets import render_tables

        lines.append("")
        lines += render_tables(summary.results.comparison_tables)
    if summary.results.baseline.get("update") is not None:
        u = summary.results.baseline["update"]
        lines.append("")
        kept = "".join(f", {len(ids)} kept ({reason})" for reason, ids in u["kept_because"].items())
        lines.append(
            f"baseline {summary.settings.baseline}: {len(u['added'])} added, {len(u['updated'])} updated, "
            + (f"{len(u['pooled'])} pooled with earlier sessions, " if u.get("pooled") else "")
            + f"{len(u['removed'])} removed, {len(u['unchanged'])} unchanged{kept}"
        )
        if u["removed"]:
            lines.append("  removed: " + ", ".join(u["removed"]))
        lines += _repeats_line(u.get("repeated") or [], summary.settings.default_repeats)
    if summary.results.baseline.get("note"):
        lines.append(Styled(f"baseline not written: {summary.results.baseline['note']}", "yellow"))
    if summary.results.failed_because:
        lines.append("")
        lines.append(_failed_line(summary))
    return lines


def _repeats_line(repeated: list[str], default_repeats: int) -> list[str]:
    """Why the update generated more outputs than other runs, and what it bought."""
    if not repeated:
        return []
    how = (
        f"{default_repeats} outputs of each artifact that sets no repeats= (--aimeasure-baseline-repeats "
        f"{default_repeats}; 1 generates one)"
        if default_repeats > 1
        else "their generation repeats"
    )
    return [
        f"  {len(repeated)} entries measured over {how}: later runs compare against a baseline that "
        "knows how much the generator moves between outputs"
    ]


def quiet_summary(summary: SessionReport) -> list[str]:
    """Under ``-q``: the verdict, then each finding that fails the run (headline and message)."""
    failing = [f for f in summary.results.findings if f.severity == "fail"]
    look = bool(comparison_rows(summary)) or bool(listed_findings(summary))
    if summary.results.failed_because:
        lines: list[str] = [_failed_line(summary)]
    elif summary.interrupted:
        lines = [interrupted_line(summary)]
    elif look:
        lines = [Styled("aimeasure: passed; findings need a look (run without -q to see them).", "yellow")]
    else:
        lines = [Styled(quiet_line(summary, summary.new_count), "green")]
    for f in sorted(failing, key=lambda f: (f.kind, f.subject)):
        lines += finding_lines(f, full=False)
    resume = resume_step(summary)
    if resume is not None:
        lines.append(resume)
    return lines


def item_lines(summary: SessionReport) -> list[str]:
    """Under ``-v``: one line per measured item, with its verdict against the baseline."""
    comparison = summary.comparison
    rows: list[list[str]] = []
    for result in sorted(summary.results.items, key=lambda r: r.nodeid):
        for m in result.measurements:
            item = comparison.items.get(m.item_id) if comparison is not None else None
            verdict = _verdict_text(item) if item is not None else "new"
            if comparison is None:
                verdict = "not compared (--aimeasure-drift=off)"
            if m.mean < m.floor:
                verdict = f"below the floor {m.floor:g}; {verdict}"
            mean = _fmt_ci(m.mean, (m.ci_low, m.ci_high))
            if m.escalation is not None:
                mean += f" (escalated from {m.escalation.standing.mean:.2f})"
            rows.append([m.item_id, mean, str(m.n), verdict])
    if not rows:
        return []
    return ["", "Items measured:", *_table(rows, ["item", "mean (95% CI)", "n", "verdict"], _item_colour)]


def phase_lines(summary: SessionReport) -> list[str]:
    """A table per phase (only when some dimension or gate has a phase): its gates' count and each of
    its dimensions' mean, floor breaches and verdict against the baseline."""
    lines: list[str] = []
    for group in summary.phases:
        gates = group.gate_text()
        lines += ["", f"{group.heading}:"]
        if gates:
            lines.append(f"  gates: {gates}")
        rows: list[list[str]] = []
        for row in (r for r in map(summary.row, group.dimensions) if r is not None and r.measured):
            dim = row.comparison
            verdict = _verdict_text(dim) if dim is not None else "not compared"
            if row.breaches:
                items = "item" if row.breaches == 1 else "items"
                verdict = f"below the floor ({row.breaches} {items}); {verdict}"
            now = _fmt_ci(row.now_mean, row.now_ci)
            rows.append([row.name, str(row.measured), now, str(row.breaches), verdict])
        if rows:
            lines += _table(rows, ["dimension", "items", "now (95% CI)", "below floor", "verdict"])
    return ["", "By phase:", *lines[1:]] if lines else []


def quiet_line(summary: SessionReport, new_count: int) -> str:
    """The one line shown when nothing needs a look."""
    stable = summary.stable
    text = f"aimeasure: nothing needs a look against {summary.settings.baseline.name}"
    if stable:
        text += "; stable: " + ", ".join(stable)
    if new_count:
        text += f"; {new_count} new items (not in the baseline)"
    return text + "."


def interrupted_line(summary: SessionReport) -> Styled:
    """Instead of "nothing needs a look" when the session was interrupted: nothing is concluded."""
    return Styled(
        f"aimeasure: interrupted after {summary.measured} items measured; "
        "the items not measured are not compared.",
        "yellow",
    )


def write_dry_run(
    config: pytest.Config,
    settings: ReportSettings,
    items: list[PlannedItem],
    attribution: Mapping[str, int] | None = None,
    confirm: Mapping[str, int] | None = None,
) -> None:
    """The dry run's plan: what would be judged, how many calls, what it would cost."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    write = reporter.write_line if reporter is not None else print
    for line in dry_run_lines(settings, items, attribution, confirm):
        write(line)


@dataclass
class _Plan:
    """A dry run's counts: calls per dimension and per judge model, and each model's price a call."""

    default: str
    low: int = 0
    high: int = 0
    escalations: int = 0
    per_dim: dict[str, list[int]] = field(default_factory=dict)
    """dimension -> [fewest calls, most calls]"""
    dim_judge: dict[str, str] = field(default_factory=dict)
    per_model: dict[str, list[int]] = field(default_factory=dict)
    """model -> [fewest standing calls, most standing calls, escalation calls at most]"""
    prices: dict[str, float | None] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: ReportSettings, items: list[PlannedItem]) -> _Plan:
        plan = cls(settings.model or "(no judge model configured)")
        for p in items:
            plan.low, plan.high = plan.low + p.fewest, plan.high + p.most
            counts = plan.per_dim.setdefault(p.dimension, [0, 0])
            counts[0] += p.fewest
            counts[1] += p.most
            plan.dim_judge.setdefault(p.dimension, p.judge or plan.default)
            standing = plan.per_model.setdefault(p.judge or plan.default, [0, 0, 0])
            standing[0] += p.fewest
            standing[1] += p.most
            if p.escalate:
                plan.escalations += p.most
                plan.per_model.setdefault(p.escalate, [0, 0, 0])[2] += p.most
        return plan

    @property
    def adaptive(self) -> bool:
        return self.low != self.high

    def cost(self, model: str) -> tuple[float, float]:
        """The cheapest and dearest cost of ``model``'s calls: a fixed N has one cost (at most, with
        escalations); auto spans its fewest to its most calls."""
        fewest, most, e = self.per_model[model]
        one = self.prices.get(model) or 0.0
        return one * (fewest if self.adaptive else fewest + e), one * (most + e)


def dry_run_lines(
    settings: ReportSettings,
    items: list[PlannedItem],
    attribution: Mapping[str, int] | None = None,
    confirm: Mapping[str, int] | None = None,
) -> list[str]:
    """The plan: calls per dimension, and per judge model (a dimension's ``judge=``) with its cost.
    Under ``samples="auto"`` an item takes from the plan's minimum to its maximum calls: the plan
    shows that range ("30..90 judge calls") and the cost of both ends. Escalations are counted as a
    worst case: every item with ``escalate=`` re-judged with its most calls again (the same fixed N,
    or the plan's maximum under ``auto``). ``attribution``: dimension -> the re-judge calls of
    ``--aimeasure-attribute`` at most, shown and priced apart (they are made only for dimensions that
    drift or are not comparable), each at its dimension's judge's price. ``confirm``: dimension -> the
    calls confirming a suspected drop would make at most (a line; not in the estimate, as they are
    made only for a dimension that looks lower by its tolerance)."""
    from pytest_aimeasure.store.cost import estimate_call_usd

    rejudge = dict(attribution or {})
    plan = _Plan.of(settings, items)
    # --judge-batch: every call, attribution's too, goes through the Batch API at its rates.
    estimate = partial(estimate_call_usd, batch=settings.batch)
    plan.prices = {
        m: (_estimate_one(m, estimate) if m != plan.default or settings.model is not None else None)
        for m in set(plan.per_model) | {plan.dim_judge.get(d, plan.default) for d in rejudge}
    }
    lines = [_dry_run_head(settings, plan, len(items))]
    if settings.attribute:
        lines.append(
            f"--aimeasure-attribute: up to {sum(rejudge.values())} more calls re-judging the baseline's "
            "stored artifacts (only of dimensions that regress, improve or are not comparable)"
        )
    if confirm:
        lines.append(
            f"--aimeasure-confirm rejudge: up to {sum(confirm.values())} more calls judging the baseline's "
            "stored outputs again, only for a dimension that looks lower by its tolerance against a "
            "baseline of up to ten pooled sessions (not in the estimate below)"
        )
    lines += _dimension_plan(settings, plan, rejudge)
    if len(plan.per_model) > 1 or plan.escalations:
        lines += _model_plan(plan)
    lines.append(
        f"estimated cost: {_plan_cost(settings, plan, rejudge)} (assuming ~{DRY_RUN_PROMPT_CHARS:,} "
        "prompt characters a call; nothing was called)"
    )
    return lines


def _dry_run_head(settings: ReportSettings, plan: _Plan, count: int) -> str:
    models = ", ".join(m for m, (_, most, _) in plan.per_model.items() if most) or plan.default
    calls = _span(plan.low, plan.high)
    head = f"aimeasure dry run: {count} dimension items, {calls} judge calls with {models}"
    if plan.escalations:
        head += f", and up to {plan.escalations} escalation calls"
    if plan.adaptive:
        head += (
            f"; samples auto: {settings.sample_minimum}..{settings.sample_maximum} calls an item, "
            "stopping when the item's decisions are settled"
        )
    return head


def _dimension_plan(settings: ReportSettings, plan: _Plan, rejudge: Mapping[str, int]) -> list[str]:
    rows: list[tuple[str | int, ...]]
    if settings.attribute:
        rows = []
        for d in sorted(set(plan.per_dim) | set(rejudge)):
            lo, hi = plan.per_dim.get(d, [0, 0])
            rows.append((d, _span(lo, hi), rejudge.get(d, 0)))
        headers = ["dimension", "calls", "attribution (at most)"]
    else:
        rows = [(dim, _span(lo, hi)) for dim, (lo, hi) in sorted(plan.per_dim.items())]
        headers = ["dimension", "calls"]
    return list(tabulate(rows, headers=headers, tablefmt="simple").splitlines())


def _model_plan(plan: _Plan) -> list[str]:
    rows = [
        [
            m,
            _span(fewest, most),
            e,
            "unknown" if plan.prices[m] is None else _span(*plan.cost(m), "${:.4f}"),
        ]
        for m, (fewest, most, e) in sorted(plan.per_model.items())
    ]
    headers = ["judge model", "calls", "escalation calls (at most)", "cost"]
    return list(tabulate(rows, headers=headers, tablefmt="simple").splitlines())


def _plan_cost(settings: ReportSettings, plan: _Plan, rejudge: Mapping[str, int]) -> str:
    unpriced = sorted(m for m, one in plan.prices.items() if one is None)
    if unpriced:
        from pytest_aimeasure.store.cost import no_price_reason

        return f"unknown ({no_price_reason(unpriced if len(plan.prices) > 1 else None)})"
    cheapest = sum(plan.cost(m)[0] for m in plan.per_model)
    dearest = sum(plan.cost(m)[1] for m in plan.per_model)
    cost = _span(cheapest, dearest, "${:.4f}") + (" at most" if plan.escalations else "")
    if rejudge:
        one = plan.prices
        rejudge_usd = sum((one[plan.dim_judge.get(d, plan.default)] or 0.0) * n for d, n in rejudge.items())
        cost += f" + up to ${rejudge_usd:.4f} for attribution"
    if settings.batch:
        cost += " at batch prices"
    return cost


def _span(a: float, b: float, fmt: str = "{}") -> str:
    return fmt.format(a) if a == b else f"{fmt.format(a)}..{fmt.format(b)}"


def estimated_cost(
    model: str | None, low: int, high: int | None = None, *, rejudge: int = 0, batch: bool = False
) -> str:
    """What ``low`` (to ``high``) judge calls, and ``rejudge`` attribution calls at most, would cost, as
    a dry run says it (``batch``: at the Batch API's rates, ``--judge-batch``)."""
    from pytest_aimeasure.store.cost import estimate_call_usd, no_price_reason

    one = None if model is None else _estimate_one(model, partial(estimate_call_usd, batch=batch))
    if one is None:
        return f"unknown ({no_price_reason()})"
    high = low if high is None else high
    attribution = f" + up to ${one * rejudge:.4f} for attribution" if rejudge else ""
    return (
        f"{_span(one * low, one * high, '${:.4f}')}{attribution}{' at batch prices' if batch else ''}"
        f" (assuming ~{DRY_RUN_PROMPT_CHARS:,} prompt characters a call; nothing was called)"
    )


DRY_RUN_PROMPT_CHARS = 6000


def _estimate_one(model: str, estimate: Any) -> float | None:
    from pytest_aimeasure.judge.resolve import route

    provider = route(model)
    name = model.removeprefix("anthropic/") if provider == "anthropic" else model
    value: float | None = estimate(name, DRY_RUN_PROMPT_CHARS, 1024, provider=provider)
    return value
