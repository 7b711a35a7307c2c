"""Tests of self-healing generation, the unreachable-scene repair, and the findings both record."""

from __future__ import annotations

import contextvars
import copy
import json
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_aimeasure.graphs.graph import (
    DEFAULT_TIERS,
    check_graph,
    find_unreachable,
    graph_validator,
    is_ending,
)
from pytest_aimeasure.graphs.heal import (
    Healed,
    HealError,
    heal,
    repair_unreachable,
    repair_unreachable_spec,
    unreachable_repair,
)
from pytest_aimeasure.measure.runtime import drain_unattached, running


class Scripted:
    """A generator that returns scripted outputs in turn and remembers the errors it was handed."""

    def __init__(self, *outputs: Any) -> None:
        self.outputs = list(outputs)
        self.received: list[list[str]] = []

    def __call__(self, errors: list[str]) -> Any:
        self.received.append(errors)
        out = self.outputs[min(len(self.received), len(self.outputs)) - 1]
        if isinstance(out, Exception):
            raise out
        return out


def must_be_even(value: int) -> list[str]:
    return [] if value % 2 == 0 else [f"{value} is odd"]


# ---------------------------------------------------------------------------------------------
# heal


def test_first_attempt_valid_needs_no_retry_and_records_nothing() -> None:
    generate = Scripted(4)
    with running("t::first") as record:
        healed = heal(generate, must_be_even, name="number")
    assert healed == Healed(value=4, name="number", attempts=1, errors_by_attempt=[[]])
    assert healed.ok and not healed.repaired
    assert generate.received == [[]]
    assert record.findings == []


def test_errors_of_each_attempt_go_into_the_next() -> None:
    generate = Scripted(1, 3, 6)
    with running("t::retry") as record:
        healed = heal(generate, must_be_even, name="number", attempts=3)
    assert healed.value == 6 and healed.attempts == 3
    assert generate.received == [[], ["1 is odd"], ["3 is odd"]]
    assert healed.errors_by_attempt == [["1 is odd"], ["3 is odd"], []]
    assert [(f.kind, f.severity, f.subject, f.message) for f in record.findings] == [
        ("retry", "warn", "number", "number needed 3 attempts: 1 is odd")
    ]
    assert record.findings[0].nodeid == "t::retry"
    assert record.findings[0].detail["errors_by_attempt"] == [["1 is odd"], ["3 is odd"], []]


def test_generate_gets_a_copy_of_the_errors() -> None:
    def generate(errors: list[str]) -> int:
        errors.append("scribbled")  # must not leak into the recorded history
        return 2 if len(errors) > 1 else 1

    healed = heal(generate, must_be_even, name="n")
    assert healed.errors_by_attempt == [["1 is odd"], []]


def test_repair_is_the_last_resort() -> None:
    generate = Scripted(1, 3, 5)
    seen: list[tuple[int, list[str]]] = []

    def round_up(value: int, errors: list[str]) -> tuple[int, list[str]]:
        seen.append((value, errors))
        return value + 1, [f"rounded {value} up to {value + 1}"]

    with running("t::repair") as record:
        healed = heal(generate, must_be_even, repair=round_up, name="number", attempts=3)
    assert len(generate.received) == 3  # every attempt was spent before repairing
    assert seen == [(5, ["5 is odd"])]
    assert healed.value == 6 and healed.repaired and healed.ok
    assert healed.repair_notes == ["rounded 5 up to 6"]
    assert healed.errors_by_attempt == [["1 is odd"], ["3 is odd"], ["5 is odd"]]
    assert [(f.kind, f.message) for f in record.findings] == [
        ("retry", "number failed all 3 attempts: 1 is odd"),
        ("repair", "repaired number: rounded 5 up to 6"),
    ]
    assert record.findings[1].detail == {
        "notes": ["rounded 5 up to 6"],
        "errors_before": ["5 is odd"],
        "errors_after": [],
    }


def test_repair_is_not_called_when_an_attempt_passes() -> None:
    def explode(value: int, errors: list[str]) -> tuple[int, list[str]]:
        raise AssertionError("repair must not run")

    assert heal(Scripted(1, 2), must_be_even, repair=explode).value == 2


def test_still_invalid_raises_with_the_remaining_errors() -> None:
    def useless(value: int, errors: list[str]) -> tuple[int, list[str]]:
        return value + 2, ["added 2"]

    with running("t::fail") as record, pytest.raises(HealError) as excinfo:
        heal(Scripted(1), must_be_even, repair=useless, name="number", attempts=2)
    assert str(excinfo.value) == "number is still invalid after 2 attempts and a repair:\n  - 3 is odd"
    healed = excinfo.value.healed
    assert not healed.ok and healed.value == 3 and healed.remaining_errors == ["3 is odd"]
    assert [f.kind for f in record.findings] == ["retry", "repair"]


