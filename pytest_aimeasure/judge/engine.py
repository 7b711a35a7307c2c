"""The judge as an instrument: N concurrent samples per item, each validated, retried with feedback,
journaled, and aggregated into a :class:`~pytest_aimeasure.measure.models.Measurement` with error bars.

All judge calls of a session run on one event loop in a background thread. pytest calls
:meth:`JudgeEngine.measure` from the test thread and blocks until the item is measured; suites use
:meth:`JudgeEngine.ameasure` to measure many items at once. Limits are per provider
(``concurrency_key``), so a slow provider never holds back a fast one.

Transport retries happen here, not in the SDKs (the engine's backends are built with
``max_retries=0``): each call is retried up to ``--judge-retries`` times after a 429/529, a 5xx, a
408/409, a timeout or a failed connection. A 429/529 goes through the provider's
:class:`~pytest_aimeasure.judge.limits.ProviderLimit`, which pauses every call to that provider for the
``retry-after`` the provider asked for and halves its limit; other failures back off per call.

A provider that cannot be reached is not called for ever: after :data:`UNREACHABLE_AFTER` consecutive
connection failures (refused, DNS; counted per provider, in this process) every later call of that
provider fails at once with :class:`ProviderUnreachable`, a judge error that names the base URL and
records no score, instead of each item spending the SDK's retries and backoff on it again.

A quota that never comes back is not waited for ever either: once a provider has answered nothing but
429/529 for ``quota_wait`` seconds (``--judge-quota-wait``), the call that got the last one and every
later call of that provider fail at once with :class:`QuotaExhausted`. While it waits, the engine says
so through ``notice`` (the session prints it, under ``-q`` too): how long, how many calls wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import hashlib
import json
import math
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from pytest_aimeasure.judge.adaptive import ItemRule, sample_adaptively
from pytest_aimeasure.judge.backends.base import (
    ANSWERED,
    Backend,
    BackendError,
    JudgeReply,
    JudgeRequest,
    Message,
    ProviderRejection,
    Quirks,
    RateLimited,
)
from pytest_aimeasure.judge.errors import (
    AttemptOutput,
    Interrupted,
    JudgeError,
    NotJudged,
    ProviderUnreachable,
    QuotaExhausted,
    ReplayMiss,
)
from pytest_aimeasure.judge.escalate import with_escalation
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.judge.limits import MAX_COOLDOWN_S, ProviderLimit, Slot, at_once, backoff_s
from pytest_aimeasure.judge.prompt import (
    JudgePrompt,
    render_user_parts,
    text_hash,
    verdict_tool,
)
from pytest_aimeasure.measure.models import (
    TOOL_SCHEMA_VERSION,
    Fingerprint,
    Measurement,
    Sample,
    Usage,
    Verdict,
)
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, item_stats
from pytest_aimeasure.measure.text import replace_lone_surrogates, replace_lone_surrogates_in
from pytest_aimeasure.measure.version import __version__
from pytest_aimeasure.store.cost import CHARS_PER_TOKEN, TYPICAL_VERDICT_TOKENS, WAIT
from pytest_aimeasure.store.loop import LoopThread, settle_from

T = TypeVar("T")
PLUGIN_MAJOR = int(__version__.split(".")[0])
EXCERPT_CHARS = 600
UNREACHABLE_AFTER = 3
"""Consecutive connection failures after which a provider is no longer called in this session."""
QUOTA_WAIT_S = 300.0
"""Seconds of nothing but 429/529 from a provider after which it is given up (``--judge-quota-wait``)."""
NOTICE_EVERY_S = 10.0
"""While a provider answers only 429/529: how often the engine says so (at most)."""
BUDGET_WAIT_CALL_S = 60.0
"""For the budget's wait, when no call timeout is set: what one attempt of a call in flight may take."""
BUDGET_POLL_S = 0.05
"""How often a call the budget asked to wait checks again whether a call in flight settled."""
RULER_HASHES_KEPT = 1024
"""Rulers (backend, prompt template, rubric) whose hashes the engine keeps."""
CLOSE_STEP_S = 5.0
""":meth:`JudgeEngine.close`: what the calls still running may take to unwind once cancelled, and
what closing the backends may take (each)."""

SampleKey = tuple[str, str, str, int]
"""(fingerprint digest, prompt hash, artifact sha256, sample index)."""


class SampleSink(Protocol):
    """Where samples are looked up before a call and recorded after it (the run store)."""

    def lookup(
        self, key: SampleKey, *, item_id: str | None = None, nodeid: str | None = None
    ) -> Sample | None:
        """A stored sample for ``key``; with ``item_id`` it is also journaled into this run."""

    def record(self, key: SampleKey, *, item_id: str, nodeid: str, sample: Sample, sync: bool = True) -> None:
        """Keep a fresh sample (written at once; made durable now, or at :meth:`sync` with
        ``sync=False``)."""

    def sync(self) -> None:
        """Make the samples kept so far durable (fsync)."""

    def describe_key(self, key: SampleKey) -> str:
        """For a replay miss: what is stored near ``key``."""


class BudgetGate(Protocol):
    """Admission control for calls that cost money (see :mod:`pytest_aimeasure.store.cost`)."""

    def reserve(self, estimate_usd: float, *, may_wait: bool = False) -> Any | None: ...

    def settle(self, reservation: Any, actual_usd: float | None) -> None: ...


