"""The real SDK backends (anthropic, litellm) against the local provider server, over real HTTP: every
test through both transports of the native routes (aiohttp when installed, httpx)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.judge.backends import base, http
from pytest_aimeasure.judge.backends.anthropic import AnthropicBackend, auto_tool_instruction
from pytest_aimeasure.judge.backends.base import (
    Backend,
    BackendError,
    GenerateRequest,
    JudgeReply,
    JudgeRequest,
    Message,
    ToolSpec,
)
from pytest_aimeasure.judge.backends.http import POOL_SHARDS, quick_streams
from pytest_aimeasure.judge.backends.litellm import LitellmBackend, base_url_from_env
from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest

TOOL_NAME = "record_verdict"
ANTHROPIC_MODEL = "claude-test"
OPENAI_MODEL = "gpt-test"
KINDS = ["anthropic", "litellm"]

AnyBackend = AnthropicBackend | LitellmBackend


def judge_request(dimension: str = "tone", **overrides: Any) -> JudgeRequest:
    tool = ToolSpec(
        name=TOOL_NAME,
        description=f"Record your verdict on the dimension '{dimension}'.",
        input_schema={
            "type": "object",
            "properties": {
                "dimension": {"type": "string", "enum": [dimension]},
                "rationale": {"type": "string", "minLength": 1},
                "score": {"type": "integer", "minimum": 1, "maximum": 5},
            },
            "required": ["dimension", "rationale", "score"],
            "additionalProperties": False,
        },
    )
    fields: dict[str, Any] = {
        "system": "You are a strict judge.",
        "messages": (Message("user", f"Grade the {dimension} of: the quick brown fox"),),
        "tool": tool,
        "dimension": dimension,
    }
    fields.update(overrides)
    return JudgeRequest(**fields)


def model_name(kind: str) -> str:
    """The model name the server sees for each backend kind."""
    return ANTHROPIC_MODEL if kind == "anthropic" else OPENAI_MODEL


def make_backend(kind: str, server: ProviderServer, *, model: str | None = None, **kwargs: Any) -> AnyBackend:
    kwargs.setdefault("timeout", 10.0)
    if kind == "anthropic":
        return AnthropicBackend(model or ANTHROPIC_MODEL, base_url=server.url, api_key="test-key", **kwargs)
    return LitellmBackend(
        f"openai/{model or OPENAI_MODEL}", api_base=server.openai_base_url, api_key="test-key", **kwargs
    )


def run(backend: AnyBackend, call: Callable[[AnyBackend], Any]) -> Any:
    """Run one backend call on a fresh event loop, closing the backend afterwards."""

    async def main() -> Any:
        try:
            return await call(backend)
        finally:
            await backend.aclose()

    return asyncio.run(main())


def judge(backend: AnyBackend, request: JudgeRequest | None = None) -> JudgeReply:
    reply: JudgeReply = run(backend, lambda b: b.judge(request or judge_request()))
    return reply


def judge_error(backend: AnyBackend, request: JudgeRequest | None = None) -> BackendError:
    with pytest.raises(BackendError) as caught:
        judge(backend, request)
    return caught.value


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing from the developer's shell may route a test to a real provider.
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_PROFILE",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_API_BASE",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True, params=["wire", "aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The native routes' transport of unstreamed calls: the wire (the default without a proxy),
    aiohttp (when installed, for streams), or httpx (without it, or behind a proxy)."""
    if request.param != "wire":
        monkeypatch.setattr(http, "USE_WIRE", False)
    if request.param == "aiohttp":
        pytest.importorskip("aiohttp")
    if request.param == "httpx":
        monkeypatch.setattr(http, "USE_AIOHTTP", False)
    return str(request.param)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


# -- the happy path ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_backend_protocol(kind: str, server: ProviderServer) -> None:
    backend = make_backend(kind, server)
    assert isinstance(backend, Backend)
    if kind == "anthropic":
        assert (backend.provider, backend.model, backend.concurrency_key) == (
            "anthropic",
            ANTHROPIC_MODEL,
            "anthropic",
        )
    else:
        assert (backend.provider, backend.model, backend.concurrency_key) == (
            "litellm:openai",
            f"openai/{OPENAI_MODEL}",
            "openai",
        )


