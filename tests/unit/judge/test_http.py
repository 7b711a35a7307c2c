"""The native routes' HTTP layer (judge/backends/http.py): what importing it costs the session's
first judge request; the judge's streams: one send per request, and the idle-connection check on the
socket the stream opened with."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from typing import Any

import httpcore
import pytest

from pytest_aimeasure.judge.backends import http
from pytest_aimeasure.judge.backends.http import quick_streams


@pytest.mark.parametrize(
    ("use_aiohttp", "imported"),
    [(True, ["aiohttp", "httpx"]), (False, ["anyio._backends._asyncio", "httpcore", "httpx"])],
)
def test_the_warm_up_imports_what_the_first_request_needs_and_not_the_httpx_cli(
    use_aiohttp: bool, imported: list[str]
) -> None:
    pytest.importorskip("click")  # httpx imports its CLI only when click is installed (litellm brings it)
    if use_aiohttp:
        pytest.importorskip("aiohttp")
    # In a child interpreter: this one imported httpx long ago.
    code = (
        "import sys\n"
        "from pytest_aimeasure.judge.backends import http\n"
        f"http.USE_AIOHTTP = {use_aiohttp}\n"
        "from pytest_aimeasure.judge.resolve import import_transport\n"
        "import_transport('anthropic/claude-x')\n"
        "wanted = {'aiohttp', 'httpx', 'httpcore', 'anyio._backends._asyncio', 'httpx._main', 'click',"
        " 'pygments'}\n"
        "print(sorted(wanted & set(sys.modules)))\n"
        "print('httpx._main' in sys.modules)\n"  # no placeholder left: a later import is a real one
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == [str(imported), "False"]


class Recorded(httpcore.AsyncNetworkStream):
    """A stream that records what is done to it, over one end of a socket pair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.done: list[tuple[str, Any]] = []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.done.append(("read", max_bytes))
        return b"HTTP/1.1 200 OK\r\n"

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.done.append(("write", buffer))

    async def aclose(self) -> None:
        self.done.append(("close", None))

    def get_extra_info(self, info: str) -> Any:
        self.done.append(("info", info))
        return self.sock if info == "socket" else None


class Opens(httpcore.AsyncNetworkBackend):
    def __init__(self, stream: Recorded) -> None:
        self.stream = stream

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        return self.stream


def test_a_requests_writes_go_out_in_one_send_when_its_reply_is_read() -> None:
    ours, _theirs = socket.socketpair()
    recorded = Recorded(ours)

    async def request() -> bytes:
        stream = await quick_streams()(Opens(recorded)).connect_tcp("example.org", 443)
        await stream.write(b"POST / HTTP/1.1\r\n\r\n")
        await stream.write(b"")  # the end of the body: nothing to send
        await stream.write(b'{"x": 1}')
        assert [kind for kind, _ in recorded.done] == ["info"]  # nothing sent yet
        return await stream.read(65536)

    assert asyncio.run(request()) == b"HTTP/1.1 200 OK\r\n"
    assert recorded.done[1:] == [("write", b'POST / HTTP/1.1\r\n\r\n{"x": 1}'), ("read", 65536)]
    ours.close()
    _theirs.close()


def test_an_idle_connection_is_readable_once_the_server_sent_or_closed_and_asks_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours, theirs = socket.socketpair()
    recorded = Recorded(ours)

    async def check() -> list[bool]:
        stream = await quick_streams()(Opens(recorded)).connect_tcp("example.org", 443)
        quiet = stream.get_extra_info("is_readable")
        theirs.close()  # the server closed the idle connection: the next read returns b""
        closed = stream.get_extra_info("is_readable")
        await stream.read(65536)
        # A connection that answered a moment ago is not polled (the pool asks many times a second).
        just_read = stream.get_extra_info("is_readable")
        monkeypatch.setattr(http, "RECENTLY_READ_S", 0.0)
        polled_again = stream.get_extra_info("is_readable")
        ours.close()
        gone = stream.get_extra_info("is_readable")  # no descriptor: as if closed
        return [quiet, closed, just_read, polled_again, gone]

    assert asyncio.run(check()) == [False, True, False, True, True]
    assert recorded.done == [("info", "socket"), ("read", 65536)]  # the socket once, at the start


