"""Tests of the graph contract: dict conversion, every violation kind, the assertion helper and facts."""

from __future__ import annotations

import copy
import json
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_aimeasure.graphs import graph as graph_module
from pytest_aimeasure.graphs.graph import (
    DEFAULT_TIERS,
    Violation,
    assert_graph_ok,
    check_graph,
    find_dead_ends,
    find_missing_outcomes,
    find_traps,
    find_unknown_tiers,
    find_unreachable,
    format_violations,
    graph_facts,
    graph_from_dict,
    graph_to_dict,
    graph_validator,
    is_ending,
    outcome_of,
    play_view,
    reachable_nodes,
)

# A small healthy story: three outcomes, every scene a real decision, no cycles.
STORY: dict[str, Any] = {
    "start": "s1",
    "nodes": {
        "s1": {
            "text": "The client is upset.",
            "choices": [
                {"to": "s2", "tier": "optimal", "label": "Ask what went wrong"},
                {"to": "s3", "tier": "wrong", "label": "Blame the vendor"},
            ],
        },
        "s2": {"choices": [{"to": "s4", "tier": "optimal"}, {"to": "s3", "tier": "suboptimal"}]},
        "s3": {"choices": [{"to": "s4", "tier": "acceptable"}, {"to": "fail", "tier": "wrong"}]},
        "s4": {
            "choices": [
                {"to": "win", "tier": "optimal"},
                {"to": "meh", "tier": "acceptable"},
                {"to": "fail", "tier": "wrong"},
            ]
        },
        "win": {"ending": True, "outcome": "success"},
        "meh": {"ending": True, "outcome": "partial"},
        "fail": {"ending": True, "outcome": "failure"},
    },
}

# The seed's trap for reachability: every scene can reach an ending, yet the worst choices cycle.
LOOPING: dict[str, Any] = {
    "start": "s1",
    "nodes": {
        "s1": {"choices": [{"to": "s2", "tier": "optimal"}, {"to": "s3", "tier": "wrong"}]},
        "s2": {"choices": [{"to": "win", "tier": "optimal"}, {"to": "fail", "tier": "suboptimal"}]},
        "s3": {"choices": [{"to": "s2", "tier": "acceptable"}, {"to": "s1", "tier": "wrong"}]},
        "win": {"ending": True, "outcome": "success"},
        "fail": {"ending": True, "outcome": "failure"},
    },
}


def kinds(violations: list[Violation]) -> list[str]:
    return [v.kind for v in violations]


def digraph(
    edges: list[tuple[str, str]], endings: dict[str, str | None], start: str | None = "s1"
) -> nx.DiGraph:
    g = nx.DiGraph(edges)
    for node, outcome in endings.items():
        g.add_node(node, ending=True, **({} if outcome is None else {"outcome": outcome}))
    if start is not None:
        g.graph["start"] = start
    return g


# ---------------------------------------------------------------------------------------------
# conversion


def test_dict_form_converts_nodes_edges_and_attributes() -> None:
    g, start, problems = graph_from_dict(STORY)
    assert problems == []
    assert start == "s1" and g.graph["start"] == "s1"
    assert list(g) == ["s1", "s2", "s3", "s4", "win", "meh", "fail"]
    assert g.nodes["s1"] == {"text": "The client is upset."}
    assert g.nodes["win"] == {"ending": True, "outcome": "success"}
    assert g.edges["s1", "s2"] == {"tier": "optimal", "label": "Ask what went wrong"}
    assert list(g.succ["s4"]) == ["win", "meh", "fail"]  # choice order is edge order
    assert g.number_of_edges() == 9


def test_list_form_nodes_with_ids_convert_like_the_mapping_form() -> None:
    as_list = {"start": "s1", "nodes": [{"id": k, **v} for k, v in STORY["nodes"].items()]}
    g, _, problems = graph_from_dict(as_list)
    reference, _, _ = graph_from_dict(STORY)
    assert problems == []
    assert nx.utils.graphs_equal(g, reference)


