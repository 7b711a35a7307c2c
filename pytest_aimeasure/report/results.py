"""The session's results as JSON (``--aimeasure-json PATH``): the machine interface for CI and tools.

The schema is :class:`SessionResults` (``SessionResults.model_json_schema()`` prints it). It is
versioned by ``format``; fields are only ever added within a format number.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

from pytest_aimeasure.compare.drift import DimensionComparison, ItemComparison
from pytest_aimeasure.measure.models import Finding, ItemResult, first_error
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, dimension_stats
from pytest_aimeasure.measure.version import __version__
from pytest_aimeasure.store.fileio import atomic_write

RESULTS_FORMAT = 1


class ResultItem(ItemResult):
    """One test: its outcome, its measurement (samples, mean, CI, fingerprint) and its verdict."""

    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(defer_build=True)  # (built when the results are written, not imported)

    verdict: str | None = Field(default=None, description="the item's comparison with the baseline")
    comparison: ItemComparison | None = None


class BaselineDimension(BaseModel):
    """The baseline's estimate of one dimension over the items this session paired with it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    mean: float
    ci_low: float
    ci_high: float
    m: int


class CalibrationBin(BaseModel):
    """Anchors whose reference score falls in one bin: the judge's mean score on them."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    reference: float
    judge: float
    n: int = Field(ge=1)


class CalibrationFigure(BaseModel):
    """One dimension's calibration, as the HTML report draws it (the optional input that a calibration
    step fills in; the report shows a section only when there is at least one)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    dimension: str
    anchors: int = Field(ge=0, description="anchor artifacts with a reference score")
    agreement: dict[str, float] = Field(
        default_factory=dict, description="named agreement statistics, e.g. weighted_kappa, spearman"
    )
    bias: dict[str, float] = Field(
        default_factory=dict, description="named bias probes, e.g. length, position"
    )
    bins: list[CalibrationBin] = Field(default_factory=list, description="reliability diagram points")
    notes: list[str] = Field(default_factory=list)


