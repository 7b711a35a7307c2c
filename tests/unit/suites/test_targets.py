"""Suite targets: provider checks before any call, concurrency keys, model families, cost."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.suites.model import TargetSpec
from pytest_aimeasure.suites.run import JobPlan, SuiteRunner
from pytest_aimeasure.suites.targets import TargetError, family_clash, model_families, resolve_target


def target(**fields: Any) -> TargetSpec:
    return TargetSpec.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": "gpt-4o"}, "target model 'gpt-4o' is not recognised: use 'provider/model'"),
        ({"model": "opneai/gpt-4o"}, "litellm has no provider 'opneai' (did you mean 'openai'"),
        ({"model": "scripted:mod:attr"}, "the offline target is plain 'scripted'"),
        ({"callable": "no_such_module_xyz:generate"}, "cannot import 'no_such_module_xyz'"),
        ({"callable": "json:no_such_function"}, "'json' has no attribute 'no_such_function'"),
        ({"callable": "json:__doc__"}, "is a str, not a callable"),
    ],
)
def test_unusable_targets_are_rejected_before_any_call(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(TargetError, match=None) as excinfo:
        resolve_target(target(**fields))
    assert message in str(excinfo.value)


def test_concurrency_keys_follow_provider_and_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_target(target(model="openai/a")).concurrency_key == "gen:openai"
    assert resolve_target(target(model="openai/b")).concurrency_key == "gen:openai"  # one account, one limit
    local = target(model="openai/c", params={"api_base": "http://127.0.0.1:9/v1"})
    assert resolve_target(local).concurrency_key == "gen:openai@http://127.0.0.1:9/v1"
    assert resolve_target(target(model="ollama/llama3")).concurrency_key == "gen:ollama"
    assert resolve_target(target(model="anthropic/claude-x")).concurrency_key == "gen:anthropic"
    assert resolve_target(target(model="scripted")).concurrency_key == "gen:scripted"
    assert resolve_target(target(callable="json:dumps")).concurrency_key == "gen:callable:json:dumps"
    explicit = target(model="openai/d", concurrency_key="local-box", concurrency=2)
    resolved = resolve_target(explicit)
    assert (resolved.concurrency_key, resolved.concurrency) == ("gen:local-box", 2)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:7")
    assert resolve_target(target(model="openai/a")).concurrency_key == "gen:openai@http://127.0.0.1:8/v1"
    assert (
        resolve_target(target(model="anthropic/claude-x")).concurrency_key
        == "gen:anthropic@http://127.0.0.1:7"
    )


def test_connection_params_go_to_the_backend_not_the_call() -> None:
    resolved = resolve_target(
        target(model="openai/a", params={"api_base": "http://h/v1", "temperature": 0.2})
    )
    assert resolved.api_base == "http://h/v1"
    assert resolved.generation_params() == {"temperature": 0.2}


@pytest.mark.parametrize(
    ("model", "families"),
    [
        ("anthropic/claude-sonnet-4-6", {"anthropic"}),
        ("claude-haiku-4-5", {"anthropic"}),
        ("bedrock/anthropic.claude-3-5-sonnet", {"anthropic"}),
        ("openai/gpt-4o-mini", {"openai"}),
        ("openai/o3-mini", {"openai"}),
        ("azure/my-deployment", {"openai"}),
        ("groq/openai/gpt-oss-120b", {"openai"}),
        ("openrouter/qwen/qwen3-235b", {"qwen"}),
        ("ollama/llama3.1", {"meta"}),
        ("hosted_vllm/my-finetune", set()),
    ],
)
def test_model_families(model: str, families: set[str]) -> None:
    assert model_families(model) == families


@pytest.mark.parametrize(
    ("target_model", "judge_model", "clash"),
    [
        ("openai/gpt-4o-mini", "openai/gpt-4.1", "openai"),
        ("bedrock/anthropic.claude-3-haiku", "anthropic/claude-sonnet-4-6", "anthropic"),
        ("openai/fast-model", "openai/judge-model", "openai"),
        ("deepseek/deepseek-chat", "anthropic/claude-sonnet-4-6", None),
        ("ollama/llama3", "ollama/mistral", None),
        ("hosted_vllm/a", "hosted_vllm/b", "provider hosted_vllm"),
        ("scripted", "scripted", None),
        ("openai/gpt-4o", "scripted", None),
    ],
)
def test_family_clash(target_model: str, judge_model: str, clash: str | None) -> None:
    assert family_clash(target_model, judge_model) == clash


def test_cost_is_unknown_unless_priced_or_free() -> None:
    usage = Usage(input_tokens=1000, output_tokens=1000)
    assert resolve_target(target(model="openai/no-such-model-xyz")).cost(usage) is None
    priced = resolve_target(target(model="openai/gpt-4o-mini")).cost(usage)
    assert priced is not None and priced > 0
    assert resolve_target(target(model="scripted")).cost(usage) == 0.0
    assert resolve_target(target(callable="json:dumps")).cost(usage) is None
    assert resolve_target(target(callable="json:dumps", cost_per_call_usd=0.0)).cost(usage) == 0.0


def test_callable_latency_is_the_call_not_the_wait_for_a_pool_thread(tmp_path: Path) -> None:
    """A callable target's latency counts its own call only, not the wait for a free worker thread.

    The loop's thread pool has one thread, held by design for ``hold`` seconds when the call is made:
    a timer started before the hop to the pool records at least ``hold``; the call itself sleeps 0.05 s.
    """
    (tmp_path / "latency_target.py").write_text(
        "import time\n\ndef generate(prompt):\n    time.sleep(0.05)\n    return 'out: ' + prompt\n"
    )
    resolved = resolve_target(target(callable="latency_target:generate"), search=[tmp_path])
    settings = SimpleNamespace(generation_concurrency=4, timeout=60.0)
    runner = SuiteRunner(None, SimpleNamespace(settings=settings))  # type: ignore[arg-type]
    plan = JobPlan(
        nodeid="s.aimeasure.yaml::p1[t]", file_key="s", suite="s", prompt_id="p1", category=None,
        text="hello", system=None, variables={}, target=resolved, gates=(), dimensions=(), facts=False,
        callables={}, wait_s=60.0,
    )  # fmt: skip
    hold = 2.0

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        busy = loop.run_in_executor(None, time.sleep, hold)  # the pool's only thread is taken
        generation, value = await runner._call_target(plan)
        await busy
        return generation, value

    generation, value = asyncio.run(main())
    assert value == "out: hello"
    assert 0.05 <= generation.latency_s < hold
