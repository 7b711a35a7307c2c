"""The names the hook module shares with library code: an item's stable node id, and the payload a
test report carries to the controller (the session state's stash key lives with the state).

Imports nothing of the package, so library code (the judge fixture, the suite collector and
runner) reads these here instead of reaching up into ``plugin.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

__all__ = ["PAYLOAD", "item_nodeid", "report_payload"]

PAYLOAD = "aimeasure"
"""The user property (name) under which a test report carries the instrument's payload."""





def item_nodeid(item: pytest.Item) -> str:
    """The item's node id without the ``@group`` suffix xdist's loadgroup appends, so item ids (and
    the baseline) are the same with and without ``-n``."""
    if not getattr(item.config.option, "loadgroup", False):
        return item.nodeid
    names = sorted(
        {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
    )
    return item.nodeid.removesuffix("@" + "_".join(names)) if names else item.nodeid


def report_payload(report: pytest.TestReport) -> dict[str, Any] | None:
    """The instrument's payload on a test report, or None when it carries none."""
    for name, value in getattr(report, "user_properties", ()):
        if name == PAYLOAD:
            return json.loads(value) if isinstance(value, str) else dict(value)
    return None


JUDGE_NEEDS_AI_JUDGE = "the judge fixture needs --ai-judge"
JUDGE_FIXTURE_DOC = """\
The LLM judge, as an instrument. In a ``@pytest.mark.dimension`` test the dimension's name,
    floor and samples come from the marker; the measurement fails the test when its mean is below
    the floor, and is recorded for the baseline comparison.

    Example::

        @pytest.mark.dimension("tone", floor=3.0, rubric="5: every line matches the character's warmth")
        def test_tone(story, judge):
            judge.score(story, facts={"characters": 3})

    Outside a dimension test pass ``dimension=`` (and ``rubric=``); nothing fails unless ``floor=`` is
    given. Needs ``--ai-judge``.
    """
"""The ``judge`` fixture's documentation (``pytest --fixtures``): the module's fixture and the measuring
session's (:meth:`MeasurePlugin.judge_fixture`) show the same."""
