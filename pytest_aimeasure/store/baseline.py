"""The committed baseline file: its format, loading with actionable errors, and safe merging updates.

The file is meant to live in version control and be reviewed in pull requests, so it is written to
diff well: keys sorted, two-space indent, one score per line, floats rounded to 4 decimals, a trailing
newline, and nothing that changes between machines or runs (no timestamps, hosts or paths). Each entry
keeps the raw per-sample scores, not only the mean, so that pairing, pooling and power calculations
stay possible later.

Pooling: under an unchanged ruler, ``--update-baseline`` appends the session's samples to an item's
entry instead of replacing them, keeping the last ``pool`` sessions (``--aimeasure-baseline-pool``, default
10), so the baseline's mean converges instead of freezing one lucky session. ``sessions`` lists the
sizes of the pooled sessions in ``scores``, oldest first (absent: one session). An entry is replaced,
not pooled, when the ruler changed, when the session found the item (or its dimension) regressed
or improved (a real change must not be averaged with the old value), or when ``pool`` is 1.

Generations: ``generations`` lists the sizes of the generation repeats (``repeats=K``) in ``scores``,
oldest first, each inside one pooled session (absent: one generation per session). With it even a
one-session baseline keeps its generation variance, which the comparison uses as the between-session
term instead of a prior (:mod:`pytest_aimeasure.compare.drift`).

Sources: ``sources`` lists, one per pooled session and in the same order, the run that measured the
session and the sha256 of the artifact it judged (absent in files written before; a session recorded
without them has nulls); a session that judged generation repeats lists each repeat's artifact in
``generations``. ``--aimeasure-attribute`` re-judges those stored artifacts with today's judge
to tell a judge change from a system change (:mod:`pytest_aimeasure.attribution.split`).

Format 2 took the number of samples out of the fingerprint (N is precision, not the ruler) and added
``sessions``; format-1 files are read as they are (their fingerprints' ``samples`` is dropped) and
written back as format 2 on the next update.

Updating merges into the existing file under a file lock, re-reading it inside the lock, and replaces
it atomically (:func:`pytest_aimeasure.store.fileio.atomic_write`), so concurrent updaters (xdist workers,
two terminals) lose no entry and a crash never leaves half a file behind. The lock file lives outside
the project (:func:`pytest_aimeasure.store.fileio.lock_path`), never next to the baseline.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pytest_aimeasure.measure.models import SCORE_MAX, SCORE_MIN, Fingerprint, ItemResult, Measurement
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, dimension_stats
from pytest_aimeasure.store.fileio import atomic_write, lock_path

BASELINE_FORMAT: Literal[2] = 2
READABLE_FORMATS = (1, 2)
DEFAULT_BASELINE_NAME = "aimeasure-baseline.json"
FLOAT_DECIMALS = 4
_MEAN_SLACK = 0.5 * 10**-FLOAT_DECIMALS + 1e-9  # a stored mean is the true mean rounded to 4 places
_MAX_REPORTED_ERRORS = 5

Score = Annotated[int, Field(ge=SCORE_MIN, le=SCORE_MAX, strict=True)]


class BaselineError(Exception):
    """The baseline file cannot be used. The message names the file, where it is wrong, and the fix."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A stored artifact's name in the run store (its content's sha256, lowercase hex)."""


class EntrySource(BaseModel):
    """Where one pooled session of an entry came from: its run and the artifact it judged."""

    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    run: str | None = None
    artifact_sha256: Sha256 | None = None
    generations: list[Sha256] | None = Field(
        default=None,
        min_length=2,
        description="a session that judged generation repeats: each repeat's artifact, in the order of "
        "the entry's generations (artifact_sha256 is then the set's identity, not a stored artifact)",
    )

    def artifacts(self) -> list[str]:
        """The stored artifacts (sha256) this session judged: one, or one per generation repeat."""
        if self.generations is not None:
            return list(self.generations)
        return [self.artifact_sha256] if self.artifact_sha256 is not None else []


