"""The two wire protocols the local provider speaks: Anthropic Messages and OpenAI Chat Completions.

For each: reading a request body into a :class:`SeenRequest` (which tool is offered or forced, the
dimension its schema names, system and user text), and rendering a reply (a tool call, text, or an
error body shaped as that provider shapes its errors). Nothing here knows about sockets or scripting.
"""

from __future__ import annotations

import hashlib
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
    "default_text",
    "error_reply",
    "format_seconds",
    "openai_completion",
    "parse_request",
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


@dataclass(frozen=True)
class ToolCall:
    input: Any  # Anthropic's tool_use input: the verdict dict (or a bare string for invalid JSON)
    arguments: str  # OpenAI's function.arguments: the same, as JSON text


@dataclass
class Reply:
    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


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
    )
