"""A scriptable fake LLM provider on 127.0.0.1, for testing judges without a network or an API key.

:class:`ProviderServer` speaks enough of the Anthropic Messages API (``POST /v1/messages``) and the
OpenAI Chat Completions API (``POST /v1/chat/completions``, also without ``/v1``) that the real
``anthropic`` SDK and real ``litellm`` make real HTTP calls against it. A request that offers tools is
answered with a tool call carrying a verdict ``{"dimension", "score", "rationale"}``; a request without
tools is answered with plain text. What comes back can be scripted per call (:meth:`ProviderServer.script`),
per dimension (:meth:`ProviderServer.set_scores`) or by a callback, and :class:`Fault` injects the
failures real providers produce (rate limits, overload, timeouts, malformed tool calls, rejections).
Anthropic requests that mark ``cache_control`` breakpoints are answered with the prompt-cache usage
the real API reports (:mod:`pytest_aimeasure.testing.promptcache`).

Everything the server received is recorded as :class:`SeenRequest` objects, with timing and
concurrency statistics, so tests can assert on what a client actually sent.

This module is stdlib-only on purpose: the plugin's fixture imports it, and importing it must stay cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeAlias

from pytest_aimeasure.testing.promptcache import DEFAULT_MIN_TOKENS, PromptCache

__all__ = ["Fault", "Outcome", "ProviderServer", "SeenRequest"]

ProtocolName = Literal["anthropic", "openai"]

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "overloaded",
    "slow",
    "malformed_tool_input",
    "invalid_json",
    "text_only",
    "out_of_range",
    "reject",
]

DEFAULT_SCORE = 4

# Real providers keep a connection open for minutes; a test server must never hold a test hostage, so
# every sleep is cut short by stop() and additionally capped.
_MAX_SLEEP_S = 60.0
_MAX_BODY_BYTES = 32 * 1024 * 1024
_STOP_JOIN_S = 2.0

_ANTHROPIC_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_OPENAI_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    529: "overloaded_error",
}


@dataclass(frozen=True, repr=False)
class Fault:
    """A scripted misbehaviour. Build one with the constructors (``Fault.rate_limit()`` ...), then pass
    it to :meth:`ProviderServer.script` or return it from a scorer."""

    kind: FaultKind
    status: int = 200
    message: str = ""
    retry_after: float | None = None
    delay: float = 0.0
    payload: Mapping[str, Any] | None = None
    text: str = ""
    score: int | None = None

    def __repr__(self) -> str:
        # Show the constructor call that built it; the dataclass repr lists every unused field.
        fields = {
            "rate_limit": ("retry_after",),
            "slow": ("delay",),
            "malformed_tool_input": ("payload",) if self.payload is not None else (),
            "invalid_json": ("text",),
            "text_only": ("text",),
            "out_of_range": ("score",),
            "reject": ("status", "message"),
        }.get(self.kind, ())
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in fields)
        return f"Fault.{self.kind}({args})"

    @classmethod
    def rate_limit(cls, retry_after: float = 0.05) -> Fault:
        """HTTP 429 with a ``retry-after`` header (seconds, may be fractional)."""
        message = "Rate limit exceeded, please retry."
        return cls("rate_limit", status=429, message=message, retry_after=retry_after)

    @classmethod
    def server_error(cls) -> Fault:
        """HTTP 500, an ``api_error`` / ``server_error``."""
        return cls("server_error", status=500, message="Internal server error.")

    @classmethod
    def overloaded(cls) -> Fault:
        """HTTP 529, Anthropic's ``overloaded_error``."""
        return cls("overloaded", status=529, message="Overloaded.")

    @classmethod
    def slow(cls, delay: float) -> Fault:
        """Sleep ``delay`` seconds, then answer as if nothing was scripted (to exceed a client timeout)."""
        return cls("slow", delay=delay)

    @classmethod
    def malformed_tool_input(cls, payload: Mapping[str, Any] | None = None) -> Fault:
        """A tool call whose input breaks the schema; by default ``{"dimension": <dim>, "score": "five"}``."""
        return cls("malformed_tool_input", payload=None if payload is None else dict(payload))

    @classmethod
    def invalid_json(cls, arguments: str = '{"dimension": "quality", "score": 4,') -> Fault:
        """A tool call whose arguments are not JSON: the OpenAI ``arguments`` string is ``arguments``
        verbatim; the Anthropic ``input`` is that string instead of an object."""
        return cls("invalid_json", text=arguments)

    @classmethod
    def text_only(cls, text: str = "I think it is pretty good, maybe a four.") -> Fault:
        """A reply with no tool call at all, only text."""
        return cls("text_only", text=text)

    @classmethod
    def out_of_range(cls, score: int = 7) -> Fault:
        """A well-formed tool call whose score lies outside 1..5."""
        return cls("out_of_range", score=score)

    @classmethod
    def reject(cls, status: int = 400, message: str = "Invalid request.") -> Fault:
        """An error response with that status and message (``invalid_request_error`` for a 400)."""
        return cls("reject", status=status, message=message)


