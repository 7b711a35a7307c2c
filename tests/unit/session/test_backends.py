"""The session's judge engine asks the conftests' hooks for backends, prompts and scripted verdicts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pytest_aimeasure.judge.backends.scripted import ScriptedCall
from pytest_aimeasure.judge.prompt import JudgePrompt
from pytest_aimeasure.session.backends import SessionBackends
from pytest_aimeasure.session.settings import Settings


class Hooks:
    """A conftest that serves ``custom`` models, sets a prompt's system text and scores 4."""

    def __init__(self) -> None:
        self.custom = object()

    def pytest_aimeasure_make_backend(self, *, model: str, config: Any) -> Any:
        return self.custom if model == "custom" else None

    def pytest_aimeasure_judge_prompt(self, *, prompt: JudgePrompt, dimension: str, config: Any) -> None:
        prompt.system = f"grade {dimension}"

    def pytest_aimeasure_scripted_verdict(self, *, call: ScriptedCall, config: Any) -> Any:
        return 4, f"scripted {call.dimension}"


def backends(**settings: Any) -> tuple[SessionBackends, Hooks]:
    hooks = Hooks()
    config = cast(pytest.Config, SimpleNamespace(hook=hooks, rootpath=Path(".")))
    values = {
        "timeout": 5.0,
        "batch": False,
        "batch_poll": 1.0,
        "processes": 1,
        "process_index": 0,
        **settings,
    }
    return SessionBackends(config, cast(Settings, SimpleNamespace(**values)), None), hooks


def test_a_conftest_backend_is_used_for_its_model() -> None:
    made, hooks = backends()
    assert made.backend("custom") is hooks.custom


def test_a_built_in_scripted_judge_asks_the_conftest_for_its_verdict() -> None:
    made, _ = backends()
    backend = made.backend("scripted")
    assert backend.provider == "scripted"
    call = ScriptedCall(dimension="tone", artifact="Hi", rubric="5 = warm", facts=None, index=0, attempt=0)
    assert made.scripted_verdict(call) == (4, "scripted tone")


def test_the_prompt_is_what_the_conftest_leaves() -> None:
    made, _ = backends()
    assert made.prompt("tone").system == "grade tone"


