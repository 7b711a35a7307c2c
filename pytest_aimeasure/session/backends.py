"""The session's judge engine and what it asks of the session: a backend per judge model (a conftest's
``pytest_aimeasure_make_backend``, else the built-in one, through the batch API under
``--judge-batch``), the judge prompt (after ``pytest_aimeasure_judge_prompt``), the scripted
judge's verdicts (``pytest_aimeasure_scripted_verdict``), and what each judge model refused in
earlier sessions and the calls in flight its provider allowed (:class:`QuirksMemory`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from pytest_aimeasure.judge.concurrency import share
from pytest_aimeasure.session.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pytest_aimeasure.judge.backends.base import Backend
    from pytest_aimeasure.judge.backends.scripted import ScriptedCall, ScriptedScore
    from pytest_aimeasure.judge.engine import JudgeEngine
    from pytest_aimeasure.judge.prompt import JudgePrompt
    from pytest_aimeasure.measure.models import Fingerprint
    from pytest_aimeasure.session.recording import Recording

__all__ = [
    "QUIRKS_CACHE_KEY",
    "QUIRKS_KEPT_S",
    "QuirksFindings",
    "QuirksMemory",
    "SessionBackends",
    "make_engine",
]

QUIRKS_CACHE_KEY = "aimeasure/judge-quirks"
"""Where pytest's cache keeps what each judge model refused and the limit each provider allowed
(``--cache-clear`` forgets both)."""

QUIRKS_KEPT_S = 7 * 24 * 3600.0
"""How long a model's remembered quirks, and a provider's remembered limit, hold: a week after the
session that learned them, its next session learns them again from a first call that goes alone (a
provider may start to take a parameter it refused) and an adaptive limit that starts afresh."""


class _Remembered(BaseModel):
    switches: dict[str, bool]
    at: float  # when a session last got answers with them (epoch seconds)


class _RememberedLimit(BaseModel):
    level: int = Field(ge=1)  # ProviderLimit.learned
    at: float  # when the session that reached it ended (epoch seconds)


class _LimitFinding(BaseModel):
    level: int = Field(ge=1)  # ProviderLimit.learned
    refused: bool  # a 429/529 came this session (the level is below the calls in flight it came at)


class QuirksFindings(BaseModel):
    """What one process of a session learned (:meth:`QuirksMemory.findings`): an xdist worker hands
    it to the controller (its ``workeroutput``, as JSON), which merges every worker's
    (:meth:`QuirksMemory.merge`) and writes the cache once."""

    models: dict[str, dict[str, bool]] = {}  # per judge (:func:`_quirks_key`): the switches
    limits: dict[str, _LimitFinding] = {}  # per provider (:func:`_limit_key`)


class _QuirksCache(BaseModel):
    """The cache entry: per judge (:func:`_quirks_key`), the switches its answers came with; per
    provider (:func:`_limit_key`), the adaptive limit's level for the next session's start."""

    version: int = 1
    models: dict[str, _Remembered] = {}
    limits: dict[str, _RememberedLimit] = {}


def _quirks_key(backend: Any) -> str | None:
    """Which judge a backend's quirks are of: provider, model and the URL it calls (a proxy or
    gateway in front of a model may take what the provider refuses, or the other way round);
    None for a backend that learns none (the scripted judge, a plugin's own)."""
    from pytest_aimeasure.judge.backends.base import Quirks

    if not isinstance(getattr(backend, "quirks", None), Quirks):
        return None
    return f"{backend.provider}|{backend.model}|{_base_url(backend)}"


def _base_url(backend: Any) -> str:
    """The URL a built-in backend calls ("" for its provider's default)."""
    return getattr(backend, "base_url_in_use", None) or getattr(backend, "api_base", None) or ""


def _limit_key(backend: Any) -> str | None:
    """Which provider limit a backend's calls share: its concurrency key (one limit per provider,
    whatever the model) and the URL it calls (a gateway allows what it allows); None as
    :func:`_quirks_key`."""
    if _quirks_key(backend) is None:
        return None
    return f"{backend.concurrency_key}|{_base_url(backend)}"


class QuirksMemory:
    """What each judge model refused (a temperature, a forced tool, prompt-cache markers), kept in
    pytest's cache from one session to the next, so that a later session's first judge calls go
    together instead of waiting for one to learn it (the wait is before every other call of the
    session: a round trip on the native routes, where that call streams and its 200 lets the others
    go, a whole judge latency on litellm's other routes; see
    :class:`~pytest_aimeasure.judge.backends.base.Quirks`). Kept
    only from a call that got an answer, for :data:`QUIRKS_KEPT_S`. Without pytest's cache
    (``-p no:cacheprovider``) nothing is kept.

    Beside them, each provider's adaptive limit as a session left it
    (:attr:`~pytest_aimeasure.judge.limits.ProviderLimit.learned`), where a later session without
    ``--judge-concurrency`` starts (``resume``): a provider that allows fewer calls than the usual
    start is not refused tens of calls again at every session's start, and one that allows the
    ceiling gets it from the first call.

    Under xdist each worker hands its :meth:`findings` to the controller, which :meth:`merge` s them
    and :meth:`write` s the cache once (each worker writing its own, the last to end won)."""

    def __init__(self, cache: Any, *, clock: Any = time.time, processes: int = 1, index: int = 0) -> None:
        self._cache = cache
        self._clock = clock
        # The levels kept are the session's totals: an xdist worker (``index`` of ``processes``)
        # starts at its share of one and reports its own level times the workers.
        self._processes = max(1, processes)
        self._index = index
        self._read: _QuirksCache | None = None

    def _entries(self) -> _QuirksCache:
        if self._read is None:
            raw = self._cache.get(QUIRKS_CACHE_KEY, None) if self._cache is not None else None
            try:
                self._read = _QuirksCache.model_validate(raw) if raw is not None else _QuirksCache()
            except ValidationError:
                self._read = _QuirksCache()  # written by another version, or by hand: learned again
        return self._read

    def recall(self, backend: Any) -> list[str]:
        """Give ``backend`` the quirks its model showed an earlier session (if they are recent);
        the lessons among them, to say once."""
        from pytest_aimeasure.judge.backends.base import LESSONS

        key = _quirks_key(backend)
        if key is None or self._cache is None:
            return []
        entry = self._entries().models.get(key)
        if entry is None or not 0 <= self._clock() - entry.at <= QUIRKS_KEPT_S:
            return []
        backend.quirks.remember(entry.switches)
        return [LESSONS[name] for name, on in entry.switches.items() if not on and name in LESSONS]

    def recall_limit(self, backend: Any) -> int | None:
        """This process's share of the level an earlier session left ``backend``'s provider at (if
        recent: the session's total, shared among its xdist workers), else None."""
        key = _limit_key(backend)
        if key is None or self._cache is None:
            return None
        entry = self._entries().limits.get(key)
        if entry is None or not 0 <= self._clock() - entry.at <= QUIRKS_KEPT_S:
            return None
        return share(entry.level, self._processes, self._index)

    def findings(self, backends: list[Any], limits: Mapping[str, Any] | None = None) -> QuirksFindings:
        """What ``backends`` learned this session (those whose calls got an answer), and the level
        of each of their providers' ``limits`` (the engine's, by concurrency key) that learned one,
        as the session's total: under xdist, this worker's times the workers (each had its share)."""
        found = QuirksFindings()
        for backend in backends:
            key = _quirks_key(backend)
            switches = backend.quirks.learned() if key is not None else None
            if key is not None and switches is not None:
                found.models[key] = switches
            limit_key = _limit_key(backend)
            limit = (limits or {}).get(backend.concurrency_key) if limit_key is not None else None
            level = getattr(limit, "learned", None)
            if limit_key is not None and isinstance(level, int):
                refused = getattr(limit, "refused_at", None) is not None
                found.limits[limit_key] = _LimitFinding(level=level * self._processes, refused=refused)
        return found

    @staticmethod
    def merge(parts: list[QuirksFindings]) -> QuirksFindings:
        """The findings of a session's processes (its xdist workers) as one: a parameter any of them
        saw refused is refused (the switches' refusals joined); per provider, the lowest level of
        those that met a 429/529 (each worker has a limit of its own, its part, and the provider's 429 came at
        the calls in flight of them all: the worker that met none left its limit where it was
        allowed, not where the provider refuses), else the highest level a worker's rounds held at
        (none was refused: that many in flight answered in time). The levels are the session's
        totals (:meth:`findings`), as the next session shares them."""
        merged = QuirksFindings()
        for part in parts:
            for key, switches in part.models.items():
                known = merged.models.setdefault(key, dict(switches))
                for name, on in switches.items():
                    known[name] = known.get(name, True) and on
            for key, found in part.limits.items():
                kept = merged.limits.get(key)
                if kept is None or found.refused != kept.refused:
                    if kept is None or found.refused:
                        merged.limits[key] = found.model_copy()
                elif found.refused:
                    kept.level = min(kept.level, found.level)
                else:
                    kept.level = max(kept.level, found.level)
        return merged

    def keep(self, backends: list[Any], limits: Mapping[str, Any] | None = None) -> None:
        """Write what ``backends`` learned this session (:meth:`findings`) over the cache's entries
        for them (:meth:`write`)."""
        self.write(self.findings(backends, limits))

    def write(self, found: QuirksFindings) -> None:
        """Write ``found`` over the cache's entries for its judges and providers, leaving the others
        (another model's, another provider's)."""
        if self._cache is None or (not found.models and not found.limits):
            return
        now = self._clock()
        self._read = None  # read again: another session may have written since
        entries = self._entries()
        entries.models.update({key: _Remembered(switches=s, at=now) for key, s in found.models.items()})
        entries.limits.update(
            {key: _RememberedLimit(level=f.level, at=now) for key, f in found.limits.items()}
        )
        self._cache.set(QUIRKS_CACHE_KEY, entries.model_dump(mode="json"))


class SessionBackends:
    """Builds the engine's backends and prompts from the session's settings and its hooks."""

    def __init__(
        self,
        config: pytest.Config,
        settings: Settings,
        recording: Recording | None,
        *,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.recording = recording
        self.notice = notice
        self.quirks = QuirksMemory(
            getattr(config, "cache", None), processes=settings.processes, index=settings.process_index
        )
        self.built: list[Backend] = []

    def backend(self, model: str) -> Backend:
        """The backend of ``model``; under ``--judge-batch`` its calls go through the batch API."""
        backend = self._built(model)
        self.built.append(backend)
        for lesson in self.quirks.recall(backend):
            if self.notice is not None:
                self.notice(
                    f"aimeasure: the judge {backend.model} ({backend.provider}) {lesson} (learned by an "
                    "earlier session: pytest's cache, --cache-clear forgets it)"
                )
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
    backends: SessionBackends,
    calibrated_floors: Mapping[str, tuple[float, Fingerprint]],
    *,
    notice: Callable[[str], None] | None = None,
) -> JudgeEngine:
    """The session's judge engine: its settings, ``backends``, prompts, and the run's journal and
    budget; ``calibrated_floors`` are the variance floors a calibration measured, with the ruler it
    measured."""
    from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings

    settings, recording = backends.settings, backends.recording
    assert settings.model is not None
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
        remembered_limit=backends.quirks.recall_limit,
    )