@pytest.mark.parametrize("kind", KINDS)
def test_forced_tool_call_returns_the_scripted_verdict(kind: str, server: ProviderServer) -> None:
    server.script(5)
    reply = judge(make_backend(kind, server))
    assert reply.tool_input is not None
    assert reply.tool_input["dimension"] == "tone"
    assert reply.tool_input["score"] == 5
    assert "tone" in reply.tool_input["rationale"]
    assert reply.mode == "forced"
    assert reply.temperature_sent == 0.0
    assert reply.model == model_name(kind)
    assert reply.latency_s > 0
    assert reply.raw and "tone" in reply.raw
    system, prompt = "You are a strict judge.", "Grade the tone of: the quick brown fox"
    assert reply.usage.input_tokens == len(system + prompt) // 4 + 10
    assert reply.usage.output_tokens == len(json.dumps(reply.tool_input)) // 4 + 5

    (seen,) = server.requests
    assert seen.protocol == ("anthropic" if kind == "anthropic" else "openai")
    assert seen.model == model_name(kind)
    assert seen.forced is True
    if kind == "anthropic":
        assert seen.tool_choice == {"type": "tool", "name": TOOL_NAME}
    else:
        assert seen.tool_choice == {"type": "function", "function": {"name": TOOL_NAME}}
    assert seen.temperature == 0.0
    assert seen.tool_name == TOOL_NAME
    assert seen.dimension == "tone"
    assert seen.system == system
    assert seen.prompt == prompt


@pytest.mark.parametrize("kind", KINDS)
def test_no_temperature_requested_means_none_sent(kind: str, server: ProviderServer) -> None:
    reply = judge(make_backend(kind, server), judge_request(temperature=None))
    assert reply.temperature_sent is None
    assert "temperature" not in server.requests[-1].body


@pytest.mark.parametrize("kind", KINDS)
def test_retry_turns_are_sent_in_order(kind: str, server: ProviderServer) -> None:
    request = judge_request(
        messages=(
            Message("user", "Grade it."),
            Message("assistant", '{"score": "five"}'),
            Message("user", "score: Input should be a valid integer. Call the tool again."),
        )
    )
    judge(make_backend(kind, server), request)
    seen = server.requests[-1]
    turns = [m for m in seen.messages if m["role"] != "system"]
    assert [m["role"] for m in turns] == ["user", "assistant", "user"]
    assert seen.prompt == "Grade it.\nscore: Input should be a valid integer. Call the tool again."


# -- transport retries -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "fault", [Fault.rate_limit(retry_after=0.05), Fault.overloaded(), Fault.server_error()], ids=repr
)
def test_transient_error_then_success(kind: str, fault: Fault, server: ProviderServer) -> None:
    server.script(fault, 3)
    reply = judge(make_backend(kind, server))
    assert reply.tool_input is not None and reply.tool_input["score"] == 3
    assert server.calls == 2  # the SDK retried once
    assert [seen.status for seen in server.requests] == [fault.status, 200]


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limit_waits_for_retry_after(kind: str, server: ProviderServer) -> None:
    server.script(Fault.rate_limit(retry_after=0.3), 2)
    judge(make_backend(kind, server))
    first, second = server.requests
    assert second.started - first.finished >= 0.25


@pytest.mark.parametrize("kind", KINDS)
def test_retries_exhausted(kind: str, server: ProviderServer) -> None:
    server.script(Fault.rate_limit(0.01), Fault.rate_limit(0.01), 4)
    error = judge_error(make_backend(kind, server, max_retries=1))
    assert error.status == 429
    assert error.retryable
    assert "Rate limit exceeded" in str(error)
    assert server.calls == 2
    assert server.pending == 1


@pytest.mark.parametrize("kind", KINDS)
def test_bad_request_is_not_retried(kind: str, server: ProviderServer) -> None:
    server.script(Fault.reject(400, "prompt is too long: 300000 tokens > 200000 maximum"))
    error = judge_error(make_backend(kind, server))
    assert error.status == 400
    assert not error.retryable
    assert "prompt is too long" in str(error)
    assert server.calls == 1


@pytest.mark.parametrize("kind", KINDS)
def test_slow_response_times_out(kind: str, server: ProviderServer) -> None:
    server.script(Fault.slow(5))
    error = judge_error(make_backend(kind, server, timeout=0.3, max_retries=0))
    assert "timed out after 0.3s" in str(error)
    assert "--judge-timeout" in str(error)
    assert error.retryable
    assert server.calls == 1


