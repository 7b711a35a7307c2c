"""``aimeasure compare`` and ``aimeasure init``: suite tables from stored runs, and the probes suite.

``aimeasure compare RUN_ID [RUN_ID ...]`` prints, per suite, one row per run and target (labelled
``run/target``), so the same target before and after a model update sits side by side. Run ids may
be unique prefixes or ``latest``; an unknown one exits with status 2 and lists the known runs.

``aimeasure init probes [PATH]`` writes the 12-probe behavioural baseline as a suite file (default
``probes.aimeasure.yaml``; a directory gets that name inside it). It never overwrites a file
without ``--force``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_aimeasure.cli.subcommand import CliContext, Subcommand, UsageError
from pytest_aimeasure.store.runs import RunStore, StoreError

if TYPE_CHECKING:
    from pytest_aimeasure.compare.drift import Comparison

__all__ = ["SUBCOMMANDS"]


def _add_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_ID",
        help="run ids (a unique prefix, or 'latest'), oldest first; two runs of plain tests: item by item",
    )
    parser.add_argument("--json", action="store_true", help="print the tables as JSON instead")


def _run_compare(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.report.targets import render_tables, tables_from_runs

    store = ctx.store()
    run_ids: list[str] = []
    for ref in args.runs:
        try:
            run_id = store.resolve(ref)
        except StoreError as exc:
            raise UsageError(str(exc)) from exc
        if run_id not in run_ids:
            run_ids.append(run_id)
    tables, problems = tables_from_runs(store, run_ids)
    # Two runs with plain (non-suite) dimension tests: item by item, the earlier run as the baseline.
    pair = _plain_pair(store, run_ids) if len(run_ids) == 2 else None
    if args.json:
        data = tables if pair is None else {"tables": tables, "items": pair[0].model_dump(mode="json")}
        ctx.print(json.dumps(data, indent=2, sort_keys=True))
    elif not tables and pair is None:
        ctx.print(
            f"no suite results and no judged tests in common in {', '.join(run_ids)}: give two runs "
            "of the same tests, or runs of a *.aimeasure.yaml suite"
        )
    else:
        for line in render_tables(tables):
            ctx.print(line)
        if pair is not None:
            from pytest_aimeasure.report.rundiff import render_comparison

            if tables:
                ctx.print("")
            for line in render_comparison(pair[0], *run_ids):
                ctx.print(line)
    for problem in problems:
        print(f"problem: {problem}", file=ctx.err)
    return 0


def _plain_pair(store: RunStore, run_ids: list[str]) -> tuple[Comparison] | None:
    """The item-by-item comparison of two runs, when they measured plain (non-suite) tests."""
    from pytest_aimeasure.report.rundiff import compare_runs
    from pytest_aimeasure.report.trends import results_of_run

    loaded = []
    for run_id in run_ids:
        run = store.open_run(run_id)
        try:
            loaded.append(results_of_run(run))
        finally:
            run.close()
    if not any(i.measurements and not i.extra.get("suite") for r in loaded for i in r.items):
        return None
    return (compare_runs(loaded[0], loaded[1]),)


def _add_init(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["probes"], help="what to write: the 12-probe behavioural baseline")
    parser.add_argument(
        "path", nargs="?", type=Path, default=None, help="the file to write (default probes.aimeasure.yaml)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="MODEL",
        help="a model to compare (repeatable), e.g. openai/gpt-4o-mini; replaces the offline targets",
    )


def _run_init(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.suites.model import SuiteFormatError, parse_suite
    from pytest_aimeasure.suites.probes import DEFAULT_FILENAME, ProbesExist, probes_text, write_probes

    path: Path = args.path if args.path is not None else Path(DEFAULT_FILENAME)
    try:
        # Check the result before writing: a --target the format rejects must not leave a broken file.
        parse_suite(probes_text(args.target or None), path)
    except SuiteFormatError as exc:
        raise UsageError(str(exc)) from exc
    try:
        written = write_probes(path, force=args.force, models=args.target or None)
    except ProbesExist as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc}") from exc
    ctx.print(f"wrote {written}: 12 probes, targets: {', '.join(args.target) or 'reference, echo (offline)'}")
    if not written.name.endswith((".aimeasure.yaml", ".aimeasure.yml")):
        ctx.print("note: pytest collects suite files named *.aimeasure.yaml only; rename it to run it")
    if args.target:
        ctx.print(
            f"run it with:  pytest {written} --ai-judge --judge-model MODEL   (a judge from another family)"
        )
    else:
        ctx.print(f"run it with:  pytest {written} --ai-judge --judge-model scripted   (offline)")
    return 0


SUBCOMMANDS = [
    Subcommand(
        "compare",
        "stored runs side by side: suite tables, or two runs item by item",
        _add_compare,
        _run_compare,
    ),
    Subcommand("init", "write a suite file: the 12-probe behavioural baseline", _add_init, _run_init),
]
