"""Sample lookup: resume and the sample cache as one keyed mechanism."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from pytest_aimeasure.measure.models import RunMeta, Sample
from pytest_aimeasure.store.cache import CacheError, SampleLookup, StoreSink, rebuild_cache
from pytest_aimeasure.store.runs import Run, RunStore, SampleKey, SampleRecord

pytestmark = pytest.mark.usefixtures("as_controller")

SHA = "b" * 64


def key(index: int = 0, *, fp: str = "fp1", prompt: str = "p1", sha: str = SHA) -> SampleKey:
    return SampleKey(fp, prompt, sha, index)


def record(k: SampleKey, score: int = 4, item: str = "item-a") -> SampleRecord:
    sample = Sample(index=k.index, dimension="tone", score=score, rationale=f"draw {k.index}", cost_usd=0.01)
    return SampleRecord(key=k, item_id=item, nodeid=f"t.py::{item}", sample=sample)


def start(store: RunStore, run_id: str) -> Run:
    return store.start_run(RunMeta(run_id=run_id, started_at="2026-11-29T10:00:00Z", plugin_version="0.1.0"))


def stored_three(store: RunStore) -> None:
    """A session that stored samples #0-#2 of one question, scored 2, 3 and 4, and closed."""
    first = SampleLookup(store, mode="on")
    for i in range(3):
        first.put(record(key(i), score=i + 2))
    first.close()


def test_an_unchanged_rerun_finds_every_key(store: RunStore) -> None:
    stored_three(store)

    rerun = SampleLookup(store, mode="on")
    found = [rerun.get(key(i)) for i in range(3)]
    assert [s.score for s in found if s] == [2, 3, 4]
    assert {s.source for s in found if s} == {"cache"}
    assert [s.index for s in found if s] == [0, 1, 2]


def test_the_index_keeps_repeated_samples_independent_draws(store: RunStore) -> None:
    lookup = SampleLookup(store, mode="on")
    lookup.put(record(key(0), score=5))
    assert lookup.get(key(0)) is not None
    assert lookup.get(key(1)) is None  # sample #1 is its own draw, never #0's verdict
    lookup.put(record(key(1), score=2))
    lookup.put(record(key(1), score=5))  # the first verdict stored under a key stays
    assert [lookup.get(key(i)).score for i in (0, 1)] == [5, 2]  # type: ignore[union-attr]


def test_an_items_samples_are_read_from_the_cache_in_one_query(store: RunStore) -> None:
    stored_three(store)
    rerun = SampleLookup(store, mode="on")
    rerun.prepare()
    selects: list[str] = []
    rerun._db.connect().set_trace_callback(
        lambda sql: selects.append(sql) if sql.startswith("SELECT") else None
    )
    found = [rerun.get(key(i)) for i in range(4)]  # (#3 was never stored)
    assert [s.score if s else None for s in found] == [2, 3, 4, None]
    assert len(selects) == 1
    assert rerun.get(key(0, sha="c" * 64)) is None and len(selects) == 2  # another question: read


def test_a_sample_indexed_after_its_question_was_read_is_found(store: RunStore) -> None:
    lookup = SampleLookup(store, mode="on")
    assert lookup.get(key(0)) is None  # read: nothing stored for the question yet
    lookup.put(record(key(0), score=5), defer=True)
    lookup.flush()
    found = lookup.get(key(0))
    assert found is not None and found.score == 5


def test_anything_that_changes_the_question_misses(store: RunStore) -> None:
    lookup = SampleLookup(store, mode="on")
    lookup.put(record(key(0)))
    assert lookup.get(key(0, fp="fp2")) is None
    assert lookup.get(key(0, prompt="p2")) is None
    assert lookup.get(key(0, sha="c" * 64)) is None


def test_engine_tuples_work_as_keys(store: RunStore) -> None:
    lookup = SampleLookup(store, mode="on")
    lookup.put(record(key(0)))
    assert lookup.get(("fp1", "p1", SHA, 0)) is not None


def test_mode_off_touches_no_database(store: RunStore) -> None:
    lookup = SampleLookup(store, mode="off")
    lookup.put(record(key(0)))
    assert lookup.get(key(0)) is None
    lookup.close()
    assert not store.cache_path.exists()


