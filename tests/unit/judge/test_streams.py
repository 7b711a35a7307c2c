"""Streamed replies read back into the unstreamed reply (judge/backends/streams.py), fed the local
provider's events in pieces of every size: an event, a line or a UTF-8 character cut anywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_aimeasure.judge.backends.streams import AnthropicStream, ChatStream, StreamCut, StreamFailed
from pytest_aimeasure.testing.protocols import anthropic_stream, openai_stream

TOOL_INPUT = {"dimension": "tone", "score": 4, "rationale": "fine: é 漢字 \u2028 " * 5}

MESSAGE: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [
        {"type": "text", "text": "Let me record it. é"},
        {"type": "tool_use", "id": "toolu_1", "name": "record_verdict", "input": TOOL_INPUT},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 20,
        "output_tokens": 31,
        "cache_read_input_tokens": 7,
        "cache_creation_input_tokens": 0,
    },
}

COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "created": 1700000000,
    "model": "gpt-test",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "record_verdict", "arguments": json.dumps(TOOL_INPUT)},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 31, "total_tokens": 51},
}


def fed(reader: AnthropicStream | ChatStream, events: list[bytes], size: int) -> dict[str, Any]:
    body = b"".join(events).replace(b"\n", b"\r\n") if size == 5 else b"".join(events)
    for at in range(0, len(body), size):
        reader.feed(body[at : at + size])
    return reader.result()


@pytest.mark.parametrize("size", [1, 2, 5, 7, 64, 100_000])
def test_an_anthropic_stream_reads_back_as_its_message(size: int) -> None:
    assert fed(AnthropicStream(), anthropic_stream(MESSAGE), size) == MESSAGE


@pytest.mark.parametrize("size", [1, 3, 5, 64, 100_000])
def test_a_chat_stream_reads_back_as_its_completion(size: int) -> None:
    assert fed(ChatStream(), openai_stream(COMPLETION, include_usage=True), size) == COMPLETION
    text = {
        **COMPLETION,
        "choices": [{**COMPLETION["choices"][0], "message": {"role": "assistant", "content": "hi é"}}],
    }
    text["choices"][0]["finish_reason"] = "stop"
    without_usage = {key: value for key, value in text.items() if key != "usage"}
    assert fed(ChatStream(), openai_stream(text, include_usage=False), size) == without_usage


def test_error_events_raise_with_the_status_their_type_has_unstreamed() -> None:
    reader = AnthropicStream()
    reader.feed(anthropic_stream(MESSAGE)[0])
    with pytest.raises(StreamFailed) as failed:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        reader.feed(b"event: error\ndata: %s\n\n" % json.dumps(error).encode())
    assert (failed.value.status, failed.value.kind, failed.value.message) == (
        529,
        "overloaded_error",
        "Overloaded",
    )
    with pytest.raises(StreamFailed) as failed:
        ChatStream().feed(b'data: {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}\n\n')
    assert failed.value.status == 429
    with pytest.raises(StreamFailed) as failed:
        ChatStream().feed(b'data: {"error": {"message": "what", "type": "new_kind"}}\n\n')
    assert failed.value.status == 500


def test_a_stream_that_ends_early_is_cut() -> None:
    events = anthropic_stream(MESSAGE)
    reader = AnthropicStream()
    for event in events[:-1]:
        reader.feed(event)
    with pytest.raises(StreamCut):
        reader.result()
    chunks = openai_stream(COMPLETION, include_usage=True)
    chat = ChatStream()
    for chunk in chunks[:3]:
        chat.feed(chunk)
    with pytest.raises(StreamCut):
        chat.result()
    # A finish reason without [DONE] (some compatible servers): the reply is whole.
    chat = ChatStream()
    for chunk in chunks[:-1]:
        chat.feed(chunk)
    assert chat.result() == COMPLETION
