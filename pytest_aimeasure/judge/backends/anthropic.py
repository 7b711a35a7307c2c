"""The Anthropic judge backend: one Messages API call per request, a JSON POST through aiohttp
or httpx (:mod:`~pytest_aimeasure.judge.backends.http`): the official ``anthropic`` SDK takes about 2 s of CPU
to import, which the session's first judge request waited for. The SDK serves the batch API only.

As the SDK did (verified against :mod:`pytest_aimeasure.testing.server`):

* it reads ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``; else ``ANTHROPIC_AUTH_TOKEN``, sent as a
  bearer token) and ``ANTHROPIC_BASE_URL`` when the call is made;
* it retries 408/409/429/5xx (529 included) and timeouts up to ``max_retries`` times, waiting for a
  ``retry-after`` header when there is one and otherwise backing off exponentially from 0.5 s;
* ``timeout`` applies to each attempt (default 600 s).

The judge engine builds its backends with ``max_retries=0`` and retries itself, so a 429 or 529 reaches
it as :class:`~pytest_aimeasure.judge.backends.base.RateLimited` (with the ``retry-after`` the
response asked for) and slows every call to the provider, not only the one that got it.

Prompt caching: on a model the price map does not mark as unable to cache, the judge call puts
``cache_control: {"type": "ephemeral"}`` on the tool definition, the system prompt and the fixed first
part of the user message (dimension and rubric, :attr:`JudgeRequest.prefix_chars`), so every call of
a dimension after the first reads that prefix from the cache (when it is long enough for the model's
minimum). A model that rejects the markers is called again without them, and never sent them again.

Model quirks go through the fallback path both HTTP backends share (:func:`~pytest_aimeasure.judge.
backends.base.call_judge`): a model that rejects ``temperature`` is called again without it (and never
sent one again), and a model that rejects forced tool use is called with ``tool_choice: auto`` plus an
instruction to call the tool (the replies then carry ``mode="auto"``).

Batch mode (``--judge-batch``): with :attr:`AnthropicBackend.batch` set, judge calls go through the
Message Batches API (:mod:`pytest_aimeasure.judge.batch`) instead of one Messages call each; the
request body is the same, and so are the reply's parsing and the fallback path.

A failure to connect (refused, DNS) names the base URL in use and is marked ``unreachable``, so the
engine stops calling a provider that is not there.
"""

from __future__ import annotations

import asyncio
import json
import os
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
    ProviderRejection,
    Quirks,
    ToolMode,
    auto_tool_instruction,
    built_from_environ,
    call_generate,
    call_judge,
    is_connection_failure,
    is_rejection,
    read_usage,
    rejection,
    rejects_forced_tool,
    rejects_temperature,
    retry_after_of,
)
from pytest_aimeasure.judge.backends.http import HttpStatusError, JsonApi, OnJsonApi, Streamed, View
from pytest_aimeasure.judge.backends.secrets import remember
from pytest_aimeasure.judge.backends.streams import AnthropicStream

if TYPE_CHECKING:
    from pytest_aimeasure.judge.batch import Batcher, BatchJournal

API_VERSION = "2023-06-01"
"""The Messages API version the requests name (``anthropic-version``)."""

DEFAULT_BASE_URL = "https://api.anthropic.com"

# The shared helpers moved to base; they stay importable from here for existing callers.
__all__ = [
    "AnthropicBackend",
    "ProviderRejection",
    "auto_tool_instruction",
    "is_rejection",
    "rejects_forced_tool",
    "rejects_temperature",
]


