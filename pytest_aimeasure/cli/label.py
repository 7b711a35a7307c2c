"""``aimeasure label [RUN] --dimension D [-n 20] -o anchors/D-new.yaml [--interactive]``: pick the
items of a stored run where a human label helps most (calibrate/choose.py) and write them as an
anchor file: the artifact, the rubric, the judge's scores, and an empty label to fill in.

``--interactive`` shows each artifact and rubric, asks the rater for a score (1-5; ``s`` skips,
``q`` stops), and appends each labelled anchor to the output file atomically as it is given. With
``--until-decided`` it stops as soon as the trust verdict of the anchors labelled so far (the
output file's, the new ones, and ``--anchors`` files whose judge scores the stored calibration
holds) is trusted or untrusted. Exit status: 0 written, 2 bad input.
"""

from __future__ import annotations

import argparse
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from pytest_aimeasure.calibrate.agreement import level, mean_ci
from pytest_aimeasure.calibrate.anchors import AnchorError, load_anchor_file
from pytest_aimeasure.calibrate.choose import Candidate, pick
from pytest_aimeasure.calibrate.file import CALIBRATION_NAME, CalibrationFileError, load_calibration
from pytest_aimeasure.calibrate.records import MAX_ABS_BIAS_DEFAULT, MIN_KAPPA_DEFAULT
from pytest_aimeasure.calibrate.trust import kappa_ci, verdict
from pytest_aimeasure.cli.subcommand import CliContext, Subcommand, UsageError
from pytest_aimeasure.measure.models import Measurement
from pytest_aimeasure.store.fileio import atomic_write
from pytest_aimeasure.store.runs import Run, StoreError

__all__ = ["SUBCOMMANDS"]


def _add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", default="latest", metavar="RUN", help="a stored run (latest)")
    parser.add_argument("--dimension", required=True, metavar="D", help="the dimension to label")
    parser.add_argument("-n", type=int, default=20, metavar="N", help="items to pick (20)")
    parser.add_argument(
        "-o", "--output", type=Path, required=True, metavar="FILE", help="anchor file (.yaml)"
    )
    parser.add_argument(
        "--anchors", type=Path, nargs="*", default=[], metavar="FILE", help="existing anchors"
    )
    parser.add_argument("--interactive", action="store_true", help="ask for each score in the terminal")
    parser.add_argument("--rater", metavar="NAME", help="the rater's name (default: git config user.name)")
    parser.add_argument("--until-decided", action="store_true", help="stop once the trust verdict is decided")
    parser.add_argument(
        "--calibration", type=Path, metavar="FILE", help=f"stored calibration ({CALIBRATION_NAME})"
    )
    parser.add_argument("--min-kappa", type=float, default=MIN_KAPPA_DEFAULT, metavar="KAPPA")
    parser.add_argument("--max-abs-bias", type=float, default=MAX_ABS_BIAS_DEFAULT, metavar="POINTS")


def _measurements(run: Run, dimension: str) -> list[tuple[Measurement, str | None]]:
    from pytest_aimeasure.attribution.rejudge import rubrics_of

    items = run.items()
    rubrics = rubrics_of(items)
    return [
        (m, rubrics.get(m.item_id))
        for r in items
        for m in r.measurements
        if m.dimension == dimension and m.samples
    ]


def _text(run: Run, m: Measurement) -> str:
    content = run.load_artifact(m.artifact_key) if m.artifact_key else None
    if isinstance(content, str):
        return content
    return m.excerpt


def _existing_ids(paths: Sequence[Path], dimension: str) -> set[str]:
    try:
        return {a.id for path in paths for a in load_anchor_file(path).anchors if a.dimension == dimension}
    except AnchorError as exc:
        raise UsageError(str(exc)) from None


def _template(m: Measurement, rubric: str | None, text: str, reasons: list[str]) -> dict[str, Any]:
    return {
        "id": m.item_id,
        "text": text,
        "labels": {},
        "judge": list(m.standing.scores),
        "note": "picked: " + "; ".join(reasons) + (f"; rubric: {rubric}" if rubric else ""),
    }


def _write(path: Path, dimension: str, rubric: str | None, anchors: list[dict[str, Any]]) -> None:
    body: dict[str, Any] = {"dimension": dimension}
    if rubric:
        body["rubric"] = rubric
    body["anchors"] = anchors
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100))