class StandingScores(BaseModel):
    """An escalated item's standing-judge scores (the newest session's), kept so that a later session
    in which the item was not escalated can still be compared with the baseline on that judge."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    fingerprint: Fingerprint
    scores: list[Score] = Field(min_length=1)


class BaselineEntry(BaseModel):
    """One item's committed measurement: the raw scores and the ruler they were taken with."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    dimension: str = Field(min_length=1)
    nodeid: str = Field(min_length=1)
    artifact_key: str | None = Field(
        default=None,
        description="the key of the artifact the item judged (a repeated artifact's group key), by which "
        'repeats="auto" finds the entries of an artifact; absent: unknown (written before it was recorded)',
    )
    scores: list[Score] = Field(min_length=1)
    mean: float
    n: int
    floor: float
    tolerance: float = Field(ge=0)
    fingerprint: Fingerprint
    sessions: list[Annotated[int, Field(ge=1, strict=True)]] | None = Field(
        default=None,
        min_length=2,
        description="sizes of the sessions pooled in scores, oldest first; absent: one session",
    )
    sources: list[EntrySource] | None = Field(
        default=None, description="run and artifact of each pooled session, oldest first; absent: unknown"
    )
    generations: list[Annotated[int, Field(ge=1, strict=True)]] | None = Field(
        default=None,
        min_length=2,
        description="sizes of the generation repeats in scores, oldest first, each within one session; "
        "absent: one generation per session",
    )
    standing: StandingScores | None = Field(
        default=None,
        description="escalated items: the standing judge's scores (fingerprint is the stronger judge's)",
    )

    @model_validator(mode="after")
    def _derived_fields_match_scores(self) -> BaselineEntry:
        # n and mean are stored for human readers of the diff; a mismatch means a hand edit or a
        # botched merge, and silently trusting either side would compare against the wrong number.
        if self.n != len(self.scores):
            raise ValueError(f"n is {self.n} but there are {len(self.scores)} scores")
        if self.sessions is not None and sum(self.sessions) != self.n:
            raise ValueError(f"sessions add up to {sum(self.sessions)} samples but there are {self.n} scores")
        if self.generations is not None:
            if sum(self.generations) != self.n:
                total = sum(self.generations)
                raise ValueError(f"generations add up to {total} samples but there are {self.n} scores")
            ends = set(itertools.accumulate(self.generations))
            if not set(itertools.accumulate(self.sessions or [self.n])) <= ends:
                raise ValueError("a generation repeat crosses the boundary between two pooled sessions")
        if self.sources is not None and len(self.sources) != self.pooled:
            raise ValueError(f"sources lists {len(self.sources)} sessions but the entry pools {self.pooled}")
        for number, (source, groups) in enumerate(
            zip(self.session_sources(), self.session_generations(), strict=True), start=1
        ):
            if source.generations is not None and len(source.generations) != len(groups):
                raise ValueError(
                    f"session {number}'s source lists {len(source.generations)} generation artifacts but "
                    f"the session judged {len(groups)} generation(s)"
                )
        actual = math.fsum(self.scores) / len(self.scores)
        if abs(self.mean - actual) > _MEAN_SLACK:
            raise ValueError(f"mean is {self.mean} but the scores average {actual:.4f}")
        return self

    @property
    def pooled(self) -> int:
        """How many sessions the entry's scores come from."""
        return len(self.sessions) if self.sessions else 1

    def session_scores(self) -> list[list[int]]:
        """The scores split into the sessions they were measured in, oldest first."""
        sizes = self.sessions or [len(self.scores)]
        out, start = [], 0
        for size in sizes:
            out.append(self.scores[start : start + size])
            start += size
        return out

    def session_generations(self) -> list[list[list[int]]]:
        """Each pooled session's scores split into its generation repeats (one group without them)."""
        sizes = iter(self.generations or [])
        out = []
        for session in self.session_scores():
            if self.generations is None:
                out.append([session])
                continue
            groups, start = [], 0
            while start < len(session):
                size = next(sizes)
                groups.append(session[start : start + size])
                start += size
            out.append(groups)
        return out

    def session_sources(self) -> list[EntrySource]:
        """Each pooled session's source, oldest first (empty sources where the file has none)."""
        return list(self.sources) if self.sources is not None else [EntrySource()] * self.pooled

    def on_standing_judge(self) -> BaselineEntry:
        """The entry as its standing judge scored it (one session; only when ``standing`` is set)."""
        assert self.standing is not None
        scores = list(self.standing.scores)
        return self.model_copy(
            update={
                "scores": scores,
                "n": len(scores),
                "mean": math.fsum(scores) / len(scores),
                "fingerprint": self.standing.fingerprint,
                "sessions": None,
                "generations": None,
                # One pooled group of scores: the newest session's generation artifacts no longer
                # line up with them (its set of artifacts stays named by artifact_sha256).
                "sources": (
                    [self.sources[-1].model_copy(update={"generations": None})] if self.sources else None
                ),
                "standing": None,
            }
        )


