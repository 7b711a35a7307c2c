"""The run store: every run's metadata, artifacts and judged samples, recorded as they complete.

Layout under the store root (``.aimeasure/`` at the rootdir by default)::

    runs/<run_id>/meta.json                 RunMeta; rewritten atomically (temp + fsync + replace)
    runs/<run_id>/owner.json                host and pid of the process that marked the run running
    runs/<run_id>/journal-<writer>.jsonl    one SampleRecord per line, one file per writing process
    runs/<run_id>/items.jsonl               one ItemResult per line (the controller only)
    runs/<run_id>/artifacts-<writer>.jsonl  the run's artifact manifest: key -> sha256, label, media type
    artifacts/<sha[:2]>/<sha256>            content-addressed artifact bytes, written once
    cache.sqlite                            the sample index (see :mod:`pytest_aimeasure.store.cache`)

Why it is shaped like this:

* **One folder per run, one file per writer.** Listing runs reads only ``meta.json`` files, never
  history; deleting a run is one rename; xdist workers (``gw0``, ``gw1``...) and the controller each
  append to their own files, so lines of different processes never interleave.
* **Append + fsync per record.** A record returned by :meth:`Journal.append` is on disk: a killed
  process, an OS crash or a power cut loses at most the record being written, which then shows up as
  a torn last line. Readers skip and report torn lines instead of failing; a writer that reopens a
  file whose last line is torn first ends it with a newline, so new records never glue onto it.
* **Artifacts are content-addressed**, so a rerun or a ``--aimeasure-rejudge`` that sees the same output
  stores nothing new, and a run's manifest is enough to re-score its artifacts without regenerating them.

Nothing here imports a model SDK: the plugin imports this module at session start.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer
from pydantic_core import to_json

from pytest_aimeasure.measure.models import ItemResult, RunMeta, Sample, first_error
from pytest_aimeasure.store.fileio import atomic_write, fsync_dir

__all__ = [
    "ArtifactRef",
    "Journal",
    "MediaType",
    "Run",
    "RunFilter",
    "RunStore",
    "SampleKey",
    "SampleRecord",
    "StoreError",
    "default_writer",
    "git_info",
    "read_item_records",
    "read_journal",
    "sample_line",
    "utc_now",
]

MediaType = Literal["text", "json", "bytes"]
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_KNOWN_IDS_SHOWN = 10
_GIT_TIMEOUT_S = 3.0
# Read access is for checking the last byte on reopen; O_BINARY stops Windows from writing \r\n.
_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0)
_M = TypeVar("_M", bound=BaseModel)
RunFilter = Callable[[RunMeta], "str | None"]  # None: the run will do; else why it will not


class StoreError(Exception):
    """A problem with the run store. The message names the path and what to do about it."""

    def __init__(self, message: str, *, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


class SampleKey(NamedTuple):
    """What makes two judge calls the same draw. The index keeps repeated samples independent."""

    fingerprint: str
    prompt_hash: str
    artifact_sha256: str
    # Shadows tuple.index on purpose: keys stay plain tuples, equal to the engine's (fp, prompt, sha, i).
    index: int  # type: ignore[assignment]


class SampleRecord(BaseModel):
    """One journaled sample: the verdict plus where it belongs."""

    model_config = ConfigDict(extra="forbid")

    key: SampleKey
    item_id: str
    nodeid: str
    sample: Sample
    recorded_at: str = Field(default_factory=lambda: utc_now())

    @field_serializer("key")
    def _key_as_object(self, key: SampleKey) -> dict[str, Any]:
        # An object, not an array: the journal is meant to be read by people too.
        return key._asdict()


class ArtifactRef(BaseModel):
    """One entry of a run's artifact manifest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    sha256: str
    label: str | None = None
    size: int
    media_type: MediaType


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a ``Z`` suffix (sorts as text)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def default_writer() -> str:
    """This process's journal name: the xdist worker id (``gw0``...) on a worker, else ``controller``."""
    return os.environ.get("PYTEST_XDIST_WORKER") or "controller"