def test_prepare_opens_the_cache_before_the_first_lookup_and_leaves_a_failure_to_it(store: RunStore) -> None:
    lookup = SampleLookup(store, mode="on")
    assert not store.cache_path.exists()  # a new store: the first lookup would create it
    lookup.prepare()
    assert store.cache_path.exists()
    assert sqlite3.connect(store.cache_path).execute("SELECT COUNT(*) FROM samples").fetchone() == (0,)
    lookup.put(record(key(0)))
    assert lookup.get(key(0)) is not None
    lookup.close()

    off = SampleLookup(store, mode="off")
    off.prepare()  # (the cache is off: nothing to open)
    assert off.problems == []

    store.cache_path.unlink()
    store.cache_path.mkdir()  # a folder where the file should be: sqlite cannot open it
    broken = SampleLookup(store, mode="on")
    broken.prepare()  # no error here: the lookup meets it and says so, as without prepare
    assert broken.get(key(0)) is None
    assert len(broken.problems) == 1 and str(store.cache_path) in broken.problems[0]


def test_mode_replay_reads_but_never_writes(store: RunStore) -> None:
    with pytest.raises(CacheError) as info:
        SampleLookup(store, mode="replay")
    assert str(store.cache_path) in str(info.value) and "--judge-cache=on" in str(info.value)

    recorder = SampleLookup(store, mode="on")
    recorder.put(record(key(0)))
    recorder.close()
    replay = SampleLookup(store, mode="replay")
    assert replay.get(key(0)) is not None
    replay.put(record(key(1)))
    assert replay.get(key(1)) is None


def test_describe_key_says_what_is_stored_nearby(store: RunStore) -> None:
    recorder = SampleLookup(store, mode="on")
    for i in range(3):
        recorder.put(record(key(i)))
    recorder.close()
    lookup = SampleLookup(store, mode="replay")

    more = lookup.describe_key(key(4))
    assert "no stored sample #4" in more and "samples #0-#2" in more and str(store.cache_path) in more
    ruler = lookup.describe_key(key(0, fp="fp9"))
    assert "another fingerprint (fp1)" in ruler
    prompt = lookup.describe_key(key(0, prompt="p9"))
    assert "different prompt" in prompt
    nothing = lookup.describe_key(key(0, sha="c" * 64))
    assert "nothing is stored for this artifact" in nothing


def test_resume_reads_the_runs_journals_even_with_the_cache_off(store: RunStore) -> None:
    run = start(store, "r1")
    run.journal().append(record(key(0), score=3))
    run.journal("gw1").append(record(key(1), score=5))
    with (run.path / "journal-gw1.jsonl").open("ab") as handle:
        handle.write(b'{"key": {"finger')  # the worker was killed mid-append
    run.close()

    lookup = SampleLookup(store, mode="off", resume_run=store.open_run("r1"))
    found = [lookup.get(key(i)) for i in range(3)]
    assert [(s.score, s.source) for s in found if s] == [(3, "journal"), (5, "journal")]
    assert found[2] is None
    assert lookup.resumable == 2
    assert len(lookup.resume_problems) == 1 and "journal-gw1.jsonl" in lookup.resume_problems[0]
    assert not store.cache_path.exists()


def test_the_resumed_journal_answers_before_the_cache(store: RunStore) -> None:
    cache = SampleLookup(store, mode="on")
    cache.put(record(key(0), score=1))
    cache.close()
    run = start(store, "r1")
    run.journal().append(record(key(0), score=5))
    lookup = SampleLookup(store, mode="on", resume_run=run)
    found = lookup.get(key(0))
    assert found is not None and (found.score, found.source) == (5, "journal")


def test_a_corrupt_cache_does_not_stop_the_run(store: RunStore) -> None:
    store.cache_path.write_bytes(b"this is not a sqlite database" * 200)
    lookup = SampleLookup(store, mode="on")
    assert lookup.get(key(0)) is None  # a miss: the sample is judged again
    lookup.put(record(key(0)))  # no error: the journal keeps the sample
    assert not lookup.cache_enabled
    assert len(lookup.problems) == 1
    problem = lookup.problems[0]
    assert str(store.cache_path) in problem and "corrupt" in problem and "aimeasure cache rebuild" in problem

    with pytest.raises(CacheError, match="aimeasure cache rebuild"):
        SampleLookup(store, mode="replay")