def test_dangling_choice_is_a_violation_not_a_key_error() -> None:
    spec = {
        "start": "s1",
        "nodes": {"s1": {"choices": [{"to": "end"}, {"to": "s9"}]}, "end": {"ending": True}},
    }
    g, _, problems = graph_from_dict(spec)
    assert problems == [
        Violation("dangling_choice", ("s1", "s9"), "choice 2 of s1 goes to s9, which is not a node")
    ]
    assert "s9" not in g  # a dangling target must not be invented as a node
    assert list(g.edges) == [("s1", "end")]
    assert kinds(check_graph(spec)) == ["dangling_choice"]


def test_missing_start_in_dict_form() -> None:
    nodes = {"s1": {"choices": [{"to": "end"}]}, "end": {"ending": True}}
    _, start, problems = graph_from_dict({"nodes": nodes})
    assert start is None
    assert kinds(problems) == ["missing_start"]
    _, _, problems = graph_from_dict({"start": "s0", "nodes": nodes})
    assert [str(p) for p in problems] == ["missing_start: start node s0 is not in the graph"]
    # check_graph reports it once, not once from conversion and once from the checks
    assert kinds(check_graph({"start": "s0", "nodes": nodes})) == ["missing_start"]


def test_explicit_start_overrides_the_spec() -> None:
    nodes = {"s1": {"choices": [{"to": "end"}]}, "s2": {"choices": [{"to": "end"}]}, "end": {"ending": True}}
    assert kinds(check_graph({"start": "s0", "nodes": nodes}, "s1")) == ["unreachable"]
    assert check_graph({"start": "s0", "nodes": nodes}, "s1")[0].nodes == ("s2",)


def test_duplicate_choice_keeps_the_first_and_says_so() -> None:
    spec = {
        "start": "s1",
        "nodes": {
            "s1": {"choices": [{"to": "end", "tier": "optimal"}, {"to": "end", "tier": "wrong"}]},
            "end": {"ending": True},
        },
    }
    g, _, problems = graph_from_dict(spec)
    assert kinds(problems) == ["duplicate_choice"]
    assert problems[0].nodes == ("s1", "end")
    assert g.edges["s1", "end"]["tier"] == "optimal"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (["not", "a", "mapping"], "a graph spec must be a mapping"),
        ({"start": "s1"}, 'the spec has no "nodes"'),
        ({"start": "s1", "nodes": 3}, '"nodes" must be a mapping or a list'),
        ({"start": "s1", "nodes": [{"choices": []}]}, 'node #0 has no "id"'),
        ({"start": "s1", "nodes": [{"id": "s1"}, {"id": "s1"}]}, "node s1 is defined twice"),
        ({"start": "s1", "nodes": {"s1": "text"}}, "node s1 must be a mapping, not str"),
        ({"start": "s1", "nodes": {"s1": {"choices": "s2"}}}, '"choices" of s1 must be a list'),
        (
            {"start": "s1", "nodes": {"s1": {"choices": [{"target": "s2"}]}}},
            'choice 1 of s1 must be a mapping with a "to"',
        ),
        (
            {"start": "s1", "nodes": {"s1": {"choices": [{"to": ["s2"]}]}}},
            "goes to ['s2'], which is not a node",
        ),
    ],
)
def test_malformed_specs_become_violations(spec: Any, fragment: str) -> None:
    _, _, problems = graph_from_dict(spec)
    assert any(fragment in p.message for p in problems), problems
    check_graph(spec)  # and the full check does not raise either


def test_null_node_body_is_an_empty_node() -> None:
    g, _, problems = graph_from_dict(
        {"start": "s1", "nodes": {"s1": {"choices": [{"to": "end"}]}, "end": None}}
    )
    assert kinds(problems) == []
    # "end" has no ending flag and no choices, so it is a dead end and play can never end
    assert kinds(check_graph(g)) == ["dead_end", "no_ending"]


def test_graph_to_dict_round_trips() -> None:
    g, _, _ = graph_from_dict(STORY)
    back = graph_to_dict(g)
    assert back["start"] == "s1"
    again, _, problems = graph_from_dict(back)
    assert problems == []
    assert nx.utils.graphs_equal(g, again)
    json.dumps(graph_to_dict(g))  # plain data


