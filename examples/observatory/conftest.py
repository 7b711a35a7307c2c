"""The observatory example's judge: offline by default, live when a key is set.

With no judge model configured (``--judge-model`` or the ``aimeasure_judge_model`` ini key) and no
``ANTHROPIC_API_KEY``, the example uses the offline ``scripted`` judge (``aimeasure_offline_judge_model``
in its pytest.ini), whose verdicts come from the
documented rules in ``observatory_judge.py``. With a key, the default Claude model judges it; with
``--judge-model``, the model you name.
"""

from __future__ import annotations

import pytest
from observatory_judge import verdict

from pytest_aimeasure.judge.backends.scripted import ScriptedCall


def pytest_aimeasure_scripted_verdict(call: ScriptedCall, config: pytest.Config) -> tuple[int, str] | None:
    """Scores for the probes' dimensions; None (another example's rule, or the default) otherwise."""
    return verdict(call)
