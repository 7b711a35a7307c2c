"""Offline by default, live when a key is set.

When no judge model is configured (``--judge-model`` or the ``aimeasure_judge_model`` ini key) and
ANTHROPIC_API_KEY is not set, the examples use the offline ``scripted`` judge; with a key they are
judged by the default Claude model (or by the model you configure).
"""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # tryfirst: this must run before the plugin reads its settings in its own pytest_configure.
    configured = config.getoption("judge_model", None) or config.getini("aimeasure_judge_model")
    if not configured and not os.environ.get("ANTHROPIC_API_KEY"):
        config.option.judge_model = "scripted"