class Cache:
    """pytest's cache as QuirksMemory uses it: JSON values by key."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


def judge_backend(model: str = "claude-x", base: str = "https://api.example") -> Any:
    from pytest_aimeasure.judge.backends.base import Quirks

    return SimpleNamespace(
        provider="anthropic", model=model, base_url_in_use=base, quirks=Quirks(), concurrency_key="anthropic"
    )


def test_quirks_are_kept_from_a_session_whose_calls_got_answers_and_recalled_for_a_week() -> None:
    from pytest_aimeasure.session.backends import QUIRKS_KEPT_S, QuirksMemory

    cache, now = Cache(), [1000.0]
    learned, silent, other = judge_backend(), judge_backend("claude-y"), judge_backend(base="https://gateway")
    learned.quirks.turn_off("forces_tool")
    learned.quirks.note_answer()
    silent.quirks.turn_off("sends_temperature")  # its calls got no answer (429s, timeouts): taught nothing
    QuirksMemory(cache, clock=lambda: now[0]).keep([learned, silent])

    later = judge_backend()
    lessons = QuirksMemory(cache, clock=lambda: now[0]).recall(later)
    assert later.quirks.known and not later.quirks.first_call_over
    assert (later.quirks.forces_tool, later.quirks.sends_temperature) == (False, True)
    assert len(lessons) == 1 and "forced tool" in lessons[0]
    for unknown in (judge_backend("claude-y"), other):  # no answer; another URL in front of the model
        assert QuirksMemory(cache, clock=lambda: now[0]).recall(unknown) == []
        assert not unknown.quirks.known

    now[0] += QUIRKS_KEPT_S + 1  # a week later the model is asked again
    stale = judge_backend()
    assert QuirksMemory(cache, clock=lambda: now[0]).recall(stale) == [] and not stale.quirks.known


def test_a_cache_entry_that_does_not_read_is_learned_again_and_other_entries_are_kept() -> None:
    from pytest_aimeasure.session.backends import QUIRKS_CACHE_KEY, QuirksMemory

    cache = Cache()
    cache.set(QUIRKS_CACHE_KEY, {"models": "not a table"})
    fresh = judge_backend()
    assert QuirksMemory(cache).recall(fresh) == [] and not fresh.quirks.known
    first, second = judge_backend("claude-a"), judge_backend("claude-b")
    for backend in (first, second):
        backend.quirks.note_answer()
    QuirksMemory(cache).keep([first])
    QuirksMemory(cache).keep([second])  # another worker's session: the first entry stays
    assert len(cache.values[QUIRKS_CACHE_KEY]["models"]) == 2
    assert QuirksMemory(None).recall(judge_backend()) == []  # -p no:cacheprovider: nothing kept


def test_a_providers_limit_is_kept_beside_the_quirks_and_recalled_for_a_week() -> None:
    from pytest_aimeasure.judge.limits import ProviderLimit
    from pytest_aimeasure.session.backends import QUIRKS_KEPT_S, QuirksMemory

    cache, now = Cache(), [1000.0]
    limit = ProviderLimit(64, start=32)
    for _ in range(3):  # a provider that allows 4: 32, 16 and 8 refused
        tokens = [limit.try_acquire() for _ in range(limit.limit)]
        limit.note_rate_limit(tokens[0] or 0, retry_after=0.0)
        for _ in tokens:
            limit.release()
    assert limit.learned == 4
    backend = judge_backend()
    QuirksMemory(cache, clock=lambda: now[0]).keep([backend], {"anthropic": limit})

    memory = QuirksMemory(cache, clock=lambda: now[0])
    assert memory.recall_limit(judge_backend("claude-other")) == 4  # one limit per provider
    assert memory.recall_limit(judge_backend(base="https://gateway")) is None  # another URL
    nothing = ProviderLimit(64, start=32)  # a session that filled no round and got no 429
    QuirksMemory(cache, clock=lambda: now[0]).keep([backend], {"anthropic": nothing})
    assert QuirksMemory(cache, clock=lambda: now[0]).recall_limit(backend) == 4  # the earlier level stays
    now[0] += QUIRKS_KEPT_S + 1  # a week later the limit starts afresh
    assert QuirksMemory(cache, clock=lambda: now[0]).recall_limit(backend) is None
    assert QuirksMemory(None).recall_limit(backend) is None  # -p no:cacheprovider


def test_the_findings_of_xdist_workers_merge_to_the_lowest_refused_limit_and_every_refusal() -> None:
    # Each worker has a limit of its own against one provider: the one that met the 429s knows where
    # the provider refuses; one that met none only where its own calls were answered.
    from pytest_aimeasure.judge.limits import ProviderLimit
    from pytest_aimeasure.session.backends import QuirksMemory

    memory = QuirksMemory(Cache())
    refused = ProviderLimit(64, start=32)
    for _ in range(2):  # 32 then 16 refused: learned 8
        tokens = [refused.try_acquire() for _ in range(refused.limit)]
        refused.note_rate_limit(tokens[0] or 0, retry_after=0.0)
        for _ in tokens:
            refused.release()
    held = ProviderLimit(64, start=32, resume=20)
    tokens = [held.try_acquire() for _ in range(20)]
    for token in tokens:
        held.note_success(token or 0, 0.1)
        held.release()
    assert (refused.learned, refused.refused_at, held.learned, held.refused_at) == (8, 16, 20, None)

    one, other = judge_backend(), judge_backend()
    one.quirks.turn_off("forces_tool")
    other.quirks.turn_off("sends_temperature")
    for backend in (one, other):
        backend.quirks.note_answer()
    first = memory.findings([one], {"anthropic": refused})
    second = memory.findings([other], {"anthropic": held})
    key = "anthropic|https://api.example"
    for parts in ([first, second], [second, first]):  # whichever worker ended last
        merged = QuirksMemory.merge(parts)
        assert merged.limits[key].level == 8 and merged.limits[key].refused
        (switches,) = merged.models.values()
        assert switches == {"sends_temperature": False, "forces_tool": False, "caches_prompt": True}
    lower = memory.findings([one], {"anthropic": ProviderLimit(64, start=32, resume=3)})
    assert lower.limits == {}  # (a limit that learned nothing: no round, no 429)
    wider = ProviderLimit(64, start=32, resume=30)
    tokens = [wider.try_acquire() for _ in range(30)]
    for token in tokens:
        wider.note_success(token or 0, 0.1)
        wider.release()
    merged = QuirksMemory.merge([second, memory.findings([other], {"anthropic": wider})])
    assert merged.limits[key].level == 30 and not merged.limits[key].refused  # none refused: the highest


def test_under_xdist_the_remembered_limit_is_the_sessions_total_shared_by_the_workers() -> None:
    # Before, the level was each worker's and each started at it: with more workers than the session
    # that learned it had, the provider saw more calls than it allowed.
    from pytest_aimeasure.judge.limits import ProviderLimit
    from pytest_aimeasure.session.backends import QuirksMemory

    cache, backend = Cache(), judge_backend()
    held = ProviderLimit(32, start=16, resume=3)  # a worker of two, resuming at its share of 6
    tokens = [held.try_acquire() for _ in range(3)]
    for token in tokens:
        held.note_success(token or 0, 0.1)
        held.release()
    found = QuirksMemory(cache, processes=2, index=1).findings([backend], {"anthropic": held})
    (level,) = (entry.level for entry in found.limits.values())
    assert level == 6  # the session's: 3 a worker
    QuirksMemory(cache).write(found)
    assert QuirksMemory(cache).recall_limit(backend) == 6  # without xdist, the whole
    assert [QuirksMemory(cache, processes=4, index=i).recall_limit(backend) for i in range(4)] == [2, 2, 1, 1]
