"""HTTP/1.1 for the judge's unstreamed calls: each request one write, each reply parsed as it arrives.

Why not aiohttp or httpx for these: a call is a few kilobytes of JSON out and a kilobyte back, and
what decides how soon the next call goes out is how many turns of the event loop lie between an
answer arriving and the request that takes its slot being written. Through aiohttp there were
three (the slot handed to a waiting call, that call's request, and on Python before 3.12 a task of
aiohttp's own that writes the body), each queued behind the other answers of the round: against
the local server at 0.2 s with 64 calls in flight, 2-3 ms passed on each connection between an
answer and the next request (0.4 ms from a client that writes at once), and every one of the
session's rounds paid it again (the first session's span over its floor 1.117 against 1.097 here,
measured side by side). Here a request is one ``transport.write`` in the calling task's own turn, a
reply is parsed in the protocol's callback as its bytes arrive, and the call's slot is freed there
(:data:`~pytest_aimeasure.judge.backends.base.ANSWERED`), before the reply is read.

What it speaks: ``POST`` with a ``Content-Length`` body over TCP or TLS (the TLS context the other
clients use); replies framed by ``Content-Length``, chunked, or the connection's end; 1xx replies
skipped; ``Connection: close`` (and HTTP/1.0) honoured. It asks for no compression
(``accept-encoding: identity``); a reply encoded anyway is decoded by the caller. Connections are
kept alive and reused last-in first-out; one the server closed while idle is dropped as the close
arrives. :meth:`Wire.open_ahead` opens connections in the background for the calls about to go
(the engine asks, from the provider's limit), so that they do not each pay a connection's opening
(two round trips over TLS) as they start. A request is sent once: one that meets a close or a
reset is a failure the engine's retries count, as on the other paths (the server may have read
it). Failures are raised as the httpx exceptions the other paths raise: a connection that could
not be opened ``ConnectError`` (``ConnectTimeout`` after 5 s), no whole reply within the call's
limit ``ReadTimeout``, a reply cut short or not HTTP ``RemoteProtocolError``.
Streamed calls and proxies stay with aiohttp and httpx (:class:`~pytest_aimeasure.judge.backends.
http.JsonApi` decides).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["MAX_HEAD", "Reply", "Wire"]

MAX_HEAD = 64 * 1024
"""The longest reply head (status line and headers), or chunk-size line, read before the reply is
called malformed: a server that is not speaking HTTP must not fill the memory."""

CONNECT_S = 5.0
"""The longest a connection may take to open (httpx's and aiohttp's connect timeout here)."""


class Reply:
    """A whole reply: its status, headers (names lower-cased, in order) and body as it came."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (lower case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


