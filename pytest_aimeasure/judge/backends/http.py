"""JSON over HTTP for the judge's native routes: the Messages API (``anthropic/``) and Chat
Completions (``openai/``), rather than through an SDK. The unstreamed calls (all but a model's
first) are written straight to kept-alive connections (:mod:`~pytest_aimeasure.judge.backends.wire`,
which says why); a streamed call is spoken through aiohttp when it is installed (the ``litellm`` extra
brings it) and through httpx otherwise, and every call through httpx when a proxy applies.

Why aiohttp before httpx for streams (and for every call with :data:`USE_WIRE` off): its HTTP parser
and connection pool are C and plain dictionaries, where httpx's are pure Python (httpcore, h11,
anyio): the judge's loop thread spent 0.65-0.71 ms of CPU per call in httpx against 0.31-0.34 ms in
aiohttp (900 calls, 64 in flight, against the local server). httpx stays a core dependency (aiohttp
is not one), and it carries every call when the environment names a proxy (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``: httpx's rules for them, SOCKS included, stay the ones that apply).
Whichever path a call takes, the callers see httpx's exceptions.

Why not the SDKs: a judge call is one POST and one JSON reply, while ``import anthropic`` costs about
2 s of CPU and ``import litellm`` about 6 s (thousands of pydantic models, a price map), all of it
before the session's first judge request. httpx, which both SDKs use underneath, imports in about
0.2 s. The SDKs stay for what needs them: the batch APIs (``--judge-batch``) and litellm's other
providers.

The engine retries (``--judge-retries``) and reads ``retry-after`` itself, so this layer sends each
request once; ``max_retries`` only repeats a call that timed out, or a 408/409/429/5xx, the way the
SDKs did for a backend built with retries of its own.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import select
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from pytest_aimeasure.judge.backends.base import ANSWERED, built_from_environ, parse_retry_after
from pytest_aimeasure.judge.backends.streams import StreamCut, StreamFailed, StreamReader

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "HttpStatusError",
    "JsonApi",
    "OnJsonApi",
    "Streamed",
    "View",
    "import_aiohttp",
    "import_httpx",
    "tls_context",
]

DEFAULT_TIMEOUT_S = 600.0
"""A call's limit when none is set: the SDKs' default (10 minutes), connecting within 5 s."""

_RETRIED = frozenset({408, 409, 429}) | frozenset(range(500, 600))

POOL_SHARDS = 8
"""httpx clients per API and event loop, each request going to the least busy one. httpcore's pool
scans every connection it holds (and polls each idle one's socket) whenever a request starts or
ends, so one pool of 64 connections cost the judge's loop thread more time per call than the call's
own work: calls in flight then waited for the loop, not for the provider."""


HTTPX_CLI = "httpx._main"

USE_AIOHTTP = True
"""Send through aiohttp when it is installed and no proxy applies; False sends through httpx always
(the tests run both paths)."""

USE_WIRE = True
"""Send the unstreamed calls through :mod:`~pytest_aimeasure.judge.backends.wire` when no proxy
applies; False sends them as the streamed ones go, through aiohttp or httpx (the tests run every path)."""


def import_aiohttp() -> Any | None:
    """aiohttp, when it is installed and :data:`USE_AIOHTTP` (else None)."""
    if not USE_AIOHTTP:
        return None
    try:
        import aiohttp
    except ImportError:
        return None
    return aiohttp


def _proxied() -> bool:
    """Whether the environment names a proxy httpx would send through (its own reading of the
    variables: ``urllib``'s, which also asks the system's settings on macOS and Windows)."""
    proxies = built_from_environ(urllib.request.getproxies)
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def import_httpx() -> None:
    """Import httpx without its command-line client. httpx's ``__init__`` tries ``httpx._main``,
    which imports click and pygments (about 30 ms, a sixth of the import) whenever click is
    installed (litellm installs it), even when rich is missing and the import then fails; the judge
    never runs that client, and its import sat on the first request's path.
    A ``None`` in ``sys.modules`` makes that one import fail, and httpx then binds ``httpx.main`` to
    its stub; the entry is removed at once, so a later ``import httpx._main`` works (the ``httpx``
    command runs in a process of its own)."""
    if "httpx" in sys.modules:
        return
    blocked = HTTPX_CLI not in sys.modules
    if blocked:
        sys.modules[HTTPX_CLI] = None  # type: ignore[assignment]
    try:
        import httpx  # noqa: F401
    finally:
        if blocked and HTTPX_CLI in sys.modules and sys.modules[HTTPX_CLI] is None:
            del sys.modules[HTTPX_CLI]


RECENTLY_READ_S = 0.05
"""An idle connection whose last read returned less than this long ago is not polled for a close
by the server: httpcore's pool asks every idle connection whenever a request starts or ends (many
times a second under load), while a server closes a kept-alive connection after seconds of
idleness, or says so in the reply (``Connection: close``, which httpcore follows itself)."""


_TLS: dict[tuple[str | None, str | None], Any] = {}
_TLS_LOCK = threading.Lock()


def tls_context() -> Any:
    """The process's one TLS context for the judge's clients, as httpx would build each (certifi's CA
    bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``). Loading the bundle takes about 70 ms, and every
    client of every shard loaded its own: 0.6 s of the first request's wait went to eight copies of
    one file. Built once per bundle, so a test that sets the variables still gets its own."""
    import httpx

    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _TLS_LOCK:
        context = _TLS.get(key)
        if context is None:
            context = _TLS[key] = httpx.create_ssl_context()
        return context


class View:
    """Attribute access to a decoded JSON object (``reply.usage.input_tokens``), so a reply is read
    the way an SDK's typed reply was; a missing field raises AttributeError (``getattr(x, f, 0)``)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return _view(self._data[name])
        except KeyError:
            raise AttributeError(name) from None

    def dump(self) -> dict[str, Any]:
        """The object as decoded, without its null fields (as an SDK's ``model_dump(exclude_none=True)``)."""
        return {key: value for key, value in self._data.items() if value is not None}

    def __repr__(self) -> str:
        return f"View({self._data!r})"


