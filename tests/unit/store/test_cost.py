"""Prices from litellm's bundled map (read as JSON), cost, estimates, the budget and its shared ledger."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store.cost import (
    TYPICAL_VERDICT_TOKENS,
    WAIT,
    Budget,
    SharedBudget,
    cost_usd,
    estimate_call_usd,
    price_for,
)


def test_unknown_models_have_no_price_not_a_zero_price() -> None:
    assert price_for("no-such-model-anywhere") is None
    assert cost_usd("no-such-model-anywhere", Usage(input_tokens=10, output_tokens=10)) is None
    assert estimate_call_usd("no-such-model-anywhere", 4000, 1024) is None
    # A provider prefix must own the entry: gpt-4o is not an anthropic model.
    assert price_for("anthropic/gpt-4o") is None


def test_the_scripted_judge_is_exactly_free() -> None:
    usage = Usage(input_tokens=10_000, output_tokens=5_000)
    assert cost_usd("scripted", usage) == 0.0
    assert cost_usd("any-name", usage, provider="scripted") == 0.0
    assert estimate_call_usd("scripted", 10_000, 1024) == 0.0


def test_lookup_rules() -> None:
    sonnet = price_for("claude-sonnet-4-5")
    assert sonnet is not None
    assert price_for("anthropic/claude-sonnet-4-5") == sonnet
    assert price_for("claude-sonnet-4-5", "anthropic") == sonnet
    assert price_for("claude-sonnet-4-5", "litellm") == sonnet  # our router backend is no litellm provider
    azure = price_for("gpt-4o", "azure")
    assert azure is not None and azure.key == "azure/gpt-4o"


def test_aliases_are_followed() -> None:
    from pytest_aimeasure.store.cost import _price_map

    aliases = {k: v["alias_of"] for k, v in _price_map().items() if isinstance(v.get("alias_of"), str)}
    if not aliases:
        pytest.skip("this litellm has no alias entries")
    name, target = next((k, t) for k, t in sorted(aliases.items()) if price_for(t) is not None)
    found = price_for(name)
    assert found is not None and found.key == target


def test_estimate_counts_chars_over_four_and_a_typical_verdict() -> None:
    price = price_for("gpt-4o")
    assert price is not None
    expected = 1000 * price.input_per_token + TYPICAL_VERDICT_TOKENS * price.output_per_token
    assert estimate_call_usd("gpt-4o", 4000, 1024) == pytest.approx(expected)
    capped = 1000 * price.input_per_token + 100 * price.output_per_token
    assert estimate_call_usd("gpt-4o", 3999, 100) == pytest.approx(capped)


def test_budget_reserves_settles_and_stops() -> None:
    budget = Budget(1.0)
    a = budget.reserve(0.4)
    b = budget.reserve(0.4)
    assert a is not None and b is not None
    assert budget.in_flight == pytest.approx(0.8)
    assert budget.reserve(0.3) is None  # 0.8 in flight + 0.3 > 1.0: no new call may start
    assert budget.exhausted
    budget.settle(a, 0.1)
    budget.settle(b, None)  # unknown cost books the estimate
    assert budget.spent == pytest.approx(0.5)
    assert budget.in_flight == 0
    assert budget.reserve(0.01) is None  # the first refusal is final
    with pytest.raises(ValueError, match="not open"):
        budget.settle(a, 0.1)


def test_budget_is_exhausted_when_fully_spent() -> None:
    budget = Budget(0.5)
    r = budget.reserve(0.5)
    assert r is not None and budget.exhausted
    budget.settle(r, 0.5)
    assert budget.remaining == pytest.approx(0.0)


def test_budget_under_many_threads_never_admits_more_than_the_limit() -> None:
    budget = Budget(10.0)
    admitted: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def caller() -> None:
        start.wait()
        while True:
            reservation = budget.reserve(0.25)
            if reservation is None:
                return
            with lock:
                admitted.append(1)
            budget.settle(reservation, 0.25)

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 40  # exactly 10.0 / 0.25
    assert budget.spent == pytest.approx(10.0)
    assert budget.in_flight == 0
    assert budget.exhausted


def test_budget_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Budget(-1)
    with pytest.raises(ValueError):
        Budget(1).reserve(float("nan"))


def test_cache_tokens_are_priced_at_the_cache_rates() -> None:
    price = price_for("claude-sonnet-4-6", "anthropic")
    assert (
        price is not None
        and price.cache_read_per_token is not None
        and price.cache_write_per_token is not None
    )
    cached = Usage(input_tokens=100, cache_read_input_tokens=2000, output_tokens=50)
    uncached = Usage(input_tokens=2100, output_tokens=50)
    assert price.cost(cached) == pytest.approx(
        100 * price.input_per_token + 2000 * price.cache_read_per_token + 50 * price.output_per_token
    )
    assert price.cost(cached) < price.cost(uncached)
    written = Usage(input_tokens=100, cache_creation_input_tokens=2000, output_tokens=50)
    assert price.cost(written) > price.cost(uncached)  # a write costs more than plain input


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


@pytest.mark.parametrize("make", [lambda p: Budget(1.0), lambda p: SharedBudget(p / "ledger.json", 1.0)])
def test_a_call_that_fits_the_spend_but_not_beside_the_calls_in_flight_may_wait(
    tmp_path: Path, make: Callable[[Path], Budget | SharedBudget]
) -> None:
    budget = make(tmp_path)
    first = budget.reserve(0.6)
    assert first is not None and first != WAIT
    assert budget.reserve(0.6, may_wait=True) == WAIT  # 0.6 in flight + 0.6 > 1.0, but 0.6 alone fits
    assert not budget.exhausted
    budget.settle(first, 0.2)  # it cost less than it reserved
    second = budget.reserve(0.6, may_wait=True)
    assert second is not None and second != WAIT
    budget.settle(second, 0.2)
    assert budget.reserve(0.7, may_wait=True) is None  # 0.4 spent + 0.7 > 1.0: no call in flight frees that
    assert budget.reserve(0.01, may_wait=True) is None  # and the refusal is final


def test_the_price_map_is_read_once_when_two_threads_ask_at_the_same_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The warm-up reads it in the background while the first judge call may ask for it too.
    from pytest_aimeasure.store import cost

    reads: list[str] = []
    reading = threading.Event()
    release = threading.Event()

    def slow_loads(text: str) -> object:
        reads.append(threading.current_thread().name)
        reading.set()
        assert release.wait(10)
        return {"judge-x": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}}

    monkeypatch.setattr(cost.json, "loads", slow_loads)
    cost._price_map.cache_clear()
    got: dict[str, object] = {}

    def ask(name: str) -> None:
        got[name] = cost._price_map()

    first = threading.Thread(target=ask, args=("warm-up",), name="warm-up")
    second = threading.Thread(target=ask, args=("judge",), name="judge")
    first.start()
    assert reading.wait(10)
    second.start()
    second.join(0.05)  # it waits for the read under way (it would read the file again itself)
    release.set()
    first.join(10)
    second.join(10)
    monkeypatch.undo()
    cost._price_map.cache_clear()
    assert reads == ["warm-up"]
    assert got["judge"] is got["warm-up"] and "judge-x" in got["judge"]  # type: ignore[operator]
