"""The session's artifact registry: which artifacts and fixture values a failed gate condemned."""

from __future__ import annotations

from pytest_aimeasure.measure.artifact import ArtifactRegistry


def test_no_item_looks_for_a_failed_gate_until_one_has_failed() -> None:
    # A dimension test looks for its artifact's values (a walk of its fixtures) only once some gate
    # has failed: until then there is nothing for them to match.
    registry = ArtifactRegistry()
    client = object()
    assert not registry.any_failed
    assert registry.failed_gate_for([client]) is None
    registry.gate_failed("t.py::test_gate", [client])
    assert registry.any_failed
    assert registry.failed_gate_for([client]) == "t.py::test_gate"
    assert registry.failed_gate_for([object()]) is None
