"""The local provider's streamed replies (``"stream": true``), over raw HTTP (http.client): the 200
and headers at once, the events after the latency, in each protocol's shape; refusals and scripted
errors before the stream; an error event mid-stream; a stream cut short."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_aimeasure.testing import Fault, ProviderServer
from tests.integration.test_server import anthropic_body, openai_body, post_anthropic, post_openai

Event = tuple[str | None, Any]


def open_stream(server: ProviderServer, path: str, body: dict[str, Any]) -> http.client.HTTPResponse:
    """POST ``body`` and return once the status and headers are read (the body is left unread)."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    connection.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    return connection.getresponse()


def events_of(raw: bytes) -> list[Event]:
    """The server-sent events of a stream's body: (event name or None, decoded data)."""
    events: list[Event] = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        text = "\n".join(data)
        events.append((name, text if text == "[DONE]" else json.loads(text)))
    return events


def streamed(server: ProviderServer, path: str, body: dict[str, Any]) -> tuple[int, str, list[Event]]:
    response = open_stream(server, path, body)
    with response:
        raw = response.read()
    if response.status != 200:
        return response.status, response.getheader("content-type") or "", [(None, json.loads(raw))]
    return response.status, response.getheader("content-type") or "", events_of(raw)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


def test_a_streamed_reply_s_status_arrives_before_its_latency() -> None:
    # The answer waits a minute; the 200 and the stream's headers are read while the request is
    # still being answered (stop() then cuts the wait short).
    with ProviderServer(latency=60.0) as server:
        for path, body in (("/v1/messages", anthropic_body()), ("/v1/chat/completions", openai_body())):
            response = open_stream(server, path, {**body, "stream": True})
            assert response.status == 200
            assert response.getheader("content-type", "").startswith("text/event-stream")
            (seen,) = server.requests[-1:]
            assert seen.streamed and seen.accepted > 0
            assert seen.finished == 0.0 and server.in_flight >= 1
            response.close()


