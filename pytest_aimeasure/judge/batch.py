"""Batch mode (``--judge-batch``): judge calls go through a provider's batch API at batch prices.

Two batch APIs are spoken: Anthropic's Message Batches (the anthropic SDK, :class:`AnthropicBatches`)
and OpenAI's Batch API through litellm (``create_file`` + ``create_batch`` / ``retrieve_batch`` /
``file_content``, :class:`OpenAIBatches`); :class:`Batcher` does the rest, the same for both.

A judge call in batch mode is not sent at once: its request body joins an open batch, which is
submitted once no new request arrived for :data:`LINGER_S` (or it holds :data:`MAX_REQUESTS`). The
submitted batch is polled with backoff (``--judge-batch-poll`` seconds first, then 1.5 times longer
each time, at most :data:`MAX_POLL_S`) until it ends, and each result settles the call that waits for
it, which goes on as any judge call would (validation, a retry with feedback, the journal).

Every request has a ``custom_id`` derived from its body and sample (the same call in a later session
gets the same id). Before a batch is created, its custom_ids are appended (fsync-ed) to the run's
batch journal (``batches-<writer>.jsonl`` in the run folder) as an intent; the moment it exists, its
id is appended with them, so a session that was killed while a batch was in flight and is resumed
with ``--aimeasure-resume`` polls that batch for those requests and never submits them again. A kill
between the create and the journaled id leaves only the intent: the resumed session first looks the
batch up among the provider's recent batches (:meth:`BatchAPI.find`) and polls it when it is there.
A create answered without a batch id is refused at once (nothing could ever poll it).

A result that failed:

* ``errored`` with a transient error (``api_error``, ``overloaded_error``, ``rate_limit_error``) is a
  retryable failure of that call: the engine retries it (in the next batch), up to ``--judge-retries``;
  any other error (``invalid_request_error``...) is a judge error of its item, with the provider's
  message;
* ``expired`` (the batch ended, 24 hours after it was created, before the request was processed) or
  ``canceled`` is a judge error naming the batch; ``--aimeasure-resume`` submits those requests again
  in a new batch (their results do not exist, so there is nothing to poll).

Identical requests pending at once (two items with the same artifact, rubric and sample index) share
one custom_id and one result, as the sample cache would have them share a sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_aimeasure.judge.backends.base import BackendError, rejection

LINGER_S = 0.25
"""A batch is submitted once no new request joined it for this long."""
MAX_REQUESTS = 10_000
"""A batch is submitted at once when it holds this many requests (the API takes up to 100,000)."""
MAX_POLL_S = 60.0
"""The longest pause between two polls of a batch."""
POLL_GROWTH = 1.5
EXPIRY_GRACE_S = 60.0
"""A batch still not ended this long after its ``expires_at`` is given up on (its requests expire)."""
DEFAULT_POLL_S = 5.0

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def custom_id(body: dict[str, Any], sample: str) -> str:
    """The request's id in a batch: the same body and sample give the same id in every session."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "aim-" + hashlib.sha256(f"{sample}\n{text}".encode()).hexdigest()[:48]


JOURNAL_GLOB = "batches-*.jsonl"
"""The batch journals of a run folder (one per writing process)."""

FIND_SLACK_S = 300.0
"""A batch looked up for a journaled intent may have been created this long before the intent was
written (the provider's clock and ours differ)."""


