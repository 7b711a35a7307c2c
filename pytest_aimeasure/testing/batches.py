"""The Anthropic Message Batches API of the local provider (``/v1/messages/batches``).

Enough of the API for the real ``anthropic`` SDK's ``client.messages.batches.create / retrieve /
results / cancel``: a batch is answered request by request the moment it is created, through the same
scripting as single calls (scores, faults, the prompt cache), but its results are only visible once
:attr:`BatchDesk.delay` seconds have passed (``processing_status`` goes from ``in_progress`` to
``ended``). A request whose scripted outcome is an error reply becomes an ``errored`` result carrying
that error (a batch that partly fails); :meth:`BatchDesk.expire_next` makes the next batches expire
instead (every request ``expired``, as when the real API's 24 hours run out).

Counters (:attr:`BatchDesk.created`, ``requests``, ``retrieves``, ``result_reads``) let a test prove a
resumed session polled a batch and never submitted it again. Stdlib only.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from pytest_aimeasure.testing.protocols import Reply, SeenRequest, error_reply, parse_request

__all__ = ["PREFIX", "BatchDesk"]

PREFIX = "/v1/messages/batches"


class _Server(Protocol):
    def _record(self, seen: SeenRequest) -> None: ...

    def _respond(self, seen: SeenRequest) -> Reply: ...


@dataclass
class _Batch:
    id: str
    created: datetime
    ends: float  # monotonic
    delay: float
    expired: bool
    results: dict[str, dict[str, Any]]
    canceled: bool = False
    custom_ids: list[str] = field(default_factory=list)


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class BatchDesk:
    """The server's Message Batches: scripting (:attr:`delay`, :meth:`expire_next`) and counters."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._batches: dict[str, _Batch] = {}
        self._expire = 0
        self.delay = 0.0
        """Seconds from a batch's creation until it has ended (its results become readable)."""
        self.created = 0
        """Batches created."""
        self.requests = 0
        """Requests received inside created batches."""
        self.retrieves = 0
        self.result_reads = 0

    def expire_next(self, count: int = 1) -> None:
        """The next ``count`` batches expire: they end with every request ``expired``, unprocessed."""
        with self._lock:
            self._expire += count

    @property
    def ids(self) -> list[str]:
        with self._lock:
            return list(self._batches)

    # -- HTTP ----------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, body: dict[str, Any] | None, base_url: str) -> tuple[int, Any]:
        """(status, JSON payload, or a str of JSON lines) for a request under :data:`PREFIX`."""
        rest = path[len(PREFIX) :].strip("/")
        parts = rest.split("/") if rest else []
        if method == "POST" and not parts:
            return self._create(body or {}, base_url)
        batch = self._get(parts[0]) if parts else None
        if batch is None:
            return 404, error_reply("anthropic", 404, f"batch not found: {path}").payload
        if method == "GET" and len(parts) == 1:
            with self._lock:
                self.retrieves += 1
            return 200, self._view(batch, base_url)
        if method == "GET" and parts[1:] == ["results"]:
            if not self._ended(batch):
                return 400, error_reply("anthropic", 400, f"batch {batch.id} is still in progress").payload
            with self._lock:
                self.result_reads += 1
            lines = [
                json.dumps({"custom_id": cid, "result": self._result(batch, cid)}) for cid in batch.custom_ids
            ]
            return 200, "\n".join(lines) + "\n"
        if method == "POST" and parts[1:] == ["cancel"]:
            batch.canceled = True
            return 200, self._view(batch, base_url)
        return 404, error_reply("anthropic", 404, f"Not found: {method} {path}").payload

    def _create(self, body: dict[str, Any], base_url: str) -> tuple[int, Any]:
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return 400, error_reply("anthropic", 400, "requests: a non-empty list is required").payload
        ids = [str(r.get("custom_id")) for r in requests if isinstance(r, dict)]
        if len(set(ids)) != len(requests):
            return 400, error_reply("anthropic", 400, "requests: custom_id values must be unique").payload
        with self._lock:
            expired = self._expire > 0
            self._expire -= 1 if expired else 0
        results: dict[str, dict[str, Any]] = {}
        for entry in requests:
            params = entry.get("params")
            if not isinstance(params, dict) or "model" not in params or "messages" not in params:
                return 400, error_reply("anthropic", 400, "params: model and messages are required").payload
            if not expired:
                results[str(entry["custom_id"])] = self._answer(params)
        batch = _Batch(
            id=f"msgbatch_{uuid.uuid4().hex[:24]}",
            created=datetime.now(timezone.utc),
            ends=time.monotonic() + self.delay,
            delay=self.delay,
            expired=expired,
            results=results,
            custom_ids=ids,
        )
        with self._lock:
            self._batches[batch.id] = batch
            self.created += 1
            self.requests += len(ids)
        return 200, self._view(batch, base_url)

    def _answer(self, params: dict[str, Any]) -> dict[str, Any]:
        seen = parse_request("anthropic", PREFIX, params, {}, time.monotonic())
        self._server._record(seen)
        reply = self._server._respond(seen)
        seen.status = reply.status
        seen.finished = time.monotonic()
        if reply.status == 200:
            return {"type": "succeeded", "message": reply.payload}
        return {"type": "errored", "error": reply.payload}

    # -- state ---------------------------------------------------------------------------------------
    def _get(self, batch_id: str) -> _Batch | None:
        with self._lock:
            return self._batches.get(batch_id)

    def _ended(self, batch: _Batch) -> bool:
        return batch.canceled or time.monotonic() >= batch.ends

    def _result(self, batch: _Batch, cid: str) -> dict[str, Any]:
        if batch.expired:
            return {"type": "expired"}
        if batch.canceled and time.monotonic() < batch.ends:
            return {"type": "canceled"}
        return batch.results[cid]

    def _view(self, batch: _Batch, base_url: str) -> dict[str, Any]:
        ended = self._ended(batch)
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for cid in batch.custom_ids:
            counts[self._result(batch, cid)["type"] if ended else "processing"] += 1
        ended_at = batch.created + timedelta(seconds=batch.delay) if ended else None
        lifetime = timedelta(seconds=batch.delay) if batch.expired else timedelta(hours=24)
        expires_at = batch.created + lifetime
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else ("canceling" if batch.canceled else "in_progress"),
            "request_counts": counts,
            "created_at": _stamp(batch.created),
            "expires_at": _stamp(expires_at),
            "ended_at": _stamp(ended_at) if ended_at is not None else None,
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": f"{base_url}{PREFIX}/{batch.id}/results" if ended else None,
        }