def _view(value: Any) -> Any:
    if isinstance(value, Mapping):
        return View(value)
    if isinstance(value, list):
        return [_view(item) for item in value]
    return value


class HttpStatusError(Exception):
    """A reply with an HTTP error status: its code, the provider's own message and error type, and
    the response (its headers carry ``retry-after``)."""

    def __init__(self, status: int, message: str, kind: str | None, response: Any) -> None:
        super().__init__(message)
        self.status_code = status
        self.message = message
        self.type = kind
        self.response = response


class Streamed:
    """How to stream one call (:meth:`JsonApi.post`): ``reader()`` makes a fresh reader of the
    stream for each attempt, and ``accepted()`` is called as soon as a reply's status says the
    provider accepted the request (a 2xx), before its body is read."""

    __slots__ = ("accepted", "reader")

    def __init__(self, reader: Callable[[], StreamReader], accepted: Callable[[], None]) -> None:
        self.reader = reader
        self.accepted = accepted


class JsonApi:
    """POSTs JSON to one provider's base URL with fixed headers, through the clients of the running
    event loop (a connection pool belongs to the loop that opened it): the wire for the unstreamed
    calls, and aiohttp's session or :data:`POOL_SHARDS` httpx clients for the streamed ones (and for
    every call when a proxy applies)."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: float | None,
        max_retries: int = 0,
        after_first_request: Callable[[], None] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._after_first_request = after_first_request
        """Called on the loop once the first request is written (its reply awaited): work that the
        first reply's handling needs, done while the provider answers."""
        self.headers = dict(headers)
        self.timeout = timeout
        self.max_retries = max_retries
        self._clients: list[Any] = []
        self._busy: list[int] = []  # requests in flight per client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._direct: list[tuple[Any, Any]] = []  # per client: (its transport for base_url, headers)
        self._urls: dict[str, Any] = {}  # path -> httpx.URL, parsed once
        self._targets: dict[Any, tuple[Any, list[tuple[bytes, bytes]]]] = {}  # URL -> httpcore's, headers
        self._timeouts: dict[float, dict[str, float | None]] = {}  # seconds -> the request's timeouts
        self._session: Any = None  # aiohttp's, when it carries the calls (see _ready)
        self._session_timeouts: dict[float, Any] = {}  # seconds -> aiohttp's ClientTimeout
        self._first_trace: Any = None  # aiohttp's trace of the first request (after_first_request)
        self._wire: Any = None  # the unstreamed calls' transport, when no proxy applies (see _ready)

    def _ready(self) -> None:
        """The clients for the running loop: the wire (:data:`USE_WIRE`, no proxy), and one aiohttp
        session (:func:`import_aiohttp`, no proxy), else the httpx shards."""
        loop = asyncio.get_running_loop()
        if self._loop is loop and (self._session is not None or self._clients):
            return
        self._drop()
        proxied = _proxied()
        if USE_WIRE and not proxied:
            from pytest_aimeasure.judge.backends.wire import Wire

            self._wire = Wire(
                self.base_url, self.headers, tls_context() if self.base_url.startswith("https:") else None
            )
        aiohttp = import_aiohttp()
        if aiohttp is not None and not proxied:
            self._session = self._aiohttp_session(aiohttp)
            self._loop = loop
        else:
            self._least_busy()

    def open_ahead(self, connections: int) -> None:
        """Have ``connections`` connections open or opening for the unstreamed calls about to go
        (:meth:`Wire.open_ahead <pytest_aimeasure.judge.backends.wire.Wire.open_ahead>`); nothing
        where the wire does not carry them (a proxy, ``USE_WIRE`` off)."""
        self._ready()
        if self._wire is not None:
            self._wire.open_ahead(connections)

    def _aiohttp_session(self, aiohttp: Any) -> Any:
        traces = []
        if self._after_first_request is not None:
            self._first_trace = aiohttp.TraceConfig()
            self._first_trace.on_request_headers_sent.append(self._first_sent)
            traces.append(self._first_trace)
        # The judge's calls in flight are bounded by the engine's limit, not by the pool (limit=0).
        # Proxies were ruled out above (trust_env off: the environment was read once, there).
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=tls_context()),
            headers={**self.headers, "content-type": "application/json"},
            trace_configs=traces,
        )

    async def _first_sent(self, session: Any, context: Any, params: Any) -> None:
        # aiohttp's trace of the first request: its headers are out, its body goes with them.
        self._first_written()
        configs = getattr(session, "_trace_configs", None)
        if isinstance(configs, list) and self._first_trace in configs:
            configs.remove(self._first_trace)  # the later requests skip tracing (a private list)

    def _drop(self) -> None:
        """Forget clients opened on another loop (they cannot be closed from this one)."""
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.forget()
        session, self._session = self._session, None
        if session is not None and not session.closed:
            session.detach()  # closed from here on (no warning for it); its loop took its sockets
        self._clients, self._busy, self._loop = [], [], None

    def _least_busy(self) -> int:
        import httpx

        loop = asyncio.get_running_loop()
        if not self._clients or self._loop is not loop:
            # The judge's calls in flight are bounded by the engine's limit, not by the pools.
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=32)
            tls = tls_context()
            self._clients = [
                built_from_environ(lambda: httpx.AsyncClient(headers=self.headers, limits=limits, verify=tls))
                for _ in range(POOL_SHARDS)
            ]
            self._busy = [0] * POOL_SHARDS
            self._loop = loop
            self._direct = [_direct_route(client, self.base_url) for client in self._clients]
        return min(range(POOL_SHARDS), key=self._busy.__getitem__)

    async def post(
        self,
        path: str,
        body: Mapping[str, Any],
        timeout: float | None = None,
        *,
        stream: Streamed | None = None,
    ) -> View:
        """The decoded reply of ``POST base_url + path``; raises :class:`HttpStatusError` on an error
        status, httpx's ``TimeoutException`` / ``TransportError`` when no reply came.

        With ``stream`` (the body asks for one: ``"stream": true``), the reply's status is acted on
        when it arrives (``stream.accepted()``), then its events are read into the reply an
        unstreamed call gets (``stream.reader()``): an error event inside the stream raises
        :class:`HttpStatusError` with the status that error has unstreamed, a stream that ends
        unfinished httpx's ``RemoteProtocolError``. A reply that is JSON (a server that does not
        stream) is read as it is."""
        import httpx

        limit = timeout if timeout is not None else self.timeout
        seconds = limit if limit is not None else DEFAULT_TIMEOUT_S
        content = json.dumps(body, ensure_ascii=False).encode()
        attempt = 0
        while True:
            wait: float | None = None
            self._ready()
            session = self._session
            wire = self._wire if stream is None else None
            # Only the calls an httpx shard carries count toward picking the least busy one.
            shard, busy = (
                (0, [0]) if session is not None or wire is not None else (self._least_busy(), self._busy)
            )
            busy[shard] += 1
            try:
                if stream is not None:
                    response = await self._stream(session, shard, path, content, seconds, stream)
                elif wire is not None:
                    response = await self._send_wire(wire, path, content, seconds)
                elif session is not None:
                    response = await self._send_aiohttp(session, path, content, seconds)
                else:
                    response = await self._send(shard, path, content, seconds)
            except httpx.TimeoutException:
                if attempt >= self.max_retries:
                    raise
            except StreamFailed as failed:
                error = HttpStatusError(failed.status, failed.message, failed.kind, None)
                if attempt >= self.max_retries or failed.status not in _RETRIED:
                    raise error from failed
            else:
                if response.status_code < 400:
                    return _decoded(response)
                if attempt >= self.max_retries or response.status_code not in _RETRIED:
                    raise _status_error(response)
                wait = parse_retry_after(response.headers)
            finally:
                busy[shard] -= 1
            attempt += 1
            if wait is None:  # the SDKs' backoff: 0.5 s doubling, at most 8 s, with jitter
                wait = min(8.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.75, 1.0)
            await asyncio.sleep(wait)

    async def _stream(
        self, session: Any, shard: int, path: str, content: bytes, seconds: float, stream: Streamed
    ) -> Any:
        """One streamed POST through aiohttp or the httpx shard's client: the reply's status acted on
        when it arrives, then its events read (:meth:`post`). Returns what :meth:`_send` does (the
        reply, a 2xx one decoded), raises what it raises; a stream cut short or unreadable is httpx's
        ``RemoteProtocolError``."""
        import httpx

        url = self.base_url + path
        reader = stream.reader()
        if session is not None:
            sent = self._stream_aiohttp(session, url, content, seconds, stream, reader)
        else:
            sent = self._stream_httpx(shard, url, content, seconds, stream, reader)
        try:
            # The call's limit is for the whole reply, as unstreamed (where nothing comes before the
            # whole reply, so the limit on each read is one on the reply): a stream's events each
            # come within it while the reply takes longer.
            return await asyncio.wait_for(sent, seconds)
        except asyncio.TimeoutError as exc:  # the HTTP stacks' own timeouts were mapped to httpx's
            raise httpx.ReadTimeout(
                f"no whole reply within {seconds:g}s", request=httpx.Request("POST", url)
            ) from exc
        except (StreamCut, ValueError) as exc:  # ValueError: an event that is not JSON (or UTF-8)
            raise httpx.RemoteProtocolError(str(exc), request=httpx.Request("POST", url)) from exc

    async def _stream_aiohttp(
        self, session: Any, url: str, content: bytes, seconds: float, stream: Streamed, reader: StreamReader
    ) -> Any:
        try:
            async with session.post(url, data=content, timeout=self._aiohttp_timeout(seconds)) as reply:
                status = reply.status
                if status < 400:
                    stream.accepted()
                    if "json" in reply.headers.get("content-type", ""):
                        return _Body(status, await reply.read())
                    async for data in reply.content.iter_any():
                        reader.feed(data)
                    return _Parsed(status, reader.result())
                return _error_response(reply, await reply.read(), url)
        except Exception as exc:
            mapped = _httpx_error(exc, url)
            if mapped is None:
                raise
            raise mapped from exc

    async def _stream_httpx(
        self, shard: int, url: str, content: bytes, seconds: float, stream: Streamed, reader: StreamReader
    ) -> Any:
        import httpx

        client = self._clients[shard]
        extensions = {"trace": self._trace} if self._after_first_request is not None else None
        request = client.build_request(
            "POST",
            url,
            content=content,
            headers={"content-type": "application/json"},
            timeout=httpx.Timeout(seconds, connect=min(5.0, seconds)),
            extensions=extensions,
        )
        response = await client.send(request, stream=True)
        try:
            if response.status_code >= 400:
                await response.aread()
                return response
            stream.accepted()
            if "json" in response.headers.get("content-type", ""):
                await response.aread()
                return _Body(response.status_code, response.content)
            async for data in response.aiter_bytes():
                reader.feed(data)
            return _Parsed(response.status_code, reader.result())
        finally:
            await response.aclose()

    def _aiohttp_timeout(self, seconds: float) -> Any:
        """aiohttp's timeouts for a call's limit: httpx's (connecting within 5 s, each read within
        the limit), built once per limit."""
        import aiohttp

        timeout = self._session_timeouts.get(seconds)
        if timeout is None:
            timeout = self._session_timeouts[seconds] = aiohttp.ClientTimeout(
                total=None, connect=seconds, sock_connect=min(5.0, seconds), sock_read=seconds
            )
        return timeout

    async def _send_wire(self, wire: Any, path: str, content: bytes, seconds: float) -> Any:
        """One POST through the wire (:mod:`~pytest_aimeasure.judge.backends.wire`): the call's
        slot freed as soon as a 2xx reply is in (:data:`~pytest_aimeasure.judge.backends.base.
        ANSWERED`). A reply that is an error, or encoded (gzip), becomes the httpx response it was,
        so its status, headers and text read as on the other paths."""
        sent = self._first_written if self._after_first_request is not None else None
        reply = await wire.post(path, content, seconds, answered=ANSWERED.get(), sent=sent)
        encoded = reply.header("content-encoding") not in (None, "identity")
        return await _read_whole(reply.status, reply.headers, reply.body, self.base_url + path, encoded)

    def _first_written(self) -> None:
        """The first request is out and its reply awaited (whichever transport carried it): the
        work that the reply's handling needs starts now (``after_first_request``), once."""
        if self._after_first_request is not None:
            then, self._after_first_request = self._after_first_request, None
            then()

    async def _send_aiohttp(self, session: Any, path: str, content: bytes, seconds: float) -> Any:
        """One POST through aiohttp, read whole (a gzip body decoded); its failures raised as the
        httpx exceptions the httpx path raises, chained to aiohttp's (a connection that could not
        be opened is ``ConnectError``, a timeout ``TimeoutException``, a reply cut short another
        ``TransportError``). A reply that is an error becomes an httpx response, so its status,
        headers and text read as on the httpx path."""
        timeout = self._aiohttp_timeout(seconds)
        url = self.base_url + path
        try:
            async with session.post(url, data=content, timeout=timeout) as reply:
                body = await reply.read()
                if reply.status < 400:
                    return _Body(reply.status, body)
                return _error_response(reply, body, url)
        except Exception as exc:
            mapped = _httpx_error(exc, url)
            if mapped is None:
                raise
            raise mapped from exc

    async def _send(self, shard: int, path: str, content: bytes, seconds: float) -> Any:
        """One POST through the shard's transport, read whole. The client's own ``post`` merges
        its settings into every request, handles cookies, auth and redirects, and wraps the
        reply's stream: a third of the judge loop's time per call, for nothing a JSON API call
        uses. The transport (the connection pool, or the proxy the environment names) is the
        client's own, so TLS, limits and proxies are as it would send; its httpcore pool is spoken
        to directly (:meth:`_through_pool`) when httpx says how."""
        import httpx

        transport, headers = self._direct[shard]
        if transport is None:  # an httpx whose client does not say its transport: its own way
            return await self._clients[shard].post(
                self.base_url + path,
                content=content,
                headers={"content-type": "application/json"},
                timeout=httpx.Timeout(seconds, connect=min(5.0, seconds)),
            )
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.base_url + path)
        timeouts = self._timeouts.get(seconds)
        if timeouts is None:
            timeouts = self._timeouts[seconds] = httpx.Timeout(seconds, connect=min(5.0, seconds)).as_dict()
        pool = getattr(transport, "_pool", None)
        if pool is not None and isinstance(transport, httpx.AsyncHTTPTransport) and _httpcore_errors():
            return await self._through_pool(pool, url, headers, content, timeouts)
        extensions = self._extensions(timeouts)
        request = httpx.Request("POST", url, headers=headers, content=content, extensions=extensions)
        try:
            response = await transport.handle_async_request(request)
        except httpx.RequestError as exc:
            exc.request = request  # as the client does: the error names the URL it was for
            raise
        response.request = request
        try:
            await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response

    async def _through_pool(
        self, pool: Any, url: Any, headers: Any, content: bytes, timeouts: dict[str, float | None]
    ) -> Any:
        """The POST as httpx's transport would make it, without its wrappers: an httpcore request
        to the transport's pool (or proxy), the reply's body read in one loop, and httpx's
        exceptions for httpcore's. httpx's request, response and byte-stream objects around each
        call (headers merged and parsed again, the body read through four generators) were a sixth
        of the judge loop's CPU per call. A reply that is an error, or encoded (gzip), becomes the
        httpx response it was, so its status, headers and text read as before."""
        import httpcore
        import httpx

        target = self._targets.get(url)
        if target is None:
            core_url = httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            )
            # What httpx's request adds to the client's headers: the Host (a connection's first
            # request needs it), then the Content-Length of each body.
            raw = [(b"Host", url.netloc), *headers.raw]
            target = self._targets[url] = (core_url, raw)
        core_url, raw = target
        request = httpcore.Request(
            b"POST",
            core_url,
            headers=[*raw, (b"Content-Length", str(len(content)).encode())],
            content=content,
            extensions=self._extensions(timeouts),
        )
        try:
            with _httpcore_errors()():
                reply = await pool.handle_async_request(request)
                try:
                    body = b"".join([chunk async for chunk in reply.stream])
                finally:
                    await reply.aclose()
        except httpx.RequestError as exc:
            exc.request = httpx.Request("POST", url)  # as the client does: the error names the URL
            raise
        encoded = any(name.lower() == b"content-encoding" for name, _ in reply.headers)
        return await _read_whole(reply.status, reply.headers, body, url, encoded, reply.extensions)

    def _extensions(self, timeouts: dict[str, float | None]) -> dict[str, Any]:
        """A request's httpcore extensions: its timeouts, and until the first request is out, the
        trace that says when it is."""
        if self._after_first_request is None:
            return {"timeout": timeouts}
        return {"timeout": timeouts, "trace": self._trace}

    async def _trace(self, event: str, info: Any) -> None:
        # httpcore's events of a request. Its reply is awaited once it is written (QuickStream
        # writes it with the reply's first read, right after this event).
        if event.endswith("receive_response_headers.started"):
            self._first_written()

    async def aclose(self) -> None:
        """Close the HTTP clients (safe to call twice); those opened on another loop are dropped."""
        clients, session, loop = self._clients, self._session, self._loop
        if loop is not asyncio.get_running_loop():
            self._drop()
            return
        self._clients, self._busy, self._loop, self._session = [], [], None, None
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.close()
        if session is not None:
            await session.close()
        for client in clients:
            await client.aclose()