class DimensionAggregate(BaseModel):
    """Per-dimension summary over the file's entries, for human readers; recomputed on every write."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    mean: float
    m: int = Field(ge=1, description="items")
    n: int = Field(ge=1, description="samples over all items")
    sd: float | None = Field(description="sd of the item means; null for a single item")
    ci_low: float
    ci_high: float


class BaselineFile(BaseModel):
    """The whole baseline file. ``entries`` is keyed by the stable item id ``dimension::nodeid``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    format: Literal[1, 2] = BASELINE_FORMAT
    entries: dict[str, BaselineEntry] = Field(default_factory=dict)
    dimensions: dict[str, DimensionAggregate] = Field(default_factory=dict)


class UpdateSummary(BaseModel):
    """What :func:`update_baseline` did, item ids sorted in each list."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    added: list[str] = Field(default_factory=list)
    updated: list[str] = Field(default_factory=list, description="entries replaced by this session's")
    pooled: list[str] = Field(default_factory=list, description="entries this session's samples joined")
    removed: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    kept_judge_error: list[str] = Field(default_factory=list)
    kept: list[str] = Field(
        default_factory=list, description="entries kept without a new value, for any reason but a judge error"
    )
    kept_because: dict[str, list[str]] = Field(
        default_factory=dict, description="every kept entry by why it has no new value (KEEP_REASONS)"
    )
    repeated: list[str] = Field(
        default_factory=list, description="written entries whose new samples pooled generation repeats"
    )
    written: bool = False


# Why an entry without a new value is kept. Only a test that no longer exists loses its entry.
KEEP_REASONS = (
    "gate failed",
    "budget stop",
    "judge error",
    "collection error",
    "generation failed",
    "test failed",
    "skipped",
    "no score",
    "not run",
)


class SessionCoverage(BaseModel):
    """What a session knows about the tests behind the entries it did not measure.

    The input of :func:`keep_reason`, the one rule for what ``--update-baseline`` may remove.
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    whole_suite: bool = Field(description="the session selected the whole suite")
    prune: bool = Field(default=False, description="--prune-baseline: drop the entries of unselected tests")
    collected: frozenset[str] | None = Field(
        default=None, description="node ids of the tests the session selected; None: not known"
    )
    declared: dict[str, frozenset[str]] = Field(
        default_factory=dict,
        description="node id -> the item ids its markers (or suite) declare, for the tests that reported",
    )
    not_measured: dict[str, str] = Field(
        default_factory=dict, description="item id -> why a test that ran gave it no value (KEEP_REASONS)"
    )
    failed_collectors: tuple[str, ...] = Field(
        default=(), description="node ids of the files or classes that failed to collect"
    )

    def collected_test(self, item_id: str, nodeid: str) -> bool:
        """Does a test this session selected still measure ``item_id``? A test that reported and
        declares other dimensions no longer does (its dimension was renamed)."""
        if self.collected is None or nodeid not in self.collected:
            return False
        declared = self.declared.get(nodeid)
        return not declared or item_id in declared