@pytest.mark.parametrize("kind", KINDS)
def test_request_timeout_overrides_backend_timeout(kind: str, server: ProviderServer) -> None:
    server.script(Fault.slow(5))
    error = judge_error(make_backend(kind, server, timeout=30, max_retries=0), judge_request(timeout=0.3))
    assert "timed out after 0.3s" in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_is_retried_by_the_sdk(kind: str, server: ProviderServer) -> None:
    server.script(Fault.slow(5), 2)
    reply = judge(make_backend(kind, server, timeout=0.3, max_retries=1))
    assert reply.tool_input is not None and reply.tool_input["score"] == 2
    assert server.calls == 2


# -- model quirks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_temperature_rejection_falls_back_and_is_remembered(kind: str, server: ProviderServer) -> None:
    server.reject_temperature_models.add(model_name(kind))
    server.script(2, 3)
    backend = make_backend(kind, server)

    async def twice() -> tuple[JudgeReply, JudgeReply]:
        try:
            return await backend.judge(judge_request()), await backend.judge(judge_request())
        finally:
            await backend.aclose()

    first, second = asyncio.run(twice())
    assert first.tool_input is not None and first.tool_input["score"] == 2
    assert second.tool_input is not None and second.tool_input["score"] == 3
    assert first.temperature_sent is None and second.temperature_sent is None
    assert [(seen.temperature, seen.status) for seen in server.requests] == [
        (0.0, 400),
        (None, 200),
        (None, 200),
    ]
    assert all("temperature" not in seen.body for seen in server.requests[1:])


def test_litellm_client_side_temperature_rejection(server: ProviderServer) -> None:
    # litellm refuses temperature=0 for o-series models itself (UnsupportedParamsError), before any HTTP.
    backend = make_backend("litellm", server, model="o1")
    reply = judge(backend)
    assert reply.temperature_sent is None
    assert reply.tool_input is not None and reply.tool_input["score"] == 4
    (seen,) = server.requests
    assert "temperature" not in seen.body
    assert backend.sends_temperature is False


@pytest.mark.parametrize("kind", KINDS)
def test_forced_tool_rejection_falls_back_to_auto(kind: str, server: ProviderServer) -> None:
    server.reject_forced_tool_models.add(model_name(kind))
    server.script(5, 1)
    backend = make_backend(kind, server)

    async def twice() -> tuple[JudgeReply, JudgeReply]:
        try:
            return await backend.judge(judge_request()), await backend.judge(judge_request())
        finally:
            await backend.aclose()

    first, second = asyncio.run(twice())
    assert (first.mode, second.mode) == ("auto", "auto")
    assert first.tool_input is not None and first.tool_input["score"] == 5
    assert second.tool_input is not None and second.tool_input["score"] == 1
    rejected, *accepted = server.requests
    assert rejected.forced and rejected.status == 400
    assert len(accepted) == 2  # the second call went straight to auto
    for seen in accepted:
        assert not seen.forced
        assert seen.tool_choice == ({"type": "auto"} if kind == "anthropic" else "auto")
        assert seen.system.startswith("You are a strict judge.")
        assert auto_tool_instruction(TOOL_NAME) in seen.system


def judge_together(backend: Backend, n: int) -> list[JudgeReply]:
    """``n`` judge calls sent at once through ``backend`` (closed after), their replies in order."""

    async def many() -> list[JudgeReply]:
        try:
            return list(await asyncio.gather(*(backend.judge(judge_request()) for _ in range(n))))
        finally:
            await backend.aclose()

    return asyncio.run(many())


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_forced_tool_is_learned_once_by_calls_sent_together(
    kind: str, server: ProviderServer
) -> None:
    # Three samples go out at once: one 400 teaches the model's quirk, the others wait for it.
    server.reject_forced_tool_models.add(model_name(kind))
    server.script(5, 4, 3)
    backend = make_backend(kind, server)

    replies = judge_together(backend, 3)
    assert [r.mode for r in replies] == ["auto"] * 3
    assert sorted(r.tool_input["score"] for r in replies if r.tool_input is not None) == [3, 4, 5]
    assert [(seen.forced, seen.status) for seen in server.requests] == [(True, 400)] + [(False, 200)] * 3
    lessons = [lesson for r in replies for lesson in r.learned]
    assert len(lessons) == 1 and "refuses forced tool use" in lessons[0]