@pytest.mark.parametrize("kind", [nx.Graph, nx.MultiDiGraph])
def test_other_graph_types_are_rejected(kind: type[nx.Graph]) -> None:
    with pytest.raises(TypeError, match=f"must be a networkx.DiGraph, not {kind.__name__}"):
        check_graph(kind([("a", "b")]), "a")


# ---------------------------------------------------------------------------------------------
# gate checks


def test_healthy_story_has_no_violations() -> None:
    assert check_graph(STORY, required_outcomes={"success", "partial", "failure"}) == []


def test_seed_looping_story_is_structurally_green() -> None:
    # Reachability cannot see the worst player's loop; the walker has to (see test_walker.py).
    assert check_graph(LOOPING, required_outcomes={"success", "failure"}) == []


def test_missing_start_for_a_digraph() -> None:
    g = digraph([("s1", "end")], {"end": "success"}, start=None)
    assert [str(v) for v in check_graph(g)] == [
        'missing_start: no start node given: pass start=, or set graph.graph["start"] or the spec\'s "start"'
    ]
    assert kinds(check_graph(g, "s0")) == ["missing_start"]
    assert check_graph(g, "s1") == []


def test_missing_start_skips_start_dependent_checks_but_not_the_rest() -> None:
    g = digraph([("s1", "s2")], {"end": "success"}, start="nowhere")
    assert kinds(check_graph(g, required_outcomes={"success"})) == ["missing_start", "dead_end", "trap"]


def test_unreachable_names_every_lost_node_in_graph_order() -> None:
    g = digraph([("s1", "end"), ("s9", "s4"), ("s4", "end"), ("s5", "end")], {"end": "success"})
    assert find_unreachable(g, "s1") == [
        Violation("unreachable", ("s9", "s4", "s5"), "not reachable from start s1: s9, s4, s5")
    ]
    assert kinds(check_graph(g)) == ["unreachable"]


def test_scene_behind_an_ending_is_unreachable() -> None:
    # Play stops at an ending, so a choice leaving it does not count as a way in.
    g = digraph([("s1", "end"), ("end", "s2"), ("s2", "end")], {"end": "success"})
    assert reachable_nodes(g, "s1") == {"s1", "end"}
    assert find_unreachable(g, "s1")[0].nodes == ("s2",)


def test_dead_end_one_violation_per_node() -> None:
    g = digraph([("s1", "s2"), ("s1", "s3"), ("s1", "end")], {"end": "success"})
    assert [str(v) for v in find_dead_ends(g)] == [
        "dead_end: s2 is not an ending and has no choices",
        "dead_end: s3 is not an ending and has no choices",
    ]
    assert kinds(check_graph(g)) == ["dead_end", "dead_end"]


def test_trap_cycle_with_no_way_out() -> None:
    g = digraph([("s1", "end"), ("s1", "s2"), ("s2", "s3"), ("s3", "s2")], {"end": "success"})
    assert find_traps(g) == [Violation("trap", ("s2", "s3"), "no ending can be reached from s2, s3")]
    assert kinds(check_graph(g)) == ["trap"]


def test_trap_leading_only_to_a_dead_end_is_reported_besides_the_dead_end() -> None:
    g = digraph([("s1", "end"), ("s1", "s2"), ("s2", "s3")], {"end": "success"})
    assert kinds(check_graph(g)) == ["dead_end", "trap"]
    assert find_traps(g)[0].nodes == ("s2",)  # s3 itself is the dead end, not double-counted


def test_no_ending_at_all() -> None:
    g = digraph([("s1", "s2"), ("s2", "s1")], {})
    assert [str(v) for v in check_graph(g)] == [
        "no_ending: the graph has no ending node (no node has ending=True)"
    ]


def test_no_ending_reachable_from_start() -> None:
    g = digraph([("s1", "s2"), ("s2", "s1"), ("s3", "end")], {"end": "success"})
    found = find_missing_outcomes(g, "s1")
    assert [str(v) for v in found] == ["no_ending: no ending can be reached from start s1"]
    assert kinds(check_graph(g)) == ["unreachable", "trap", "no_ending"]