Outcome: TypeAlias = int | Fault | dict[str, Any] | str
"""What one request yields: a score, a fault, a raw tool input, or a text-only reply."""


@dataclass
class SeenRequest:
    """One HTTP request the server received, as the client sent it."""

    protocol: ProtocolName
    model: str
    path: str
    dimension: str | None
    tool_name: str | None
    tool_choice: Any
    forced: bool
    temperature: float | None
    has_tools: bool
    system: str
    prompt: str
    messages: list[dict[str, Any]]
    body: dict[str, Any]
    headers: dict[str, str]
    started: float
    finished: float = 0.0
    status: int = 0


class _Replied(Exception):
    """Internal: a response was already sent (an error), stop handling this request."""


class _Aborted(Exception):
    """Internal: the server is stopping; drop the connection without a reply."""


@dataclass(frozen=True)
class _ToolCall:
    input: Any  # Anthropic's tool_use input: the verdict dict (or a bare string for invalid JSON)
    arguments: str  # OpenAI's function.arguments: the same, as JSON text


@dataclass
class _Reply:
    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class ProviderServer:
    """A fake Anthropic/OpenAI-compatible provider on an ephemeral localhost port.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`)::

        with ProviderServer() as server:
            server.script(5, Fault.rate_limit(), 3)
            client = anthropic.AsyncAnthropic(base_url=server.url, api_key="test-key")

    For each request the outcome is chosen in this order: a model listed in
    ``reject_temperature_models`` / ``reject_forced_tool_models`` rejects the request (consuming
    nothing); otherwise the next scripted outcome (FIFO, shared by every request); otherwise, for a
    request with tools, the per-dimension scores from :meth:`set_scores`, then ``scorer``, then a score
    of 4; for a request without tools, ``generator`` (or deterministic text). A scripted score or tool
    input consumed by a request without tools comes back as text, since there is no tool to call.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        scorer: Callable[[SeenRequest], Outcome] | None = None,
        generator: Callable[[SeenRequest], str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.latency = latency
        self.latency_by_model: dict[str, float] = {}
        self.scorer = scorer
        self.generator = generator
        self.host = host
        self.reject_temperature_models: set[str] = set()
        self.reject_forced_tool_models: set[str] = set()
        self.prompt_cache = PromptCache(min_tokens=DEFAULT_MIN_TOKENS)
        """Anthropic prompt caching: set ``prompt_cache.min_tokens`` to the model's minimum."""

        self._lock = threading.Lock()
        self._queue: deque[Outcome] = deque()
        self._scores: dict[str, tuple[int, ...]] = {}
        self._score_calls: dict[str, int] = {}
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

        self._calls = 0
        self._calls_by_model: dict[str, int] = {}
        self._judge_calls = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._requests: list[SeenRequest] = []

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> ProviderServer:
        """Bind an ephemeral port and serve in a daemon thread. Returns self."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer((self.host, 0), _Handler)
        httpd.provider = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"aimeasure-provider-{httpd.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving. Idempotent, and bounded: sleeping handlers are woken up and abandoned."""
        self._stopping.set()
        httpd, thread = self._httpd, self._thread
        self._httpd, self._thread = None, None
        if httpd is None:
            return
        if thread is not None and thread.is_alive():
            # shutdown() waits for serve_forever's loop; the loop polls every 50 ms, so this is quick.
            httpd.shutdown()
            thread.join(_STOP_JOIN_S)
        httpd.server_close()
        httpd.close_connections()

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The bound port (only while running)."""
        if self._httpd is None:
            raise RuntimeError("ProviderServer is not running; call start() or use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the Anthropic base URL."""
        return f"http://{self.host}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        """The base URL for ``anthropic.AsyncAnthropic(base_url=...)`` / ``ANTHROPIC_BASE_URL``."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """The base URL for OpenAI-style clients (``api_base`` / ``OPENAI_BASE_URL``): ``url + "/v1"``."""
        return self.url + "/v1"

    # -- scripting ---------------------------------------------------------------------------------

    def script(self, *outcomes: Outcome) -> None:
        """Append outcomes to the FIFO queue that requests consume before anything else.

        An int is a score, a dict a raw tool input, a str a text-only reply, a :class:`Fault` a fault.
        """
        for outcome in outcomes:
            if isinstance(outcome, bool) or not isinstance(outcome, int | Fault | dict | str):
                raise TypeError(f"cannot script {outcome!r}: expected int, Fault, dict or str")
        with self._lock:
            self._queue.extend(outcomes)

    @property
    def pending(self) -> int:
        """How many scripted outcomes are still queued."""
        with self._lock:
            return len(self._queue)

    def clear_script(self) -> None:
        """Drop every queued outcome."""
        with self._lock:
            self._queue.clear()

    def set_scores(self, scores: Mapping[str, int | Sequence[int]]) -> None:
        """Per dimension, a constant score or a sequence cycled one step per call (replaces earlier ones)."""
        table: dict[str, tuple[int, ...]] = {}
        for dimension, value in scores.items():
            cycle = (value,) if isinstance(value, int) else tuple(value)
            if not cycle:
                raise ValueError(f"set_scores: empty score sequence for dimension {dimension!r}")
            table[dimension] = cycle
        with self._lock:
            self._scores.update(table)
            for dimension in table:
                self._score_calls[dimension] = 0

    # -- statistics --------------------------------------------------------------------------------

    @property
    def calls(self) -> int:
        """Requests received on a known endpoint, faults and rejections included.

        Bodies that are not valid JSON requests (answered 400) and unknown paths (404) are not counted.
        """
        with self._lock:
            return self._calls

    @property
    def calls_by_model(self) -> dict[str, int]:
        """A copy of the request count per requested model name."""
        with self._lock:
            return dict(self._calls_by_model)

    @property
    def judge_calls(self) -> int:
        """Requests that offered tools."""
        with self._lock:
            return self._judge_calls

    @property
    def in_flight(self) -> int:
        """Requests being handled right now."""
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The most requests handled at the same time since the last :meth:`reset_stats`."""
        with self._lock:
            return self._max_in_flight

    @property
    def requests(self) -> list[SeenRequest]:
        """A copy of the list of requests received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def reset_stats(self) -> None:
        """Forget the statistics and recorded requests (the script and settings stay)."""
        with self._lock:
            self._calls = 0
            self._calls_by_model = {}
            self._judge_calls = 0
            self._max_in_flight = self._in_flight
            self._requests = []

    # -- request handling (called from handler threads) --------------------------------------------

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _record(self, seen: SeenRequest) -> None:
        with self._lock:
            self._calls += 1
            self._calls_by_model[seen.model] = self._calls_by_model.get(seen.model, 0) + 1
            if seen.has_tools:
                self._judge_calls += 1
            self._requests.append(seen)

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(min(seconds, _MAX_SLEEP_S))
        if self._stopping.is_set():
            raise _Aborted

    def _next_outcome(self, seen: SeenRequest) -> Outcome | None:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            if seen.has_tools and seen.dimension is not None and seen.dimension in self._scores:
                cycle = self._scores[seen.dimension]
                step = self._score_calls[seen.dimension]
                self._score_calls[seen.dimension] = step + 1
                return cycle[step % len(cycle)]
        return None

    def _default_outcome(self, seen: SeenRequest) -> Outcome:
        if not seen.has_tools:
            if self.generator is not None:
                return self.generator(seen)
            return _default_text(seen)
        if self.scorer is not None:
            return self.scorer(seen)
        return DEFAULT_SCORE

    def _respond(self, seen: SeenRequest) -> _Reply:
        """Decide the reply for a parsed request (runs in the handler thread, may sleep)."""
        # The cache is looked up when the request arrives and written when it is answered.
        plan = self.prompt_cache.plan(seen.body) if seen.protocol == "anthropic" else None
        reply = self._decide(seen)
        usage = reply.payload.get("usage") if reply.status == 200 else None
        if isinstance(usage, dict) and seen.protocol == "anthropic":
            read = plan.read_tokens if plan is not None else 0
            write = plan.write_tokens if plan is not None else 0
            usage["input_tokens"] = max(int(usage["input_tokens"]) - read - write, 0)
            usage["cache_read_input_tokens"] = read
            usage["cache_creation_input_tokens"] = write
            if plan is not None:
                self.prompt_cache.commit(plan)
        return reply

    def _decide(self, seen: SeenRequest) -> _Reply:
        self._sleep(self.latency_by_model.get(seen.model, self.latency))

        if seen.model in self.reject_temperature_models and seen.temperature is not None:
            return _error(
                seen.protocol,
                400,
                f"temperature is not supported for model {seen.model}; remove the temperature parameter",
                param="temperature",
            )
        if seen.model in self.reject_forced_tool_models and seen.forced:
            return _error(
                seen.protocol,
                400,
                f"tool_choice forcing a tool is not supported for model {seen.model}; use tool_choice auto",
                param="tool_choice",
            )

        outcome = self._next_outcome(seen)
        if isinstance(outcome, Fault) and outcome.kind == "slow":
            self._sleep(outcome.delay)
            outcome = None
        if outcome is None:
            outcome = self._default_outcome(seen)
        if isinstance(outcome, Fault) and outcome.kind == "slow":
            # A scorer may return slow too; sleep, then fall back to the plain default.
            self._sleep(outcome.delay)
            outcome = DEFAULT_SCORE if seen.has_tools else _default_text(seen)
        return self._render(seen, outcome)

    def _render(self, seen: SeenRequest, outcome: Outcome) -> _Reply:
        dimension = seen.dimension or "unspecified"
        tool_input: dict[str, Any] | None = None
        raw_arguments: str | None = None  # set only for a tool call whose arguments are not JSON
        text = ""
        if isinstance(outcome, Fault):
            if outcome.kind in ("rate_limit", "server_error", "overloaded", "reject"):
                headers: dict[str, str] = {}
                if outcome.retry_after is not None:
                    headers["retry-after"] = _format_seconds(outcome.retry_after)
                return _error(seen.protocol, outcome.status, outcome.message, headers=headers)
            if outcome.kind == "malformed_tool_input":
                tool_input = (
                    dict(outcome.payload)
                    if outcome.payload is not None
                    else {"dimension": dimension, "score": "five"}
                )
            elif outcome.kind == "out_of_range":
                score = outcome.score if outcome.score is not None else 7
                tool_input = _verdict(dimension, score)
            elif outcome.kind == "invalid_json":
                raw_arguments = outcome.text
            else:  # text_only
                text = outcome.text
        elif isinstance(outcome, bool):
            raise TypeError("a score must be an int, not a bool")
        elif isinstance(outcome, int):
            tool_input = _verdict(dimension, outcome)
        elif isinstance(outcome, dict):
            tool_input = outcome
        else:
            text = outcome

        call: _ToolCall | None = None
        if tool_input is not None:
            call = _ToolCall(tool_input, json.dumps(tool_input))
        elif raw_arguments is not None:
            call = _ToolCall(raw_arguments, raw_arguments)
        if call is not None and (not seen.has_tools or _tool_choice_is_none(seen)):
            # No tool may be called, so a scripted "tool call" can only come out as text.
            text, call = call.arguments, None

        reply_blob = call.arguments if call is not None else text
        input_tokens = len(seen.system + seen.prompt) // 4 + 10
        output_tokens = len(reply_blob) // 4 + 5
        call_id = uuid.uuid4().hex[:24]
        build = _anthropic_message if seen.protocol == "anthropic" else _openai_completion
        return _Reply(200, build(seen, call, text, call_id, input_tokens, output_tokens))


def _tool_choice_is_none(seen: SeenRequest) -> bool:
    choice = seen.tool_choice
    return choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def _verdict(dimension: str, score: int) -> dict[str, Any]:
    return {
        "dimension": dimension,
        "score": score,
        "rationale": f"The {dimension} of this answer merits a {score}: scored by the local test provider.",
    }


def _default_text(seen: SeenRequest) -> str:
    digest = hashlib.sha256(f"{seen.model}\n{seen.system}\n{seen.prompt}".encode()).hexdigest()[:12]
    head = " ".join(seen.prompt.split())[:80]
    return f"[{seen.model}] reply {digest} to: {head}"


def _error(
    protocol: ProtocolName,
    status: int,
    message: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> _Reply:
    fallback_type = "invalid_request_error" if status < 500 else "api_error"
    if protocol == "anthropic":
        error_type = _ANTHROPIC_ERROR_TYPES.get(status, fallback_type)
        payload: dict[str, Any] = {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": f"req_{uuid.uuid4().hex[:24]}",
        }
    else:
        error_type = _OPENAI_ERROR_TYPES.get(status, fallback_type.replace("api_error", "server_error"))
        payload = {"error": {"message": message, "type": error_type, "param": param, "code": error_type}}
    return _Reply(status, payload, dict(headers or {}))


def _anthropic_message(
    seen: SeenRequest,
    call: _ToolCall | None,
    text: str,
    call_id: str,
    input_tokens: int,
    output_tokens: int,
) -> dict[str, Any]:
    content: list[dict[str, Any]]
    if call is not None:
        tool_id = f"toolu_{call_id}"
        content = [{"type": "tool_use", "id": tool_id, "name": seen.tool_name, "input": call.input}]
        stop_reason = "tool_use"
    else:
        content = [{"type": "text", "text": text}]
        stop_reason = "end_turn"
    return {
        "id": f"msg_{call_id}",
        "type": "message",
        "role": "assistant",
        "model": seen.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def _openai_completion(
    seen: SeenRequest,
    call: _ToolCall | None,
    text: str,
    call_id: str,
    input_tokens: int,
    output_tokens: int,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if call is not None else text}
    if call is not None:
        message["tool_calls"] = [
            {
                "id": f"call_{call_id}",
                "type": "function",
                "function": {"name": seen.tool_name, "arguments": call.arguments},
            }
        ]
    return {
        "id": f"chatcmpl-{call_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": seen.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if call is not None else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }


# -- parsing -----------------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text in a message's content: a string, or a list of blocks with ``text`` fields."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif "content" in block:  # tool_result blocks nest their content
                    parts.append(_text_of(block["content"]))
        return "\n".join(part for part in parts if part)
    return ""


def _dimension_of(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    prop = properties.get("dimension") if isinstance(properties, dict) else None
    if not isinstance(prop, dict):
        return None
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and isinstance(enum[0], str):
        return enum[0]
    const = prop.get("const")
    return const if isinstance(const, str) else None


def _parse_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    tools = [tool for tool in body.get("tools") or [] if isinstance(tool, dict)]
    choice = body.get("tool_choice")
    forced_name: str | None = None
    forced = False
    if isinstance(choice, dict) and choice.get("type") == "tool":
        forced, forced_name = True, str(choice.get("name"))
    elif isinstance(choice, dict) and choice.get("type") == "any":
        forced = True
    tool = _pick_tool(tools, forced_name, lambda t: t.get("name"))
    system = body.get("system")
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return {
        "tool_name": tool.get("name") if tool else forced_name,
        "dimension": _dimension_of(tool.get("input_schema")) if tool else None,
        "forced": forced,
        "has_tools": bool(tools),
        "system": _text_of(system) if system is not None else "",
        "prompt": "\n".join(_text_of(m.get("content")) for m in messages if m.get("role") == "user"),
        "messages": messages,
    }


def _parse_openai(body: dict[str, Any]) -> dict[str, Any]:
    tools = [
        tool["function"]
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
    ]
    choice = body.get("tool_choice")
    forced_name: str | None = None
    forced = False
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        forced, forced_name = True, str(choice["function"].get("name"))
    elif choice == "required":
        forced = True
    tool = _pick_tool(tools, forced_name, lambda t: t.get("name"))
    all_messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return {
        "tool_name": tool.get("name") if tool else forced_name,
        "dimension": _dimension_of(tool.get("parameters")) if tool else None,
        "forced": forced,
        "has_tools": bool(tools),
        "system": "\n".join(
            _text_of(m.get("content")) for m in all_messages if m.get("role") in ("system", "developer")
        ),
        "prompt": "\n".join(_text_of(m.get("content")) for m in all_messages if m.get("role") == "user"),
        "messages": all_messages,
    }


def _pick_tool(
    tools: list[dict[str, Any]], name: str | None, name_of: Callable[[dict[str, Any]], Any]
) -> dict[str, Any] | None:
    if name is not None:
        for tool in tools:
            if name_of(tool) == name:
                return tool
    return tools[0] if tools else None


# -- HTTP plumbing -----------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    provider: ProviderServer

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # Track live connections: a keep-alive connection outlives serve_forever, and stop() must be
        # able to cut it, or a client's pooled connection would still be served after stop().
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)

    def close_connections(self) -> None:
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is normal here; don't spray tracebacks on stderr.
        return


_ROUTES: dict[str, ProtocolName] = {
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
}


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes on a kept-alive connection: without TCP_NODELAY,
    # Nagle's algorithm and the client's delayed ACK add ~40 ms to every response.
    disable_nagle_algorithm = True
    server_version = "aimeasure-provider/1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # no access log on stderr

    def do_GET(self) -> None:
        self._not_found()

    def do_POST(self) -> None:
        provider = self.server.provider
        started = time.monotonic()
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        protocol = _ROUTES.get(path)
        if protocol is None:
            self._drain()
            self._not_found()
            return
        provider._enter()
        left = False
        try:
            try:
                body = self._read_json(protocol)
                seen = self._seen(protocol, path, body, started)
            except _Replied:
                return
            provider._record(seen)
            try:
                reply = provider._respond(seen)
            except _Aborted:
                self.close_connection = True
                seen.finished = time.monotonic()
                return
            except Exception as exc:  # a broken scorer must not hang the client
                reply = _error(protocol, 500, f"test provider failed: {type(exc).__name__}: {exc}")
            seen.status = reply.status
            # Out of flight before the client can read the reply: a client that starts its next call
            # the moment this one returns must not find it still counted.
            provider._leave()
            left = True
            self._send(reply)
            seen.finished = time.monotonic()
        finally:
            if not left:
                provider._leave()

    # -- helpers --

    def _seen(self, protocol: ProtocolName, path: str, body: dict[str, Any], started: float) -> SeenRequest:
        parsed = _parse_anthropic(body) if protocol == "anthropic" else _parse_openai(body)
        temperature = body.get("temperature")
        return SeenRequest(
            protocol=protocol,
            model=str(body.get("model", "")),
            path=path,
            dimension=parsed["dimension"],
            tool_name=parsed["tool_name"],
            tool_choice=body.get("tool_choice"),
            forced=parsed["forced"],
            temperature=float(temperature) if isinstance(temperature, int | float) else None,
            has_tools=parsed["has_tools"],
            system=parsed["system"],
            prompt=parsed["prompt"],
            messages=parsed["messages"],
            body=body,
            headers={key.lower(): value for key, value in self.headers.items()},
            started=started,
        )

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            total = 0
            while True:
                size_line = self.rfile.readline(1024).split(b";", 1)[0].strip()
                size = int(size_line or b"0", 16)
                if size == 0:
                    self.rfile.readline(1024)  # the blank line after the last chunk
                    return b"".join(chunks)
                total += size
                if total > _MAX_BODY_BYTES:
                    raise ValueError("request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY_BYTES:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _drain(self) -> None:
        try:
            self._read_body()
        except (ValueError, OSError):
            self.close_connection = True

    def _read_json(self, protocol: ProtocolName) -> dict[str, Any]:
        try:
            raw = self._read_body()
            body = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            self.close_connection = True
            self._send(_error(protocol, 400, f"could not parse the request body as JSON: {exc}"))
            raise _Replied from exc
        if not isinstance(body, dict):
            self._send(_error(protocol, 400, "the request body must be a JSON object"))
            raise _Replied
        missing = [key for key in ("model", "messages") if key not in body]
        if missing:
            self._send(_error(protocol, 400, f"{missing[0]}: Field required", param=missing[0]))
            raise _Replied
        if not isinstance(body["messages"], list):
            self._send(_error(protocol, 400, "messages: Input should be a valid list", param="messages"))
            raise _Replied
        return body

    def _not_found(self) -> None:
        protocol: ProtocolName = "openai" if "chat" in self.path else "anthropic"
        self._send(_error(protocol, 404, f"Not found: {self.command} {self.path}"))

    def _send(self, reply: _Reply) -> None:
        data = json.dumps(reply.payload).encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            # The client gave up (timeout) and closed the socket; nothing left to tell it.
            self.close_connection = True
