"""The wire (judge/backends/wire.py): HTTP/1.1 POSTs against scripted local servers that frame their
replies every way HTTP/1.1 allows, close connections when a server may, and misbehave."""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from pytest_aimeasure.judge.backends.base import is_connection_failure
from pytest_aimeasure.judge.backends.wire import MAX_HEAD, Wire

T = TypeVar("T")
Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request, head and body ('' when the client closed instead)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return b""
    found = re.search(rb"content-length: (\d+)", head.lower())
    assert found is not None, head
    return head + await reader.readexactly(int(found.group(1)))


def run(serve: Serve, calls: Callable[[Wire], Awaitable[T]]) -> tuple[T, int]:
    """``calls(wire)`` against a server that runs ``serve`` on each connection; returns what they
    returned and how many connections the server accepted."""
    accepted = 0

    async def counted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        try:
            await serve(reader, writer)
        finally:
            writer.close()

    async def main() -> T:
        server = await asyncio.start_server(counted, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        wire = Wire(f"http://127.0.0.1:{port}", {"x-api-key": "k"}, None)
        try:
            return await asyncio.wait_for(calls(wire), 10)
        finally:
            wire.close()
            server.close()

    result = asyncio.run(main())
    return result, accepted


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def dribble(writer: asyncio.StreamWriter, data: bytes, pieces: int = 7) -> None:
    """Write ``data`` in pieces with pauses, so that the client parses it as it arrives."""
    step = max(1, len(data) // pieces)
    for start in range(0, len(data), step):
        writer.write(data[start : start + step])
        await writer.drain()
        await asyncio.sleep(0.005)


async def two_posts(wire: Wire) -> list[tuple[int, bytes]]:
    replies = []
    for n in (1, 2):
        reply = await wire.post("/v1/messages", b'{"n": %d}' % n, 5.0)
        replies.append((reply.status, reply.body))
    return replies


def test_chunked_replies_are_read_whole_as_they_arrive_and_their_connection_is_kept() -> None:
    # A chunk extension, a trailer, and no trailer; the bytes dribble in.
    replies = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nbye\r\n0\r\n\r\n",
    ]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for reply in replies:
            assert await read_request(reader)
            await dribble(writer, reply)

    got, connections = run(serve, two_posts)
    assert got == [(200, b"hello world"), (200, b"bye")]
    assert connections == 1


def test_a_reply_framed_by_the_connections_end_is_read_to_it_and_the_next_call_connects_again() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await read_request(reader)
        await dribble(writer, b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"to": "the end"}')

    got, connections = run(serve, two_posts)
    assert got == [(200, b'{"to": "the end"}')] * 2
    assert connections == 2


@pytest.mark.parametrize(
    "reply",
    [ok(b"{}", "Connection: close"), b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"],
    ids=["connection-close", "http-1.0"],
)
def test_a_connection_the_server_means_to_close_is_not_used_again(reply: bytes) -> None:
    # The server keeps its end open: only the reply says not to reuse the connection.
    after: list[bytes] = []  # what came on each connection after its reply

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await read_request(reader)
        writer.write(reply)
        await writer.drain()
        after.append(await read_request(reader))

    got, connections = run(serve, two_posts)
    assert got == [(200, b"{}")] * 2
    assert connections == 2
    assert after == [b"", b""]  # the client closed each, sending nothing more on it


def test_an_informational_reply_before_the_reply_is_skipped() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader):
            await dribble(writer, b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"{}"))

    got, connections = run(serve, two_posts)
    assert got == [(200, b"{}")] * 2
    assert connections == 1


def test_an_idle_connection_the_server_closed_is_not_used() -> None:
    requests = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        assert await read_request(reader)
        requests += 1
        writer.write(ok(b"{}"))  # kept alive, as far as the reply says; then closed while idle
        await writer.drain()

    async def calls(wire: Wire) -> list[int]:
        first = await wire.post("/v1/messages", b"{}", 5.0)
        await asyncio.sleep(0.1)  # the close arrives
        second = await wire.post("/v1/messages", b"{}", 5.0)
        return [first.status, second.status]

    got, connections = run(serve, calls)
    assert got == [200, 200]
    assert (connections, requests) == (2, 2)


