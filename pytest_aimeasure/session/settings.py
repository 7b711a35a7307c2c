"""A session's settings: the plugin's options and ini values, read once and checked before any test
runs (a bad combination is a usage error naming the flag)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_aimeasure.judge.concurrency import ADAPTIVE_CEILING, ADAPTIVE_START
from pytest_aimeasure.measure.sampling import AUTO, SamplePlan, Samples, call_range
from pytest_aimeasure.session import options

if TYPE_CHECKING:
    from pytest_aimeasure.report.model import ReportSettings

__all__ = ["BATCH_PIPELINE", "Settings"]

BATCH_PIPELINE = 1_000_000
"""``--judge-pipeline`` under ``--judge-batch`` unless given: no bound a session reaches."""


@dataclass(frozen=True)
class Settings:
    judging: bool
    model: str | None
    samples: Samples
    concurrency: int
    """Judge calls in flight per provider at the start (``--judge-concurrency``, else the adaptive start)."""
    concurrency_ceiling: int
    """The most calls in flight the limit grows to (``--judge-concurrency``, else the adaptive ceiling)."""
    timeout: float
    retries: int
    cache: str
    budget_usd: float | None
    dry_run: bool
    baseline: Path
    update_baseline: bool
    prune_baseline: bool
    baseline_pool: int
    drift: str
    json_path: Path | None
    html_path: Path | None
    store: Path
    rejudge: str | None
    resume: str | None
    var_floor: float
    calibrate: str | None = None  # "report" or "fail" (--judge-calibrate)
    judge_bias: bool = False
    anchor_globs: tuple[str, ...] = ()
    min_kappa: float = 0.6
    max_abs_bias: float = 0.5
    attribute: bool = False
    sample_plan: SamplePlan = field(default_factory=SamplePlan)
    """The looks of ``samples="auto"`` (--judge-samples-min/-max/-step)."""
    pipeline: int = 0  # dimension tests whose verdicts may be pending at once (--judge-pipeline)
    batch: bool = False  # --judge-batch: judge calls through the Message Batches API
    batch_poll: float = 5.0
    quota_wait: float = 300.0  # --judge-quota-wait: seconds of nothing but 429/529 before giving up

    @classmethod
    def from_config(cls, config: pytest.Config) -> Settings:
        root = config.rootpath

        def path(dest: str) -> Path | None:
            value = options.get(config, dest)
            if value is None:
                return None
            p = Path(os.path.expanduser(str(value)))
            return p if p.is_absolute() else root / p

        rejudge, resume = options.get(config, "rejudge"), options.get(config, "resume")
        dry_run = bool(options.get(config, "judge_dry_run"))
        judging = (
            bool(options.get(config, "ai_judge")) or rejudge is not None or resume is not None or dry_run
        )
        model = options.get(config, "judge_model")
        if judging and model is None:
            from pytest_aimeasure.judge.resolve import CONFIGURE_HELP, default_model

            model = default_model() or options.get(config, "offline_judge_model")
            if model is None and not dry_run:
                raise pytest.UsageError(f"--ai-judge: {CONFIGURE_HELP}")
        if judging and model is not None:
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
        for flag, value in (("--aimeasure-rejudge", rejudge), ("--aimeasure-resume", resume)):
            if value is not None and value != "latest" and os.path.exists(value) and os.sep in value:
                raise pytest.UsageError(
                    f"{flag} took {value!r} as a run id, but it is a path: write {flag}=latest (or "
                    f"{flag}=RUN_ID) before the test paths"
                )
        if bool(options.get(config, "update_baseline")) and not judging:
            raise pytest.UsageError(
                "--update-baseline needs measurements: add --ai-judge (without it no dimension is "
                "judged, and a whole-suite update would empty the baseline)"
            )
        calibrate = options.get(config, "calibrate")
        judge_bias = bool(options.get(config, "judge_bias"))
        if (calibrate or judge_bias) and not judging:
            raise pytest.UsageError(
                f"{'--judge-calibrate' if calibrate else '--judge-bias'} judges the anchors: add --ai-judge"
            )
        if judge_bias and not calibrate:
            calibrate = "report"  # the probes run on the anchors
        if bool(options.get(config, "attribute")) and not judging:
            raise pytest.UsageError(
                "--aimeasure-attribute re-judges the baseline's artifacts with today's judge: add --ai-judge"
            )
        if rejudge is not None and resume is not None:
            raise pytest.UsageError("--aimeasure-rejudge and --aimeasure-resume do not combine: pick one")
        batch = bool(options.get(config, "judge_batch"))
        if batch and judging and model is not None:
            from pytest_aimeasure.judge.resolve import route

            kind, prefix = route(model), model.partition("/")[0]
            if kind != "anthropic" and not (kind == "litellm" and prefix == "openai"):
                raise pytest.UsageError(
                    f"--judge-batch: batch mode speaks the Anthropic Message Batches API and OpenAI's "
                    f"Batch API (through litellm), and --judge-model {model} is neither an anthropic nor "
                    "an 'openai/<model>' judge; use one of those, or drop --judge-batch"
                )
        if dry_run and getattr(config.option, "numprocesses", None):
            raise pytest.UsageError("--judge-dry-run does not combine with -n: it runs no test anyway")
        low, high = options.get(config, "judge_samples_min"), options.get(config, "judge_samples_max")
        if high < low:
            raise pytest.UsageError(
                f"--judge-samples-max {high} is below --judge-samples-min {low}: adaptive sampling takes at "
                "least the minimum and at most the maximum (or fix the ini keys "
                "aimeasure_judge_samples_min/max)"
            )
        concurrency = options.get(config, "judge_concurrency")
        ceiling = ADAPTIVE_CEILING if concurrency is None else concurrency
        pipeline = options.get(config, "judge_pipeline")
        if pipeline is None and batch:
            # A batch takes minutes: every dimension item of the session waits in it at once.
            pipeline = BATCH_PIPELINE
        elif pipeline is None:
            pipeline = max(32, 2 * ceiling)
        return cls(
            judging=judging,
            model=model,
            samples=options.get(config, "judge_samples"),
            concurrency=ADAPTIVE_START if concurrency is None else concurrency,
            concurrency_ceiling=ceiling,
            timeout=options.get(config, "judge_timeout"),
            retries=options.get(config, "judge_retries"),
            cache=options.get(config, "judge_cache"),
            budget_usd=options.get(config, "judge_budget_usd"),
            dry_run=dry_run,
            baseline=path("baseline") or root / "aimeasure-baseline.json",
            update_baseline=bool(options.get(config, "update_baseline")),
            prune_baseline=bool(options.get(config, "prune_baseline")),
            baseline_pool=options.get(config, "baseline_pool"),
            drift=options.get(config, "drift"),
            json_path=path("aimeasure_json"),
            html_path=path("aimeasure_html"),
            store=path("aimeasure_store") or root / ".aimeasure",
            rejudge=rejudge,
            resume=resume,
            var_floor=options.get(config, "judge_var_floor"),
            calibrate=calibrate,
            judge_bias=judge_bias,
            anchor_globs=tuple(config.getini(options.ANCHORS_INI) or ()),
            min_kappa=options.get(config, "min_kappa"),
            max_abs_bias=options.get(config, "max_abs_bias"),
            attribute=bool(options.get(config, "attribute")),
            sample_plan=SamplePlan(low, high, options.get(config, "judge_samples_step")),
            pipeline=pipeline,
            batch=batch,
            batch_poll=options.get(config, "judge_batch_poll"),
            quota_wait=options.get(config, "judge_quota_wait"),
        )

    def calls(self, samples: Samples | None = None) -> tuple[int, int]:
        """(fewest, most) judge calls of an item whose dimension sets ``samples`` (None: the session's)."""
        return call_range(samples or self.samples, self.sample_plan)

    @property
    def fixed_samples(self) -> int:
        """N where a fixed count is needed (anchors for calibration): the session's N, under ``auto``
        its minimum."""
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
        )

