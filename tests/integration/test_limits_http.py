"""Shared back-pressure and prompt caching over real HTTP: the judge engine with the real anthropic and
litellm backends against the local provider server, counted on the server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError
from typing import Any

import pytest

from pytest_aimeasure.judge.backends.base import Backend, Quirks
from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.judge.resolve import build_backend
from pytest_aimeasure.measure.models import Measurement
from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest

KINDS = ["anthropic", "litellm"]
RETRY_AFTER = 1.0


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as srv:
        yield srv


def engine_for(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch, **settings: Any
) -> JudgeEngine:
    """An engine as the session builds it: backends without SDK retries, the engine retrying."""
    if kind == "anthropic":
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        model = "anthropic/claude-test"
    else:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        model = "openai/gpt-test"

    def make_backend(name: str) -> Backend:
        return build_backend(name, timeout=20.0, retries=0)

    return JudgeEngine(JudgeSettings(model=model, **settings), make_backend=make_backend)


def spec(i: int, *, rubric: str = "Is it polite?", samples: int = 3) -> ItemSpec:
    return ItemSpec(
        nodeid=f"test_x.py::test_{i}",
        item_id=f"test_x.py::test_{i}",
        dimension="tone",
        rubric=rubric,
        artifact=f"Answer number {i}: thank you for asking.",
        samples=samples,
    )


def measure_all(engine: JudgeEngine, specs: list[ItemSpec], *, timeout: float = 120) -> list[Measurement]:
    futures = [engine.submit(engine.ameasure(s)) for s in specs]
    return [f.result(timeout=timeout) for f in futures]


@pytest.mark.parametrize("kind", KINDS)
def test_one_429_with_retry_after_pauses_every_pending_call(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 calls in flight, 8 more waiting. The first answer to them is a 429 asking for 1 s; the other
    three in flight are held by the server until the engine has taken the 429 in, then answered at
    once, which frees their slots. No call may reach the server before the retry-after has passed: not
    the waiting ones (whose slots are free), not the retry of the call that got it. Before, each SDK
    retried its own call, and the waiting calls went out as soon as slots were free. (The model's
    first call goes out alone and streams; the others go at its 200, while it may still hold its
    slot until its events are read: 3 or 4 calls are in the wave that meets the 429.)"""
    engine = engine_for(kind, server, monkeypatch, concurrency=4, retries=2)
    engine_saw_it = threading.Event()

    def scorer(seen: SeenRequest) -> int:
        engine_saw_it.wait(30)  # bounded: a broken engine fails the assertions below, never hangs
        return 4

    server.scorer = scorer
    server.script(4, Fault.rate_limit(retry_after=RETRY_AFTER))
    try:
        futures = [engine.submit(engine.ameasure(spec(i))) for i in range(4)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            limit.rate_limited for limit in list(engine.spend.limits.values())
        ):
            time.sleep(0.005)
        took_it_in = any(limit.rate_limited for limit in engine.spend.limits.values())
        engine_saw_it.set()
        measurements = [f.result(timeout=60) for f in futures]
        spend = engine.spend.as_dict()
    finally:
        engine_saw_it.set()
        engine.close()

    assert took_it_in, "the 429 never reached the engine (did the SDK retry it by itself?)"
    assert [m.n for m in measurements] == [3, 3, 3, 3]
    requests = server.requests
    assert [r.status for r in requests].count(429) == 1
    assert len(requests) == 12 + 1  # every sample once, plus the one retry
    (limited,) = [r for r in requests if r.status == 429]
    # The engine learnt of the 429 after the server received that request, so the pause it set
    # ends at the earliest RETRY_AFTER after that arrival: only the first wave arrived before.
    early = [r for r in requests if r.started < limited.started + RETRY_AFTER]
    # The first call and the wave in flight (3 while the first call still held its slot, else 4);
    # a pause that did not hold would let the waiting calls in as the wave's slots freed.
    assert 1 + 3 <= len(early) <= 1 + 4, [(round(r.started - limited.started, 3), r.status) for r in requests]
    assert limited in early and requests[0] in early
    assert spend["rate_limited"] == 1
    assert spend["transport_retries"] == 1
    assert spend["rate_limit_wait_s"] == pytest.approx(RETRY_AFTER)
    assert spend["max_in_flight"] == 4
    assert server.max_in_flight <= 4
    (limit,) = engine.spend.limits.values()
    assert limit.lowest_limit == 2  # halved by the 429


