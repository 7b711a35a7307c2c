"""Running suite jobs: generation and judging concurrently, bounded per provider, reported item by item.

One :class:`SuiteRunner` per pytest process owns an event loop in a background thread. When a suite
item runs, the runner schedules that item's job and the jobs of every item of the same suite file this
process is known to run next (the rest of ``session.items``; on an xdist worker, the worker's queue),
so a file's generations overlap while pytest still reports one item at a time. Each item then waits
for its own job only.

A job: generate (under the target's generation semaphore, one per concurrency key, see
:mod:`pytest_aimeasure.suites.targets`) → record the output as an artifact → run the gates → if they
pass and the judge is on, measure every dimension through the judge engine (its own per-provider
limits apply). Under ``--aimeasure-rejudge`` the stored output is loaded and nothing is generated; under
``--aimeasure-resume`` stored outputs are reused and only missing ones are generated.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pytest

from pytest_aimeasure.measure.artifact import repeat_key
from pytest_aimeasure.session.state import state_key
from pytest_aimeasure.store.loop import LoopThread, in_daemon_thread
from pytest_aimeasure.suites.gates import GateResult, run_gates, text_counts
from pytest_aimeasure.suites.progress import ProgressLine
from pytest_aimeasure.suites.spec import DimensionSpec, GateSpec
from pytest_aimeasure.suites.targets import ResolvedTarget

if TYPE_CHECKING:
    from pytest_aimeasure.judge.backends.base import Backend
    from pytest_aimeasure.measure.artifact import Artifact
    from pytest_aimeasure.measure.models import ItemResult, Measurement
    from pytest_aimeasure.session.state import SessionState

__all__ = ["Generation", "JobPlan", "JobResult", "Output", "SuiteRunner"]

T = TypeVar("T")
DEFAULT_GENERATION_TIMEOUT_S = 120.0
PROGRESS_EVERY_S = 0.25
_CLOSE_S = 5.0


def suite_artifact_key(nodeid: str) -> str:
    """Where a suite item's output is stored (``…#rI`` for its repeats)."""
    return f"suite:{nodeid}"


@dataclass(frozen=True)
class JobPlan:
    """Everything one (prompt × target) job needs, fixed at collection."""

    nodeid: str
    file_key: str
    suite: str
    prompt_id: str
    category: str | None
    text: str
    system: str | None
    variables: dict[str, Any]
    target: ResolvedTarget
    gates: tuple[GateSpec, ...]
    dimensions: tuple[DimensionSpec, ...]
    facts: bool
    callables: dict[str, Callable[..., Any]]
    wait_s: float
    repeats: int = 1

    @property
    def artifact_key(self) -> str:
        return suite_artifact_key(self.nodeid)

    def output_key(self, index: int) -> str:
        """The stored key of output ``index`` (0-based): the item's key, or ``…#rI`` with repeats."""
        return self.artifact_key if self.repeats == 1 else repeat_key(self.artifact_key, index)

    def item_id(self, dimension: str) -> str:
        return f"{dimension}::{self.nodeid}"


@dataclass
class Generation:
    """What generating one output took (or the stored copy under --aimeasure-rejudge / --aimeasure-resume)."""

    source: Literal["generated", "stored"] = "generated"
    artifact: Artifact | None = None
    latency_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    model: str | None = None
    error: str | None = None
    timed_out: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "timed_out": self.timed_out,
            "source": self.source,
            "latency_s": None if self.latency_s is None else round(self.latency_s, 4),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 8),
            "model": self.model,
            "error": self.error,
        }


@dataclass
class Output:
    """One generated output (one repeat) and its gates."""

    generation: Generation
    gates: list[GateResult] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.generation.artifact is not None and all(g.passed for g in self.gates)


@dataclass
class JobResult:
    generation: Generation
    """The first output's generation (the first that produced one, with repeats)."""
    gates: list[GateResult] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    errors: list[tuple[str, BaseException]] = field(default_factory=list)
    not_judged: BaseException | None = None
    judged: bool = False
    outputs: list[Output] = field(default_factory=list)
    """Every repeat's output, in order (one without repeats)."""
    rubrics: dict[str, str] = field(default_factory=dict)  # dimension → the rubric the judge read

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]

    def repeat_counts(self) -> dict[str, Any]:
        """Counts over the repeats: the reliability column's numerator and denominator, and timeouts."""
        outputs = self.outputs
        return {
            "total": len(outputs),
            "valid": sum(1 for o in outputs if o.valid),
            "generation_errors": sum(1 for o in outputs if o.generation.error is not None),
            "timed_out": sum(1 for o in outputs if o.generation.timed_out),
            "gate_failures": sum(
                1 for o in outputs if o.generation.artifact is not None and not o.valid
            ),
            "keys": [o.generation.artifact.key if o.generation.artifact else None for o in outputs],
            "generations": [o.generation.as_dict() for o in outputs],
        }