def _check_name(kind: str, name: str) -> str:
    if not _NAME_RE.match(name):
        raise StoreError(
            f"invalid {kind} {name!r}: use letters, digits, '.', '_' and '-' only, not starting with '.'"
        )
    return name


# --------------------------------------------------------------------------------------------------
# Durable file primitives
# --------------------------------------------------------------------------------------------------


class AppendFile:
    """A file opened for appending whole lines: one ``write`` per line, so a line that was appended
    survives ``kill -9`` of the process at once; ``fsync`` (against a power cut) is per line by
    default, or grouped: ``append_line(..., sync=False)`` then :meth:`sync` once for what belongs
    together (an item's samples), or :meth:`sync_soon` to have a background thread do it. One fsync
    covers every line written before it, so callers that sync at once share it (group commit)."""

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        self.path = path
        self._fsync = fsync
        self._failed = False
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()  # one fsync at a time; held by close() too
        self._written = 0  # lines written so far
        self._synced = 0  # lines an fsync has covered
        self._sync_error: StoreError | None = None  # a background fsync's failure, raised next time
        created = not path.exists()
        try:
            self._fd: int | None = os.open(path, _APPEND_FLAGS, 0o666)  # minus the umask, as fileio's files
        except OSError as exc:
            raise StoreError(f"cannot open {path} for appending: {exc}", path=path) from exc
        if created:
            fsync_dir(path.parent)
        else:
            self._end_torn_line()

    def _end_torn_line(self) -> None:
        # A writer killed mid-append leaves a line without its newline; end it so the next record
        # starts on a line of its own (readers report the fragment as a corrupt line).
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if not size:
            return
        os.lseek(self._fd, size - 1, os.SEEK_SET)  # for reading only: O_APPEND writes go to the end
        if os.read(self._fd, 1) != b"\n":
            self._write(b"\n")
            if self._fsync:
                os.fsync(self._fd)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:  # a regular-file write is whole in practice; loop for the rare short write
            written = os.write(self._fd, view)
            view = view[written:]
        self._written += 1

    def append_line(self, line: str, *, sync: bool = True) -> None:
        self.append_encoded(line.encode(), sync=sync)

    def append_encoded(self, line: bytes, *, sync: bool = True) -> None:
        """:meth:`append_line` for a line already encoded (UTF-8, without its newline)."""
        data = line + b"\n"
        with self._lock:
            if self._fd is None:
                raise StoreError(f"{self.path} is closed", path=self.path)
            if self._sync_error is not None:
                error, self._sync_error = self._sync_error, None
                raise error
            if self._failed:
                data = b"\n" + data  # a failed write may have left part of a line behind
            try:
                self._write(data)
                self._failed = False
            except OSError as exc:
                self._failed = True
                raise StoreError(
                    f"cannot append to {self.path}: {exc} (is the disk full?)", path=self.path
                ) from exc
        if sync:
            self.sync()

    def sync(self) -> None:
        """Return once every line appended before this call is fsync-ed (by this call or by one
        another thread made meanwhile)."""
        if not self._fsync:
            return
        target = self._written
        if self._synced >= target:
            return
        with self._sync_lock:
            if self._synced >= target:
                return  # another caller's fsync covered these lines
            with self._lock:
                fd, upto = self._fd, self._written
            if fd is None:
                return  # closed: close() synced what was written
            try:
                os.fsync(fd)
            except OSError as exc:
                raise StoreError(
                    f"cannot fsync {self.path}: {exc} (is the disk full?)", path=self.path
                ) from exc
            self._synced = max(self._synced, upto)

    def sync_soon(self) -> None:
        """fsync what was appended on the background syncer thread; a failure is raised by the next
        append (or close)."""
        if self._fsync and self._synced < self._written:
            _SYNCER.request(self)

    def _background_sync(self) -> None:
        try:
            self.sync()
        except StoreError as exc:
            self._sync_error = exc

    def close(self) -> None:
        with self._sync_lock:
            with self._lock:
                fd, self._fd = self._fd, None
                unsynced = self._synced < self._written
            if fd is None:
                return
            try:
                if self._fsync and unsynced:
                    os.fsync(fd)
                    self._synced = self._written
            except OSError as exc:
                raise StoreError(
                    f"cannot fsync {self.path}: {exc} (is the disk full?)", path=self.path
                ) from exc
            finally:
                os.close(fd)
        if self._sync_error is not None:
            error, self._sync_error = self._sync_error, None
            raise error