@dataclass(frozen=True)
class JudgeSettings:
    model: str
    samples: int = 3
    concurrency: int = 8
    """The most calls in flight per provider (the limit's ceiling)."""
    concurrency_start: int | None = None
    """Calls in flight at the start, the limit growing from there up to ``concurrency`` (None:
    ``concurrency`` from the start; see :mod:`pytest_aimeasure.judge.limits`)."""
    timeout: float | None = None
    max_invalid_retries: int = 2
    retries: int = 4
    """Transport retries per call (``--judge-retries``): 429/529, 5xx, 408/409, timeouts, connections."""
    quota_wait: float = QUOTA_WAIT_S
    """Seconds of nothing but 429/529 after which a provider is given up (``--judge-quota-wait``)."""
    var_floor: float = VAR_FLOOR_DEFAULT
    temperature: float | None = 0.0
    max_tokens: int = 1024
    replay: bool = False
    var_floors: Mapping[str, float] = field(default_factory=dict)
    """Per dimension, a measured variance floor (from a calibration) that replaces ``var_floor``."""
    var_floor_rulers: Mapping[str, Fingerprint] = field(default_factory=dict)
    """The ruler each of ``var_floors`` was measured under: it holds for that ruler only."""

    def var_floor_of(self, dimension: str, ruler: Fingerprint | None = None) -> float:
        """The variance floor of ``dimension`` for samples taken with ``ruler``: its calibrated one
        when the calibration measured that ruler, else the session's (a stale calibration, one whose
        rubric, prompt, temperature or model differ, supplies nothing)."""
        measured = self.var_floor_rulers.get(dimension)
        if ruler is not None and measured is not None and ruler.digest() != measured.digest():
            return self.var_floor
        return self.var_floors.get(dimension, self.var_floor)


@dataclass
class Spend:
    """What the judge consumed this session (this process).

    ``retries`` counts calls repeated after an invalid verdict, ``transport_retries`` calls repeated
    after a 429/529, 5xx, timeout or failed connection. ``limits`` are the per-provider limiters,
    read for the in-flight maximum and the rate-limit figures."""

    calls: int = 0
    retries: int = 0
    transport_retries: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    cost_unknown: bool = False
    judge_errors: int = 0
    limits: dict[str, ProviderLimit] = field(default_factory=dict, repr=False, compare=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_call(self, usage: Usage, cost: float | None) -> None:
        with self.lock:
            self.calls += 1
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            self.cache_read_input_tokens += usage.cache_read_input_tokens
            self.cache_creation_input_tokens += usage.cache_creation_input_tokens
            if cost is None:
                self.cost_unknown = True
            else:
                self.cost_usd += cost

    def as_dict(self) -> dict[str, Any]:
        limits = list(self.limits.values())
        return {
            "calls": self.calls,
            "retries": self.retries,
            "transport_retries": self.transport_retries,
            "cached": self.cached,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cost_usd": None if self.cost_unknown else round(self.cost_usd, 6),
            "judge_errors": self.judge_errors,
            "max_in_flight": max((limit.max_in_flight for limit in limits), default=0),
            "limit_reached": max((limit.reached for limit in limits), default=0),
            "rate_limited": sum(limit.rate_limited for limit in limits),
            "rate_limit_wait_s": round(sum(limit.waited_s for limit in limits), 3),
        }

    def timelines(self) -> dict[str, dict[str, Any]]:
        """Each provider's :meth:`~pytest_aimeasure.judge.limits.ProviderLimit.timeline` (what a
        worker hands the controller, for :func:`limits_at_once`)."""
        return {key: limit.timeline() for key, limit in self.limits.items()}


def limits_at_once(processes: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, int]:
    """``max_in_flight`` and ``limit_reached`` of processes that called the providers at once (a
    session's controller and xdist workers: each's :meth:`Spend.timelines`), as the most they had
    together at one time (:func:`~pytest_aimeasure.judge.limits.at_once`), the busiest provider's."""
    providers = {key for process in processes for key in process}
    figures = {"max_in_flight": 0, "limit_reached": 0}
    for key in providers:
        lines = [process[key] for process in processes if key in process]
        figures["max_in_flight"] = max(figures["max_in_flight"], at_once(lines, "most"))
        figures["limit_reached"] = max(figures["limit_reached"], at_once(lines, "reached"))
    return figures


_LIMITS = frozenset({"max_in_flight", "limit_reached"})
"""Spend figures of the limits: added up over processes that call the provider at once (a session's
xdist workers, each with its share of the limit), the busiest one's otherwise (shards run apart)."""


def merge_spend(parts: list[dict[str, Any]], *, together: bool = True) -> dict[str, Any]:
    """The session's spend from each process's :meth:`Spend.as_dict` (controller and workers; with
    ``together`` false, shards of a session that may have run apart). The rate-limit pause is the
    longest one (the workers' pauses overlap)."""
    total: dict[str, Any] = {name: 0 for name in Spend().as_dict()}
    total["cost_usd"] = 0.0
    for part in parts:
        for name, value in part.items():
            if name == "cost_usd":
                total[name] = None if value is None or total[name] is None else total[name] + value
            elif value is None:
                continue
            elif name == "rate_limit_wait_s" or (name in _LIMITS and not together):
                total[name] = max(total.get(name, 0), value)
            else:
                total[name] = total.get(name, 0) + value
    if total["cost_usd"] is not None:
        total["cost_usd"] = round(total["cost_usd"], 6)
    total["rate_limit_wait_s"] = round(total["rate_limit_wait_s"], 3)
    return total


CostFn = Callable[[str, str, Usage], "float | None"]
EstimateFn = Callable[[str, str, int, int], "float | None"]
"""(provider, model, prompt characters, output tokens) → the call's expected cost, None: no price."""


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + "…"


def _readable(reply: JudgeReply) -> JudgeReply:
    """The reply with each lone surrogate in what the judge wrote replaced by U+FFFD: JSON may carry
    one (``"\\ud800"``), and neither pydantic, the run store nor the next request can."""
    tool_input = replace_lone_surrogates_in(reply.tool_input)
    text = replace_lone_surrogates(reply.text)
    raw = replace_lone_surrogates(reply.raw)
    if tool_input is reply.tool_input and text is reply.text and raw is reply.raw:
        return reply  # the common case: nothing to replace, no copy of the reply
    return replace(reply, tool_input=tool_input, text=text, raw=raw)


def _validate(reply: JudgeReply, dimension: str) -> Verdict | str:
    """A verdict, or the error to feed back to the model."""
    if reply.tool_input is None:
        said = reply.text.strip() or reply.raw.strip()
        return f"you did not call the tool record_verdict (you replied with text: {excerpt(said, 200)!r})"
    try:
        verdict = Verdict.model_validate(reply.tool_input)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
        )
        return f"the tool input was invalid ({problems})"
    if verdict.dimension != dimension:
        return f"the verdict is about {verdict.dimension!r}, but you were asked about {dimension!r}"
    return verdict


