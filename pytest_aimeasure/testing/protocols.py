"""The two wire protocols the local provider speaks: Anthropic Messages and OpenAI Chat Completions.

For each: reading a request body into a :class:`SeenRequest` (which tool is offered or forced, the
dimension its schema names, system and user text), and rendering a reply (a tool call, text, or an
error body shaped as that provider shapes its errors). Nothing here knows about sockets or scripting.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ProtocolName",
    "Reply",
    "SeenRequest",
    "ToolCall",
    "anthropic_message",
    "anthropic_stream",
    "default_text",
    "error_reply",
    "format_seconds",
    "openai_completion",
    "openai_stream",
    "parse_request",
    "stream_error_event",
    "tool_choice_is_none",
    "verdict",
]

ProtocolName = Literal["anthropic", "openai"]

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
    streamed: bool = False
    """The request asked for a stream (``"stream": true``)."""
    accepted: float = 0.0
    """When the stream's 200 and headers went out (``time.monotonic()``); 0.0 when none did (not
    streamed, or refused before the stream)."""
    connection: int = 0
    """The connection it came on, by the client's port: the requests of one kept-alive connection
    share it (0: not known)."""


@dataclass(frozen=True)
class ToolCall:
    input: Any  # Anthropic's tool_use input: the verdict dict (or a bare string for invalid JSON)
    arguments: str  # OpenAI's function.arguments: the same, as JSON text


@dataclass
class Reply:
    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    interrupt: Reply | None = None
    """For a streamed request: the error that ends the stream after its first event (an SSE error
    event, e.g. Anthropic's ``overloaded_error``) instead of the rest of ``payload``."""
    cut: bool = False
    """For a streamed request: the connection is reset halfway through the stream's events."""
    gap: float = 0.0
    """For a streamed request: seconds between the stream's events (a provider streams tokens as it
    generates them)."""


def tool_choice_is_none(seen: SeenRequest) -> bool:
    choice = seen.tool_choice
    return choice == "none" or (isinstance(choice, dict) and choice.get("type") == "none")


def format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"


def verdict(dimension: str, score: int) -> dict[str, Any]:
    return {
        "dimension": dimension,
        "score": score,
        "rationale": f"The {dimension} of this answer merits a {score}: scored by the local test provider.",
    }


def default_text(seen: SeenRequest) -> str:
    digest = hashlib.sha256(f"{seen.model}\n{seen.system}\n{seen.prompt}".encode()).hexdigest()[:12]
    head = " ".join(seen.prompt.split())[:80]
    return f"[{seen.model}] reply {digest} to: {head}"


def error_reply(
    protocol: ProtocolName,
    status: int,
    message: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
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
    return Reply(status, payload, dict(headers or {}))


def anthropic_message(
    seen: SeenRequest,
    call: ToolCall | None,
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


def openai_completion(
    seen: SeenRequest,
    call: ToolCall | None,
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


def parse_anthropic(body: dict[str, Any]) -> dict[str, Any]:
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


def parse_openai(body: dict[str, Any]) -> dict[str, Any]:
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


def parse_request(
    protocol: ProtocolName, path: str, body: dict[str, Any], headers: dict[str, str], started: float
) -> SeenRequest:
    """A request body, already checked to be a JSON object with ``model`` and ``messages``."""
    parsed = parse_anthropic(body) if protocol == "anthropic" else parse_openai(body)
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
        headers=headers,
        started=started,
        streamed=body.get("stream") is True,
    )


# -- streams -----------------------------------------------------------------------------------------

STREAM_PIECE_CHARS = 16
"""How many characters of text or of a tool call's JSON each streamed delta carries."""


def _pieces(text: str) -> list[str]:
    return [text[at : at + STREAM_PIECE_CHARS] for at in range(0, len(text), STREAM_PIECE_CHARS)]


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event is not None else ""
    body = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {body}\n\n".encode()


def anthropic_stream(message: dict[str, Any]) -> list[bytes]:
    """A Messages API reply as the server-sent events of ``"stream": true``: ``message_start`` (the
    message without content, its usage but for ``output_tokens``), per content block a
    ``content_block_start``, its deltas (``text_delta`` or ``input_json_delta`` pieces of the tool
    input's JSON) and ``content_block_stop``, a ``ping``, then ``message_delta`` (stop reason, output
    tokens) and ``message_stop``. Read back together they make ``message`` again."""
    usage = dict(message.get("usage") or {})
    start_usage = {**usage, "output_tokens": 1} if "output_tokens" in usage else usage
    head = {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}
    events = [_sse("message_start", {"type": "message_start", "message": head})]
    for index, block in enumerate(message.get("content") or []):
        if block.get("type") == "tool_use":
            empty = {**block, "input": {}}
            text = json.dumps(block.get("input"))
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in _pieces(text)]
        else:
            empty = {**block, "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(str(block.get("text", "")))]
        opening = {"type": "content_block_start", "index": index, "content_block": empty}
        events.append(_sse("content_block_start", opening))
        if index == 0:
            events.append(_sse("ping", {"type": "ping"}))
        events.extend(
            _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    end_usage = {"output_tokens": usage["output_tokens"]} if "output_tokens" in usage else {}
    delta = {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")}
    events.append(_sse("message_delta", {"type": "message_delta", "delta": delta, "usage": end_usage}))
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return events


def openai_stream(completion: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """A Chat Completions reply as the ``data:`` chunks of ``"stream": true``: the role (and a tool
    call's id and name), the text or the arguments in pieces, the finish reason, with
    ``stream_options.include_usage`` a last chunk with no choices and the usage (the others then
    carry ``"usage": null``), then ``[DONE]``. Read back together they make ``completion`` again."""
    base: dict[str, Any] = {key: completion[key] for key in ("id", "created", "model") if key in completion}
    base["object"] = "chat.completion.chunk"
    (choice,) = completion.get("choices") or [{"message": {}, "finish_reason": "stop"}]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data: dict[str, Any] = {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            data["usage"] = None
        return _sse(None, data)

    calls = message.get("tool_calls") or []
    text = message.get("content")
    chunks = [chunk({"role": "assistant", "content": None if calls else ""})]
    chunks.extend(chunk({"content": piece}) for piece in _pieces(text or ""))
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        opening = {**call, "index": index, "function": {"name": function.get("name"), "arguments": ""}}
        chunks.append(chunk({"tool_calls": [opening]}))
        chunks.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(str(function.get("arguments", "")))
        )
    chunks.append(chunk({}, choice.get("finish_reason")))
    if include_usage:
        chunks.append(_sse(None, {**base, "choices": [], "usage": completion.get("usage")}))
    chunks.append(_sse(None, "[DONE]"))
    return chunks


def stream_error_event(protocol: ProtocolName, error: Reply) -> bytes:
    """An error reply as the event that ends a stream: Anthropic's ``event: error``, or a Chat
    Completions ``data:`` chunk holding ``{"error": ...}``."""
    if protocol == "anthropic":
        return _sse("error", {"type": "error", "error": error.payload.get("error")})
    return _sse(None, {"error": error.payload.get("error")})
