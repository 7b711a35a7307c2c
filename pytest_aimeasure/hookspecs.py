"""Hooks that conftest files and other plugins implement to extend pytest-aimeasure.

They are added in ``pytest_addhooks``; implement them in a ``conftest.py`` or a plugin module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_aimeasure.judge.backends.base import Backend
    from pytest_aimeasure.judge.backends.scripted import ScriptedCall, ScriptedScore
    from pytest_aimeasure.judge.prompt import JudgePrompt
    from pytest_aimeasure.measure.models import Finding, Measurement


@pytest.hookspec(firstresult=True)
def pytest_aimeasure_make_backend(model: str, config: pytest.Config) -> Backend | None:
    """Return a judge backend for the model string ``model``, or None to leave it to the next plugin.

    Called once per model string per process, before the built-in resolution (``scripted``,
    ``anthropic/...``/``claude-*``, ``provider/model`` via litellm), so a plugin can add a provider
    or wrap one. The object must implement
    :class:`pytest_aimeasure.judge.backends.base.Backend`.

    Example::

        def pytest_aimeasure_make_backend(model, config):
            if model.startswith("inhouse/"):
                from mycompany.judging import InHouseBackend
                return InHouseBackend(model.removeprefix("inhouse/"))
            return None
    """


@pytest.hookspec
def pytest_aimeasure_judge_prompt(prompt: JudgePrompt, dimension: str, config: pytest.Config) -> None:
    """Adjust the judge's prompt template for ``dimension`` in place.

    The template's fields (``system``, ``instructions``, ``facts_preamble``, ``extra``) are hashed
    into the fingerprint, so a change here makes earlier baselines "not comparable" rather than
    silently different.

    Example::

        def pytest_aimeasure_judge_prompt(prompt, dimension, config):
            prompt.system += " The audience is new managers in a corporate training course."
            if dimension == "in-character voice":
                prompt.extra["style guide"] = open("docs/voice.md").read()
    """


@pytest.hookspec(firstresult=True)
def pytest_aimeasure_scripted_verdict(call: ScriptedCall, config: pytest.Config) -> ScriptedScore | None:
    """Score one call of the offline ``scripted`` judge (``--judge-model scripted``).

    Return a score (1–5), ``(score, rationale)``, a raw tool-input dict (to exercise validation),
    or None to fall back to the default score 4.

    Example::

        def pytest_aimeasure_scripted_verdict(call, config):
            if call.dimension == "tone" and "I appreciate" in call.artifact:
                return 2, "warmth phrase 'I appreciate' in a cold character's line"
            return None
    """


@pytest.hookspec
def pytest_aimeasure_measured(measurement: Measurement, item: pytest.Item) -> None:
    """Called in the test's process after an item is measured, before its floor is checked.

    Example::

        def pytest_aimeasure_measured(measurement, item):
            item.add_report_section("call", "judge", f"{measurement.mean:.2f} {measurement.scores}")
    """


@pytest.hookspec
def pytest_aimeasure_findings(findings: list[Finding], config: pytest.Config) -> None:
    """Inspect or edit the session's findings (on the controller) before they are reported and turned
    into an exit status. Mutate the list in place.

    Example::

        def pytest_aimeasure_findings(findings, config):
            # Improvements are expected after the prompt rewrite; do not nag about them.
            findings[:] = [f for f in findings if f.kind != "improved"]
    """
