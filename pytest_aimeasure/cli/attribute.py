"""``aimeasure attribute BASE_RUN NOW_RUN [--judge-model M] [--json OUT] [--dry-run]``: split the change
between two stored runs into the judge's part and the system's part, without running pytest.

BASE_RUN plays the baseline and NOW_RUN today's session: BASE_RUN's stored artifacts are judged again
with NOW_RUN's judge (or ``--judge-model``), NOW_RUN's rubrics and as many samples as NOW_RUN took
(:mod:`pytest_aimeasure.attribution.split`). Like ``aimeasure calibrate`` it judges with the default prompt (a
conftest's ``pytest_aimeasure_judge_prompt`` is not loaded: an item judged with another prompt is
reported as not attributable) and keeps no journal or sample cache; ``pytest --aimeasure-attribute``
does the same inside a session with both. Exit status: 0 nothing regressed in the system part,
1 a system part regressed, 2 bad input (unknown run, nothing to attribute).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from tabulate import tabulate

from pytest_aimeasure.attribution.rejudge import attribute, count_calls, plan, rubrics_of
from pytest_aimeasure.attribution.split import finding
from pytest_aimeasure.cli.subcommand import CliContext, Subcommand, UsageError
from pytest_aimeasure.measure.models import Measurement
from pytest_aimeasure.store.baseline import BaselineEntry, entry_from_measurement
from pytest_aimeasure.store.fileio import atomic_write
from pytest_aimeasure.store.runs import RunStore, StoreError

__all__ = ["SUBCOMMANDS"]


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base_run", metavar="BASE_RUN", help="the run that plays the baseline (or latest)")
    parser.add_argument("now_run", metavar="NOW_RUN", help="the run whose judge and scores are today's")
    parser.add_argument("--judge-model", metavar="MODEL", help="the judge (default: NOW_RUN's)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the attribution as JSON to OUT")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="per judge call")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="count the judge calls and estimate their cost; call nothing",
    )


def _run(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings
    from pytest_aimeasure.judge.resolve import ModelError, build_backend, route

    store = ctx.store()
    try:
        base = store.open_run(store.resolve(args.base_run))
        now = store.open_run(store.resolve(args.now_run))
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    model = args.judge_model or now.meta.judge_model
    if model is None:
        raise UsageError(f"run {now.run_id} names no judge model: pass --judge-model")
    try:
        route(model)
    except ModelError as exc:
        raise UsageError(f"--judge-model: {exc}") from None
    base_items, now_items = base.items(), now.items()
    entries = {
        m.item_id: entry_from_measurement(m, run_id=base.run_id)
        for r in base_items
        for m in r.measurements
        if m.samples
    }
    measurements = [m for r in now_items for m in r.measurements if m.samples and m.item_id in entries]
    if not measurements:
        raise UsageError(f"runs {base.run_id} and {now.run_id} measured no item in common")
    if args.dry_run:
        return _dry_run(ctx, store, entries, measurements, rubrics_of(now_items), model)
    engine = JudgeEngine(
        JudgeSettings(model=model, timeout=args.timeout, retries=4),
        # The engine retries (and shares a 429's pause among all calls); the SDK must not retry too.
        make_backend=lambda name: build_backend(name, timeout=args.timeout, retries=0),
    )
    try:
        result = attribute(
            engine,
            store,
            entries,
            measurements,
            rubrics_of(now_items),
            dimensions={m.dimension for m in measurements},
            same_judge=args.judge_model is None,  # --judge-model: that judge for every item
            history=[],  # two runs: no pooled sessions to measure the between-session noise from
        )
    finally:
        engine.close()
    ctx.print(f"attribution of {now.run_id} against {base.run_id}, judge {model}: {result.calls} call(s)")
    findings = [finding(a) for a in result.dimensions.values()]
    for f in findings:
        ctx.print(f"[{f.severity}] {f.message}")
        for item_id, why in sorted(f.detail.get("skipped", {}).items()):
            ctx.print(f"    not attributed: {item_id}: {why}")
    if not result.dimensions:
        ctx.print("no dimension could be attributed: none of the base run's artifacts could be rejudged")
    if args.json is not None:
        data = {name: a.model_dump(mode="json") for name, a in sorted(result.dimensions.items())}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.json, json.dumps({"dimensions": data, "calls": result.calls}, indent=2) + "\n")
    return 1 if any(f.severity == "fail" for f in findings) else 0


def _dry_run(
    ctx: CliContext,
    store: RunStore,
    entries: Mapping[str, BaselineEntry],
    measurements: Sequence[Measurement],
    rubrics: Mapping[str, str],
    model: str,
) -> int:
    """What the attribution would judge, at most (no sample cache here), and what it would cost."""
    from pytest_aimeasure.report.terminal import estimated_cost

    planned, skipped = plan(store, entries, measurements, rubrics)
    calls = count_calls(planned)
    ctx.print(
        f"aimeasure attribute dry run: {sum(len(p.texts) for p in planned)} stored artifact(s) of "
        f"{len(planned)} item(s), {sum(calls.values())} judge calls with {model}"
    )
    table = tabulate(sorted(calls.items()), headers=["dimension", "calls"], tablefmt="simple")
    for line in table.splitlines():
        ctx.print(line)
    for item_id, why in sorted(skipped.items()):
        ctx.print(f"    not attributed: {item_id}: {why}")
    ctx.print("estimated cost: " + estimated_cost(model, sum(calls.values())))
    return 0


SUBCOMMANDS = [
    Subcommand(
        "attribute",
        "split the change between two runs into the judge's part and the system's part",
        _add,
        _run,
    )
]