def test_required_outcome_missing_or_unreachable() -> None:
    g = digraph([("s1", "win"), ("s2", "lose")], {"win": "success", "lose": "failure"})
    found = find_missing_outcomes(g, "s1", {"success", "failure", "partial"})
    assert [str(v) for v in found] == [
        "missing_outcome: required outcome 'failure' cannot be reached: "
        "its ending(s) lose cannot be reached from s1",
        "missing_outcome: required outcome 'partial' cannot be reached: no ending has that outcome",
    ]
    assert found[0].nodes == ("lose",)
    assert find_missing_outcomes(g, "s1", {"success"}) == []


def test_unknown_tier_is_reported_but_a_missing_tier_is_not() -> None:
    g = digraph([("s1", "end"), ("s1", "s2"), ("s2", "end")], {"end": "success"})
    g.edges["s1", "end"]["tier"] = "optimial"
    g.edges["s1", "s2"]["tier"] = ["optimal"]
    assert [v.nodes for v in find_unknown_tiers(g)] == [("s1", "end"), ("s1", "s2")]
    assert [v.nodes for v in find_unknown_tiers(g, ("optimial", "other"))] == [("s1", "s2")]
    assert "has tier 'optimial', which is not one of optimal, acceptable" in find_unknown_tiers(g)[0].message


def test_custom_tiers_are_accepted() -> None:
    g = digraph([("s1", "end")], {"end": "success"})
    g.edges["s1", "end"]["tier"] = "good"
    assert kinds(check_graph(g)) == ["unknown_tier"]
    assert check_graph(g, tiers=("good", "bad")) == []


def test_every_kind_in_one_graph_in_a_stable_order() -> None:
    spec = {
        "start": "s1",
        "nodes": {
            "s1": {"choices": [{"to": "s2", "tier": "great"}, {"to": "s3"}, {"to": "ghost"}, {"to": "win"}]},
            "s2": {},
            "s3": {"choices": [{"to": "s3"}]},
            "orphan": {"choices": [{"to": "win"}]},
            "win": {"ending": True, "outcome": "success"},
        },
    }
    found = check_graph(spec, required_outcomes={"failure"})
    assert kinds(found) == [
        "dangling_choice",
        "unknown_tier",
        "unreachable",
        "dead_end",
        "trap",
        "missing_outcome",
    ]


# ---------------------------------------------------------------------------------------------
# the assertion helper


def test_assert_graph_ok_passes_silently() -> None:
    assert_graph_ok(STORY, required_outcomes={"success", "failure"})


def test_assert_graph_ok_message_has_one_line_per_violation() -> None:
    g = digraph([("s1", "s2"), ("s4", "end")], {"end": "success"})
    with pytest.raises(AssertionError) as excinfo:
        assert_graph_ok(g, required_outcomes={"success", "failure"}, subject="story-7")
    assert str(excinfo.value) == (
        "story-7 breaks the graph contract (6 violations):\n"
        "  - unreachable: not reachable from start s1: s4, end\n"
        "  - dead_end: s2 is not an ending and has no choices\n"
        "  - trap: no ending can be reached from s1\n"
        "  - no_ending: no ending can be reached from start s1\n"
        "  - missing_outcome: required outcome 'failure' cannot be reached: no ending has that outcome\n"
        "  - missing_outcome: required outcome 'success' cannot be reached: its ending(s) end cannot be "
        "reached from s1"
    )


def test_assert_graph_ok_hides_its_own_frame() -> None:
    with pytest.raises(AssertionError) as excinfo:
        assert_graph_ok(digraph([("s1", "s2")], {}))
    shown = excinfo.traceback.filter(excinfo)
    assert all(Path(str(entry.path)) != Path(graph_module.__file__) for entry in shown)
    assert any(Path(str(entry.path)) == Path(graph_module.__file__) for entry in excinfo.traceback)


def test_format_violations_singular() -> None:
    text = format_violations([Violation("dead_end", ("s5",), "s5 is not an ending and has no choices")])
    assert text.splitlines()[0] == "the scene graph breaks the graph contract (1 violation):"


