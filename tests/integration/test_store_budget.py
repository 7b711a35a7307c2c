"""The judge budget shared by xdist workers: one ledger file, one limit for the whole session.

The plugin-level proof that a budget stops (``-n 2`` against the local server, spend within the
limit) is in ``test_store_session.py``; here several processes reserving at once, and a session whose
budget fits its real calls. The ledger's own rules are unit tests (tests/unit/store/test_cost.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aimeasure.store.cost import Budget
from pytest_aimeasure.testing import ProviderServer, SeenRequest
from tests.conftest import ONE_WORKER, read_results

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


ITEMS = """
import pytest

@pytest.mark.parametrize("n", range(8))
@pytest.mark.dimension("tone", rubric="5 = calm")
def test_tone(n, judge):
    judge.score(f"story {n}: the knight waited by the gate.")
"""
Serve = Callable[[Callable[[SeenRequest], int]], ProviderServer]
PRICED = "anthropic/claude-sonnet-4-5"  # litellm's price map: $3 / $15 a million tokens in / out


@pytest.mark.usefixtures("as_controller")
@pytest.mark.parametrize("mode", [pytest.param((), id="serial"), pytest.param(ONE_WORKER, id="xdist")])
def test_a_budget_the_real_calls_fit_is_not_stopped_by_what_they_reserve(
    pytester: pytest.Pytester, serve: Serve, mode: tuple[str, ...]
) -> None:
    """Eight calls of ~$0.001 each against a budget of $0.012. Each call used to reserve its prompt and
    300 output tokens (~$0.0053) and 16 started at once, so the third was refused and the run stopped
    at $0.003. The reservation now takes the longest verdict seen (here ~35 tokens), and a call that
    fits the spend waits for the calls in flight instead of stopping the run."""
    server = serve(lambda seen: 4)
    pytester.makepyfile(test_items=ITEMS)
    argv = ("--ai-judge", "--judge-model", PRICED, "-p", "no:randomly", "--judge-samples=1", *mode)
    result = pytester.runpytest(*argv, "--judge-budget-usd=0.012", "--aimeasure-json=out.json")
    result.assert_outcomes(passed=8)
    spend = read_results(pytester.path / "out.json")["spend"]
    assert server.calls == spend["calls"] == 8
    assert 0.006 < spend["cost_usd"] <= 0.012  # what the eight cost, within the budget


def test_a_budget_stop_says_what_the_next_call_would_reserve(pytester: pytest.Pytester, serve: Serve) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(test_items=ITEMS)
    argv = ("--ai-judge", "--judge-model", PRICED, "-p", "no:randomly", "--judge-samples=1")
    result = pytester.runpytest(*argv, "--judge-budget-usd=0.006", "--aimeasure-json=out.json")
    data = read_results(pytester.path / "out.json")
    judged = server.calls
    outcomes = result.parseoutcomes()
    assert (outcomes["passed"], outcomes["skipped"]) == (judged, 8 - judged), outcomes
    assert 4 <= judged < 8 and data["spend"]["cost_usd"] <= 0.006
    (stopped, *_) = [i for i in data["items"] if i["outcome"] == "skipped"]
    said = re.fullmatch(
        r"not judged: budget \(\$(\S+) of \$0\.0060 spent; the next call would reserve \$(\S+): its "
        r"prompt, ([\d,]+) characters ≈ ([\d,]+) tokens in, and (\d+) tokens out "
        r"\(the longest verdict so far\)\)",
        stopped["message"],
    )
    assert said is not None, stopped["message"]
    spent, reserve, chars, tokens_in, tokens_out = said.groups()
    assert float(spent) + float(reserve) > 0.006  # why it stopped
    prompt = server.requests[0]
    assert int(chars.replace(",", "")) > len(prompt.system + prompt.prompt)  # plus the tool definition
    assert int(tokens_in.replace(",", "")) == -(-int(chars.replace(",", "")) // 4)
    assert int(tokens_out) < 100  # the local server's verdicts, not the 300 reserved before the first