def test_still_invalid_without_a_repair() -> None:
    with pytest.raises(HealError, match=r"^number is still invalid after 1 attempt:\n  - 7 is odd$"):
        heal(Scripted(7), must_be_even, name="number", attempts=1)


def test_a_repair_that_changes_nothing_is_not_reported_as_a_repair() -> None:
    def nothing(value: int, errors: list[str]) -> tuple[int, list[str]]:
        return value, []

    with running("t::noop") as record, pytest.raises(HealError) as excinfo:
        heal(Scripted(1), must_be_even, repair=nothing, attempts=1)
    assert not excinfo.value.healed.repaired
    assert record.findings == []


def test_retry_on_turns_generator_exceptions_into_errors() -> None:
    generate = Scripted(ValueError("Expecting ',' delimiter"), 2)
    healed = heal(generate, must_be_even, name="outline", retry_on=(ValueError,))
    assert generate.received == [[], ["ValueError: Expecting ',' delimiter"]]
    assert healed.errors_by_attempt == [["ValueError: Expecting ',' delimiter"], []]


def test_exceptions_not_listed_in_retry_on_propagate() -> None:
    with pytest.raises(KeyError):
        heal(Scripted(KeyError("boom")), must_be_even, retry_on=(ValueError,))


def test_repair_uses_the_last_output_when_a_later_attempt_raised() -> None:
    generate = Scripted(5, ValueError("bad json"))

    def round_up(value: int, errors: list[str]) -> tuple[int, list[str]]:
        assert errors == ["5 is odd"]
        return value + 1, ["rounded up"]

    healed = heal(generate, must_be_even, repair=round_up, attempts=2, retry_on=(ValueError,))
    assert healed.value == 6 and healed.errors_by_attempt == [["5 is odd"], ["ValueError: bad json"]]


def test_every_attempt_raising_leaves_nothing_to_repair() -> None:
    def never(value: int, errors: list[str]) -> tuple[int, list[str]]:
        raise AssertionError("nothing was produced to repair")

    with pytest.raises(HealError) as excinfo:
        heal(Scripted(ValueError("bad json")), must_be_even, repair=never, attempts=2, retry_on=(ValueError,))
    assert excinfo.value.healed.value is None
    assert excinfo.value.healed.remaining_errors == ["ValueError: bad json"]


def test_attempts_must_be_positive() -> None:
    with pytest.raises(ValueError, match="attempts must be at least 1"):
        heal(Scripted(2), must_be_even, attempts=0)


def test_validate_may_return_any_printable_errors() -> None:
    healed = heal(Scripted(1, 2), lambda v: [ValueError(f"{v} odd")] if v % 2 else [])
    assert healed.errors_by_attempt == [["1 odd"], []]


def test_outside_a_test_findings_are_kept_unattached() -> None:
    drain_unattached()

    def outside() -> Healed[int]:
        return heal(Scripted(1, 2), must_be_even, name="script")

    # A fresh context has no running test, as in a plain script.
    contextvars.Context().run(outside)
    kept = drain_unattached()
    assert [(f.kind, f.message, f.nodeid) for f in kept] == [
        ("retry", "script needed 2 attempts: 1 is odd", None)
    ]


def test_summary_line() -> None:
    healed = heal(Scripted(1, 3), must_be_even, repair=lambda v, e: (v + 1, ["+1"]), attempts=2, name="n")
    assert healed.summary() == "n: ok after 2 attempts, repaired (1 note)"


# ---------------------------------------------------------------------------------------------
# repair_unreachable


def orphaned() -> nx.DiGraph:
    """Spine s1 → s2 → s3 → win; orphans: the chain s4 → s5 and the lone s9."""
    g = nx.DiGraph()
    g.add_edge("s1", "s2", tier="optimal")
    g.add_edge("s1", "lose", tier="wrong")
    g.add_edge("s2", "s3", tier="optimal")
    g.add_edge("s3", "win", tier="optimal")
    g.add_edge("s3", "lose", tier="wrong")
    g.add_edge("s4", "s5", tier="optimal")
    g.add_edge("s5", "win", tier="optimal")
    g.add_edge("s9", "lose", tier="wrong")
    g.nodes["win"].update(ending=True, outcome="success")
    g.nodes["lose"].update(ending=True, outcome="failure")
    g.graph["start"] = "s1"
    return g