class SessionResults(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    format: Literal[1] = 1
    plugin_version: str = __version__
    run_id: str | None = None
    judge_model: str | None = None
    passed: bool
    failed_because: list[str] = Field(default_factory=list, description="why the run failed, if it did")
    exit_status: int
    items: list[ResultItem]
    dimensions: dict[str, DimensionComparison] = Field(default_factory=dict)
    findings: list[Finding]
    spend: dict[str, Any]
    baseline: dict[str, Any] = Field(default_factory=dict, description="path, and what an update did")
    comparison_tables: dict[str, Any] = Field(default_factory=dict, description="suite target tables")
    baseline_dimensions: dict[str, BaselineDimension] = Field(
        default_factory=dict, description="the baseline's mean and 95% CI over the items paired per dimension"
    )
    calibration: list[CalibrationFigure] = Field(default_factory=list)
    calibration_summary: dict[str, Any] = Field(
        default_factory=dict,
        description="per dimension: the ruler's status, κ, bias, noise, probes (--judge-calibrate, stored)",
    )
    attribution: dict[str, Any] = Field(
        default_factory=dict,
        description="per dimension: the change split into judge and system parts (--aimeasure-attribute)",
    )
    sampling: dict[str, Any] = Field(
        default_factory=dict,
        description="adaptive sampling (samples auto): items, minimum, maximum, samples, mean_samples, "
        "at_minimum, stopped {settled, maximum, budget}, open_at_stop {floor, drift}; {} when unused",
    )
    generations: dict[str, Any] = Field(
        default_factory=dict,
        description='repeats="auto": artifacts decided, more_outputs (given more outputs), outputs drawn, '
        "calls (judge samples of them), evidence {repeats, sessions, prior, unmeasured}; {} when unused",
    )
    started_at: str | None = None
    ended_at: str | None = None
    var_floor: float = VAR_FLOOR_DEFAULT
    drift: Literal["fail", "warn", "off"] = "fail"
    whole_suite: bool | None = Field(default=None, description="did the session select the whole suite")
    shards: list[str] = Field(default_factory=list, description="the shard results a merge combined")

    @property
    def failed_items(self) -> list[ResultItem]:
        return [i for i in self.items if i.outcome in ("failed", "error")]


def results_json(results: SessionResults) -> bytes:
    """The file's text: indented, keys sorted, UTF-8.

    ``json.dumps(indent=2)`` is a pure-Python encoder and was most of the session's end at 10,000
    items, so pydantic-core indents; it keeps the keys in the order of the dicts it is given, sorted
    here in one walk (half the time of a ``json.dumps(sort_keys=True)`` / ``json.loads`` round trip)."""
    return to_json(_sorted_keys(results.model_dump(mode="json")), indent=2) + b"\n"


def stored_results_json(results: SessionResults) -> bytes:
    """The text a run keeps in its folder: compact, in the models' field order, and each item as what
    the session's end added to it (``nodeid``, ``verdict``, ``comparison``): the rest of an item is
    its line in the run's ``items.jsonl``, written as the test ended, and :func:`read_run_results`
    joins the two. Each item written twice was two thirds of the file (35 MB of 10,000 items) and
    the largest cost of the session's end: encoding and writing it took 0.6 s."""
    return results.model_dump_json(exclude={"items": {"__all__": _RECORDED}}).encode() + b"\n"


_RECORDED = set(ItemResult.model_fields) - {"nodeid"}
"""An item's fields that its ``items.jsonl`` line holds, but for the name it is joined on."""


class RunItem(BaseModel):
    """An item of a run's ``results.json``: what the session's end added to its ``items.jsonl`` line."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    nodeid: str
    verdict: str | None = None
    comparison: ItemComparison | None = None


def read_run_results(path: Path, records: Sequence[ItemResult]) -> SessionResults:
    """A run's ``results.json`` joined with its item records (``records``: its ``items.jsonl``), as the
    session saw them. A file written before the run kept its items once holds them whole, and is
    read as it is. Errors name the file."""
    from pydantic import TypeAdapter, ValidationError
    from pydantic_core import from_json

    try:
        text = path.read_bytes()
        data = from_json(text)
    except OSError as exc:
        raise ValueError(f"cannot read results file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not an aimeasure results file: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not an aimeasure results file: it holds no JSON object")
    try:
        stored = TypeAdapter(list[RunItem]).validate_python(data.pop("items", []))
    except ValidationError:  # whole items: a file of an earlier version, read as it is
        try:
            return SessionResults.model_validate_json(text)
        except ValidationError as whole:
            raise ValueError(f"{path} is not an aimeasure results file: {first_error(whole)}") from None
    by_nodeid = {r.nodeid: r for r in records}
    items = []
    for item in stored:
        record = by_nodeid.get(item.nodeid)
        if record is None:
            raise ValueError(
                f"{path} names the test {item.nodeid}, which the run's items.jsonl does not hold: "
                "the run's folder is incomplete; run the session again to record it"
            )
        # (validated when read from items.jsonl: not validated again)
        items.append(
            ResultItem.model_construct(**record.__dict__, verdict=item.verdict, comparison=item.comparison)
        )
    try:
        return SessionResults.model_validate({**data, "items": []}).model_copy(update={"items": items})
    except ValidationError as exc:
        raise ValueError(f"{path} is not an aimeasure results file: {first_error(exc)}") from None


def _sorted_keys(value: Any) -> Any:
    """``value`` (JSON data) with every object's keys in sorted order. Most values are leaves: they
    are copied without a call each (a call a value was most of the walk's time, 1.9 s of a 10,000
    item session's end under load)."""
    nested = _NESTED
    if type(value) is dict:
        out = {}
        for key in sorted(value):
            item = value[key]
            out[key] = _sorted_keys(item) if type(item) in nested else item
        return out
    if type(value) is list:
        return [_sorted_keys(item) if type(item) in nested else item for item in value]
    return value


_NESTED = frozenset({dict, list})


def write_results(path: Path, results: SessionResults | bytes) -> None:
    """Write atomically: CI readers never see half a file. ``results`` may be its
    :func:`results_json` already (one encoding for several files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, results if isinstance(results, bytes) else results_json(results))


def read_results(path: Path) -> SessionResults:
    """Load a results file (``--aimeasure-json``, or a run's own ``results.json``, read with the items
    beside it), with an error that names it."""
    from pydantic import ValidationError

    try:
        return SessionResults.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read results file {path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        beside = path.parent / "items.jsonl"
        if beside.is_file():  # a run's folder: its results name each item's line in items.jsonl
            from pytest_aimeasure.store.runs import read_item_records

            return read_run_results(path, read_item_records(beside)[0])
        raise ValueError(
            f"{path} is not an aimeasure results file (written by --aimeasure-json): {first_error(exc)}"
        ) from None


def baseline_dimensions(
    baseline: Any,
    dimensions: dict[str, DimensionComparison],
    items: dict[str, ItemComparison],
    var_floor: float,
) -> dict[str, BaselineDimension]:
    """Per dimension, the baseline's mean and CI over the entries the comparison paired."""
    if baseline is None:
        return {}
    # The items grouped by dimension in one pass: a pass per dimension was dimensions x items.
    by_dimension: dict[str, list[list[int]]] = {}
    for c in items.values():
        if c.delta is not None and c.item_id in baseline.entries:
            by_dimension.setdefault(c.dimension, []).append(baseline.entries[c.item_id].scores)
    out: dict[str, BaselineDimension] = {}
    for name in dimensions:
        paired = by_dimension.get(name)
        if paired:
            stats = dimension_stats([[float(s) for s in scores] for scores in paired], var_floor=var_floor)
            out[name] = BaselineDimension(
                mean=stats.mean, ci_low=stats.ci_low, ci_high=stats.ci_high, m=stats.m
            )
    return out
