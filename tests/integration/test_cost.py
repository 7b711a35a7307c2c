"""Prices from litellm's bundled map (read as JSON), cost, estimates and the budget."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store.cost import (
    TYPICAL_VERDICT_TOKENS,
    Budget,
    cost_usd,
    estimate_call_usd,
    price_for,
    price_map_path,
)


@pytest.fixture(scope="module")
def litellm() -> Iterator[Any]:
    # Offline, and set before the import: litellm must use the map it ships, the file cost.py reads.
    mp = pytest.MonkeyPatch()
    mp.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm as module
    except ImportError:  # pragma: no cover - litellm is a dependency
        pytest.skip("litellm is not installed")
    yield module
    mp.undo()


@pytest.mark.parametrize(
    ("model", "provider", "usage"),
    [
        ("claude-sonnet-4-5", None, Usage(input_tokens=1234, output_tokens=321)),
        ("anthropic/claude-sonnet-4-5", None, Usage(input_tokens=1000, output_tokens=200)),
        ("claude-sonnet-4-5", "anthropic", Usage(input_tokens=900, output_tokens=150)),
        ("gpt-4o", None, Usage(input_tokens=2000, output_tokens=300)),
        ("openai/gpt-4o", None, Usage(input_tokens=10, output_tokens=1)),
        ("azure/gpt-4o", None, Usage(input_tokens=500, output_tokens=50)),
        # Above its 200k tier: input and output both switch rate.
        (
            "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0",
            None,
            Usage(input_tokens=250_000, output_tokens=700),
        ),
    ],
)
def test_cost_equals_litellms_own_figure(
    litellm: Any, model: str, provider: str | None, usage: Usage
) -> None:
    prompt, completion = litellm.cost_per_token(
        model=model,
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        custom_llm_provider=provider,
    )
    ours = cost_usd(model, usage, provider)
    assert ours is not None
    assert ours == pytest.approx(prompt + completion, rel=1e-12)


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


def test_reading_prices_does_not_import_litellm() -> None:
    code = (
        "import sys; from pytest_aimeasure.store.cost import price_for; "
        "assert price_for('gpt-4o') is not None; assert 'litellm' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert price_map_path() is not None


# --------------------------------------------------------------------------------------------------
# Budget
# --------------------------------------------------------------------------------------------------


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