def test_repair_splices_each_orphaned_region_onto_the_spine() -> None:
    g = orphaned()
    before = copy.deepcopy(g)
    fixed, notes = repair_unreachable(g)
    assert notes == [
        # s2 has one choice, the fewest on the spine; after that s1, s2, s3 all have two, so s1 wins
        "new choice s2 → s4 reconnects unreachable s4, s5",
        "new choice s1 → s9 reconnects unreachable s9",
    ]
    assert fixed.edges["s2", "s4"] == {"label": "continue to s4", "repaired": True, "tier": "acceptable"}
    assert fixed.has_edge("s1", "s9")
    assert find_unreachable(fixed, "s1") == []
    assert nx.utils.graphs_equal(g, before)  # the input is untouched
    assert set(fixed.edges) - set(g.edges) == {("s2", "s4"), ("s1", "s9")}


def test_repair_keeps_the_best_path() -> None:
    fixed, _ = repair_unreachable(orphaned())
    from pytest_aimeasure.graphs.walker import spine

    assert spine(fixed) == spine(orphaned()) == ["s1", "s2", "s3", "win"]


def test_repair_enters_an_orphaned_cycle_at_its_first_node_in_graph_order() -> None:
    g = nx.DiGraph([("s1", "end"), ("c2", "c1"), ("c1", "c2"), ("c1", "end")])
    g.nodes["end"]["ending"] = True
    fixed, notes = repair_unreachable(g, "s1", tier=None)
    assert notes == ["new choice s1 → c2 reconnects unreachable c2, c1"]
    assert "tier" not in fixed.edges["s1", "c2"]


def test_repair_only_enters_sources_of_an_orphaned_region() -> None:
    # o1 and o2 both lead into o3, so two splices are needed and o3 needs none of its own.
    g = nx.DiGraph([("s1", "end"), ("o1", "o3"), ("o2", "o3"), ("o3", "end")])
    g.nodes["end"]["ending"] = True
    _, notes = repair_unreachable(g, "s1")
    assert notes == [
        "new choice s1 → o1 reconnects unreachable o1, o3",
        "new choice s1 → o2 reconnects unreachable o2",
    ]


def test_repair_never_gives_an_ending_a_choice() -> None:
    # The only thing after the start is an ending; s1 itself is the only possible anchor.
    g = nx.DiGraph([("s1", "end"), ("lost", "end")])
    g.nodes["end"]["ending"] = True
    fixed, _ = repair_unreachable(g, "s1")
    assert list(fixed.succ["end"]) == []
    assert fixed.has_edge("s1", "lost")


def test_repair_cannot_help_when_the_start_is_an_ending_or_missing() -> None:
    g = nx.DiGraph([("s2", "end")])
    g.add_node("s1", ending=True)
    g.nodes["end"]["ending"] = True
    fixed, notes = repair_unreachable(g, "s1")
    assert notes == [] and nx.utils.graphs_equal(fixed, g)
    fixed, notes = repair_unreachable(g, "nowhere")
    assert notes == [] and nx.utils.graphs_equal(fixed, g)


def test_repair_is_a_no_op_on_a_healthy_graph() -> None:
    g, _ = repair_unreachable(orphaned())
    again, notes = repair_unreachable(g)
    assert notes == [] and nx.utils.graphs_equal(again, g) and again is not g


def test_spec_repair_appends_choices_and_keeps_other_problems() -> None:
    spec = {
        "start": "s1",
        "nodes": {
            "s1": {"choices": [{"to": "end", "tier": "optimal"}, {"to": "ghost"}]},
            "s4": {"choices": [{"to": "end"}]},
            "end": {"ending": True, "outcome": "success"},
        },
    }
    original = copy.deepcopy(spec)
    fixed, notes = repair_unreachable_spec(spec)
    assert spec == original
    assert notes == ["new choice s1 → s4 reconnects unreachable s4"]
    assert fixed["nodes"]["s1"]["choices"][-1] == {
        "to": "s4",
        "label": "continue to s4",
        "repaired": True,
        "tier": "acceptable",
    }
    assert [v.kind for v in check_graph(fixed)] == ["dangling_choice"]  # not silently dropped


def test_spec_repair_handles_list_nodes_and_nodes_without_choices() -> None:
    spec = {
        "start": "s1",
        "nodes": [
            {"id": "s1", "choices": [{"to": "s2"}]},
            {"id": "s2"},  # a dead end with no "choices" key: the fewest choices, so the anchor
            {"id": "s4", "choices": [{"to": "end"}]},
            {"id": "end", "ending": True},
        ],
    }
    fixed, notes = repair_unreachable_spec(spec)
    assert notes == ["new choice s2 → s4 reconnects unreachable s4, end"]
    assert fixed["nodes"][1]["choices"] == [
        {"to": "s4", "label": "continue to s4", "repaired": True, "tier": "acceptable"}
    ]
    assert check_graph(fixed) == []