class BatchJournal:
    """The run's record of submitted batches: ``batches-<writer>.jsonl`` in the run folder, one line a
    batch, appended and fsync-ed the moment the batch exists at the provider."""

    def __init__(self, run_path: Path, writer: str) -> None:
        self.run_path = run_path
        self.path = run_path / f"batches-{writer}.jsonl"

    def _entries(self) -> list[tuple[float, str | None, list[str]]]:
        """(at, batch id or None for an intent, custom_ids) of every writer's file of the run."""
        entries: list[tuple[float, str | None, list[str]]] = []
        for path in sorted(self.run_path.glob(JOURNAL_GLOB)):
            with contextlib.suppress(OSError), path.open(encoding="utf-8") as handle:
                for line in handle:
                    try:
                        entry = json.loads(line)
                        batch_id = entry.get("batch_id")
                        at, ids = float(entry["at"]), [str(cid) for cid in entry["custom_ids"]]
                    except (ValueError, KeyError, TypeError, AttributeError):
                        continue  # a torn last line of a killed process
                    entries.append((at, None if batch_id is None else str(batch_id), ids))
        return entries

    def known(self) -> dict[str, str]:
        """custom_id -> the batch it was last submitted in, over every writer's file of the run."""
        found: dict[str, tuple[float, str]] = {}
        for at, batch_id, ids in self._entries():
            if batch_id is None:
                continue
            for cid in ids:
                if cid not in found or found[cid][0] <= at:
                    found[cid] = (at, batch_id)
        return {cid: batch for cid, (_, batch) in found.items()}

    def orphans(self) -> dict[str, float]:
        """custom_id -> when its batch was about to be created, for the intents whose batch id was
        never journaled (the process died between the create and the journal): the batch may exist."""
        entries = self._entries()
        submitted: dict[str, float] = {}
        for at, batch_id, ids in entries:
            if batch_id is not None:
                for cid in ids:
                    submitted[cid] = max(submitted.get(cid, at), at)
        orphaned: dict[str, float] = {}
        for at, batch_id, ids in entries:
            if batch_id is None:
                for cid in ids:
                    if submitted.get(cid, float("-inf")) < at:
                        orphaned[cid] = at
        return orphaned

    def intend(self, custom_ids: list[str]) -> float:
        """Journal that a batch of ``custom_ids`` is about to be created; returns when (epoch s)."""
        at = time.time()
        self._append({"at": at, "custom_ids": custom_ids})
        return at

    def submitted(self, batch_id: str, custom_ids: list[str]) -> None:
        self._append({"batch_id": batch_id, "at": time.time(), "custom_ids": custom_ids})

    def _append(self, entry: dict[str, Any]) -> None:
        # The store's append file ends a torn line a killed writer left, so this entry stays readable
        # (glued to a fragment, known() would skip it and a resume would pay for the batch again).
        from pytest_aimeasure.store.runs import AppendFile

        self.run_path.mkdir(parents=True, exist_ok=True)
        journal = AppendFile(self.path)
        try:
            journal.append_line(json.dumps(entry))
        finally:
            journal.close()


@dataclass(frozen=True)
class Result:
    """One request's result in an ended batch, whatever the provider."""

    custom_id: str
    kind: str
    """``succeeded``, ``errored``, ``expired`` or ``canceled``."""
    reply: Any = None
    """``succeeded``: the reply, as the backend's single call returns it (an SDK ``Message``, a
    litellm ``ModelResponse``)."""
    status: int = 500
    """``errored``: the HTTP status the request would have had alone."""
    error_type: str = "api_error"
    message: str = ""


@dataclass(frozen=True)
class Polled:
    ended: bool
    expires_at: float | None
    """When the provider gives the batch up (epoch seconds), if it says."""


class BatchAPI(Protocol):
    """A provider's batch endpoints, as :class:`Batcher` uses them."""

    provider: str
    """Named in messages: ``anthropic``, ``openai``."""

    async def submit(self, bodies: dict[str, dict[str, Any]]) -> str:
        """Create a batch of ``custom_id -> request body``; its id."""
        ...

    async def poll(self, batch_id: str) -> Polled: ...

    async def find(self, custom_ids: set[str], since: float) -> str | None:
        """A batch created at or after ``since`` (epoch s) that holds ``custom_ids``, if the provider
        lists one among its recent batches."""
        ...

    def results(self, batch_id: str) -> AsyncIterator[Result]:
        """The ended batch's results."""
        ...


