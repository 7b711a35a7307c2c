"""HTTP plumbing of the local provider: a threading HTTP/1.1 server, routing, request bodies, replies.

The handler reads a request, hands it to a :class:`Responder` (the :class:`ProviderServer`) and writes
the reply back; it owns the transport details: keep-alive connections that ``stop()`` must be able to
cut, chunked bodies, size limits, clients that hang up mid-reply.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from pytest_aimeasure.testing.batches import OPENAI_PREFIXES, BatchDesk
from pytest_aimeasure.testing.batches import PREFIX as BATCHES_PREFIX
from pytest_aimeasure.testing.protocols import (
    ProtocolName,
    Reply,
    SeenRequest,
    anthropic_stream,
    error_reply,
    openai_stream,
    parse_request,
    stream_error_event,
)

__all__ = ["ROUTES", "Aborted", "ProviderHTTPServer", "ProviderHandler", "Reset", "Responder"]

_MAX_BODY_BYTES = 32 * 1024 * 1024


class Replied(Exception):
    """A response was already sent (an error); stop handling this request."""


class Aborted(Exception):
    """The server is stopping: drop the connection without a reply (raised by the responder)."""


class Reset(Exception):
    """Drop this connection with a TCP reset, no reply (raised by the responder for ``Fault.reset``)."""


class Responder(Protocol):
    """What the handler asks of the server behind it (called from handler threads; private to the
    package, hence the underscores)."""

    connect_delay: float
    """Seconds a new connection waits before its first request is read."""

    def _connect(self, port: int) -> None: ...

    def _enter(self) -> None: ...

    def _leave(self) -> None: ...

    def _record(self, seen: SeenRequest) -> None: ...

    def _respond(self, seen: SeenRequest, accept: Callable[[], None] | None = None) -> Reply:
        """The reply for a parsed request; may sleep, and raises :class:`Aborted` when stopping.
        ``accept`` (streamed requests only) sends the stream's 200 and headers."""
        ...

    def _sleep(self, seconds: float) -> None:
        """Sleep, cut short by the server's stop (then raises :class:`Aborted`)."""
        ...

    @property
    def batches(self) -> BatchDesk: ...


class ProviderHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    # socketserver's listen backlog is 5: a client that opens 32 connections at once (a pipelined
    # session at --judge-concurrency 32) would see some refused, as no real provider does.
    request_queue_size = 128
    provider: Responder

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # Track live connections: a keep-alive connection outlives serve_forever, and stop() must be
        # able to cut it, or a client's pooled connection would still be served after stop().
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)

    def close_connections(self) -> None:
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is normal here; don't spray tracebacks on stderr.
        return


ROUTES: dict[str, ProtocolName] = {
    "/v1/messages": "anthropic",
    "/v1/chat/completions": "openai",
    "/chat/completions": "openai",
}