class _NeedsGeneration(Exception):
    """Raised from ArtifactRegistry.get's generate callback: the output must be generated (async)."""


def _needs_generation() -> Any:
    raise _NeedsGeneration


def _worker_queue(config: pytest.Config) -> list[int] | None:
    """Indices (into ``session.items``) an xdist worker was told to run next; None when not a worker.

    xdist keeps them in its WorkerInteractor; that is not a public API, so any surprise means "no
    prefetch" (each item then only runs its own job), never a wrong job.
    """
    if not hasattr(config, "workerinput"):
        return None
    for plugin in config.pluginmanager.get_plugins():
        torun = getattr(plugin, "torun", None)
        if torun is None or not hasattr(plugin, "nextitem_index"):
            continue
        upcoming: list[Any] = [plugin.nextitem_index]
        try:
            if hasattr(torun, "lock"):
                with torun.lock() as queue:
                    upcoming += list(queue)
            elif hasattr(torun, "mutex") and hasattr(torun, "queue"):
                with torun.mutex:
                    upcoming += list(torun.queue)
        except Exception:
            return []
        return [i for i in upcoming if isinstance(i, int) and not isinstance(i, bool)]
    return []


class SuiteRunner:
    """The process's suite jobs, their event loop and their generation limits."""

    def __init__(self, config: pytest.Config, state: SessionState) -> None:
        self.config = config
        self.state = state
        self._loop = LoopThread("aimeasure-suites")
        self._lock = threading.Lock()
        self._futures: dict[str, Future[JobResult]] = {}
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._backends: dict[str, Backend] = {}
        self._positions: dict[int, int] | None = None
        self._previous: dict[str, dict[str, Any]] | None = None
        self._closed = False
        self._jobs: set[asyncio.Task[Any]] = set()  # the jobs' tasks (loop thread only)
        self._progress: ProgressLine | None = None
        self._progress_checked = False

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def of(cls, config: pytest.Config) -> SuiteRunner:
        runner = config.stash.get(runner_key, None)
        if runner is None:
            runner = cls(config, config.stash[state_key])
            config.stash[runner_key] = runner
            config.pluginmanager.register(_SessionEnd(runner), "aimeasure-suite-runner")
            config.add_cleanup(runner.close)
        return runner

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        # With the judge on, jobs run on the judge engine's loop: judging is then a plain await, and
        # SDK state bound to one event loop (litellm's logging worker, HTTP pools) never hops loops.
        if self.state.judging:
            return self.state.engine().submit(coro)
        return self._loop.submit(coro)

    def cancel_pending(self) -> None:
        """Session end: jobs nobody will wait for (``-x``, an interrupt) must not keep calling."""
        with self._lock:
            futures = list(self._futures.values())
        for future in futures:
            future.cancel()

    def finish(self) -> None:
        """Session end, while the judge engine still runs: cancel what is left, wait (up to
        ``_CLOSE_S``) for it to unwind, then close the backends it was using."""
        self.cancel_pending()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            backends = list(self._backends.values())
            self._backends.clear()
            started = bool(self._futures)
        if not backends and not started:
            return

        async def settle() -> None:
            # A cancelled future only asks its job to stop: the job is still unwinding (a generation
            # awaited, its thread let go) and may be using a backend closed next.
            jobs = [task for task in self._jobs if not task.done()]
            for job in jobs:
                job.cancel()
            if jobs:
                await asyncio.wait(jobs, timeout=_CLOSE_S)
            for backend in backends:
                with contextlib.suppress(Exception):
                    await backend.aclose()

        with contextlib.suppress(Exception):
            self._submit(settle()).result(timeout=2 * _CLOSE_S)

    def close(self) -> None:
        """Config cleanup: stop this runner's own loop (used when the judge is off)."""
        self.finish()
        self._loop.close(timeout=_CLOSE_S)

    # -- scheduling ------------------------------------------------------------------------------
    def _upcoming(self, item: pytest.Item) -> list[pytest.Item]:
        items: Sequence[pytest.Item] = item.session.items
        queue = _worker_queue(self.config)
        if queue is not None:
            return [items[i] for i in queue if 0 <= i < len(items)]
        if self._positions is None:
            self._positions = {id(it): i for i, it in enumerate(items)}
        position = self._positions.get(id(item))
        return list(items[position + 1 :]) if position is not None else []

    def schedule(self, plans: Sequence[JobPlan]) -> None:
        for plan in plans:
            with self._lock:
                if self._closed or plan.nodeid in self._futures:
                    continue
            future = self._submit(self._job(plan))
            with self._lock:
                self._futures[plan.nodeid] = future
            progress = self._progress_line()
            if progress is not None:
                # Under samples: auto an item may stop early: the line plans the most it can take.
                calls = self.state.settings.calls
                progress.plan(sum(calls(d.samples)[1] * plan.repeats for d in plan.dimensions))

    def result_for(self, item: pytest.Item, plan: JobPlan) -> JobResult:
        """Schedule this item's job and the upcoming ones of its file, then wait for this one."""
        upcoming = [
            p
            for p in (getattr(other, "plan", None) for other in self._upcoming(item))
            if isinstance(p, JobPlan) and p.file_key == plan.file_key
        ]
        self.schedule([plan, *upcoming])
        with self._lock:
            future = self._futures[plan.nodeid]
        try:
            return self._wait(future, plan.wait_s)
        except FutureTimeout:  # not the builtin TimeoutError on 3.10
            future.cancel()
            raise TimeoutError(f"no result after {plan.wait_s:g}s") from None
        except BaseException:
            future.cancel()
            raise

    def _progress_line(self) -> ProgressLine | None:
        """The live line, made on the first scheduled job (judging only: it counts judge calls)."""
        if not self._progress_checked:
            self._progress_checked = True
            if self.state.judging:
                self._progress = ProgressLine.for_session(self.config, self.state.spend)
        return self._progress

    def _wait(self, future: Future[JobResult], wait_s: float) -> JobResult:
        """The job's result; with a progress line, redrawn every PROGRESS_EVERY_S while waiting."""
        progress = self._progress
        if progress is None:
            return future.result(timeout=wait_s)
        deadline = time.monotonic() + wait_s
        try:
            while True:
                left = deadline - time.monotonic()
                try:
                    return future.result(timeout=max(0.0, min(PROGRESS_EVERY_S, left)))
                except FutureTimeout:
                    if left <= PROGRESS_EVERY_S:
                        raise
                    progress.tick()
        finally:
            progress.clear()

    # -- the job ---------------------------------------------------------------------------------
    def _semaphore(self, target: ResolvedTarget) -> asyncio.Semaphore:
        # Only touched on the loop thread.
        key = target.concurrency_key
        if key not in self._semaphores:
            self._semaphores[key] = asyncio.Semaphore(
                target.concurrency or self.state.settings.generation_concurrency
            )
        return self._semaphores[key]

    def _backend(self, target: ResolvedTarget) -> Backend:
        ident = f"{target.kind}|{target.model}|{target.api_base}|{target.spec.api_key_env}"
        with self._lock:
            backend = self._backends.get(ident)
        if backend is None:
            backend = target.make_backend(self._timeout(target))
            with self._lock:
                backend = self._backends.setdefault(ident, backend)
        return backend

    def _timeout(self, target: ResolvedTarget) -> float:
        return target.spec.timeout_s or self.state.settings.timeout or DEFAULT_GENERATION_TIMEOUT_S

    async def _job(self, plan: JobPlan) -> JobResult:
        task = asyncio.current_task()
        if task is not None:
            self._jobs.add(task)
            task.add_done_callback(self._jobs.discard)
        outputs = list(await asyncio.gather(*(self._output(plan, i) for i in range(plan.repeats))))
        first = next((o for o in outputs if o.generation.artifact is not None), outputs[0])
        result = JobResult(first.generation, gates=first.gates, outputs=outputs)
        valid = [(i, o.generation.artifact) for i, o in enumerate(outputs) if o.valid]
        if not valid or not plan.dimensions or not self.state.judging:
            return result
        if plan.repeats == 1 and result.failed_gates:
            return result
        await self._measure(plan, [(i, a) for i, a in valid if a is not None], result)
        return result

    async def _output(self, plan: JobPlan, index: int) -> Output:
        generation = await self._generation(plan, index)
        artifact = generation.artifact
        if artifact is None:
            return Output(generation)
        context: dict[str, Any] = {
            "prompt": plan.text,
            "prompt_id": plan.prompt_id,
            "category": plan.category,
            "target": plan.target.name,
            "variables": dict(plan.variables),
        }
        if plan.repeats > 1:
            context["repeat"] = index + 1
        gates = run_gates(
            list(plan.gates), artifact.text, context=context, resolve=plan.callables.__getitem__
        )
        return Output(generation, gates)

    # -- generation ------------------------------------------------------------------------------
    def _previous_generation(self, nodeid: str) -> dict[str, Any] | None:
        """Generation figures of a stored output, from the run it came from (rejudge / resume)."""
        with self._lock:
            previous = self._previous
        if previous is None:
            previous = {}
            recording = self.state.recording
            source = None
            if recording is not None:
                source = recording.rejudge or (recording.run if recording.resuming else None)
            if source is not None:
                items: list[ItemResult] = source.read_items()[0]
                for result in items:
                    suite = result.extra.get("suite")
                    if isinstance(suite, dict) and isinstance(suite.get("generation"), dict):
                        previous[result.nodeid] = suite["generation"]
                    repeats = suite.get("repeats") if isinstance(suite, dict) else None
                    generations = repeats.get("generations") if isinstance(repeats, dict) else None
                    for i, figures in enumerate(generations if isinstance(generations, list) else []):
                        if isinstance(figures, dict):
                            previous[repeat_key(result.nodeid, i)] = figures
            with self._lock:
                self._previous = previous
        return previous.get(nodeid)

    async def _generation(self, plan: JobPlan, index: int = 0) -> Generation:
        from pytest_aimeasure.measure.artifact import ArtifactMissing

        registry = self.state.artifacts
        label = plan.target.label
        key = plan.output_key(index)
        try:
            artifact = await asyncio.to_thread(registry.get, key, _needs_generation, label=label)
        except _NeedsGeneration:
            pass
        except ArtifactMissing as exc:
            return Generation(source="stored", error=str(exc))
        except Exception as exc:
            return Generation(source="stored", error=f"could not load the stored output: {exc}")
        else:
            figures_of = plan.nodeid if plan.repeats == 1 else repeat_key(plan.nodeid, index)
            old = await asyncio.to_thread(self._previous_generation, figures_of) or {}
            return Generation(
                source="stored",
                artifact=artifact,
                latency_s=old.get("latency_s"),
                input_tokens=old.get("input_tokens"),
                output_tokens=old.get("output_tokens"),
                cost_usd=old.get("cost_usd"),
                model=old.get("model"),
            )
        try:
            generation, value = await self._call_target(plan)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            detail = str(exc) or "no message"
            timed_out = isinstance(exc, (TimeoutError, asyncio.TimeoutError))
            if timed_out:
                detail = f"no output after {self._timeout(plan.target):g}s (timeout_s)"
            return Generation(error=f"{type(exc).__name__}: {detail}", timed_out=timed_out)
        try:
            generation.artifact = await asyncio.to_thread(registry.get, key, lambda: value, label=label)
        except Exception as exc:
            generation.error = f"the output could not be recorded: {type(exc).__name__}: {exc}"
        return generation

    async def _call_target(self, plan: JobPlan) -> tuple[Generation, Any]:
        target = plan.target
        timeout = self._timeout(target)
        async with self._semaphore(target):
            started = time.perf_counter()
            if target.fn is not None:
                value, latency = await asyncio.wait_for(self._call_function(plan, target.fn), timeout)
                if value is None:
                    raise ValueError(f"{target.model} returned None; return the output text")
                return Generation(
                    latency_s=latency, cost_usd=target.cost(_usage(0, 0)), model=target.model
                ), value
            from pytest_aimeasure.judge.backends.base import GenerateRequest

            if target.kind in ("litellm", "anthropic"):
                # Import the transport (litellm: seconds, once) off the loop and outside the timed call.
                from pytest_aimeasure.judge.resolve import import_transport

                await asyncio.to_thread(import_transport, target.model)
            backend = self._backend(target)
            request = GenerateRequest(
                prompt=plan.text, system=plan.system, params=target.generation_params(), timeout=timeout
            )
            # A backend's own timeout applies per attempt; this bounds the whole call with its retries.
            reply = await asyncio.wait_for(backend.generate(request), timeout * 6)
        return (
            Generation(
                latency_s=reply.latency_s or (time.perf_counter() - started),
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                cost_usd=target.cost(reply.usage),
                model=reply.model or target.model,
            ),
            reply.text,
        )

    async def _call_function(self, plan: JobPlan, fn: Callable[..., Any]) -> tuple[Any, float]:
        """The callable's output and the time its call took: timed where it runs (in the worker
        thread for a plain function), so the wait for a free thread is not counted as latency."""
        from pytest_aimeasure.suites.callables import accepted_keywords

        offered = {
            "variables": dict(plan.variables),
            "prompt_id": plan.prompt_id,
            "category": plan.category,
            "system": plan.system,
            "suite": plan.suite,
            "target": plan.target.name,
            **plan.target.generation_params(),
        }
        kwargs = accepted_keywords(fn, offered)
        if inspect.iscoroutinefunction(fn):
            started = time.perf_counter()
            value = await fn(plan.text, **kwargs)
            return value, time.perf_counter() - started

        def timed() -> tuple[Any, float]:
            started = time.perf_counter()
            return fn(plan.text, **kwargs), time.perf_counter() - started

        # Not asyncio.to_thread: a function that never returns would hold one of the loop's pool
        # threads and, at exit, the process (Python joins the pool before exiting).
        value, latency = await in_daemon_thread(timed, "aimeasure-target")
        if inspect.isawaitable(value):
            started = time.perf_counter()
            value = await value
            latency += time.perf_counter() - started
        return value, latency

    # -- judging ---------------------------------------------------------------------------------
    async def _measure(self, plan: JobPlan, valid: list[tuple[int, Artifact]], result: JobResult) -> None:
        """Judge every dimension: the one output, or (with repeats) each valid repeat, pooled."""
        from pytest_aimeasure.judge.errors import NotJudged
        from pytest_aimeasure.judge.generations import ameasure_repeats
        from pytest_aimeasure.judge.item import ItemSpec

        engine = self.state.engine()
        artifact = valid[0][1]
        facts = text_counts(artifact.text) if plan.facts else None
        specs = [
            ItemSpec(
                nodeid=plan.nodeid,
                item_id=plan.item_id(dim.name),
                dimension=dim.name,
                rubric=judge_rubric(dim.rubric, plan.text, plan.system),
                artifact=artifact.text,
                floor=dim.floor,
                tolerance=dim.tolerance,
                facts=facts,
                phase=dim.phase,
                artifact_key=artifact.key,
                artifact_sha256=artifact.sha256,
                judge=dim.judge,
                escalate=dim.escalate,
                chosen=self.state.artifacts.chosen(plan.artifact_key),
                **self.state.sampling(plan.item_id(dim.name), dim.samples),
            )
            for dim in plan.dimensions
        ]
        result.judged = True
        result.rubrics = {spec.dimension: spec.rubric for spec in specs}

        def facts_of(a: Artifact) -> dict[str, Any] | None:
            return text_counts(a.text) if plan.facts else None

        if plan.repeats == 1:
            jobs = [engine.ameasure(spec) for spec in specs]
        else:
            jobs = [
                ameasure_repeats(
                    engine,
                    spec,
                    valid,
                    generated=plan.repeats,
                    group_key=plan.artifact_key,
                    facts_of=facts_of,
                )
                for spec in specs
            ]
        outcomes = await asyncio.gather(*jobs, return_exceptions=True)
        for spec, outcome in zip(specs, outcomes, strict=False):
            if isinstance(outcome, NotJudged):
                result.not_judged = result.not_judged or outcome
            elif isinstance(outcome, BaseException):
                if isinstance(outcome, asyncio.CancelledError):
                    raise outcome
                result.errors.append((spec.dimension, outcome))
            else:
                result.measurements.append(outcome)


def judge_rubric(rubric: str, prompt: str, system: str | None) -> str:
    """The rubric the judge reads: the suite's rubric plus the task the output answers, since most
    rubrics ("follows every constraint", "asks before assuming") mean nothing without it."""
    parts = [
        rubric.strip(),
        f"The artifact is an AI system's reply to this prompt:\n<prompt>\n{prompt}\n</prompt>",
    ]
    if system:
        parts.append(f"Its system prompt was:\n<system>\n{system}\n</system>")
    return "\n\n".join(parts)


def _usage(input_tokens: int, output_tokens: int) -> Any:
    from pytest_aimeasure.measure.models import Usage

    return Usage(input_tokens=input_tokens, output_tokens=output_tokens)


class _SessionEnd:
    """Cancels the jobs nobody waits for once the session ends, and closes the target backends."""

    def __init__(self, runner: SuiteRunner) -> None:
        self.runner = runner

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.runner.finish()


runner_key = pytest.StashKey[SuiteRunner]()