class AnthropicBatches:
    """The Message Batches API through the anthropic SDK; ``client`` returns the SDK client for the
    running loop (the backend's)."""

    provider = "anthropic"

    def __init__(self, client: Callable[[], Any]) -> None:
        self._client = client

    async def submit(self, bodies: dict[str, dict[str, Any]]) -> str:
        requests = [{"custom_id": cid, "params": body} for cid, body in bodies.items()]
        batch = await self._client().messages.batches.create(requests=requests)
        return _batch_id(self.provider, "POST /v1/messages/batches", batch)

    async def find(self, custom_ids: set[str], since: float) -> str | None:
        # A Message Batch shows its custom_ids only in its results, once it has ended: one created
        # after the intent with as many requests is taken (a request it turns out not to hold is
        # reported missing by its results and retried in a new batch).
        page = await self._client().messages.batches.list(limit=100)
        for batch in page.data:
            counts = batch.request_counts
            total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
            if batch.created_at.timestamp() >= since - FIND_SLACK_S and total == len(custom_ids):
                return str(batch.id)
        return None

    async def poll(self, batch_id: str) -> Polled:
        batch = await self._client().messages.batches.retrieve(batch_id)
        expires = batch.expires_at.timestamp() if batch.expires_at is not None else None
        return Polled(ended=batch.processing_status == "ended", expires_at=expires)

    async def results(self, batch_id: str) -> AsyncIterator[Result]:
        async for entry in await self._client().messages.batches.results(batch_id):
            result = entry.result
            kind = str(result.type)
            if kind == "succeeded":
                yield Result(str(entry.custom_id), kind, reply=result.message)
            elif kind == "errored":
                error = getattr(result.error, "error", None)
                etype = str(getattr(error, "type", "api_error"))
                yield Result(
                    str(entry.custom_id),
                    kind,
                    status=_ERROR_STATUS.get(etype, 500),
                    error_type=etype,
                    message=str(getattr(error, "message", "") or etype),
                )
            else:
                yield Result(str(entry.custom_id), kind)