def test_graph_validator_returns_strings() -> None:
    validate = graph_validator(required_outcomes={"partial"})
    assert validate(STORY) == []
    assert validate(LOOPING) == [
        "missing_outcome: required outcome 'partial' cannot be reached: no ending has that outcome"
    ]


# ---------------------------------------------------------------------------------------------
# facts


def test_facts_of_the_story_match_hand_counts() -> None:
    facts = graph_facts(STORY)
    assert facts == {
        "acyclic": True,
        "branching": {"max": 3, "mean": 2.25, "min": 2},
        "choices": 9,
        "choices_by_tier": {"acceptable": 2, "optimal": 3, "suboptimal": 1, "untiered": 0, "wrong": 3},
        "cyclic_components": 0,
        "dead_ends": 0,
        "decision_nodes": 4,
        "endings": 3,
        "endings_by_outcome": {"failure": 1, "partial": 1, "success": 1},
        "nodes": 7,
        "nodes_on_cycles": 0,
        "path_length_by_outcome": {
            # failure: s1→s3→fail is shortest; s1→s2→s3→s4→fail is longest
            "failure": {"longest": 4, "shortest": 2},
            "partial": {"longest": 4, "shortest": 3},
            "success": {"longest": 4, "shortest": 3},
        },
        "reachable_fraction": 1.0,
        "reachable_nodes": 7,
        "start": "s1",
        "trap_nodes": 0,
        "unreachable_nodes": 0,
    }


def test_facts_keys_are_sorted_at_every_level_and_json_ready() -> None:
    facts = graph_facts(STORY)
    assert list(facts) == sorted(facts)
    assert list(facts["path_length_by_outcome"]) == ["failure", "partial", "success"]
    assert json.loads(json.dumps(facts)) == facts


def test_facts_of_a_cyclic_graph_give_no_longest_path_through_the_cycle() -> None:
    facts = graph_facts(LOOPING)
    assert facts["acyclic"] is False
    assert facts["cyclic_components"] == 1 and facts["nodes_on_cycles"] == 2
    # s1 ↔ s3 lies on routes to both endings, so no finite longest route exists
    assert facts["path_length_by_outcome"] == {
        "failure": {"longest": None, "shortest": 2},
        "success": {"longest": None, "shortest": 2},
    }


def test_facts_longest_path_ignores_a_cycle_off_the_route() -> None:
    g = digraph(
        [("s1", "s2"), ("s2", "win"), ("s1", "s3"), ("s3", "s4"), ("s4", "s3"), ("s4", "lose")],
        {"win": "success", "lose": "failure"},
    )
    paths = graph_facts(g)["path_length_by_outcome"]
    assert paths["success"] == {"longest": 2, "shortest": 2}
    assert paths["failure"] == {"longest": None, "shortest": 3}


def test_facts_count_broken_parts_and_unspecified_outcomes() -> None:
    g = digraph(
        [("s1", "s2"), ("s1", "end"), ("s2", "s3"), ("s3", "s2"), ("s1", "dead"), ("lost", "end")],
        {"end": None},
    )
    g.edges["s1", "s2"]["tier"] = "optimal"
    g.edges["s1", "end"]["tier"] = "typo"
    facts = graph_facts(g)
    assert facts["endings_by_outcome"] == {"unspecified": 1}
    assert facts["choices_by_tier"] == {
        "acceptable": 0,
        "optimal": 1,
        "suboptimal": 0,
        "untiered": 5,
        "wrong": 0,
    }
    assert facts["dead_ends"] == 1 and facts["trap_nodes"] == 2
    assert facts["reachable_nodes"] == 5 and facts["unreachable_nodes"] == 1
    assert facts["reachable_fraction"] == round(5 / 6, 3)
    assert facts["branching"] == {"max": 3, "mean": 1.2, "min": 0}
    assert facts["path_length_by_outcome"] == {"unspecified": {"longest": 1, "shortest": 1}}


