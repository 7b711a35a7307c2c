"""The names every floor of the package shares with the hook module: where the session state is
stashed, an item's stable node id, and the payload a test report carries to the controller.

Ground floor: imports nothing of the package, so library code (the judge fixture, the suite
collector and runner, the session) reads these here instead of reaching up into ``plugin.py``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_aimeasure.session import SessionState

__all__ = ["PAYLOAD", "PIPELINE_ASIDE", "item_nodeid", "report_payload", "state_key"]

PAYLOAD = "aimeasure"
"""The user property (name) under which a test report carries the instrument's payload."""

PIPELINE_ASIDE = "pipeline"
"""Key of an item result's ``extra``: why the judge pipeline stepped aside for the item (it was
judged while its test ran), for the terminal's note."""

state_key: pytest.StashKey[SessionState] = pytest.StashKey()
"""``config.stash[state_key]``: the session's :class:`~pytest_aimeasure.session.SessionState`."""


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