class OpenAIBatches:
    """OpenAI's Batch API through litellm: the requests go up as a JSONL file (``purpose=batch``),
    a batch is created on it for ``/v1/chat/completions``, and the ended batch's output and error
    files are read back. ``litellm`` is the imported module; ``api_base`` / ``api_key`` as the
    litellm backend resolves them (None: litellm reads ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``)."""

    provider = "openai"
    ENDED = frozenset({"completed", "failed", "expired", "cancelled"})

    def __init__(self, litellm: Any, *, api_base: str | None, api_key: str | None) -> None:
        self._litellm = litellm
        self._where: dict[str, Any] = {"custom_llm_provider": "openai"}
        if api_base is not None:
            self._where["api_base"] = api_base
        if api_key is not None:
            self._where["api_key"] = api_key
        self._files: dict[str, tuple[str | None, str | None]] = {}

    async def submit(self, bodies: dict[str, dict[str, Any]]) -> str:
        lines = [
            json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})
            for cid, body in bodies.items()
        ]
        from pydantic import ValidationError

        try:
            upload = await self._litellm.acreate_file(
                file=("aimeasure-batch.jsonl", ("\n".join(lines) + "\n").encode()),
                purpose="batch",
                **self._where,
            )
        except ValidationError:  # litellm validates the reply: one without an id fails here
            upload = None
        file_id = _batch_id(self.provider, "POST /v1/files", upload)
        try:
            batch = await self._litellm.acreate_batch(
                completion_window="24h", endpoint="/v1/chat/completions", input_file_id=file_id, **self._where
            )
        except ValidationError:
            batch = None
        return _batch_id(self.provider, "POST /v1/batches", batch)

    async def find(self, custom_ids: set[str], since: float) -> str | None:
        # An OpenAI batch names its input file, whose lines carry the custom_ids: an exact match.
        listed = await self._litellm.alist_batches(limit=100, **self._where)
        for batch in getattr(listed, "data", None) or []:
            if float(getattr(batch, "created_at", 0) or 0) < since - FIND_SLACK_S or not batch.input_file_id:
                continue
            content = await self._litellm.afile_content(file_id=batch.input_file_id, **self._where)
            lines = content.content.decode("utf-8").splitlines()
            if {str(json.loads(line).get("custom_id")) for line in lines if line.strip()} == custom_ids:
                return str(batch.id)
        return None

    async def poll(self, batch_id: str) -> Polled:
        # litellm's own success logging would download a completed batch's output once more to price
        # it (we price each sample from its usage); its proxy turns that off with this flag.
        quiet = {"litellm_metadata": {"batch_ignore_default_logging": True}}
        batch = await self._litellm.aretrieve_batch(batch_id=batch_id, **self._where, **quiet)
        status = str(batch.status)
        if status == "failed":
            errors = getattr(getattr(batch, "errors", None), "data", None) or []
            said = "; ".join(str(getattr(e, "message", e)) for e in errors) or "no reason given"
            raise BackendError(f"openai batch {batch_id} failed: {said}")
        self._files[batch_id] = (batch.output_file_id, batch.error_file_id)
        expires = float(batch.expires_at) if batch.expires_at is not None else None
        return Polled(ended=status in self.ENDED, expires_at=expires)

    async def results(self, batch_id: str) -> AsyncIterator[Result]:
        for file_id in self._files.pop(batch_id, (None, None)):
            if file_id is None:
                continue
            content = await self._litellm.afile_content(file_id=file_id, **self._where)
            for line in content.content.decode("utf-8").splitlines():
                if line.strip():
                    yield self._result(json.loads(line))

    def _result(self, line: dict[str, Any]) -> Result:
        cid = str(line.get("custom_id"))
        response, error = line.get("response"), line.get("error")
        if isinstance(error, dict):
            code = str(error.get("code") or "")
            if code == "batch_expired":
                return Result(cid, "expired")
            if code == "batch_cancelled":
                return Result(cid, "canceled")
            return Result(
                cid, "errored", error_type=code or "error", message=str(error.get("message") or code)
            )
        status = int(response.get("status_code", 500)) if isinstance(response, dict) else 500
        body = response.get("body") if isinstance(response, dict) else None
        if status == 200 and isinstance(body, dict):
            return Result(cid, "succeeded", reply=self._litellm.ModelResponse(**body))
        detail = body.get("error") if isinstance(body, dict) else None
        detail = detail if isinstance(detail, dict) else {}
        etype = str(detail.get("type") or detail.get("code") or "error")
        return Result(
            cid, "errored", status=status, error_type=etype, message=str(detail.get("message") or etype)
        )


@dataclass
class _Open:
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None