SYNC_REST_S = 0.2
"""After a background fsync the syncer rests this long; what is requested meanwhile is merged into
its next fsync. An item's record is on disk within about this long (its samples were fsync-ed before
its verdict), and a session of many quick items pays a few fsyncs a second, not one per item: waking
the thread and syncing for each item was 1.2 ms of CPU per item, 2,000 scripted items under load."""


class _Syncer:
    """One daemon thread that fsyncs the append files handed to it, so a caller that need not wait
    for the disk (an item's final record) does not. Requests made while it syncs or rests
    (:data:`SYNC_REST_S`) are merged into one fsync per file."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[int, AppendFile] = {}
        self._thread: threading.Thread | None = None
        self._waiting = False  # the thread waits for a request (it is not syncing nor resting)

    def request(self, file: AppendFile) -> None:
        with self._cond:
            self._pending[id(file)] = file
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="aimeasure-fsync", daemon=True)
                self._thread.start()
            if self._waiting:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._waiting = True
                    self._cond.wait()
                self._waiting = False
                batch, self._pending = list(self._pending.values()), {}
            for file in batch:
                file._background_sync()
            time.sleep(SYNC_REST_S)


_SYNCER = _Syncer()


class Journal(AppendFile):
    """One process's sample journal for one run. Thread-safe.

    :meth:`append` writes the record with a single ``write`` before it returns, so a returned record
    survives ``kill -9``; with ``sync=True`` (the default) it is ``fsync``-ed too, and so survives,
    as far as the disk honours fsync, a power cut. The judge engine appends an item's samples with
    ``sync=False`` and calls :meth:`sync` once the item's samples are in: one fsync per completed
    item, shared by the items that complete together. ``fsync=False`` exists for the benchmark and
    for throwaway stores.
    """

    def append(self, record: SampleRecord, *, sync: bool = True) -> None:
        self.append_line(record.model_dump_json(), sync=sync)

    def append_sample(
        self,
        key: SampleKey,
        *,
        item_id: str,
        nodeid: str,
        sample_json: bytes,
        recorded_at: str,
        sync: bool = True,
    ) -> None:
        """:meth:`append` of the record of a sample already encoded (:func:`sample_line`)."""
        self.append_encoded(sample_line(key, item_id, nodeid, sample_json, recorded_at), sync=sync)


def sample_line(key: SampleKey, item_id: str, nodeid: str, sample_json: bytes, recorded_at: str) -> bytes:
    """The journal line of a :class:`SampleRecord`, the same bytes as its ``model_dump_json()``, made
    around the sample's JSON encoded once (the cache indexes that same text) instead of building and
    validating the record and encoding the sample a second time for the cache: 1.4 µs beside the
    sample's one encoding (2.8 µs), where the record took 12.7 µs (measured alone, loaded machine)."""
    return b"".join(
        (
            b'{"key":',
            to_json(key._asdict()),
            b',"item_id":',
            to_json(item_id),
            b',"nodeid":',
            to_json(nodeid),
            b',"sample":',
            sample_json,
            b',"recorded_at":',
            to_json(recorded_at),
            b"}",
        )
    )