class AnthropicBackend(LearnsQuirks, OnJsonApi):
    """A judge backend on the Anthropic Messages API with forced tool use.

    ``timeout`` (seconds, per attempt; None = the SDK default) and ``max_retries`` (the SDK's own
    transport retries for rate limits, overload, 5xx and timeouts) configure the client. ``base_url`` and
    ``api_key`` default to what the SDK reads from the environment (``ANTHROPIC_BASE_URL``,
    ``ANTHROPIC_API_KEY``). ``prompt_caching`` marks the judge prompt's fixed prefix for caching:
    None (the default) does so unless litellm's price map says the model cannot cache.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        timeout: float | None = None,
        max_retries: int = 4,
        base_url: str | None = None,
        api_key: str | None = None,
        prompt_caching: bool | None = None,
    ) -> None:
        self.model = model
        self.prompt_caching = prompt_caching
        self.timeout = timeout
        self.max_retries = max_retries
        self.base_url = base_url
        self.api_key = api_key
        remember(api_key)  # a provider echoing it in an error must not put it in a report
        self.quirks = Quirks()
        self._api: JsonApi | None = None
        self._client: Any = None  # the SDK's, for the batch API only
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self.batch: Batcher | None = None
        """Set for batch mode: judge calls join Message Batches (see :meth:`use_batches`)."""

    def use_batches(self, journal: BatchJournal | None, *, poll_s: float) -> Batcher:
        """Send judge calls through the Message Batches API from now on (``--judge-batch``)."""
        from pytest_aimeasure.judge.batch import AnthropicBatches, Batcher

        self.batch = Batcher(AnthropicBatches(self._client_now), journal, poll_s=poll_s)
        return self.batch

    @property
    def batched(self) -> bool:
        """True in batch mode: the engine's per-call concurrency limit does not apply."""
        return self.batch is not None

    @property
    def _sdk(self) -> Any:
        """The SDK, imported for the batch API only (about 2 s of CPU)."""
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - anthropic is a dependency
            raise BackendError("the anthropic judge needs the `anthropic` package installed") from exc
        return anthropic

    @property
    def caches_prompt(self) -> bool:
        """Whether judge calls mark their fixed prefix for prompt caching now."""
        if self.prompt_caching is None:
            quirks = self.quirks
            if not quirks.answered and not _prices_read():
                # The session's first calls mark their prefix without asking the price map: reading
                # it (tens of ms of CPU, a 3 MB file with litellm) came before the session's first
                # request, and the calls its streamed 200 let go would wait on the loop for it. A
                # marker the model cannot use is ignored by the API, and one it refuses is a 400
                # learned as a quirk; the calls after the first answer ask the map (read by then,
                # in the background, for that reply's cost), in a later session too, whose first
                # calls go together without a first call to wait for.
                return quirks.caches_prompt
            from pytest_aimeasure.store.cost import supports_prompt_caching

            # Decided once: reading the price map is not free, and a fully cached rerun builds
            # backends it never calls.
            self.prompt_caching = supports_prompt_caching(self.model, self.provider)
        return self.prompt_caching and self.quirks.caches_prompt

    @property
    def base_url_in_use(self) -> str:
        """The API base URL calls go to: the one given, else what the SDK read (``ANTHROPIC_BASE_URL``
        or its default)."""
        if self._api is not None:
            return self._api.base_url
        if self._client is not None:
            return str(self._client.base_url).rstrip("/")
        return (self.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")

    @property
    def concurrency_key(self) -> str:
        """All Anthropic models share one account-wide rate limit, so one concurrency limit."""
        return "anthropic"

    def __repr__(self) -> str:
        return f"AnthropicBackend(model={self.model!r}, timeout={self.timeout!r})"

    # -- the client ------------------------------------------------------------------------------

    def _read_prices_soon(self) -> None:
        # The first reply's cost, and whether the calls after it mark their prompt for caching, read the
        # price map: read while the provider answers the first request.
        from pytest_aimeasure.store.cost import read_prices_soon

        read_prices_soon(self.model, self.provider)

    def _api_now(self) -> JsonApi:
        """The Messages API client, its key and base URL read from the environment on the first call
        (as the SDK did); no credentials at all is an error before any request."""
        if self._api is None:
            headers = {"anthropic-version": API_VERSION, "accept": "application/json"}
            key = self.api_key or os.environ.get("ANTHROPIC_API_KEY")
            token = os.environ.get("ANTHROPIC_AUTH_TOKEN")
            if key:
                headers["x-api-key"] = key
            elif token:
                headers["authorization"] = f"Bearer {token}"
            else:
                raise BackendError(
                    f"no Anthropic credentials for {self.model}: set ANTHROPIC_API_KEY (or "
                    "ANTHROPIC_AUTH_TOKEN), or pass api_key"
                )
            remember(key or token)
            base = self.base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
            self._api = JsonApi(
                base,
                headers,
                timeout=self.timeout,
                max_retries=self.max_retries,
                after_first_request=self._read_prices_soon,
            )
        return self._api

    def _client_now(self) -> Any:
        """The SDK client for the running event loop (the batch API's).

        An httpx connection pool belongs to the loop that opened it; a backend reused from another loop
        (each ``asyncio.run`` makes a new one) gets a fresh client instead of dead pooled connections.
        """
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            kwargs: dict[str, Any] = {"max_retries": self.max_retries}
            if self.timeout is not None:
                kwargs["timeout"] = self.timeout
            if self.base_url is not None:
                kwargs["base_url"] = self.base_url
            if self.api_key is not None:
                kwargs["api_key"] = self.api_key
            self._client = built_from_environ(lambda: self._sdk.AsyncAnthropic(**kwargs))
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP clients (safe to call twice)."""
        if self.batch is not None:
            await self.batch.aclose()
        if self._api is not None:
            await self._api.aclose()
        client, loop = self._client, self._client_loop
        self._client, self._client_loop = None, None
        # A client opened on another (possibly closed) loop cannot be closed from this one; drop it.
        if client is not None and loop is asyncio.get_running_loop():
            await client.close()

    # -- calls -----------------------------------------------------------------------------------

    async def _create(
        self,
        kwargs: dict[str, Any],
        params: dict[str, Any],
        timeout: float | None,
        *,
        sample: str | None = None,
        stream: Streamed | None = None,
    ) -> Any:
        if self.batch is not None and sample is not None:
            self._client_now()
            # A batch request's params are the Messages body itself: no SDK signature to fit.
            return await self.batch.send({**kwargs, **params}, sample)
        import httpx

        api = self._api_now()
        try:
            return await api.post("/v1/messages", {**kwargs, **params}, timeout, stream=stream)
        except httpx.TimeoutException as exc:
            limit = timeout if timeout is not None else self.timeout
            after = f"{limit:g}s" if limit is not None else "the default timeout (600s)"
            attempts = f"; {self.max_retries + 1} attempts" if self.max_retries else ""
            raise BackendError(
                f"anthropic request to {self.model} timed out after {after} (--judge-timeout{attempts})",
                retryable=True,
            ) from exc
        except HttpStatusError as exc:
            raise self._status_error(exc) from exc
        except httpx.TransportError as exc:
            base = self.base_url_in_use
            unreachable = base if is_connection_failure(exc) else None
            raise BackendError(
                f"could not reach the Anthropic API at {base} for {self.model}: "
                f"{str(exc) or type(exc).__name__}",
                retryable=True,
                unreachable=unreachable,
            ) from exc

    def _status_error(self, exc: Any) -> ProviderRejection:
        status = int(exc.status_code)
        message = str(getattr(exc, "api_message", None) or exc.message)
        kind = f" {exc.type}" if getattr(exc, "type", None) else ""
        return rejection(
            f"anthropic API error {status}{kind} for {self.model}: {message}",
            status=status,
            provider_message=message,
            retry_after=retry_after_of(exc),
        )

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        """One forced tool call; the reply is parsed but not validated."""
        tool = request.tool

        async def call(
            temperature: float | None, forced: bool, system: str, accepted: Callable[[], None] | None
        ) -> Any:
            # Read at each attempt: a model that rejected the markers is called again without them.
            caching = self.caches_prompt
            kwargs: dict[str, Any] = {
                "model": self.model,
                "max_tokens": request.max_tokens,
                "messages": _messages(request, caching),
                "tools": [_tool(request, caching)],
                "tool_choice": {"type": "tool", "name": tool.name} if forced else {"type": "auto"},
            }
            if system:
                kwargs["system"] = (
                    [{"type": "text", "text": system, "cache_control": CACHE_MARK}] if caching else system
                )
            params = {"temperature": temperature} if temperature is not None else {}
            sample = f"{request.context.get('index', 0)}" if self.batch is not None else None
            streamed = None
            if accepted is not None and self.batch is None:
                # The model's first call: streamed, so its status lets the calls waiting for it go.
                kwargs["stream"] = True
                streamed = Streamed(AnthropicStream, accepted)
            return await self._create(kwargs, params, request.timeout, sample=sample, stream=streamed)

        attempt = await call_judge(
            self.quirks, request, call, who="anthropic API", model=self.model, batched=self.batch is not None
        )
        reply = self._judge_reply(
            attempt.response, tool.name, attempt.latency_s, attempt.mode, attempt.temperature_sent
        )
        return replace(reply, learned=attempt.learned) if attempt.learned else reply

    def _judge_reply(
        self,
        response: Any,
        tool_name: str,
        latency: float,
        mode: ToolMode,
        temperature_sent: float | None,
    ) -> JudgeReply:
        tool_input: dict[str, Any] | None = None
        texts: list[str] = []
        blocks: list[Any] = []
        for block in response.content or []:
            if isinstance(block, View):
                data = block.dump()
            else:  # the SDK's typed block, from the batch API
                data = block.model_dump(mode="json", exclude_none=True, warnings=False)
            blocks.append(data)
            kind = data.get("type")
            if kind == "tool_use" and data.get("name") == tool_name and tool_input is None:
                found = data.get("input")
                tool_input = found if isinstance(found, dict) else None
            elif kind == "text":
                texts.append(str(data.get("text", "")))
        return JudgeReply(
            tool_input=tool_input,
            text="\n".join(texts),
            raw=json.dumps(blocks, separators=(",", ":"), ensure_ascii=False),
            usage=read_usage(response, "input_tokens", "output_tokens"),
            model=str(getattr(response, "model", "") or self.model),
            latency_s=latency,
            mode=mode,
            temperature_sent=temperature_sent,
        )

    async def generate(self, request: GenerateRequest) -> GenerateReply:
        """A plain text completion. ``params`` may hold ``model``, ``max_tokens``, ``temperature`` or any
        other Messages API field."""
        params = dict(request.params)
        model = str(params.pop("model", self.model))
        max_tokens = int(params.pop("max_tokens", DEFAULT_MAX_TOKENS))
        kwargs: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": request.prompt}],
        }
        if request.system:
            kwargs["system"] = request.system

        async def call(sent: dict[str, Any]) -> Any:
            return await self._create(dict(kwargs), sent, request.timeout)

        response, latency = await call_generate(self.quirks, params, call, who="anthropic API", model=model)
        blocks = response.content or []
        text = "".join(block.text for block in blocks if getattr(block, "type", None) == "text")
        return GenerateReply(
            text=text,
            usage=read_usage(response, "input_tokens", "output_tokens"),
            model=str(getattr(response, "model", "") or model),
            latency_s=latency,
        )


def _prices_read() -> bool:
    # Imported only once the first call is over: the module is not on the first request's path.
    from pytest_aimeasure.store.cost import prices_read

    return prices_read()


CACHE_MARK: dict[str, str] = {"type": "ephemeral"}
"""Anthropic's prompt-cache breakpoint (the 5-minute cache)."""


def _tool(request: JudgeRequest, caching: bool) -> dict[str, Any]:
    tool = request.tool
    spec: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
    }
    if caching:
        spec["cache_control"] = CACHE_MARK
    return spec


def _messages(request: JudgeRequest, caching: bool) -> list[dict[str, Any]]:
    """The turns; with caching, the first user message in two blocks, the fixed part marked."""
    messages: list[dict[str, Any]] = [{"role": m.role, "content": m.content} for m in request.messages]
    cut = request.prefix_chars
    first = request.messages[0] if request.messages else None
    if caching and first is not None and first.role == "user" and 0 < cut < len(first.content):
        messages[0]["content"] = [
            {"type": "text", "text": first.content[:cut], "cache_control": CACHE_MARK},
            {"type": "text", "text": first.content[cut:]},
        ]
    return messages
