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
    values = {"timeout": 5.0, "batch": False, "batch_poll": 1.0, **settings}
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

