"""Streamed replies (``"stream": true``) of the two native APIs, read back into the reply the same
call gives unstreamed: the Messages API's server-sent events into its message, Chat Completions'
chunks into its completion. The judge streams one call a session, the model's first, for its status:
a provider checks a request before it generates, and a streamed reply's 200 comes with its first
bytes, so the calls that wait to learn what the model refuses go one round trip later instead of one
generation later (:func:`~pytest_aimeasure.judge.backends.base.call_judge`).

An error a provider sends inside a stream (Anthropic documents an ``event: error`` after the 200,
e.g. ``overloaded_error`` where an unstreamed call would get a 529; a Chat Completions stream may send
a ``data: {"error": ...}`` chunk) is raised as :class:`StreamFailed` with the status that error type
has unstreamed. A stream that ends before its reply is complete raises :class:`StreamCut`.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

__all__ = ["AnthropicStream", "ChatStream", "StreamCut", "StreamFailed", "StreamReader"]


class StreamFailed(Exception):
    """An error event inside a stream: the status its type has unstreamed, its message and type."""

    def __init__(self, status: int, message: str, kind: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


class StreamCut(Exception):
    """The stream ended before its reply was complete."""


STATUS_OF_ERROR: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status an error type stands for unstreamed (both APIs' names); another type is a 500."""


def _failure(error: Any) -> StreamFailed:
    if not isinstance(error, dict):
        return StreamFailed(500, str(error or "an error event without a message"), None)
    kind = error.get("type") or error.get("code")
    kind = str(kind) if kind else None
    message = str(error.get("message") or kind or "an error event without a message")
    return StreamFailed(STATUS_OF_ERROR.get(kind or "", 500), message, kind)


class StreamReader(Protocol):
    """Reads one streamed reply: its body's bytes as they come, then the reply."""

    def feed(self, data: bytes) -> None:
        """The next bytes of the body; raises :class:`StreamFailed` at an error event."""
        ...

    def result(self) -> dict[str, Any]:
        """The reply as an unstreamed call gets it; :class:`StreamCut` when the stream was not over."""
        ...


class _Events:
    """Server-sent events out of a body's bytes (``event:`` and ``data:`` fields, events ended by a
    blank line; comments and other fields skipped; CR LF or LF line ends)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._name: str | None = None
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[tuple[str | None, str]]:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        events: list[tuple[str | None, str]] = []
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8")
            if not line:
                if self._data:
                    events.append((self._name, "\n".join(self._data)))
                self._name, self._data = None, []
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                self._name = value
            elif field == "data":
                self._data.append(value)
        return events


class AnthropicStream:
    """A Messages API stream into its message: ``message_start``'s message, each content block from
    its ``content_block_start`` and deltas (``text_delta`` text appended, ``input_json_delta`` pieces
    joined and decoded into the tool call's ``input``), ``message_delta``'s stop reason and usage
    (over ``message_start``'s), to ``message_stop``."""

    def __init__(self) -> None:
        self._events = _Events()
        self._message: dict[str, Any] | None = None
        self._json: dict[int, list[str]] = {}
        self._stopped = False

    def feed(self, data: bytes) -> None:
        for name, text in self._events.feed(data):
            self._event(name, json.loads(text))

    def _event(self, name: str | None, data: Any) -> None:
        kind = data.get("type", name) if isinstance(data, dict) else name
        if kind == "error":
            raise _failure(data.get("error") if isinstance(data, dict) else data)
        if not isinstance(data, dict):
            return
        if kind == "message_start":
            self._message = dict(data.get("message") or {})
            self._message["content"] = list(self._message.get("content") or [])
            self._message["usage"] = dict(self._message.get("usage") or {})
            return
        message = self._message
        if message is None:
            return  # nothing before message_start carries the reply (a ping)
        content: list[dict[str, Any]] = message["content"]
        index = data.get("index")
        if kind == "content_block_start" and isinstance(index, int):
            while len(content) <= index:
                content.append({})
            content[index] = dict(data.get("content_block") or {})
            if content[index].get("type") == "tool_use":
                self._json[index] = []
        elif kind == "content_block_delta" and isinstance(index, int) and index < len(content):
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta":
                content[index]["text"] = content[index].get("text", "") + str(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta" and index in self._json:
                self._json[index].append(str(delta.get("partial_json", "")))
        elif kind == "content_block_stop" and isinstance(index, int) and index in self._json:
            content[index]["input"] = _decoded(self._json.pop(index))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            for field in ("stop_reason", "stop_sequence"):
                if field in delta:
                    message[field] = delta[field]
            if isinstance(data.get("usage"), dict):
                message["usage"].update(data["usage"])
        elif kind == "message_stop":
            self._stopped = True

    def result(self) -> dict[str, Any]:
        if self._message is None or not self._stopped:
            raise StreamCut("the Messages API stream ended before message_stop")
        return self._message


def _decoded(pieces: list[str]) -> Any:
    """A tool call's input from its JSON pieces: ``{}`` for none (a tool without arguments), the text
    itself when it is not JSON (shown to the user as the malformed verdict it is)."""
    text = "".join(pieces)
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


class ChatStream:
    """A Chat Completions stream into its completion: the first choice's deltas (role, content text
    appended, each tool call's id, name and argument pieces by its ``index``), its finish reason, and
    the usage chunk (``stream_options.include_usage``), to ``[DONE]``."""

    def __init__(self) -> None:
        self._events = _Events()
        self._head: dict[str, Any] = {}
        self._role = "assistant"
        self._text: list[str] | None = None
        self._calls: dict[int, dict[str, Any]] = {}
        self._arguments: dict[int, list[str]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._done = False

    def feed(self, data: bytes) -> None:
        for _, text in self._events.feed(data):
            if text.strip() == "[DONE]":
                self._done = True
                continue
            self._chunk(json.loads(text))

    def _chunk(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            raise _failure(chunk["error"])
        for field in ("id", "created", "model", "system_fingerprint"):
            if chunk.get(field) is not None:
                self._head.setdefault(field, chunk[field])
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # the judge asks for one choice
            delta = choice.get("delta") or {}
            if delta.get("role"):
                self._role = str(delta["role"])
            if delta.get("content") is not None:
                self._text = [*(self._text or []), str(delta["content"])]
            for call in delta.get("tool_calls") or []:
                self._tool_call(call)
            if choice.get("finish_reason") is not None:
                self._finish = str(choice["finish_reason"])

    def _tool_call(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call.get("index", len(self._calls))
        known = self._calls.setdefault(index, {"function": {}})
        self._arguments.setdefault(index, [])
        for field in ("id", "type"):
            if call.get(field) is not None:
                known[field] = call[field]
        function = call.get("function") or {}
        if function.get("name"):
            known["function"]["name"] = function["name"]
        if function.get("arguments"):
            self._arguments[index].append(str(function["arguments"]))

    def result(self) -> dict[str, Any]:
        # Some compatible servers end without [DONE]: a finish reason says the reply is whole.
        if not self._done and self._finish is None:
            raise StreamCut("the Chat Completions stream ended before its finish reason")
        text = "".join(self._text) if self._text is not None else None
        message: dict[str, Any] = {"role": self._role, "content": text}
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id"),
                    "type": call.get("type", "function"),
                    "function": {**call["function"], "arguments": "".join(self._arguments[index])},
                }
                for index, call in sorted(self._calls.items())
            ]
        completion: dict[str, Any] = {
            **self._head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None:
            completion["usage"] = self._usage
        return completion
