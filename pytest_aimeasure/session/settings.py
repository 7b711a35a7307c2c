"""A session's settings: the plugin's options and ini values, read once and checked before any test
runs (a bad combination is a usage error naming the flag)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aimeasure.judge.concurrency import ADAPTIVE_CEILING, ADAPTIVE_START, GENERATION_CONCURRENCY, share
from pytest_aimeasure.measure.sampling import AUTO, SamplePlan, Samples, call_range
from pytest_aimeasure.session import options

if TYPE_CHECKING:
    from pytest_aimeasure.report.model import ReportSettings

__all__ = ["BATCH_PIPELINE", "Settings"]

BATCH_PIPELINE = 1_000_000
"""``--judge-pipeline`` under ``--judge-batch`` unless given: no bound a session reaches."""


_FIELD_OF = {
    "judge_samples": "samples",
    "judge_concurrency": "concurrency",
    "judge_timeout": "timeout",
    "judge_retries": "retries",
    "judge_quota_wait": "quota_wait",
    "judge_cache": "cache",
    "judge_budget_usd": "budget_usd",
    "judge_dry_run": "dry_run",
    "judge_var_floor": "var_floor",
    "judge_max_artifact_chars": "max_artifact_chars",
    "judge_batch": "batch",
    "judge_batch_poll": "batch_poll",
    "judge_pipeline": "pipeline",
    "judge_model": "model",
    "aimeasure_json": "json_path",
    "aimeasure_html": "html_path",
    "aimeasure_store": "store",
}
"""The :class:`Settings` field of an option whose field is not named after its ``dest``."""
_READ_ONLY = (
    "ai_judge",
    "offline_judge_model",
    "judge_samples_min",
    "judge_samples_max",
    "judge_samples_step",
)
"""Options read to derive a field (judging, the model, the sample plan), not kept themselves."""
_PATHS = ("baseline", "json_path", "html_path", "store")


@dataclass(frozen=True)
class Settings:
    """The session's settings: each option of the table (:data:`options.OPTIONS`, where the defaults
    live), read once, checked together, plus what is derived from them."""

    judging: bool  # --ai-judge, or a mode that judges (dry run, rejudge, resume)
    model: str | None
    samples: Samples
    concurrency: int
    """This process's judge calls in flight per provider at the start (``--judge-concurrency``, else
    the adaptive start; under xdist the worker's :func:`~pytest_aimeasure.judge.concurrency.share`
    of it: the figures are the session's)."""
    concurrency_ceiling: int
    """The most calls in flight the limit grows to (``--judge-concurrency``, else the adaptive
    ceiling; the worker's share)."""
    generation_concurrency: int
    """A suite target's generation calls in flight when it sets none (``--judge-concurrency``, else
    :data:`~pytest_aimeasure.judge.concurrency.GENERATION_CONCURRENCY`; the worker's share)."""
    timeout: float
    retries: int
    quota_wait: float  # --judge-quota-wait: seconds of nothing but 429/529 before giving up
    cache: str
    budget_usd: float | None
    dry_run: bool
    baseline: Path
    update_baseline: bool
    prune_baseline: bool
    baseline_pool: int
    baseline_repeats: int
    drift: str
    json_path: Path | None
    html_path: Path | None
    store: Path
    rejudge: str | None
    resume: str | None
    var_floor: float
    max_artifact_chars: int  # the longest artifact text sent to the judge (--judge-max-artifact-chars)
    calibrate: str | None  # "report" or "fail" (--judge-calibrate)
    judge_bias: bool
    anchor_globs: tuple[str, ...]
    min_kappa: float
    max_abs_bias: float
    attribute: bool
    confirm: str  # "rejudge" or "off" (--aimeasure-confirm)
    sample_plan: SamplePlan
    """The looks of ``samples="auto"`` (--judge-samples-min/-max/-step)."""
    pipeline: int  # dimension tests whose verdicts may be pending at once (--judge-pipeline)
    batch: bool  # --judge-batch: judge calls through the provider's batch API
    batch_poll: float
    processes: int
    """The session's processes that call the judges at once: its xdist workers, else 1."""
    process_index: int
    """This process's index among them (xdist's ``gw<N>``)."""

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        """The settings of ``config``; a bad value or combination is a usage error naming the flag."""
        raw = {opt.dest: options.get(config, opt.dest) for opt in options.OPTIONS}
        values = {_FIELD_OF.get(dest, dest): value for dest, value in raw.items() if dest not in _READ_ONLY}
        for name in ("dry_run", "update_baseline", "prune_baseline", "judge_bias", "attribute", "batch"):
            values[name] = bool(values[name])
        values["judging"] = bool(raw["ai_judge"]) or values["dry_run"] or _rejudges(values)
        values["model"] = _model(config, values, raw["offline_judge_model"])
        _check_modes(config, values)
        if values["judge_bias"] and not values["calibrate"]:
            values["calibrate"] = "report"  # the probes run on the anchors
        values["sample_plan"] = _sample_plan(raw)
        values["processes"], values["process_index"] = _process(config)
        values.update(_concurrency(values["concurrency"], values["processes"], values["process_index"]))
        values["pipeline"] = _pipeline(values)
        values["anchor_globs"] = tuple(config.getini(options.ANCHORS_INI) or ())
        for name in _PATHS:
            values[name] = _path(config.rootpath, values[name])
        return cls(**values)

    def calls(self, samples: Samples | None = None) -> tuple[int, int]:
        """(fewest, most) judge calls of an item whose dimension sets ``samples`` (None: the session's)."""
        return call_range(samples or self.samples, self.sample_plan)

    @property
    def baselines_fresh_outputs(self) -> bool:
        """This session writes the baseline from outputs it generates (``--update-baseline``, not a
        rejudged run, whose artifacts are the ones it stored)."""
        return self.update_baseline and self.rejudge is None

    @property
    def default_repeats(self) -> int:
        """Generation repeats of an artifact that sets none: ``--aimeasure-baseline-repeats`` while
        this session writes the baseline from fresh outputs, else one."""
        return self.baseline_repeats if self.baselines_fresh_outputs else 1

    @property
    def fixed_samples(self) -> int:
        """N where a fixed count is needed (anchors for calibration; the judge's share of one output
        in ``repeats="auto"``'s choice): the session's N, under ``auto`` its minimum."""
        return self.sample_plan.minimum if self.samples == AUTO else int(self.samples)

    @property
    def calibration_file(self) -> Path:
        """``aimeasure-calibration.json`` next to the baseline."""
        return self.baseline.parent / "aimeasure-calibration.json"

    def for_reports(self) -> ReportSettings:
        """The values the reports show (reports sit a floor below the session and never read it)."""
        from pytest_aimeasure.report.model import ReportSettings

        auto = self.samples == AUTO
        samples = f"samples {self.sample_plan.describe()}" if auto else f"{self.samples} samples"
        return ReportSettings(
            model=self.model,
            samples_text=samples,
            baseline=self.baseline,
            store=self.store,
            judging=self.judging,
            update_baseline=self.update_baseline,
            var_floor=self.var_floor,
            dry_run=self.dry_run,
            rejudge=self.rejudge,
            resume=self.resume,
            drift=self.drift,
            batch=self.batch,
            attribute=self.attribute,
            sample_minimum=self.sample_plan.minimum,
            sample_maximum=self.sample_plan.maximum,
            default_repeats=self.default_repeats,
        )


