"""Anthropic judges' prices on a core install, from genai-prices (pydantic's maintained price data).

The core install judges Anthropic models only, and litellm (whose bundled map
:mod:`pytest_aimeasure.store.cost` reads when it is installed, then as the one source) is an extra of
~100 MB. genai-prices is a 170 kB
package whose dependencies (pydantic, httpx2) the anthropic SDK already brings; its data ships
inside the package, so a price is found offline (it fetches newer data only when asked to, which
nothing here does). Only Anthropic models are read: they are what a core install can judge with,
and the names they go by (``claude-sonnet-4-5``, ``claude-sonnet-4-5-20250929``) are matched by
genai-prices' own rules. The rates are today's (genai-prices keeps dated price changes), handed to
:mod:`~pytest_aimeasure.store.cost` as a litellm map entry so one reader turns either source into a
price. tests/unit/store/test_anthropic_prices.py checks them against litellm's map.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Any

__all__ = ["PROVIDER", "anthropic_entry", "genai_prices_installed"]

PROVIDER = "anthropic"
_PER_TOKEN = Decimal(1_000_000)  # genai-prices gives USD per million tokens
# genai-prices' price fields and the fields of a litellm map entry that mean the same rate, so one
# reader (store.cost) turns either source into a price.
_FIELDS = {
    "input_mtok": "input_cost_per_token",
    "output_mtok": "output_cost_per_token",
    "cache_read_mtok": "cache_read_input_token_cost",
    "cache_write_mtok": "cache_creation_input_token_cost",  # the 5-minute write, the one judges use
}


def genai_prices_installed() -> bool:
    """Whether genai-prices can be imported (found without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("genai_prices") is not None
    except (ImportError, ValueError):  # blocked, or a None placeholder in sys.modules
        return False


def _per_token(value: Any) -> float:
    return float(Decimal(value) / _PER_TOKEN)


def _rates(prices: Any, suffix: str = "") -> dict[str, float]:
    entry: dict[str, float] = {}
    for field, name in _FIELDS.items():
        value = getattr(prices, field, None)
        if value is None:
            continue
        base = getattr(value, "base", value)  # TieredPrices: base, then tiers by input tokens
        entry[name + suffix] = _per_token(base)
        if suffix:  # batch rates: litellm's map keeps no batch tiers either
            continue
        for tier in getattr(value, "tiers", None) or ():
            entry[f"{name}_above_{int(tier.start)}_tokens"] = _per_token(tier.price)
    return entry


@lru_cache(maxsize=256)
def anthropic_entry(model: str) -> dict[str, Any] | None:
    """genai-prices' rates for the Anthropic model ``model`` today, as a litellm price-map entry
    (with its ``*_batches`` rates); None when genai-prices is not installed or does not know it."""
    if not genai_prices_installed():
        return None
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    provider = data_snapshot.find_provider_by_id(snapshot.providers, PROVIDER)
    found = None if provider is None else provider.find_model(model)  # Anthropic's own models only
    if found is None:
        return None
    now = datetime.now(timezone.utc)
    entry: dict[str, Any] = {"litellm_provider": PROVIDER, "genai_prices_id": found.id}
    entry.update(_rates(found.get_prices(now)))
    batch = _rates(found.get_prices(now, {"processing": "batch"}), "_batches")
    if batch.get("input_cost_per_token_batches") != entry.get("input_cost_per_token"):
        entry.update(batch)
    return entry
