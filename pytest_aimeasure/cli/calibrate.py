"""``aimeasure calibrate PATH... --judge-model M [--json OUT] [--bias]``: calibrate a judge against
anchor files without running pytest.

It judges with the default prompt (a conftest's ``pytest_aimeasure_judge_prompt`` is not loaded) and
keeps no run store; ``pytest --ai-judge --judge-calibrate`` does the same inside a session, with the
journal, the sample cache and the budget. Exit status: 0 every dimension calibrated, 1 a ruler is
uncalibrated or could not be calibrated, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytest_aimeasure.calibrate.anchors import AnchorError
from pytest_aimeasure.calibrate.lines import calibration_lines, summarise
from pytest_aimeasure.calibrate.records import MAX_ABS_BIAS_DEFAULT, MIN_KAPPA_DEFAULT
from pytest_aimeasure.calibrate.references import build_targets
from pytest_aimeasure.calibrate.runner import calibrate
from pytest_aimeasure.cli.subcommand import CliContext, Subcommand, UsageError
from pytest_aimeasure.measure.text import MAX_ARTIFACT_CHARS
from pytest_aimeasure.store.fileio import atomic_write

__all__ = ["SUBCOMMANDS"]


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="anchor files (.yaml, .yml, .jsonl)"
    )
    parser.add_argument("--judge-model", required=True, metavar="MODEL", help="the judge, as for pytest")
    parser.add_argument("--samples", type=int, default=3, metavar="N", help="judge samples per anchor (3)")
    parser.add_argument("--rubric", metavar="TEXT", help="rubric for anchor files that give none")
    parser.add_argument("--bias", action="store_true", help="also run the bias probes")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the calibration as JSON to OUT")
    parser.add_argument("--min-kappa", type=float, default=MIN_KAPPA_DEFAULT, metavar="KAPPA")
    parser.add_argument("--max-abs-bias", type=float, default=MAX_ABS_BIAS_DEFAULT, metavar="POINTS")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="per judge call")
    parser.add_argument(
        "--judge-max-artifact-chars",
        type=int,
        default=MAX_ARTIFACT_CHARS,
        metavar="N",
        help=f"the longest anchor text sent to the judge, in characters ({MAX_ARTIFACT_CHARS:,})",
    )


def _run(args: argparse.Namespace, ctx: CliContext) -> int:
    from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings
    from pytest_aimeasure.judge.resolve import ModelError, build_backend, route

    if args.samples < 1:
        raise UsageError(f"--samples {args.samples}: expected a whole number >= 1")
    if (limit := args.judge_max_artifact_chars) < 1:
        raise UsageError(f"--judge-max-artifact-chars {limit}: expected a whole number >= 1")
    try:
        route(args.judge_model)
    except ModelError as exc:
        raise UsageError(f"--judge-model: {exc}") from None
    cwd = Path.cwd()
    refs = {}
    try:
        if args.rubric:
            from pytest_aimeasure.calibrate.anchors import load_anchor_file

            for path in args.paths:
                for dimension in load_anchor_file(path).dimensions():
                    refs[dimension] = {"dimension": dimension, "files": [], "rubric": args.rubric}
        targets = build_targets(
            refs,
            [p.resolve() for p in args.paths],
            root=cwd,
            min_kappa=args.min_kappa,
            max_abs_bias=args.max_abs_bias,
            max_chars=limit,
        )
    except AnchorError as exc:
        raise UsageError(str(exc)) from None
    engine = JudgeEngine(
        JudgeSettings(model=args.judge_model, samples=args.samples, timeout=args.timeout, retries=4),
        # The engine retries (and shares a 429's pause among all calls); the SDK must not retry too.
        make_backend=lambda model: build_backend(model, timeout=args.timeout, retries=0),
    )
    try:
        run = calibrate(engine, targets, samples=args.samples, probes=args.bias, judge_model=args.judge_model)
    finally:
        engine.close()
    summary, findings = summarise(
        fresh=run.results,
        errors=run.errors,
        stored=None,
        measurements=[],
        judge_model=args.judge_model,
        fail=True,
    )
    for line in calibration_lines(summary)[1:]:
        ctx.print(line)
    for f in findings:
        ctx.print(f"[{f.severity}] {f.kind.replace('_', ' ')}: {f.message}")
    if args.json is not None:
        data = {name: c.model_dump(mode="json") for name, c in sorted(run.results.items())}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"dimensions": data, "errors": run.errors}, indent=2, sort_keys=True) + "\n"
        atomic_write(args.json, text)
    failed = bool(run.errors) or not all(c.passed for c in run.results.values())
    return 1 if failed else 0


SUBCOMMANDS = [
    Subcommand("calibrate", "judge human-labelled anchor files and report the judge's agreement", _add, _run)
]