@pytest.mark.parametrize("transport", ["wire", "aiohttp", "httpx"])
def test_a_reply_read_straight_from_the_pool_is_decoded_as_httpx_would(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The calls go through the wire, or to httpx's connection pool without httpx's response
    # objects around them, or through aiohttp; a gzip-encoded reply (which httpx and aiohttp ask
    # for, and a server may send unasked) and an error reply still read as httpx reads them, and the
    # plain one is the JSON it carried.
    if transport != "wire":
        monkeypatch.setattr(http, "USE_WIRE", False)
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    if transport == "httpx":
        monkeypatch.setattr(http, "USE_AIOHTTP", False)
    import gzip
    import json

    import httpx

    replies = [
        (200, [], json.dumps({"id": "plain", "text": "é"}).encode()),
        (200, [("Content-Encoding", "gzip")], gzip.compress(json.dumps({"id": "zipped"}).encode())),
        (
            529,
            [("retry-after", "3")],
            json.dumps({"error": {"type": "overloaded_error", "message": "busy"}}).encode(),
        ),
    ]
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for status, headers, body in replies:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(
                    line.split(b":")[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            seen.append(head + await reader.readexactly(length))
            lines = [
                f"HTTP/1.1 {status} X",
                f"Content-Length: {len(body)}",
                *(f"{k}: {v}" for k, v in headers),
            ]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            await writer.drain()
        writer.close()

    async def scenario() -> tuple[Any, Any, http.HttpStatusError]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        api = http.JsonApi(f"http://127.0.0.1:{port}", {"x-api-key": "k"}, timeout=5)
        try:
            plain = await api.post("/v1/messages", {"n": 1})
            zipped = await api.post("/v1/messages", {"n": 2})
            with pytest.raises(http.HttpStatusError) as failed:
                await api.post("/v1/messages", {"n": 3})
            if transport == "httpx":
                assert api._targets  # they went through the pool, not through httpx's transport
            else:
                assert api._session is not None and not api._clients
            return plain, zipped, failed.value
        finally:
            await api.aclose()
            server.close()

    plain, zipped, failed = asyncio.run(scenario())
    assert (plain.id, plain.text, zipped.id) == ("plain", "é", "zipped")
    assert (failed.status_code, failed.message, failed.type) == (529, "busy", "overloaded_error")
    assert isinstance(failed.response, httpx.Response) and failed.response.headers["retry-after"] == "3"
    head = seen[0].split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"post /v1/messages http/1.1\r\n") and b"\r\nhost: 127.0.0.1:" in head
    assert b"x-api-key: k" in head and b"content-type: application/json" in head
    assert seen[0].endswith(b'{"n": 1}') and b"content-length: 8" in head


def _one_reply_server(seen: list[bytes]) -> Any:
    """A server that records each request's head and answers it with a small JSON object."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head)
        lines = head.lower().split(b"\r\n")
        length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
        await reader.readexactly(length)
        body = b'{"id": "ok"}'
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    return serve


def _one_post(monkeypatch: pytest.MonkeyPatch, base_path: str = "") -> tuple[str, dict[str, bool], bytes]:
    """One ``post`` of a fresh JsonApi, with no proxy in the environment, to a local server at
    ``base_path``: the reply's id, which clients the API held (the wire, aiohttp's session, httpx's
    shards), and the head of the request the server got."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    seen: list[bytes] = []

    async def scenario() -> tuple[str, dict[str, bool]]:
        server = await asyncio.start_server(_one_reply_server(seen), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        api = http.JsonApi(f"http://127.0.0.1:{port}{base_path}", {"x-api-key": "k"}, timeout=5)
        try:
            reply = await api.post("/v1/messages", {"n": 1})
            held = {
                "wire": api._wire is not None,
                "aiohttp": api._session is not None,
                "httpx": bool(api._clients),
            }
            return reply.id, held
        finally:
            await api.aclose()
            server.close()

    reply_id, held = asyncio.run(scenario())
    return reply_id, held, seen[0]


def test_the_native_routes_send_through_aiohttp_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # aiohttp's C parser and pool take half the loop thread's CPU per call that httpx's pure-Python
    # stack did (benchmarks/speed_bench.py); it carries the calls the wire does not (streamed ones,
    # or all of them with the wire off) whenever it is installed and no proxy applies.
    pytest.importorskip("aiohttp")
    monkeypatch.setattr(http, "USE_WIRE", False)
    reply_id, held, head = _one_post(monkeypatch)
    assert (reply_id, held) == ("ok", {"wire": False, "aiohttp": True, "httpx": False})
    assert b"aiohttp" in head.lower() and b"x-api-key: k" in head.lower()


def test_the_native_routes_send_their_unstreamed_calls_on_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    # The unstreamed calls (all but a model's first) are written straight to a kept-alive
    # connection (judge/backends/wire.py), with the API's headers, asking for no compression.
    reply_id, held, head = _one_post(monkeypatch, "/api")
    assert (reply_id, held["wire"]) == ("ok", True)
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /api/v1/messages HTTP/1.1"
    assert {"user-agent: pytest-aimeasure", "accept-encoding: identity", "x-api-key: k"} <= set(lines)
    assert "content-length: 8" in lines


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_proxy_named_by_the_environment_carries_the_calls_through_httpx(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aiohttp is used only where httpx would connect directly: a proxy from the environment keeps
    # httpx's rules for it (the request goes to the proxy, in absolute form).
    for scheme in ("http", "https", "all", "no"):
        monkeypatch.delenv(f"{scheme}_proxy", raising=False)
        monkeypatch.delenv(f"{scheme.upper()}_PROXY", raising=False)
    seen: list[bytes] = []

    async def scenario() -> Any:
        proxy = await asyncio.start_server(_one_reply_server(seen), "127.0.0.1", 0)
        monkeypatch.setenv(variable, f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}")
        api = http.JsonApi("http://judge.invalid:8080", {"x-api-key": "k"}, timeout=5)
        try:
            reply = await api.post("/v1/messages", {"n": 1})
            return reply.id, api._session
        finally:
            await api.aclose()
            proxy.close()

    assert asyncio.run(scenario()) == ("ok", None)
    assert seen[0].startswith(b"POST http://judge.invalid:8080/v1/messages HTTP/1.1\r\n")
    assert b"pytest-aimeasure" not in seen[0]  # (not the wire's request)
