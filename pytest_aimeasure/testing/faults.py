"""The fault scripting API of the local provider: what one request may be answered with.

An :data:`Outcome` is a score, a raw tool input, a text-only reply or a :class:`Fault` (the failures
real providers produce: rate limits, overload, timeouts, connection resets, malformed tool calls,
rejections);
:func:`render_outcome` turns one into the reply for a request, in that request's protocol.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

from pytest_aimeasure.testing.protocols import (
    Reply,
    SeenRequest,
    ToolCall,
    anthropic_message,
    error_reply,
    format_seconds,
    openai_completion,
    tool_choice_is_none,
    verdict,
)

__all__ = ["DEFAULT_SCORE", "Fault", "FaultKind", "Outcome", "render_outcome"]

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
    "reset",
    "bad_usage",
    "stream_error",
    "stream_cut",
]

DEFAULT_SCORE = 4


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
            "stream_error": ("status", "message"),
            "bad_usage": ("payload",),
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
    def reset(cls) -> Fault:
        """Read the request, then drop the connection with a TCP reset before any reply: a connection
        reset mid-response (the provider was there and took the request)."""
        return cls("reset")

    @classmethod
    def stream_error(cls, status: int = 529, message: str = "Overloaded") -> Fault:
        """On a streamed request (``"stream": true``): the 200 and the stream's first event, then an
        error event of that status's type (Anthropic's ``event: error`` with ``overloaded_error`` for
        529; a Chat Completions ``data: {"error": ...}`` chunk) and the stream's end, as a provider
        that fails after it accepted the request. On a request that is not streamed: the error
        response of that status, after the latency."""
        return cls("stream_error", status=status, message=message)

    @classmethod
    def stream_cut(cls) -> Fault:
        """On a streamed request: the 200 and half of the stream's events, then a connection reset
        (the stream ends unfinished). On a request that is not streamed: :meth:`reset`."""
        return cls("stream_cut")

    @classmethod
    def bad_usage(cls, usage: Mapping[str, Any], score: int = DEFAULT_SCORE) -> Fault:
        """A valid verdict whose ``usage`` fields are replaced by ``usage`` verbatim (the protocol's own
        names: ``input_tokens`` or ``prompt_tokens``...): negative, "NaN" or absurd token counts."""
        return cls("bad_usage", payload=dict(usage), score=score)

    @classmethod
    def reject(cls, status: int = 400, message: str = "Invalid request.") -> Fault:
        """An error response with that status and message (``invalid_request_error`` for a 400)."""
        return cls("reject", status=status, message=message)


Outcome: TypeAlias = int | Fault | dict[str, Any] | str
"""What one request yields: a score, a fault, a raw tool input, or a text-only reply."""


def render_outcome(seen: SeenRequest, outcome: Outcome) -> Reply:
    """The reply one outcome makes for one request, in the request's protocol."""
    dimension = seen.dimension or "unspecified"
    tool_input: dict[str, Any] | None = None
    raw_arguments: str | None = None  # set only for a tool call whose arguments are not JSON
    text = ""
    if isinstance(outcome, Fault):
        if outcome.kind in ("rate_limit", "server_error", "overloaded", "reject"):
            headers: dict[str, str] = {}
            if outcome.retry_after is not None:
                headers["retry-after"] = format_seconds(outcome.retry_after)
            return error_reply(seen.protocol, outcome.status, outcome.message, headers=headers)
        if outcome.kind == "stream_error":
            failure = error_reply(seen.protocol, outcome.status, outcome.message)
            if not seen.streamed:
                return failure
            return replace(render_outcome(seen, DEFAULT_SCORE), interrupt=failure)
        if outcome.kind == "stream_cut":
            return replace(render_outcome(seen, DEFAULT_SCORE), cut=True)
        if outcome.kind == "malformed_tool_input":
            tool_input = (
                dict(outcome.payload)
                if outcome.payload is not None
                else {"dimension": dimension, "score": "five"}
            )
        elif outcome.kind == "out_of_range":
            score = outcome.score if outcome.score is not None else 7
            tool_input = verdict(dimension, score)
        elif outcome.kind == "bad_usage":
            tool_input = verdict(dimension, outcome.score if outcome.score is not None else DEFAULT_SCORE)
        elif outcome.kind == "invalid_json":
            raw_arguments = outcome.text
        else:  # text_only
            text = outcome.text
    elif isinstance(outcome, bool):
        raise TypeError("a score must be an int, not a bool")
    elif isinstance(outcome, int):
        tool_input = verdict(dimension, outcome)
    elif isinstance(outcome, dict):
        tool_input = outcome
    else:
        text = outcome

    call: ToolCall | None = None
    if tool_input is not None:
        call = ToolCall(tool_input, json.dumps(tool_input))
    elif raw_arguments is not None:
        call = ToolCall(raw_arguments, raw_arguments)
    if call is not None and (not seen.has_tools or tool_choice_is_none(seen)):
        # No tool may be called, so a scripted "tool call" can only come out as text.
        text, call = call.arguments, None

    reply_blob = call.arguments if call is not None else text
    input_tokens = len(seen.system + seen.prompt) // 4 + 10
    output_tokens = len(reply_blob) // 4 + 5
    call_id = uuid.uuid4().hex[:24]
    build = anthropic_message if seen.protocol == "anthropic" else openai_completion
    payload = build(seen, call, text, call_id, input_tokens, output_tokens)
    if isinstance(outcome, Fault) and outcome.kind == "bad_usage" and outcome.payload is not None:
        payload["usage"].update(outcome.payload)
    return Reply(200, payload)
