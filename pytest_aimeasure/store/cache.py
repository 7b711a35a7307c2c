"""Sample lookup: resume and the sample cache are one mechanism.

The unit of reuse is a journaled :class:`~pytest_aimeasure.store.runs.SampleRecord`, keyed by
``(fingerprint digest, prompt hash, artifact sha256, sample index)``:

* an unchanged rerun (same judge, same rendered prompt, same artifact) finds every key, so it makes no
  judge call at all;
* the sample index is part of the key, so the N samples of one item stay N independent draws: sample
  #2 is never served the verdict of sample #0, and raising N from 3 to 5 reuses #0-#2 only if the
  fingerprint says the ruler is unchanged;
* changing anything that changes the question (judge model, temperature, rubric, prompt template,
  artifact) changes the key, so a stale verdict can never be reused.

Two sources answer :meth:`SampleLookup.get`, in this order:

1. the journals of the run being resumed (``resume_run``), always, even with the cache off; hits come
   back with ``source="journal"``. An interrupted run therefore costs only the samples it had not
   finished, and a resumed run never depends on the cache;
2. ``cache.sqlite`` at the store root (modes ``on`` and ``replay``): an index of every sample any run
   journaled; hits come back with ``source="cache"``.

The journals are the record; ``cache.sqlite`` is only an index of them and can always be rebuilt from
them (:func:`rebuild_cache`, ``aimeasure cache rebuild``). That decides its durability settings (WAL,
``synchronous=NORMAL``: a power cut may drop the newest index entries, never a journaled sample) and
what a corrupt database does:

* at session start (the controller builds its lookup with ``repair=True``, before any xdist worker
  starts), a cache file that cannot be read, or that is missing or empty while journals exist (a
  crash between sqlite creating the file and its first write leaves it empty), is rebuilt from
  the journals (:func:`rebuild_cache`, under a lock so that two sessions starting at once rebuild
  it once), and :attr:`SampleLookup.notices`
  says so, once: the user sees it, and the run reuses its samples instead of paying for them again.
  When the rebuild itself fails, the cache is off for the session and :attr:`SampleLookup.problems`
  says why and how to fix it.
* mode ``on``, corruption met in the middle of a session (another process damaged the file): the
  cache is turned off for the rest of this process, with a problem naming the file and the fix; the
  next session's start rebuilds it. We do not rebuild in the middle of a run: on a store with a long
  history that means reading every journal ever written, in every xdist worker at once.
* mode ``replay``: there is no run without the cache, so a missing database, or one that cannot be
  read even after a rebuild, raises :class:`CacheError` when the lookup is built (session start),
  before any test runs. A key missing from a healthy cache is the engine's per-item error;
  :meth:`SampleLookup.describe_key` says what is stored near it (other indices, another fingerprint,
  another prompt) so the message can say why.

Concurrency: one sqlite connection per process, opened on first use and shared by threads under a
lock; WAL mode and a busy timeout let several xdist workers write at once; each write is one short
``BEGIN IMMEDIATE`` transaction. A write that still cannot get the lock is reported and skipped: the
sample is already in the journal, only the index misses it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from pytest_aimeasure.measure.models import Sample
from pytest_aimeasure.store.fileio import atomic_write, fsync_dir, lock_path
from pytest_aimeasure.store.runs import (
    Journal,
    Run,
    RunStore,
    SampleKey,
    SampleRecord,
    read_journal,
    utc_now,
)

__all__ = [
    "CacheError",
    "CacheMode",
    "SampleLookup",
    "StoreSink",
    "rebuild_cache",
]

CacheMode = Literal["on", "off", "replay"]
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 15_000
_SETUP_ATTEMPTS = 20
_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS samples (
        fingerprint TEXT NOT NULL,
        prompt_hash TEXT NOT NULL,
        artifact_sha256 TEXT NOT NULL,
        idx INTEGER NOT NULL,
        sample TEXT NOT NULL,
        item_id TEXT NOT NULL,
        nodeid TEXT NOT NULL,
        run_id TEXT,
        recorded_at TEXT NOT NULL,
        PRIMARY KEY (fingerprint, prompt_hash, artifact_sha256, idx)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS samples_artifact ON samples (artifact_sha256)",
)

KeyLike = SampleKey | tuple[str, str, str, int]


class CacheError(Exception):
    """The sample cache cannot be used. The message names the file and how to fix it."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def _is_corruption(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return (code & 0xFF) in _CORRUPT_CODES
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower()


