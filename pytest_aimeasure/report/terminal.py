"""The terminal section: what needs a look, why, and what to run next."""

from __future__ import annotations

import re
import shlex
import textwrap
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from pytest_aimeasure.models import Finding

if TYPE_CHECKING:
    from pytest_aimeasure.compare import DimensionComparison, ItemComparison
    from pytest_aimeasure.session import Outcome, SessionState

LOOK_AT = ("regressed", "not_comparable", "improved", "inconclusive")
EXCERPT_LINES = 6


def _fmt_ci(mean: float | None, ci: tuple[float, float] | None) -> str:
    if mean is None:
        return "-"
    if ci is None:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {(ci[1] - ci[0]) / 2:.2f}"


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
        return "inconclusive (a drop, not significant after Holm)"
    if c.verdict == "not_comparable" and c.changed_fields:
        return f"not comparable ({', '.join(c.changed_fields)}): re-baseline"
    if c.verdict == "inconclusive" and c.mde is not None:
        suffix = ", underpowered" if c.underpowered else ""
        return f"inconclusive (MDE {c.mde:.2f}{suffix})"
    if c.verdict == "improved":
        return "improved (baseline stale)"
    return verdict


def comparison_rows(outcome: Outcome) -> list[list[str]]:
    comparison = outcome.comparison
    if comparison is None:
        return []
    rows: list[list[str]] = []
    for name, dim in sorted(comparison.dimensions.items()):
        if dim.verdict in LOOK_AT:
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


def _spend_line(state: SessionState) -> str:
    spend = state.spend()
    cost = spend["cost_usd"]
    cost_text = "cost unknown" if cost is None else f"${cost:.4f}"
    return (
        f"judge {state.settings.model}: {spend['calls']} calls, {spend['cached']} samples reused, "
        f"{spend['retries']} retries, {spend['input_tokens']:,} tokens in / {spend['output_tokens']:,} out, "
        f"{cost_text}"
    )


def _indent(text: str, prefix: str = "      ") -> list[str]:
    lines = text.strip().splitlines()
    shown = lines[:EXCERPT_LINES]
    if len(lines) > EXCERPT_LINES:
        shown.append(f"… ({len(lines) - EXCERPT_LINES} more lines)")
    return [prefix + line for line in shown]


def _finding_block(f: Finding) -> list[str]:
    lines = [
        f"  [{f.severity}] {f.kind.replace('_', ' ')}: {f.subject}",
        *textwrap.wrap(f.message, 110, initial_indent="      ", subsequent_indent="      "),
    ]
    if f.rationale:
        lines += textwrap.wrap(
            "judge: " + f.rationale, 110, initial_indent="      ", subsequent_indent="        "
        )
    if f.excerpt:
        lines.append("      artifact:")
        lines += _indent(f.excerpt, "        ")
    return lines


def summary_lines(state: SessionState, outcome: Outcome) -> list[str]:
    lines: list[str] = []
    measured = sum(len(r.measurements) for r in state.results.values())
    gates = [r for r in state.results.values() if r.kind == "gate"]
    gate_failures = sum(1 for r in gates if r.outcome in ("failed", "error"))
    # Suite items run their gates inside the item: count them too.
    suite_gates = [r.extra["suite"].get("gates") or {} for r in state.results.values() if "suite" in r.extra]
    gate_count = len(gates) + sum(int(g.get("checked", 0)) for g in suite_gates)
    gate_failures += sum(len(g.get("failed", [])) for g in suite_gates)
    lines.append(
        f"{measured} items measured, {gate_count} gates ({gate_failures} failed); {_spend_line(state)}"
        if state.settings.judging
        else f"{gate_count} gates ({gate_failures} failed); judging off (--ai-judge)"
    )
    rows = comparison_rows(outcome)
    shown_kinds = {"regressed", "not_comparable", "improved", "inconclusive", "underpowered"}
    detail = [f for f in outcome.findings if f.kind not in shown_kinds and f.kind != "new"]
    new_count = sum(1 for f in outcome.findings if f.kind == "new")
    if outcome.comparison is not None:
        new_count = max(new_count, sum(1 for c in outcome.comparison.items.values() if c.verdict == "new"))
    if not rows and not detail:
        lines.append(quiet_line(state, outcome, new_count))
    elif stable_dimensions(outcome):
        lines.append("stable: " + ", ".join(stable_dimensions(outcome)))
    if rows:
        lines.append("")
        lines.append("Drift against the baseline (needs a look):")
        lines += tabulate(
            rows,
            headers=["item", "baseline", "now (95% CI)", "Δ [95% CI]", "verdict"],
            tablefmt="simple",
            disable_numparse=True,
        ).splitlines()
    if detail:
        lines.append("")
        counts = Counter(f.kind for f in detail)
        lines.append(
            "Findings: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(counts.items()))
        )
        order = {"fail": 0, "warn": 1, "info": 2}
        for f in sorted(detail, key=lambda f: (order[f.severity], f.kind, f.subject)):
            lines += _finding_block(f)
    if outcome.tables:
        from pytest_aimeasure.suites.compare import render_tables

        lines.append("")
        lines += render_tables(outcome.tables)
    if outcome.baseline_update is not None:
        u = outcome.baseline_update
        lines.append("")
        lines.append(
            f"baseline {state.settings.baseline}: {len(u['added'])} added, {len(u['updated'])} updated, "
            f"{len(u['removed'])} removed, {len(u['unchanged'])} unchanged, {len(u['kept'])} kept (not run)"
            + (f", {len(u['kept_judge_error'])} kept after judge errors" if u["kept_judge_error"] else "")
        )
    if outcome.baseline_note:
        lines.append(f"baseline not written: {outcome.baseline_note}")
    if outcome.failed_because:
        lines.append("")
        lines.append("aimeasure failed the run: " + "; ".join(outcome.failed_because))
    lines += next_steps(state, outcome, new_count)
    return lines


