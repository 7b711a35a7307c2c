"""A client that spends nothing on a call but its sockets: what the local server alone costs a span.

Run by ``speed_bench.py`` beside our sessions, in its own process, against the same server:

    python benchmarks/reference_client.py --url http://127.0.0.1:PORT --calls 900 --start 32 --ceiling 64

It sends ``--calls`` Messages API requests with a forced tool (the request our ``anthropic/`` route
makes, one body built once), over kept-alive connections opened as they are needed, with our
adaptive limit's first-session schedule: ``--start`` calls at once, then one more call in flight per
answer up to ``--ceiling`` (slow start, as our limit grows in its first round), and each answer
starts the next call at once. It reads each reply's head and body and checks the status, nothing
more: no JSON, no verdict, no journal, no pytest.

Its judging span over the floor (calls x latency / calls in flight) is the part of ours that the
server and the machine take, whatever the client: the server is Python threads that parse each
request and write each reply under one lock, and a loopback send runs the receiving side's TCP
stack too. What ours reads above it is what our judge costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from urllib.parse import urlsplit

BODY = {
    "model": "claude-bench",
    "max_tokens": 1024,
    "temperature": 0,
    "system": "You grade one artifact on one dimension. Call record_verdict once.",
    "messages": [
        {
            "role": "user",
            "content": "Dimension: quality. Rubric: 5 = vivid and precise; 1 = muddled.\n\n"
            "Artifact:\nStory 1: the fox apologised to the crow and fixed the fence.",
        }
    ],
    "tools": [
        {
            "name": "record_verdict",
            "description": "Record the verdict.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "dimension": {"type": "string"},
                    "score": {"type": "integer", "minimum": 1, "maximum": 5},
                    "rationale": {"type": "string"},
                },
                "required": ["dimension", "score", "rationale"],
            },
        }
    ],
    "tool_choice": {"type": "tool", "name": "record_verdict"},
}


class Failed(Exception):
    """A reply that was not a 200: the reference measures nothing then."""


async def run(url: str, calls: int, start: int, ceiling: int) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    body = json.dumps(BODY).encode()
    request = (
        f"POST {parts.path.rstrip('/')}/v1/messages HTTP/1.1\r\nHost: {host}:{port}\r\n"
        "content-type: application/json\r\nx-api-key: reference\r\nanthropic-version: 2023-06-01\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    every: list[asyncio.StreamWriter] = []
    state = {"left": calls, "limit": start, "in_flight": 0}
    running: set[asyncio.Task[None]] = set()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def call() -> None:
        if idle:
            reader, writer = idle.pop()
        else:
            reader, writer = await asyncio.open_connection(host, port)
            every.append(writer)
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise Failed(head.split(b"\r\n", 1)[0].decode(errors="replace"))
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
        idle.append((reader, writer))

    def ended(task: asyncio.Task[None]) -> None:
        running.discard(task)
        state["in_flight"] -= 1
        if task.exception() is not None:
            if not done.done():
                done.set_exception(task.exception())  # type: ignore[arg-type]
            return
        state["limit"] = min(state["limit"] + 1, ceiling)
        fill()

    def fill() -> None:
        while state["left"] > 0 and state["in_flight"] < state["limit"]:
            state["left"] -= 1
            state["in_flight"] += 1
            task = asyncio.ensure_future(call())
            running.add(task)  # (a task nothing refers to may be collected before it ends)
            task.add_done_callback(ended)
        if state["left"] == 0 and state["in_flight"] == 0 and not done.done():
            done.set_result(None)

    fill()
    try:
        await done
    finally:
        for writer in every:
            writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="the server's base URL")
    parser.add_argument("--calls", type=int, default=900)
    parser.add_argument("--start", type=int, default=32, help="calls in flight at first")
    parser.add_argument("--ceiling", type=int, default=64, help="the most calls in flight")
    args = parser.parse_args()
    if not 1 <= args.start <= args.ceiling or args.calls < 1:
        raise SystemExit("need 1 <= --start <= --ceiling and --calls >= 1")
    asyncio.run(asyncio.wait_for(run(args.url, args.calls, args.start, args.ceiling), 600))


if __name__ == "__main__":
    main()