@pytest.mark.parametrize("kind", KINDS)
def test_both_rejections_at_once(kind: str, server: ProviderServer) -> None:
    server.reject_temperature_models.add(model_name(kind))
    server.reject_forced_tool_models.add(model_name(kind))
    reply = judge(make_backend(kind, server))
    assert reply.mode == "auto"
    assert reply.temperature_sent is None
    assert reply.tool_input is not None and reply.tool_input["score"] == 4
    assert [seen.status for seen in server.requests] == [400, 400, 200]


# -- unvalidated replies -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_malformed_tool_input_comes_back_as_is(kind: str, server: ProviderServer) -> None:
    server.script(Fault.malformed_tool_input())
    reply = judge(make_backend(kind, server))
    assert reply.tool_input == {"dimension": "tone", "score": "five"}
    assert "five" in reply.raw


@pytest.mark.parametrize("kind", KINDS)
def test_out_of_range_comes_back_as_is(kind: str, server: ProviderServer) -> None:
    server.script(Fault.out_of_range(9))
    reply = judge(make_backend(kind, server))
    assert reply.tool_input is not None and reply.tool_input["score"] == 9


@pytest.mark.parametrize("kind", KINDS)
def test_text_only_reply(kind: str, server: ProviderServer) -> None:
    server.script(Fault.text_only("I would say four out of five."))
    reply = judge(make_backend(kind, server))
    assert reply.tool_input is None
    assert reply.text == "I would say four out of five."
    assert "four out of five" in reply.raw


@pytest.mark.parametrize("kind", KINDS)
def test_invalid_json_arguments(kind: str, server: ProviderServer) -> None:
    server.script(Fault.invalid_json('{"dimension": "tone", "score": 4,'))
    reply = judge(make_backend(kind, server))
    assert reply.tool_input is None
    if kind == "litellm":
        assert reply.raw == '{"dimension": "tone", "score": 4,'
    else:
        assert '\\"score\\": 4,' in reply.raw  # the string input, inside the JSON dump of the blocks


# -- generate ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_generate_returns_text(kind: str) -> None:
    with ProviderServer(generator=lambda seen: f"story about {seen.prompt}") as server:
        backend = make_backend(kind, server)
        request = GenerateRequest(
            prompt="a fox", system="Be brief.", params={"temperature": 0.7, "max_tokens": 50}
        )
        reply = run(backend, lambda b: b.generate(request))
        assert reply.text == "story about a fox"
        assert reply.model == model_name(kind)
        assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
        assert reply.latency_s > 0
        (seen,) = server.requests
        assert not seen.has_tools
        assert seen.system == "Be brief."
        assert seen.temperature == 0.7
        assert seen.body["max_tokens"] == 50


@pytest.mark.parametrize("kind", KINDS)
def test_generate_error(kind: str, server: ProviderServer) -> None:
    server.script(Fault.reject(403, "permission denied"))
    backend = make_backend(kind, server)
    with pytest.raises(BackendError) as caught:
        run(backend, lambda b: b.generate(GenerateRequest(prompt="hi")))
    assert caught.value.status == 403
    assert "permission denied" in str(caught.value)


# -- configuration from the environment ------------------------------------------------------------------