class OnJsonApi:
    """What both native-route backends do with their :class:`JsonApi` (``_api``, made by their first
    call): one copy of it."""

    _api: JsonApi | None

    def open_ahead(self, connections: int) -> None:
        """Have ``connections`` open or opening for the calls about to go (the engine asks, from
        the provider's limit: :meth:`~pytest_aimeasure.judge.limits.ProviderLimit.wanted`); once the
        first call made the client (:meth:`JsonApi.open_ahead`)."""
        if self._api is not None:
            self._api.open_ahead(connections)


async def _read_whole(
    status: int, headers: Any, body: bytes, url: Any, encoded: bool, extensions: Any = None
) -> Any:
    """A reply read whole off a connection, as :meth:`JsonApi.post` reads it: a success whose body is
    not encoded as it came (:class:`_Body`), else the httpx response it was (a gzip body decoded, as
    httpx's own read does), so that an error's status, headers and text read as on every path."""
    import httpx

    if status < 400 and not encoded:
        return _Body(status, body)
    response = httpx.Response(
        status,
        headers=headers,
        stream=httpx.ByteStream(body),
        request=httpx.Request("POST", url),
        extensions=extensions,
    )
    await response.aread()
    return response


def _error_response(reply: Any, body: bytes, url: str) -> Any:
    """An aiohttp error reply as the httpx response the httpx path gets, so its status, headers and
    text read alike. The body is decoded already: the headers that described its encoding go."""
    import httpx

    headers = [
        (name, value)
        for name, value in reply.headers.items()
        if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(reply.status, headers=headers, content=body, request=httpx.Request("POST", url))


def _httpx_error(exc: Exception, url: str) -> Exception | None:
    """An aiohttp failure as the httpx exception the httpx path raises for it (a connection that
    could not be opened ``ConnectError``, a timeout ``TimeoutException``, a reply cut short another
    ``TransportError``); None for an exception that is not a transport's."""
    import aiohttp
    import httpx

    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc), request=httpx.Request("POST", url))
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        kind = httpx.ConnectTimeout if _connecting(aiohttp, exc) else httpx.ReadTimeout
        return kind(str(exc) or "timed out", request=httpx.Request("POST", url))
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx.RemoteProtocolError(str(exc), request=httpx.Request("POST", url))
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return httpx.ReadError(str(exc) or type(exc).__name__, request=httpx.Request("POST", url))
    return None


