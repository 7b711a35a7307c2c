"""``aimeasure report``, ``summary``, ``merge`` and ``diff``: the reports from stored runs and shards.

* ``aimeasure report [RUN ...] -o PATH`` writes the HTML report of the newest run given (default: the
  latest), with trends across the runs given (default: the store's runs up to it). ``--results FILE``
  reports a results file instead (a merge's, a CI artifact); ``--calibration FILE`` adds calibration
  figures (a JSON list of :class:`~pytest_aimeasure.report.results.CalibrationFigure`).
* ``aimeasure summary [RUN] --markdown`` prints the Markdown summary the session appends to
  ``GITHUB_STEP_SUMMARY``.
* ``aimeasure merge RESULTS.json... -o merged.json`` merges CI shards into one session: one
  comparison, one verdict (exit status 1 when it failed), ``--update-baseline`` once.
* ``aimeasure diff RUN RUN ITEM`` shows one item's artifacts, scores and rationales side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import textwrap
from pathlib import Path

from pydantic import TypeAdapter, ValidationError
from tabulate import tabulate

from pytest_aimeasure.cli.subcommand import CliContext, Subcommand, UsageError
from pytest_aimeasure.measure.models import first_error
from pytest_aimeasure.report.results import CalibrationFigure, SessionResults, read_results, write_results
from pytest_aimeasure.store.runs import Run, RunStore, StoreError

__all__ = ["SUBCOMMANDS"]

EXIT_FAILED = 1
SIDE_WIDTH = 58


def _resolve(store: RunStore, ref: str) -> str:
    try:
        return store.resolve(ref)
    except StoreError as exc:
        raise UsageError(str(exc)) from exc


def _results_file(path: Path) -> SessionResults:
    try:
        return read_results(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _run_results(store: RunStore, run_id: str) -> SessionResults:
    from pytest_aimeasure.report.trends import results_of_run

    run = store.open_run(run_id)
    try:
        return results_of_run(run)
    finally:
        run.close()


def _calibration(path: Path | None) -> list[CalibrationFigure] | None:
    if path is None:
        return None
    try:
        return TypeAdapter(list[CalibrationFigure]).validate_json(path.read_bytes())
    except OSError as exc:
        raise UsageError(f"--calibration {path}: cannot read: {exc.strerror or exc}") from exc
    except ValidationError as exc:
        raise UsageError(
            f"--calibration {path}: expected a JSON list of calibration figures "
            f"({{dimension, anchors, agreement, bias, bins}}): {first_error(exc)}"
        ) from exc


# -- report ----------------------------------------------------------------------------------------
def _add_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", nargs="*", metavar="RUN_ID", help="runs to report (default: latest); trends span them"
    )
    parser.add_argument(
        "-o", "--output", type=Path, required=True, metavar="PATH", help="the HTML file to write"
    )
    parser.add_argument(
        "--results", type=Path, metavar="FILE", help="report this results file (e.g. a merge)"
    )
    parser.add_argument("--calibration", type=Path, metavar="FILE", help="calibration figures (JSON list)")
    parser.add_argument(
        "--trend-runs", type=int, default=30, metavar="N", help="at most N runs in trends (default 30)"
    )


def _run_report(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.report.charts import ReportDependencyError

    try:
        from pytest_aimeasure.report.html import write_html
        from pytest_aimeasure.report.trends import load_runs, trends, trends_from_store
    except ReportDependencyError as exc:
        raise UsageError(str(exc)) from exc
    store = ctx.store()
    calibration = _calibration(args.calibration)
    problems: list[str] = []
    if args.results is not None:
        results = _results_file(args.results)
        ids = [_resolve(store, r) for r in args.runs]
        runs, problems = load_runs(store, ids)
        series = trends(runs) if runs else None
    elif args.runs:
        ids = list(dict.fromkeys(_resolve(store, r) for r in args.runs))
        runs, problems = load_runs(store, ids)
        if not runs:
            raise UsageError("none of the runs could be read: " + "; ".join(problems))
        results = runs[-1][1]
        series = trends(runs, var_floor=results.var_floor)
    else:
        if not store.run_ids():
            raise UsageError(f"no runs in {ctx.store_path} yet; run pytest with --ai-judge to record one")
        run_id = _resolve(store, "latest")
        results = _run_results(store, run_id)
        series = trends_from_store(store.root, upto=run_id, limit=args.trend_runs)
    try:
        path = write_html(args.output, results, trends=series, calibration=calibration)
    except ReportDependencyError as exc:
        raise UsageError(str(exc)) from exc
    ctx.print(f"wrote {path} ({os.path.getsize(path) / 1024:.0f} kB)")
    for problem in problems:
        print(f"problem: {problem}", file=ctx.err)
    return 0


# -- summary ---------------------------------------------------------------------------------------
def _add_summary(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run", nargs="?", default="latest", metavar="RUN_ID", help="the run (default: latest)"
    )
    parser.add_argument("--markdown", action="store_true", help="Markdown (the only format; the default)")
    parser.add_argument("--results", type=Path, metavar="FILE", help="summarise this results file instead")


def _run_summary(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.report.markdown import summary_markdown

    if args.results is not None:
        results = _results_file(args.results)
    else:
        store = ctx.store()
        if not store.run_ids():
            raise UsageError(f"no runs in {ctx.store_path} yet; run pytest with --ai-judge to record one")
        results = _run_results(store, _resolve(store, args.run))
    ctx.out.write(summary_markdown(results))
    return 0


# -- merge -----------------------------------------------------------------------------------------
def _add_merge(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "shards", nargs="+", type=Path, metavar="RESULTS.json", help="the shards' --aimeasure-json files"
    )
    parser.add_argument("-o", "--output", type=Path, metavar="PATH", help="write the merged results here")
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="PATH",
        help="the baseline (default: the shards', else ./aimeasure-baseline.json)",
    )
    parser.add_argument(
        "--update-baseline", action="store_true", help="record the merged measurements in the baseline"
    )
    parser.add_argument(
        "--prune-baseline", action="store_true", help="with --update-baseline: drop entries not measured"
    )
    parser.add_argument(
        "--partial",
        action="store_true",
        help="the shards do not cover the whole suite: report no missing items, prune nothing",
    )
    parser.add_argument(
        "--html", type=Path, metavar="PATH", help="also write the merged session's HTML report"
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="print the Markdown summary (and append it to GITHUB_STEP_SUMMARY when set)",
    )


def _run_merge(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.report.publish import STEP_SUMMARY_ENV, append_step_summary
    from pytest_aimeasure.session.merge import MergeError, merge

    shards = [(str(path), _results_file(path)) for path in args.shards]
    baseline = args.baseline
    if baseline is None:
        recorded = Path(str(shards[0][1].baseline.get("path") or ""))
        baseline = recorded if recorded.name and recorded.is_file() else Path("aimeasure-baseline.json")
    try:
        merged = merge(
            shards,
            baseline_path=baseline,
            whole_suite=not args.partial,
            update=args.update_baseline,
            prune=args.prune_baseline,
        )
    except MergeError as exc:
        raise UsageError(str(exc)) from exc
    if args.output is not None:
        write_results(args.output, merged)
    if args.html is not None:
        from pytest_aimeasure.report.html import write_html

        write_html(args.html, merged)
    if args.markdown:
        from pytest_aimeasure.report.markdown import summary_markdown

        ctx.out.write(summary_markdown(merged))
        append_step_summary(merged, os.environ.get(STEP_SUMMARY_ENV))
    update = merged.baseline.get("update")
    verdict = "passed" if merged.passed else "failed: " + "; ".join(merged.failed_because)
    ctx.print(f"merged {len(shards)} shards, {len(merged.items)} tests: {verdict}")
    if update:
        ctx.print(
            f"baseline {baseline}: {len(update['added'])} added, {len(update['updated'])} updated, "
            f"{len(update['removed'])} removed{'' if update['written'] else ' (unchanged)'}"
        )
    return 0 if merged.passed else EXIT_FAILED


# -- diff ------------------------------------------------------------------------------------------
def _add_diff(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", metavar="RUN_ID")
    parser.add_argument("after", metavar="RUN_ID")
    parser.add_argument(
        "item", metavar="ITEM", help="an item id (dimension::nodeid), a node id, or a unique part of one"
    )


def _find_item(results: SessionResults, ref: str, run_id: str) -> tuple[str, str] | None:
    """(item id, nodeid) of the measured item ``ref`` names in one run."""
    exact = [i for i in results.items if ref in (i.item_id, i.nodeid)]
    measured = [
        (m.item_id, i.nodeid) for i in (exact or results.items) for m in i.measurements if ref in m.item_id
    ]
    if exact:
        return (exact[0].item_id or exact[0].nodeid, exact[0].nodeid)
    unique = sorted(set(measured))
    if len(unique) > 1:
        raise UsageError(
            f"{ref!r} matches {len(unique)} items in {run_id}: " + ", ".join(i for i, _ in unique[:8])
        )
    return unique[0] if unique else None


def _side(run: Run, results: SessionResults, item_id: str | None) -> str:
    if item_id is None:
        return "(not in this run)"
    parts: list[str] = []
    for item in results.items:
        for m in item.measurements:
            if m.item_id != item_id:
                continue
            parts.append(
                f"{m.dimension}: {m.mean:.2f} [{m.ci_low:.2f}, {m.ci_high:.2f}] n={m.n}, floor {m.floor:g}"
            )
            parts.append(f"judge {m.fingerprint.provider}/{m.fingerprint.model}")
            for s in m.samples:
                parts.append(f"#{s.index} scored {s.score}: {s.rationale}")
            text = None
            for key in item.artifact_keys:
                loaded = run.load_artifact(key)
                if loaded is not None:
                    text = loaded if isinstance(loaded, str) else f"({len(loaded)} bytes of binary content)"
                    parts.append(f"artifact {key}:")
                    parts.append(text)
            if text is None and m.excerpt:
                parts += ["artifact excerpt:", m.excerpt]
    if not parts:
        return "(not measured in this run)"
    return "\n".join(
        "\n".join(textwrap.wrap(line, SIDE_WIDTH, replace_whitespace=False) or [""])
        for line in "\n".join(parts).splitlines()
    )


def _run_diff(args: argparse.Namespace, ctx: CliContext) -> int:
    store = ctx.store()
    ids = [_resolve(store, args.before), _resolve(store, args.after)]
    runs = [store.open_run(i) for i in ids]
    try:
        results = [_run_results(store, i) for i in ids]
        found = [_find_item(r, args.item, i) for r, i in zip(results, ids, strict=True)]
        if found[0] is None and found[1] is None:
            raise UsageError(f"no measured item matches {args.item!r} in {ids[0]} or {ids[1]}")
        item_id = (found[1] or found[0] or ("", ""))[0]
        sides = [
            _side(run, r, item_id if f is not None else None)
            for run, r, f in zip(runs, results, found, strict=True)
        ]
    finally:
        for run in runs:
            run.close()
    ctx.print(f"{item_id}")
    from pytest_aimeasure.report.rundiff import compare_runs

    c = compare_runs(results[0], results[1]).items.get(item_id)
    if c is not None and c.delta is not None and c.delta_ci is not None:
        ctx.print(f"Δ {c.delta:+.2f} (95% CI [{c.delta_ci[0]:+.2f}, {c.delta_ci[1]:+.2f}]): {c.verdict}")
    elif c is not None:
        ctx.print(
            f"verdict: {c.verdict}"
            + (f" ({', '.join(c.changed_fields)} changed)" if c.changed_fields else "")
        )
    ctx.print(tabulate([sides], headers=ids, tablefmt="grid", disable_numparse=True))
    return 0


def _json(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


SUBCOMMANDS = [
    Subcommand("report", "write the self-contained HTML report of stored runs", _add_report, _run_report),
    Subcommand(
        "summary", "print a run's Markdown summary (as on GitHub's job summary)", _add_summary, _run_summary
    ),
    Subcommand("merge", "merge CI shards' results into one session and verdict", _add_merge, _run_merge),
    Subcommand("diff", "one item's artifacts and rationales in two runs, side by side", _add_diff, _run_diff),
]