def _prompt_chars(request: JudgeRequest) -> int:
    """What the provider bills as input, for the budget's estimate: the system prompt and the tool
    definition too, not only the messages."""
    tool = request.tool
    return (
        len(request.system)
        + sum(len(m.content) for m in request.messages)
        + len(tool.name)
        + len(tool.description)
        + len(json.dumps(tool.input_schema))
    )


def _feedback(reply: JudgeReply, problem: str, dimension: str) -> list[Message]:
    """The turns that give an invalid verdict back to the judge with what was wrong with it."""
    return [
        Message("assistant", reply.raw or reply.text or "(empty reply)"),
        Message(
            "user",
            f"Your verdict was not accepted: {problem}. Call the tool record_verdict again, once, with "
            f"dimension {dimension!r}, an integer score from 1 to 5 and a non-empty rationale.",
        ),
    ]


_SYNC_AT_END: contextvars.ContextVar[bool] = contextvars.ContextVar("aimeasure_sync_at_end", default=False)
"""True in work run by :meth:`JudgeEngine.submit_item`: its sample gathers do not fsync each, the
future that brings its outcome waits for one fsync after it."""


async def _synced_at_end(coro: Coroutine[Any, Any, T]) -> T:
    _SYNC_AT_END.set(True)  # (the task's own context: the loop's and other tasks' are left as they are)
    return await coro


class SyncRounds:
    """The sink's fsyncs, on one worker thread, shared by the work that asks for one meanwhile: one
    asked for while a round runs waits for the next (the running one may have started before its
    samples were written), which starts as that one ends, on the same thread. Each asker's
    ``then(error)`` runs on the worker thread once its round ended (``error``: what the fsync
    raised, else None). Thread-safe."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self._lock = threading.Lock()
        self._waiting: list[Callable[[BaseException | None], None]] = []
        self._busy = False
        self._worker: ThreadPoolExecutor | None = None

    def after_next(self, then: Callable[[BaseException | None], None]) -> None:
        with self._lock:
            self._waiting.append(then)
            if self._busy:
                return  # the worker's loop takes it up when its round ends
            self._busy = True
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="aimeasure-sample-fsync")
            worker = self._worker
        try:
            worker.submit(self._rounds)
        except RuntimeError as exc:  # the interpreter is shutting down: no round will run
            with self._lock:
                batch, self._waiting, self._busy = self._waiting, [], False
            for each in batch:
                each(exc)

    def _rounds(self) -> None:
        while True:
            with self._lock:
                batch, self._waiting = self._waiting, []
                if not batch:
                    self._busy = False
                    return
            error: BaseException | None = None
            try:
                self._sync()
            except Exception as exc:  # a StoreError: the outcome of every item it was for
                error = exc
            for then in batch:
                # (one asker's failure must not leave the others, and every later one, waiting)
                with contextlib.suppress(Exception):
                    then(error)

    def close(self) -> None:
        """Let the worker thread go once it is idle (what waits for a round still gets it)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.shutdown(wait=False)


