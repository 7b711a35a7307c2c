"""A scriptable fake LLM provider on 127.0.0.1, for testing judges without a network or an API key.

:class:`ProviderServer` speaks enough of the Anthropic Messages API (``POST /v1/messages``) and the
OpenAI Chat Completions API (``POST /v1/chat/completions``, also without ``/v1``) that the real
``anthropic`` SDK and real ``litellm`` make real HTTP calls against it. A request that offers tools is
answered with a tool call carrying a verdict ``{"dimension", "score", "rationale"}``; a request without
tools is answered with plain text. What comes back can be scripted per call (:meth:`ProviderServer.script`),
per dimension (:meth:`ProviderServer.set_scores`) or by a callback, and :class:`Fault` injects the
failures real providers produce (rate limits, overload, timeouts, connection resets, malformed tool calls,
rejections).
The Message Batches API (``/v1/messages/batches``) is served too (:mod:`pytest_aimeasure.testing.batches`):
each batched request is answered by the same scripting, with a scriptable delay, partial failure and
expiry. Anthropic requests that mark ``cache_control`` breakpoints are answered with the prompt-cache usage
the real API reports (:mod:`pytest_aimeasure.testing.promptcache`).

A request with ``"stream": true`` is answered as both APIs stream (server-sent events, each a chunk of
a chunked body; :func:`~pytest_aimeasure.testing.protocols.anthropic_stream`,
:func:`~pytest_aimeasure.testing.protocols.openai_stream`). When what is sent:

* at once, as a real provider validates a request before it generates: a refusal
  (``reject_temperature_models`` ...) or a scripted error (``Fault.rate_limit``, ``server_error``,
  ``overloaded``, ``reject``) as a plain JSON error response, no stream;
* otherwise at once the 200 and the stream's headers (``SeenRequest.accepted`` records when), then
  after the latency (and a ``Fault.slow`` delay) the events, ``stream_gap`` seconds apart, and the
  stream's end;
* ``Fault.stream_error``: after the latency the first event, then an error event (Anthropic's
  ``event: error`` with the status's type, ``overloaded_error`` for 529; a Chat Completions
  ``data: {"error": ...}``) and the stream's end;
* ``Fault.stream_cut``: after the latency half of the events, then a connection reset;
* ``Fault.reset``: after the latency, a reset with no status at all.

A request that is not streamed waits its latency before anything is decided or sent, as before.

Everything the server received is recorded as :class:`SeenRequest` objects, with timing and
concurrency statistics, so tests can assert on what a client actually sent.

The server is split by seam: :mod:`~pytest_aimeasure.testing.faults` (the scripting vocabulary:
outcomes and faults, and the reply each makes), :mod:`~pytest_aimeasure.testing.protocols` (the two
wire protocols: parsing requests and rendering replies), :mod:`~pytest_aimeasure.testing.http` (the
HTTP plumbing), :mod:`~pytest_aimeasure.testing.promptcache` (Anthropic prompt caching) and this one
(the server users drive).
All are stdlib-only on purpose: the plugin's fixture imports them, and importing them must stay cheap.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from pytest_aimeasure.testing.batches import BatchDesk
from pytest_aimeasure.testing.faults import DEFAULT_SCORE, Fault, Outcome, render_outcome
from pytest_aimeasure.testing.http import Aborted, ProviderHandler, ProviderHTTPServer, Reset
from pytest_aimeasure.testing.promptcache import DEFAULT_MIN_TOKENS, PromptCache
from pytest_aimeasure.testing.protocols import Reply, SeenRequest, default_text, error_reply

__all__ = ["Fault", "Outcome", "ProviderServer", "SeenRequest"]

# Real providers keep a connection open for minutes; a test server must never hold a test hostage, so
# every sleep is cut short by stop() and additionally capped.
_MAX_SLEEP_S = 60.0
_STOP_JOIN_S = 2.0


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
        jitter: float = 0.0,
        scorer: Callable[[SeenRequest], Outcome] | None = None,
        generator: Callable[[SeenRequest], str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.latency = latency
        self.latency_by_model: dict[str, float] = {}
        self.connect_delay = 0.0
        """Seconds a new connection waits before its first request is read: what the handshakes of
        a remote provider's new TLS connection (two round trips) cost before a request can go on it."""
        self.stream_gap = 0.0
        """Seconds between a streamed reply's events (after its latency), as a provider streams the
        tokens it generates."""
        self.jitter = jitter
        """Each answer waits its latency plus a random extra of 0 to ``jitter`` seconds (uniform,
        seeded: the same sequence every run), as a real provider's latency varies from call to call."""
        self._jitter_random = random.Random(0)
        self.scorer = scorer
        self.generator = generator
        self.host = host
        self.reject_temperature_models: set[str] = set()
        self.reject_forced_tool_models: set[str] = set()
        self.prompt_cache = PromptCache(min_tokens=DEFAULT_MIN_TOKENS)
        """Anthropic prompt caching: set ``prompt_cache.min_tokens`` to the model's minimum."""

        self.batches = BatchDesk(self)
        """The Message Batches API: ``batches.delay``, ``batches.expire_next()``, counters."""

        self._lock = threading.Lock()
        self._queue: deque[Outcome] = deque()
        self._scores: dict[tuple[str | None, str], tuple[int, ...]] = {}
        self._score_calls: dict[tuple[str | None, str], int] = {}
        self._stopping = threading.Event()
        self._httpd: ProviderHTTPServer | None = None
        self._thread: threading.Thread | None = None

        self._calls = 0
        self._calls_by_model: dict[str, int] = {}
        self._judge_calls = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._requests: list[SeenRequest] = []
        self._connected: dict[int, float] = {}

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> ProviderServer:
        """Bind an ephemeral port and serve in a daemon thread. Returns self."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = ProviderHTTPServer((self.host, 0), ProviderHandler)
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

    def set_scores(self, scores: Mapping[str, int | Sequence[int]], *, model: str | None = None) -> None:
        """Per dimension, a constant score or a sequence cycled one step per call (replaces earlier ones).

        With ``model`` (the model name the request names, e.g. ``claude-opus-4-1``) the scores apply to
        that model's requests only, and take precedence over the scores set without a model: a judge
        per dimension, or a stronger judge that an item escalates to, can answer differently."""
        table: dict[tuple[str | None, str], tuple[int, ...]] = {}
        for dimension, value in scores.items():
            cycle = (value,) if isinstance(value, int) else tuple(value)
            if not cycle:
                raise ValueError(f"set_scores: empty score sequence for dimension {dimension!r}")
            table[(model, dimension)] = cycle
        with self._lock:
            self._scores.update(table)
            for key in table:
                self._score_calls[key] = 0

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

    @property
    def connected(self) -> dict[int, float]:
        """When each connection was accepted (``time.monotonic()``), by the client's port (as
        :attr:`SeenRequest.connection` names it)."""
        with self._lock:
            return dict(self._connected)

    def reset_stats(self) -> None:
        """Forget the statistics and recorded requests (the script and settings stay)."""
        with self._lock:
            self._connected = {}
            self._calls = 0
            self._calls_by_model = {}
            self._judge_calls = 0
            self._max_in_flight = self._in_flight
            self._requests = []

    # -- request handling (called from handler threads) --------------------------------------------

    def _connect(self, port: int) -> None:
        with self._lock:
            self._connected[port] = time.monotonic()

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
            raise Aborted

    def _next_outcome(self, seen: SeenRequest) -> Outcome | None:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            if seen.has_tools and seen.dimension is not None:
                for key in ((seen.model, seen.dimension), (None, seen.dimension)):
                    if key in self._scores:
                        cycle = self._scores[key]
                        step = self._score_calls[key]
                        self._score_calls[key] = step + 1
                        return cycle[step % len(cycle)]
        return None

    def _default_outcome(self, seen: SeenRequest) -> Outcome:
        if not seen.has_tools:
            if self.generator is not None:
                return self.generator(seen)
            return default_text(seen)
        if self.scorer is not None:
            return self.scorer(seen)
        return DEFAULT_SCORE

    def _respond(self, seen: SeenRequest, accept: Callable[[], None] | None = None) -> Reply:
        """Decide the reply for a parsed request (runs in the handler thread, may sleep). ``accept``,
        for a streamed request, sends the stream's 200 and headers: called before the latency when
        the request is answered with a stream (see :meth:`_decide`)."""
        # The cache is looked up when the request arrives and written when it is answered.
        plan = self.prompt_cache.plan(seen.body) if seen.protocol == "anthropic" else None
        reply = self._decide(seen, accept)
        usage = reply.payload.get("usage") if reply.status == 200 else None
        # (Fault.bad_usage's figures go out as scripted: only a real count is split by the cache.)
        counted = usage.get("input_tokens") if isinstance(usage, dict) else None  # OpenAI's has none
        real = type(counted) is int and counted >= 0
        if isinstance(usage, dict) and seen.protocol == "anthropic" and real:
            read = plan.read_tokens if plan is not None else 0
            write = plan.write_tokens if plan is not None else 0
            usage["input_tokens"] = max(int(usage["input_tokens"]) - read - write, 0)
            usage["cache_read_input_tokens"] = read
            usage["cache_creation_input_tokens"] = write
            if plan is not None:
                self.prompt_cache.commit(plan)
        return reply

    def _decide(self, seen: SeenRequest, accept: Callable[[], None] | None = None) -> Reply:
        """The reply, after the latency. A request that is not streamed waits its latency first, then
        is checked and answered. A streamed one (``accept`` given) is checked at once, as a provider
        validates a request before it generates: a rejection or a scripted error (429, 500, 529,
        :meth:`Fault.reject`) goes back at once as a plain error response; otherwise ``accept()``
        sends the 200 and the stream's headers, and the events follow after the latency."""
        extra = self._jitter_random.uniform(0.0, self.jitter) if self.jitter > 0 else 0.0
        wait = self.latency_by_model.get(seen.model, self.latency) + extra
        if accept is None:
            self._sleep(wait)
            wait = 0.0

        if seen.model in self.reject_temperature_models and seen.temperature is not None:
            return error_reply(
                seen.protocol,
                400,
                f"temperature is not supported for model {seen.model}; remove the temperature parameter",
                param="temperature",
            )
        if seen.model in self.reject_forced_tool_models and seen.forced:
            return error_reply(
                seen.protocol,
                400,
                f"tool_choice forcing a tool is not supported for model {seen.model}; use tool_choice auto",
                param="tool_choice",
            )

        outcome = self._next_outcome(seen)
        if isinstance(outcome, Fault) and outcome.kind == "slow":
            wait = self._wait(wait + outcome.delay, accept)
            outcome = None
        if outcome is None:
            outcome = self._default_outcome(seen)
        if isinstance(outcome, Fault) and outcome.kind == "slow":
            # A scorer may return slow too; sleep, then fall back to the plain default.
            wait = self._wait(wait + outcome.delay, accept)
            outcome = DEFAULT_SCORE if seen.has_tools else default_text(seen)
        dropped = isinstance(outcome, Fault) and (
            outcome.kind == "reset" or (outcome.kind == "stream_cut" and not seen.streamed)
        )
        if dropped:
            self._sleep(wait)
            raise Reset  # the handler drops the connection: no reply at all
        reply = render_outcome(seen, outcome)
        if accept is not None and reply.status == 200:
            accept()
            self._sleep(wait)
            if self.stream_gap > 0:
                reply = replace(reply, gap=self.stream_gap)
        return reply

    def _wait(self, seconds: float, accept: Callable[[], None] | None) -> float:
        """Sleep now for a request that is not streamed (0 left to wait); a streamed one waits after
        its headers went out (the seconds are carried)."""
        if accept is None:
            self._sleep(seconds)
            return 0.0
        return seconds
