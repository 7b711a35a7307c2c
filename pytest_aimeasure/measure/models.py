"""Pydantic models for every verdict, measurement and file format the plugin reads or writes.

Data flows one way: a judge call yields a :class:`Sample`; the N samples of one item make a
:class:`Measurement`; comparisons and checks turn measurements into :class:`Finding` objects.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SCORE_MIN = 1
SCORE_MAX = 5
TOOL_SCHEMA_VERSION = 1


def item_id(dimension: str, nodeid: str) -> str:
    """The stable id of an item in the baseline: renaming the test or the dimension makes a new item
    (the old entry is then reported "missing" and dropped by the next whole-suite update)."""
    return f"{dimension}::{nodeid}"


class Usage(BaseModel):
    """Tokens one judge (or generator) call consumed, as the provider reported them.

    As in the Anthropic Messages API, ``input_tokens`` counts only the input that was neither read
    from nor written to the provider's prompt cache; the prompt's whole input is
    :attr:`prompt_tokens`. Records written before prompt caching (no cache fields) read as zero."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    invalid: str | None = None
    """Why the provider's figures were refused (negative, not a number, absurd): the counts above are
    then zero and the call is not priced (its spend is unknown, never free)."""

    @property
    def prompt_tokens(self) -> int:
        """All input tokens: uncached, read from the cache and written to it."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            invalid=self.invalid or other.invalid,  # a sum with an unbelievable part is not priced either
        )


class Verdict(BaseModel):
    """What the judge's forced tool call must return. Strict: a score of "4" or 4.5 is invalid."""

    model_config = ConfigDict(extra="ignore", strict=True)

    dimension: str = Field(min_length=1)
    score: int = Field(ge=SCORE_MIN, le=SCORE_MAX)
    rationale: str = Field(min_length=1)

    @field_validator("rationale")
    @classmethod
    def _rationale_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("rationale must not be blank")
        return value.strip()


class Fingerprint(BaseModel):
    """The ruler's identity. Two measurements are comparable only when their fingerprints match.

    The number of samples N is not part of it: N changes a measurement's precision, not the ruler, so
    a baseline taken at N = 3 is comparable with a session at N = 5. Files written before this rule
    (baselines, run metadata) carry a ``samples`` field; it is dropped when they are read.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    model: str
    temperature: float | None
    prompt_hash: str
    rubric_hash: str
    tool_schema_version: int = TOOL_SCHEMA_VERSION
    tool_mode: Literal["forced", "auto", "scripted"] = "forced"
    plugin_major: int

    @model_validator(mode="before")
    @classmethod
    def _drop_sample_count(cls, data: Any) -> Any:
        # Migration: N used to be part of the ruler; old baselines and run records still hold it.
        if isinstance(data, dict) and "samples" in data:
            data = {k: v for k, v in data.items() if k != "samples"}
        return data

    def differences(self, other: Fingerprint) -> list[str]:
        """Names of the fields whose values differ, in declaration order."""
        mine, theirs = self.model_dump(), other.model_dump()
        return [name for name in mine if mine[name] != theirs[name]]

    def ruler(self) -> Fingerprint:
        """The instrument a run used for a dimension: the fingerprint without the rubric. Each item may
        carry its own rubric (the probes do), so the rubric hash is per item, not per run; rubric
        changes show up against the baseline, item by item."""
        return self.model_copy(update={"rubric_hash": ""})

    def digest(self) -> str:
        """A short stable hash, used in cache keys."""
        blob = json.dumps(self.model_dump(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


class Sample(BaseModel):
    """One judge call's verdict plus what it cost."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    dimension: str
    score: int = Field(ge=SCORE_MIN, le=SCORE_MAX)
    rationale: str
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str = ""
    retries: int = 0
    cost_usd: float | None = None
    tool_mode: Literal["forced", "auto", "scripted"] | None = None
    temperature: float | None = None
    source: Literal["judge", "cache", "journal"] = "judge"
    repeat: int | None = Field(default=None, ge=1, description="the generation repeat it judged (1-based)")


class RepeatSummary(BaseModel):
    """How a measurement pooled K generation repeats (see :mod:`pytest_aimeasure.measure.repeats`):
    each repeat judged N times; the variance of the repeat means split into generation and judge parts."""

    model_config = ConfigDict(extra="forbid")

    k: int = Field(ge=1, description="repeats judged")
    generated: int = Field(ge=1, description="repeats generated (more than k when a gate failed on some)")
    keys: list[str | None]
    shas: list[str] = Field(
        default_factory=list,
        description="sha256 of each judged repeat's artifact, in order (what attribution rejudges); "
        "empty in results written before it was recorded",
    )
    means: list[float]
    var_between: float = Field(description="sample variance of the repeat means (ddof 1)")
    var_judge: float = Field(description="pooled within-repeat variance of the samples (judge noise)")
    var_generation: float = Field(description="max(0, var_between - var_judge / N): the generator's part")
    se: float = Field(description="standard error of the item mean, generation variance included")
    df: float