@pytest.mark.parametrize("mode", ["on", "replay"])
def test_a_corrupt_cache_is_rebuilt_from_the_journals_at_session_start_and_said_once(
    store: RunStore, mode: str
) -> None:
    run = start(store, "r1")
    run.journal().append(record(key(0)))
    run.journal().append(record(key(1)))
    store.cache_path.write_bytes(b"this is not a sqlite database" * 200)
    lookup = SampleLookup(store, mode=mode, repair=True)  # type: ignore[arg-type]
    assert lookup.cache_enabled and lookup.problems == []
    assert len(lookup.notices) == 1
    notice = lookup.notices[0]
    assert str(store.cache_path) in notice and "rebuilt it from the run journals: 2 samples" in notice
    assert lookup.get(key(0)) is not None and lookup.get(key(1)) is not None
    lookup.close()
    again = SampleLookup(store, mode=mode, repair=True)  # type: ignore[arg-type]
    assert again.notices == [] and again.problems == []  # healthy now: nothing more to say


def test_damage_met_mid_session_is_rebuilt_by_the_next_session(store: RunStore) -> None:
    run = start(store, "r1")
    run.journal().append(record(key(0)))
    healthy = SampleLookup(store, mode="on")
    healthy.put(record(key(0)))
    healthy.close()
    broken = SampleLookup(store, mode="on")
    broken._fail(sqlite3.DatabaseError("database disk image is malformed"), "looking up a sample")
    assert not broken.cache_enabled and "next session rebuilds it" in broken.problems[0]
    nxt = SampleLookup(store, mode="on", repair=True)
    assert len(nxt.notices) == 1 and "database disk image is malformed" in nxt.notices[0]
    assert nxt.get(key(0)) is not None
    assert SampleLookup(store, mode="on", repair=True).notices == []


def test_rebuild_restores_the_index_from_the_journals(store: RunStore) -> None:
    one, two = start(store, "r1"), start(store, "r2")
    one.journal().append(record(key(0)))
    one.journal("gw0").append(record(key(1)))
    two.journal().append(record(key(0)))  # the same draw journaled by a resumed run
    two.journal().append(record(key(2, prompt="p2")))
    store.cache_path.write_bytes(b"garbage" * 100)

    count, problems = rebuild_cache(store)
    assert (count, problems) == (3, [])
    lookup = SampleLookup(store, mode="replay")
    assert all(lookup.get(k) is not None for k in (key(0), key(1), key(2, prompt="p2")))


def test_sink_journals_then_indexes_fresh_samples(store: RunStore) -> None:
    run = start(store, "r1")
    sink = StoreSink(run, SampleLookup(store, mode="on"))
    sample = record(key(0)).sample
    sink.record(("fp1", "p1", SHA, 0), item_id="item-a", nodeid="t.py::a", sample=sample)
    samples, _ = run.samples()
    assert [s.key for s in samples] == [key(0)]
    assert SampleLookup(store, mode="on").get(key(0)) is not None


@pytest.mark.parametrize(
    "text", ["plain", 'a "quote" and a \\ backslash', "tab\tnew\nline \x01 \x7f", "naïve — 日本 \u2028 🦊"]
)
def test_a_fresh_samples_journal_line_is_its_records_json_with_the_sample_encoded_once(
    store: RunStore, text: str
) -> None:
    # The sink builds the line around the sample's JSON (encoded once, for the journal and the
    # cache) instead of building a SampleRecord and encoding it: the same bytes either way.
    run = start(store, "r1")
    sink = StoreSink(run, SampleLookup(store, mode="on"))
    sample = Sample(
        index=1,
        dimension=text,
        score=4,
        rationale=text,
        cost_usd=0.01,
        latency_s=0.1234,
        tool_mode="scripted",
    )
    sink.record(key(1), item_id=f"item {text}", nodeid=f"t.py::a[{text}]", sample=sample, sync=False)
    sink.sync()
    sink.samples.close()
    run.close()
    (journaled,), problems = run.samples()
    assert not problems and journaled.sample == sample and journaled.item_id == f"item {text}"
    line = (run.path / "journal-controller.jsonl").read_bytes()
    assert line == journaled.model_dump_json().encode() + b"\n"
    assert SampleLookup(store, mode="on").get(key(1)) == sample.model_copy(update={"source": "cache"})


def test_an_items_samples_are_indexed_together_when_it_is_synced(store: RunStore) -> None:
    run = start(store, "r1")
    sink = StoreSink(run, SampleLookup(store, mode="on"))
    for i in range(3):
        sink.record(key(i), item_id="item-a", nodeid="t.py::a", sample=record(key(i)).sample, sync=False)
    assert len(run.samples()[0]) == 3  # journaled at once
    found = sink.samples.get(key(1))  # this session finds them before they are indexed
    assert found is not None and found.source == "cache"
    assert SampleLookup(store, mode="on").get(key(1)) is None  # another process does not yet
    sink.sync()
    other = SampleLookup(store, mode="on")
    assert [other.get(key(i)) is not None for i in range(3)] == [True, True, True]