def test_a_request_that_meets_the_close_of_a_kept_connection_is_not_sent_again() -> None:
    # The server closes the kept-alive connection as the second request arrives on it, before any
    # byte of a reply. It may have read it (a reset after reading looks the same), so the wire does
    # not send it again: the engine's retries do, and count it.
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(0)
        while await read_request(reader):
            seen[-1] += 1
            if seen[-1] == 2:
                return  # closed, unanswered
            writer.write(ok(b"{}"))
            await writer.drain()

    async def calls(wire: Wire) -> BaseException:
        await wire.post("/v1/messages", b"{}", 5.0)
        with pytest.raises(httpx.RemoteProtocolError, match="closed the connection") as caught:
            await wire.post("/v1/messages", b"{}", 5.0)
        return caught.value

    error, connections = run(serve, calls)
    assert not is_connection_failure(error)  # it was there: retried as a 5xx is, not "unreachable"
    assert (connections, seen) == (1, [2])


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (b"", "closed the connection"),  # a new connection, closed unanswered: not sent again
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "mid-reply"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "mid-reply"),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "invalid literal"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n", "not followed by CRLF"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"x" * MAX_HEAD, "no end of the reply's head"),
    ],
    ids=[
        "unanswered",
        "short-body",
        "short-chunk",
        "not-http",
        "bad-chunk-size",
        "long-chunk",
        "endless-head",
    ],
)
def test_a_reply_cut_short_or_not_http_is_a_protocol_error(script: bytes, message: str) -> None:
    requests = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        assert await read_request(reader)
        requests += 1
        writer.write(script)
        await writer.drain()

    async def calls(wire: Wire) -> BaseException:
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await wire.post("/v1/messages", b"{}", 5.0)
        return caught.value

    error, connections = run(serve, calls)
    assert message in str(error)
    assert str(error.request.url).endswith("/v1/messages")
    assert (connections, requests) == (1, 1)


def test_no_whole_reply_within_the_calls_limit_is_a_read_timeout_and_the_connection_is_closed() -> None:
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{")  # and no more
        await writer.drain()
        assert await reader.read() == b""  # the client closed its end
        closed.set()

    async def calls(wire: Wire) -> bool:
        with pytest.raises(httpx.ReadTimeout, match=r"no whole reply within 0\.2s"):
            await wire.post("/v1/messages", b"{}", 0.2)
        await asyncio.wait_for(closed.wait(), 5)
        return True

    assert run(serve, calls) == (True, 1)


def test_a_server_that_is_not_there_is_a_connection_failure() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed below: nothing listens there

    async def main() -> BaseException:
        wire = Wire(f"http://127.0.0.1:{port}", {}, None)
        with pytest.raises(httpx.ConnectError) as caught:
            await wire.post("/v1/messages", b"{}", 5.0)
        return caught.value

    error = asyncio.run(main())
    assert is_connection_failure(error)
    assert f"127.0.0.1:{port}" in str(error)


@pytest.mark.parametrize(("status", "told"), [(200, True), (429, False), (500, False)])
def test_the_caller_hears_of_a_2xx_reply_as_it_arrives_before_it_is_handed_over(
    status: int, told: bool
) -> None:
    # What frees the call's slot for the next call (base.ANSWERED), with the call's latency: for a
    # 2xx only (a 429 must change the limit first), before the caller's task sees the reply.
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await read_request(reader)
        await asyncio.sleep(0.05)
        writer.write(b"HTTP/1.1 %d X\r\nContent-Length: 2\r\n\r\n{}" % status)
        await writer.drain()
        await reader.read()

    async def calls(wire: Wire) -> list[Any]:
        events: list[Any] = []
        reply = await wire.post(
            "/v1/messages",
            b"{}",
            5.0,
            answered=lambda s: events.append(("answered", s)),
            sent=lambda: events.append("sent"),
        )
        events.append(("returned", reply.status))
        return events

    events, _ = run(serve, calls)
    assert events[0] == "sent" and events[-1] == ("returned", status)
    if told:
        assert len(events) == 3 and events[1][0] == "answered" and 0.04 < events[1][1] < 5
    else:
        assert len(events) == 2


TLS = Path(__file__).parent / "tls"  # a self-signed certificate for 127.0.0.1 (and its key), for tests only


def tls_run(client: ssl.SSLContext) -> tuple[list[tuple[int, bytes]], int]:
    """Two posts over TLS to a local server with the test certificate."""
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(TLS / "cert.pem", TLS / "key.pem")
    accepted = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        try:
            while await read_request(reader):
                writer.write(ok(b'{"over": "tls"}'))
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass  # (the client refused the certificate)
        finally:
            writer.close()

    async def main() -> list[tuple[int, bytes]]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_side)
        port = server.sockets[0].getsockname()[1]
        wire = Wire(f"https://127.0.0.1:{port}", {}, client)
        try:
            return await asyncio.wait_for(two_posts(wire), 10)
        finally:
            wire.close()
            server.close()

    return asyncio.run(main()), accepted


def test_calls_go_over_tls_with_the_context_given_and_its_connection_is_kept() -> None:
    got, connections = tls_run(ssl.create_default_context(cafile=str(TLS / "cert.pem")))
    assert got == [(200, b'{"over": "tls"}')] * 2
    assert connections == 1


