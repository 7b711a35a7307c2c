"""Sample lookup under several processes: concurrent writers to one sample cache lose nothing (the
keyed lookup itself is tested in tests/unit/store/test_cache.py)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from pytest_aimeasure.store.runs import RunStore

pytestmark = pytest.mark.usefixtures("as_controller")


_WRITER = """
import sys
from pathlib import Path
from pytest_aimeasure.store.cache import SampleLookup
from pytest_aimeasure.measure.models import Sample
from pytest_aimeasure.store.runs import RunStore, SampleKey, SampleRecord
import time
worker, count = int(sys.argv[2]), int(sys.argv[3])
lookup = SampleLookup(RunStore(Path(sys.argv[1])), mode="on")
print("ready", flush=True)
while not Path(sys.argv[4]).exists():  # start together, so the writes really overlap
    time.sleep(0.001)
for i in range(count):
    k = SampleKey("fp", f"prompt-{worker}", "", i)
    s = Sample(index=i, dimension="d", score=1 + i % 5, rationale="r")
    lookup.put(SampleRecord(key=k, item_id=f"w{worker}", nodeid="n", sample=s), run_id="r")
    assert lookup.get(k) is not None
assert lookup.problems == [], lookup.problems
"""


def test_concurrent_writers_in_several_processes_lose_nothing(store: RunStore) -> None:
    workers, count = 4, 250
    go = store.root / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(store.root), str(w), str(count), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    with sqlite3.connect(store.cache_path) as conn:
        rows = conn.execute("SELECT prompt_hash, count(*) FROM samples GROUP BY prompt_hash").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert sorted(rows) == [(f"prompt-{w}", count) for w in range(workers)]
    assert mode == "wal"
