"""``aimeasure-calibration.json``: the latest calibration of each dimension, kept next to the baseline
and written like it (merged by dimension, sorted keys, rounded floats, temp file + rename)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import ValidationError

from pytest_aimeasure.calibrate.records import CalibrationFile, DimensionCalibration
from pytest_aimeasure.measure.models import Fingerprint, first_error
from pytest_aimeasure.store.baseline import _round_floats
from pytest_aimeasure.store.fileio import atomic_write

CALIBRATION_NAME = "aimeasure-calibration.json"
# The ruler's identity minus N: N is precision, not part of the ruler (as for the baseline).
RULER_FIELDS = (
    "provider",
    "model",
    "temperature",
    "prompt_hash",
    "tool_schema_version",
    "tool_mode",
    "plugin_major",
)


class CalibrationFileError(Exception):
    pass


def calibration_path(baseline: Path) -> Path:
    """The calibration file that belongs with a baseline file: same folder."""
    return baseline.parent / CALIBRATION_NAME


def load_calibration(path: Path) -> CalibrationFile | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    fix = (
        f"restore it from version control (git checkout -- {path}) or delete it and run "
        "pytest --ai-judge --judge-calibrate"
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CalibrationFileError(
            f"{path}:{exc.lineno}:{exc.colno}: the calibration file is not valid JSON ({exc.msg}). "
            f"Fix: {fix}."
        ) from None
    try:
        return CalibrationFile.model_validate(data)
    except ValidationError as exc:
        raise CalibrationFileError(
            f"{path}: invalid calibration file: {first_error(exc, '(top level)')}. Fix: {fix}."
        ) from None


def dumps_calibration(calibration: CalibrationFile) -> str:
    data = _round_floats(calibration.model_dump(mode="json"))
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def update_calibration(path: Path, results: Iterable[DimensionCalibration]) -> CalibrationFile:
    """Merge ``results`` into the file (a dimension's entry is replaced; others are kept) atomically."""
    current = load_calibration(path) or CalibrationFile()
    merged = dict(current.dimensions)
    for result in results:
        merged[result.dimension] = result
    updated = CalibrationFile(dimensions=dict(sorted(merged.items())))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dumps_calibration(updated))
    return updated


def staleness(
    stored: DimensionCalibration, current: Iterable[Fingerprint], judge_model: str | None
) -> list[str]:
    """Why ``stored`` no longer describes this session's ruler (empty when it still does).

    ``current`` are the fingerprints of this session's measurements of the dimension; without any, the
    configured judge model is compared.
    """
    prints = list(current)
    if not prints:
        if judge_model is not None and judge_model != stored.judge_model:
            return [f"judge model {stored.judge_model} → {judge_model}"]
        return []
    reasons: list[str] = []
    mine = stored.fingerprint.model_dump()
    for name in RULER_FIELDS:
        now = sorted({str(getattr(fp, name)) for fp in prints})
        if now != [str(mine[name])]:
            reasons.append(f"{name} {mine[name]} → {', '.join(now)}")
    if stored.fingerprint.rubric_hash not in {fp.rubric_hash for fp in prints}:
        reasons.append("the rubric changed")
    return reasons


def var_floors(
    calibration: CalibrationFile | None, judge_model: str | None, judges: Mapping[str, str] | None = None
) -> dict[str, tuple[float, Fingerprint]]:
    """Measured variance floors of dimensions calibrated with enough anchors under the judge model
    that judges them now (``judges``: a dimension's own ``judge=``, else ``judge_model``), each with
    the ruler it was measured under: a floor holds only for measurements taken with that very ruler
    (a changed rubric, prompt or temperature makes the calibration stale, and a stale calibration
    supplies nothing)."""
    if calibration is None:
        return {}
    judges = judges or {}
    return {
        name: (c.repeatability.var_floor, c.fingerprint)
        for name, c in calibration.dimensions.items()
        if c.repeatability.var_floor is not None and c.judge_model == judges.get(name, judge_model)
    }
