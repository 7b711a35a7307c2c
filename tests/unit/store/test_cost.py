"""Prices from litellm's bundled map (read as JSON), cost, estimates and the budget."""

from __future__ import annotations

import threading

import pytest

from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store.cost import (
    TYPICAL_VERDICT_TOKENS,
    Budget,
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