def _read_output(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    anchors = data.get("anchors") if isinstance(data, dict) else None
    if not isinstance(anchors, list):
        raise UsageError(f"{path}: not an anchor file (no anchors: list); name a new file with -o")
    return anchors


def _rater(given: str | None) -> str:
    if given:
        return given
    try:
        name = subprocess.run(
            ["git", "config", "user.name"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except OSError:
        name = ""
    return name or "rater1"


def _run(args: argparse.Namespace, ctx: CliContext) -> int:
    if args.n < 1:
        raise UsageError(f"-n {args.n}: expected a whole number >= 1")
    if not args.output.name.endswith((".yaml", ".yml")):
        raise UsageError(f"-o {args.output}: the anchor file must end in .yaml or .yml")
    store = ctx.store()
    try:
        run = store.open_run(store.resolve(args.run))
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    found = _measurements(run, args.dimension)
    if not found:
        raise UsageError(f"run {run.run_id} measured no item of dimension {args.dimension!r}")
    written = _read_output(args.output)
    ids = _existing_ids(args.anchors, args.dimension) | {str(a.get("id")) for a in written}
    found = [(m, r) for m, r in found if m.item_id not in ids]
    covered = Counter(level(sum(a["judge"]) / len(a["judge"])) for a in written if a.get("judge"))
    candidates = [
        Candidate(tuple(m.standing.scores), m.ci_low, m.ci_high, m.floor, m.escalation is not None)
        for m, _ in found
    ]
    chosen = pick(candidates, args.n, covered)
    rubric = next((r for m, r in found if r), None)
    picks = [
        _template(
            found[i][0],
            found[i][1],
            _text(run, found[i][0]),
            candidates[i].reasons(covered[level(candidates[i].mean)]),
        )
        for i in chosen
    ]
    if not args.interactive:
        _write(args.output, args.dimension, rubric, [*written, *picks])
        ctx.print(
            f"wrote {len(picks)} items to label to {args.output} (fill in each labels:, then calibrate)"
        )
        return 0
    return _interactive(args, ctx, rubric, written, picks)


def _judged(args: argparse.Namespace, anchors: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(human mean, judge mean) of every labelled anchor whose judge scores are known."""
    pairs: list[tuple[float, float]] = []
    stored = _stored_scores(args)
    for a in anchors:
        labels = a.get("labels") or {}
        judge = a.get("judge") or stored.get(str(a.get("id")))
        if labels and judge:
            pairs.append((sum(labels.values()) / len(labels), sum(judge) / len(judge)))
    for path in args.anchors:
        for anchor in load_anchor_file(path).anchors:
            if anchor.dimension == args.dimension and anchor.id in stored:
                js = stored[anchor.id]
                pairs.append((anchor.human_mean, sum(js) / len(js)))
    return pairs


def _stored_scores(args: argparse.Namespace) -> dict[str, list[int]]:
    path = args.calibration or Path(CALIBRATION_NAME)
    try:
        calibration = load_calibration(path)
    except CalibrationFileError as exc:
        raise UsageError(str(exc)) from None
    c = calibration.dimensions.get(args.dimension) if calibration is not None else None
    return {s.id: s.judge for s in c.scores} if c is not None else {}


def _decided(args: argparse.Namespace, anchors: Sequence[dict[str, Any]]) -> str | None:
    pairs = _judged(args, anchors)
    if len(pairs) < 3:
        return None
    human = [level(h) for h, _ in pairs]
    judge = [level(j) for _, j in pairs]
    found = verdict(
        kappa_ci(human, judge),
        mean_ci([j - h for h, j in pairs]),
        min_kappa=args.min_kappa,
        max_abs_bias=args.max_abs_bias,
    )
    return None if found.verdict == "inconclusive" else found.verdict


def _ask(ctx: CliContext, prompt: str) -> str | None:
    ctx.out.write(prompt)
    ctx.out.flush()
    line = ctx.inp.readline()
    return None if not line else line.strip().lower()


def _interactive(
    args: argparse.Namespace,
    ctx: CliContext,
    rubric: str | None,
    written: list[dict[str, Any]],
    picks: list[dict[str, Any]],
) -> int:
    rater = _rater(args.rater)
    labelled = 0
    for number, anchor in enumerate(picks, start=1):
        ctx.print(f"\n[{number}/{len(picks)}] {anchor['id']}   ({anchor['note']})")
        ctx.print(f"rubric: {rubric or '(none recorded)'}")
        ctx.print("\n".join(("-" * 60, anchor["text"], "-" * 60)))
        ctx.print(f"the judge scored: {', '.join(str(s) for s in anchor['judge'])}")
        while True:
            answer = _ask(ctx, f"{rater}'s score 1-5 (s skip, q quit): ")
            if answer is None or answer == "q":
                ctx.print(f"stopped: {labelled} labelled, in {args.output}")
                return 0
            if answer == "s" or answer in ("1", "2", "3", "4", "5"):
                break
            ctx.print("type a whole number from 1 to 5, s or q")
        if answer == "s":
            continue
        written.append({**anchor, "labels": {rater: int(answer)}})
        _write(args.output, args.dimension, rubric, written)
        labelled += 1
        decided = _decided(args, written) if args.until_decided else None
        if decided is not None:
            ctx.print(f"the trust verdict is decided ({decided}) after {labelled} new labels: stopping")
            return 0
    ctx.print(f"done: {labelled} labelled, in {args.output}")
    return 0


SUBCOMMANDS = [
    Subcommand("label", "pick the items of a run worth a human label and write (or ask for) them", _add, _run)
]
