"""The litellm extra: without it, a provider/model judge or suite target is a usage error naming
``pip install 'pytest-aimeasure[litellm]'``, before any call; the core (anthropic, scripted) works.

litellm stays installed in the test environment: each test blocks its import in a pytester
subprocess (a meta-path finder that refuses it), as if it were not installed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import ONE_WORKER
from tests.unit.judge.test_litellm import EXTRA

BLOCK_LITELLM = """\
import sys


class _NoLitellm:
    def find_spec(self, name, path=None, target=None):
        if name == "litellm" or name.startswith("litellm."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoLitellm())
"""

DIMENSION_TEST = """\
import pytest

@pytest.mark.dimension("tone", floor=3.0, rubric="5: warm; 1: cold")
def test_tone(judge):
    judge.score("Thanks for writing; here is what happens next.")
"""

SUITE = """\
suite: demo
targets:
  - {name: offline, model: scripted}
  - {name: mini, model: openai/gpt-4o-mini}
prompts:
  - {id: hello, text: "Say hello."}
dimensions:
  - {name: tone, rubric: "5: warm; 1: cold"}
"""


@pytest.fixture
def no_litellm(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(BLOCK_LITELLM)
    return pytester


def test_the_block_works(no_litellm: pytest.Pytester) -> None:
    no_litellm.makepyfile(
        test_probe="""\
        import importlib.util, pytest

        def test_probe():
            with pytest.raises(ModuleNotFoundError):
                import litellm  # noqa: F401
            with pytest.raises(ModuleNotFoundError):
                importlib.util.find_spec("litellm")
        """
    )
    no_litellm.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_provider_model_judge_without_litellm_is_a_usage_error_naming_the_extra(
    no_litellm: pytest.Pytester,
) -> None:
    no_litellm.makepyfile(test_tone=DIMENSION_TEST)
    result = no_litellm.runpytest_subprocess(
        "-p", "no:cacheprovider", "--ai-judge", "--judge-model", "openai/gpt-4o-mini"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "ERROR: --judge-model openai/gpt-4o-mini: judge model 'openai/gpt-4o-mini' needs litellm, which is "
        f"not installed: it is an optional extra, install it with {EXTRA}"
    ) in result.stderr.str()
    assert "test_tone" not in result.stdout.str()  # stopped before any test, so before any call


def test_the_core_judges_without_litellm(no_litellm: pytest.Pytester) -> None:
    no_litellm.makepyfile(test_tone=DIMENSION_TEST)
    result = no_litellm.runpytest_subprocess(
        "-p", "no:cacheprovider", "--ai-judge", "--judge-model", "scripted"
    )  # fmt: skip
    result.assert_outcomes(passed=1)


# Under xdist with one worker: the error is the workers' collection's (ONE_WORKER).
@pytest.mark.parametrize("xdist", [[], list(ONE_WORKER)], ids=["serial", "xdist"])
def test_a_provider_model_suite_target_without_litellm_names_the_extra_at_its_line(
    no_litellm: pytest.Pytester, xdist: list[str]
) -> None:
    no_litellm.makefile(".aimeasure.yaml", demo=SUITE)
    result = no_litellm.runpytest_subprocess("-p", "no:cacheprovider", *xdist)
    # A collection error (the whole file: not even the offline target generates), at the target's line.
    assert result.ret != pytest.ExitCode.OK
    assert result.parseoutcomes() == {"error": 1} or result.parseoutcomes() == {"errors": 1}
    assert (
        "demo.aimeasure.yaml: line 4: targets[1].model: target model 'openai/gpt-4o-mini' needs "
        f"litellm, which is not installed: it is an optional extra, install it with {EXTRA}"
    ) in result.stdout.str()


@pytest.fixture
def core_prices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Prices as a core install finds them (no litellm package to read its map from), in this process:
    an in-process session reads the same price functions."""
    from pytest_aimeasure.store import cost
    from pytest_aimeasure.store.anthropic_prices import anthropic_entry

    def clear() -> None:
        for cached in (cost.price_for, cost._price_map, cost._providers, anthropic_entry):
            cached.cache_clear()

    monkeypatch.setattr(cost, "litellm_folders", lambda: None)
    clear()
    yield
    monkeypatch.undo()
    clear()


@pytest.mark.usefixtures("core_prices")
def test_a_core_install_prices_an_anthropic_judge_and_names_the_extra_for_the_rest(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_tone=DIMENSION_TEST)
    priced = pytester.runpytest(
        "-p", "no:cacheprovider", "--judge-dry-run", "--judge-model", "anthropic/claude-sonnet-4-6",
        "--judge-budget-usd", "1",
    )  # fmt: skip
    assert priced.ret == pytest.ExitCode.OK, priced.stderr.str()
    priced.stdout.re_match_lines([r"^estimated cost: \$0\.0\d{3} \(assuming"])
    unpriced = pytester.runpytest(
        "-p", "no:cacheprovider", "--ai-judge", "--judge-model", "anthropic/claude-test",
        "--judge-budget-usd", "1",
    )  # fmt: skip
    assert unpriced.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "ERROR: --judge-budget-usd: no price for 'anthropic/claude-test' in genai-prices' Anthropic prices, "
        "the only ones a core install has: the [litellm] extra brings litellm's price map, "
        f"{EXTRA}, so spend cannot be bounded; choose a priced model or drop the budget"
    ) in unpriced.stderr.str()