Evidence = Literal["repeats", "sessions", "prior", "unmeasured", "none"]
"""Where a baseline entry's generation variance came from: the spread of its repeats within sessions,
of its pooled sessions' means, the prior (one session whose judge gave one score: nothing else can
move), or nowhere (one session of a judge that varies); "none": no entry yet, and the session writes
the baseline, so it draws outputs to measure both parts."""


class RepeatsChoice(BaseModel):
    """How ``repeats="auto"`` chose an artifact's outputs from the baseline entries that judged it
    (:func:`pytest_aimeasure.measure.repeats.choose_repeats`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repeats: int = Field(ge=1, description="outputs drawn")
    spend: Literal["generations", "judge samples"]
    var_generation: float = Field(
        description="sum over the entries of the generator's variance (one output's mean between draws)"
    )
    var_judge: float = Field(description="sum over the entries of the judge's variance / N (one output)")
    evidence: Evidence = Field(description="the best evidence any entry had for its generation variance")
    entries: int = Field(ge=0, description="baseline entries that judged the artifact")


class AdaptiveRecord(BaseModel):
    """How an item sampled under ``--judge-samples auto`` (see :mod:`pytest_aimeasure.judge.adaptive`)."""

    model_config = ConfigDict(extra="forbid")

    minimum: int = Field(ge=1)
    maximum: int = Field(ge=1)
    step: int = Field(ge=1)
    stopped: Literal["settled", "agreed", "maximum", "budget"] = Field(
        description="settled: every decision was; agreed: the judge gave one score every time, so more "
        "samples could not move the mean; maximum: it took the most samples allowed; budget: the budget "
        "stopped a later look"
    )
    open: list[Literal["floor", "drift"]] = Field(
        default_factory=list, description="decisions still open when it stopped"
    )


class Measurement(BaseModel):
    """The N samples of one item (one dimension of one artifact), aggregated with error bars."""

    model_config = ConfigDict(extra="forbid")

    item_id: str
    nodeid: str
    dimension: str
    floor: float
    tolerance: float
    phase: str | None = None
    samples: list[Sample]
    mean: float
    sd: float
    n: int
    ci_low: float
    ci_high: float
    confidence: float = 0.95
    fingerprint: Fingerprint
    judge: str | None = None
    """The judge model string that measured it (a dimension's ``judge=``, the escalation model, else
    ``--judge-model``), so the item can be judged again by the same judge (attribution). Absent in
    records written before per-dimension judges."""
    artifact_key: str | None = None
    artifact_sha256: str | None = None
    excerpt: str = ""
    facts: dict[str, Any] | None = None
    repeats: RepeatSummary | None = None
    """Set when the item pooled several generation repeats (``repeats=K``)."""
    chosen: RepeatsChoice | None = None
    """Set when the artifact asked for ``repeats="auto"`` and the baseline decided its outputs."""
    adaptive: AdaptiveRecord | None = None
    """Set when the item was sampled adaptively (``samples="auto"``): why it stopped where it did."""
    escalation: Escalation | None = None
    """Set when the standing judge's samples were unsettled and a stronger model re-judged the item
    (``escalate=``): this measurement is the stronger judge's; the standing judge's is kept here."""

    @property
    def standing(self) -> Measurement:
        """The standing judge's measurement: the one kept by an escalation, else this one."""
        return self.escalation.standing if self.escalation is not None else self

    @property
    def scores(self) -> list[int]:
        return [s.score for s in self.samples]

    @property
    def lowest(self) -> Sample:
        return min(self.samples, key=lambda s: (s.score, s.index))

    @property
    def breached(self) -> bool:
        return self.mean < self.floor

    @property
    def near_floor(self) -> bool:
        """Above the floor, but the floor lies inside the confidence interval."""
        return not self.breached and self.ci_low < self.floor

    @property
    def usage(self) -> Usage:
        total = Usage()
        for s in self.samples:
            total = total + s.usage
        return total

    @property
    def cost_usd(self) -> float | None:
        costs = [s.cost_usd for s in self.samples if s.source == "judge"]
        if any(c is None for c in costs):
            return None
        return float(sum(c for c in costs if c is not None))