class JudgeEngine:
    """Owns the backends, the per-provider limits and the event loop thread of a session."""

    def __init__(
        self,
        settings: JudgeSettings,
        *,
        make_backend: Callable[[str], Backend],
        prompt: Callable[[str], JudgePrompt] | None = None,
        sink: SampleSink | None = None,
        budget: BudgetGate | None = None,
        cost: CostFn | None = None,
        estimate: EstimateFn | None = None,
        notice: Callable[[str], None] | None = None,
        remembered_limit: Callable[[Backend], int | None] | None = None,
    ) -> None:
        self.settings = settings
        self.notice = notice
        """Where the engine says what a user waits for (a line, from the loop thread)."""
        self._remembered_limit = remembered_limit
        """The level an earlier session left a backend's provider at (None: nothing remembered)."""
        self._make_backend = make_backend
        self._prompt = prompt or (lambda dimension: JudgePrompt())
        self.sink = sink
        self.budget = budget
        self._cost = cost
        self._estimate = estimate
        self.spend = Spend()
        self._backends: dict[str, Backend] = {}
        self._backend_lock = threading.Lock()
        self._limits: dict[str, ProviderLimit] = self.spend.limits
        # Per concurrency key, touched on the loop thread only: consecutive connection failures, and
        # the base URL of a provider given up on.
        self._connection_failures: dict[str, int] = {}
        self._unreachable: dict[str, str] = {}
        # Per concurrency key: why a rate-limited provider was given up, and the starved seconds at
        # the last notice.
        self._exhausted: dict[str, str] = {}
        self._noticed: dict[str, float] = {}
        # Per "provider/model": the most output tokens one of its replies took, for the budget.
        self._longest_verdict: dict[str, int] = {}
        self._hashes: dict[tuple[Any, ...], tuple[str, str, str]] = {}  # (see _ruler_hashes; loop thread)
        self._loop = LoopThread("aimeasure-judge")
        self._stopped = threading.Event()
        self._frozen = False
        self._refrozen = False
        self._syncs = SyncRounds(sink.sync) if sink is not None else None

    # -- loop management -------------------------------------------------------------------------
    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule a coroutine on the judge loop (for suites that measure many items at once)."""
        return self._loop.submit(coro)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def submit_item(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """:meth:`submit` for the work whose outcome a test's verdict is made of (``ameasure`` of its
        item, its repeats): the returned future is settled once every sample the work journaled is
        fsync-ed, by the fsync worker itself. (Each sample gather of the work fsync-ed on its own,
        then the loop took a turn to resume the work and settle the future: without the pipeline an
        item went test thread, loop, fsync worker, loop, test thread; now the loop's second turn is
        left out, and the item's samples share one fsync.)"""
        if self._syncs is None:
            return self._loop.submit(coro)
        return self._loop.submit(_synced_at_end(coro), finish=self._finish_synced)

    def run_item(self, coro: Coroutine[Any, Any, T]) -> T:
        """:meth:`submit_item`, waited for; an interrupt while waiting cancels it."""
        future = self.submit_item(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def _finish_synced(self, task: asyncio.Task[Any], future: Future[Any]) -> None:
        """On the loop, as a :meth:`submit_item` task ends: its outcome goes to its future after the
        next fsync, from the fsync worker (an fsync that fails is the outcome)."""
        assert self._syncs is not None
        if task.cancelled():
            future.cancel()
            return
        self._syncs.after_next(lambda error: settle_from(task, future, error))

    def stop_calls(self) -> None:
        """The session is interrupted: no call that was not sent yet goes out (queued ones, retries,
        later samples fail with :class:`Interrupted`); the calls in flight may still land. Thread-safe."""
        self._stopped.set()

    def _check_running(self) -> None:
        if self._stopped.is_set():
            raise Interrupted

    def close(self) -> None:
        """Cancel the calls still running, let them unwind, close the backends, stop the loop (each
        step bounded at :data:`CLOSE_STEP_S`). In that order: a call still in flight when its backend's
        HTTP client was closed under it failed as a transport error ("could not reach ... Server
        disconnected": a judge error, or a retry counted and a new client opened) instead of being
        cancelled."""
        if not self._loop.started:
            return
        backends = list(self._backends.values())

        async def _close_all() -> None:
            await self._loop.unwind(CLOSE_STEP_S)
            for backend in backends:
                # Closing is best effort: the session's result is already known.
                with contextlib.suppress(Exception):
                    await backend.aclose()

        with contextlib.suppress(Exception):
            self._loop.submit(_close_all()).result(timeout=2 * CLOSE_STEP_S)
        self._loop.close(timeout=CLOSE_STEP_S)
        if self._syncs is not None:
            self._syncs.close()

    # -- backends and limits ---------------------------------------------------------------------
    def backend(self, model: str | None = None) -> Backend:
        name = model or self.settings.model
        with self._backend_lock:
            if name not in self._backends:
                self._backends[name] = self._make_backend(name)
                if not self._frozen:
                    # The SDK has just loaded thousands of long-lived objects; moving them out of
                    # the collector's sight keeps every later collection (and the one at exit)
                    # short. Done now, before the first call: a full collection later, with calls
                    # in flight and tests being submitted, stalls both (by ~0.3-0.6 s on a loaded
                    # machine, benchmarks/judge_bench.py --pipeline). Only the young generations
                    # are collected first (about 1 ms): a full collection scanned every object the
                    # process had (60-80 ms of CPU, right before the first request) to free a few
                    # dozen; the little garbage left is frozen with the rest, once.
                    self._frozen = True
                    gc.collect(1)
                    gc.freeze()
            return self._backends[name]

    def limit(self, key: str, backend: Backend | None = None) -> ProviderLimit:
        """The provider's limiter (``--judge-concurrency`` calls in flight, adapted to its 429s);
        without ``--judge-concurrency`` it starts where an earlier session left the provider of
        ``backend`` (the first one to ask), when one did."""
        # Only touched from the loop thread, so no lock is needed.
        if key not in self._limits:
            resume = None
            if self.settings.concurrency_start is not None and backend is not None and self._remembered_limit:
                resume = self._remembered_limit(backend)
            self._limits[key] = ProviderLimit(
                self.settings.concurrency, start=self.settings.concurrency_start, resume=resume
            )
        return self._limits[key]

    # -- measuring -------------------------------------------------------------------------------
    def measure(self, spec: ItemSpec) -> Measurement:
        return self.run_item(self.ameasure(spec))

    async def ameasure(self, spec: ItemSpec) -> Measurement:
        """Measure one item with its judge (the dimension's, else the session's), escalating it to a
        stronger model when the spec says so and the samples are unsettled."""
        if spec.escalate is not None:
            return await with_escalation(spec, self._ameasure_once)
        return await self._ameasure_once(spec)

    async def _ameasure_once(self, spec: ItemSpec) -> Measurement:
        backend = self.backend(spec.judge)
        template = self._prompt(spec.dimension)
        fixed, per_item = render_user_parts(
            template, dimension=spec.dimension, rubric=spec.rubric, artifact=spec.artifact, facts=spec.facts
        )
        user_text = fixed + per_item
        prompt_hash, rubric_hash, key_fp = self._ruler_hashes(backend, template, spec.rubric)
        artifact_sha = spec.artifact_sha256 or hashlib.sha256(spec.artifact.encode()).hexdigest()
        rendered_hash = text_hash(template.system + "\n" + user_text)

        async def draw(start: int, stop: int) -> list[Sample]:
            """Samples [start, stop) of the item, judged concurrently."""
            keys = [
                (key_fp, rendered_hash, artifact_sha, i)
                for i in range(spec.sample_offset + start, spec.sample_offset + stop)
            ]
            return await self._gather(
                [self._one_sample(backend, spec, template, user_text, len(fixed), key) for key in keys]
            )

        adaptive_record = None
        if spec.adaptive is None:
            samples = await draw(0, spec.samples)
        else:
            samples, adaptive_record = await sample_adaptively(
                spec.adaptive,
                draw,
                lambda got: self._item_rule(spec, backend, got, prompt_hash, rubric_hash),
                stop_early=lambda exc: isinstance(exc, NotJudged),
            )
        if not self._refrozen:
            # The first call imported the SDK's response types and the HTTP stack's lazy parts:
            # move them out of sight too. No collection (it would stall the calls in flight); the
            # little garbage frozen with them is kept once.
            self._refrozen = True
            gc.freeze()
        measurement = self._aggregate(spec, backend, samples, prompt_hash, rubric_hash, artifact_sha)
        if adaptive_record is not None:
            measurement.adaptive = adaptive_record
        return measurement

    def _ruler_hashes(self, backend: Backend, template: JudgePrompt, rubric: str) -> tuple[str, str, str]:
        """(template hash, rubric hash, the sample keys' fingerprint digest) of the items judged by
        ``backend`` with ``template`` and ``rubric``: the same for every item of a dimension, hashed
        once (the template's JSON and SHA-256s took about 15 µs of each item's work on the loop,
        measured alone, loaded machine). Keyed by the template's text, not the object: a
        prompt hook builds a new one for each item, and may change it."""
        shape = (
            backend.provider,
            backend.model,
            template.system,
            template.instructions,
            template.facts_preamble,
            tuple(sorted(template.extra.items())),
            rubric,
        )
        known = self._hashes.get(shape)
        if known is not None:
            return known
        prompt_hash = template.template_hash()
        rubric_hash = text_hash(rubric)
        key_fp = hashlib.sha256(
            "|".join(
                [
                    backend.provider,
                    backend.model,
                    repr(self.settings.temperature),
                    prompt_hash,
                    rubric_hash,
                    str(TOOL_SCHEMA_VERSION),
                    str(PLUGIN_MAJOR),
                ]
            ).encode()
        ).hexdigest()[:16]
        if len(self._hashes) >= RULER_HASHES_KEPT:
            self._hashes.clear()  # (rubrics that differ at every item: nothing to keep)
        self._hashes[shape] = known = (prompt_hash, rubric_hash, key_fp)
        return known

    async def _gather(self, tasks: list[Coroutine[Any, Any, Sample]]) -> list[Sample]:
        """Run sample tasks together; a budget stop, else the judge's error, ends the item (every task
        is awaited first, so no call is left running)."""
        results = await asyncio.gather(*tasks, return_exceptions=True)
        if self.sink is not None and not _SYNC_AT_END.get():
            # The item's samples were written as they landed (a killed process keeps them); one
            # fsync makes them durable before its verdict is known, off the loop's thread. (Work
            # submitted with submit_item has its future settled after an fsync instead.)
            await self._durable()
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
        budget_stops = [r for r in results if isinstance(r, NotJudged)]
        if budget_stops:
            raise budget_stops[0]
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            self.spend.judge_errors += 1
            judge_errors = [e for e in errors if isinstance(e, JudgeError)]
            if len(judge_errors) > 1:
                # One error for the item, but it accounts for every failed sample and every answer
                # paid for: the message names the first sample, so the others are counted in it.
                first, *others = judge_errors
                outputs = [o for e in judge_errors for o in e.outputs]
                failed = [f"#{e.sample}" if e.sample is not None else "?" for e in others]
                names = failed[0] if len(failed) == 1 else f"{', '.join(failed[:-1])} and {failed[-1]}"
                answers = f" ({len(outputs)} judge answers, none a valid verdict)" if outputs else ""
                message = f"{first}; sample{'s' if len(others) > 1 else ''} {names} failed too{answers}"
                raise type(first)(message, outputs=outputs, sample=first.sample)
            if judge_errors:
                raise judge_errors[0]
            raise errors[0]
        return sorted((r for r in results if isinstance(r, Sample)), key=lambda s: s.index)

    async def _durable(self) -> None:
        """Return once an fsync that started after every sample written so far has ended (items
        that reach it together share it: see :class:`SyncRounds`)."""
        assert self._syncs is not None
        loop = asyncio.get_running_loop()
        synced: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if synced.done():  # the item was cancelled meanwhile
                return
            if error is not None:
                synced.set_exception(error)
            else:
                synced.set_result(None)

        def then(error: BaseException | None) -> None:  # (on the fsync worker)
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(settle, error)

        self._syncs.after_next(then)
        await synced

    def _item_rule(
        self, spec: ItemSpec, backend: Backend, samples: list[Sample], prompt_hash: str, rubric_hash: str
    ) -> ItemRule:
        """Adaptive sampling's rule for the item, given the samples so far (they tell the ruler)."""
        # The backend is the item's own judge (the dimension's ``judge=``, or the escalation model on a
        # re-judge), so only the baseline scores taken with that judge's ruler are a reference.
        reference = (
            spec.reference.under(self._fingerprint(backend, samples, prompt_hash, rubric_hash))
            if spec.reference is not None
            else None
        )
        return ItemRule(
            floor=spec.floor if spec.floor_applies else None,
            tolerance=spec.tolerance,
            var_floor=self.settings.var_floor_of(
                spec.dimension, self._fingerprint(backend, samples, prompt_hash, rubric_hash)
            ),
            reference=reference.sessions if reference is not None else None,
        )

    def _fingerprint(
        self, backend: Backend, samples: list[Sample], prompt_hash: str, rubric_hash: str
    ) -> Fingerprint:
        """The ruler the samples were taken with (the resolved model the provider reported)."""
        first = samples[0] if samples else None
        if (
            first is not None
            and first.model
            and first.tool_mode
            and all(
                s.model == first.model
                and s.tool_mode == first.tool_mode
                and s.temperature == first.temperature
                for s in samples
            )
        ):
            # The common case, the samples of one ruler: the most common of each is the first's
            # (three counters an item found it the long way).
            model, temperature, tool_mode = first.model, first.temperature, first.tool_mode
        else:
            models = Counter(s.model for s in samples if s.model)
            modes = Counter(s.tool_mode for s in samples if s.tool_mode)
            temps = Counter(s.temperature for s in samples)
            model = models.most_common(1)[0][0] if models else backend.model
            temperature = temps.most_common(1)[0][0] if temps else self.settings.temperature
            tool_mode = modes.most_common(1)[0][0] if modes else "forced"
        return Fingerprint(
            provider=backend.provider,
            model=model,
            temperature=temperature,
            prompt_hash=prompt_hash,
            rubric_hash=rubric_hash,
            tool_mode=tool_mode,
            plugin_major=PLUGIN_MAJOR,
        )

    def _aggregate(
        self,
        spec: ItemSpec,
        backend: Backend,
        samples: list[Sample],
        prompt_hash: str,
        rubric_hash: str,
        artifact_sha: str,
    ) -> Measurement:
        fingerprint = self._fingerprint(backend, samples, prompt_hash, rubric_hash)
        var_floor = self.settings.var_floor_of(spec.dimension, fingerprint)
        stats = item_stats([s.score for s in samples], var_floor=var_floor)
        return Measurement(
            item_id=spec.item_id,
            nodeid=spec.nodeid,
            dimension=spec.dimension,
            floor=spec.floor,
            tolerance=spec.tolerance,
            phase=spec.phase,
            samples=samples,
            mean=stats.mean,
            sd=stats.sd,
            n=stats.n,
            ci_low=stats.ci_low,
            ci_high=stats.ci_high,
            fingerprint=fingerprint,
            judge=spec.judge or self.settings.model,
            artifact_key=spec.artifact_key,
            artifact_sha256=artifact_sha,
            excerpt=excerpt(spec.artifact),
            facts=spec.facts,
            chosen=spec.chosen,
        )

    async def _one_sample(
        self,
        backend: Backend,
        spec: ItemSpec,
        template: JudgePrompt,
        user_text: str,
        prefix_chars: int,
        key: SampleKey,
    ) -> Sample:
        """Sample ``key[3]`` of the item: from the cache, else judged, with up to
        ``max_invalid_retries`` more turns when the judge's verdict is not valid."""
        outputs: list[AttemptOutput] = []
        try:
            return await self._judged_sample(backend, spec, template, user_text, prefix_chars, key, outputs)
        except JudgeError as error:
            # A failed call after invalid answers: those answers were paid for, they stay with it.
            error.of_sample(key[3], outputs)
            raise

    async def _judged_sample(
        self,
        backend: Backend,
        spec: ItemSpec,
        template: JudgePrompt,
        user_text: str,
        prefix_chars: int,
        key: SampleKey,
        outputs: list[AttemptOutput],
    ) -> Sample:
        """:meth:`_one_sample`'s work; ``outputs`` collects the answers that were no valid verdict."""
        stored = self._stored_sample(backend, spec, key)
        if stored is not None:
            return stored
        messages: list[Message] = [Message("user", user_text)]
        total: Usage | None = None
        started = asyncio.get_running_loop().time()
        attempts = self.settings.max_invalid_retries + 1
        for attempt in range(attempts):
            request = self._request(spec, template, messages, prefix_chars, index=key[3], attempt=attempt)
            reply = await self._call(backend, request)
            total = reply.usage if total is None else total + reply.usage
            verdict = _validate(reply, spec.dimension)
            if isinstance(verdict, Verdict):
                latency = asyncio.get_running_loop().time() - started
                sample = self._sample(backend, spec, reply, verdict, total, latency, key[3], attempt)
                if self.sink is not None:
                    self.sink.record(key, item_id=spec.item_id, nodeid=spec.nodeid, sample=sample, sync=False)
                return sample
            outputs.append(AttemptOutput(key[3], attempt + 1, reply.raw))
            if attempt + 1 == attempts:
                raise JudgeError(
                    f"no valid verdict for {spec.item_id} sample #{key[3]} after {attempts} attempts; "
                    f"last problem: {verdict}",
                    outputs=outputs,
                    sample=key[3],
                )
            with self.spend.lock:
                self.spend.retries += 1
            messages += _feedback(reply, verdict, spec.dimension)
        raise AssertionError("unreachable")  # pragma: no cover

    def _stored_sample(self, backend: Backend, spec: ItemSpec, key: SampleKey) -> Sample | None:
        """The sample the cache holds for ``key``; under ``--judge-cache=replay`` a miss is an error."""
        index = key[3]
        if self.sink is not None and not spec.fresh:
            found = self.sink.lookup(key, item_id=spec.item_id, nodeid=spec.nodeid)
            if found is not None:
                with self.spend.lock:
                    self.spend.cached += 1
                return found.model_copy(update={"index": index})
        if self.settings.replay:
            near = f"; stored: {self.sink.describe_key(key)}" if self.sink is not None else ""
            raise ReplayMiss(
                f"--judge-cache=replay: no stored sample #{index} for {spec.item_id} "
                f"(model {backend.model}, prompt {key[1]}, artifact {key[2][:12]}){near}; run once "
                "with --judge-cache=on to record it"
            )
        return None

    def _request(
        self,
        spec: ItemSpec,
        template: JudgePrompt,
        messages: list[Message],
        prefix_chars: int,
        *,
        index: int,
        attempt: int,
    ) -> JudgeRequest:
        """The judge call of one attempt at one sample (the conversation so far in ``messages``)."""
        return JudgeRequest(
            system=template.system,
            messages=tuple(messages),
            tool=verdict_tool(spec.dimension),
            dimension=spec.dimension,
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens,
            timeout=self.settings.timeout,
            context={
                "artifact": spec.artifact,
                "rubric": spec.rubric,
                "facts": spec.facts,
                "index": index,
                "attempt": attempt,
                "nodeid": spec.nodeid,
            },
            prefix_chars=prefix_chars,
        )

    def _sample(
        self,
        backend: Backend,
        spec: ItemSpec,
        reply: JudgeReply,
        verdict: Verdict,
        usage: Usage,
        latency_s: float,
        index: int,
        retries: int,
    ) -> Sample:
        """The sample a valid verdict makes, with the usage and cost of every attempt it took."""
        return Sample(
            index=index,
            dimension=spec.dimension,
            score=verdict.score,
            rationale=verdict.rationale,
            usage=usage,
            latency_s=round(latency_s, 4),
            model=reply.model or backend.model,
            retries=retries,
            cost_usd=self._cost(backend.provider, backend.model, usage) if self._cost else None,
            tool_mode=reply.mode,
            temperature=reply.temperature_sent,
        )

    def _check_reachable(self, backend: Backend) -> None:
        if not self._exhausted and not self._unreachable:
            return  # (every provider is answering: asked three times a call, nothing to look up)
        exhausted = self._exhausted.get(backend.concurrency_key)
        if exhausted is not None:
            raise QuotaExhausted(exhausted)
        base = self._unreachable.get(backend.concurrency_key)
        if base is not None:
            raise ProviderUnreachable(
                f"not judged: provider unreachable ({base}): {backend.provider} failed to connect "
                f"{UNREACHABLE_AFTER} times in a row, so it is not called again this session; start it "
                "or fix its base URL, then judge what is missing with --aimeasure-resume"
            )

    def _note_connection(self, backend: Backend, error: BackendError | None) -> None:
        key = backend.concurrency_key
        if error is None or error.unreachable is None:
            self._connection_failures[key] = 0
            return
        self._connection_failures[key] = failures = self._connection_failures.get(key, 0) + 1
        if failures >= UNREACHABLE_AFTER:
            self._unreachable.setdefault(key, error.unreachable)

    def _note_starving(self, backend: Backend, limit: ProviderLimit) -> None:
        """After a 429/529: say how long the provider has refused, and give it up (raising
        :class:`QuotaExhausted`) once that reaches ``quota_wait``."""
        key, wait = backend.concurrency_key, self.settings.quota_wait
        starved = limit.starved_s()
        if starved >= wait:
            if key not in self._exhausted:
                self._exhausted[key] = (
                    f"not judged: rate-limited: quota exhausted? {backend.provider} answered nothing but "
                    f"429/529 for {starved:.0f} s ({limit.limited_in_a_row} responses in a row; "
                    f"--judge-quota-wait {wait:g}), so it is not called again this session; check the "
                    "account's quota and rate limits, then judge what is missing with --aimeasure-resume"
                )
                limit.give_up()
                self._say(f"{backend.provider}: {self._exhausted[key]}")
            raise QuotaExhausted(self._exhausted[key])
        step = min(NOTICE_EVERY_S, wait / 4)
        if starved >= self._noticed.get(key, 0.0) + step:
            self._noticed[key] = starved
            self._say(
                f"{backend.provider} is rate-limited (429/529) for {starved:.0f} s now: "
                f"{limit.limited_in_a_row} responses in a row, {limit.waiting + limit.in_flight} calls "
                f"waiting or in flight, limit {limit.limit}; given up after {wait:g} s without an "
                "answer (--judge-quota-wait)"
            )

    def _say(self, text: str) -> None:
        if self.notice is not None:
            with contextlib.suppress(Exception):  # a notice never breaks a judge call
                self.notice(f"aimeasure: {text}")

    async def _call(self, backend: Backend, request: JudgeRequest) -> JudgeReply:
        self._check_running()
        self._check_reachable(backend)
        reservation = None
        if self.budget is not None:
            # Counted only for a budget: it serialises the tool's schema, at every call.
            reservation = await self._reserve(self.budget, backend, request, _prompt_chars(request))

        try:
            reply = _readable(await self._attempts(backend, request))
        except BaseException:
            if reservation is not None and self.budget is not None:
                self.budget.settle(reservation, 0.0)
            raise
        if reply.usage.invalid is None and reply.usage.output_tokens > 0:
            key = f"{backend.provider}/{backend.model}"
            self._longest_verdict[key] = max(self._longest_verdict.get(key, 0), reply.usage.output_tokens)
        for lesson in reply.learned:
            # Once a backend (a model, a session): the 400 behind it is not paid for again.
            self._say(f"the judge {backend.model} ({backend.provider}) {lesson}")
        cost = self._cost(backend.provider, backend.model, reply.usage) if self._cost else None
        if reservation is not None and self.budget is not None:
            self.budget.settle(reservation, cost)  # None books the estimate: unknown is never free
        self.spend.add_call(reply.usage, cost)
        return reply

    async def _reserve(
        self, budget: BudgetGate, backend: Backend, request: JudgeRequest, prompt_chars: int
    ) -> Any:
        """The budget's reservation for one call: its prompt as sent, and as many output tokens as
        the longest verdict this judge gave so far this session (before the first: a typical
        verdict's). A call that fits the limit but not beside the calls in flight waits for them to
        settle (they are bounded by their timeouts and retries), so a budget the real calls fit is
        not stopped by what they reserved."""
        loop = asyncio.get_running_loop()
        timeout = self.settings.timeout or BUDGET_WAIT_CALL_S
        deadline = loop.time() + timeout * (self.settings.retries + 1)
        while True:
            # Estimated at each try: the calls waited for may have shown how long a verdict is.
            seen = self._longest_verdict.get(f"{backend.provider}/{backend.model}")
            output_tokens = min(request.max_tokens, seen if seen is not None else TYPICAL_VERDICT_TOKENS)
            estimate = (
                self._estimate(backend.provider, backend.model, prompt_chars, output_tokens) or 0.0
                if self._estimate
                else 0.0
            )
            reservation = budget.reserve(estimate, may_wait=loop.time() < deadline)
            if reservation != WAIT:
                break
            self._check_running()
            await asyncio.sleep(BUDGET_POLL_S)
        if reservation is None:
            verdict = "the longest verdict so far" if seen is not None else "a typical verdict's; none yet"
            tokens_in = math.ceil(prompt_chars / CHARS_PER_TOKEN)
            raise NotJudged(
                "budget",
                "not judged: budget",
                detail=(
                    f"the next call would reserve ${estimate:.4f}: its prompt, {prompt_chars:,} characters "
                    f"≈ {tokens_in:,} tokens in, and {output_tokens:,} tokens out ({verdict})"
                ),
            )
        return reservation

    async def _attempts(self, backend: Backend, request: JudgeRequest) -> JudgeReply:
        """One judge call, retried up to ``retries`` times after a transport failure. A 429/529 pauses
        every call to the provider (the limiter's cooldown); other failures back off this call only."""
        if getattr(backend, "batched", False):
            return await self._batch_attempts(backend, request)
        limit = self.limit(backend.concurrency_key, backend)
        loop = asyncio.get_running_loop()
        attempts = self.settings.retries + 1
        failures = 0
        quirks = getattr(backend, "quirks", None)
        # Connections opened while the calls that will use them wait (see ProviderLimit.wanted):
        # asked as a call queues and as it takes its slot (the one that fills slow start's first
        # round asks for the next round's).
        open_ahead = getattr(backend, "open_ahead", None)
        for attempt in range(attempts):
            self._check_reachable(backend)
            # Behind the model's first call, without a slot: see Quirks.gate.
            gate = quirks.gate() if isinstance(quirks, Quirks) and not quirks.known else None
            if open_ahead is not None:
                open_ahead(limit.wanted(coming=1))
            token = await limit.acquire(gate)
            if open_ahead is not None:
                open_ahead(limit.wanted())
            slot = Slot(limit, token, loop.time)
            pause = 0.0
            try:
                # Checked again once a slot is free: calls queued behind the failing ones (or queued
                # when the session was interrupted) never go out.
                self._check_running()
                self._check_reachable(backend)
                answered = ANSWERED.set(slot.answered)
                try:
                    reply = await backend.judge(request)
                finally:
                    ANSWERED.reset(answered)
            except RateLimited as exc:
                # The cooldown is set before the slot is freed, so no waiter slips in ahead of it.
                limit.note_rate_limit(token, exc.retry_after)
                slot.free()
                self._note_connection(backend, None)  # it answered: it is there
                self._note_starving(backend, limit)
                error: BackendError = exc
            except BackendError as exc:
                slot.free()
                self._note_connection(backend, exc)
                error = exc
                failures += 1
                asked = exc.retry_after if isinstance(exc, ProviderRejection) else None
                pause = min(asked, MAX_COOLDOWN_S) if asked is not None else backoff_s(failures)
            except BaseException:
                slot.free()
                raise
            else:
                # The call's own latency, as the backend timed it: not the wait of the calls that
                # went with the model's first call (they hold slots until it answers), which made
                # the first round look queued and hid the latency of a call that waits for nothing.
                # Counted before the slot is freed, as a 429 is: a limit the answer changes applies
                # to the call that takes its slot (it starts at the new level).
                slot.answered(reply.latency_s if reply.latency_s > 0 else None)
                self._note_connection(backend, None)
                self._noticed.pop(backend.concurrency_key, None)
                return reply
            self._retry_or_give_up(backend, error, attempt)
            if pause:
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _batch_attempts(self, backend: Backend, request: JudgeRequest) -> JudgeReply:
        """One judge call in batch mode (``--judge-batch``): no per-call limit (the batch is one
        request to the provider), and a failed result that is transient (errored with an API error,
        overload or rate limit) joins the next batch, up to ``retries`` times."""
        attempts = self.settings.retries + 1
        for attempt in range(attempts):
            self._check_running()
            try:
                return await backend.judge(request)
            except BackendError as error:
                self._retry_or_give_up(backend, error, attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _retry_or_give_up(self, backend: Backend, error: BackendError, attempt: int) -> None:
        """After failed attempt ``attempt`` (from 0): a JudgeError when the failure is final or the
        retries are spent, else count the retry the caller is about to make."""
        if not error.retryable or attempt >= self.settings.retries:
            tries = f" ({attempt + 1} attempts, --judge-retries {self.settings.retries})" if attempt else ""
            raise JudgeError(f"{backend.provider} judge call failed{tries}: {error}") from error
        with self.spend.lock:
            self.spend.transport_retries += 1
