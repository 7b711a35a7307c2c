"""The litellm judge backend: any ``provider/model`` string (``openai/gpt-4o-mini``, ``ollama/llama3``, ...).

``openai/...`` calls (but for ``--judge-batch``) do not go through litellm: they are Chat Completions
POSTs through aiohttp or httpx (:mod:`~pytest_aimeasure.judge.backends.http`), because importing litellm costs
about 6 s of CPU, which the session's first judge request waited for. They are sent as litellm sent
them: ``OPENAI_API_KEY`` as a bearer token, to ``api_base`` (else ``OPENAI_BASE_URL`` /
``OPENAI_API_BASE``, else https://api.openai.com/v1); an o-series or gpt-5 model gets
``max_completion_tokens`` and no ``temperature`` (litellm refused a temperature for them itself). The
judge's provider stays ``litellm:openai``, so a baseline judged through litellm stays comparable.

For every other provider litellm is imported when the backend's first call is made, never at module
import. Before that import,
``LITELLM_LOCAL_MODEL_COST_MAP`` defaults to ``True`` so importing litellm does not fetch its price map
from the network (it otherwise does, with retries, on every import).

What litellm does by itself (verified against :mod:`pytest_aimeasure.testing.server`):

* for ``openai/...`` it reads ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL`` (then ``OPENAI_API_BASE``);
* ``num_retries`` becomes the OpenAI SDK's ``max_retries``: transport retries of 408/409/429/5xx and
  timeouts, honouring ``retry-after`` and otherwise backing off exponentially from 0.5 s;
* it rejects some parameters client-side (``UnsupportedParamsError``), e.g. ``temperature=0`` for
  o-series and gpt-5 models.

The judge engine builds its backends with ``max_retries=0`` and retries itself, so a 429 or 529 reaches
it as :class:`~pytest_aimeasure.judge.backends.base.RateLimited` (with the response's ``retry-after``).
Prompt-cache tokens a provider reports (OpenAI's automatic caching: ``prompt_tokens_details.cached_tokens``)
are recorded apart from the uncached input.

This backend additionally passes ``<PREFIX>_BASE_URL`` / ``<PREFIX>_API_BASE`` as ``api_base`` when set,
so every provider can be pointed at a local server the same way.

Batch mode (``--judge-batch``, ``openai/...`` models only): with :attr:`LitellmBackend.batch` set, judge
calls go through OpenAI's Batch API via litellm's files and batches functions
(:mod:`pytest_aimeasure.judge.batch`); each request body is the Chat Completions body litellm would send
for an OpenAI model, and the reply is parsed as a single call's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_aimeasure.judge.backends.base import (
    DEFAULT_MAX_TOKENS,
    BackendError,
    GenerateReply,
    GenerateRequest,
    JudgeReply,
    JudgeRequest,
    LearnsQuirks,
    Quirks,
    ToolMode,
    call_generate,
    call_judge,
    is_connection_failure,
    read_usage,
    rejection,
    request_origin,
    retry_after_of,
)
from pytest_aimeasure.judge.backends.http import HttpStatusError, JsonApi, OnJsonApi, Streamed
from pytest_aimeasure.judge.backends.secrets import remember
from pytest_aimeasure.judge.backends.streams import ChatStream

if TYPE_CHECKING:
    from pytest_aimeasure.judge.batch import Batcher, BatchJournal

__all__ = [
    "BATCH_PREFIXES",
    "LITELLM_EXTRA",
    "LitellmBackend",
    "base_url_from_env",
    "import_litellm",
    "litellm_installed",
    "missing_litellm",
]

LITELLM_EXTRA = "pip install 'pytest-aimeasure[litellm]'"

BATCH_PREFIXES = frozenset({"openai"})
"""litellm providers whose batch API ``--judge-batch`` speaks (OpenAI's Batch API)."""

_configured = False
_DRAIN_S = 2.0

NATIVE_PREFIXES = frozenset({"openai"})
"""Providers whose calls go out as Chat Completions through aiohttp or httpx, not through litellm."""

OPENAI_BASE_URL = "https://api.openai.com/v1"

_REASONING = re.compile(r"^(o\d|gpt-5)")
"""OpenAI models that take ``max_completion_tokens`` and no ``temperature`` (litellm's o-series and
gpt-5 rules)."""


def litellm_installed() -> bool:
    """Whether litellm can be imported, found without importing it (that takes seconds)."""
    try:
        return importlib.util.find_spec("litellm") is not None
    except (ImportError, ValueError):  # blocked, or a None placeholder in sys.modules
        return False


def missing_litellm(what: str) -> str:
    """The message for ``what`` (e.g. "judge model 'openai/gpt-4o-mini'") when litellm is missing."""
    return (
        f"{what} needs litellm, which is not installed: it is an optional extra, "
        f"install it with {LITELLM_EXTRA}"
    )


def import_litellm() -> Any:
    """Import litellm without its network side effects and debug chatter (idempotent).

    Raises ImportError naming the extra when litellm is not installed."""
    global _configured
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ModuleNotFoundError as exc:
        if exc.name != "litellm":
            raise  # litellm is there but one of its own imports is broken: show that
        raise ModuleNotFoundError(missing_litellm("a provider/model backend"), name="litellm") from exc

    if not _configured:
        # The "Give Feedback / Get Help" banner litellm prints on every exception is noise in test output.
        litellm.suppress_debug_info = True
        if hasattr(litellm, "telemetry"):  # older releases phoned home unless told not to
            litellm.telemetry = False
        _configured = True
    return litellm


def base_url_from_env(prefix: str) -> str | None:
    """``<PREFIX>_BASE_URL`` or ``<PREFIX>_API_BASE`` for a litellm provider prefix, if set."""
    name = re.sub(r"[^A-Za-z0-9]", "_", prefix).upper()
    for variable in (f"{name}_BASE_URL", f"{name}_API_BASE"):
        value = os.environ.get(variable)
        if value:
            return value
    return None


class LitellmBackend(LearnsQuirks, OnJsonApi):
    """A judge backend on ``litellm.acompletion`` with a forced function call.

    ``model`` is litellm's ``provider/model`` string. ``timeout`` (seconds, per attempt) and
    ``max_retries`` (passed as ``num_retries``) configure each call. ``api_base`` / ``api_key`` default to
    the environment (see the module docstring).
    """

    def __init__(
        self,
        model: str,
        *,
        timeout: float | None = None,
        max_retries: int = 4,
        api_base: str | None = None,
        api_key: str | None = None,
    ) -> None:
        prefix, sep, name = model.partition("/")
        if not (sep and prefix and name):
            raise BackendError(
                f"litellm model {model!r} must look like 'provider/model' (openai/gpt-4o-mini)"
            )
        self.model = model
        self.prefix = prefix
        self.provider = f"litellm:{prefix}"
        self.timeout = timeout
        self.max_retries = max_retries
        self.api_base = api_base if api_base is not None else base_url_from_env(prefix)
        self.api_key = api_key
        remember(api_key)  # a provider echoing it in an error must not put it in a report
        self.quirks = Quirks()
        self.native = prefix in NATIVE_PREFIXES
        self._reasoning = self.native and bool(_REASONING.match(name))
        if self._reasoning:
            self.quirks.sends_temperature = False  # litellm refused it client-side: never sent
        self._api: JsonApi | None = None
        self._litellm_module: Any = None if self.native else import_litellm()
        self._called = False  # aclose has background logging to drain only after a call
        self.batch: Batcher | None = None
        """Set for batch mode: judge calls join OpenAI batches (see :meth:`use_batches`)."""

    def use_batches(self, journal: BatchJournal | None, *, poll_s: float) -> Batcher:
        """Send judge calls through OpenAI's Batch API from now on (``--judge-batch``); only for the
        providers in :data:`BATCH_PREFIXES`."""
        from pytest_aimeasure.judge.batch import Batcher, OpenAIBatches

        if self.prefix not in BATCH_PREFIXES:
            raise BackendError(
                f"litellm's batch API is wired for {', '.join(sorted(BATCH_PREFIXES))} "
                f"models only, not {self.model}"
            )
        api = OpenAIBatches(self._litellm, api_base=self.api_base, api_key=self.api_key)
        self.batch = Batcher(api, journal, poll_s=poll_s)
        return self.batch

    @property
    def _litellm(self) -> Any:
        """litellm, imported on first use by a native route (its batch API)."""
        if self._litellm_module is None:
            self._litellm_module = import_litellm()
        return self._litellm_module

    def _read_prices_soon(self) -> None:
        # The first reply's cost reads the price map: read while the provider answers the first request.
        from pytest_aimeasure.store.cost import read_prices_soon

        read_prices_soon(self.model)

    def _api_now(self) -> JsonApi:
        """The Chat Completions client of a native route, its key read on the first call."""
        if self._api is None:
            key = self.api_key or os.environ.get(f"{self.prefix.upper()}_API_KEY")
            if not key:
                raise BackendError(
                    f"no {self.prefix} credentials for {self.model}: set "
                    f"{self.prefix.upper()}_API_KEY, or pass api_key"
                )
            remember(key)
            headers = {"authorization": f"Bearer {key}", "accept": "application/json"}
            base = self.api_base or OPENAI_BASE_URL
            self._api = JsonApi(
                base,
                headers,
                timeout=self.timeout,
                max_retries=self.max_retries,
                after_first_request=self._read_prices_soon,
            )
        return self._api

    @property
    def batched(self) -> bool:
        """True in batch mode: the engine's per-call concurrency limit does not apply."""
        return self.batch is not None

    @property
    def concurrency_key(self) -> str:
        """One concurrency limit per litellm provider prefix (``openai``, ``ollama`` ...)."""
        return self.prefix

    def __repr__(self) -> str:
        return f"LitellmBackend(model={self.model!r}, api_base={self.api_base!r}, timeout={self.timeout!r})"

    async def aclose(self) -> None:
        """Let litellm finish its background logging tasks on this event loop, then stop its logging
        worker (bounded, best effort).

        litellm owns and caches its HTTP clients, so there is nothing else to close. Its success
        logging runs as background tasks bound to the caller's loop; left pending they are carried
        to the next loop with a warning, or destroyed with the loop. Its logging worker is a task on
        the same loop: left running, closing the loop destroys it ("Task was destroyed but it is
        pending!", then "Event loop is closed" from its finaliser). The next call starts it again.
        """
        if self.batch is not None:
            await self.batch.aclose()
        if self._api is not None:
            await self._api.aclose()
        if not self._called:
            return
        try:  # internal litellm APIs: skip quietly where a release moved them
            from litellm.litellm_core_utils.logging_worker import GLOBAL_LOGGING_WORKER
            from litellm.responses.streaming_iterator import drain_logging_tasks
        except ImportError:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(drain_logging_tasks(timeout=_DRAIN_S), _DRAIN_S + 0.5)
            await asyncio.wait_for(GLOBAL_LOGGING_WORKER.flush(), _DRAIN_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(GLOBAL_LOGGING_WORKER.stop(timeout=_DRAIN_S), _DRAIN_S + 0.5)

    # -- calls -----------------------------------------------------------------------------------

    async def _complete(
        self, kwargs: dict[str, Any], timeout: float | None, *, sample: str | None = None
    ) -> Any:
        if self.native and self.batch is None:
            return await self._post(kwargs, timeout)
        litellm = self._litellm
        self._called = True
        if self.batch is not None and sample is not None:
            # A batch line's body is the provider's own request: its model name, no litellm options.
            body = {"model": self.model.partition("/")[2], **kwargs}
            try:
                return await self.batch.send(body, sample)
            except BackendError:
                raise
            except Exception as exc:
                raise self._error(exc, litellm, timeout) from exc
        kwargs.setdefault("model", self.model)
        kwargs["num_retries"] = self.max_retries
        limit = timeout if timeout is not None else self.timeout
        if limit is not None:
            kwargs["timeout"] = limit
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key
        try:
            return await litellm.acompletion(**kwargs)
        except Exception as exc:  # litellm raises its own, openai's and httpx's exceptions
            raise self._error(exc, litellm, limit) from exc

    async def _post(
        self, kwargs: dict[str, Any], timeout: float | None, *, stream: Callable[[], None] | None = None
    ) -> Any:
        """One Chat Completions call of a native route; with ``stream``, streamed (with its usage),
        ``stream()`` called once the reply's status says the provider took it."""
        import httpx

        body = {"model": self.model.partition("/")[2], **kwargs}
        if self._reasoning and "max_tokens" in body:
            body["max_completion_tokens"] = body.pop("max_tokens")
        streamed = None
        if stream is not None:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            streamed = Streamed(ChatStream, stream)
        api = self._api_now()
        limit = timeout if timeout is not None else self.timeout
        try:
            return await api.post("/chat/completions", body, timeout, stream=streamed)
        except httpx.TimeoutException as exc:
            raise self._timed_out(limit) from exc
        except HttpStatusError as exc:
            kind = f" {exc.type}" if exc.type else ""
            raise rejection(
                f"{self.prefix} API error {exc.status_code}{kind} for {self.model}: {exc.message}",
                status=exc.status_code,
                provider_message=exc.message,
                retry_after=retry_after_of(exc),
            ) from exc
        except httpx.TransportError as exc:
            unreachable = api.base_url if is_connection_failure(exc) else None
            raise BackendError(
                f"could not reach {self.prefix} at {api.base_url} for {self.model}: "
                f"{str(exc) or type(exc).__name__}",
                retryable=True,
                unreachable=unreachable,
            ) from exc

    def _timed_out(self, limit: float | None) -> BackendError:
        after = f"{limit:g}s" if limit is not None else "the default timeout"
        attempts = f"; {self.max_retries + 1} attempts" if self.max_retries else ""
        return BackendError(
            f"{self.prefix} request to {self.model} timed out after {after} (--judge-timeout{attempts})",
            retryable=True,
        )

    def _error(self, exc: Exception, litellm: Any, limit: float | None) -> BackendError:
        message = str(getattr(exc, "message", None) or exc)
        status = getattr(exc, "status_code", None)
        # Only trust the wording when there is no HTTP status: a 400 may well quote "timed out".
        if isinstance(exc, litellm.Timeout) or (status is None and "timed out" in message.lower()):
            return self._timed_out(limit)
        if is_connection_failure(exc):
            # litellm reports a refused connection as a 500: say what it was, and where.
            base = self.api_base or request_origin(exc) or f"the default {self.prefix} endpoint"
            return BackendError(
                f"could not reach {self.prefix} at {base} for {self.model}: {message}",
                retryable=True,
                unreachable=base,
            )
        if isinstance(status, int):
            return rejection(
                f"litellm error {status} ({type(exc).__name__}) for {self.model}: {message}",
                status=status,
                provider_message=message,
                retry_after=retry_after_of(exc),
            )
        return BackendError(f"litellm call to {self.model} failed ({type(exc).__name__}): {message}")

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        """One forced function call; the reply is parsed but not validated."""
        tool = request.tool
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                },
            }
        ]
        turns = [{"role": m.role, "content": m.content} for m in request.messages]

        async def call(
            temperature: float | None, forced: bool, system: str, accepted: Callable[[], None] | None
        ) -> Any:
            kwargs: dict[str, Any] = {
                "messages": ([{"role": "system", "content": system}] if system else []) + turns,
                "tools": tools,
                "tool_choice": ({"type": "function", "function": {"name": tool.name}} if forced else "auto"),
                "max_tokens": request.max_tokens,
            }
            if temperature is not None:
                kwargs["temperature"] = temperature
            sample = f"{request.context.get('index', 0)}" if self.batch is not None else None
            if accepted is not None and self.native and self.batch is None:
                # The model's first call: streamed, so its status lets the calls waiting for it go.
                return await self._post(kwargs, request.timeout, stream=accepted)
            return await self._complete(kwargs, request.timeout, sample=sample)

        attempt = await call_judge(
            self.quirks, request, call, who="litellm", model=self.model, batched=self.batch is not None
        )
        reply = self._judge_reply(
            attempt.response, tool.name, attempt.latency_s, attempt.mode, attempt.temperature_sent
        )
        return replace(reply, learned=attempt.learned) if attempt.learned else reply

    def _judge_reply(
        self, response: Any, tool_name: str, latency: float, mode: ToolMode, temperature_sent: float | None
    ) -> JudgeReply:
        message = response.choices[0].message if getattr(response, "choices", None) else None
        text = str(getattr(message, "content", None) or "")
        calls = list(getattr(message, "tool_calls", None) or [])
        functions = [(getattr(f, "name", None), getattr(f, "arguments", None)) for f in _functions(calls)]
        tool_input: dict[str, Any] | None = None
        raw = text
        matching = [arguments for name, arguments in functions if name == tool_name]
        if matching:
            arguments = matching[0]
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None  # not JSON: the engine reports it, with raw, as a malformed verdict
            tool_input = parsed if isinstance(parsed, dict) else None
        elif functions:  # the model called some other function: show what it did
            raw = json.dumps([{"name": name, "arguments": arguments} for name, arguments in functions])
        return JudgeReply(
            tool_input=tool_input,
            text=text,
            raw=raw,
            usage=read_usage(response, "prompt_tokens", "completion_tokens"),
            model=str(getattr(response, "model", None) or self.model),
            latency_s=latency,
            mode=mode,
            temperature_sent=temperature_sent,
        )

    async def generate(self, request: GenerateRequest) -> GenerateReply:
        """A plain text completion; ``params`` are passed to ``litellm.acompletion`` (``model``,
        ``max_tokens``, ``temperature``, ...)."""
        params = dict(request.params)
        params.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        messages = ([{"role": "system", "content": request.system}] if request.system else []) + [
            {"role": "user", "content": request.prompt}
        ]

        async def call(sent: dict[str, Any]) -> Any:
            return await self._complete({**sent, "messages": messages}, request.timeout)

        response, latency = await call_generate(self.quirks, params, call, who="litellm", model=self.model)
        message = response.choices[0].message if getattr(response, "choices", None) else None
        return GenerateReply(
            text=str(getattr(message, "content", None) or ""),
            usage=read_usage(response, "prompt_tokens", "completion_tokens"),
            model=str(getattr(response, "model", None) or self.model),
            latency_s=latency,
        )


def _functions(calls: list[Any]) -> list[Any]:
    return [call.function for call in calls if getattr(call, "function", None) is not None]