def stable_dimensions(outcome: Outcome) -> list[str]:
    comparison = outcome.comparison
    return sorted(
        f"{name} ({dim.m} items)"
        for name, dim in (comparison.dimensions.items() if comparison else ())
        if dim.verdict == "stable"
    )


def quiet_line(state: SessionState, outcome: Outcome, new_count: int) -> str:
    """The one line shown when nothing needs a look."""
    stable = stable_dimensions(outcome)
    text = f"aimeasure: nothing needs a look against {state.settings.baseline.name}"
    if stable:
        text += "; stable: " + ", ".join(stable)
    if new_count:
        text += f"; {new_count} new items (not in the baseline)"
    return text + "."


_DROP = ("--update-baseline", "--prune-baseline", "--resume", "--rejudge", "--aimeasure-json", "--junitxml")
_RUN_ID = re.compile(r"^(latest|\d{8}T\d{6}Z-[0-9a-f]+)$")


def rerun(state: SessionState, *flags: str) -> str:
    """This session's own command line with ``flags`` added, so the advice runs the same tests."""
    args = list(state.config.invocation_params.args)
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            if _RUN_ID.match(arg) or (not arg.startswith("-") and arg.endswith(".json")):
                continue
        name = arg.split("=", 1)[0]
        if name in _DROP:
            skip_value = "=" not in arg and name not in ("--update-baseline", "--prune-baseline")
            continue
        kept.append(arg)
    if "--ai-judge" not in kept:
        kept.insert(0, "--ai-judge")
    return shlex.join(["pytest", *kept, *flags])


def resume_flag(state: SessionState) -> tuple[str, ...]:
    run_id = state.recording.run_id if state.recording is not None else None
    return (f"--resume={run_id}",) if run_id else ("--resume",)


def next_steps(state: SessionState, outcome: Outcome, new_count: int) -> list[str]:
    kinds = {f.kind for f in outcome.findings}
    steps: list[str] = []
    if "not_comparable" in kinds and not state.settings.update_baseline:
        steps.append(f"the judge (ruler) changed: re-baseline with  {rerun(state, '--update-baseline')}")
    run_id = state.recording.run_id if state.recording is not None else "latest"
    store = state.settings.store
    # The CLI looks in ./.aimeasure by default: name the store when the session used another one.
    store_arg = "" if store == Path.cwd() / ".aimeasure" else f"--store {shlex.quote(str(store))} "
    show = f"aimeasure {store_arg}show {run_id}"
    if kinds & {"floor_breach", "regressed"}:
        steps.append(f"read the artifacts and rationales behind the reds:  {show}")
    if "regressed" in kinds:
        steps.append(f"after a deliberate change, accept it with  {rerun(state, '--update-baseline')}")
    if "improved" in kinds and "regressed" not in kinds:
        steps.append(
            f"the baseline is stale: record the improvement with  {rerun(state, '--update-baseline')}"
        )
    if "judge_error" in kinds:
        steps.append(
            "judge errors leave no score; judge only what is missing with  "
            + rerun(state, *resume_flag(state))
        )
    if "budget" in kinds:
        steps.append(f"raise --judge-budget-usd and continue with  {rerun(state, *resume_flag(state))}")
    if new_count and not state.settings.update_baseline and not steps:
        steps.append(f"record the new items in the baseline with  {rerun(state, '--update-baseline')}")
    if not steps:
        return []
    return ["", "Next:", *(f"  {step}" for step in steps)]


def dry_run_lines(state: SessionState) -> list[str]:
    from pytest_aimeasure.cost import estimate_call_usd

    items = state.dimension_items
    calls = sum(n for _, _, n in items)
    per_dim: Counter[str] = Counter()
    for _, dim, n in items:
        per_dim[dim] += n
    model = state.settings.model or "(no judge model configured)"
    estimate = None
    if state.settings.model is not None:
        one = _estimate_one(state.settings.model, estimate_call_usd)
        estimate = None if one is None else one * calls
    lines = [
        f"aimeasure dry run: {len(items)} dimension items, {calls} judge calls with {model}",
        *tabulate(sorted(per_dim.items()), headers=["dimension", "calls"], tablefmt="simple").splitlines(),
        "estimated cost: "
        + (
            "unknown (no price for this model in litellm's price map)"
            if estimate is None
            else f"${estimate:.4f}"
        )
        + f" (assuming ~{DRY_RUN_PROMPT_CHARS:,} prompt characters a call; nothing was called)",
    ]
    return lines


DRY_RUN_PROMPT_CHARS = 6000


def _estimate_one(model: str, estimate: Any) -> float | None:
    from pytest_aimeasure.judge.resolve import route

    provider = route(model)
    name = model.removeprefix("anthropic/") if provider == "anthropic" else model
    value: float | None = estimate(name, DRY_RUN_PROMPT_CHARS, 1024, provider=provider)
    return value