def test_sink_journals_reused_samples_into_the_new_run(store: RunStore) -> None:
    old = start(store, "r1")
    old.journal().append(record(key(0)))
    new = start(store, "r2")
    sink = StoreSink(new, SampleLookup(store, mode="off", resume_run=old))
    found = sink.lookup(key(0), item_id="item-a", nodeid="t.py::item-a")
    assert found is not None and found.source == "journal"
    assert [s.sample.source for s in new.samples()[0]] == ["journal"]

    # Resuming into the same run: the sample is already in its journal, so it is not copied again.
    same = StoreSink(old, SampleLookup(store, mode="off", resume_run=old))
    same.lookup(key(0), item_id="item-a", nodeid="t.py::item-a")
    assert len((old.path / "journal-controller.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_a_missing_or_empty_cache_beside_journals_is_rebuilt_and_said_once(
    store: RunStore, damage: str
) -> None:
    run = start(store, "r1")
    run.journal().append(record(key(0)))
    run.journal("gw0").append(record(key(1)))
    if damage == "empty":  # a crash between sqlite creating the file and its first write
        store.cache_path.write_bytes(b"")
    lookup = SampleLookup(store, mode="on", repair=True)
    assert lookup.problems == []
    (notice,) = lookup.notices
    reason = "it is missing" if damage == "missing" else "it is empty (0 bytes)"
    said = f"{store.cache_path} could not be read ({reason}); rebuilt it from the run journals: 2 samples"
    assert said in notice
    assert lookup.get(key(0)) is not None and lookup.get(key(1)) is not None
    lookup.close()
    assert SampleLookup(store, mode="on", repair=True).notices == []


def test_a_missing_cache_in_a_store_without_journals_is_no_news(store: RunStore) -> None:
    lookup = SampleLookup(store, mode="on", repair=True)
    assert lookup.notices == [] and lookup.problems == []


def test_a_failed_rebuild_leaves_no_half_built_database_behind(store: RunStore) -> None:
    run = start(store, "r1")
    run.journal().append(record(key(0)))
    # A directory where the cache file belongs: it cannot be read, nor replaced by the rebuilt file.
    store.cache_path.mkdir()
    (store.cache_path / "keep").write_text("x")
    lookup = SampleLookup(store, mode="on", repair=True)
    assert not lookup.cache_enabled
    (problem,) = lookup.problems
    assert "rebuilding it from the run journals failed" in problem
    assert sorted(p.name for p in store.root.iterdir() if "rebuild" in p.name) == []
    with pytest.raises(IsADirectoryError):
        rebuild_cache(store)
    assert sorted(p.name for p in store.root.iterdir() if "rebuild" in p.name) == []


def test_items_synced_within_the_rest_are_indexed_in_one_transaction_and_at_the_close(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A transaction per item was most of the work of making an item's samples durable: the items
    # synced within INDEX_REST_S of the last indexing are indexed with a later one, or at the close.
    run = start(store, "r1")
    lookup = SampleLookup(store, mode="on")
    sink = StoreSink(run, lookup)
    transactions: list[int] = []
    insert = lookup._db.insert

    def counted(rows: Any) -> None:
        rows = list(rows)
        transactions.append(len(rows))
        insert(rows)

    monkeypatch.setattr(lookup._db, "insert", counted)
    monkeypatch.setattr("pytest_aimeasure.store.cache.INDEX_REST_S", 60.0)
    for i in range(4):  # four items of one sample each, synced one after another
        sink.record(key(i), item_id=f"item-{i}", nodeid="t.py::a", sample=record(key(i)).sample, sync=False)
        sink.sync()
    assert transactions == [1]  # the first item at once; the three after it within the rest
    assert len(run.samples()[0]) == 4  # every sample is journaled (and fsync-ed) all the same
    assert all(lookup.get(key(i)) is not None for i in range(4))  # found in this process meanwhile
    assert SampleLookup(store, mode="on").get(key(3)) is None  # not in the index yet
    lookup.close()
    assert transactions == [1, 3]
    assert SampleLookup(store, mode="on").get(key(3)) is not None