@pytest.mark.parametrize("kind", KINDS)
def test_rate_limits_beyond_the_retries_are_a_judge_error_naming_the_attempts(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_aimeasure.judge.errors import JudgeError

    engine = engine_for(kind, server, monkeypatch, concurrency=2, retries=1)
    server.script(Fault.overloaded(), Fault.rate_limit(retry_after=0.01))
    try:
        with pytest.raises(JudgeError, match=r"2 attempts, --judge-retries 1"):
            engine.run(engine.ameasure(spec(0, samples=1)))
    finally:
        engine.close()
    assert [r.status for r in server.requests] == [529, 429]
    assert engine.spend.as_dict()["rate_limited"] == 2


LONG_RUBRIC = " ".join(
    f"Criterion {i}: the answer keeps a courteous, even register and avoids sarcasm or blame."
    for i in range(80)
)


def test_the_fixed_prefix_is_marked_and_read_from_the_cache_from_the_second_call(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_for("anthropic", server, monkeypatch, concurrency=1, samples=1)
    try:
        first, second = measure_all(
            engine, [spec(0, rubric=LONG_RUBRIC, samples=1), spec(1, rubric=LONG_RUBRIC, samples=1)]
        )
        spend = engine.spend.as_dict()
    finally:
        engine.close()
    body = server.requests[0].body
    assert body["tools"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    fixed, per_item = body["messages"][0]["content"]
    assert fixed["cache_control"] == {"type": "ephemeral"} and "cache_control" not in per_item
    assert fixed["text"].startswith("Dimension: tone\n\nRubric:\n") and LONG_RUBRIC in fixed["text"]
    assert "Answer number 0" in per_item["text"]
    one, two = first.samples[0].usage, second.samples[0].usage
    assert one.cache_creation_input_tokens > 1024 and one.cache_read_input_tokens == 0
    assert two.cache_read_input_tokens == one.cache_creation_input_tokens
    assert two.cache_creation_input_tokens == 0
    assert two.input_tokens < one.input_tokens + one.cache_creation_input_tokens  # the rest is uncached
    assert spend["cache_read_input_tokens"] == two.cache_read_input_tokens
    assert spend["cache_creation_input_tokens"] == one.cache_creation_input_tokens


@pytest.fixture
def fresh_price_map() -> Iterator[None]:
    """The price map as a new process has it: not read yet (and not left behind changed)."""
    from pytest_aimeasure.store import cost

    def clear() -> None:
        cost._price_map.cache_clear()
        cost.price_for.cache_clear()
        cost._providers.cache_clear()

    clear()
    yield
    clear()


def test_the_first_call_goes_out_before_the_price_map_is_read(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch, fresh_price_map: None
) -> None:
    # The price map (litellm's 3 MB file; genai-prices' data on a core install, 0.4 s of CPU) was
    # read to decide whether to mark the prompt for caching before the session's first request. The
    # first call marks it without the map; the calls after its answer follow what the map says.
    from pytest_aimeasure.store import cost

    read = cost._price_map._load
    requests_when_read: list[int] = []

    def load() -> dict[str, dict[str, Any]]:
        requests_when_read.append(len(server.requests))
        # A price entry that says the model cannot cache: it decides the later calls' markers.
        entry = {"litellm_provider": "anthropic", "supports_prompt_caching": False}
        prices = {"input_cost_per_token": 1e-6, "output_cost_per_token": 5e-6}
        return {**read(), "claude-test": {**entry, **prices}}

    monkeypatch.setattr(cost._price_map, "_load", load)
    engine = engine_for("anthropic", server, monkeypatch, concurrency=1, samples=1)
    try:
        measure_all(engine, [spec(0, samples=1), spec(1, samples=1)])
    finally:
        engine.close()
    assert requests_when_read and requests_when_read[0] >= 1  # read once the first request was out
    marked = ["cache_control" in r.body["tools"][0] for r in server.requests]
    assert marked == [True, False]


def test_a_later_session_follows_the_price_map_on_prompt_caching_after_its_first_answer(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch, fresh_price_map: None
) -> None:
    # A later session (what the model refuses remembered) has no first call to wait for, and it
    # never asked the map: every call marked the prompt for caching, for a model the map says
    # cannot cache.
    from pytest_aimeasure.store import cost

    read = cost._price_map._load

    def load() -> dict[str, dict[str, Any]]:
        entry = {"litellm_provider": "anthropic", "supports_prompt_caching": False}
        prices = {"input_cost_per_token": 1e-6, "output_cost_per_token": 5e-6}
        return {**read(), "claude-test": {**entry, **prices}}

    monkeypatch.setattr(cost._price_map, "_load", load)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    backend = build_backend("anthropic/claude-test", timeout=20.0, retries=0)
    backend.quirks.remember({})  # an earlier session's answers: nothing refused

    def make_backend(name: str) -> Backend:
        return backend

    engine = JudgeEngine(
        JudgeSettings(model="anthropic/claude-test", concurrency=1, samples=1), make_backend=make_backend
    )
    try:
        measure_all(engine, [spec(0, samples=1), spec(1, samples=1)])
    finally:
        engine.close()
    marked = ["cache_control" in r.body["tools"][0] for r in server.requests]
    assert marked == [True, False]


@pytest.mark.parametrize("kind", KINDS)
def test_the_call_waiting_for_a_slot_is_sent_before_the_answer_that_freed_it_is_read(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slot goes to the next call the moment the answer is in, from the transport's callback
    # (base.ANSWERED), not once the answer has been read and handed back: between the two lay
    # three turns of the event loop, each behind the other answers that came meanwhile, and every
    # round of a session paid them again. One call at a time, in a later session (no first call
    # streamed alone): the second request is written before the first reply is decoded.
    from pytest_aimeasure.judge.backends import http, wire

    events: list[str] = []
    post, decoded = wire.Wire.post, http._decoded

    async def sending(self: wire.Wire, *args: Any, **kwargs: Any) -> wire.Reply:
        events.append("send")
        return await post(self, *args, **kwargs)

    def reading(response: Any) -> Any:
        events.append("read")
        return decoded(response)

    monkeypatch.setattr(wire.Wire, "post", sending)
    monkeypatch.setattr(http, "_decoded", reading)
    engine = engine_for(kind, server, monkeypatch, concurrency=1)
    made = engine.backend()
    assert isinstance(made.quirks, Quirks)
    made.quirks.remember({})  # an earlier session's answers: nothing refused, no first call
    try:
        measure_all(engine, [spec(0, samples=2)])
    finally:
        engine.close()
    assert events == ["send", "send", "read", "read"]
    assert server.max_in_flight == 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_calls_sent_with_a_first_call_that_got_a_429_wait_out_its_cooldown_at_the_halved_limit(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The calls sent with a model's first call wait for it (what it refuses is learned once). They
    # waited holding their slots of the limit, so when it ended with a 429 they all went at once,
    # in the cooldown it asked for, at the limit before the halving (8 here).
    pause = 0.5
    server.latency = 0.1
    server.script(Fault.rate_limit(retry_after=pause))
    engine = engine_for(kind, server, monkeypatch, concurrency=8, samples=4, retries=2)
    try:
        measure_all(engine, [spec(0, samples=4), spec(1, samples=4)])
    finally:
        engine.close()
    first, *others = sorted(server.requests, key=lambda r: r.started)
    assert first.status == 429 and len(others) == 8
    assert min(r.started for r in others) >= first.finished + pause - 0.1  # its cooldown
    assert server.max_in_flight <= 4  # the halved limit


@pytest.mark.parametrize("kind", KINDS)
def test_the_price_map_is_read_while_the_first_call_is_answered(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch, fresh_price_map: None
) -> None:
    # It was read on the judge's loop when the first answer's cost was computed (and, for the
    # calls after it, whether to mark their prompt for caching): tens of ms before any call that
    # waited for that answer could go. The server holds the first answer until the map is read.
    from pytest_aimeasure.store import cost

    read = cost._price_map._load
    map_read = threading.Event()

    def load() -> dict[str, dict[str, Any]]:
        map_read.set()
        return read()

    read_while_held: list[bool] = []

    def scorer(seen: SeenRequest) -> int:
        read_while_held.append(map_read.wait(timeout=5.0))
        return 4

    monkeypatch.setattr(cost._price_map, "_load", load)
    server.scorer = scorer
    engine = engine_for(kind, server, monkeypatch, concurrency=1, samples=1)
    try:
        measure_all(engine, [spec(0, samples=1)])
    finally:
        engine.close()
    assert read_while_held == [True]


def test_a_model_that_rejects_cache_control_is_called_again_without_it(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_for("anthropic", server, monkeypatch, concurrency=1, samples=1)
    server.script(Fault.reject(400, "cache_control is not supported on this model"))
    try:
        measure_all(engine, [spec(0, samples=1), spec(1, samples=1)])
    finally:
        engine.close()
    marked = ["cache_control" in r.body["tools"][0] for r in server.requests]
    assert marked == [True, False, False]  # rejected once, then never sent again


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_forced_tool_is_learned_once_a_session_and_said_once(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four items of three samples, all sent together: the model's refusal of a forced tool call is
    # one 400 for the session, not one per sample in flight, and one line says what it means.
    server.reject_forced_tool_models.add("claude-test" if kind == "anthropic" else "gpt-test")
    engine = engine_for(kind, server, monkeypatch, concurrency=8)
    said: list[str] = []
    engine.notice = said.append
    try:
        measured = measure_all(engine, [spec(i) for i in range(4)])
    finally:
        engine.close()
    assert [(r.forced, r.status) for r in server.requests if r.status != 200] == [(True, 400)]
    assert sum(1 for r in server.requests if r.status == 200 and not r.forced) == 12
    assert {m.fingerprint.tool_mode for m in measured} == {"auto"}
    (line,) = said
    model = "claude-test" if kind == "anthropic" else "openai/gpt-test"
    assert line.startswith(f"aimeasure: the judge {model} (")
    assert "refuses forced tool use (HTTP 400 on tool_choice)" in line


@pytest.mark.parametrize("transport", ["wire", "aiohttp", "httpx"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_call_in_flight_when_the_engine_closes_is_cancelled_not_failed_by_its_closed_client(
    kind: str, transport: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted session closes its engine with calls still out. The backends' HTTP clients
    were closed before the calls were cancelled: the call in flight failed on its closed client
    ("could not reach the Anthropic API ... Server disconnected", a judge error without retries, a
    transport retry counted with them) before the cancel reached it."""
    from pytest_aimeasure.judge.backends import http

    if transport != "wire":
        monkeypatch.setattr(http, "USE_WIRE", False)
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    if transport == "httpx":
        monkeypatch.setattr(http, "USE_AIOHTTP", False)
    server.latency = 30.0  # (cut short when the server stops)
    engine = engine_for(kind, server, monkeypatch, concurrency=2, retries=0)
    try:
        future = engine.submit(engine.ameasure(spec(0, samples=1)))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and server.in_flight < 1:
            time.sleep(0.005)
        assert server.in_flight == 1, "the call never reached the server"
    finally:
        engine.close()
    with pytest.raises(CancelledError):
        future.result(timeout=5)
    assert engine.spend.transport_retries == 0
    assert server.calls == 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_calls_queued_behind_the_first_call_go_on_connections_opened_while_it_was_out(
    kind: str, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new connection to a remote provider costs its handshakes (two round trips over TLS) before
    # a request can go on it. The calls queued behind a model's first call opened theirs once it
    # was accepted, each then paying them; the calls that fill slow start's first round did the same
    # for the round after it. The server here reads a new connection's first request 0.2 s after it
    # accepted it (the first call's own connection too).
    server.connect_delay = 0.2
    engine = engine_for(kind, server, monkeypatch, concurrency=4)
    try:
        measure_all(engine, [spec(0), spec(1)])
    finally:
        engine.close()
    first, *others = sorted(server.requests, key=lambda r: r.started)
    connected = server.connected
    assert first.accepted is not None and len(others) == 5
    # The three that had room when the first call was accepted: each on a connection open before.
    assert [connected[r.connection] < first.accepted for r in others[:3]] == [True] * 3
    assert len(connected) == 5  # the first call's (it streams) and the four the limit lets go at once