def _rejudges(values: dict[str, Any]) -> bool:
    return values["rejudge"] is not None or values["resume"] is not None


def _path(root: Path, value: Any) -> Path | None:
    """A path option's value, relative to the rootdir unless absolute (``~`` expanded)."""
    if value is None:
        return None
    path = Path(os.path.expanduser(str(value)))
    return path if path.is_absolute() else root / path


def _model(config: pytest.Config, values: dict[str, Any], offline: str | None) -> str | None:
    """The judge model: --judge-model, else a current Claude model when a key is set, else
    --offline-judge-model; checked before any test runs."""
    model: str | None = values["model"]
    if not values["judging"]:
        return model
    if model is None:
        from pytest_aimeasure.judge.resolve import CONFIGURE_HELP, default_model

        model = default_model() or offline
        if model is None and not values["dry_run"]:
            raise pytest.UsageError(f"--ai-judge: {CONFIGURE_HELP}")
    if model is not None:
        _check_model(config, model)
        if values["batch"]:
            _check_batch_model(model)
    return model


def _check_model(config: pytest.Config, model: str) -> None:
    from pytest_aimeasure.judge.resolve import ModelError, check_provider, require_available, route

    try:
        route(model)
        try:
            check_provider(model)
            require_available(model)
        except ModelError:
            # An unknown provider, or litellm missing, is a usage error before any call,
            # unless a plugin serves the model (pytest_aimeasure_make_backend).
            if config.hook.pytest_aimeasure_make_backend(model=model, config=config) is None:
                raise
    except ModelError as exc:
        raise pytest.UsageError(f"--judge-model {model}: {exc}") from None


