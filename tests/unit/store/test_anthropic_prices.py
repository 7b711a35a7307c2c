"""Anthropic judges are priced on a core install (no litellm), from genai-prices, and those prices
agree with litellm's map for every model both know."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store import cost
from pytest_aimeasure.store.anthropic_prices import anthropic_entry

pytest.importorskip("genai_prices")

RATES = (
    "input_per_token",
    "output_per_token",
    "cache_read_per_token",
    "cache_write_per_token",
)


def clear_caches() -> None:
    for cached in (cost.price_for, cost._price_map, cost._providers, anthropic_entry):
        cached.cache_clear()


@pytest.fixture
def core_install(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Prices as an install without the [litellm] extra finds them: no litellm package to read."""
    monkeypatch.setattr(cost, "litellm_folders", lambda: None)
    clear_caches()
    yield
    monkeypatch.undo()
    clear_caches()


def litellm_anthropic_models() -> list[str]:
    return sorted(
        key
        for key, entry in cost._price_map().items()
        if entry.get("litellm_provider") == "anthropic" and entry.get("mode", "chat") == "chat"
    )


def rates(price: cost.Price | None) -> dict[str, list[float] | None]:
    """Every rate of a price, flat: a rate the source leaves out is None (read as the input rate)."""
    assert price is not None
    flat: dict[str, list[float] | None] = {
        name: None if getattr(price, name) is None else [getattr(price, name)] for name in RATES
    }
    flat["tiers"] = [x for t in price.tiers for x in (t.above_tokens, t.input_per_token, t.output_per_token)]
    flat["batch"] = (
        None if price.batch is None else [price.batch.input_per_token, price.batch.output_per_token]
    )
    return flat


def test_genai_prices_agree_with_litellms_map_for_every_anthropic_model_both_know() -> None:
    if cost.price_map_path() is None:
        pytest.skip("litellm is not installed")
    both = [key for key in litellm_anthropic_models() if anthropic_entry(key.removeprefix("anthropic/"))]
    assert len(both) >= 10, both  # the comparison is not empty
    compared = 0
    for key in both:
        entry = anthropic_entry(key.removeprefix("anthropic/"))
        assert entry is not None
        theirs, ours = rates(cost._entry_price(key, entry)), rates(cost._lookup(key))
        for name, value in theirs.items():
            if value and ours[name]:  # a rate both sources give (litellm gives no batch rates for some)
                assert value == pytest.approx(ours[name], rel=1e-9), (key, name)
                compared += 1
    assert compared >= 4 * len(both)  # input, output and both cache rates at least, for every model


@pytest.mark.usefixtures("core_install")
@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("anthropic/claude-sonnet-4-5", None),
        ("claude-sonnet-4-5-20250929", "anthropic"),
        ("claude-opus-4-1", None),
    ],
)
def test_a_core_install_prices_anthropic_judges(model: str, provider: str | None) -> None:
    assert cost.price_map_path() is None
    price = cost.price_for(model, provider)
    assert price is not None and price.key.startswith("genai-prices anthropic/")
    usage = Usage(input_tokens=100_000, output_tokens=10_000)  # below the 200k tier
    total = cost.cost_usd(model, usage, provider)
    assert total is not None and total > 0
    assert total == pytest.approx(price.input_per_token * 1e5 + price.output_per_token * 1e4)
    assert cost.estimate_call_usd(model, 4000, 1024, provider) is not None


@pytest.mark.usefixtures("core_install")
def test_a_core_install_prices_no_other_provider_nor_an_unknown_model() -> None:
    assert cost.price_for("openai/gpt-4o") is None
    assert cost.price_for("gpt-4o", "openai") is None
    assert cost.price_for("anthropic/gpt-4o") is None  # genai-prices' Anthropic models only
    assert cost.price_for("claude-test", "anthropic") is None  # the local server's model: unknown
    assert cost.cost_usd("claude-test", Usage(input_tokens=1, output_tokens=1), "anthropic") is None


def test_with_litellm_installed_its_map_is_the_one_source() -> None:
    if cost.price_map_path() is None:
        pytest.skip("litellm is not installed")
    clear_caches()
    assert cost.price_for("claude-test", "anthropic") is None
    assert cost.price_for("anthropic/claude-test") is None
    # genai-prices was not read: its data takes ~0.5 s to load, for a model litellm's map lacks.
    assert anthropic_entry.cache_info().currsize == 0
    sonnet = cost.price_for("anthropic/claude-sonnet-4-5")
    assert sonnet is not None and not sonnet.key.startswith("genai-prices")


def test_the_reason_for_no_price_names_the_sources_this_install_has(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_aimeasure.store.cost as module

    assert module.no_price_reason(["'claude-test'"]) == "no price for 'claude-test' in litellm's price map"
    monkeypatch.setattr(module, "price_map_path", lambda: None)
    assert module.no_price_reason() == (
        "no price for this model in genai-prices' Anthropic prices, the only ones a core install has: "
        "the [litellm] extra brings litellm's price map, pip install 'pytest-aimeasure[litellm]'"
    )
    monkeypatch.setattr(module, "genai_prices_installed", lambda: False)  # Python 3.10: no genai-prices
    assert module.no_price_reason() == (
        "no price for this model: prices come with the [litellm] extra, "
        "pip install 'pytest-aimeasure[litellm]'"
    )