def _inside(nodeid: str, collector: str) -> bool:
    return not collector or nodeid == collector or nodeid.startswith((collector + "::", collector + "/"))


def keep_reason(item_id: str, entry: BaselineEntry, coverage: SessionCoverage) -> str | None:
    """THE rule for an entry that got no new value in a baseline update: why it is kept, or None
    when it is removed.

    An entry is removed only when its test no longer exists in a whole-suite run (no test selected
    by it measures the item) or, with ``--prune-baseline``, when its test was not selected at all.
    A test that was selected but gave no value (a failed gate, a budget stop, a judge error, a skip,
    a failure) and a test in a file that failed to collect always keep their entries.
    """
    reason = coverage.not_measured.get(item_id)
    if reason is not None:
        return reason
    nodeid = entry.nodeid
    if any(_inside(nodeid, collector) for collector in coverage.failed_collectors):
        return "collection error"
    if coverage.collected_test(item_id, nodeid):
        return "not run"  # selected, but it never reported (an interrupted session)
    if coverage.whole_suite or coverage.prune:
        return None
    return "not run"


def no_value_reason(result: ItemResult) -> str:
    """Why a test that ran gave (some of) its items no value: a word of :data:`KEEP_REASONS`."""
    kinds = {f.kind for f in result.findings}
    if result.judge_error:
        return "judge error"
    if "gate_failed" in kinds:
        return "gate failed"
    if "budget" in kinds:
        return "budget stop"
    if "generation_error" in kinds:
        return "generation failed"
    if result.outcome == "skipped":
        return "skipped"
    if result.outcome in ("failed", "error"):
        return "test failed"
    return "no score"


def coverage_from_results(
    results: Iterable[ItemResult],
    *,
    whole_suite: bool,
    prune: bool,
    collected: Collection[str] | None,
    failed_collectors: Sequence[str] = (),
) -> SessionCoverage:
    """The :class:`SessionCoverage` of a session (or of merged shards) from its tests' results."""
    not_measured: dict[str, str] = {}
    declared: dict[str, frozenset[str]] = {}
    for result in results:
        ids = set(result.declared)
        if result.declared:
            declared[result.nodeid] = frozenset(result.declared)
        if result.item_id:
            ids.add(result.item_id)
        missing = ids - {m.item_id for m in result.measurements if m.samples}
        if missing:
            not_measured.update(dict.fromkeys(missing, no_value_reason(result)))
    return SessionCoverage(
        whole_suite=whole_suite,
        prune=prune,
        collected=frozenset(collected) if collected is not None else None,
        declared=declared,
        not_measured=not_measured,
        failed_collectors=tuple(failed_collectors),
    )


def gone_entries(
    baseline: BaselineFile | None, coverage: SessionCoverage, measured: Collection[str]
) -> list[str]:
    """Entries whose tests no longer exist: what a whole-suite update removes (and compare calls
    "missing"). Empty unless the session ran the whole suite."""
    if baseline is None or not coverage.whole_suite:
        return []
    plain = coverage.model_copy(update={"prune": False})
    return sorted(
        item_id
        for item_id, entry in baseline.entries.items()
        if item_id not in measured and keep_reason(item_id, entry, plain) is None
    )


# --------------------------------------------------------------------------------------------------
# Serialisation
# --------------------------------------------------------------------------------------------------