def _connecting(aiohttp: Any, exc: BaseException) -> bool:
    """Whether aiohttp's timeout was one of connecting (aiohttp >= 3.10 says so by its class)."""
    kind = getattr(aiohttp, "ConnectionTimeoutError", None)
    return kind is not None and isinstance(exc, kind)


def _direct_route(client: Any, base_url: str) -> tuple[Any, Any]:
    """The client's transport for ``base_url`` and its headers with the JSON content type, for
    :meth:`JsonApi._send`; (None, None) when this httpx does not say (a private method)."""
    import httpx

    transport_for = getattr(client, "_transport_for_url", None)
    if transport_for is None:
        return None, None
    headers = httpx.Headers(client.headers)
    headers["content-type"] = "application/json"
    transport = transport_for(httpx.URL(base_url))
    _use_quick_streams(transport)
    return transport, headers


def _use_quick_streams(transport: Any) -> None:
    """Open the transport's connections through :func:`quick_streams` when it is a plain connection
    pool (not a proxy's) that httpcore builds as expected; else leave it as it is."""
    import httpcore

    pool = getattr(transport, "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool:
        return
    backend, quick = getattr(pool, "_network_backend", None), quick_streams()
    if isinstance(backend, httpcore.AsyncNetworkBackend) and not isinstance(backend, quick):
        pool._network_backend = quick(backend)


@functools.cache
def quick_streams() -> Any:
    """A network backend (for httpcore's pool) whose streams cost the judge's loop thread fewer
    system calls per request, each a thread switch away from the GIL while pytest's thread runs
    tests (and on loopback, the local server's benchmarks, the receiving side's work too):

    * a request's writes (its headers, then its body) go out in one send, when its reply is read
      (was one send each);
    * whether an idle connection was closed by the server is polled on the socket the stream
      opened with (httpcore's pool asks it of every idle connection whenever a request starts or
      ends, and anyio's answer asks the kernel for the peer's address each time first).
    """
    import httpcore

    class QuickStream(httpcore.AsyncNetworkStream):
        def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
            self._inner = inner
            self._unsent: list[bytes] = []
            self._socket = inner.get_extra_info("socket")
            self._read_at = float("-inf")

        async def _send_unsent(self, timeout: float | None) -> None:
            if self._unsent:
                data, self._unsent = b"".join(self._unsent), []
                await self._inner.write(data, timeout)

        async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            await self._send_unsent(timeout)
            data = await self._inner.read(max_bytes, timeout)
            self._read_at = time.monotonic()
            return data

        async def write(self, buffer: bytes, timeout: float | None = None) -> None:
            if buffer:
                self._unsent.append(buffer)

        async def aclose(self) -> None:
            self._unsent = []
            await self._inner.aclose()

        async def start_tls(
            self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
        ) -> httpcore.AsyncNetworkStream:
            await self._send_unsent(timeout)
            return QuickStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

        def get_extra_info(self, info: str) -> Any:
            if info == "is_readable" and self._socket is not None and hasattr(select, "poll"):
                if time.monotonic() - self._read_at < RECENTLY_READ_S:
                    return False  # it answered a moment ago (see RECENTLY_READ_S)
                descriptor = self._socket.fileno()
                if descriptor < 0:
                    return True  # closed: the next read returns b"", as httpcore's own answer says
                poll = select.poll()
                poll.register(descriptor, select.POLLIN)
                return bool(poll.poll(0))
            return self._inner.get_extra_info(info)

    class QuickBackend(httpcore.AsyncNetworkBackend):
        def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
            self._inner = inner

        async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
            return QuickStream(await self._inner.connect_tcp(*args, **kwargs))

        async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
            return QuickStream(await self._inner.connect_unix_socket(*args, **kwargs))

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return QuickBackend


@functools.cache
def _httpcore_errors() -> Any:
    """httpx's context manager that raises its exceptions for httpcore's (a private name: None when
    this httpx does not have it, and the requests then go through httpx's transport)."""
    try:
        from httpx._transports.default import map_httpcore_exceptions
    except ImportError:  # pragma: no cover - depends on the installed httpx
        return None
    return map_httpcore_exceptions


class _Body:
    """A successful reply's status and body, read straight from httpcore: what :func:`_decoded`
    reads of an httpx response, without building one."""

    __slots__ = ("content", "status_code")

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class _Parsed:
    """A streamed reply read back (:mod:`~pytest_aimeasure.judge.backends.streams`): what
    :func:`_decoded` reads of a response."""

    __slots__ = ("data", "status_code")

    def __init__(self, status_code: int, data: dict[str, Any]) -> None:
        self.status_code = status_code
        self.data = data

    def json(self) -> Any:
        return self.data

    @property
    def text(self) -> str:
        return json.dumps(self.data)


def _decoded(response: Any) -> View:
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, Mapping):
        raise HttpStatusError(
            response.status_code,
            f"the reply is not a JSON object: {response.text[:200]!r}",
            None,
            response,
        )
    return View(data)


def _status_error(response: Any) -> HttpStatusError:
    """The provider's error message and type from its body: ``{"error": {"message", "type"}}`` (both
    the Messages API and Chat Completions), else the body's text."""
    try:
        data = response.json()
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, Mapping) else None
    if isinstance(error, Mapping) and error.get("message"):
        kind = error.get("type")
        return HttpStatusError(
            response.status_code, str(error["message"]), str(kind) if kind else None, response
        )
    text = response.text.strip() or response.reason_phrase or "no message"
    return HttpStatusError(response.status_code, text[:2000], None, response)
