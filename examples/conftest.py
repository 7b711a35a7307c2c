"""Offline by default, live when a key is set.

When no judge model is configured and ANTHROPIC_API_KEY is not set, the examples use the offline
``scripted`` judge; with a key they are judged by the default Claude model (or by --judge-model).
"""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("judge_model", None) is None and not os.environ.get("ANTHROPIC_API_KEY"):
        config.option.judge_model = "scripted"