def _fix_hint(path: Path) -> str:
    return (
        "run `aimeasure cache rebuild` to re-index it from the run journals (or delete it and its "
        f"{path.name}-wal and {path.name}-shm files: the next judged session rebuilds it)"
    )


def _corrupt_marker(path: Path) -> Path:
    return path.with_name(f".{path.name}.corrupt")


class _CacheDB:
    """One sqlite connection to a cache file, created lazily, shared by threads under a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self.lock = threading.Lock()

    def connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None
        )
        try:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._setup(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        # Several workers may create the database at the same moment; switching to WAL takes a lock
        # that the busy handler does not always wait for, so retry briefly.
        for attempt in range(_SETUP_ATTEMPTS):
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise sqlite3.DatabaseError(
                        f"schema version {version} is newer than this plugin's ({SCHEMA_VERSION})"
                    )
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                if version < SCHEMA_VERSION:
                    # Not executescript: it would commit the transaction it runs in.
                    with self.transaction(conn):
                        for statement in _SCHEMA:
                            conn.execute(statement)
                        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or attempt + 1 == _SETUP_ATTEMPTS:
                    raise
                time.sleep(0.05 * (attempt + 1))

    @staticmethod
    @contextlib.contextmanager
    def transaction(conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def insert(self, rows: Iterable[tuple[str, str, str, int, str, str, str, str | None, str]]) -> None:
        conn = self.connect()
        with self.transaction(conn):
            conn.executemany("INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


Row = tuple[str, str, str, int, str, str, str, str | None, str]
"""A row of the ``samples`` table."""


def _as_stored(sample: Sample) -> Sample:
    """A sample as the cache stores it: as a judge sample (its source is decided by where a later
    lookup finds it)."""
    return sample if sample.source == "judge" else sample.model_copy(update={"source": "judge"})


def _sample_row(
    key: SampleKey, sample_json: str, item_id: str, nodeid: str, run_id: str | None, recorded_at: str
) -> Row:
    """The ``samples`` row of a sample encoded already (``sample_json``, of :func:`_as_stored`)."""
    return (*key, sample_json, item_id, nodeid, run_id, recorded_at)


def _row(record: SampleRecord, run_id: str | None) -> Row:
    sample_json = _as_stored(record.sample).model_dump_json()
    return _sample_row(record.key, sample_json, record.item_id, record.nodeid, run_id, record.recorded_at)


def _ranges(indices: Iterable[int]) -> str:
    values = sorted(set(indices))
    parts: list[str] = []
    start = prev = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(f"#{start}" if start == prev else f"#{start}-#{prev}")
        if value is not None:
            start = prev = value
    return ", ".join(parts)


INDEX_REST_S = 0.2
"""The sample cache indexes what its sessions' items put at most this often (and at the session's
end): a transaction per item (or per few) was most of the work of making an item's samples durable.
The journal holds every sample the moment it lands (a resumed run reads it back); an index entry
lost with a killed process costs a later session one judge call, never a sample a resume needs."""

_QUESTIONS_KEPT = 256
"""Questions whose stored samples a lookup keeps (items in flight together, with room to spare)."""


class SampleLookup:
    """Finds a stored sample for a key: in the resumed run's journals, then in the cache."""

    def __init__(
        self, store: RunStore, *, mode: CacheMode, resume_run: Run | None = None, repair: bool = False
    ) -> None:
        if mode not in ("on", "off", "replay"):
            raise ValueError(f"cache mode must be on, off or replay, not {mode!r}")
        self.store = store
        self.mode: CacheMode = mode
        self.resume_run = resume_run
        self.problems: list[str] = []
        self.notices: list[str] = []  # things done for the user that they should hear about once
        self._db = _CacheDB(store.cache_path)
        self._disabled = mode == "off"
        self._resume: dict[SampleKey, SampleRecord] = {}
        self._resume_problems: list[str] = []
        self._resume_records: list[SampleRecord] = []
        # Samples put since the last flush, indexed together in one transaction (first put wins).
        self._unindexed: dict[SampleKey, tuple[Sample, Row]] = {}
        self._unindexed_lock = threading.Lock()
        self._indexed_at = -INDEX_REST_S  # (monotonic) the last flush that indexed something
        # The cache's samples of the questions looked up lately (fingerprint, prompt, artifact), by
        # index: an item's N lookups are one query, not N. Under the database's lock; a question is
        # dropped when samples of it are indexed here.
        self._questions: dict[tuple[str, str, str], dict[int, str]] = {}
        if resume_run is not None:
            records, self._resume_problems = resume_run.samples()
            self._resume_records = records
            for record in records:
                self._resume.setdefault(record.key, record)
        if repair and mode != "off":
            self._repair_if_unreadable()
        if mode == "replay":
            self._open_for_replay()

    @property
    def resume_problems(self) -> list[str]:
        """Torn or corrupt lines met in the resumed run's journals (their samples will be re-judged)."""
        return list(self._resume_problems)

    def resumed_records(self) -> list[SampleRecord]:
        """Every sample journaled in the resumed run before this session (all its writers)."""
        return list(self._resume_records)

    @property
    def resumable(self) -> int:
        """How many samples the resumed run's journals offer."""
        return len(self._resume)

    @property
    def cache_enabled(self) -> bool:
        return not self._disabled

    def prepare(self) -> None:
        """Open the cache file now, so that the first lookup does not wait for it (a new store's
        file is created and its tables written with fsyncs). For a background thread: sqlite waits
        for the disk without the GIL. A failure is left for that lookup to meet and report."""
        if self._disabled:
            return
        with contextlib.suppress(sqlite3.Error), self._db.lock:
            self._db.connect()

    def _probe(self) -> sqlite3.Error | None:
        """Open the cache and read from it; the error met, if any (then the connection is closed)."""
        try:
            with self._db.lock:
                conn = self._db.connect()
                conn.execute("SELECT 1 FROM samples LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            with self._db.lock:
                self._db.close()
            return exc
        return None

    def _damage(self) -> str | sqlite3.Error | None:
        """Why the cache file cannot serve this session, or None when it can (or there is nothing to
        index). A missing or empty file next to journals counts: a crash between sqlite creating the
        file and its first write leaves it empty, and either would make the session pay again for
        every journaled sample without a word."""
        path = self._db.path
        try:
            size: int | None = path.stat().st_size
        except FileNotFoundError:
            size = None
        if not size:
            if not self.store.journal_paths():
                return None  # a new store: nothing was ever journaled, so nothing is lost
            return "it is missing" if size is None else "it is empty (0 bytes)"
        # The probe reads the file's header and first page only: damage deeper in is met by a
        # lookup in the middle of a session, which leaves the marker for this step.
        error: str | sqlite3.Error | None = self._probe()
        marker = _corrupt_marker(path)
        if error is None and marker.exists():
            error = marker.read_text(encoding="utf-8", errors="replace").strip() or "marked corrupt"
        return error

    def _repair_if_unreadable(self) -> None:
        """Rebuild an unreadable cache from the journals, once, and say so (see the module doc)."""
        path = self._db.path
        marker = _corrupt_marker(path)
        error = self._damage()
        if error is None or (isinstance(error, sqlite3.Error) and _is_busy(error)):
            return
        from filelock import FileLock, Timeout

        try:
            with FileLock(str(lock_path(path)), timeout=BUSY_TIMEOUT_MS / 1000):
                # Another session may have rebuilt it while we waited for the lock.
                if self._damage() is None:
                    self.notices.append(
                        f"sample cache {path} could not be read ({error}); another session rebuilt "
                        "it from the run journals"
                    )
                    return
                count, journal_problems = rebuild_cache(self.store)
                marker.unlink(missing_ok=True)
        except (OSError, sqlite3.Error, Timeout) as exc:
            self._disabled = True
            self.problems.append(
                f"sample cache {path} could not be read ({error}) and rebuilding it from the run "
                f"journals failed ({exc}); it is off for this session, so cached samples are judged "
                f"again. To fix: {_fix_hint(path)}"
            )
            return
        skipped = f"; {len(journal_problems)} damaged journal lines skipped" if journal_problems else ""
        self.notices.append(
            f"sample cache {path} could not be read ({error}); rebuilt it from the run journals: "
            f"{count} samples indexed{skipped}"
        )

    def _open_for_replay(self) -> None:
        path = self._db.path
        if not path.exists():
            raise CacheError(
                f"--judge-cache=replay needs the sample cache {path}, which does not exist; "
                "run once with --judge-cache=on to record samples",
                path=path,
            )
        try:
            with self._db.lock:
                self._db.connect().execute("SELECT 1 FROM samples LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            self._db.close()
            raise CacheError(
                f"the sample cache {path} cannot be read ({exc}); {_fix_hint(path)}", path=path
            ) from exc

    def _fail(self, exc: sqlite3.Error, doing: str) -> None:
        """Handle a sqlite error in mode ``on``: skip this operation, or give up the cache."""
        path = self._db.path
        if self.mode == "replay":
            raise CacheError(
                f"the sample cache {path} failed while {doing} ({exc}); {_fix_hint(path)}", path=path
            )
        if _is_busy(exc):
            self.problems.append(
                f"sample cache {path} stayed locked for {BUSY_TIMEOUT_MS // 1000}s while {doing}; "
                "skipped (the journal still holds every sample)"
            )
            return
        self._disabled = True
        self._db.close()
        if _is_corruption(exc):
            # Tell the next session's start to rebuild it (its quick probe may not reach the damage).
            with contextlib.suppress(OSError):
                atomic_write(_corrupt_marker(path), f"{exc} (met while {doing})\n")
        what = "is corrupt" if _is_corruption(exc) else "failed"
        self.problems.append(
            f"sample cache {path} {what} ({exc}); it is ignored for the rest of this session, "
            "so cached samples are judged again; the next session rebuilds it from the run "
            f"journals (or now: {_fix_hint(path)})"
        )

    def get(self, key: KeyLike) -> Sample | None:
        """The stored sample for ``key``, with ``source`` set to ``journal`` or ``cache``; else None."""
        key = SampleKey(*key)
        record = self._resume.get(key)
        if record is not None:
            return record.sample.model_copy(update={"source": "journal"})
        if self._disabled:
            return None
        unindexed = self._unindexed.get(key)
        if unindexed is not None:
            return unindexed[0].model_copy(update={"source": "cache"})
        question = (key.fingerprint, key.prompt_hash, key.artifact_sha256)
        with self._db.lock:
            stored = self._questions.get(question)
            if stored is None:
                try:
                    rows = (
                        self._db.connect()
                        .execute(
                            "SELECT idx, sample FROM samples WHERE fingerprint=? AND prompt_hash=? "
                            "AND artifact_sha256=?",
                            question,
                        )
                        .fetchall()
                    )
                except sqlite3.Error as exc:
                    self._fail(exc, "looking up a sample")
                    return None
                if len(self._questions) >= _QUESTIONS_KEPT:
                    del self._questions[next(iter(self._questions))]  # (the oldest)
                stored = self._questions[question] = dict(rows)
            text = stored.get(key.index)
        if text is None:
            return None
        return Sample.model_validate_json(text).model_copy(update={"source": "cache"})

    def put(self, record: SampleRecord, *, run_id: str | None = None, defer: bool = False) -> None:
        """Index a journaled sample (mode ``on`` only; the first sample stored under a key stays);
        with ``defer``, at the next :meth:`flush`: one transaction for an item's samples, not one
        each (a lookup meanwhile finds it all the same)."""
        if self.mode == "on" and not self._disabled:
            self.put_row(record.key, record.sample, _row(record, run_id), defer=defer)

    def put_row(self, key: SampleKey, sample: Sample, row: Row, *, defer: bool = False) -> None:
        """:meth:`put` of a sample whose row is made already (its JSON as a judge sample)."""
        if self.mode != "on" or self._disabled:
            return
        with self._unindexed_lock:
            self._unindexed.setdefault(key, (sample, row))
        if not defer:
            self.flush()

    def flush(self) -> None:
        """Index the samples put since the last flush (the journal already holds them)."""
        with self._db.lock:  # (taken first: a lookup meanwhile waits, then finds them indexed)
            with self._unindexed_lock:
                batch, self._unindexed = list(self._unindexed.values()), {}
            if not batch or self._disabled:
                return
            for _, row in batch:
                self._questions.pop(row[:3], None)  # (looked up before: read again)
            try:
                self._db.insert([row for _, row in batch])
            except sqlite3.Error as exc:
                self._fail(exc, "indexing samples")
            self._indexed_at = time.monotonic()

    def flush_soon(self) -> None:
        """:meth:`flush`, unless the last one was less than :data:`INDEX_REST_S` ago: what was put
        meanwhile is indexed with what a later call (or :meth:`close`) brings. A lookup in this
        process finds it meanwhile."""
        if time.monotonic() - self._indexed_at >= INDEX_REST_S:
            self.flush()

    def describe_key(self, key: KeyLike) -> str:
        """What is missing for ``key`` and what is stored near it, for a replay miss message."""
        key = SampleKey(*key)
        artifact = key.artifact_sha256[:12] or "none"
        head = (
            f"no stored sample #{key.index} for fingerprint {key.fingerprint}, "
            f"prompt {key.prompt_hash[:12]}, artifact {artifact}"
        )
        known = [k for k in self._resume if k.artifact_sha256 == key.artifact_sha256]
        if not self._disabled:
            with self._db.lock:
                try:
                    rows = (
                        self._db.connect()
                        .execute(
                            "SELECT fingerprint, prompt_hash, artifact_sha256, idx FROM samples "
                            "WHERE artifact_sha256=? LIMIT 1000",
                            (key.artifact_sha256,),
                        )
                        .fetchall()
                    )
                    known += [SampleKey(*row) for row in rows]
                except sqlite3.Error as exc:
                    return f"{head} (the cache could not be searched: {exc})"
        searched = self._searched()
        same_question = [k for k in known if k[:3] == key[:3]]
        if same_question:
            return (
                f"{head}; stored for this prompt: samples {_ranges(k.index for k in same_question)} "
                f"(the recording run took fewer samples); searched {searched}"
            )
        other_ruler = sorted({k.fingerprint for k in known if k.prompt_hash == key.prompt_hash})
        if other_ruler:
            return (
                f"{head}; this prompt and artifact were judged under another fingerprint "
                f"({', '.join(other_ruler[:3])}): the judge model, temperature, N, rubric or plugin "
                f"version changed; searched {searched}"
            )
        if known:
            return (
                f"{head}; this artifact was judged with a different prompt (the rubric, facts or "
                f"template changed); searched {searched}"
            )
        return f"{head}; nothing is stored for this artifact; searched {searched}"

    def _searched(self) -> str:
        places: list[str] = []
        if self.resume_run is not None:
            places.append(f"the journals of run {self.resume_run.run_id}")
        if self.mode != "off":
            state = "" if not self._disabled else " (disabled after an error)"
            places.append(f"the cache {self._db.path}{state}")
        return " and ".join(places) or "nothing (the cache is off)"

    def close(self) -> None:
        self.flush()
        with self._db.lock:
            self._db.close()


class StoreSink:
    """The judge engine's sample sink for one run: looks samples up, journals and indexes new ones.

    ``lookup`` with ``item_id``/``nodeid`` also journals a reused sample into this run (unless it came
    from this very run's journal), so every run's journal holds every sample its measurements used:
    a resumed run that is interrupted again can itself be resumed, and ``show`` needs only one run.
    """

    def __init__(self, run: Run, lookup: SampleLookup, *, writer: str | None = None) -> None:
        self.run = run
        self.samples = lookup
        self.journal: Journal = run.journal(writer)

    def lookup(self, key: KeyLike, *, item_id: str | None = None, nodeid: str | None = None) -> Sample | None:
        sample = self.samples.get(key)
        if sample is None or item_id is None:
            return sample
        resumed_here = (
            self.samples.resume_run is not None and self.samples.resume_run.run_id == self.run.run_id
        )
        if not (sample.source == "journal" and resumed_here):
            record = SampleRecord(
                key=SampleKey(*key), item_id=item_id, nodeid=nodeid or item_id, sample=sample
            )
            self.journal.append(record, sync=False)  # fsync-ed with the item's other samples (sync)
        return sample

    def describe_key(self, key: KeyLike) -> str:
        """For a replay miss: what is missing and what is stored near it."""
        return self.samples.describe_key(key)

    def record(self, key: KeyLike, *, item_id: str, nodeid: str, sample: Sample, sync: bool = True) -> None:
        """Journal a fresh sample (written before returning: a killed process keeps it; fsync-ed too
        unless ``sync=False``, when :meth:`sync` follows once the item's samples are in), then index
        it in the cache."""
        sample_key, recorded_at = SampleKey(*key), utc_now()
        # Encoded once, for the journal's line and the cache's row, with no record built: every
        # field comes from the engine (a model, or plain text).
        indexed = _as_stored(sample)
        sample_json = indexed.model_dump_json()
        journaled = sample_json if indexed is sample else sample.model_dump_json()
        self.journal.append_sample(
            sample_key,
            item_id=item_id,
            nodeid=nodeid,
            sample_json=journaled.encode(),
            recorded_at=recorded_at,
            sync=sync,
        )
        row = _sample_row(sample_key, sample_json, item_id, nodeid, self.run.run_id, recorded_at)
        self.samples.put_row(sample_key, sample, row, defer=not sync)

    def sync(self) -> None:
        """fsync the samples journaled so far (one fsync per completed item, shared by the items
        that complete at the same time), then index them in the cache, in one transaction with
        those of the items that complete within :data:`INDEX_REST_S`."""
        self.journal.sync()
        self.samples.flush_soon()


def rebuild_cache(store: RunStore) -> tuple[int, list[str]]:
    """Re-index every journal of every run into a fresh ``cache.sqlite``.

    Returns (distinct samples indexed, problems met reading journals).

    Built beside the old file and swapped in with one rename; run it while no session is writing.
    """
    target = store.cache_path
    tmp = target.with_name(f".{target.name}.rebuild-{os.getpid()}")
    leftovers = (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    db = _CacheDB(tmp)
    problems: list[str] = []
    try:
        try:
            for path in store.journal_paths():
                records, file_problems = read_journal(path)
                problems += file_problems
                run_id = path.parent.name
                db.insert(_row(record, run_id) for record in records)
            conn = db.connect()
            count = int(conn.execute("SELECT count(*) FROM samples").fetchone()[0])
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            db.close()
        for suffix in ("-wal", "-shm"):
            target.with_name(target.name + suffix).unlink(missing_ok=True)
        # Not fileio.atomic_write: sqlite wrote (and synced) the new database itself; swap it in whole.
        os.replace(tmp, target)
        fsync_dir(target.parent)
    finally:  # a failed rebuild leaves no half-built database behind
        for leftover in leftovers:
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
    return count, problems
