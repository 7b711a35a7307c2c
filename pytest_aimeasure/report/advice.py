"""What to run next: every piece of advice, derived from the one report model's facts.

The terminal's "Next:" lines (:func:`next_steps`) and the Markdown and HTML "Next" command
(:func:`next_command`) read the same facts (the findings, whether the run wrote the baseline, whether
it was interrupted, the command line), so a run cannot be told two different things.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from pytest_aimeasure.compare.drift import REBASELINE
from pytest_aimeasure.report.model import SessionReport

__all__ = [
    "next_command",
    "next_steps",
    "rebaseline_command",
    "rerun",
    "resume_step",
    "update_advice",
    "wrote_baseline",
]


def wrote_baseline(report: SessionReport) -> bool:
    """This run recorded the baseline (``--update-baseline`` that succeeded)."""
    return report.results.baseline.get("update") is not None


def rebaseline_command(report: SessionReport) -> str:
    """This session's command with ``--update-baseline`` (a stored run's: its judge kept)."""
    if report.args:
        return rerun(report, "--update-baseline")
    model = report.results.judge_model
    if model:
        judge = f"--judge-model {shlex.quote(model)} --update-baseline"
        return REBASELINE.replace("--update-baseline", judge)
    return REBASELINE


_DROP = (
    "--update-baseline",
    "--prune-baseline",
    "--aimeasure-resume",
    "--aimeasure-rejudge",
    "--aimeasure-json",
    "--junitxml",
    "--junit-xml",
)
_TAKES_PATH = ("--aimeasure-json", "--junitxml", "--junit-xml")  # always followed by their value
_RUN_ID = re.compile(r"^(latest|\d{8}T\d{6}Z-[0-9a-f]+)$")


def rerun(summary: SessionReport, *flags: str) -> str:
    """This session's own command line with ``flags`` added, so the advice runs the same tests."""
    args = list(summary.args)
    kept: list[str] = []
    skip_value: str | None = None
    for arg in args:
        if skip_value is not None:
            flag, skip_value = skip_value, None
            if flag in _TAKES_PATH or _RUN_ID.match(arg):
                continue
        name = arg.partition("=")[0]
        if name in _DROP:
            if "=" not in arg and name not in ("--update-baseline", "--prune-baseline"):
                skip_value = name
            continue
        kept.append(arg)
    if "--ai-judge" not in kept:
        kept.insert(0, "--ai-judge")
    return shlex.join(["pytest", *kept, *flags])


def resume_flag(summary: SessionReport) -> tuple[str, ...]:
    run_id = summary.results.run_id
    return (f"--aimeasure-resume={run_id}",) if run_id else ("--aimeasure-resume",)


def update_advice(summary: SessionReport) -> str:
    """This session's command with --update-baseline, and what it would remove besides updating.

    The advice never hides a removal: an update removes only the entries of tests that no longer
    exist in a whole-suite run (``summary.gone``), and it says so when there are any.
    """
    command = rerun(summary, "--update-baseline")
    if summary.gone:
        command += (
            f"  (it also drops the {len(summary.gone)} baseline entries of tests that no longer exist: "
            + ", ".join(summary.gone[:3])
            + (", …" if len(summary.gone) > 3 else "")
            + ")"
        )
    return command


def resume_step(summary: SessionReport) -> str | None:
    """After an interruption, the command that continues the run."""
    if not summary.interrupted or summary.results.run_id is None:
        return None
    # What was judged is journaled: the rest is judged by resuming, without paying twice.
    return (
        f"run {summary.results.run_id} was interrupted: continue it with  "
        + rerun(summary, *resume_flag(summary))
    )


def next_steps(summary: SessionReport, new_count: int) -> list[str]:
    kinds = {f.kind for f in summary.results.findings}
    steps: list[str] = []
    resume = resume_step(summary)
    if resume is not None:
        steps.append(resume)
    if "not_comparable" in kinds and not summary.settings.update_baseline:
        steps.append(f"the judge (ruler) changed: re-baseline with  {update_advice(summary)}")
    run_id = summary.results.run_id or "latest"
    store = summary.settings.store
    # The CLI looks in ./.aimeasure by default: name the store when the session used another one.
    store_arg = "" if store == Path.cwd() / ".aimeasure" else f"--store {shlex.quote(str(store))} "
    show = f"aimeasure {store_arg}show {run_id}"
    if kinds & {"floor_breach", "regressed"}:
        steps.append(f"read the artifacts and rationales behind the reds:  {show}")
    if "regressed" in kinds:
        steps.append(f"after a deliberate change, accept it with  {update_advice(summary)}")
    if "improved" in kinds and "regressed" not in kinds:
        steps.append(
            f"the baseline is stale: record the improvement with  {update_advice(summary)}"
        )
    if "judge_error" in kinds:
        steps.append(
            "judge errors leave no score; judge only what is missing with  "
            + rerun(summary, *resume_flag(summary))
        )
    if "budget" in kinds:
        steps.append(f"raise --judge-budget-usd and continue with  {rerun(summary, *resume_flag(summary))}")
    if summary.gone and not summary.settings.update_baseline and not steps:
        steps.append(
            f"{len(summary.gone)} baseline entries belong to tests that no longer exist; if they were "
            f"removed or renamed on purpose, drop them with  {rerun(summary, '--update-baseline')}"
        )
    if new_count and not summary.settings.update_baseline and not steps:
        steps.append(f"record the new items in the baseline with  {update_advice(summary)}")
    if not steps:
        return []
    return ["", "Next:", *(f"  {step}" for step in steps)]


def next_command(report: SessionReport) -> str:
    """What to run next, given how the session ended."""
    results = report.results
    kinds = {f.kind for f in results.findings if f.severity in ("fail", "warn")}
    run = results.run_id or "latest"
    rebaseline = rebaseline_command(report)
    if ("not_comparable" in kinds or "improved" in kinds) and not wrote_baseline(report):
        return f"{rebaseline}   # the judge changed or the baseline is stale: re-baseline, then commit it"
    if not results.passed:
        return f"aimeasure show {run}   # then: aimeasure report {run} -o aimeasure-report.html"
    all_new = results.dimensions and all(d.verdict == "new" for d in results.dimensions.values())
    if all_new and not wrote_baseline(report):
        return f"{rebaseline}   # record the first baseline, then commit it"
    return f"aimeasure report {run} -o aimeasure-report.html   # trends and every sample"


