"""Prices read from litellm's bundled map (as JSON) agree with litellm's own figures, and reading them
imports no litellm (the price rules and the budget are tested in tests/unit/store/test_cost.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store.cost import cost_usd, price_map_path


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


def test_reading_prices_does_not_import_litellm() -> None:
    code = (
        "import sys; from pytest_aimeasure.store.cost import price_for; "
        "assert price_for('gpt-4o') is not None; assert 'litellm' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert price_map_path() is not None


@pytest.mark.parametrize("model", ["anthropic/claude-x", "openai/gpt-x"])
def test_the_warm_up_does_not_read_the_price_map(pytester: pytest.Pytester, model: str) -> None:
    # Every route reads it after its first request (the first reply's cost; anthropic/ decides the
    # later calls' cache markers with it): read in the warm-up it competed with the session's start
    # for the GIL (anthropic/ used to: 50 ms with litellm's map, 0.4 s with genai-prices' data).
    from pytest_aimeasure.session.state import state_key
    from pytest_aimeasure.store import cost

    cost._price_map.cache_clear()
    config = pytester.parseconfigure("--ai-judge", "--judge-model", model)  # the warm-up starts here
    config.stash[state_key].close()  # (waits for it)
    assert not cost._price_map._loaded
