"""The session's judge engine and what it asks of the session: a backend per judge model (a conftest's
``pytest_aimeasure_make_backend``, else the built-in one, through the batch API under
``--judge-batch``), the judge prompt (after ``pytest_aimeasure_judge_prompt``), and the scripted
judge's verdicts (``pytest_aimeasure_scripted_verdict``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aimeasure.session.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pytest_aimeasure.judge.backends.base import Backend
    from pytest_aimeasure.judge.backends.scripted import ScriptedCall, ScriptedScore
    from pytest_aimeasure.judge.engine import JudgeEngine
    from pytest_aimeasure.judge.prompt import JudgePrompt
    from pytest_aimeasure.measure.models import Fingerprint
    from pytest_aimeasure.session.recording import Recording

__all__ = ["SessionBackends", "make_engine"]


class SessionBackends:
    """Builds the engine's backends and prompts from the session's settings and its hooks."""

    def __init__(self, config: pytest.Config, settings: Settings, recording: Recording | None) -> None:
        self.config = config
        self.settings = settings
        self.recording = recording

    def backend(self, model: str) -> Backend:
        """The backend of ``model``; under ``--judge-batch`` its calls go through the batch API."""
        backend = self._built(model)
        if self.settings.batch:
            from pytest_aimeasure.judge.batch import BatchJournal, use_batches

            rec = self.recording
            journal = BatchJournal(rec.run.path, rec.run.writer) if rec is not None else None
            try:
                use_batches(backend, journal, poll_s=self.settings.batch_poll)
            except ValueError as exc:
                raise pytest.UsageError(f"--judge-batch: {exc}") from None
        return backend

    def _built(self, model: str) -> Backend:
        from pytest_aimeasure.judge.resolve import ModelError, build_backend

        hook = self.config.hook
        custom: Backend | None = hook.pytest_aimeasure_make_backend(model=model, config=self.config)
        if custom is not None:
            return custom
        try:
            # The engine does the transport retries (--judge-retries), so it sees every 429.
            return build_backend(
                model, timeout=self.settings.timeout, retries=0, scripted_fallback=self.scripted_verdict
            )
        except ModelError as exc:
            raise pytest.UsageError(f"--judge-model: {exc}") from None

    def scripted_verdict(self, call: ScriptedCall) -> ScriptedScore | None:
        """The scripted judge's verdict from a conftest, when one implements the hook."""
        hook = self.config.hook
        result: ScriptedScore | None = hook.pytest_aimeasure_scripted_verdict(call=call, config=self.config)
        return result

    def prompt(self, dimension: str) -> JudgePrompt:
        """The judge prompt of ``dimension``, as the conftests' prompt hooks leave it."""
        from pytest_aimeasure.judge.prompt import JudgePrompt

        template = JudgePrompt()
        self.config.hook.pytest_aimeasure_judge_prompt(
            prompt=template, dimension=dimension, config=self.config
        )
        return template


def make_engine(
    config: pytest.Config,
    settings: Settings,
    recording: Recording | None,
    calibrated_floors: Mapping[str, tuple[float, Fingerprint]],
    *,
    notice: Callable[[str], None] | None = None,
) -> JudgeEngine:
    """The session's judge engine: its settings, backends, prompts, and the run's journal and budget;
    ``calibrated_floors`` are the variance floors a calibration measured, with the ruler it measured."""
    from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings

    assert settings.model is not None
    backends = SessionBackends(config, settings, recording)
    rec = recording
    return JudgeEngine(
        JudgeSettings(
            model=settings.model,
            samples=settings.fixed_samples,
            concurrency=settings.concurrency_ceiling,
            concurrency_start=settings.concurrency,
            timeout=settings.timeout,
            retries=settings.retries,
            quota_wait=settings.quota_wait,
            var_floor=settings.var_floor,
            var_floors={name: floor for name, (floor, _) in calibrated_floors.items()},
            var_floor_rulers={name: ruler for name, (_, ruler) in calibrated_floors.items()},
            replay=settings.cache == "replay",
        ),
        make_backend=backends.backend,
        prompt=backends.prompt,
        sink=rec.sink if rec is not None else None,
        budget=rec.budget if rec is not None else None,
        cost=rec.cost if rec is not None else None,
        estimate=rec.estimate if rec is not None else None,
        notice=notice,
    )