def _read_jsonl(path: Path, model: type[_M]) -> tuple[list[_M], list[str]]:
    """Parse a JSON-lines file, tolerating a torn last line. Returns (records, problems)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [], [f"{path}: cannot read ({exc})"]
    records: list[_M] = []
    problems: list[str] = []
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: empty unless the final append was cut short
    if tail:
        problems.append(
            f"{path}: torn last line skipped ({len(tail)} bytes without a newline; "
            "the writer was interrupted mid-append)"
        )
    last = len(lines)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            records.append(model.model_validate_json(raw))
        except ValidationError as exc:
            where = "last line" if number == last and not tail else f"line {number}"
            reason = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            problems.append(f"{path}: {where} skipped: {reason}")
    return records, problems


def read_journal(path: Path) -> tuple[list[SampleRecord], list[str]]:
    """The records of one journal file and the problems met (torn or corrupt lines are skipped)."""
    return _read_jsonl(path, SampleRecord)


def _media_type(content: str | bytes) -> MediaType:
    if isinstance(content, bytes):
        return "bytes"
    head = content.lstrip()[:1]
    if head in ("{", "["):
        try:
            json.loads(content)
        except ValueError:
            return "text"
        return "json"
    return "text"


# --------------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------------


class Run:
    """One run's folder. Obtain it from :meth:`RunStore.start_run` or :meth:`RunStore.open_run`.

    ``writer`` names this process's files (journal and artifact manifest); it defaults to the xdist
    worker id, or ``controller``.
    """

    def __init__(self, store: RunStore, run_id: str, meta: RunMeta, *, writer: str | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.path = store.runs_dir / run_id
        self.meta = meta
        self.writer = _check_name("writer name", writer or default_writer())
        self._journals: dict[str, Journal] = {}
        self._items: AppendFile | None = None
        self._manifest_file: AppendFile | None = None
        self._manifest: dict[str, ArtifactRef] | None = None
        self._owner_pid: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, writer={self.writer!r})"

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata --------------------------------------------------------------------------------
    def write_meta(self, meta: RunMeta) -> None:
        """Replace meta.json atomically. Marking the run ``running`` also records this process as
        its owner, so a run whose owner died can be shown as interrupted."""
        if meta.run_id != self.run_id:
            raise StoreError(f"meta names run {meta.run_id!r} but this is run {self.run_id!r}")
        if meta.status == "running" and self._owner_pid != os.getpid():
            owner = {"host": socket.gethostname(), "pid": os.getpid()}
            atomic_write(self.path / "owner.json", json.dumps(owner).encode())
            self._owner_pid = os.getpid()
        atomic_write(self.path / "meta.json", meta.model_dump_json(indent=2).encode() + b"\n")
        self.meta = meta

    # -- artifacts -------------------------------------------------------------------------------
    def record_artifact(
        self,
        key: str,
        content: str | bytes,
        *,
        label: str | None = None,
        media_type: MediaType | None = None,
    ) -> ArtifactRef:
        """Store ``content`` (once, by sha256) and list it in this run's manifest under ``key``.

        ``media_type`` defaults to ``bytes`` for bytes, ``json`` for a str that parses as a JSON
        object or array, else ``text``; :meth:`load_artifact` gives back str for text and json.
        """
        data = content if isinstance(content, bytes) else content.encode()
        sha = self.store.put_artifact(data)
        ref = ArtifactRef(
            key=key, sha256=sha, label=label, size=len(data), media_type=media_type or _media_type(content)
        )
        self.adopt_artifact(ref)
        return ref

    def adopt_artifact(self, ref: ArtifactRef) -> None:
        """List an already stored artifact in this run's manifest (resume: no bytes are copied)."""
        if not self.store.artifact_path(ref.sha256).exists():
            raise StoreError(
                f"artifact {ref.sha256} ({ref.key}) is not in the store at {self.store.artifacts_dir}",
                path=self.store.artifact_path(ref.sha256),
            )
        with self._lock:
            if self._manifest_file is None:
                self._manifest_file = AppendFile(self.path / f"artifacts-{self.writer}.jsonl")
            self._manifest_file.append_line(ref.model_dump_json())
            if self._manifest is not None:
                self._manifest[ref.key] = ref

    def artifacts(self) -> dict[str, ArtifactRef]:
        """This run's manifest, read from disk (all writers' files; the last entry of a key wins)."""
        manifest: dict[str, ArtifactRef] = {}
        for path in sorted(self.path.glob("artifacts-*.jsonl")):
            refs, _ = _read_jsonl(path, ArtifactRef)
            manifest.update((ref.key, ref) for ref in refs)
        with self._lock:
            self._manifest = dict(manifest)
        return manifest

    def artifact(self, key: str) -> ArtifactRef | None:
        """The manifest entry for ``key``, or None (used by ``--aimeasure-rejudge`` and resume)."""
        with self._lock:
            known = None if self._manifest is None else self._manifest.get(key)
        if known is not None:
            return known
        # Another process may have recorded it since we last read the manifest.
        return self.artifacts().get(key)

    def load_artifact(self, key: str) -> str | bytes | None:
        """The stored content for ``key`` (str for text and json), or None when the run has no such key."""
        ref = self.artifact(key)
        if ref is None:
            return None
        data = self.store.read_artifact(ref.sha256)
        return data if ref.media_type == "bytes" else data.decode()

    # -- journals and items ----------------------------------------------------------------------
    def journal(self, writer: str | None = None, *, fsync: bool = True) -> Journal:
        """This run's journal for ``writer`` (default: this process's writer), opened once and shared."""
        name = _check_name("writer name", writer or self.writer)
        with self._lock:
            journal = self._journals.get(name)
            if journal is None:
                journal = Journal(self.path / f"journal-{name}.jsonl", fsync=fsync)
                self._journals[name] = journal
            return journal

    def record_item(self, result: ItemResult) -> None:
        """Append one test's final record. Called by the controller as each test ends: the line is
        written before this returns (a killed session keeps it) and fsync-ed by the background
        syncer within about :data:`SYNC_REST_S`, so the test loop does not wait for the disk; the
        samples behind it were fsync-ed when they were judged."""
        with self._lock:
            if self._items is None:
                self._items = AppendFile(self.path / "items.jsonl")
            items = self._items
        items.append_line(result.model_dump_json(), sync=False)
        items.sync_soon()

    def read_items(self) -> tuple[list[ItemResult], list[str]]:
        """(items, problems). A nodeid recorded twice (a resumed run) keeps its last record."""
        return read_item_records(self.path / "items.jsonl")

    def items(self) -> list[ItemResult]:
        return self.read_items()[0]

    def samples(self) -> tuple[list[SampleRecord], list[str]]:
        """Every journaled sample of this run (all writers), and the problems met reading them.

        A torn last line is skipped and reported; so is a corrupt line anywhere else. The same
        (key, item) journaled twice, e.g. by a resumed process, is returned once (the first record).
        """
        out: list[SampleRecord] = []
        problems: list[str] = []
        seen: set[tuple[SampleKey, str]] = set()
        for path in sorted(self.path.glob("journal-*.jsonl")):
            records, file_problems = read_journal(path)
            problems += file_problems
            for record in records:
                ident = (record.key, record.item_id)
                if ident not in seen:
                    seen.add(ident)
                    out.append(record)
        return out, problems

    def close(self) -> None:
        with self._lock:
            files: list[AppendFile] = list(self._journals.values())
            files += [f for f in (self._items, self._manifest_file) if f is not None]
            self._journals.clear()
            self._items = self._manifest_file = None
        for handle in files:
            handle.close()


