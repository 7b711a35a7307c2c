"""The session's artifact registry: which artifacts and fixture values a failed gate condemned."""

from __future__ import annotations

from pytest_aimeasure.measure.artifact import ArtifactRegistry
from pytest_aimeasure.measure.text import replace_lone_surrogates_in, unicode_problem


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


def test_a_reply_without_a_lone_surrogate_is_read_as_it_is_and_one_with_one_is_repaired() -> None:
    # Every judge reply is read through replace_lone_surrogates_in: a clean one is not copied.
    clean = {"dimension": "tone", "score": 4, "rationale": "warm – très bien", "tags": ["a", ("b",)]}
    assert replace_lone_surrogates_in(clean) is clean
    assert unicode_problem("plain ascii") is None and unicode_problem("caf\u00e9") is None
    torn = {"dimension": "tone", "notes": ["ok", ("bad \ud800",)], "k\udfff": 1}
    assert replace_lone_surrogates_in(torn) == {
        "dimension": "tone",
        "notes": ["ok", ("bad \ufffd",)],
        "k\ufffd": 1,
    }
    assert unicode_problem("bad \ud800") == "a lone surrogate U+D800 at character 4"
