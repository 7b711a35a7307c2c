"""The Anthropic judge backend: one Messages API call per request, through the official ``anthropic`` SDK.

The SDK is imported when a backend is built, never at module import, so loading the plugin stays cheap.

What the SDK does by itself (verified against :mod:`pytest_aimeasure.testing.server`):

* it reads ``ANTHROPIC_API_KEY`` (then ``ANTHROPIC_AUTH_TOKEN``) and ``ANTHROPIC_BASE_URL``;
* it retries 408/409/429/5xx (529 included) and timeouts up to ``max_retries`` times, waiting for a
  ``retry-after`` header when there is one and otherwise backing off exponentially from 0.5 s;
* ``timeout`` applies to each attempt.

Model quirks are handled here, once per backend: a model that rejects ``temperature`` is called again
without it (and never sent one again), and a model that rejects forced tool use is called with
``tool_choice: auto`` plus an instruction to call the tool (the replies then carry ``mode="auto"``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any

from pytest_aimeasure.judge.backends.base import (
    DEFAULT_MAX_TOKENS,
    BackendError,
    GenerateReply,
    GenerateRequest,
    JudgeReply,
    JudgeRequest,
    ProviderRejection,
    ToolMode,
    auto_tool_instruction,
    is_rejection,
    rejects_forced_tool,
    rejects_temperature,
)
from pytest_aimeasure.models import Usage

# The shared helpers moved to base; they stay importable from here for existing callers.
__all__ = [
    "AnthropicBackend",
    "ProviderRejection",
    "auto_tool_instruction",
    "is_rejection",
    "rejects_forced_tool",
    "rejects_temperature",
]


class AnthropicBackend:
    """A judge backend on the Anthropic Messages API with forced tool use.

    ``timeout`` (seconds, per attempt; None = the SDK default) and ``max_retries`` (the SDK's own
    transport retries for rate limits, overload, 5xx and timeouts) configure the client. ``base_url`` and
    ``api_key`` default to what the SDK reads from the environment (``ANTHROPIC_BASE_URL``,
    ``ANTHROPIC_API_KEY``).
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
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.base_url = base_url
        self.api_key = api_key
        # Learned from the API's 400s, then kept for the backend's lifetime so later calls don't pay
        # for the same rejection again.
        self.sends_temperature = True
        self.forces_tool = True
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._create_params: frozenset[str] | None = None

    @property
    def _sdk(self) -> Any:
        """The SDK, imported on the first call: building a backend (e.g. to key the sample cache on a
        fully cached rerun) must not pay the ~1 s import."""
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - anthropic is a dependency
            raise BackendError("the anthropic judge needs the `anthropic` package installed") from exc
        return anthropic

    @property
    def concurrency_key(self) -> str:
        """All Anthropic models share one account-wide rate limit, so one concurrency limit."""
        return "anthropic"

    def __repr__(self) -> str:
        return f"AnthropicBackend(model={self.model!r}, timeout={self.timeout!r})"

    # -- the client ------------------------------------------------------------------------------

    def _client_now(self) -> Any:
        """The SDK client for the running event loop.

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
            self._client = self._sdk.AsyncAnthropic(**kwargs)
            self._client_loop = loop
            if self._create_params is None:
                signature = inspect.signature(self._client.messages.create)
                self._create_params = frozenset(signature.parameters)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client (safe to call twice)."""
        client, loop = self._client, self._client_loop
        self._client, self._client_loop = None, None
        # A client opened on another (possibly closed) loop cannot be closed from this one; drop it.
        if client is not None and loop is asyncio.get_running_loop():
            await client.close()

    # -- calls -----------------------------------------------------------------------------------

    async def _create(self, kwargs: dict[str, Any], params: dict[str, Any], timeout: float | None) -> Any:
        client = self._client_now()
        accepted = self._create_params or frozenset()
        extra_body: dict[str, Any] = {}
        for name, value in params.items():
            # SDK 2.x dropped some sampling parameters (temperature among them) from create(); the API
            # still takes them, so whatever the installed signature lacks goes in the JSON body.
            if name in accepted:
                kwargs[name] = value
            else:
                extra_body[name] = value
        if extra_body:
            kwargs["extra_body"] = extra_body
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            return await client.messages.create(**kwargs)
        except self._sdk.APITimeoutError as exc:
            limit = timeout if timeout is not None else self.timeout
            after = f"{limit:g}s" if limit is not None else "the SDK's default timeout"
            raise BackendError(
                f"anthropic request to {self.model} timed out after {after} (--judge-timeout; "
                f"{self.max_retries + 1} attempts)",
                retryable=True,
            ) from exc
        except self._sdk.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except self._sdk.APIConnectionError as exc:
            raise BackendError(
                f"could not reach the Anthropic API for {self.model}: {exc}", retryable=True
            ) from exc
        except self._sdk.AnthropicError as exc:
            raise BackendError(f"anthropic call to {self.model} failed: {exc}") from exc
        except TypeError as exc:
            # The SDK raises a bare TypeError at request time when it found no credentials at all.
            if "authentication" not in str(exc).lower():
                raise
            raise BackendError(
                f"no Anthropic credentials for {self.model}: set ANTHROPIC_API_KEY ({exc})"
            ) from exc

    def _status_error(self, exc: Any) -> ProviderRejection:
        status = int(exc.status_code)
        message = str(getattr(exc, "api_message", None) or exc.message)
        kind = f" {exc.type}" if getattr(exc, "type", None) else ""
        return ProviderRejection(
            f"anthropic API error {status}{kind} for {self.model}: {message}",
            status=status,
            provider_message=message,
        )

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        """One forced tool call; the reply is parsed but not validated."""
        tool = request.tool
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        tools = [{"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}]
        # At most three attempts: each retry turns off one thing the model rejected.
        for _ in range(3):
            send_temperature = request.temperature is not None and self.sends_temperature
            forced = self.forces_tool
            system = request.system
            if not forced:
                instruction = auto_tool_instruction(tool.name)
                system = f"{system}\n\n{instruction}" if system else instruction
            kwargs: dict[str, Any] = {
                "model": self.model,
                "max_tokens": request.max_tokens,
                "messages": messages,
                "tools": tools,
                "tool_choice": {"type": "tool", "name": tool.name} if forced else {"type": "auto"},
            }
            if system:
                kwargs["system"] = system
            params = {"temperature": request.temperature} if send_temperature else {}
            started = time.perf_counter()
            try:
                response = await self._create(kwargs, params, request.timeout)
            except BackendError as error:
                if send_temperature and is_rejection(error, rejects_temperature):
                    self.sends_temperature = False
                    continue
                if forced and is_rejection(error, rejects_forced_tool):
                    self.forces_tool = False
                    continue
                raise
            latency = time.perf_counter() - started
            mode: ToolMode = "forced" if forced else "auto"
            sent = request.temperature if send_temperature else None
            return self._judge_reply(response, tool.name, latency, mode, sent)
        raise BackendError(f"anthropic API kept rejecting the judge call for {self.model}", status=400)

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
            blocks.append(block.model_dump(mode="json", exclude_none=True, warnings=False))
            kind = getattr(block, "type", None)
            if kind == "tool_use" and getattr(block, "name", None) == tool_name and tool_input is None:
                tool_input = block.input if isinstance(block.input, dict) else None
            elif kind == "text":
                texts.append(block.text)
        return JudgeReply(
            tool_input=tool_input,
            text="\n".join(texts),
            raw=json.dumps(blocks, separators=(",", ":"), ensure_ascii=False),
            usage=_usage(response),
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
        kwargs_base: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": request.prompt}],
        }
        if request.system:
            kwargs_base["system"] = request.system
        if "temperature" in params and not self.sends_temperature:
            params.pop("temperature")
        for _ in range(2):
            started = time.perf_counter()
            try:
                response = await self._create(dict(kwargs_base), dict(params), request.timeout)
            except BackendError as error:
                if "temperature" in params and is_rejection(error, rejects_temperature):
                    self.sends_temperature = False
                    params.pop("temperature")
                    continue
                raise
            latency = time.perf_counter() - started
            text = "".join(
                block.text for block in response.content or [] if getattr(block, "type", None) == "text"
            )
            return GenerateReply(
                text=text,
                usage=_usage(response),
                model=str(getattr(response, "model", "") or model),
                latency_s=latency,
            )
        raise BackendError(f"anthropic API kept rejecting the generation call for {model}", status=400)


def _usage(response: Any) -> Usage:
    usage = getattr(response, "usage", None)
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
    )
