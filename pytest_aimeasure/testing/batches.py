"""The batch APIs of the local provider: Anthropic's Message Batches (``/v1/messages/batches``) and
OpenAI's Batch API (``/v1/files`` + ``/v1/batches``, as litellm's ``create_file`` / ``create_batch`` /
``retrieve_batch`` / ``file_content`` call it).

Enough of the API for the real ``anthropic`` SDK's ``client.messages.batches.create / retrieve /
results / cancel``: a batch is answered request by request the moment it is created, through the same
scripting as single calls (scores, faults, the prompt cache), but its results are only visible once
:attr:`BatchDesk.delay` seconds have passed (``processing_status`` goes from ``in_progress`` to
``ended``). A request whose scripted outcome is an error reply becomes an ``errored`` result carrying
that error (a batch that partly fails); :meth:`BatchDesk.expire_next` makes the next batches expire
instead (every request ``expired``, as when the real API's 24 hours run out).

The OpenAI flavour works the same way on a JSONL file uploaded with ``purpose=batch``: each line's
``body`` (a Chat Completions request) is answered through the same scripting; once the batch has
ended (``status: completed``) the successes are in its ``output_file_id`` and the failures (an error
reply, or ``batch_expired`` for a batch that expired) in its ``error_file_id``, as the real API does.

Counters (:attr:`BatchDesk.created`, ``requests``, ``uploads``, ``retrieves``, ``result_reads``,
``read``) let a test prove a resumed session polled a batch and never submitted it again. Stdlib only.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, Protocol

from pytest_aimeasure.testing.protocols import ProtocolName, Reply, SeenRequest, error_reply, parse_request

__all__ = ["OPENAI_PREFIXES", "PREFIX", "BatchDesk"]

PREFIX = "/v1/messages/batches"
OPENAI_PREFIXES = ("/v1/files", "/v1/batches")
"""The OpenAI Batch API's paths: the input/output files and the batches."""


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
    input_file_id: str | None = None  # an OpenAI batch; None for a Message Batch
    output_file_id: str | None = None
    error_file_id: str | None = None
    failed: str | None = None  # an OpenAI batch refused whole (status "failed"): why


def _bad(message: str, param: str | None = None) -> tuple[int, Any]:
    return 400, error_reply("openai", 400, message, param=param).payload