def test_spec_repair_skips_nodes_whose_choices_are_malformed() -> None:
    spec = {
        "start": "s1",
        "nodes": {
            "s1": {"choices": [{"to": "s2"}, {"to": "end"}]},
            "s2": {"choices": "oops"},  # no edges, so it would be the anchor if it could take one
            "s4": {},
            "end": {"ending": True},
        },
    }
    fixed, notes = repair_unreachable_spec(spec)
    assert notes == ["new choice s1 → s4 reconnects unreachable s4"]
    assert fixed["nodes"]["s2"]["choices"] == "oops"


# ---------------------------------------------------------------------------------------------
# heal + graph repair end to end


def test_heal_a_generator_that_keeps_orphaning_a_scene() -> None:
    story = {
        "start": "s1",
        "nodes": {
            "s1": {"choices": [{"to": "s2", "tier": "optimal"}, {"to": "lose", "tier": "wrong"}]},
            "s2": {"choices": [{"to": "win", "tier": "optimal"}]},
            "s4": {"choices": [{"to": "win", "tier": "optimal"}]},
            "s9": {"choices": [{"to": "lose", "tier": "wrong"}]},
            "win": {"ending": True, "outcome": "success"},
            "lose": {"ending": True, "outcome": "failure"},
        },
    }
    generate = Scripted(story)
    with running("tests/test_story.py::test_outline") as record:
        healed = heal(
            generate,
            graph_validator(required_outcomes={"success", "failure"}),
            repair=unreachable_repair(),
            name="story-7",
            attempts=2,
        )
    assert generate.received == [[], ["unreachable: not reachable from start s1: s4, s9"]]
    assert check_graph(healed.value) == []
    assert [f.message for f in record.findings] == [
        "story-7 failed all 2 attempts: unreachable: not reachable from start s1: s4, s9",
        "repaired story-7: new choice s2 → s4 reconnects unreachable s4; "
        "new choice s1 → s9 reconnects unreachable s9",
    ]
    json.dumps([f.model_dump() for f in record.findings])  # findings travel as JSON


def test_unreachable_repair_works_on_digraphs_too() -> None:
    healed = heal(lambda errors: orphaned(), graph_validator(), repair=unreachable_repair(), attempts=1)
    assert isinstance(healed.value, nx.DiGraph) and healed.repaired


# ---------------------------------------------------------------------------------------------
# properties


@st.composite
def scene_graphs(draw: st.DrawFn, healthy: bool = False) -> nx.DiGraph:
    """Random digraphs with start 0 (never an ending); ``healthy`` ones reach every node."""
    n = draw(st.integers(1, 12))
    endings = draw(st.sets(st.integers(1, n - 1), max_size=n - 1)) if n > 1 else set()
    g = nx.DiGraph(start=0)
    for node in range(n):
        if node in endings:
            g.add_node(node, ending=True, outcome=draw(st.sampled_from(["success", "partial", "failure"])))
        else:
            g.add_node(node, text=f"scene {node}")
    tier = st.sampled_from([*DEFAULT_TIERS, None])
    if healthy:
        for node in range(1, n):
            parent = draw(st.sampled_from([p for p in range(node) if p not in endings]))
            g.add_edge(parent, node, **({} if (t := draw(tier)) is None else {"tier": t}))
    for u, v in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n)):
        g.add_edge(u, v, **({} if (t := draw(tier)) is None else {"tier": t}))
    return g


@settings(max_examples=200, deadline=None)
@given(scene_graphs())
def test_property_repair_leaves_no_node_unreachable(g: nx.DiGraph) -> None:
    before = copy.deepcopy(g)
    fixed, notes = repair_unreachable(g)
    assert find_unreachable(fixed, 0) == []
    assert nx.utils.graphs_equal(g, before)
    # Nothing is removed or rewritten: every old node, edge and attribute survives.
    assert dict(fixed.nodes(data=True)) == dict(g.nodes(data=True))
    for u, v, data in g.edges(data=True):
        assert fixed.edges[u, v] == data
    added = set(fixed.edges) - set(g.edges)
    assert len(added) == len(notes)
    assert all(not is_ending(g, u) and fixed.edges[u, v]["repaired"] for u, v in added)
    # A second pass finds nothing left to do.
    assert repair_unreachable(fixed)[1] == []


@settings(max_examples=200, deadline=None)
@given(scene_graphs(healthy=True))
def test_property_repair_changes_nothing_on_a_healthy_graph(g: nx.DiGraph) -> None:
    assert find_unreachable(g, 0) == []
    fixed, notes = repair_unreachable(g)
    assert notes == []
    assert nx.utils.graphs_equal(fixed, g)
    assert list(fixed.nodes(data=True)) == list(g.nodes(data=True))
    assert list(fixed.edges(data=True)) == list(g.edges(data=True))