def _check_batch_model(model: str) -> None:
    from pytest_aimeasure.judge.resolve import route

    kind, prefix = route(model), model.partition("/")[0]
    if kind != "anthropic" and not (kind == "litellm" and prefix == "openai"):
        raise pytest.UsageError(
            f"--judge-batch: batch mode speaks the Anthropic Message Batches API and OpenAI's "
            f"Batch API (through litellm), and --judge-model {model} is neither an anthropic nor "
            "an 'openai/<model>' judge; use one of those, or drop --judge-batch"
        )


def _check_modes(config: pytest.Config, values: dict[str, Any]) -> None:
    """The combinations of modes that cannot work, each a usage error saying what to do."""
    for flag, value in (("--aimeasure-rejudge", values["rejudge"]), ("--aimeasure-resume", values["resume"])):
        if value is not None and value != "latest" and os.path.exists(value) and os.sep in value:
            raise pytest.UsageError(
                f"{flag} took {value!r} as a run id, but it is a path: write {flag}=latest (or "
                f"{flag}=RUN_ID) before the test paths"
            )
    judging = values["judging"]
    if values["update_baseline"] and not judging:
        raise pytest.UsageError(
            "--update-baseline needs measurements: add --ai-judge (without it no dimension is "
            "judged, and a whole-suite update would empty the baseline)"
        )
    if (values["calibrate"] or values["judge_bias"]) and not judging:
        flag = "--judge-calibrate" if values["calibrate"] else "--judge-bias"
        raise pytest.UsageError(f"{flag} judges the anchors: add --ai-judge")
    if values["attribute"] and not judging:
        raise pytest.UsageError(
            "--aimeasure-attribute re-judges the baseline's artifacts with today's judge: add --ai-judge"
        )
    if values["rejudge"] is not None and values["resume"] is not None:
        raise pytest.UsageError("--aimeasure-rejudge and --aimeasure-resume do not combine: pick one")
    if values["dry_run"] and getattr(config.option, "numprocesses", None):
        raise pytest.UsageError("--judge-dry-run does not combine with -n: it runs no test anyway")


def _sample_plan(raw: dict[str, Any]) -> SamplePlan:
    low, high = raw["judge_samples_min"], raw["judge_samples_max"]
    if high < low:
        raise pytest.UsageError(
            f"--judge-samples-max {high} is below --judge-samples-min {low}: adaptive sampling takes at "
            "least the minimum and at most the maximum (or fix the ini keys "
            "aimeasure_judge_samples_min/max)"
        )
    return SamplePlan(low, high, raw["judge_samples_step"])


def _process(config: pytest.Config) -> tuple[int, int]:
    """(the session's processes that judge at once, this one's index): an xdist worker's count and
    number, else (1, 0)."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None:
        return 1, 0
    count = workerinput.get("workercount") or os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1
    worker = str(workerinput.get("workerid", "gw0"))
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return max(1, int(count)), index


def _concurrency(given: int | None, processes: int = 1, index: int = 0) -> dict[str, int]:
    """The judge limit's start and ceiling, and the suites' generation limit: all ``given``
    (``--judge-concurrency``), else the adaptive limit's and the generation default; each the
    session's total, of which an xdist worker takes its share (``processes`` call a provider at once:
    before, each worker had the whole, and ``-n 4`` put four times the calls in flight)."""
    if given is not None:
        mine = share(given, processes, index)
        return {"concurrency": mine, "concurrency_ceiling": mine, "generation_concurrency": mine}
    return {
        "concurrency": share(ADAPTIVE_START, processes, index),
        "concurrency_ceiling": share(ADAPTIVE_CEILING, processes, index),
        "generation_concurrency": share(GENERATION_CONCURRENCY, processes, index),
    }


def _pipeline(values: dict[str, Any]) -> int:
    """--judge-pipeline, else: under --judge-batch every item at once (a batch takes minutes),
    otherwise twice the concurrency's ceiling, at least 32."""
    pipeline: int | None = values["pipeline"]
    if pipeline is not None:
        return pipeline
    return BATCH_PIPELINE if values["batch"] else max(32, 2 * values["concurrency_ceiling"])