def test_facts_without_a_start_still_count_structure() -> None:
    g = digraph([("s1", "end")], {"end": "success"}, start=None)
    facts = graph_facts(g)
    assert facts["start"] is None and facts["nodes"] == 2 and facts["reachable_nodes"] == 0
    assert facts["path_length_by_outcome"] == {"success": {"longest": None, "shortest": None}}


def test_facts_of_an_empty_graph() -> None:
    facts = graph_facts(nx.DiGraph(), "s1")
    assert facts["nodes"] == 0 and facts["reachable_fraction"] == 0.0
    assert facts["branching"] == {"max": None, "mean": None, "min": None}


def test_facts_ignore_user_weight_attributes() -> None:
    g = digraph([("s1", "s2"), ("s2", "win")], {"win": "success"})
    g.edges["s1", "s2"]["weight"] = 50
    assert graph_facts(g)["path_length_by_outcome"]["success"] == {"longest": 2, "shortest": 2}


# ---------------------------------------------------------------------------------------------
# properties


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[nx.DiGraph, int]:
    n = draw(st.integers(1, 10))
    endings = draw(st.sets(st.integers(0, n - 1), max_size=n))
    g = nx.DiGraph()
    for node in range(n):
        attrs = (
            {"ending": True, "outcome": draw(st.sampled_from(["success", "failure"]))}
            if node in endings
            else {}
        )
        g.add_node(node, **attrs)
    for u, v in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n)):
        g.add_edge(u, v, tier=draw(st.sampled_from(DEFAULT_TIERS)))
    return g, 0


@settings(max_examples=200, deadline=None)
@given(random_graphs())
def test_property_dict_form_round_trip_preserves_the_graph(case: tuple[nx.DiGraph, int]) -> None:
    g, start = case
    again, again_start, problems = graph_from_dict(graph_to_dict(g, start))
    assert problems == [] and again_start == start
    g.graph["start"] = start
    assert nx.utils.graphs_equal(g, again)
    assert list(again.edges) == list(g.edges)  # choice order survives too


@settings(max_examples=200, deadline=None)
@given(random_graphs())
def test_property_facts_agree_with_the_checks(case: tuple[nx.DiGraph, int]) -> None:
    g, start = case
    before = copy.deepcopy(g)
    facts = graph_facts(g, start)
    violations = check_graph(g, start)
    lost: tuple[Hashable, ...] = next((v.nodes for v in violations if v.kind == "unreachable"), ())
    assert facts["unreachable_nodes"] == len(lost)
    assert facts["dead_ends"] == sum(1 for v in violations if v.kind == "dead_end")
    assert facts["trap_nodes"] == sum(len(v.nodes) for v in violations if v.kind == "trap")
    assert sum(facts["endings_by_outcome"].values()) == facts["endings"]
    assert sum(facts["choices_by_tier"].values()) == facts["choices"]
    for lengths in facts["path_length_by_outcome"].values():
        if lengths["longest"] is not None:
            assert lengths["shortest"] is not None and lengths["longest"] >= lengths["shortest"]
    assert nx.utils.graphs_equal(g, before)  # checks and facts never modify the graph


@settings(max_examples=200, deadline=None)
@given(random_graphs())
def test_property_path_lengths_match_brute_force(case: tuple[nx.DiGraph, int]) -> None:
    g, start = case
    play = play_view(g)
    on_cycles = {n for part in nx.strongly_connected_components(play) for n in part if len(part) > 1}
    on_cycles |= {u for u, v in play.edges if u == v}
    facts = graph_facts(g, start)["path_length_by_outcome"]
    for outcome, lengths in facts.items():
        group = [n for n in g if is_ending(g, n) and outcome_of(g, n) == outcome]
        routes = [p for e in group for p in nx.all_simple_paths(play, start, e)]
        if start in group:
            routes.append([start])
        if not routes:
            assert lengths == {"longest": None, "shortest": None}
            continue
        assert lengths["shortest"] == min(len(p) - 1 for p in routes)
        looping = any(n in on_cycles for p in routes for n in p)
        assert lengths["longest"] == (None if looping else max(len(p) - 1 for p in routes))
