"""The observatory example's judge: offline by default, live when a key is set.

With no judge model configured (``--judge-model`` or the ``aimeasure_judge_model`` ini key) and no
``ANTHROPIC_API_KEY``, the example uses the offline ``scripted`` judge, whose verdicts come from the
documented rules in ``observatory_judge.py``. With a key, the default Claude model judges it; with
``--judge-model``, the model you name.
"""

from __future__ import annotations

import os

import pytest
from observatory_judge import verdict

from pytest_aimeasure.judge.backends.scripted import ScriptedCall


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # tryfirst: this must run before the plugin reads its settings in its own pytest_configure.
    configured = config.getoption("judge_model", None) or config.getini("aimeasure_judge_model")
    if not configured and not os.environ.get("ANTHROPIC_API_KEY"):
        config.option.judge_model = "scripted"


def pytest_aimeasure_scripted_verdict(call: ScriptedCall, config: pytest.Config) -> tuple[int, str] | None:
    """Scores for the probes' dimensions; None (another example's rule, or the default) otherwise."""
    return verdict(call)