class Escalation(BaseModel):
    """Why an item was re-judged by a stronger model, and the standing judge's measurement of it.

    The stronger judge's measurement is the item's: it decides the floor verdict and goes to the
    baseline. The standing judge's is kept (``standing``, without the artifact excerpt and facts the
    item's measurement already holds) so the reports show both means, and so a baseline taken with
    the standing judge can still be compared on that judge (:mod:`pytest_aimeasure.compare.drift`)."""

    model_config = ConfigDict(extra="forbid")

    reasons: list[Literal["disagreement", "straddles_floor"]] = Field(min_length=1)
    spread: int = Field(ge=0, description="max - min of the standing judge's scores")
    standing: Measurement

    @property
    def reason_text(self) -> str:
        """'samples disagree by 2 points; samples straddle the floor 3'."""
        parts = []
        if "disagreement" in self.reasons:
            parts.append(f"samples disagree by {self.spread} points")
        if "straddles_floor" in self.reasons:
            parts.append(f"samples straddle the floor {self.standing.floor:g}")
        return "; ".join(parts)


Measurement.model_rebuild()

FindingKind = Literal[
    "floor_breach",
    "floor_warning",
    "judge_error",
    "regressed",
    "improved",
    "inconclusive",
    "underpowered",
    "not_comparable",
    "missing",
    "new",
    "repair",
    "retry",
    "budget",
    "interrupted",
    "gate_failed",
    "self_preference",
    "generation_error",
    "resume",
    "uncalibrated",
    "calibration_stale",
    "judge_bias",
    "cache",
    "attribution",
    "confirmation",
    "escalated",
    "usage",
]


class Finding(BaseModel):
    """A thing a human should look at. ``severity`` decides whether it can fail the run."""

    model_config = ConfigDict(extra="forbid")

    kind: FindingKind
    severity: Literal["fail", "warn", "info"]
    subject: str
    message: str
    nodeid: str | None = None
    rationale: str | None = None
    excerpt: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


Outcome = Literal["passed", "failed", "skipped", "error"]


class ItemResult(BaseModel):
    """One test's final record in a run: what it was, how it ended, what it measured and found."""

    model_config = ConfigDict(extra="forbid")

    nodeid: str
    kind: Literal["gate", "dimension", "other"]
    outcome: Outcome
    duration_s: float = 0.0
    item_id: str | None = None
    measurements: list[Measurement] = Field(default_factory=list)
    artifact_keys: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    message: str | None = None
    judge_error: bool = False
    extra: dict[str, Any] = Field(default_factory=dict, description="data a collector adds (suites: target)")
    declared: list[str] = Field(
        default_factory=list, description="item ids the test's marker (or suite) says it measures"
    )

    @property
    def measurement(self) -> Measurement | None:
        """The item's measurement (a dimension test measures one; a suite item one per dimension)."""
        return self.measurements[0] if self.measurements else None

    @property
    def target(self) -> str | None:
        """The suite target whose output this item judged (``extra["suite"]["target"]``); None for a
        plain pytest test."""
        suite = self.extra.get("suite")
        target = suite.get("target") if isinstance(suite, dict) else None
        return target if isinstance(target, str) else None


class RunMeta(BaseModel):
    """A run's metadata file. Written at start, rewritten at the end; never holds samples."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    started_at: str
    ended_at: str | None = None
    status: Literal["running", "finished", "interrupted"] = "running"
    argv: list[str] = Field(default_factory=list)
    git_commit: str | None = None
    git_dirty: bool | None = None
    plugin_version: str
    judge_model: str | None = None
    # The pytest rootdir that recorded it, relative to the store: bare --aimeasure-rejudge/-resume stay in it.
    rootdir: str | None = None
    fingerprints: list[Fingerprint] = Field(default_factory=list)
    generators: list[str] = Field(default_factory=list)
    resumed_from: str | None = None
    rejudge_of: str | None = None
    items: int = 0
    failures: int = 0
    # The whole run's figures, across every session that wrote it (a resume adds to them):
    judge_calls: int = 0
    reused_samples: int = 0  # samples taken from the cache (other runs) instead of a judge call
    spend_usd: float | None = None
    passed: bool | None = Field(default=None, description="the session's verdict; None: not concluded")
    failed_because: list[str] = Field(default_factory=list, description="why the session failed, if it did")


def first_error(exc: ValidationError, top: str = "top level") -> str:
    """``where: what`` of a validation error's first problem, so a message names the field to fix
    (``top`` when the problem is the whole document)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or top
    return f"{where}: {err['msg']}"
