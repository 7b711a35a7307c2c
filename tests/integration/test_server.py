"""The local provider server, over raw HTTP (urllib): shapes, scripting, faults, concurrency, lifecycle."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest

TOOL = "record_verdict"


def schema(dimension: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "dimension": {"type": "string", "enum": [dimension]},
            "rationale": {"type": "string"},
            "score": {"type": "integer"},
        },
        "required": ["dimension", "rationale", "score"],
    }


def anthropic_body(
    dimension: str = "tone",
    *,
    model: str = "claude-test",
    tools: bool = True,
    forced: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 256,
        "system": "You are a strict judge.",
        "messages": [{"role": "user", "content": f"Grade the {dimension} of: hello world"}],
    }
    if tools:
        body["tools"] = [
            {"name": TOOL, "description": "Record a verdict.", "input_schema": schema(dimension)}
        ]
        body["tool_choice"] = {"type": "tool", "name": TOOL} if forced else {"type": "auto"}
    body.update(extra)
    return body


def openai_body(
    dimension: str = "tone", *, model: str = "gpt-test", tools: bool = True, forced: bool = True, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a strict judge."},
            {"role": "user", "content": f"Grade the {dimension} of: hello world"},
        ],
    }
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": TOOL, "description": "d", "parameters": schema(dimension)},
            }
        ]
        body["tool_choice"] = {"type": "function", "function": {"name": TOOL}} if forced else "auto"
    body.update(extra)
    return body


def post(
    url: str, body: dict[str, Any] | bytes, *, method: str = "POST", timeout: float = 10.0
) -> tuple[int, dict[str, str], Any]:
    """One HTTP request; returns (status, lower-cased headers, parsed JSON body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data if method == "POST" else None,
        method=method,
        headers={"content-type": "application/json", "x-api-key": "test-key"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return (
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                json.loads(response.read()),
            )
    except urllib.error.HTTPError as error:
        with error:
            return error.code, {k.lower(): v for k, v in error.headers.items()}, json.loads(error.read())


def post_anthropic(server: ProviderServer, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    return post(server.url + "/v1/messages", body)


def post_openai(server: ProviderServer, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    return post(server.openai_base_url + "/chat/completions", body)


def anthropic_tool_input(payload: dict[str, Any]) -> dict[str, Any]:
    blocks = [block for block in payload["content"] if block["type"] == "tool_use"]
    assert len(blocks) == 1, payload
    result: dict[str, Any] = blocks[0]["input"]
    return result


def openai_tool_input(payload: dict[str, Any]) -> dict[str, Any]:
    calls = payload["choices"][0]["message"]["tool_calls"]
    assert len(calls) == 1, payload
    result: dict[str, Any] = json.loads(calls[0]["function"]["arguments"])
    return result


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


# -- reply shapes --------------------------------------------------------------------------------


def test_anthropic_tool_reply_shape(server: ProviderServer) -> None:
    status, headers, payload = post_anthropic(server, anthropic_body("tone"))
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert payload["type"] == "message"
    assert payload["role"] == "assistant"
    assert payload["model"] == "claude-test"
    assert payload["stop_reason"] == "tool_use"
    (block,) = payload["content"]
    assert block["type"] == "tool_use"
    assert block["name"] == TOOL
    assert block["id"].startswith("toolu_")
    assert block["input"]["dimension"] == "tone"
    assert block["input"]["score"] == 4
    assert "tone" in block["input"]["rationale"]
    system, prompt = "You are a strict judge.", "Grade the tone of: hello world"
    reply_json = json.dumps(block["input"])
    assert payload["usage"] == {
        "input_tokens": len(system + prompt) // 4 + 10,
        "output_tokens": len(reply_json) // 4 + 5,
        # As the real API does, the cache figures are there (zero) when nothing was marked for caching.
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions"])
def test_openai_tool_reply_shape(server: ProviderServer, path: str) -> None:
    status, _, payload = post(server.url + path, openai_body("clarity"))
    assert status == 200
    assert payload["object"] == "chat.completion"
    assert payload["model"] == "gpt-test"
    (choice,) = payload["choices"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant"
    assert message["content"] is None
    (call,) = message["tool_calls"]
    assert call["type"] == "function"
    assert call["function"]["name"] == TOOL
    assert isinstance(call["function"]["arguments"], str)
    verdict = json.loads(call["function"]["arguments"])
    assert verdict["dimension"] == "clarity"
    assert verdict["score"] == 4
    assert "clarity" in verdict["rationale"]
    usage = payload["usage"]
    assert usage["prompt_tokens"] > 10
    assert usage["completion_tokens"] > 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert server.requests[-1].path == path


def test_auto_tool_choice_still_gets_a_tool_call(server: ProviderServer) -> None:
    _, _, anthropic_payload = post_anthropic(server, anthropic_body(forced=False))
    _, _, openai_payload = post_openai(server, openai_body(forced=False))
    assert anthropic_tool_input(anthropic_payload)["score"] == 4
    assert openai_tool_input(openai_payload)["score"] == 4
    assert [seen.forced for seen in server.requests] == [False, False]


def test_dimension_from_const(server: ProviderServer) -> None:
    body = anthropic_body()
    body["tools"][0]["input_schema"]["properties"]["dimension"] = {"const": "depth"}
    _, _, payload = post_anthropic(server, body)
    assert anthropic_tool_input(payload)["dimension"] == "depth"
    assert server.requests[-1].dimension == "depth"


def test_plain_text_reply_without_tools(server: ProviderServer) -> None:
    status, _, first = post_anthropic(server, anthropic_body(tools=False))
    _, _, again = post_anthropic(server, anthropic_body(tools=False))
    _, _, other_model = post_anthropic(server, anthropic_body(tools=False, model="claude-other"))
    assert status == 200
    assert first["stop_reason"] == "end_turn"
    assert first["content"][0]["type"] == "text"
    text = first["content"][0]["text"]
    assert text and text == again["content"][0]["text"]  # deterministic
    assert other_model["content"][0]["text"] != text  # derived from the model too
    status, _, payload = post_openai(server, openai_body(tools=False))
    assert status == 200
    assert payload["choices"][0]["finish_reason"] == "stop"
    assert payload["choices"][0]["message"]["content"]
    assert "tool_calls" not in payload["choices"][0]["message"]
    assert server.judge_calls == 0
    assert server.calls == 4


def test_custom_generator_sees_the_request() -> None:
    seen: list[SeenRequest] = []

    def generator(request: SeenRequest) -> str:
        seen.append(request)
        return f"echo: {request.prompt}"

    with ProviderServer(generator=generator) as server:
        _, _, payload = post_openai(server, openai_body(tools=False))
    assert payload["choices"][0]["message"]["content"] == "echo: Grade the tone of: hello world"
    assert seen[0].system == "You are a strict judge."


# -- scripting -----------------------------------------------------------------------------------


def test_script_is_consumed_in_order_then_default(server: ProviderServer) -> None:
    server.script(5, {"dimension": "tone", "score": 2, "rationale": "raw"}, "no tool today", 1)
    assert server.pending == 4
    first = anthropic_tool_input(post_anthropic(server, anthropic_body())[2])
    second = openai_tool_input(post_openai(server, openai_body())[2])
    third = post_anthropic(server, anthropic_body())[2]
    fourth = anthropic_tool_input(post_anthropic(server, anthropic_body())[2])
    fifth = anthropic_tool_input(post_anthropic(server, anthropic_body())[2])
    assert first["score"] == 5
    assert second == {"dimension": "tone", "score": 2, "rationale": "raw"}
    assert third["content"] == [{"type": "text", "text": "no tool today"}]
    assert third["stop_reason"] == "end_turn"
    assert fourth["score"] == 1
    assert fifth["score"] == 4
    assert server.pending == 0


def test_script_rejects_other_types(server: ProviderServer) -> None:
    with pytest.raises(TypeError):
        server.script(4.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        server.script(True)


def test_set_scores_cycles_per_dimension(server: ProviderServer) -> None:
    server.set_scores({"tone": [1, 2, 3], "clarity": 5})
    tone = [
        anthropic_tool_input(post_anthropic(server, anthropic_body("tone"))[2])["score"] for _ in range(4)
    ]
    clarity = [openai_tool_input(post_openai(server, openai_body("clarity"))[2])["score"] for _ in range(2)]
    other = anthropic_tool_input(post_anthropic(server, anthropic_body("depth"))[2])["score"]
    assert tone == [1, 2, 3, 1]
    assert clarity == [5, 5]
    assert other == 4


def test_set_scores_per_model_take_precedence_for_that_model(server: ProviderServer) -> None:
    server.set_scores({"tone": 4})
    server.set_scores({"tone": [1, 2]}, model="claude-strong")
    server.set_scores({"tone": 5}, model="gpt-own")

    def score(body: dict[str, Any], openai: bool = False) -> int:
        if openai:
            return int(openai_tool_input(post_openai(server, body)[2])["score"])
        return int(anthropic_tool_input(post_anthropic(server, body)[2])["score"])

    strong = [score(anthropic_body("tone", model="claude-strong")) for _ in range(3)]
    standing = [score(anthropic_body("tone", model="claude-test")) for _ in range(2)]
    own = score(openai_body("tone", model="gpt-own"), openai=True)
    other_dimension = score(anthropic_body("depth", model="claude-strong"))
    assert strong == [1, 2, 1]  # the model's own cycle, stepped by its own calls only
    assert standing == [4, 4] and own == 5 and other_dimension == 4
    assert server.calls_by_model == {"claude-strong": 4, "claude-test": 2, "gpt-own": 1}


def test_script_wins_over_set_scores(server: ProviderServer) -> None:
    server.set_scores({"tone": 2})
    server.script(5)
    scores = [anthropic_tool_input(post_anthropic(server, anthropic_body())[2])["score"] for _ in range(2)]
    assert scores == [5, 2]


def test_scorer_callable() -> None:
    def scorer(request: SeenRequest) -> int | Fault:
        if request.model == "flaky":
            return Fault.server_error()
        return 1 if "bad" in request.prompt else 3

    with ProviderServer(scorer=scorer) as server:
        body = anthropic_body()
        body["messages"][0]["content"] = [{"type": "text", "text": "a bad answer"}]
        assert anthropic_tool_input(post_anthropic(server, body)[2])["score"] == 1
        assert anthropic_tool_input(post_anthropic(server, anthropic_body())[2])["score"] == 3
        assert post_anthropic(server, anthropic_body(model="flaky"))[0] == 500


# -- faults --------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
@pytest.mark.parametrize(
    ("fault", "status", "anthropic_type"),
    [
        (Fault.rate_limit(), 429, "rate_limit_error"),
        (Fault.server_error(), 500, "api_error"),
        (Fault.overloaded(), 529, "overloaded_error"),
        (Fault.reject(400, "prompt is too long"), 400, "invalid_request_error"),
        (Fault.reject(401, "invalid x-api-key"), 401, "authentication_error"),
    ],
)
def test_error_faults(
    server: ProviderServer, protocol: str, fault: Fault, status: int, anthropic_type: str
) -> None:
    server.script(fault)
    if protocol == "anthropic":
        got, headers, payload = post_anthropic(server, anthropic_body())
        assert payload["type"] == "error"
        assert payload["error"]["type"] == anthropic_type
        message = payload["error"]["message"]
    else:
        got, headers, payload = post_openai(server, openai_body())
        assert set(payload["error"]) >= {"message", "type", "code"}
        message = payload["error"]["message"]
    assert got == status
    assert message == fault.message
    if status == 429:
        assert headers["retry-after"] == "0.05"
    else:
        assert "retry-after" not in headers
    assert server.requests[-1].status == status
    # The fault was one-shot: the next request succeeds.
    again = (
        post_anthropic(server, anthropic_body())
        if protocol == "anthropic"
        else post_openai(server, openai_body())
    )
    assert again[0] == 200


def test_rate_limit_retry_after_is_configurable(server: ProviderServer) -> None:
    server.script(Fault.rate_limit(retry_after=2))
    _, headers, _ = post_openai(server, openai_body())
    assert headers["retry-after"] == "2"


def test_reject_message(server: ProviderServer) -> None:
    server.script(Fault.reject(message="max_tokens: too large"))
    status, _, payload = post_anthropic(server, anthropic_body())
    assert status == 400
    assert payload["error"] == {"type": "invalid_request_error", "message": "max_tokens: too large"}


def test_malformed_tool_input(server: ProviderServer) -> None:
    server.script(Fault.malformed_tool_input(), Fault.malformed_tool_input({"verdict": "great"}))
    assert anthropic_tool_input(post_anthropic(server, anthropic_body("tone"))[2]) == {
        "dimension": "tone",
        "score": "five",
    }
    assert openai_tool_input(post_openai(server, openai_body())[2]) == {"verdict": "great"}


def test_invalid_json_arguments(server: ProviderServer) -> None:
    server.script(Fault.invalid_json('{"score": 4,'), Fault.invalid_json("five"))
    _, _, payload = post_openai(server, openai_body())
    assert payload["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"score": 4,'
    _, _, payload = post_anthropic(server, anthropic_body())
    assert payload["content"][0]["type"] == "tool_use"
    assert payload["content"][0]["input"] == "five"


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_text_only(server: ProviderServer, protocol: str) -> None:
    server.script(Fault.text_only("Four out of five."))
    if protocol == "anthropic":
        _, _, payload = post_anthropic(server, anthropic_body())
        assert payload["content"] == [{"type": "text", "text": "Four out of five."}]
        assert payload["stop_reason"] == "end_turn"
    else:
        _, _, payload = post_openai(server, openai_body())
        message = payload["choices"][0]["message"]
        assert message["content"] == "Four out of five."
        assert "tool_calls" not in message
        assert payload["choices"][0]["finish_reason"] == "stop"


def test_out_of_range(server: ProviderServer) -> None:
    server.script(Fault.out_of_range(), Fault.out_of_range(score=0))
    first = anthropic_tool_input(post_anthropic(server, anthropic_body())[2])
    second = openai_tool_input(post_openai(server, openai_body())[2])
    assert (first["score"], second["score"]) == (7, 0)
    assert first["rationale"] and first["dimension"] == "tone"


def test_slow_delays_then_answers_normally(server: ProviderServer) -> None:
    server.script(Fault.slow(0.3))
    started = time.monotonic()
    status, _, payload = post_anthropic(server, anthropic_body())
    elapsed = time.monotonic() - started
    assert status == 200
    assert anthropic_tool_input(payload)["score"] == 4
    assert elapsed >= 0.3
    seen = server.requests[-1]
    assert seen.finished - seen.started >= 0.3


# -- rejections by model ---------------------------------------------------------------------------


def test_reject_temperature_models(server: ProviderServer) -> None:
    server.reject_temperature_models.add("claude-strict")
    server.script(2)
    status, _, payload = post_anthropic(server, anthropic_body(model="claude-strict", temperature=0.0))
    assert status == 400
    assert payload["error"]["type"] == "invalid_request_error"
    assert "temperature" in payload["error"]["message"]
    assert server.pending == 1  # a rejected request consumes nothing
    # Without a temperature, or from another model, the request goes through.
    assert (
        anthropic_tool_input(post_anthropic(server, anthropic_body(model="claude-strict"))[2])["score"] == 2
    )
    assert post_openai(server, openai_body(temperature=0.0))[0] == 200
    status, _, payload = post_openai(server, openai_body(model="claude-strict", temperature=1.0))
    assert status == 400
    assert payload["error"]["param"] == "temperature"


def test_reject_forced_tool_models(server: ProviderServer) -> None:
    server.reject_forced_tool_models.update({"claude-thinking", "gpt-thinking"})
    status, _, payload = post_anthropic(server, anthropic_body(model="claude-thinking"))
    assert status == 400
    assert "tool_choice" in payload["error"]["message"]
    status, _, payload = post_openai(server, openai_body(model="gpt-thinking"))
    assert status == 400
    assert "tool_choice" in payload["error"]["message"]
    # With tool_choice auto the model still answers with the tool (a well-behaved model).
    _, _, payload = post_anthropic(server, anthropic_body(model="claude-thinking", forced=False))
    assert anthropic_tool_input(payload)["score"] == 4
    _, _, payload = post_openai(server, openai_body(model="gpt-thinking", forced=False))
    assert openai_tool_input(payload)["score"] == 4


# -- what the server saw ---------------------------------------------------------------------------


def test_seen_request_fields(server: ProviderServer) -> None:
    post_anthropic(server, anthropic_body("tone", temperature=0.0))
    post_openai(server, openai_body("clarity", model="gpt-x", tools=False))
    first, second = server.requests
    assert first.protocol == "anthropic"
    assert first.model == "claude-test"
    assert first.path == "/v1/messages"
    assert first.dimension == "tone"
    assert first.tool_name == TOOL
    assert first.tool_choice == {"type": "tool", "name": TOOL}
    assert first.forced is True
    assert first.temperature == 0.0
    assert first.has_tools is True
    assert first.system == "You are a strict judge."
    assert first.prompt == "Grade the tone of: hello world"
    assert first.messages == [{"role": "user", "content": "Grade the tone of: hello world"}]
    assert first.body["max_tokens"] == 256
    assert first.headers["x-api-key"] == "test-key"
    assert 0 < first.started <= first.finished
    assert first.status == 200
    assert second.protocol == "openai"
    assert second.model == "gpt-x"
    assert second.has_tools is False
    assert second.tool_name is None and second.dimension is None
    assert second.forced is False
    assert second.temperature is None
    assert second.system == "You are a strict judge."
    assert server.calls == 2
    assert server.judge_calls == 1
    assert server.calls_by_model == {"claude-test": 1, "gpt-x": 1}


def test_prompt_concatenates_user_turns_only(server: ProviderServer) -> None:
    body = anthropic_body()
    body["system"] = [{"type": "text", "text": "block system"}]
    body["messages"] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "bad output"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    post_anthropic(server, body)
    seen = server.requests[-1]
    assert seen.system == "block system"
    assert seen.prompt == "first\nsecond"


def test_reset_stats(server: ProviderServer) -> None:
    server.script(Fault.server_error(), 3)
    post_anthropic(server, anthropic_body())
    server.reset_stats()
    assert (server.calls, server.judge_calls, server.calls_by_model, server.requests) == (0, 0, {}, [])
    assert server.pending == 1  # the script survives
    post_anthropic(server, anthropic_body())
    assert server.calls == 1


# -- concurrency and latency -----------------------------------------------------------------------


def test_concurrent_requests_overlap() -> None:
    n = 6
    # Every request waits inside the server until all n are being handled at once: they can only
    # pass the barrier side by side. Served one after another, the first would wait out the timeout
    # (BrokenBarrierError, a 500 reply) instead of timing anything.
    together = threading.Barrier(n, timeout=10)

    def scorer(seen: SeenRequest) -> int:
        together.wait()
        return 4

    with ProviderServer(scorer=scorer) as server:
        with ThreadPoolExecutor(max_workers=n) as pool:
            results = list(pool.map(lambda _: post_anthropic(server, anthropic_body()), range(n)))
        assert [status for status, _, _ in results] == [200] * n, results
        assert not together.broken
        assert server.max_in_flight == n
        # Out of flight before the reply is sent, so this holds as soon as the clients have theirs.
        assert server.in_flight == 0
        assert len(server.requests) == n


def test_latency_by_model_overrides_latency() -> None:
    with ProviderServer(latency=0.0) as server:
        server.latency_by_model["slow-model"] = 0.3
        assert post_openai(server, openai_body(model="fast-model"))[0] == 200
        started = time.monotonic()
        post_openai(server, openai_body(model="slow-model"))
        slow = time.monotonic() - started
        server.latency = 0.2  # settable while running
        started = time.monotonic()
        post_openai(server, openai_body(model="fast-model"))
        changed = time.monotonic() - started
    # Lower bounds only (an upper bound would measure the machine's load): held at least that long.
    assert slow >= 0.3 and changed >= 0.2


def test_jitter_holds_each_answer_its_latency_plus_a_seeded_random_extra() -> None:
    draws = random.Random(0)
    extras = [draws.uniform(0.0, 0.1) for _ in range(4)]
    with ProviderServer(latency=0.05, jitter=0.1) as server:
        for _ in extras:
            assert post_openai(server, openai_body())[0] == 200
        held = [seen.finished - seen.started for seen in server.requests]
    # Lower bounds only (load only adds time): each one at least its own draw, in order.
    assert all(h >= 0.05 + extra for h, extra in zip(held, extras, strict=True)), (held, extras)
    assert max(extras) - min(extras) > 0.02  # the draws differ: the latency varies call to call


# -- lifecycle and protocol errors -------------------------------------------------------------------


def test_urls() -> None:
    server = ProviderServer()
    with pytest.raises(RuntimeError):
        _ = server.url
    with server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.port > 0
        assert server.anthropic_base_url == server.url
        assert server.openai_base_url == server.url + "/v1"
        assert server.running
    assert not server.running


def test_stop_is_bounded_with_sleeping_handlers() -> None:
    server = ProviderServer().start()
    server.script(Fault.slow(30), Fault.slow(30))
    outcomes: list[object] = []

    def call() -> None:
        try:
            outcomes.append(post_anthropic(server, anthropic_body()))
        except Exception as exc:  # the connection is cut: that's the point
            outcomes.append(exc)

    url = server.url
    threads = [threading.Thread(target=call, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while server.in_flight < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.in_flight == 2
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 15  # bounded: the handlers would sleep for 30 s
    for thread in threads:
        thread.join(5)
    assert not any(thread.is_alive() for thread in threads)
    assert len(outcomes) == 2 and all(isinstance(outcome, Exception) for outcome in outcomes)
    server.stop()  # idempotent
    with pytest.raises(OSError):
        post(url + "/v1/messages", anthropic_body(), timeout=2)


def test_stop_before_start_and_restart() -> None:
    server = ProviderServer()
    server.stop()
    with server:
        assert post_anthropic(server, anthropic_body())[0] == 200
    with server:  # a stopped server can be started again, on a new port
        assert post_anthropic(server, anthropic_body())[0] == 200


def test_unknown_path_is_404(server: ProviderServer) -> None:
    status, _, payload = post(server.url + "/v1/completions", anthropic_body())
    assert status == 404
    assert payload["error"]["type"] == "not_found_error"
    status, _, _ = post(server.url + "/", b"", method="GET")
    assert status == 404
    assert server.calls == 0


def test_malformed_json_is_400(server: ProviderServer) -> None:
    status, _, payload = post(server.url + "/v1/messages", b"{not json")
    assert status == 400
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    status, _, payload = post(server.openai_base_url + "/chat/completions", b"[1, 2]")
    assert status == 400
    assert payload["error"]["type"] == "invalid_request_error"
    # The server keeps serving afterwards.
    assert post_anthropic(server, anthropic_body())[0] == 200


def test_missing_fields_are_400(server: ProviderServer) -> None:
    status, _, payload = post_anthropic(server, {"max_tokens": 10, "messages": []})
    assert status == 400
    assert "model" in payload["error"]["message"]
    status, _, payload = post_openai(server, {"model": "gpt-test"})
    assert status == 400
    assert "messages" in payload["error"]["message"]


def test_server_module_is_stdlib_only() -> None:
    code = (
        "import sys, pytest_aimeasure.testing as t; "
        "heavy = {'anthropic', 'litellm', 'httpx', 'httpx2', 'openai', 'pydantic'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