def _jsonl(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _public(result: dict[str, Any]) -> dict[str, Any]:
    """A Message Batch result as the API shows it (without the HTTP status kept for OpenAI's files)."""
    return {key: value for key, value in result.items() if key != "status"}


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class BatchDesk:
    """The server's Message Batches: scripting (:attr:`delay`, :meth:`expire_next`) and counters."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._batches: dict[str, _Batch] = {}
        self._files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self._expire = 0
        self._refuse: list[str] = []
        self.refused = 0
        """Batches refused whole (:meth:`refuse_next`)."""
        self.delay = 0.0
        """Seconds from a batch's creation until it has ended (its results become readable)."""
        self.created = 0
        """Batches created."""
        self.requests = 0
        """Requests received inside created batches."""
        self.retrieves = 0
        """Polls: a batch retrieved."""
        self.result_reads = 0
        """Results read (a Message Batch's results, an OpenAI batch's output or error file)."""
        self.read: list[str] = []
        """The batches whose results were read, one entry a read (an OpenAI batch's: its output or
        error file)."""
        self.uploads = 0
        """OpenAI input files uploaded."""
        self.lists = 0
        """Batch listings (``GET /v1/messages/batches``, ``GET /v1/batches``)."""
        self.on_create: Callable[[str], None] | None = None
        """Called with a new batch's id once it exists, before the create is answered (a test kills
        the client there: the batch exists, its id never reached the client)."""
        self._drop_id = 0

    def drop_id_next(self) -> None:
        """The next create is answered 200 without the batch's ``id`` (a gateway that mangles the
        reply); the batch is created all the same."""
        with self._lock:
            self._drop_id += 1

    def _created(self, batch: _Batch, view: dict[str, Any]) -> tuple[int, Any]:
        """Keep a new batch and answer its create."""
        with self._lock:
            self._batches[batch.id] = batch
            self.created += 1
            self.requests += len(batch.custom_ids)
            drop = self._drop_id > 0
            self._drop_id -= 1 if drop else 0
        if self.on_create is not None:
            self.on_create(batch.id)
        return 200, {k: v for k, v in view.items() if k != "id"} if drop else view

    def _listing(self, views: list[dict[str, Any]]) -> dict[str, Any]:
        """A first (and only) page of batches, newest first, as both APIs page them."""
        with self._lock:
            self.lists += 1
        views = views[::-1]
        first, last = (views[0]["id"], views[-1]["id"]) if views else (None, None)
        return {"object": "list", "data": views, "has_more": False, "first_id": first, "last_id": last}

    def refuse_next(self, message: str) -> None:
        """The next batch is refused whole, as an input the API cannot take: a Message Batch's
        create is answered 400 ``invalid_request_error``; an OpenAI batch is created with status
        ``failed`` and ``message`` in its ``errors``."""
        with self._lock:
            self._refuse.append(message)

    def _refusal(self) -> str | None:
        with self._lock:
            if not self._refuse:
                return None
            self.refused += 1
            return self._refuse.pop(0)

    def expire_next(self, count: int = 1) -> None:
        """The next ``count`` batches expire: they end with every request ``expired``, unprocessed."""
        with self._lock:
            self._expire += count

    def end_all(self) -> None:
        """End every batch created so far now, whatever :attr:`delay` said: a test that polls before
        and after the end does not race the clock."""
        now = time.monotonic()
        with self._lock:
            for batch in self._batches.values():
                batch.ends = min(batch.ends, now)

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
        if method == "GET" and not parts:
            with self._lock:
                batches = [b for b in self._batches.values() if b.input_file_id is None]
            return 200, self._listing([self._view(b, base_url) for b in batches])
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
                self.read.append(batch.id)
            lines = [
                json.dumps({"custom_id": cid, "result": _public(self._result(batch, cid))})
                for cid in batch.custom_ids
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
        refused = self._refusal()
        if refused is not None:
            return 400, error_reply("anthropic", 400, refused).payload
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
        return self._created(batch, self._view(batch, base_url))

    def _answer(self, params: dict[str, Any], protocol: ProtocolName = "anthropic") -> dict[str, Any]:
        path = PREFIX if protocol == "anthropic" else OPENAI_PREFIXES[1]
        seen = parse_request(protocol, path, params, {}, time.monotonic())
        self._server._record(seen)
        reply = self._server._respond(seen)
        seen.status = reply.status
        seen.finished = time.monotonic()
        if reply.status == 200:
            return {"type": "succeeded", "message": reply.payload}
        return {"type": "errored", "error": reply.payload, "status": reply.status}

    # -- the OpenAI Batch API ------------------------------------------------------------------------
    def handle_openai(self, method: str, path: str, raw: bytes, content_type: str) -> tuple[int, Any]:
        """(status, JSON payload, or a str of JSON lines) for a request under :data:`OPENAI_PREFIXES`."""
        parts = path.strip("/").split("/")[1:]  # ["files", id, "content"] or ["batches", id, ...]
        kind, rest = parts[0], parts[1:]
        if kind == "files":
            if method == "POST" and not rest:
                return self._upload(raw, content_type)
            stored = self._file(rest[0]) if rest else None
            if stored is None:
                return 404, error_reply("openai", 404, f"No such File object: {path}").payload
            if method == "GET" and rest[1:] == ["content"]:
                if stored[0]["purpose"] == "batch_output":
                    with self._lock:
                        self.result_reads += 1
                        self.read.append(str(stored[0]["batch"]))
                return 200, stored[1].decode("utf-8")
            if method == "GET" and len(rest) == 1:
                return 200, stored[0]
        elif kind == "batches":
            if method == "POST" and not rest:
                try:
                    body = json.loads(raw.decode("utf-8")) if raw else {}
                except (ValueError, UnicodeDecodeError) as exc:
                    return _bad(f"could not parse the request body: {exc}")
                return self._create_openai(body if isinstance(body, dict) else {})
            if method == "GET" and not rest:
                with self._lock:
                    batches = [b for b in self._batches.values() if b.input_file_id is not None]
                return 200, self._listing([self._openai_view(b) for b in batches])
            batch = self._get(rest[0]) if rest else None
            if batch is None or batch.input_file_id is None:
                return 404, error_reply("openai", 404, f"No batch found: {path}").payload
            if method == "GET" and len(rest) == 1:
                with self._lock:
                    self.retrieves += 1
                return 200, self._openai_view(batch)
            if method == "POST" and rest[1:] == ["cancel"]:
                batch.canceled = True
                return 200, self._openai_view(batch)
        return 404, error_reply("openai", 404, f"Not found: {method} {path}").payload

    def _upload(self, raw: bytes, content_type: str) -> tuple[int, Any]:
        fields: dict[str, tuple[str | None, bytes]] = {}
        if "multipart/form-data" in content_type:
            message = BytesParser(policy=HTTP).parsebytes(
                f"Content-Type: {content_type}\r\n\r\n".encode() + raw
            )
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition")
                data = part.get_payload(decode=True)
                if isinstance(name, str) and isinstance(data, bytes):
                    fields[name] = (part.get_filename(), data)
        purpose, content = fields.get("purpose"), fields.get("file")
        if purpose is None or content is None:
            return 400, error_reply(
                "openai", 400, "a multipart form with 'file' and 'purpose' is required"
            ).payload
        if purpose[1].decode() != "batch":
            return 400, error_reply(
                "openai", 400, f"purpose {purpose[1].decode()!r} is not served here"
            ).payload
        with self._lock:
            self.uploads += 1
        return 200, self._store(content[1], "batch", content[0] or "input.jsonl")

    def _store(self, data: bytes, purpose: str, filename: str, batch: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": f"file-{uuid.uuid4().hex[:24]}",
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        if batch is not None:
            meta["batch"] = batch  # not in the API's file object: which batch's results it holds
        with self._lock:
            self._files[str(meta["id"])] = (meta, data)
        return meta

    def _file(self, file_id: str) -> tuple[dict[str, Any], bytes] | None:
        with self._lock:
            return self._files.get(file_id)

    def _create_openai(self, body: dict[str, Any]) -> tuple[int, Any]:
        stored = self._file(str(body.get("input_file_id")))
        if stored is None:
            return 400, error_reply(
                "openai", 400, "input_file_id: no such file", param="input_file_id"
            ).payload
        if body.get("endpoint") != "/v1/chat/completions":
            return _bad("endpoint: only /v1/chat/completions is served")
        lines = [json.loads(line) for line in stored[1].decode("utf-8").splitlines() if line.strip()]
        ids = [str(line.get("custom_id")) for line in lines]
        if not lines or len(set(ids)) != len(lines):
            return _bad("the input file needs lines with unique custom_id")
        refused = self._refusal()
        with self._lock:
            expired = self._expire > 0 and refused is None
            self._expire -= 1 if expired else 0
        results: dict[str, dict[str, Any]] = {}
        for line in lines:
            params = line.get("body")
            if not isinstance(params, dict) or "model" not in params or "messages" not in params:
                return _bad("body: model and messages are required")
            if not expired and refused is None:
                results[str(line["custom_id"])] = self._answer(params, "openai")
        batch = _Batch(
            id=f"batch_{uuid.uuid4().hex[:24]}",
            created=datetime.now(timezone.utc),
            ends=time.monotonic() + self.delay,
            delay=self.delay,
            expired=expired,
            results=results,
            custom_ids=ids,
            input_file_id=str(body["input_file_id"]),
            failed=refused,
        )
        return self._created(batch, self._openai_view(batch))

    def _openai_failed(self, batch: _Batch) -> dict[str, Any]:
        """A batch refused at validation: ``failed`` at once, nothing processed."""
        created = int(batch.created.timestamp())
        error = {"code": "invalid_request", "message": batch.failed, "param": None, "line": 1}
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": {"object": "list", "data": [error]},
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": "failed",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": created,
            "failed_at": created,
            "expires_at": created + 24 * 3600,
            "request_counts": {"total": len(batch.custom_ids), "completed": 0, "failed": 0},
            "metadata": {},
        }

    def _openai_files(self, batch: _Batch) -> None:
        """Write the ended batch's output and error files (once)."""
        if batch.output_file_id is not None or batch.error_file_id is not None:
            return
        out: list[str] = []
        errors: list[str] = []
        for cid in batch.custom_ids:
            result = self._result(batch, cid)
            line: dict[str, Any] = {"id": f"batch_req_{uuid.uuid4().hex[:24]}", "custom_id": cid}
            if result["type"] in ("expired", "canceled"):
                code = "batch_expired" if result["type"] == "expired" else "batch_cancelled"
                line |= {"response": None, "error": {"code": code, "message": f"request {result['type']}"}}
                errors.append(json.dumps(line))
                continue
            status = 200 if result["type"] == "succeeded" else int(result.get("status", 500))
            payload = result["message"] if result["type"] == "succeeded" else result["error"]
            line |= {"response": {"status_code": status, "request_id": cid, "body": payload}, "error": None}
            (out if status == 200 else errors).append(json.dumps(line))
        if out:
            batch.output_file_id = self._store(_jsonl(out), "batch_output", "output.jsonl", batch.id)["id"]
        if errors:
            batch.error_file_id = self._store(_jsonl(errors), "batch_output", "errors.jsonl", batch.id)["id"]

    def _openai_view(self, batch: _Batch) -> dict[str, Any]:
        if batch.failed is not None:
            return self._openai_failed(batch)
        ended = self._ended(batch)
        if ended:
            self._openai_files(batch)
        types = [self._result(batch, cid)["type"] if ended else "processing" for cid in batch.custom_ids]
        created = int(batch.created.timestamp())
        lifetime = batch.delay if batch.expired else 24 * 3600
        status = "in_progress"
        if ended:
            status = "expired" if batch.expired else ("cancelled" if batch.canceled else "completed")
        elif batch.canceled:
            status = "cancelling"
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": created,
            "in_progress_at": created,
            "expires_at": created + int(lifetime),
            "finalizing_at": None,
            "completed_at": created + int(batch.delay) if status == "completed" else None,
            "failed_at": None,
            "expired_at": created + int(batch.delay) if status == "expired" else None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {
                "total": len(types),
                "completed": types.count("succeeded"),
                "failed": sum(t not in ("succeeded", "processing") for t in types),
            },
            "metadata": {},
        }

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
