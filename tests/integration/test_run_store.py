"""The run store across processes: a run whose process died lists as interrupted, appends survive
kill -9, git state is read (the store's own rules are tested in tests/unit/store/test_runs.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_aimeasure.store import runs as store_module
from pytest_aimeasure.store.runs import RunStore, git_info
from tests.unit.store.test_runs import start

pytestmark = pytest.mark.usefixtures("as_controller")


# --------------------------------------------------------------------------------------------------
# listing reads metadata only
# --------------------------------------------------------------------------------------------------


def test_a_running_run_whose_process_died_lists_as_interrupted(store: RunStore) -> None:
    run = start(store, "r1")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owner = json.loads((run.path / "owner.json").read_text())
    (run.path / "owner.json").write_text(json.dumps({**owner, "pid": dead.pid}))
    start(store, "r2", "2026-11-29T11:00:00.000000Z")  # owned by this live process

    statuses = {m.run_id: m.status for m in store.list_runs()[0]}
    assert statuses == {"r1": "interrupted", "r2": "running"}
    assert store.open_run("r1").meta.status == "running"  # the file itself is not rewritten


def test_owner_alive_only_for_another_live_process_on_this_host(store: RunStore) -> None:
    run = start(store, "r1")
    assert not store.owner_alive("r1")  # this very process: not "another session"
    owner = json.loads((run.path / "owner.json").read_text())
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as live:
        try:
            (run.path / "owner.json").write_text(json.dumps({**owner, "pid": live.pid}))
            assert store.owner_alive("r1")
            # A run restored from another machine (a CI cache) cannot be known to be alive.
            (run.path / "owner.json").write_text(json.dumps({"host": "elsewhere", "pid": live.pid}))
            assert not store.owner_alive("r1")
        finally:
            live.kill()


# --------------------------------------------------------------------------------------------------
# journals: torn lines, threads, kill -9
# --------------------------------------------------------------------------------------------------


_KILL_CHILD = """
import sys
from pytest_aimeasure.measure.models import Sample
from pytest_aimeasure.store.runs import Journal, SampleKey, SampleRecord
journal = Journal(__import__("pathlib").Path(sys.argv[1]))
i = 0
while True:
    sample = Sample(index=i, dimension="tone", score=1 + i % 5, rationale="r" * (i % 300 + 1))
    journal.append(SampleRecord(key=SampleKey("fp", "p", "", i), item_id="x", nodeid="x", sample=sample))
    print(i, flush=True)  # acknowledged only after append returned
    i += 1
"""


def _acknowledged_then_killed(script: str, path: Path) -> list[int]:
    """Run ``script`` (it appends records to ``path`` and prints each index once append returns),
    SIGKILL it after 150 acknowledgements, and return every index it acknowledged."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert child.stdout is not None
    acknowledged: list[int] = []
    deadline = time.monotonic() + 20
    while len(acknowledged) < 150 and time.monotonic() < deadline:
        acknowledged.append(int(child.stdout.readline()))
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    acknowledged += [int(line) for line in child.stdout.read().split()]
    assert child.returncode == -signal.SIGKILL
    assert len(acknowledged) >= 150
    return acknowledged


def test_every_returned_append_survives_kill_9(tmp_path: Path) -> None:
    """kill -9 cannot lose a returned record: no buffer lives in the process after append returns.
    (fsync additionally covers an OS crash or power cut, which a test cannot stage.)"""
    path = tmp_path / "journal-controller.jsonl"
    acknowledged = _acknowledged_then_killed(_KILL_CHILD, path)

    records, problems = store_module.read_journal(path)
    on_disk = [r.key.index for r in records]
    assert on_disk[: len(acknowledged)] == acknowledged  # every acknowledged record, in order
    assert len(on_disk) - len(acknowledged) <= 1  # at most the one being acknowledged when killed
    assert len(problems) <= 1  # at most a torn last line


def test_unsynced_appends_are_written_at_once_and_survive_kill_9(tmp_path: Path) -> None:
    """The engine appends an item's samples with sync=False and fsyncs once per item: a record is
    still on disk for a killed process the moment append returns."""
    path = tmp_path / "journal-controller.jsonl"
    script = _KILL_CHILD.replace("sample=sample))", "sample=sample), sync=False)")
    assert "sync=False" in script
    acknowledged = _acknowledged_then_killed(script, path)
    records, _ = store_module.read_journal(path)
    assert [r.key.index for r in records][: len(acknowledged)] == acknowledged


# --------------------------------------------------------------------------------------------------
# git_info
# --------------------------------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@pytest.mark.skipif(
    subprocess.run(["git", "--version"], capture_output=True).returncode != 0, reason="no git"
)
def test_git_info_reads_commit_and_dirty_state(tmp_path: Path) -> None:
    assert git_info(tmp_path) == (None, None)
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("a")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-q", "-m", "one")
    commit, dirty = git_info(tmp_path)
    assert commit is not None and len(commit) == 40 and dirty is False
    RunStore(tmp_path / ".aimeasure").ensure_writable()  # its .gitignore keeps the store out of "dirty"
    assert git_info(tmp_path) == (commit, False)
    (tmp_path / "a.txt").write_text("changed")
    assert git_info(tmp_path) == (commit, True)
