"""The judge budget shared by xdist workers: one ledger file, one limit for the whole session.

The plugin-level proof (``-n 2`` against the local server, spend within the limit) is in
``test_plugin_store.py``; here the ledger itself, with several processes reserving at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_aimeasure.store.cost import Budget, SharedBudget

WORKER = """
import json, sys
from pathlib import Path
from pytest_aimeasure.store.cost import SharedBudget

budget = SharedBudget(Path(sys.argv[1]), float(sys.argv[2]))
admitted = 0
for _ in range(200):
    reservation = budget.reserve(0.25)
    if reservation is None:
        break
    admitted += 1
    budget.settle(reservation, 0.2)  # each call costs a little less than its estimate
print(json.dumps({"admitted": admitted}))
"""


def test_two_workers_share_one_limit_and_the_first_refusal_stops_both(tmp_path: Path) -> None:
    ledger = tmp_path / "budget-ledger.json"
    a, b = SharedBudget(ledger, 1.0), SharedBudget(ledger, 1.0)
    first = a.reserve(0.6)
    assert first is not None
    assert b.in_flight == pytest.approx(0.6)  # b sees what a has in flight
    assert b.reserve(0.6) is None  # 0.6 in flight + 0.6 > 1.0: b may not start a call
    assert b.exhausted and a.refused == 1
    a.settle(first, 0.1)
    assert b.spent == pytest.approx(0.1)
    assert a.reserve(0.01) is None  # the first refusal, made by b, is final for a too
    with pytest.raises(ValueError, match="not open"):
        a.settle(first, 0.1)


def test_unknown_cost_books_the_estimate_and_reset_starts_a_new_session(tmp_path: Path) -> None:
    ledger = tmp_path / "budget-ledger.json"
    budget = SharedBudget(ledger, 1.0)
    reservation = budget.reserve(0.3)
    assert reservation is not None
    budget.settle(reservation, None)
    assert budget.spent == pytest.approx(0.3) and budget.remaining == pytest.approx(0.7)
    SharedBudget.reset(ledger)
    fresh = SharedBudget(ledger, 1.0)
    assert fresh.spent == 0 and fresh.in_flight == 0 and not fresh.exhausted


def test_an_unreadable_ledger_refuses_rather_than_spends(tmp_path: Path) -> None:
    ledger = tmp_path / "budget-ledger.json"
    ledger.write_text("not json")
    budget = SharedBudget(ledger, 1.0)
    assert budget.reserve(0.1) is None
    ledger.write_text(json.dumps({"spent": 0.0, "open": {}, "refused": 0}))
    assert budget.reserve(0.1) is None  # refused once, refused for good


def test_threads_and_instances_never_admit_more_than_the_limit(tmp_path: Path) -> None:
    ledger = tmp_path / "budget-ledger.json"
    budgets = [SharedBudget(ledger, 10.0) for _ in range(2)]
    admitted: list[int] = []
    lock = threading.Lock()

    def work(budget: SharedBudget) -> None:
        for _ in range(100):
            reservation = budget.reserve(0.25)
            if reservation is None:
                return
            with lock:
                admitted.append(1)
            budget.settle(reservation, 0.25)

    threads = [threading.Thread(target=work, args=(budgets[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert budgets[0].spent == pytest.approx(0.25 * len(admitted))
    assert budgets[0].spent <= 10.0 and budgets[1].in_flight == 0


def test_processes_reserving_at_once_stay_within_the_limit(tmp_path: Path) -> None:
    ledger = tmp_path / "budget-ledger.json"
    limit = 12.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(ledger), str(limit)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    admitted = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        admitted.append(json.loads(out)["admitted"])
    state = json.loads(ledger.read_text())
    assert state["open"] == {} and state["refused"] >= 1
    assert state["spent"] == pytest.approx(0.2 * sum(admitted))
    # Each admission needed spend + in flight + 0.25 <= limit; one budget per process would have
    # let each process alone spend up to the limit.
    assert state["spent"] <= limit
    assert sum(admitted) <= limit / 0.2
    single = Budget(limit)
    alone = 0
    while (r := single.reserve(0.25)) is not None:
        single.settle(r, 0.2)
        alone += 1
    assert sum(admitted) <= alone
    assert sum(admitted) >= alone // 2, admitted  # they did share it: not stopped at the first call