class Batcher:
    """Collects judge calls into batches, submits, polls and settles them (on the judge loop).

    ``api`` speaks to the provider's batch endpoints; ``journal`` records submitted batches;
    ``poll_s`` is the first pause between polls.
    """

    def __init__(
        self,
        api: BatchAPI,
        journal: BatchJournal | None,
        *,
        poll_s: float = DEFAULT_POLL_S,
        linger_s: float = LINGER_S,
        max_requests: int = MAX_REQUESTS,
    ) -> None:
        self.api = api
        self.journal = journal
        self.poll_s = poll_s
        self.linger_s = linger_s
        self.max_requests = max_requests
        self._known = journal.known() if journal is not None else {}
        self._orphans = journal.orphans() if journal is not None else {}
        self._lookups: dict[float, dict[str, dict[str, Any]]] = {}
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._open = _Open()
        self._resumed_polls: dict[str, asyncio.Task[None]] = {}
        self._resumed_bodies: dict[str, dict[str, dict[str, Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, body: dict[str, Any], sample: str) -> Any:
        """The reply the batch returned for ``body`` (:attr:`Result.reply`); raises a
        :class:`ProviderRejection` or :class:`BackendError` for a failed result."""
        cid = custom_id(body, sample)
        waiting = self._waiting.get(cid)
        if waiting is None:
            waiting = self._waiting[cid] = asyncio.get_running_loop().create_future()
            batch_id = self._known.pop(cid, None)
            intended = self._orphans.pop(cid, None)
            if batch_id is not None:
                self._resume(batch_id, cid, body)
            elif intended is not None:
                self._look_up(intended, cid, body)
            else:
                self._add(cid, body)
        return await asyncio.shield(waiting)

    # -- collecting ------------------------------------------------------------------------------
    def _add(self, cid: str, body: dict[str, Any]) -> None:
        batch = self._open
        batch.bodies[cid] = body
        if batch.timer is not None:
            batch.timer.cancel()
        if len(batch.bodies) >= self.max_requests:
            self._flush()
        else:
            batch.timer = asyncio.get_running_loop().call_later(self.linger_s, self._flush)

    def _flush(self) -> None:
        batch, self._open = self._open, _Open()
        if batch.timer is not None:
            batch.timer.cancel()
        if batch.bodies:
            self._spawn(self._run(batch.bodies))

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- one batch -------------------------------------------------------------------------------
    async def _run(self, bodies: dict[str, dict[str, Any]]) -> None:
        try:
            if self.journal is not None:
                # Before the create: a kill before its id is journaled leaves a batch to look up.
                self.journal.intend(list(bodies))
            try:
                batch_id = await self.api.submit(bodies)
            except Exception as exc:
                raise _transport_error(self.api.provider, "submitting a batch", exc) from exc
            if self.journal is not None:
                # Journaled before anything waits on it: a kill from here on resumes by polling.
                self.journal.submitted(batch_id, list(bodies))
            await self._collect(batch_id, set(bodies))
        except BaseException as exc:
            self._fail(set(bodies), exc)
            if not isinstance(exc, Exception):
                raise

    def _resume(self, batch_id: str, cid: str, body: dict[str, Any]) -> None:
        """Collect ``cid`` from the batch an earlier session submitted (one poller per batch)."""
        self._resumed_bodies.setdefault(batch_id, {})[cid] = body
        poller = self._resumed_polls.get(batch_id)
        if poller is None or poller.done():
            # A request of that batch asked for after its results were read is collected anew.
            self._resumed_polls[batch_id] = self._spawn(self._collect_resumed(batch_id))

    def _look_up(self, intended: float, cid: str, body: dict[str, Any]) -> None:
        """``cid`` was about to be submitted in a batch whose id never reached the journal: look that
        batch up at the provider (once per intent) before submitting it again."""
        waiting = self._lookups.get(intended)
        if waiting is None:
            waiting = self._lookups[intended] = {}
            self._spawn(self._adopt(intended))
        waiting[cid] = body

    async def _adopt(self, intended: float) -> None:
        await asyncio.sleep(0)  # the other requests of that intent the session asks for join
        waiting = self._lookups[intended]
        wanted = {cid for cid, at in self._orphans.items() if at == intended} | set(waiting)
        try:
            batch_id = await self.api.find(wanted, intended)
        except Exception:
            batch_id = None  # no way to look: paying twice beats judging nothing
        del self._lookups[intended]
        for cid, body in waiting.items():
            if batch_id is not None:
                self._resume(batch_id, cid, body)
            else:
                self._add(cid, body)
        if batch_id is not None and self.journal is not None:
            self.journal.submitted(batch_id, sorted(wanted))

    async def _collect_resumed(self, batch_id: str) -> None:
        # Let the other requests of this batch that the session is about to ask for join the poll.
        await asyncio.sleep(0)
        try:
            await self._collect(batch_id, None)
        except BaseException as exc:
            ids = set(self._resumed_bodies.get(batch_id, {}))
            self._fail(ids, exc)
            if not isinstance(exc, Exception):
                raise

    async def _collect(self, batch_id: str, cids: set[str] | None) -> None:
        provider = self.api.provider
        pause = self.poll_s
        while True:
            try:
                polled = await self.api.poll(batch_id)
            except Exception as exc:
                raise _transport_error(provider, f"polling batch {batch_id}", exc) from exc
            if polled.ended:
                break
            if polled.expires_at is not None and time.time() > polled.expires_at + EXPIRY_GRACE_S:
                raise BackendError(
                    f"{provider} batch {batch_id} did not end by its expiry; its requests were not "
                    "judged: rerun with --aimeasure-resume to submit them in a new batch"
                )
            await asyncio.sleep(pause)
            pause = min(pause * POLL_GROWTH, MAX_POLL_S)
        try:
            async for result in self.api.results(batch_id):
                self._settle(batch_id, result)
        except Exception as exc:
            raise _transport_error(provider, f"reading the results of batch {batch_id}", exc) from exc
        # A request the results did not mention is not silently lost.
        left = set(self._resumed_bodies.get(batch_id, {})) if cids is None else cids
        self._fail(
            {cid for cid in left if cid in self._waiting},
            BackendError(f"{provider} batch {batch_id} returned no result for this request", retryable=True),
        )

    def _settle(self, batch_id: str, result: Result) -> None:
        cid = result.custom_id
        future = self._waiting.get(cid)
        if future is None:
            return  # a request of a resumed batch this session does not need
        kind = result.kind
        if kind == "succeeded":
            del self._waiting[cid]
            if not future.done():
                future.set_result(result.reply)
            return
        if kind in ("expired", "canceled") and batch_id in self._resumed_polls:
            # Resumed: its result never existed, so this session submits it again.
            body = self._resumed_bodies.get(batch_id, {}).pop(cid, None)
            if body is not None:
                self._add(cid, body)
                return
        provider = self.api.provider
        if kind == "errored":
            failure: BackendError = rejection(
                f"{provider} batch {batch_id}: request errored: {result.error_type}: {result.message}",
                status=result.status,
                provider_message=result.message,
            )
        else:
            what = "expired (the batch ended before it was processed)" if kind == "expired" else kind
            failure = BackendError(
                f"not judged: {provider} batch {batch_id}: request {what}; rerun with "
                "--aimeasure-resume to submit it in a new batch"
            )
        self._fail({cid}, failure)

    def _fail(self, cids: set[str], exc: BaseException) -> None:
        for cid in cids:
            future = self._waiting.pop(cid, None)
            if future is not None and not future.done():
                future.set_exception(exc if isinstance(exc, Exception) else BackendError(str(exc)))

    async def aclose(self) -> None:
        """Stop polling (batches keep running at the provider; a resumed session collects them)."""
        if self._open.timer is not None:
            self._open.timer.cancel()
        for task in list(self._tasks):
            task.cancel()


def use_batches(backend: Any, journal: BatchJournal | None, *, poll_s: float) -> Batcher:
    """Send ``backend``'s judge calls through its provider's batch API from now on (``--judge-batch``).

    Raises ValueError naming the judge when its backend has no batch API (``use_batches``)."""
    use = getattr(backend, "use_batches", None)
    if use is None:
        raise ValueError(
            f"the judge {getattr(backend, 'model', '?')} is served by {type(backend).__name__}, which has "
            "no batch API; drop --judge-batch"
        )
    try:
        batcher: Batcher = use(journal, poll_s=poll_s)
    except BackendError as exc:
        raise ValueError(str(exc)) from None
    return batcher


def _batch_id(provider: str, call: str, reply: Any) -> str:
    """The id a create call answered with; a reply without one is refused now, not at the first poll."""
    found = getattr(reply, "id", None)
    if not isinstance(found, str) or not found.strip():
        raise BackendError(
            f"{provider} batch API: the reply to {call} has no id; a gateway "
            "in between may not speak the batch API: check the base URL, or drop --judge-batch"
        )
    return found


def _transport_error(provider: str, doing: str, exc: Exception) -> BackendError:
    if isinstance(exc, BackendError):
        return exc
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        message = str(getattr(exc, "message", exc))
        return rejection(
            f"{provider} batch API error {status} {doing}: {message}", status=status, provider_message=message
        )
    return BackendError(f"{provider} batch API: {doing} failed: {exc}", retryable=True)


__all__ = [
    "DEFAULT_POLL_S",
    "JOURNAL_GLOB",
    "AnthropicBatches",
    "BatchAPI",
    "BatchJournal",
    "Batcher",
    "OpenAIBatches",
    "Polled",
    "Result",
    "custom_id",
    "use_batches",
]