class ProviderHandler(BaseHTTPRequestHandler):
    server: ProviderHTTPServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes on a kept-alive connection: without TCP_NODELAY,
    # Nagle's algorithm and the client's delayed ACK add ~40 ms to every response.
    disable_nagle_algorithm = True
    server_version = "aimeasure-provider/1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # no access log on stderr

    def setup(self) -> None:
        super().setup()
        self.server.provider._connect(int(self.client_address[1]))  # (host, port, ...): a TCP server's
        delay = self.server.provider.connect_delay
        if delay:
            self.server.provider._sleep(delay)  # (Aborted on stop: the connection just closes)

    def do_GET(self) -> None:
        if self.path.startswith(BATCHES_PREFIX):
            self._batches("GET")
            return
        if self.path.startswith(OPENAI_PREFIXES):
            self._openai_batches("GET")
            return
        self._not_found()

    def do_POST(self) -> None:
        provider = self.server.provider
        started = time.monotonic()
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        if path.startswith(BATCHES_PREFIX):
            self._batches("POST")
            return
        if path.startswith(OPENAI_PREFIXES):
            self._openai_batches("POST")
            return
        protocol = ROUTES.get(path)
        if protocol is None:
            self._drain()
            self._not_found()
            return
        provider._enter()
        left = False
        try:
            try:
                body = self._read_json(protocol)
                seen = self._seen(protocol, path, body, started)
            except Replied:
                return
            provider._record(seen)

            def accept() -> None:
                # Recorded before the headers go: a client that acts on them finds it set.
                seen.accepted = time.monotonic()
                self._start_stream()

            try:
                reply = provider._respond(seen, accept if seen.streamed else None)
            except Aborted:
                self.close_connection = True
                seen.finished = time.monotonic()
                return
            except Reset:
                self._reset()
                seen.finished = time.monotonic()
                return
            except Exception as exc:  # a broken scorer must not hang the client
                reply = error_reply(protocol, 500, f"test provider failed: {type(exc).__name__}: {exc}")
            seen.status = 200 if seen.accepted else reply.status
            # Out of flight, and finished, before the client can read the reply: a client that starts
            # its next call (or reads this request's record) the moment this one returns must not find
            # it still counted, nor without its end.
            seen.finished = time.monotonic()
            provider._leave()
            left = True
            if seen.accepted:
                self._send_stream(seen, reply)
            else:
                self._send(reply)
        finally:
            if not left:
                provider._leave()

    def _batches(self, method: str) -> None:
        """The Message Batches API (:mod:`pytest_aimeasure.testing.batches`)."""
        path = self.path.split("?", 1)[0].rstrip("/")
        body: dict[str, Any] | None = None
        if method == "POST":
            try:
                raw = self._read_body()
                body = json.loads(raw.decode("utf-8")) if raw else {}
            except (ValueError, UnicodeDecodeError) as exc:
                self.close_connection = True
                self._send(error_reply("anthropic", 400, f"could not parse the request body as JSON: {exc}"))
                return
            if not isinstance(body, dict):
                self._send(error_reply("anthropic", 400, "the request body must be a JSON object"))
                return
        host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
        try:
            status, payload = self.server.provider.batches.handle(method, path, body, f"http://{host}")
        except Aborted:
            self.close_connection = True
            return
        if isinstance(payload, str):
            self._send_bytes(status, payload.encode(), "application/binary")
        else:
            self._send(Reply(status, payload))

    def _openai_batches(self, method: str) -> None:
        """OpenAI's Batch API: input files (multipart upload), batches, output files."""
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            raw = self._read_body() if method == "POST" else b""
        except ValueError as exc:
            self.close_connection = True
            self._send(error_reply("openai", 400, f"could not read the request body: {exc}"))
            return
        content_type = self.headers.get("Content-Type", "")
        try:
            status, payload = self.server.provider.batches.handle_openai(method, path, raw, content_type)
        except Exception as exc:  # a broken desk must not hang the client
            status = 500
            payload = error_reply("openai", 500, f"test provider failed: {type(exc).__name__}: {exc}").payload
        if isinstance(payload, str):
            self._send_bytes(status, payload.encode(), "application/octet-stream")
        else:
            self._send(Reply(status, payload))

    # -- helpers --

    def _reset(self) -> None:
        """Close the socket now with SO_LINGER 0, so the client reads a reset (not an orderly end)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The socket's file objects hold it open: close them too, or the reset waits for them.
        for stream in (self.rfile, self.wfile):
            with contextlib.suppress(OSError):
                stream.close()
        with contextlib.suppress(OSError):
            self.connection.close()

    def _seen(self, protocol: ProtocolName, path: str, body: dict[str, Any], started: float) -> SeenRequest:
        headers = {key.lower(): value for key, value in self.headers.items()}
        seen = parse_request(protocol, path, body, headers, started)
        seen.connection = int(self.client_address[1])  # (host, port, ...): a TCP server's
        return seen

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            total = 0
            while True:
                size_line = self.rfile.readline(1024).split(b";", 1)[0].strip()
                size = int(size_line or b"0", 16)
                if size == 0:
                    self.rfile.readline(1024)  # the blank line after the last chunk
                    return b"".join(chunks)
                total += size
                if total > _MAX_BODY_BYTES:
                    raise ValueError("request body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY_BYTES:
            raise ValueError("request body too large")
        return self.rfile.read(length) if length > 0 else b""

    def _drain(self) -> None:
        try:
            self._read_body()
        except (ValueError, OSError):
            self.close_connection = True

    def _read_json(self, protocol: ProtocolName) -> dict[str, Any]:
        try:
            raw = self._read_body()
            body = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            self.close_connection = True
            self._send(error_reply(protocol, 400, f"could not parse the request body as JSON: {exc}"))
            raise Replied from exc
        if not isinstance(body, dict):
            self._send(error_reply(protocol, 400, "the request body must be a JSON object"))
            raise Replied
        missing = [key for key in ("model", "messages") if key not in body]
        if missing:
            self._send(error_reply(protocol, 400, f"{missing[0]}: Field required", param=missing[0]))
            raise Replied
        if not isinstance(body["messages"], list):
            self._send(error_reply(protocol, 400, "messages: Input should be a valid list", param="messages"))
            raise Replied
        return body

    def _not_found(self) -> None:
        protocol: ProtocolName = "openai" if "chat" in self.path else "anthropic"
        self._send(error_reply(protocol, 404, f"Not found: {self.command} {self.path}"))

    def _start_stream(self) -> None:
        """The 200 and headers of a server-sent event stream, sent at once (the events follow as the
        chunks of a chunked body)."""
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _send_stream(self, seen: SeenRequest, reply: Reply) -> None:
        """The events of a stream whose headers went out: the reply's, or its first then its
        ``interrupt``'s error event; half of them then a reset for a ``cut``; an error decided after
        the headers (a broken scorer) as the error event alone."""
        if reply.status != 200:
            events = [stream_error_event(seen.protocol, reply)]
        elif seen.protocol == "anthropic":
            events = anthropic_stream(reply.payload)
        else:
            options = seen.body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            events = openai_stream(reply.payload, include_usage=include_usage)
        if reply.status == 200 and reply.interrupt is not None:
            events = [*events[:1], stream_error_event(seen.protocol, reply.interrupt)]
        cut = reply.status == 200 and reply.cut
        if cut:
            events = events[: len(events) // 2]
        try:
            for index, event in enumerate(events):
                if index and reply.gap > 0:
                    self.wfile.flush()
                    self.server.provider._sleep(reply.gap)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            if not cut:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (OSError, Aborted):
            self.close_connection = True
            return
        if cut:
            self._reset()

    def _send(self, reply: Reply) -> None:
        self._send_bytes(reply.status, json.dumps(reply.payload).encode(), "application/json", reply.headers)

    def _send_bytes(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        reply = Reply(status, {}, headers or {})
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            # The client gave up (timeout) and closed the socket; nothing left to tell it.
            self.close_connection = True
