"""The ``aimeasure`` command: look at the run store without running pytest.

``aimeasure history``, ``show RUN``, ``trend DIMENSION``, ``delete RUN``, ``cache rebuild``; global
``--store PATH`` (default: the store a pytest session started here would use: the ``aimeasure_store``
ini value of the project's pytest config, found in this folder or a parent as pytest finds its
rootdir, else ``.aimeasure`` at that rootdir).

Adding a subcommand from another module (``compare``, ``init``...): define a module-level
``SUBCOMMANDS`` sequence of :class:`~pytest_aimeasure.cli.subcommand.Subcommand` and list the module in
:data:`EXTENSION_MODULES`; the module imports :mod:`pytest_aimeasure.cli.subcommand`, never this one.
:func:`commands` imports each listed module when the command line is parsed; a module that does not
exist yet is skipped, a module that fails to import for another reason is an error. For example::

    # pytest_aimeasure/cli/suites.py
    from pytest_aimeasure.cli.subcommand import CliContext, Subcommand

    def _add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--force", action="store_true")

    def _run(args: argparse.Namespace, ctx: CliContext) -> int:
        ctx.print("...")  # ctx.store() opens the run store; ctx.store_path is where it lives
        return 0

    SUBCOMMANDS = [Subcommand("init", "create an example suite", _add, _run)]

Exit codes: 0 success (an empty store is not an error), 1 the store could not be read, 2 usage
errors such as an unknown run id or dimension.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pytest_aimeasure.cli.subcommand import (
    EXIT_OK,
    EXIT_STORE,
    EXIT_USAGE,
    CliContext,
    Subcommand,
    UsageError,
)
from pytest_aimeasure.measure.models import ItemResult, Measurement, RunMeta
from pytest_aimeasure.store.rootdir import ConfigFileError, locate
from pytest_aimeasure.store.runs import Run, StoreError

# CliContext, Subcommand, UsageError and the exit codes stay importable from here too.
__all__ = ["EXTENSION_MODULES", "CliContext", "Subcommand", "UsageError", "commands", "main"]

EXTENSION_MODULES: tuple[str, ...] = (
    "pytest_aimeasure.cli.suites",
    "pytest_aimeasure.compare_cli",
    "pytest_aimeasure.cli.reports",
    "pytest_aimeasure.cli.calibrate",
    "pytest_aimeasure.cli.attribute",
    "pytest_aimeasure.cli.label",
)
DEFAULT_STORE = ".aimeasure"
INI_KEY = "aimeasure_store"
RATIONALE_CHARS = 70


# --------------------------------------------------------------------------------------------------
# Finding the store
# --------------------------------------------------------------------------------------------------


def default_store_path(cwd: Path | None = None) -> Path:
    """The store a pytest session started in ``cwd`` would use: the ``aimeasure_store`` ini value of
    the project's pytest config (searched for in ``cwd`` and its parents, as pytest finds its rootdir),
    relative to that rootdir; else ``.aimeasure`` at the rootdir."""
    try:
        project = locate(cwd or Path.cwd())
    except ConfigFileError as exc:
        raise UsageError(f"{exc} (or name the store with --store PATH)") from None
    return project.path(INI_KEY) or project.rootdir / DEFAULT_STORE


# --------------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------------


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _when(text: str) -> str:
    moment = _parse_time(text)
    return moment.strftime("%Y-%m-%d %H:%M") if moment else text


def _duration(meta: RunMeta) -> str:
    start, end = _parse_time(meta.started_at), _parse_time(meta.ended_at)
    if start is None or end is None:
        return "—"
    seconds = max(int((end - start).total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def _commit(meta: RunMeta) -> str:
    if not meta.git_commit:
        return "—"
    return meta.git_commit[:10] + ("+dirty" if meta.git_dirty else "")


def _money(value: float | None) -> str:
    if value is None:
        return "unknown"
    if value == 0:
        return "$0"
    return "<$0.0001" if value < 0.0001 else f"${value:.4f}"


def _one_line(text: str, limit: int = RATIONALE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _table(rows: list[list[str]], headers: list[str]) -> str:
    # disable_numparse: commit hashes like "1234e567" and ids must not be reformatted as numbers.
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def _estimate(m: Measurement) -> str:
    half = max(m.mean - m.ci_low, m.ci_high - m.mean)
    return f"{m.mean:.2f} ± {half:.2f} (n={m.n})"


# --------------------------------------------------------------------------------------------------
# history
# --------------------------------------------------------------------------------------------------


def _add_history(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=20, help="show at most N runs (0: all; default 20)")
    parser.add_argument("--json", action="store_true", help="print the runs' metadata as JSON")


RESULT_WIDTH = 70


def _result(meta: RunMeta) -> str:
    """'passed', or 'failed: <first reason> (+N more)'; 'interrupted' for a run interrupted before it
    could conclude (resume it), '—' for a run never concluded (or older)."""
    if meta.passed is None:
        return "interrupted: resume it with --aimeasure-resume" if meta.status == "interrupted" else "—"
    if meta.passed:
        return "passed"
    reasons = meta.failed_because or ["(no reason recorded)"]
    text = f"failed: {reasons[0]}"
    if len(text) > RESULT_WIDTH:
        text = text[: RESULT_WIDTH - 1] + "…"
    if len(reasons) > 1:
        text += f" (+{len(reasons) - 1} more)"
    return text


def _run_history(args: argparse.Namespace, ctx: CliContext) -> int:
    metas, problems = ctx.store().list_runs()
    if args.json:
        chosen = metas if args.limit <= 0 else metas[: args.limit]
        data = {"runs": [m.model_dump(mode="json") for m in chosen], "problems": [str(p) for p in problems]}
        ctx.print(json.dumps(data, indent=2, sort_keys=True))
        return EXIT_OK
    if not metas and not problems:
        ctx.print(f"no runs in {ctx.store_path} yet; run pytest with the aimeasure plugin to record one")
        return EXIT_OK
    shown = metas if args.limit <= 0 else metas[: args.limit]
    rows = [
        [
            m.run_id,
            _when(m.started_at),
            _duration(m),
            _commit(m),
            m.judge_model or "—",
            str(m.items),
            str(m.failures),
            _money(m.spend_usd),
            m.status,
            _result(m),
        ]
        for m in shown
    ]
    headers = [
        "run",
        "started (UTC)",
        "duration",
        "commit",
        "judge",
        "items",
        "failures",
        "spend",
        "status",
        "result",
    ]
    if rows:
        ctx.print(_table(rows, headers))
    if len(shown) < len(metas):
        ctx.print(f"({len(shown)} of {len(metas)} runs; --limit 0 shows all)")
    for problem in problems:
        ctx.print(f"broken: {problem}")
    return EXIT_OK


# --------------------------------------------------------------------------------------------------
# show
# --------------------------------------------------------------------------------------------------


def _add_run_ref(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN_ID", help="a run id, a unique prefix of one, or 'latest'")


def _add_show(parser: argparse.ArgumentParser) -> None:
    _add_run_ref(parser)
    parser.add_argument("--json", action="store_true", help="print the run's metadata and items as JSON")


def _open(ctx: CliContext, ref: str) -> Run:
    store = ctx.store()
    try:
        return store.open_run(store.resolve(ref))
    except StoreError as exc:
        raise UsageError(str(exc)) from exc


def _judge_line(meta: RunMeta) -> str:
    """Each judge the run used once: a run has a ruler per dimension (its rubric), most of them the
    same model at the same temperature."""
    judges = list(dict.fromkeys(f"{fp.provider}/{fp.model} T={fp.temperature}" for fp in meta.fingerprints))
    configured = meta.judge_model
    if not judges:
        return configured or "no judge model recorded"
    named = {name for fp in meta.fingerprints for name in (fp.model, f"{fp.provider}/{fp.model}")}
    if configured is None or configured in named:
        return ", ".join(judges)
    # The provider answered as another model (an alias resolved to a dated one): both are facts.
    return f"{configured} ({', '.join(judges)})"


def _run_show(args: argparse.Namespace, ctx: CliContext) -> int:
    store = ctx.store()
    if args.run == "latest" and not store.run_ids():
        ctx.print(f"no runs in {ctx.store_path} yet; run pytest with the aimeasure plugin to record one")
        return EXIT_OK
    run = _open(ctx, args.run)
    meta = next((m for m in store.list_runs()[0] if m.run_id == run.run_id), run.meta)
    items, item_problems = run.read_items()
    if args.json:
        data = {
            "meta": meta.model_dump(mode="json"),
            "items": [i.model_dump(mode="json") for i in items],
            "problems": item_problems,
        }
        ctx.print(json.dumps(data, indent=2, sort_keys=True))
        return EXIT_OK
    ctx.print(
        f"run {meta.run_id}: {meta.status}, started {_when(meta.started_at)} UTC ({_duration(meta)}), "
        f"commit {_commit(meta)}"
    )
    ctx.print(
        f"judge: {_judge_line(meta)}; {meta.judge_calls} calls, {meta.reused_samples} samples reused, "
        f"spend {_money(meta.spend_usd)}"
    )
    if meta.passed is not None:
        ctx.print("result: " + ("passed" if meta.passed else "failed: " + "; ".join(meta.failed_because)))
    for label, other in (("resumed from", meta.resumed_from), ("rejudge of", meta.rejudge_of)):
        if other:
            ctx.print(f"{label} {other}")
    # Suite items measure their dimensions inside the item: they belong with the dimensions.
    measured = [i for i in items if i.kind == "dimension" or "suite" in i.extra]
    _show_dimensions(ctx, measured)
    _show_gates(ctx, [i for i in items if i not in measured])
    _show_findings(ctx, run, items)
    _show_record(ctx, run, items, item_problems)
    return EXIT_OK


def _show_dimensions(ctx: CliContext, items: list[ItemResult]) -> None:
    if not items:
        return
    rows: list[list[str]] = []
    for item in items:
        if not item.measurements:
            rows.append([item.nodeid, item.outcome, "—", "—", _one_line(item.message or "not measured")])
            continue
        for m in item.measurements:
            low = m.lowest
            rows.append(
                [
                    f"{item.nodeid} / {m.dimension}",
                    item.outcome,
                    _estimate(m),
                    f"{m.floor:.1f}",
                    f"{low.score}: {_one_line(low.rationale)}",
                ]
            )
    ctx.print("\ndimensions")
    ctx.print(_table(rows, ["item", "outcome", "mean ± 95% CI (n)", "floor", "lowest sample"]))


def _show_gates(ctx: CliContext, items: list[ItemResult]) -> None:
    if not items:
        return
    rows = [[i.nodeid, i.kind, i.outcome, _one_line(i.message or "", 90)] for i in items]
    ctx.print("\ngates and other tests")
    ctx.print(_table(rows, ["test", "kind", "outcome", "message"]))


def _show_findings(ctx: CliContext, run: Run, items: list[ItemResult]) -> None:
    """The session's findings (its ``results.json``: a floor breach, a failed gate and a drift are the
    session's, not an item's): each red whole, with the judge's rationale and the artifact excerpt
    (what the session's "Next:" sends the reader here for), the rest a line each. A run that did
    not reach its end has its items' own findings."""
    from pytest_aimeasure.report.terminal import finding_lines
    from pytest_aimeasure.report.trends import results_of_run

    try:
        findings = results_of_run(run).findings
    except StoreError as exc:
        ctx.print(f"\n{exc}: the findings below are the items' own")
        findings = [f for item in items for f in item.findings]
    reds = [f for f in findings if f.severity == "fail"]
    if reds:
        ctx.print("\nreds: read the artifact, not the score")
        for f in reds:
            ctx.print("\n".join(finding_lines(f)))
    rest = sorted((f for f in findings if f.severity != "fail"), key=lambda f: f.severity != "warn")
    if rest:
        ctx.print("\nfindings")
        for f in rest:
            ctx.print(f"  {f.severity:4} {f.kind}  {f.subject}: {_one_line(f.message, 160)}")


def _show_record(ctx: CliContext, run: Run, items: list[ItemResult], problems: list[str]) -> None:
    samples, sample_problems = run.samples()
    finished = {i.item_id for i in items if i.item_id} | {i.nodeid for i in items}
    pending = {s.item_id for s in samples if s.item_id not in finished and s.nodeid not in finished}
    journals = len(list(run.path.glob("journal-*.jsonl")))
    line = f"\njournal: {len(samples)} samples in {journals} file(s); artifacts: {len(run.artifacts())}"
    if pending:
        line += (
            f"; {len(pending)} item(s) have journaled samples but no result (interrupted before they ended)"
        )
    ctx.print(line)
    for problem in problems + sample_problems:
        ctx.print(f"problem: {problem}")


# --------------------------------------------------------------------------------------------------
# trend
# --------------------------------------------------------------------------------------------------


def _add_trend(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dimension", help="the dimension to follow across runs")
    parser.add_argument("--limit", type=int, default=0, help="only the newest N runs (default: all)")


def _run_trend(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.report.model import interval_text
    from pytest_aimeasure.report.trends import load_runs, trends

    store = ctx.store()
    metas, _ = store.list_runs()
    if not metas:
        ctx.print(f"no runs in {ctx.store_path} yet; run pytest with the aimeasure plugin to record one")
        return EXIT_OK
    chosen = metas if args.limit <= 0 else metas[: args.limit]
    started = {m.run_id: _when(m.started_at) for m in chosen}
    runs, problems = load_runs(store, [m.run_id for m in chosen])
    for problem in problems:
        ctx.print(f"skipped: {problem}")
    every = trends(runs)
    lines = sorted((s for s in every.values() if s.dimension == args.dimension), key=lambda s: s.target or "")
    if not lines:
        names = ", ".join(sorted({s.dimension for s in every.values()})) or "none recorded yet"
        raise UsageError(f"no run measured dimension {args.dimension!r}; known dimensions: {names}")
    ctx.print(f"{args.dimension}: mean of item means per run, oldest first")
    for line in lines:
        if line.target is not None:  # a suite's targets answer the same probes: one line each
            ctx.print(f"target {line.target}:")
        rows = [
            [
                run_id,
                started[run_id],
                interval_text(p.mean, (p.ci_low, p.ci_high)),
                str(m),
                p.judge,
                f"changed: {', '.join(p.ruler_changed)}" if p.ruler_changed else "",
            ]
            for run_id, p, m in zip(line.runs, line.points, line.items, strict=True)
        ]
        ctx.print(_table(rows, ["run", "started (UTC)", "mean, 95% CI", "items", "judge", "ruler"]))
    ctx.print(
        "CI: t interval of the dimension mean (the larger of measurement noise and item spread), cut to "
        "the 1-5 scale. Rows after a ruler change are measured with a different instrument: compare "
        "with care."
    )
    return EXIT_OK


# --------------------------------------------------------------------------------------------------
# delete, cache
# --------------------------------------------------------------------------------------------------


def _add_run_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN_ID", help="the full run id (no prefixes: deleting is final)")


def _run_delete(args: argparse.Namespace, ctx: CliContext) -> int:
    store = ctx.store()
    if args.run not in store.run_ids():
        try:
            full = store.resolve(args.run)
        except StoreError as exc:
            raise UsageError(str(exc)) from exc
        raise UsageError(f"delete needs the full run id; did you mean {full}?")
    store.delete_run(args.run)
    ctx.print(f"deleted run {args.run} (its artifacts stay in the store: they are shared by content)")
    return EXIT_OK


def _add_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["rebuild"], help="rebuild: re-index every run journal")


def _run_cache(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.store.cache import rebuild_cache

    store = ctx.store()
    store.ensure_writable()
    count, problems = rebuild_cache(store)
    ctx.print(f"rebuilt {store.cache_path}: {count} samples indexed")
    for problem in problems:
        ctx.print(f"problem: {problem}")
    return EXIT_OK


BUILTIN: tuple[Subcommand, ...] = (
    Subcommand("history", "list runs, newest first", _add_history, _run_history),
    Subcommand("show", "one run's items, scores, gates and findings", _add_show, _run_show),
    Subcommand("trend", "one dimension's mean across runs", _add_trend, _run_trend),
    Subcommand("delete", "delete one run", _add_run_id, _run_delete),
    Subcommand("cache", "maintain the sample cache", _add_cache, _run_cache),
)


def commands(extensions: Sequence[str] = EXTENSION_MODULES) -> dict[str, Subcommand]:
    """Every subcommand by name: the built-in ones, then those of the extension modules present."""
    found = {c.name: c for c in BUILTIN}
    for module_name in extensions:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # not written yet
                continue
            raise
        extra: Sequence[Any] = getattr(module, "SUBCOMMANDS", ())
        for command in extra:
            if not isinstance(command, Subcommand):
                raise TypeError(f"{module_name}.SUBCOMMANDS must hold Subcommand objects, not {command!r}")
            found[command.name] = command
    return found


def build_parser(available: dict[str, Subcommand]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aimeasure", description="Look at pytest-aimeasure's run store.")
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help=f"the run store (default: the {INI_KEY} ini value of the pytest config found here or in a "
        f"parent folder, else {DEFAULT_STORE} at that rootdir)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in available.values():
        command.add_arguments(sub.add_parser(command.name, help=command.help, description=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    available = commands()
    parser = build_parser(available)
    args = parser.parse_args(argv)
    try:
        ctx = CliContext(store_path=args.store or default_store_path())
    except UsageError as exc:
        print(f"aimeasure: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return available[args.command].run(args, ctx)
    except UsageError as exc:
        print(f"aimeasure: {exc}", file=ctx.err)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"aimeasure: {exc}", file=ctx.err)
        return EXIT_STORE
    except BrokenPipeError:
        # `aimeasure show ... | head` closed the pipe: not an error. Point stdout at devnull so the
        # interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    # ``python -m pytest_aimeasure.cli.main``: Subcommand lives in its own module, so the class the
    # extension modules import is the one the registry checks against even when this runs as __main__.
    sys.exit(main())
