"""The run store: round trips, content addressing, atomic metadata, cheap listing, crash safety."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from pytest_aimeasure.measure.models import ItemResult, RunMeta, Sample
from pytest_aimeasure.store import runs as store_module
from pytest_aimeasure.store.runs import (
    Journal,
    Run,
    RunStore,
    SampleKey,
    SampleRecord,
    StoreError,
    default_writer,
)

pytestmark = pytest.mark.usefixtures("as_controller")


def make_meta(run_id: str, started: str = "2026-11-29T10:00:00.000000Z", **extra: object) -> RunMeta:
    return RunMeta(run_id=run_id, started_at=started, plugin_version="0.1.0", **extra)  # type: ignore[arg-type]


def make_record(index: int = 0, *, item: str = "item-a", score: int = 4, fp: str = "fp1") -> SampleRecord:
    sample = Sample(index=index, dimension="tone", score=score, rationale=f"reason {index}")
    return SampleRecord(
        key=SampleKey(fp, "prompt1", "a" * 64, index), item_id=item, nodeid=f"t.py::{item}", sample=sample
    )


def start(store: RunStore, run_id: str, started: str = "2026-11-29T10:00:00.000000Z", **extra: object) -> Run:
    return store.start_run(make_meta(run_id, started, **extra))


def test_new_run_ids_sort_by_time_and_do_not_collide() -> None:
    ids = {RunStore.new_run_id() for _ in range(50)}
    assert len(ids) > 1
    one = next(iter(ids))
    stamp, suffix = one.split("-")
    assert len(stamp) == len("20261129T232400Z") and stamp.endswith("Z") and len(suffix) == 4


def test_round_trip_of_meta_items_samples_and_artifacts(store: RunStore) -> None:
    run = start(store, "r1", judge_model="claude-x")
    run.record_item(ItemResult(nodeid="t.py::a", kind="gate", outcome="passed"))
    run.journal("controller").append(make_record(0))
    run.journal("controller").append(make_record(1))
    ref = run.record_artifact("story-7", "once upon a time", label="story 7")
    run.close()

    again = store.open_run("r1")
    assert again.meta.judge_model == "claude-x"
    assert [i.nodeid for i in again.items()] == ["t.py::a"]
    samples, problems = again.samples()
    assert problems == []
    assert [s.key.index for s in samples] == [0, 1]
    assert samples[0].sample.rationale == "reason 0"
    assert again.artifact("story-7") == ref
    assert again.load_artifact("story-7") == "once upon a time"
    assert again.load_artifact("nope") is None


def test_journal_lines_are_readable_json_objects(store: RunStore) -> None:
    run = start(store, "r1")
    run.journal().append(make_record(2))
    line = (run.path / "journal-controller.jsonl").read_text().splitlines()[0]
    key = json.loads(line)["key"]
    assert key == {"fingerprint": "fp1", "prompt_hash": "prompt1", "artifact_sha256": "a" * 64, "index": 2}


def test_sample_keys_equal_the_engines_plain_tuples() -> None:
    key = SampleKey("fp", "ph", "sha", 3)
    assert key == ("fp", "ph", "sha", 3)
    by_key: dict[tuple[str, str, str, int], int] = {key: 1}
    assert by_key[("fp", "ph", "sha", 3)] == 1
    assert key.index == 3


def test_items_keep_the_last_record_of_a_nodeid(store: RunStore) -> None:
    run = start(store, "r1")
    run.record_item(ItemResult(nodeid="t.py::a", kind="gate", outcome="failed"))
    run.record_item(ItemResult(nodeid="t.py::b", kind="gate", outcome="passed"))
    run.record_item(ItemResult(nodeid="t.py::a", kind="gate", outcome="passed"))
    assert [(i.nodeid, i.outcome) for i in run.items()] == [("t.py::b", "passed"), ("t.py::a", "passed")]


def test_writer_defaults_to_the_xdist_worker(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    start(store, "r1").close()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert default_writer() == "gw3"
    worker = store.open_run("r1")
    worker.journal().append(make_record(0))
    worker.record_artifact("k", "text")
    assert (worker.path / "journal-gw3.jsonl").exists()
    assert (worker.path / "artifacts-gw3.jsonl").exists()
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert default_writer() == "controller"


@pytest.mark.parametrize("bad", ["../escape", "a/b", ".hidden", ""])
def test_run_ids_that_are_not_plain_names_are_refused(store: RunStore, bad: str) -> None:
    with pytest.raises(StoreError, match="invalid run id"):
        store.open_run(bad)


def test_starting_an_existing_run_is_refused(store: RunStore) -> None:
    start(store, "r1")
    with pytest.raises(StoreError, match="already exists"):
        start(store, "r1")


def test_identical_content_is_stored_once(store: RunStore) -> None:
    one, two = start(store, "r1"), start(store, "r2")
    a = one.record_artifact("story", "same text")
    b = two.record_artifact("other-key", "same text")
    c = one.record_artifact("different", "other text")
    assert a.sha256 == b.sha256 != c.sha256
    files = [p for p in store.artifacts_dir.rglob("*") if p.is_file()]
    assert len(files) == 2
    assert store.artifact_path(a.sha256).read_text() == "same text"
    assert not [p for p in store.artifacts_dir.rglob(".*")]  # no temp files left behind


def test_media_types_and_loaded_content(store: RunStore) -> None:
    run = start(store, "r1")
    assert run.record_artifact("t", "plain words").media_type == "text"
    assert run.record_artifact("j", '{"scenes": [1, 2]}').media_type == "json"
    assert run.record_artifact("not-json", "{ nope").media_type == "text"
    ref = run.record_artifact("b", b"\x00\x01")
    assert (ref.media_type, ref.size) == ("bytes", 2)
    assert run.load_artifact("b") == b"\x00\x01"
    assert run.load_artifact("j") == '{"scenes": [1, 2]}'


def test_a_damaged_artifact_is_reported_not_returned(store: RunStore) -> None:
    run = start(store, "r1")
    ref = run.record_artifact("t", "original")
    store.artifact_path(ref.sha256).write_text("tampered")
    with pytest.raises(StoreError, match="corrupt"):
        run.load_artifact("t")
    store.artifact_path(ref.sha256).unlink()
    with pytest.raises(StoreError, match="missing"):
        run.load_artifact("t")


def test_manifest_entries_of_other_writers_are_found(store: RunStore) -> None:
    """--aimeasure-rejudge opens an old run and needs artifacts recorded by every xdist worker."""
    controller = start(store, "r1")
    worker = store.open_run("r1", writer="gw1")
    ref = worker.record_artifact("from-worker", "w")
    assert controller.artifact("from-worker") == ref  # read from disk on a miss
    assert set(store.open_run("r1").artifacts()) == {"from-worker"}


def test_adopting_an_artifact_copies_no_bytes(store: RunStore) -> None:
    old = start(store, "r1")
    ref = old.record_artifact("story", "generated once")
    new = start(store, "r2")
    new.adopt_artifact(ref)
    assert new.load_artifact("story") == "generated once"
    assert len([p for p in store.artifacts_dir.rglob("*") if p.is_file()]) == 1


def test_a_failed_meta_write_leaves_the_old_file_whole(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = start(store, "r1", judge_model="old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        run.write_meta(make_meta("r1", judge_model="new"))
    monkeypatch.undo()
    assert store.open_run("r1").meta.judge_model == "old"
    assert sorted(p.name for p in run.path.iterdir()) == ["meta.json", "owner.json"]


def test_readers_never_see_a_partial_meta_file(store: RunStore) -> None:
    run = start(store, "r1")
    stop = threading.Event()
    bad: list[str] = []

    def read_forever() -> None:
        path = run.path / "meta.json"
        while not stop.is_set():
            text = path.read_text()
            try:
                RunMeta.model_validate_json(text)
            except ValueError:
                bad.append(text)

    reader = threading.Thread(target=read_forever)
    reader.start()
    try:
        for i in range(80):
            run.write_meta(make_meta("r1", argv=["x" * (i * 37 % 4000)], items=i))
    finally:
        stop.set()
        reader.join()
    assert bad == []
    assert store.open_run("r1").meta.items == 79


def test_listing_never_opens_journals_items_or_manifests(store: RunStore) -> None:
    run = start(store, "r1")
    # A directory where a file should be: opening any of these would fail loudly.
    (run.path / "journal-controller.jsonl").mkdir()
    (run.path / "items.jsonl").mkdir()
    (run.path / "artifacts-controller.jsonl").mkdir()
    (run.path / "journal-gw0.jsonl").write_bytes(b"\xff\xfe not json at all\n{torn")
    start(store, "r2", "2026-11-29T11:00:00.000000Z")

    metas, problems = store.list_runs()
    assert [m.run_id for m in metas] == ["r2", "r1"]
    assert problems == []
    # Whereas reading the run's samples does meet (and report) the damage.
    samples, sample_problems = run.samples()
    assert samples == [] and len(sample_problems) >= 2


def test_a_corrupt_meta_is_named_and_the_other_runs_still_listed(store: RunStore) -> None:
    start(store, "r1", "2026-11-29T10:00:00.000000Z")
    start(store, "r3", "2026-11-29T12:00:00.000000Z")
    broken = start(store, "r2", "2026-11-29T11:00:00.000000Z")
    (broken.path / "meta.json").write_text('{"run_id": "r2", "started_at": ')
    (store.runs_dir / "empty-folder").mkdir()

    metas, problems = store.list_runs()
    assert [m.run_id for m in metas] == ["r3", "r1"]
    assert len(problems) == 2
    messages = [str(p) for p in problems]
    assert str(store.runs_dir / "empty-folder") in messages[0] and "no meta.json" in messages[0]
    assert str(broken.path / "meta.json") in messages[1] and "invalid" in messages[1]


def test_resolve_latest_prefix_and_unknown(store: RunStore) -> None:
    for hour in range(12):
        start(store, f"202611{hour:02d}T000000Z-ab{hour:02d}", f"2026-11-29T{hour:02d}:00:00Z")
    assert store.resolve("latest") == "20261111T000000Z-ab11"
    assert store.resolve("20261103") == "20261103T000000Z-ab03"
    assert store.resolve("20261103T000000Z-ab03") == "20261103T000000Z-ab03"
    with pytest.raises(StoreError, match="matches 10 runs"):
        store.resolve("2026110")
    with pytest.raises(StoreError) as info:
        store.resolve("nope")
    message = str(info.value)
    listed = message.split("newest first: ")[1]
    assert listed.startswith("20261111T000000Z-ab11, 20261110T000000Z-ab10")
    assert listed.count("2026") == 10 and "and 2 older" in message


def test_latest_skips_broken_folders_and_runs_the_caller_cannot_use(store: RunStore) -> None:
    start(store, "20261129T100000Z-aaaa", "2026-11-29T10:00:00Z")
    start(store, "20261129T110000Z-bbbb", "2026-11-29T11:00:00Z")
    for name, text in (("20261129T120000Z-dead", "{garbage"), ("20261129T130000Z-gone", None)):
        (store.runs_dir / name).mkdir()
        if text is not None:
            (store.runs_dir / name / "meta.json").write_text(text)
    assert store.resolve("latest") == "20261129T110000Z-bbbb"
    assert store.latest(lambda m: None if m.run_id.endswith("aaaa") else "not this one") == (
        "20261129T100000Z-aaaa"
    )
    with pytest.raises(StoreError) as info:
        store.latest(lambda m: f"no use ({m.run_id[-4:]})", wanted="what the tests need")
    message = str(info.value)
    assert "holds what the tests need; the runs, newest first:" in message
    assert message.index("20261129T110000Z-bbbb: no use (bbbb)") < message.index(
        "20261129T100000Z-aaaa: no use (aaaa)"
    )
    assert "20261129T120000Z-dead:" in message and "invalid" in message
    assert "20261129T130000Z-gone:" in message and "no meta.json" in message


def test_resolve_on_an_empty_store_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no runs"):
        RunStore(tmp_path / "none").resolve("latest")


def test_delete_removes_one_run_and_keeps_shared_artifacts(store: RunStore) -> None:
    one, two = start(store, "r1"), start(store, "r2")
    ref = one.record_artifact("k", "shared")
    two.record_artifact("k", "shared")
    store.delete_run("r1")
    assert store.run_ids() == ["r2"]
    assert not list(store.runs_dir.glob(".trash-*"))
    assert store.open_run("r2").load_artifact("k") == "shared"
    assert store.artifact_path(ref.sha256).exists()
    with pytest.raises(StoreError, match="no run 'r1'"):
        store.delete_run("r1")


def test_a_store_under_a_file_is_not_writable(tmp_path: Path) -> None:
    """Fails for root too: no permission bit lets anyone create a directory inside a file."""
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(StoreError) as info:
        RunStore(tmp_path / "file.txt" / "store").ensure_writable()
    assert str(tmp_path / "file.txt" / "store") in str(info.value)
    assert "not writable" in str(info.value)


def test_a_store_root_that_is_a_file_is_not_writable(tmp_path: Path) -> None:
    (tmp_path / "store").write_text("x")
    with pytest.raises(StoreError, match="not writable"):
        RunStore(tmp_path / "store").ensure_writable()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permission bits")
def test_a_read_only_directory_is_not_writable(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="not writable"):
            RunStore(root).ensure_writable()
    finally:
        root.chmod(0o700)


def test_ensure_writable_creates_the_layout_and_a_gitignore(tmp_path: Path) -> None:
    s = RunStore(tmp_path / "deep" / "store")
    s.ensure_writable()
    assert s.runs_dir.is_dir() and s.artifacts_dir.is_dir()
    assert (s.root / ".gitignore").read_text().splitlines()[-1] == "*"
    assert [p.name for p in s.root.iterdir() if p.name.startswith(".write-probe")] == []


def test_a_torn_last_line_is_skipped_and_reported(store: RunStore) -> None:
    run = start(store, "r1")
    run.journal().append(make_record(0))
    run.close()
    path = run.path / "journal-controller.jsonl"
    whole = make_record(1).model_dump_json().encode()
    with path.open("ab") as handle:
        handle.write(whole[: len(whole) // 2])  # what a kill mid-write leaves

    samples, problems = store.open_run("r1").samples()
    assert [s.key.index for s in samples] == [0]
    assert len(problems) == 1 and str(path) in problems[0] and "torn last line" in problems[0]

    # A writer reopening the file ends the torn line first, so its record stays whole.
    reopened = store.open_run("r1")
    reopened.journal().append(make_record(2))
    samples, problems = reopened.samples()
    assert [s.key.index for s in samples] == [0, 2]
    assert len(problems) == 1 and "line 2" in problems[0]


def test_invalid_json_on_the_last_complete_line_is_reported(store: RunStore) -> None:
    run = start(store, "r1")
    run.journal().append(make_record(0))
    path = run.path / "journal-controller.jsonl"
    with path.open("ab") as handle:
        handle.write(b'{"key": nonsense}\n')
    samples, problems = run.samples()
    assert len(samples) == 1
    assert len(problems) == 1 and "last line" in problems[0] and str(path) in problems[0]


def test_a_failed_append_does_not_glue_the_next_record_to_its_remains(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = start(store, "r1")
    journal = run.journal()
    journal.append(make_record(0))
    real_write = os.write

    def half_then_full_disk(fd: int, data: bytes | memoryview) -> int:
        real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full_disk)
    with pytest.raises(StoreError, match="disk full"):
        journal.append(make_record(1))
    monkeypatch.undo()
    journal.append(make_record(2))
    samples, problems = run.samples()
    assert [s.key.index for s in samples] == [0, 2]
    assert len(problems) == 1 and "line 2" in problems[0]


def test_journal_appends_from_many_threads_stay_whole(store: RunStore) -> None:
    run = start(store, "r1")
    journal = run.journal()

    def write(worker: int) -> None:
        for i in range(40):
            journal.append(make_record(i, item=f"item-{worker}"))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    samples, problems = run.samples()
    assert problems == []
    assert len(samples) == 320


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_one_fsync_covers_the_samples_appended_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    fsyncs = _count_fsyncs(monkeypatch)
    for index in range(3):
        journal.append(make_record(index), sync=False)
    assert fsyncs == []
    journal.sync()
    assert len(fsyncs) == 1
    journal.sync()  # nothing new: no second fsync
    assert len(fsyncs) == 1
    journal.append(make_record(3))  # the default stays one durable append
    assert len(fsyncs) == 2
    # Many threads syncing what one batch wrote share fsyncs: never one each.
    for index in range(4, 8):
        journal.append(make_record(index), sync=False)
    threads = [threading.Thread(target=journal.sync) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 3 <= len(fsyncs) < 2 + 8
    journal.close()
    assert len(store_module.read_journal(tmp_path / "j.jsonl")[0]) == 8


def test_item_records_are_fsynced_by_the_background_syncer_and_at_close(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = start(store, "r1")
    fsyncs = _count_fsyncs(monkeypatch)
    run.record_item(ItemResult(nodeid="t.py::a", kind="dimension", outcome="passed"))
    assert [i.nodeid for i in run.items()] == ["t.py::a"]  # written before record_item returned
    deadline = time.monotonic() + 30
    while not fsyncs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fsyncs, "the background syncer fsynced the items file"
    run.record_item(ItemResult(nodeid="t.py::b", kind="dimension", outcome="passed"))
    run.close()  # fsyncs what the syncer may not have reached yet
    assert [i.nodeid for i in store.open_run(run.run_id).items()] == ["t.py::a", "t.py::b"]


def test_a_burst_of_item_records_shares_a_few_background_fsyncs_and_all_reach_the_disk(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = start(store, "r1")
    run.record_item(ItemResult(nodeid="t.py::first", kind="dimension", outcome="passed"))
    items = run._items
    assert items is not None
    fsyncs = _count_fsyncs(monkeypatch)
    for n in range(50):  # a session of quick tests: one record as each test ends
        run.record_item(ItemResult(nodeid=f"t.py::i{n}", kind="dimension", outcome="passed"))
        time.sleep(0.002)  # (the next test runs meanwhile: the syncer would get to each record)
    deadline = time.monotonic() + 30
    while items._synced < items._written and time.monotonic() < deadline:
        time.sleep(0.01)
    assert items._synced == items._written == 51, "every record fsync-ed without close()"
    assert 1 <= len(fsyncs) <= 10  # was about one per record: a thread woken and a sync each
    run.close()


def test_a_failed_background_fsync_is_raised_by_the_next_append(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = start(store, "r1")
    run.record_item(ItemResult(nodeid="t.py::a", kind="dimension", outcome="passed"))
    items = run._items
    assert items is not None
    items.sync()

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    run.record_item(ItemResult(nodeid="t.py::b", kind="dimension", outcome="passed"))
    deadline = time.monotonic() + 30
    while items._sync_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(StoreError, match=r"cannot fsync .*items\.jsonl.*Input/output error"):
        run.record_item(ItemResult(nodeid="t.py::c", kind="dimension", outcome="passed"))


def test_journal_without_fsync_still_appends(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl", fsync=False)
    journal.append(make_record(0))
    journal.close()
    with pytest.raises(StoreError, match="closed"):
        journal.append(make_record(1))
    assert len(store_module.read_journal(tmp_path / "j.jsonl")[0]) == 1


def test_latest_is_the_run_started_last_even_within_one_second(tmp_path: Path) -> None:
    """Run ids carry their start to the second; two sessions in one second (a script running
    pytest, then pytest --aimeasure-rejudge) must still resolve `latest` to the second one."""
    store = RunStore(tmp_path / "store")
    store.ensure_writable()
    for run_id, started in (
        ("20261130T003754Z-ffff", "2026-11-30T00:37:54.100000Z"),
        ("20261130T003754Z-0000", "2026-11-30T00:37:54.900000Z"),
        ("20261130T003753Z-ffff", "2026-11-30T00:37:53.999999Z"),
    ):
        store.start_run(RunMeta(run_id=run_id, started_at=started, plugin_version="0.1.0"))
    assert store.resolve("latest") == "20261130T003754Z-0000"
    assert next(m.run_id for m in store.list_runs()[0]) == "20261130T003754Z-0000"