class _Malformed(Exception):
    """No whole reply: it broke HTTP/1.1's framing, or the connection ended before or during it."""


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its reply parsed as its bytes arrive."""

    def __init__(self, owner: Wire) -> None:
        self._owner = owner
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Reply] | None = None
        self._answered: Callable[[float], None] | None = None
        self._written = 0.0  # when the request under way was written (the loop's clock)
        self._got = False  # has a byte of the reply under way come
        self._head: tuple[int, list[tuple[str, str]], bool] | None = None  # status, headers, kept alive
        self._length: int | None = None  # the body's (or the chunk's) length; None: not known yet
        self._chunked = False
        self._to_end = False  # the body ends with the connection
        self._chunks: list[bytes] = []

    # -- asyncio's callbacks ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.loop = asyncio.get_running_loop()
        self._owner.live.add(self)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            # Bytes nobody asked for (a server's notice before it closes an idle connection): the
            # connection is in no state to carry a request.
            self.abort()
            return
        self._got = True
        self._buffer += data
        try:
            self._advance()
        except (_Malformed, ValueError) as exc:
            self._fail(_Malformed(str(exc)))

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # (the transport closes itself)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner.live.discard(self)
        self._ended(exc)

    # -- a request -------------------------------------------------------------------------------
    def send(self, request: bytes, answered: Callable[[float], None] | None) -> asyncio.Future[Reply]:
        """Write ``request`` and return the future of its reply. ``answered(seconds)`` is called the
        moment a 2xx reply has arrived whole (seconds since the request was written), before the
        future's waiter runs."""
        assert self.transport is not None and self.loop is not None and self._waiter is None
        self._waiter = self.loop.create_future()
        self._answered = answered
        self._got = False
        self._written = self.loop.time()
        self.transport.write(request)
        return self._waiter

    def abort(self) -> None:
        """Close now, without waiting for buffered bytes (a request given up halfway leaves the
        connection in no known state)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- its reply -------------------------------------------------------------------------------
    def _advance(self) -> None:
        while self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD:
                    raise _Malformed(f"no end of the reply's head within {MAX_HEAD} bytes")
                return
            lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            del self._buffer[: end + 4]
            version, _, rest = lines[0].partition(" ")
            if not version.startswith("HTTP/1."):
                raise _Malformed(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
            status = int(rest.split(" ", 1)[0])
            if 100 <= status < 200:
                continue  # informational (100 Continue): the reply follows
            headers: list[tuple[str, str]] = []
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if not colon:
                    raise _Malformed(f"a header line without a colon: {line[:80]!r}")
                headers.append((name.strip().lower(), value.strip()))
            fields = dict(headers)
            kept = version == "HTTP/1.1" and "close" not in fields.get("connection", "").lower()
            self._head = (status, headers, kept)
            if "chunked" in fields.get("transfer-encoding", "").lower():
                self._chunked = True
            elif "content-length" in fields:
                self._length = int(fields["content-length"])
                if self._length < 0:
                    raise _Malformed(f"a negative Content-Length: {self._length}")
            elif status in (204, 304):
                self._length = 0
            else:
                self._to_end = True
        if self._chunked:
            self._advance_chunks()
        elif self._length is not None and len(self._buffer) >= self._length:
            body = bytes(self._buffer[: self._length])
            del self._buffer[: self._length]
            self._done(body)

    def _advance_chunks(self) -> None:
        while True:
            if self._length is None:  # at a chunk's size line
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    if len(self._buffer) > MAX_HEAD:
                        raise _Malformed(f"no end of a chunk's size line within {MAX_HEAD} bytes")
                    return
                size = int(bytes(self._buffer[:end]).split(b";", 1)[0].strip(), 16)
                if size < 0:
                    raise _Malformed(f"a negative chunk size: {size}")
                if size == 0:
                    # The last chunk: its trailers (usually none) end at an empty line.
                    tail = self._buffer.find(b"\r\n\r\n", end)
                    if tail < 0:
                        return
                    del self._buffer[: tail + 4]
                    self._done(b"".join(self._chunks))
                    return
                del self._buffer[: end + 2]
                self._length = size
            if len(self._buffer) < self._length + 2:
                return
            if self._buffer[self._length : self._length + 2] != b"\r\n":
                raise _Malformed("a chunk not followed by CRLF")
            self._chunks.append(bytes(self._buffer[: self._length]))
            del self._buffer[: self._length + 2]
            self._length = None

    def _done(self, body: bytes) -> None:
        assert self._head is not None and self._waiter is not None
        status, headers, kept = self._head
        waiter, answered = self._waiter, self._answered
        self._waiter = self._answered = self._head = self._length = None
        self._chunked = self._to_end = False
        self._chunks = []
        if waiter.done():
            # The call was given up (timed out, cancelled) before its reply came: its task closes
            # the connection when it resumes, and frees its slot, so the connection must not be
            # handed to another call meanwhile, nor the slot counted as answered.
            self.abort()
            return
        if kept and not self._buffer and not self.closed:
            self._owner.park(self)  # free for the next request now, before this reply is read
        else:
            self.abort()  # closing, or bytes past the reply that no request asked for
        try:
            if answered is not None and 200 <= status < 300 and self.loop is not None:
                answered(self.loop.time() - self._written)
        finally:
            waiter.set_result(Reply(status, headers, body))

    def _ended(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None or self._waiter.done():
            return
        if self._to_end:
            self._done(bytes(self._buffer))  # the body was framed by the connection's end
            return
        waiter, self._waiter, self._answered = self._waiter, None, None
        why = f": {exc}" if exc else ""
        if self._got:
            waiter.set_exception(_Malformed(f"the server closed the connection mid-reply{why}"))
        else:
            waiter.set_exception(_Malformed(f"the server closed the connection{why}"))

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter, self._answered = self._waiter, None, None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)


class Wire:
    """POSTs to one origin (``base_url``, whose path prefixes each request's) with fixed headers, over
    kept-alive connections of one event loop."""

    def __init__(self, base_url: str, headers: Mapping[str, str], tls: ssl.SSLContext | None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the judge's base URL must be http:// or https://, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._tls = tls if parts.scheme == "https" else None
        self._path = parts.path.rstrip("/")
        fields = {
            "host": parts.netloc,
            "user-agent": "pytest-aimeasure",
            "accept-encoding": "identity",
            "content-type": "application/json",
        }
        fields.update({name.lower(): value for name, value in headers.items()})
        # Built once: only the request line, the length and the body change from call to call.
        self._fixed = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode("latin-1")
        self._idle: list[_Connection] = []
        self.live: set[_Connection] = set()
        """The connections open on this loop (idle or carrying a call)."""
        self._connecting = 0  # connections being opened for a call that needs one now
        self._opening = 0  # connections being opened ahead (open_ahead)
        self._claims: deque[asyncio.Future[_Connection | None]] = deque()
        """Calls waiting for a connection opened ahead (None: it failed; the call opens its own)."""
        self._ahead: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def post(
        self,
        path: str,
        content: bytes,
        seconds: float,
        *,
        answered: Callable[[float], None] | None = None,
        sent: Callable[[], None] | None = None,
    ) -> Reply:
        """The whole reply to ``POST base_url + path`` with body ``content``, within ``seconds`` of
        its request going out. ``answered(latency)`` runs in the protocol's callback as soon as a 2xx
        reply is in, ``sent()`` once the request is written."""
        import httpx

        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.forget()  # another loop's connections cannot be used from this one
            self._loop = loop
        self._closed = False
        url = self.base_url + path
        request = b"".join(
            (
                f"POST {self._path}{path} HTTP/1.1\r\n".encode("latin-1"),
                self._fixed,
                b"content-length: %d\r\n\r\n" % len(content),
                content,
            )
        )
        connection = self._reusable() or await self._claim(url, seconds)
        if connection is None:
            self._connecting += 1
            try:
                connection = await self._connect(url, seconds)
            finally:
                self._connecting -= 1
        reply = connection.send(request, answered)
        if sent is not None:
            sent()
        timer = loop.call_later(seconds, _time_out, reply)
        try:
            return await reply
        except _Malformed as exc:
            # Not sent again here, even when nothing of a reply came: the server may have read the
            # request (a reset after it did looks the same), and the engine's retries count it.
            raise httpx.RemoteProtocolError(str(exc), request=httpx.Request("POST", url)) from exc
        except asyncio.TimeoutError as exc:
            connection.abort()
            raise httpx.ReadTimeout(
                f"no whole reply within {seconds:g}s", request=httpx.Request("POST", url)
            ) from exc
        except BaseException:
            if not (reply.done() and not reply.cancelled() and reply.exception() is None):
                connection.abort()  # given up halfway (cancelled): its reply would come to nobody
            raise
        finally:
            timer.cancel()

    def open_ahead(self, connections: int) -> None:
        """Open connections in the background until ``connections`` are open or being opened, for
        calls about to go: a call that finds none idle takes one being opened, instead of opening
        one more. A first session's calls queued behind the model's first call, and the calls a
        first round's answers add, then find their connections open (a new TLS connection to a
        provider costs two round trips before the request can go). Nothing when the wire is closed."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.forget()
            self._loop = loop
        if self._closed:
            return
        missing = connections - len(self.live) - self._connecting - self._opening
        for _ in range(max(0, missing)):
            self._opening += 1
            task = loop.create_task(self._open_one())
            self._ahead.add(task)
            task.add_done_callback(self._ahead.discard)

    async def _open_one(self) -> None:
        connection: _Connection | None = None
        try:
            # A failure leaves the call that waits for it to open its own, and meet it there.
            with contextlib.suppress(Exception):
                connection = await self._connect(self.base_url, CONNECT_S)
        finally:  # (cancelled: the wire closed, and the waiting call gets None too)
            self._opening -= 1
            handed = self._hand(connection)
        if not handed and connection is not None:
            self.park(connection)

    def _hand(self, connection: _Connection | None) -> bool:
        """Give ``connection`` to the call that waited longest for one being opened ahead; False
        when none waits."""
        while self._claims:
            claim = self._claims.popleft()
            if not claim.done():
                claim.set_result(connection)
                return True
        return False

    async def _claim(self, url: str, seconds: float) -> _Connection | None:
        """A connection being opened ahead that no other call waits for, once it is open (None: none
        is being opened, or it failed)."""
        while self._claims and self._claims[0].done():
            self._claims.popleft()
        if self._opening <= len(self._claims):
            return None
        import httpx

        claim: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._claims.append(claim)
        limit = min(CONNECT_S, seconds)
        try:
            return await asyncio.wait_for(claim, limit)
        except asyncio.TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"no connection to {self.base_url} within {limit:g}s", request=httpx.Request("POST", url)
            ) from exc
        except BaseException:
            # Cancelled as the connection was handed over: kept for the next call, not lost open.
            if claim.done() and not claim.cancelled() and (handed := claim.result()) is not None:
                self.park(handed)
            raise

    def _reusable(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _connect(self, url: str, seconds: float) -> _Connection:
        import httpx

        loop = asyncio.get_running_loop()
        limit = min(CONNECT_S, seconds)
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(self),
                    self._host,
                    self._port,
                    ssl=self._tls,
                    server_hostname=self._host if self._tls is not None else None,
                ),
                limit,
            )
        except asyncio.TimeoutError as exc:
            raise httpx.ConnectTimeout(
                f"no connection to {self.base_url} within {limit:g}s", request=httpx.Request("POST", url)
            ) from exc
        except OSError as exc:
            raise httpx.ConnectError(
                f"could not connect to {self.base_url}: {exc}", request=httpx.Request("POST", url)
            ) from exc
        return connection

    def park(self, connection: _Connection) -> None:
        """Keep ``connection``, whose reply is in, for the next request (closed once the wire is)."""
        if self._closed or connection.loop is not self._loop:
            connection.abort()
        else:
            self._idle.append(connection)

    def close(self) -> None:
        """Close the idle connections (from their loop), and each one in flight as its call ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.abort()
        for task in list(self._ahead):
            task.cancel()

    def forget(self) -> None:
        """Drop the connections of a loop that is gone, without touching them (they are its)."""
        self._idle, self._loop = [], None
        self.live, self._ahead, self._claims = set(), set(), deque()
        self._connecting = self._opening = 0


def _time_out(reply: asyncio.Future[Any]) -> None:
    if not reply.done():
        reply.set_exception(asyncio.TimeoutError())