def test_anthropic_stream_reads_back_as_the_reply_it_streams(server: ProviderServer) -> None:
    server.script(5, 5)
    expected = post_anthropic(server, anthropic_body())[2]
    status, kind, events = streamed(server, "/v1/messages", {**anthropic_body(), "stream": True})
    assert (status, kind.split(";")[0]) == (200, "text/event-stream")
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[1:3] == ["content_block_start", "ping"] and "content_block_stop" in names
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    block = events[1][1]["content_block"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "record_verdict", {})
    pieces = [data["delta"]["partial_json"] for name, data in events if name == "content_block_delta"]
    assert len(pieces) > 1
    final = events[-2][1]
    assert json.loads("".join(pieces)) == expected["content"][0]["input"]
    assert final["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert {**start["usage"], **final["usage"]} == expected["usage"]
    assert start["usage"]["output_tokens"] == 1  # as the API's message_start: the count comes at the end


def test_anthropic_text_stream(server: ProviderServer) -> None:
    status, _, events = streamed(server, "/v1/messages", {**anthropic_body(tools=False), "stream": True})
    assert status == 200
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert text == post_anthropic(server, anthropic_body(tools=False))[2]["content"][0]["text"]


@pytest.mark.parametrize("include_usage", [True, False])
def test_openai_stream_reads_back_as_the_reply_it_streams(
    server: ProviderServer, include_usage: bool
) -> None:
    server.script(3, 3)
    plain = post_openai(server, openai_body())[2]
    body = {**openai_body(), "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    status, _, events = streamed(server, "/v1/chat/completions", body)
    assert status == 200
    assert all(name is None for name, _ in events) and events[-1][1] == "[DONE]"
    chunks = [data for _, data in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert deltas[0] == {"role": "assistant", "content": None}
    opening = deltas[1]["tool_calls"][0]
    assert (opening["index"], opening["type"], opening["function"]["name"]) == (
        0,
        "function",
        "record_verdict",
    )
    arguments = "".join(
        call["function"]["arguments"] for delta in deltas for call in delta.get("tool_calls", [])
    )
    expected = plain["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == json.loads(expected)
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]
        assert all(chunk["usage"] is None for chunk in chunks[:-1])
    else:
        assert all("usage" not in chunk for chunk in chunks)


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_refusals_and_scripted_errors_come_before_the_stream_at_once(protocol: str) -> None:
    # A latency of a minute: a refusal that waited for it would not come back before the timeout.
    with ProviderServer(latency=60.0) as server:
        server.reject_temperature_models.add("claude-test" if protocol == "anthropic" else "gpt-test")
        server.script(Fault.rate_limit(retry_after=2), Fault.reject(400, "bad"), Fault.overloaded())
        path, body = (
            ("/v1/messages", anthropic_body())
            if protocol == "anthropic"
            else ("/v1/chat/completions", openai_body())
        )
        statuses = []
        for sent in ({**body, "stream": True, "temperature": 0.0}, *[{**body, "stream": True}] * 3):
            response = open_stream(server, path, sent)
            with response:
                payload = json.loads(response.read())
                statuses.append((response.status, response.getheader("retry-after"), "error" in payload))
        assert statuses == [(400, None, True), (429, "2", True), (400, None, True), (529, None, True)]
        assert all(seen.accepted == 0.0 and seen.streamed for seen in server.requests)


@pytest.mark.parametrize("status", [529, 500])
def test_an_error_event_mid_stream(server: ProviderServer, status: int) -> None:
    server.script(Fault.stream_error(status, "Overloaded"))
    code, _, events = streamed(server, "/v1/messages", {**anthropic_body(), "stream": True})
    kind = "overloaded_error" if status == 529 else "api_error"
    assert code == 200
    assert [name for name, _ in events] == ["message_start", "error"]
    assert events[1][1] == {"type": "error", "error": {"type": kind, "message": "Overloaded"}}

    server.script(Fault.stream_error(status, "Overloaded"))
    code, _, events = streamed(server, "/v1/chat/completions", {**openai_body(), "stream": True})
    assert code == 200 and len(events) == 2
    assert events[1][1]["error"]["message"] == "Overloaded"
    assert events[1][1]["error"]["type"] == ("overloaded_error" if status == 529 else "server_error")


def test_stream_faults_on_a_request_that_is_not_streamed(server: ProviderServer) -> None:
    server.script(Fault.stream_error(), Fault.stream_cut())
    status, _, payload = post_anthropic(server, anthropic_body())
    assert (status, payload["error"]["type"]) == (529, "overloaded_error")
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        post_anthropic(server, anthropic_body())


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/chat/completions"])
def test_a_cut_stream_ends_unfinished(server: ProviderServer, path: str) -> None:
    server.script(Fault.stream_cut())
    body = anthropic_body() if "messages" in path else openai_body()
    response = open_stream(server, path, {**body, "stream": True})
    assert response.status == 200
    with response, pytest.raises((ConnectionError, http.client.HTTPException)):
        response.read()
    (seen,) = server.requests
    assert seen.accepted > 0 and seen.status == 200


def test_a_finished_stream_leaves_its_connection_open_for_the_next_request(server: ProviderServer) -> None:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    for _ in range(2):
        connection.request(
            "POST",
            "/v1/messages",
            json.dumps({**anthropic_body(), "stream": True}),
            {"content-type": "application/json"},
        )
        with connection.getresponse() as response:
            assert response.status == 200 and events_of(response.read())[-1][0] == "message_stop"
    connection.close()
    assert len(server.requests) == 2


def test_stream_gap_spaces_a_stream_s_events(server: ProviderServer) -> None:
    # The last event cannot come before the gaps between all of them passed (a lower bound: the
    # reader may be late, never early).
    server.stream_gap = 0.05
    sent = time.monotonic()
    response = open_stream(server, "/v1/messages", {**anthropic_body(), "stream": True})
    with response:
        events = events_of(response.read())
    done = time.monotonic()
    assert len(events) > 5 and events[-1][0] == "message_stop"
    assert done - sent >= server.stream_gap * (len(events) - 1)