# --------------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return True  # cannot tell: do not call it dead
    return True


def _sort_key(meta: RunMeta) -> tuple[str, str]:
    return (meta.started_at, meta.run_id)


def read_item_records(path: Path) -> tuple[list[ItemResult], list[str]]:
    """A run's ``items.jsonl``: (items, problems). A nodeid recorded twice (a resumed run) keeps its
    last record; a missing file holds none."""
    if not path.exists():
        return [], []
    records, problems = _read_jsonl(path, ItemResult)
    latest: dict[str, ItemResult] = {}
    for record in records:
        latest.pop(record.nodeid, None)
        latest[record.nodeid] = record
    return list(latest.values()), problems


class RunStore:
    """The store root. Cheap to construct: nothing is read or created until a method needs it."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.runs_dir = self.root / "runs"
        self.artifacts_dir = self.root / "artifacts"
        self.cache_path = self.root / "cache.sqlite"

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    # -- setup -----------------------------------------------------------------------------------
    def ensure_writable(self) -> None:
        """Create the store if needed and prove it takes writes. Call before any judge call: a run
        that cannot record its samples would spend money and keep nothing."""
        hint = "point the store elsewhere (--aimeasure-store / aimeasure_store) or fix the permissions"
        try:
            for folder in (self.root, self.runs_dir, self.artifacts_dir):
                folder.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(dir=self.root, prefix=".write-probe-")
            try:
                os.write(fd, b"ok")
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(probe)
        except OSError as exc:
            msg = f"the run store {self.root} is not writable: {exc}; {hint}"
            raise StoreError(msg, path=self.root) from exc
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            # Like .pytest_cache: keeps the store out of `git status`, and out of git_info's "dirty".
            with contextlib.suppress(OSError):
                atomic_write(ignore, b"# created by pytest-aimeasure: the run store is local\n*\n")

    @staticmethod
    def new_run_id() -> str:
        """A sortable id: UTC start time plus a short random suffix, e.g. ``20261129T232400Z-3fa2``."""
        return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"

    # -- runs ------------------------------------------------------------------------------------
    def start_run(self, meta: RunMeta, *, writer: str | None = None) -> Run:
        """Create the run folder and write its meta.json. The id must be new."""
        path = self.runs_dir / _check_name("run id", meta.run_id)
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            path.mkdir()
        except FileExistsError as exc:
            msg = f"run {meta.run_id} already exists at {path}; use a new run id"
            raise StoreError(msg, path=path) from exc
        except OSError as exc:
            raise StoreError(f"cannot create run folder {path}: {exc}", path=path) from exc
        fsync_dir(self.runs_dir)
        run = Run(self, meta.run_id, meta, writer=writer)
        run.write_meta(meta)
        return run

    def open_run(self, run_id: str, *, writer: str | None = None) -> Run:
        """An existing run, for xdist workers, resume and ``--aimeasure-rejudge``."""
        path = self.runs_dir / _check_name("run id", run_id)
        if not path.is_dir():
            raise StoreError(self._unknown_message(run_id), path=path)
        return Run(self, run_id, self._read_meta(path), writer=writer)

    def _read_meta(self, path: Path) -> RunMeta:
        meta_path = path / "meta.json"
        try:
            meta = RunMeta.model_validate_json(meta_path.read_bytes())
        except FileNotFoundError as exc:
            msg = f"{path}: no meta.json (not a run folder, or its start was cut short)"
            raise StoreError(msg, path=path) from exc
        except OSError as exc:
            raise StoreError(f"{meta_path}: cannot read ({exc})", path=path) from exc
        except ValidationError as exc:
            raise StoreError(f"{meta_path}: invalid ({first_error(exc, 'file')})", path=path) from exc
        if meta.run_id != path.name:
            msg = f"{meta_path}: names run {meta.run_id!r}, but the folder is {path.name!r}"
            raise StoreError(msg, path=path)
        return meta

    def _run_dirs(self) -> Iterator[Path]:
        try:
            entries = list(os.scandir(self.runs_dir))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot list {self.runs_dir}: {exc}", path=self.runs_dir) from exc
        for entry in entries:
            # Dot names are ours: trash from an interrupted delete, temp files.
            if not entry.name.startswith(".") and entry.is_dir():
                yield Path(entry.path)

    def journal_paths(self) -> list[Path]:
        """Every journal file of every run (for rebuilding the sample cache)."""
        return sorted(p for d in self._run_dirs() for p in d.glob("journal-*.jsonl"))

    def run_ids(self) -> list[str]:
        """Run folder names, newest first (ids sort by start time). Reads no files."""
        return sorted((p.name for p in self._run_dirs()), reverse=True)

    def list_runs(self) -> tuple[list[RunMeta], list[StoreError]]:
        """Every run's metadata, newest first, and one problem per run folder that could not be read.

        Only meta.json files (and, for runs marked running, the tiny owner.json) are read: journals,
        items and artifacts never are, so listing stays fast however long the history. A run marked
        running whose owner process on this host is gone is returned with status ``interrupted``.
        """
        metas: list[RunMeta] = []
        problems: list[StoreError] = []
        for path in self._run_dirs():
            try:
                meta = self._read_meta(path)
            except StoreError as exc:
                problems.append(exc)
                continue
            if meta.status == "running" and self._owner_gone(path):
                meta = meta.model_copy(update={"status": "interrupted"})
            metas.append(meta)
        metas.sort(key=_sort_key, reverse=True)
        problems.sort(key=lambda p: str(p.path))
        return metas, problems

    def owner_alive(self, run_id: str) -> bool:
        """Is the process that marked this run running alive on this host? (False when unknown.)"""
        try:
            owner = json.loads((self.runs_dir / run_id / "owner.json").read_text())
            host, pid = owner["host"], int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return bool(host == socket.gethostname() and pid != os.getpid() and _pid_alive(pid))

    @staticmethod
    def _owner_gone(path: Path) -> bool:
        try:
            owner = json.loads((path / "owner.json").read_text())
            host, pid = owner["host"], int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return False  # unknown owner: do not guess
        return bool(host == socket.gethostname() and not _pid_alive(pid))

    def newest_runs(self) -> Iterator[RunMeta]:
        """The readable runs, newest first, as :meth:`list_runs` orders them, read lazily.

        Run ids carry their start to the second, so folders are walked newest name first and only
        the runs of one second are read and ordered by ``started_at`` at a time; the first usable
        run costs one or two meta.json reads, not the whole history. A folder whose meta.json cannot
        be read is skipped (``list_runs`` names it): one broken run never hides the others."""
        ids = self.run_ids()
        start = 0
        while start < len(ids):
            stamp = ids[start].split("-", 1)[0]
            end = start
            while end < len(ids) and ids[end].split("-", 1)[0] == stamp:
                end += 1
            metas: list[RunMeta] = []
            for run_id in ids[start:end]:
                path = self.runs_dir / run_id
                try:
                    meta = self._read_meta(path)
                except StoreError:
                    continue
                if meta.status == "running" and self._owner_gone(path):
                    meta = meta.model_copy(update={"status": "interrupted"})
                metas.append(meta)
            metas.sort(key=_sort_key, reverse=True)
            yield from metas
            start = end

    def latest(self, usable: RunFilter | None = None, *, wanted: str = "a run") -> str:
        """The one way a run is chosen as "latest": the newest readable run that ``usable`` accepts.

        ``usable(meta)`` returns None for a run that will do, else why it will not; the CLI's
        ``latest`` takes any readable run, ``--aimeasure-rejudge``/``--aimeasure-resume`` pass what the
        session needs. When no run will do, the error lists the candidates (newest first) with the
        reason each was passed over, and the folders that could not be read."""
        passed_over: list[str] = []
        for meta in self.newest_runs():
            why = usable(meta) if usable is not None else None
            if why is None:
                return meta.run_id
            passed_over.append(f"{meta.run_id}: {why}")
        ids = self.run_ids()
        if not ids:
            raise StoreError(f"there are no runs in {self.root} yet", path=self.runs_dir)
        broken = [f"{p.path.name if p.path else '?'}: {p}" for p in self.list_runs()[1]]
        shown = passed_over[:_KNOWN_IDS_SHOWN] + broken[: max(0, _KNOWN_IDS_SHOWN - len(passed_over))]
        hidden = len(passed_over) + len(broken) - len(shown)
        more = f"\n  ... and {hidden} more" if hidden > 0 else ""
        lines = "\n  ".join(shown)
        msg = f"no run in {self.root} holds {wanted}; the runs, newest first:\n  {lines}{more}"
        raise StoreError(msg, path=self.runs_dir)

    def resolve(self, ref: str, usable: RunFilter | None = None, *, wanted: str = "a run") -> str:
        """A run id from an id, a unique prefix of one, or ``latest`` (see :meth:`latest`; ``usable``
        and ``wanted`` apply to ``latest`` only: a run named by the user is taken as named)."""
        if ref == "latest":
            return self.latest(usable, wanted=wanted)
        ids = self.run_ids()
        if ref in ids:
            return ref
        matches = [i for i in ids if i.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(matches[:_KNOWN_IDS_SHOWN])
            msg = f"{ref!r} matches {len(matches)} runs ({shown}); give more of the id"
            raise StoreError(msg, path=self.runs_dir)
        raise StoreError(self._unknown_message(ref, ids), path=self.runs_dir)

    def _unknown_message(self, ref: str, ids: list[str] | None = None) -> str:
        ids = self.run_ids() if ids is None else ids
        if not ids:
            return f"no run {ref!r}: there are no runs in {self.root} yet"
        shown = ", ".join(ids[:_KNOWN_IDS_SHOWN])
        more = f" and {len(ids) - _KNOWN_IDS_SHOWN} older" if len(ids) > _KNOWN_IDS_SHOWN else ""
        return f"no run {ref!r} in {self.root}; known runs, newest first: {shown}{more}"

    def delete_run(self, run_id: str) -> None:
        """Delete one run: rename its folder to a trash name (one atomic step), then remove it.

        Artifacts stay: they are shared by content with other runs."""
        path = self.runs_dir / _check_name("run id", run_id)
        if not path.is_dir():
            raise StoreError(self._unknown_message(run_id), path=path)
        trash = self.runs_dir / f".trash-{run_id}-{secrets.token_hex(3)}"
        try:
            os.replace(path, trash)
        except OSError as exc:
            raise StoreError(f"cannot delete {path}: {exc}", path=path) from exc
        fsync_dir(self.runs_dir)
        self._empty_trash()

    def _empty_trash(self) -> None:
        for entry in self.runs_dir.glob(".trash-*"):
            try:
                shutil.rmtree(entry)
            except OSError as exc:
                raise StoreError(
                    f"run deleted, but {entry} could not be removed ({exc}); remove it by hand", path=entry
                ) from exc

    # -- artifacts -------------------------------------------------------------------------------
    def artifact_path(self, sha: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise StoreError(f"{sha!r} is not a sha256 hex digest")
        return self.artifacts_dir / sha[:2] / sha

    def put_artifact(self, data: bytes) -> str:
        """Store bytes by their sha256 (once) and return the digest."""
        sha = hashlib.sha256(data).hexdigest()
        path = self.artifact_path(sha)
        if path.exists():
            return sha
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data)
        except OSError as exc:
            raise StoreError(f"cannot store artifact {path}: {exc}", path=path) from exc
        return sha

    def read_artifact(self, sha: str) -> bytes:
        """The artifact's bytes, checked against its digest."""
        path = self.artifact_path(sha)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise StoreError(
                f"artifact {path} is missing from the store; the runs that list it cannot be rejudged",
                path=path,
            ) from exc
        except OSError as exc:
            raise StoreError(f"cannot read artifact {path}: {exc}", path=path) from exc
        if hashlib.sha256(data).hexdigest() != sha:
            msg = f"artifact {path} is corrupt (its content no longer matches its sha256)"
            raise StoreError(msg, path=path)
        return data


# --------------------------------------------------------------------------------------------------
# Metadata helpers
# --------------------------------------------------------------------------------------------------


def _git(rootdir: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=rootdir,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_info(rootdir: Path | str) -> tuple[str | None, bool | None]:
    """(HEAD commit, whether the work tree has changes), each None when git cannot tell."""
    root = Path(rootdir)
    head = _git(root, "rev-parse", "HEAD")
    if head is None:
        return None, None
    status = _git(root, "status", "--porcelain")
    return head.strip() or None, None if status is None else bool(status.strip())
