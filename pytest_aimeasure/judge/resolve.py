"""From a model string to a judge backend.

``scripted`` / ``scripted:module:attr`` → the offline judge; ``anthropic/<model>`` or a bare
``claude-*`` name → the anthropic SDK; any other ``provider/model`` → litellm. A plugin may claim a
model string first through ``pytest_aimeasure_make_backend``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pytest_aimeasure.judge.backends.base import Backend
from pytest_aimeasure.judge.backends.scripted import Scorer, load_scripted

DEFAULT_CLAUDE_MODEL = "claude-sonnet-4-6"

CONFIGURE_HELP = (
    "no judge model is configured. Choose one of: (1) pytest --ai-judge --judge-model MODEL "
    "(e.g. anthropic/claude-sonnet-4-6, openai/gpt-4o-mini, or scripted for the offline judge); "
    "(2) aimeasure_judge_model = MODEL under [tool.pytest.ini_options] (or [pytest]); "
    f"(3) set ANTHROPIC_API_KEY to use {DEFAULT_CLAUDE_MODEL} by default (with "
    "aimeasure_offline_judge_model = scripted as the judge when no key is set)"
)


class ModelError(ValueError):
    """A model string that cannot be turned into a backend."""


def default_model() -> str | None:
    """The model used when none is configured: a current Claude model when a key is set."""
    return DEFAULT_CLAUDE_MODEL if os.environ.get("ANTHROPIC_API_KEY") else None


def route(model: str) -> str:
    """Which built-in backend serves ``model``: 'scripted', 'anthropic' or 'litellm'."""
    if model == "scripted" or model.startswith("scripted:"):
        return "scripted"
    if model.startswith("anthropic/") or model.startswith("claude-"):
        return "anthropic"
    provider, sep, name = model.partition("/")
    if sep and provider and name:
        return "litellm"
    raise ModelError(
        f"judge model {model!r} is not recognised: use 'anthropic/<model>' or a bare 'claude-*' name "
        "(anthropic SDK), 'provider/model' such as 'openai/gpt-4o-mini' (litellm), or 'scripted'"
    )


def build_backend(
    model: str,
    *,
    timeout: float | None,
    retries: int = 4,
    scripted_fallback: Scorer | None = None,
) -> Backend:
    kind = route(model)
    if kind == "scripted":
        try:
            return load_scripted(model, fallback=scripted_fallback)
        except ValueError as exc:
            raise ModelError(str(exc)) from exc
    if kind == "anthropic":
        from pytest_aimeasure.judge.backends.anthropic import AnthropicBackend

        return AnthropicBackend(model.removeprefix("anthropic/"), timeout=timeout, max_retries=retries)
    from pytest_aimeasure.judge.backends.litellm import LitellmBackend

    return LitellmBackend(model, timeout=timeout, max_retries=retries)


BackendFactory = Callable[[str], Backend]