def test_a_certificate_the_context_does_not_trust_is_a_connection_failure() -> None:
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED") as caught:
        tls_run(ssl.create_default_context())  # the system's CAs: not the test's own certificate
    assert is_connection_failure(caught.value)


@pytest.mark.parametrize("given_up", ["cancelled", "timed out"])
def test_a_reply_that_comes_after_its_call_was_given_up_is_not_handed_on(given_up: str) -> None:
    # Between a call being given up and its task resuming to close the connection, the reply may
    # still arrive: the connection must not go back to the pool (another call would take it, and
    # the resuming task would then close it under that call), nor the call count as answered.
    from pytest_aimeasure.judge.backends import wire

    class Transport(asyncio.Transport):
        def __init__(self) -> None:
            super().__init__()
            self.written: list[bytes] = []
            self.aborted = False

        def write(self, data: Any) -> None:
            self.written.append(bytes(data))

        def abort(self) -> None:
            self.aborted = True

    async def main() -> tuple[bool, bool, list[float]]:
        owner = Wire("http://127.0.0.1:9", {}, None)
        owner._loop = asyncio.get_running_loop()
        connection = wire._Connection(owner)
        transport = Transport()
        connection.connection_made(transport)
        heard: list[float] = []
        reply = connection.send(b"POST / HTTP/1.1\r\n\r\n", heard.append)
        if given_up == "cancelled":
            reply.cancel()
        else:
            wire._time_out(reply)
        connection.data_received(ok(b"{}"))
        return transport.aborted, connection in owner._idle, heard

    assert asyncio.run(main()) == (True, False, [])


async def answer_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await read_request(reader):
        writer.write(ok(b"{}"))
        await writer.drain()


@pytest.fixture
def slow_connects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection takes 0.1 s to open, as a remote provider's handshakes do."""
    create = asyncio.BaseEventLoop.create_connection

    async def slow(self: asyncio.BaseEventLoop, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.1)
        return await create(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", slow)


def test_connections_opened_ahead_carry_the_calls_that_come_and_no_more_are_opened() -> None:
    async def calls(wire: Wire) -> tuple[int, int, list[int]]:
        wire.open_ahead(3)
        wire.open_ahead(3)  # asked again while they open: nothing more
        await asyncio.sleep(0.2)
        opened = len(wire.live)
        replies = await asyncio.gather(*(wire.post("/v1/messages", b"{}", 5.0) for _ in range(3)))
        wire.open_ahead(2)  # fewer than are open: nothing
        return opened, len(wire.live), [reply.status for reply in replies]

    (opened, live, statuses), accepted = run(answer_each, calls)
    assert (opened, live, statuses, accepted) == (3, 3, [200, 200, 200], 3)


def test_a_call_that_finds_none_idle_takes_a_connection_still_being_opened_ahead(slow_connects: None) -> None:
    # The calls queued behind a model's first call go the moment it is accepted, while the
    # connections opened for them may still be opening (a remote provider's TLS handshakes): each
    # takes one of those, instead of opening one more of its own.
    async def calls(wire: Wire) -> list[int]:
        wire.open_ahead(2)
        replies = await asyncio.gather(*(wire.post("/v1/messages", b"{}", 5.0) for _ in range(3)))
        return [reply.status for reply in replies]

    statuses, accepted = run(answer_each, calls)
    assert statuses == [200, 200, 200]
    assert accepted == 3  # two opened ahead and taken, one the third call opened itself


def test_a_connection_that_could_not_be_opened_ahead_leaves_its_call_to_open_its_own() -> None:
    async def main() -> str:
        with socket.socket() as spare:
            spare.bind(("127.0.0.1", 0))
            port = spare.getsockname()[1]  # nothing listens there
        wire = Wire(f"http://127.0.0.1:{port}", {}, None)
        wire.open_ahead(1)
        try:
            await asyncio.wait_for(wire.post("/v1/messages", b"{}", 5.0), 10)
        except httpx.ConnectError as exc:
            return type(exc).__name__
        finally:
            wire.close()
        return "answered"

    assert asyncio.run(main()) == "ConnectError"


def test_closing_the_wire_stops_the_connections_being_opened_ahead(slow_connects: None) -> None:
    async def calls(wire: Wire) -> tuple[int, int]:
        wire.open_ahead(2)
        await asyncio.sleep(0.01)
        wire.close()
        wire.open_ahead(2)  # closed: nothing
        await asyncio.sleep(0.3)
        return len(wire.live), len(wire._ahead)

    (live, opening), accepted = run(answer_each, calls)
    assert (live, opening, accepted) == (0, 0, 0)