def _round_floats(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, FLOAT_DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0
    if isinstance(value, dict):
        return {k: _round_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round_floats(v) for v in value]
    return value


def dumps_baseline(baseline: BaselineFile) -> str:
    """The canonical text of a baseline file (sorted keys, indent 2, floats to 4 places, final newline)."""
    data = _round_floats(baseline.model_dump(mode="json"))
    data["format"] = BASELINE_FORMAT  # what is written is always the current format
    for entry in data["entries"].values():
        if entry.get("sessions") is None:
            entry.pop("sessions", None)  # one session: the field says nothing, keep the diff short
        if entry.get("sources") is None:
            entry.pop("sources", None)
        for source in entry.get("sources") or ():
            if source.get("generations") is None:
                source.pop("generations", None)  # one artifact a session: keep the diff short
        for optional in ("standing", "artifact_key"):
            if entry.get(optional) is None:
                entry.pop(optional, None)
        if entry.get("generations") is None:
            entry.pop("generations", None)
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _fix_hint(path: Path) -> str:
    return (
        f"Fix: restore it from version control (git checkout -- {path}) "
        "or delete it and run pytest --ai-judge --update-baseline."
    )


def _field_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _describe_validation_error(exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors()[:_MAX_REPORTED_ERRORS]:
        where = _field_path(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        got = error.get("input")
        if error["type"] != "missing" and not isinstance(got, (dict, list)):
            message += f" (got {json.dumps(got) if _is_json_scalar(got) else repr(got)})"
        lines.append(f"  {where}: {message}")
    if exc.error_count() > _MAX_REPORTED_ERRORS:
        lines.append(f"  ... and {exc.error_count() - _MAX_REPORTED_ERRORS} more")
    return lines


def _is_json_scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def parse_baseline(text: str, path: Path) -> BaselineFile:
    """Parse the text of a baseline file; ``path`` is only used in error messages."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if any(line.startswith(("<<<<<<< ", "=======", ">>>>>>> ")) for line in text.splitlines()):
            reason = "it contains unresolved merge-conflict markers"
        elif not text.strip():
            reason = "it is empty"
        else:
            reason = exc.msg
        raise BaselineError(
            f"{path}:{exc.lineno}:{exc.colno}: the baseline file is not valid JSON at line {exc.lineno}, "
            f"column {exc.colno}: {reason}. {_fix_hint(path)}",
            path=path,
        ) from exc
    if not isinstance(data, dict):
        raise BaselineError(
            f"{path}: the baseline file must hold a JSON object, not {type(data).__name__}. "
            f"{_fix_hint(path)}",
            path=path,
        )
    found = data.get("format")
    if found not in READABLE_FORMATS or isinstance(found, bool):
        if isinstance(found, int) and not isinstance(found, bool) and found > BASELINE_FORMAT:
            hint = "it was written by a newer pytest-aimeasure: upgrade the plugin, or re-baseline"
        else:
            hint = "it was not written by pytest-aimeasure"
        stated = "has no format number" if found is None else f"has format {json.dumps(found)}"
        readable = " and ".join(map(str, READABLE_FORMATS))
        raise BaselineError(
            f"{path}: the baseline file {stated}; this plugin reads baseline formats {readable} "
            f"({hint}). {_fix_hint(path)}",
            path=path,
        )
    try:
        return BaselineFile.model_validate(data)
    except ValidationError as exc:
        details = "\n".join(_describe_validation_error(exc))
        raise BaselineError(
            f"{path}: invalid baseline file:\n{details}\n{_fix_hint(path)}", path=path
        ) from exc


def _read(path: Path) -> tuple[str, BaselineFile] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(
            f"{path}: cannot read the baseline file ({exc}). {_fix_hint(path)}", path=path
        ) from exc
    return text, parse_baseline(text, path)


def load_baseline(path: Path) -> BaselineFile | None:
    """The baseline at ``path``, or None when there is no such file. Raises :class:`BaselineError`."""
    read = _read(Path(path))
    return None if read is None else read[1]


# --------------------------------------------------------------------------------------------------
# Building and merging entries
# --------------------------------------------------------------------------------------------------


def entry_from_measurement(measurement: Measurement, *, run_id: str | None = None) -> BaselineEntry:
    """The baseline entry for a measurement, normalised exactly as a write-then-read would leave it.
    ``run_id``: the run that measured it, recorded with the artifact's sha256 in ``sources``."""
    # Grouped by generation repeat, so that the baseline keeps the generation variance.
    samples = sorted(measurement.samples, key=lambda s: (s.repeat or 0, s.index))
    scores = [s.score for s in samples]
    sizes = Counter(s.repeat or 0 for s in samples)
    raw: dict[str, Any] = {
        "dimension": measurement.dimension,
        "nodeid": measurement.nodeid,
        "artifact_key": measurement.artifact_key,
        "scores": scores,
        "mean": math.fsum(scores) / len(scores),
        "n": len(scores),
        "floor": measurement.floor,
        "tolerance": measurement.tolerance,
        "fingerprint": measurement.fingerprint.model_dump(mode="json"),
    }
    if len(sizes) > 1:
        raw["generations"] = [sizes[r] for r in sorted(sizes)]
    if measurement.escalation is not None:
        standing = measurement.escalation.standing
        raw["standing"] = {
            "fingerprint": standing.fingerprint.model_dump(mode="json"),
            "scores": [s.score for s in sorted(standing.samples, key=lambda s: s.index)],
        }
    if run_id is not None or measurement.artifact_sha256 is not None:
        source: dict[str, Any] = {"run": run_id, "artifact_sha256": measurement.artifact_sha256}
        repeats = measurement.repeats
        if len(sizes) > 1 and repeats is not None and len(repeats.shas) == len(sizes):
            source["generations"] = repeats.shas
        raw["sources"] = [source]
    return BaselineEntry.model_validate(_round_floats(raw))


def _same_value(old: BaselineEntry, new: BaselineEntry) -> bool:
    # Samples are exchangeable: the same scores in another order are the same measurement, and
    # keeping the old order avoids a diff that says nothing. Another run that scored the same is not
    # news either: the old sources stay (they produced these very scores).
    skip = {"scores", "sources", "artifact_key"}
    return sorted(old.scores) == sorted(new.scores) and old.model_dump(exclude=skip) == new.model_dump(
        exclude=skip
    )


def aggregate_dimensions(
    entries: dict[str, BaselineEntry], *, var_floor: float = VAR_FLOOR_DEFAULT
) -> dict[str, DimensionAggregate]:
    """Per-dimension aggregates over ``entries`` (mean of item means, 95% CI of dimension_stats)."""
    by_dimension: dict[str, list[list[int]]] = {}
    for entry in entries.values():
        by_dimension.setdefault(entry.dimension, []).append(entry.scores)
    out = {}
    for name, items in by_dimension.items():
        st = dimension_stats(items, var_floor=var_floor)
        out[name] = DimensionAggregate(
            mean=st.mean, m=st.m, n=st.n_samples, sd=st.sd_items, ci_low=st.ci_low, ci_high=st.ci_high
        )
    return out


def pool_entry(
    previous: BaselineEntry, measurement: Measurement, *, pool: int, run_id: str | None = None
) -> BaselineEntry:
    """``previous`` with the measurement's samples appended as one more session, keeping the last
    ``pool`` sessions; floor, tolerance and nodeid are the measurement's. The caller checks that the
    ruler is unchanged.

    A measurement whose every sample came from the sample cache is a re-read of an earlier session,
    not a new one: when the entry already pools a session with those scores, it is not added again
    (that would count one session twice and shrink the baseline's error bars for nothing).
    """
    fresh = entry_from_measurement(measurement, run_id=run_id)
    groups = previous.session_scores()
    sources = previous.session_sources()
    repeats = previous.session_generations()
    cached = all(s.source == "cache" for s in measurement.samples)
    if not (cached and any(sorted(g) == sorted(fresh.scores) for g in groups)):
        groups = [*groups, fresh.scores][-pool:]
        sources = [*sources, *fresh.session_sources()][-pool:]
        repeats = [*repeats, *fresh.session_generations()][-pool:]
    scores = [score for group in groups for score in group]
    sizes = [len(g) for session in repeats for g in session]
    known = any(s != EntrySource() for s in sources)
    raw = fresh.model_dump(mode="json") | {
        "scores": scores,
        "n": len(scores),
        "mean": math.fsum(scores) / len(scores),
        "sessions": [len(g) for g in groups] if len(groups) > 1 else None,
        "generations": sizes if len(sizes) > len(groups) else None,
        "sources": [s.model_dump(mode="json") for s in sources] if known else None,
    }
    return BaselineEntry.model_validate(_round_floats(raw))


def merge_entries(
    old: dict[str, BaselineEntry],
    measurements: Sequence[Measurement],
    *,
    whole_suite: bool,
    prune: bool,
    judge_error_ids: Collection[str] = (),
    pool: int = 1,
    moved: Collection[str] = (),
    coverage: SessionCoverage | None = None,
    run_id: str | Mapping[str, str] | None = None,
    rejudged: Mapping[str, BaselineEntry] | None = None,
) -> tuple[dict[str, BaselineEntry], UpdateSummary]:
    """The merge rule of :func:`update_baseline`, without any I/O.

    A measurement without samples is treated like a judge error (it has no value to record); when one
    item id appears twice, the later measurement wins. The value an updated entry takes: the
    measurement's samples pooled with the entry's last sessions (:func:`pool_entry`) when ``pool`` > 1,
    the fingerprint is unchanged and the item is not in ``moved`` (items the comparison found
    regressed or improved); otherwise the measurement alone.
    What happens to an entry without a new value is :func:`keep_reason`'s decision; without
    ``coverage`` nothing is known of the session's tests.

    ``run_id``: the run that measured the measurements (recorded in the entries' ``sources``), or per
    item id (``aimeasure merge``: each shard's run).

    ``rejudged``: entries whose old artifacts today's judge re-scored (``--aimeasure-attribute``):
    each takes the place of the old entry before the merge, so a judge swap keeps the entry's history
    under the new ruler instead of throwing it away. One is used only while the file still holds the
    entry it was made from (the same sources): a concurrent update wins over it.
    """
    if pool < 1:
        raise ValueError(f"pool must be >= 1, got {pool}")
    old = _with_rejudged(old, rejudged or {})
    errors = set(judge_error_ids) | {m.item_id for m in measurements if not m.samples}
    measured = {m.item_id: m for m in measurements if m.item_id not in errors}
    moved = set(moved)
    merged = dict(old)
    summary = UpdateSummary()
    for item_id, measurement in measured.items():
        run = run_id.get(item_id) if isinstance(run_id, Mapping) else run_id
        _take_measurement(merged, summary, old.get(item_id), measurement, run, pool=pool, moved=moved)
    coverage = coverage or SessionCoverage(whole_suite=whole_suite)
    coverage = coverage.model_copy(
        update={
            "whole_suite": whole_suite,
            "prune": prune,
            "not_measured": {**coverage.not_measured, **dict.fromkeys(errors, "judge error")},
        }
    )
    for item_id, entry in old.items():
        if item_id not in measured:
            _keep_or_drop(merged, summary, item_id, keep_reason(item_id, entry, coverage))
    return dict(sorted(merged.items())), _sorted(summary)


def _with_rejudged(
    old: dict[str, BaselineEntry], rejudged: Mapping[str, BaselineEntry]
) -> dict[str, BaselineEntry]:
    """``old`` with each re-judged entry in place of the one it was made from, while the file still
    holds that one (the same sources): a concurrent update wins over it."""
    old = dict(old)
    for item_id, entry in rejudged.items():
        was = old.get(item_id)
        if was is not None and was.sources == entry.sources and was.pooled == entry.pooled:
            old[item_id] = entry
    return old


def _take_measurement(
    merged: dict[str, BaselineEntry],
    summary: UpdateSummary,
    previous: BaselineEntry | None,
    measurement: Measurement,
    run: str | None,
    *,
    pool: int,
    moved: set[str],
) -> None:
    """The entry a measurement makes (pooled with ``previous`` when the rule allows), put in
    ``merged`` unless its value is unchanged, and counted in ``summary``."""
    item_id = measurement.item_id
    entry = entry_from_measurement(measurement, run_id=run)
    if previous is None:
        summary.added.append(item_id)
        merged[item_id] = entry
        return
    pooling = pool > 1 and item_id not in moved and previous.fingerprint == entry.fingerprint
    if pooling:
        entry = pool_entry(previous, measurement, pool=pool, run_id=run)
    if _same_value(previous, entry):
        summary.unchanged.append(item_id)
        if previous.artifact_key != entry.artifact_key and entry.artifact_key is not None:
            # The value is the same; the entry only learns (or follows a rename of) its artifact's key.
            merged[item_id] = previous.model_copy(update={"artifact_key": entry.artifact_key})
    else:
        (summary.pooled if pooling else summary.updated).append(item_id)
        merged[item_id] = entry


def _keep_or_drop(
    merged: dict[str, BaselineEntry], summary: UpdateSummary, item_id: str, reason: str | None
) -> None:
    """An entry without a new value: kept for ``reason``, dropped when there is none."""
    if reason is None:
        summary.removed.append(item_id)
        del merged[item_id]
    else:
        summary.kept_because.setdefault(reason, []).append(item_id)


def _sorted(summary: UpdateSummary) -> UpdateSummary:
    """The summary with every list of item ids sorted, and the kept entries split by reason."""
    summary.kept = [i for reason, ids in summary.kept_because.items() if reason != "judge error" for i in ids]
    for ids in (summary.added, summary.updated, summary.pooled, summary.removed, summary.unchanged):
        ids.sort()
    summary.kept.sort()
    summary.kept_because = {reason: sorted(ids) for reason, ids in sorted(summary.kept_because.items())}
    summary.kept_judge_error = summary.kept_because.get("judge error", [])
    return summary


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def update_baseline(
    path: Path,
    measurements: Sequence[Measurement],
    *,
    whole_suite: bool,
    prune: bool,
    judge_error_ids: Collection[str] = (),
    coverage: SessionCoverage | None = None,
    var_floor: float = VAR_FLOOR_DEFAULT,
    lock_timeout: float = 60.0,
    pool: int = 1,
    moved: Collection[str] = (),
    run_id: str | Mapping[str, str] | None = None,
    rejudged: Mapping[str, BaselineEntry] | None = None,
) -> UpdateSummary:
    """Merge ``measurements`` into the baseline at ``path`` and write it back atomically.

    * measured items are added, or updated when their value changed (same scores in any order, same
      fingerprint, floor and tolerance count as unchanged); with ``pool`` > 1 an unchanged ruler pools
      the session into the entry instead (see :func:`merge_entries`);
    * an entry without a new value is kept or removed by :func:`keep_reason` (``coverage`` says what
      the session knows of its tests): kept entries are listed by reason in ``kept_because``;
    * per-dimension aggregates are recomputed from the merged entries (``var_floor`` only shapes
      their informational CI).

    An invalid existing file raises :class:`BaselineError` and is left untouched. The file is not
    rewritten when its canonical text would not change, and not created when there is nothing to record.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path(path)), timeout=lock_timeout)
    try:
        with lock:
            # Read inside the lock: another process may have written since this session started.
            read = _read(path)
            old_text, old = read if read is not None else (None, BaselineFile())
            entries, summary = merge_entries(
                old.entries,
                measurements,
                whole_suite=whole_suite,
                prune=prune,
                judge_error_ids=judge_error_ids,
                pool=pool,
                moved=moved,
                coverage=coverage,
                run_id=run_id,
                rejudged=rejudged,
            )
            aggregates = aggregate_dimensions(entries, var_floor=var_floor)
            text = dumps_baseline(BaselineFile(entries=entries, dimensions=aggregates))
            if text != old_text and (entries or old_text is not None):
                atomic_write(path, text)
                summary.written = True
    except Timeout as exc:
        raise BaselineError(
            f"{path}: another process has held {lock.lock_file} for over {lock_timeout:.0f}s; "
            "wait for it to finish and run the update again.",
            path=path,
        ) from exc
    return summary