def test_anthropic_base_url_and_key_from_env(server: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-from-env")
    reply = judge(AnthropicBackend("claude-env", timeout=10))
    assert reply.model == "claude-env"
    (seen,) = server.requests
    credential = seen.headers.get("x-api-key") or seen.headers.get("authorization", "")
    assert credential.endswith("test-key-from-env")


def test_anthropic_without_credentials(server: ProviderServer) -> None:
    error = judge_error(AnthropicBackend("claude-nokey", base_url=server.url, timeout=10))
    assert "ANTHROPIC_API_KEY" in str(error)
    assert server.calls == 0


@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "OPENAI_API_BASE"])
def test_openai_base_url_from_env(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-from-env")
    backend = LitellmBackend("openai/gpt-env", timeout=10)
    assert backend.api_base == server.openai_base_url
    reply = judge(backend)
    assert reply.model == "gpt-env"
    (seen,) = server.requests
    assert seen.headers["authorization"] == "Bearer test-key-from-env"


def test_base_url_from_env_naming(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_AI_API_BASE", "http://127.0.0.1:9/azure")
    monkeypatch.delenv("AZURE_AI_BASE_URL", raising=False)
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    monkeypatch.delenv("OLLAMA_API_BASE", raising=False)
    assert base_url_from_env("azure_ai") == "http://127.0.0.1:9/azure"
    assert base_url_from_env("ollama") is None
    monkeypatch.setenv("OLLAMA_API_BASE", "http://127.0.0.1:9/ollama")
    backend = LitellmBackend("ollama/llama3")
    assert (backend.api_base, backend.provider, backend.concurrency_key) == (
        "http://127.0.0.1:9/ollama",
        "litellm:ollama",
        "ollama",
    )


# -- concurrency and lifecycle -----------------------------------------------------------------------------


def all_at_once(n: int) -> Callable[[SeenRequest], int]:
    """A scorer that answers the model's first call at once and holds each later one until ``n`` of
    them are being handled together: a barrier, where a latency alone is a race on a loaded machine
    (the first answers came back before the last calls went out). Calls that never all get there
    break it after 30 s, and the server answers them with a 500."""
    together = threading.Barrier(n, timeout=30)
    arrivals = itertools.count()

    def scorer(seen: SeenRequest) -> int:
        if next(arrivals) > 0:
            together.wait()
        return 4

    return scorer


@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_calls_overlap(kind: str) -> None:
    n = 5
    with ProviderServer(scorer=all_at_once(n - 1)) as server:
        backend = make_backend(kind, server)

        replies = judge_together(backend, n)
        assert len(replies) == n and all(r.tool_input is not None for r in replies)
        # The model's first call goes alone (its status tells what the model refuses); the others
        # were all in flight at once after it. They go at its 200, so on a loaded machine the server
        # may still be writing the first call's streamed events when they arrive (seen once in a
        # whole run at load 5: one more in flight).
        assert n - 1 <= server.max_in_flight <= n
        first, *others = sorted(server.requests, key=lambda seen: seen.started)
        assert first.streamed and all(first.accepted <= seen.started for seen in others)


class HeldFirstStream(ProviderServer):
    """A provider that holds a streamed reply's events (its 200 went out) until ``n`` requests have
    arrived, at most 10 s: a stream that the others' arrival, not a latency, ends."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.arrived = threading.Condition()

    def _record(self, seen: SeenRequest) -> None:
        super()._record(seen)
        with self.arrived:
            self.arrived.notify_all()

    def _respond(self, seen: SeenRequest, accept: Callable[[], None] | None = None) -> Any:
        reply = super()._respond(seen, accept)
        if seen.accepted:
            with self.arrived:
                self.arrived.wait_for(lambda: len(self.requests) >= self.n, timeout=10)
        return reply


@pytest.mark.parametrize("kind", KINDS)
def test_the_model_s_first_call_streams_and_the_calls_sent_with_it_go_at_its_status(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first call's events are held until the others reach the server, and they could not go on
    # the wait's timeout (a minute): they went when its 200 came. Unstreamed, they waited for its
    # answer (or FIRST_CALL_WAIT_S): the held stream never ended before they came, the hold timed out.
    monkeypatch.setattr(base, "FIRST_CALL_WAIT_S", 60.0)
    n = 4
    with HeldFirstStream(n) as server:
        server.script(5, 4, 4, 4)
        backend = make_backend(kind, server)

        replies = judge_together(backend, n)
        assert sorted(r.tool_input["score"] for r in replies if r.tool_input is not None) == [4, 4, 4, 5]
        first, *others = sorted(server.requests, key=lambda seen: seen.started)
        assert first.streamed and first.body["stream"] is True
        assert all(first.accepted <= seen.started < first.finished for seen in others)
        # Every other call is sent as before: one JSON reply each.
        assert not any(seen.streamed or "stream" in seen.body for seen in others)
        if kind == "litellm":
            assert first.body["stream_options"] == {"include_usage": True}


def streamed_and_plain(kind: str, server: ProviderServer, outcome: Any) -> tuple[JudgeReply, JudgeReply]:
    """The same outcome through a model's first call (streamed) and through a call of a backend that
    knows the model already (unstreamed)."""
    server.script(outcome, outcome)
    streamed = judge(make_backend(kind, server))
    known = make_backend(kind, server)
    known.quirks.remember({})  # an earlier session's answers: no first call to stream
    plain = judge(known)
    first, second = server.requests
    assert (first.streamed, second.streamed) == (True, False)
    return streamed, plain


@pytest.mark.parametrize(
    "outcome",
    [
        5,
        Fault.text_only(),
        Fault.invalid_json(),
        Fault.malformed_tool_input(),
        Fault.bad_usage({"output_tokens": -3}),
        {"dimension": "tone", "score": 2, "rationale": "é ü 漢字 \u2028 " * 20},
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_streamed_first_call_s_reply_equals_an_unstreamed_one(
    kind: str, server: ProviderServer, outcome: Any
) -> None:
    streamed, plain = streamed_and_plain(kind, server, outcome)
    assert streamed.latency_s > 0

    def same(reply: JudgeReply) -> JudgeReply:  # but for its latency and its tool call's id
        return replace(reply, latency_s=0.0, raw=re.sub(r"toolu_[0-9a-f]+", "toolu_", reply.raw))

    assert same(streamed) == same(plain)


def test_a_streamed_first_call_reads_the_prompt_cache_s_usage(server: ProviderServer) -> None:
    server.prompt_cache.min_tokens = 1
    request = judge_request(prefix_chars=10)
    server.script(5, 5, 5)
    streamed = run(make_backend("anthropic", server), lambda b: b.judge(request))
    known = make_backend("anthropic", server)
    known.quirks.remember({})
    plain = run(known, lambda b: b.judge(request))
    again = make_backend("anthropic", server)
    again.quirks.remember({})
    read = run(again, lambda b: b.judge(request))
    assert streamed.usage.cache_creation_input_tokens > 0
    assert plain.usage.cache_read_input_tokens > 0 and read.usage == plain.usage
    total = streamed.usage.input_tokens + streamed.usage.cache_creation_input_tokens
    assert total == plain.usage.input_tokens + plain.usage.cache_read_input_tokens
    assert server.requests[0].streamed


@pytest.mark.parametrize("kind", KINDS)
def test_a_400_on_the_streamed_first_call_teaches_the_quirk(kind: str, server: ProviderServer) -> None:
    server.reject_temperature_models.add(model_name(kind))
    backend = make_backend(kind, server)
    replies = judge_together(backend, 3)
    assert all(r.temperature_sent is None and r.tool_input is not None for r in replies)
    lessons = [lesson for r in replies for lesson in r.learned]
    assert len(lessons) == 1 and "rejects temperature" in lessons[0]
    # The refusal came before any stream; the first call went again, streamed, without temperature;
    # the others after its status, unstreamed.
    assert [(seen.streamed, seen.temperature, seen.status) for seen in server.requests] == [
        (True, 0.0, 400),
        (True, None, 200),
        (False, None, 200),
        (False, None, 200),
    ]
    assert server.requests[0].accepted == 0.0


@pytest.mark.parametrize("kind", KINDS)
def test_a_streamed_first_call_is_held_to_the_call_s_limit_for_its_whole_reply(
    kind: str, server: ProviderServer
) -> None:
    # Each event comes well within the limit, the whole reply does not (a dozen events 0.3 s apart,
    # a 1 s limit): the call times out, as an unstreamed one whose reply takes that long does.
    server.stream_gap = 0.3
    error = judge_error(make_backend(kind, server, timeout=1.0, max_retries=0))
    assert error.retryable and "timed out after 1s" in str(error)
    (seen,) = server.requests
    assert seen.streamed and seen.accepted > 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_server_that_refuses_to_stream_gets_the_first_call_again_unstreamed(
    kind: str, server: ProviderServer
) -> None:
    # An OpenAI-compatible server that does not take stream_options (or stream) answers the
    # streamed first call with a 400: that call goes again unstreamed, and the judge works as
    # before streaming (not a judge error for a server that answers every other call).
    server.script(Fault.reject(400, "stream_options: Extra inputs are not permitted"), 5, 4, 4)
    replies = judge_together(make_backend(kind, server), 3)
    assert sorted(r.tool_input["score"] for r in replies if r.tool_input is not None) == [4, 4, 5]
    assert not any(r.learned for r in replies)
    assert [(seen.streamed, seen.status) for seen in server.requests] == [
        (True, 400),
        (False, 200),
        (False, 200),
        (False, 200),
    ]


@pytest.mark.parametrize(
    ("fault", "status"),
    [(Fault.rate_limit(retry_after=3), 429), (Fault.stream_error(529, "Overloaded"), 529)],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_rate_limit_before_or_inside_the_first_call_s_stream_is_a_rate_limit(
    kind: str, server: ProviderServer, fault: Fault, status: int
) -> None:
    server.script(fault)
    backend = make_backend(kind, server, max_retries=0)
    error = judge_error(backend)
    assert isinstance(error, base.RateLimited) and error.status == status and error.retryable
    assert error.retry_after == (3.0 if status == 429 else None)
    if status == 529 and kind == "anthropic":
        assert "overloaded_error" in str(error)
    (seen,) = server.requests
    assert seen.streamed and (seen.accepted > 0) == (status == 529)
    # It ended the first call (the others go), and taught nothing a later session may remember.
    assert backend.quirks.first_call_over and backend.quirks.learned() is None


@pytest.mark.parametrize("fault", [Fault.stream_error(500, "boom"), Fault.stream_cut()])
@pytest.mark.parametrize("kind", KINDS)
def test_a_first_call_s_stream_that_fails_midway_is_retried_as_a_transport_failure(
    kind: str, server: ProviderServer, fault: Fault
) -> None:
    # The engine retries it (--judge-retries), as a reset or a 500 unstreamed.
    server.script(fault)
    error = judge_error(make_backend(kind, server, max_retries=0))
    assert error.retryable and error.unreachable is None
    assert not str(error).endswith(": ")  # says what failed (httpx's errors for a cut have no text)
    (seen,) = server.requests
    assert seen.streamed and seen.accepted > 0
    if fault.kind == "stream_error":  # and an error status is retried by the backend's own retries
        assert isinstance(error, base.ProviderRejection) and error.status == 500
        server.script(fault, 3)
        reply = judge(make_backend(kind, server, max_retries=1))
        assert reply.tool_input is not None and reply.tool_input["score"] == 3
        assert [seen.streamed for seen in server.requests] == [True, True, True]


@pytest.mark.parametrize("kind", KINDS)
def test_a_first_call_still_out_after_the_wait_lets_the_calls_sent_with_it_go(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The model's first call is held until the others reach the server: they go once it has been
    # out for FIRST_CALL_WAIT_S, without its answer (they used to wait for it: a whole judge latency
    # before the session's other first calls went out).
    monkeypatch.setattr(base, "FIRST_CALL_WAIT_S", 0.05)
    n = 4
    all_here = threading.Barrier(n, timeout=10)

    def scorer(seen: SeenRequest) -> int:
        # Every call is held until all n are at the server: the first one too, so its answer cannot
        # be what let the others go. (Under the old rule they never came: the barrier breaks.)
        with contextlib.suppress(threading.BrokenBarrierError):
            all_here.wait()
        return 4

    with ProviderServer(scorer=scorer) as server:
        backend = make_backend(kind, server)

        replies = judge_together(backend, n)
        assert [r.tool_input["score"] for r in replies if r.tool_input is not None] == [4] * n
        first, *others = sorted(server.requests, key=lambda seen: seen.started)
        assert all(seen.started < first.finished for seen in others)
        assert server.max_in_flight == n


@pytest.mark.parametrize("kind", KINDS)
def test_calls_one_after_another_share_one_kept_alive_connection_as_the_server_records_it(
    kind: str, server: ProviderServer
) -> None:
    # Every transport keeps its connection for the next call, and the local server says which
    # connection each request came on (the benchmarks' turnaround on a connection reads it).
    backend = make_backend(kind, server)
    judge(backend)  # the model's first call (streamed where the route can)

    async def two() -> None:
        try:
            for _ in range(2):
                await backend.judge(judge_request())
        finally:
            await backend.aclose()

    asyncio.run(two())
    connections = [seen.connection for seen in server.requests]
    assert len(connections) == 3 and connections[1] == connections[2] != 0


@pytest.mark.parametrize("transport", ["httpx"], indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_calls_in_flight_are_spread_over_several_connection_pools(kind: str) -> None:
    # httpcore scans every connection of a pool (polling each idle socket) when a request starts or
    # ends: one pool of 64 connections cost the judge's loop thread more than the calls' own work.
    n = 3 * POOL_SHARDS
    with ProviderServer(scorer=all_at_once(n)) as server:
        backend = make_backend(kind, server)

        async def many() -> list[int]:
            try:
                await backend.judge(judge_request())  # the model's first call goes alone
                await asyncio.gather(*(backend.judge(judge_request()) for _ in range(n)))
                api = backend._api
                assert api is not None
                return [
                    (len(pool.connections), isinstance(pool._network_backend, quick_streams()))
                    for pool in (client._transport._pool for client in api._clients)
                ]
            finally:
                await backend.aclose()

        pools = asyncio.run(many())
        assert server.max_in_flight == n
    # Each pool kept the connections it had in flight at once, opened through the quick streams.
    assert pools == [(3, True)] * POOL_SHARDS


@pytest.mark.parametrize("kind", KINDS)
def test_every_client_of_the_process_shares_one_tls_context_per_ca_bundle(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Loading the CA bundle takes about 70 ms: each of the shards' clients loaded its own, 0.6 s
    # before the session's first request could go out.
    import httpx

    from pytest_aimeasure.judge.backends import http

    built: list[object] = []
    real = httpx.create_ssl_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(httpx, "create_ssl_context", counted)
    monkeypatch.setattr(http, "_TLS", {})
    for _ in range(2):  # two backends (a dimension's own judge=, an escalation model): one context
        assert judge(make_backend(kind, server)).tool_input is not None
    assert len(built) == 1
    # A bundle of one's own (SSL_CERT_FILE) gets its own context, as httpx would build it.
    bundle = tmp_path / "ca.pem"
    import certifi

    bundle.write_bytes(Path(certifi.where()).read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert judge(make_backend(kind, server)).tool_input is not None
    assert len(built) == 2 and server.calls == 3


@pytest.mark.parametrize("kind", KINDS)
def test_backend_survives_a_new_event_loop(kind: str, server: ProviderServer) -> None:
    backend = make_backend(kind, server)
    first = asyncio.run(backend.judge(judge_request()))  # no aclose: the loop dies with the client open
    second = asyncio.run(backend.judge(judge_request()))
    asyncio.run(backend.aclose())
    asyncio.run(backend.aclose())  # idempotent
    assert first.tool_input is not None and second.tool_input is not None
    assert server.calls == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_whose_read_of_the_environment_raced_a_change_is_built_again(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # httpx reads the proxy variables by iterating os.environ when a client is built (on the judge's
    # loop thread); pytest's main thread deleting PYTEST_CURRENT_TEST meanwhile once broke that read
    # with this KeyError, failing the test whose call built the client.
    # The aiohttp path reads them the same way, to see whether a proxy applies.
    import urllib.request

    import httpx._utils

    real, raised = urllib.request.getproxies, []

    def racing() -> dict[str, str]:
        if not raised:
            raised.append("PYTEST_CURRENT_TEST")
            raise KeyError("PYTEST_CURRENT_TEST")
        return real()

    monkeypatch.setattr(httpx._utils, "getproxies", racing)
    monkeypatch.setattr(urllib.request, "getproxies", racing)
    server.script(4)
    reply = judge(make_backend(kind, server))
    assert raised and reply.tool_input is not None and reply.tool_input["score"] == 4
    assert server.calls == 1


def test_importing_backends_does_not_import_sdks_nor_does_judging_on_the_native_routes() -> None:
    # The session's first judge request must not wait for an SDK's import (anthropic ~2 s of CPU,
    # litellm ~6 s): anthropic/ and openai/ judge calls go out through httpx alone.
    code = (
        "import asyncio, sys\n"
        "import pytest_aimeasure.judge.backends.anthropic as a\n"
        "import pytest_aimeasure.judge.backends.litellm as l\n"
        "SDKS = {'anthropic', 'litellm', 'openai', 'httpx', 'httpx2'}\n"
        "print(sorted(SDKS & set(sys.modules)))\n"
        "from pytest_aimeasure.testing import ProviderServer\n"
        "from tests.integration.test_backends_http import judge_request\n"
        "with ProviderServer() as server:\n"
        "    for b in (a.AnthropicBackend('claude-x', base_url=server.url, api_key='k'),\n"
        "              l.LitellmBackend('openai/gpt-x', api_base=server.openai_base_url, api_key='k')):\n"
        "        reply = asyncio.run(b.judge(judge_request()))\n"
        "        assert reply.tool_input is not None, reply\n"
        "    print(server.calls, sorted({'anthropic', 'litellm', 'openai', 'httpx'} & set(sys.modules)))\n"
    )
    root = Path(__file__).resolve().parents[2]  # `tests` importable from the child
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=root
    )
    assert result.stdout.split("\n")[:2] == ["[]", "2 ['httpx']"]
