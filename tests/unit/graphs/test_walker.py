"""Tests of the deterministic walker: strategies, ties, state routing, and every failure it reports."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_aimeasure.graphs import walker as walker_module
from pytest_aimeasure.graphs.graph import DEFAULT_TIERS, check_graph, is_ending
from pytest_aimeasure.graphs.walker import (
    Choice,
    assert_walks_ok,
    freeze_state,
    spine,
    walk,
    walk_all,
)


def spec(nodes: dict[str, Any], start: str = "s1") -> dict[str, Any]:
    return {"start": start, "nodes": nodes}


STORY = spec(
    {
        "s1": {
            "choices": [
                {"to": "s2", "tier": "optimal", "label": "Ask what went wrong"},
                {"to": "s3", "tier": "wrong", "label": "Blame the vendor"},
            ]
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
    }
)

# The seed's case: every scene can reach an ending, yet the worst choices cycle s1 → s3 → s1.
LOOPING = spec(
    {
        "s1": {"choices": [{"to": "s2", "tier": "optimal"}, {"to": "s3", "tier": "wrong"}]},
        "s2": {"choices": [{"to": "win", "tier": "optimal"}, {"to": "fail", "tier": "suboptimal"}]},
        "s3": {"choices": [{"to": "s2", "tier": "acceptable"}, {"to": "s1", "tier": "wrong"}]},
        "win": {"ending": True, "outcome": "success"},
        "fail": {"ending": True, "outcome": "failure"},
    }
)

# Best play reaches success after one choice; every other route takes three.
SHORT_BEST = spec(
    {
        "s1": {"choices": [{"to": "win", "tier": "optimal"}, {"to": "s2", "tier": "wrong"}]},
        "s2": {"choices": [{"to": "s3", "tier": "optimal"}]},
        "s3": {"choices": [{"to": "win", "tier": "optimal"}, {"to": "fail", "tier": "wrong"}]},
        "win": {"ending": True, "outcome": "success"},
        "fail": {"ending": True, "outcome": "failure"},
    }
)

# A relationship scene: the same scene routes by trust, which each choice moves.
TRUST = spec(
    {
        "s1": {
            "choices": [
                {"to": "s2", "tier": "optimal", "label": "Listen", "trust": 1},
                {"to": "s3", "tier": "wrong", "label": "Interrupt", "trust": -1},
            ]
        },
        "s3": {"choices": [{"to": "s2", "tier": "optimal", "trust": 0}]},
        "s2": {
            "choices": [
                {"to": "ally", "tier": "optimal", "when": lambda st: st["trust"] > 0},
                {"to": "cold", "tier": "optimal", "when": lambda st: st["trust"] <= 0},
            ]
        },
        "ally": {"ending": True, "outcome": "success"},
        "cold": {"ending": True, "outcome": "failure"},
    }
)


def add_trust(state: dict[str, int], choice: Choice) -> dict[str, int]:
    return {**state, "trust": state["trust"] + int(choice.attrs.get("trust", 0))}


# ---------------------------------------------------------------------------------------------
# strategies


def test_best_worst_and_alternating_paths_on_the_story() -> None:
    assert walk(STORY, strategy="best").path == ("s1", "s2", "s4", "win")
    assert walk(STORY, strategy="worst").path == ("s1", "s3", "fail")
    # best at s1, worst at s2 (suboptimal), best at s3 (acceptable), worst at s4
    alternating = walk(STORY, strategy="alternating")
    assert alternating.path == ("s1", "s2", "s3", "s4", "fail")
    assert [c.tier for c in alternating.choices] == ["optimal", "suboptimal", "acceptable", "wrong"]


def test_a_good_walk_reports_ending_outcome_and_turns() -> None:
    best = walk(STORY, strategy="best")
    assert best.ok and best.failure is None
    assert (best.ending, best.outcome, best.turns) == ("win", "success", 3)
    assert best.detail == "reached win (success) after 3 turns"
    assert str(best) == "best: ok: reached win (success) after 3 turns"
    assert best.choices[0].label == "Ask what went wrong"


def test_ties_go_to_the_earliest_choice_in_edge_order() -> None:
    g = nx.DiGraph()
    g.add_edge("s1", "b", tier="optimal")
    g.add_edge("s1", "a", tier="optimal")
    g.add_edge("s1", "d", tier="wrong")
    g.add_edge("s1", "c", tier="wrong")
    for end in "abcd":
        g.nodes[end]["ending"] = True
    assert walk(g, "s1", "best").ending == "b"
    assert walk(g, "s1", "worst").ending == "d"


def test_untiered_choices_rank_after_every_known_tier() -> None:
    g = nx.DiGraph()
    g.add_edge("s1", "plain")
    g.add_edge("s1", "bad", tier="wrong")
    g.add_edge("s1", "typo", tier="optimial")
    g.nodes["plain"]["ending"] = g.nodes["bad"]["ending"] = g.nodes["typo"]["ending"] = True
    assert walk(g, "s1", "best").ending == "bad"
    assert walk(g, "s1", "worst").ending == "plain"


def test_custom_tier_ranking() -> None:
    g = nx.DiGraph([("s1", "x"), ("s1", "y")])
    g.edges["s1", "x"]["tier"] = "meh"
    g.edges["s1", "y"]["tier"] = "great"
    g.nodes["x"]["ending"] = g.nodes["y"]["ending"] = True
    assert walk(g, "s1", "best", tiers=("great", "meh")).ending == "y"
    assert walk(g, "s1", "best", tiers=("meh", "great")).ending == "x"


def test_random_is_seeded_and_reproducible() -> None:
    runs = {seed: walk(STORY, strategy="random", seed=seed) for seed in range(12)}
    again = {seed: walk(STORY, strategy="random", seed=seed) for seed in range(12)}
    assert runs == again
    assert len({w.path for w in runs.values()}) > 1  # different seeds explore different routes
    assert runs[3].strategy == "random(seed=3)"
    assert all(w.ok for w in runs.values())


def test_user_strategy_gets_node_choices_state_and_turn() -> None:
    calls: list[tuple[Hashable, list[Hashable], Any, int]] = []

    def last_choice(node: Hashable, choices: Sequence[Choice], state: Any, turn: int) -> Choice:
        calls.append((node, [c.target for c in choices], state, turn))
        return choices[-1]

    result = walk(STORY, strategy=last_choice, state="calm")
    assert result.strategy == "last_choice"
    assert result.path == ("s1", "s3", "fail")
    assert calls == [("s1", ["s2", "s3"], "calm", 0), ("s3", ["s4", "fail"], "calm", 1)]


def test_user_strategy_may_return_a_target_id() -> None:
    result = walk(
        STORY, strategy=lambda node, choices, state, turn: "s4" if node == "s3" else choices[1].target
    )
    assert result.path == ("s1", "s3", "s4", "meh")


def test_user_strategy_picking_something_not_offered_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"picked 'nowhere' at s1; the choices on offer lead to: s2, s3"):
        walk(STORY, strategy=("stubborn", lambda node, choices, state, turn: "nowhere"))


def test_unknown_strategy_name() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'greedy'"):
        walk(STORY, strategy="greedy")


# ---------------------------------------------------------------------------------------------
# failures


def test_seed_case_worst_play_loops_while_structure_is_green() -> None:
    assert check_graph(LOOPING) == []
    worst = walk(LOOPING, strategy="worst")
    assert worst.failure == "loop"
    assert worst.path == ("s1", "s3", "s1")
    assert worst.detail == "revisited s1 in the same state after 2 turns (cycle s1 → s3 → s1)"
    assert walk(LOOPING, strategy="best").outcome == "success"


def test_loop_without_revisit_detection_hits_the_turn_budget() -> None:
    worst = walk(LOOPING, strategy="worst", detect_revisits=False, max_turns=7)
    assert worst.failure == "loop"
    assert worst.turns == 7 and len(worst.path) == 8
    assert worst.detail == "turn budget of 7 exhausted without an ending (last: s3 → s1 → s3 → s1 → s3)"


def test_default_turn_budget_is_at_least_one_hundred_turns() -> None:
    worst = walk(LOOPING, strategy="worst", detect_revisits=False)
    assert worst.failure == "loop" and worst.turns == 100


def test_reaching_an_ending_exactly_on_the_budget_is_fine() -> None:
    assert walk(STORY, strategy="best", max_turns=3).ok
    assert walk(STORY, strategy="best", max_turns=2).failure == "loop"


def test_seed_case_best_play_ends_too_early() -> None:
    best = walk(SHORT_BEST, strategy="best", min_turns=3)
    assert best.failure == "early_ending"
    assert (best.ending, best.outcome, best.turns) == ("win", "success", 1)
    assert best.detail == "reached win (success) after 1 turns; min_turns is 3"
    assert walk(SHORT_BEST, strategy="worst", min_turns=3).ok


def test_dead_end_during_play() -> None:
    g = nx.DiGraph([("s1", "s2"), ("s1", "end")])
    g.edges["s1", "s2"]["tier"] = "optimal"
    g.nodes["end"]["ending"] = True
    result = walk(g, "s1", "best")
    assert result.failure == "dead_end"
    assert result.path == ("s1", "s2") and result.ending is None
    assert result.detail == "dead end at s2 after 1 turns: not an ending and no choices"


def test_missing_start_during_play() -> None:
    assert walk(STORY, "s0").failure == "missing_start"
    assert walk(nx.DiGraph([("a", "b")])).detail == "no start node given"


def test_wrong_outcome_when_an_expectation_is_set() -> None:
    assert walk(STORY, strategy="worst", expect_outcome="failure").ok
    worst = walk(STORY, strategy="worst", expect_outcome={"success", "partial"})
    assert worst.failure == "wrong_outcome"
    assert worst.detail == "reached fail (failure) after 2 turns; expected partial or success"


def test_a_start_that_is_an_ending_ends_at_once() -> None:
    g = nx.DiGraph()
    g.add_node("end", ending=True, outcome="success")
    result = walk(g, "end")
    assert result.ok and result.turns == 0 and result.path == ("end",)
    assert walk(g, "end", min_turns=1).failure == "early_ending"


def test_alternating_revisits_at_another_parity_are_not_a_loop() -> None:
    # Best play stays at s1 once, then worst play leaves: s1 is seen at turns 0 and 1 with different
    # strategies, which is progress, not a loop.
    g = nx.DiGraph()
    g.add_edge("s1", "s1", tier="optimal")
    g.add_edge("s1", "fail", tier="wrong")
    g.nodes["fail"].update(ending=True, outcome="failure")
    result = walk(g, "s1", "alternating")
    assert result.ok and result.path == ("s1", "s1", "fail")
    assert walk(g, "s1", "best").failure == "loop"


def test_alternating_loop_is_caught_on_a_matching_parity() -> None:
    g = nx.DiGraph()
    g.add_edge("s1", "s2", tier="optimal")
    g.add_edge("s1", "win", tier="wrong")
    g.add_edge("s2", "s1", tier="wrong")
    g.add_edge("s2", "win", tier="optimal")
    g.nodes["win"]["ending"] = True
    result = walk(g, "s1", "alternating")
    assert result.failure == "loop" and result.path == ("s1", "s2", "s1")


def test_random_walks_are_not_cut_short_by_revisits() -> None:
    g = nx.DiGraph()
    g.add_edge("s1", "s1")
    g.add_edge("s1", "end")
    g.nodes["end"]["ending"] = True
    results = [walk(g, "s1", "random", seed=seed) for seed in range(20)]
    assert all(r.ok for r in results)
    assert max(r.turns for r in results) > 1  # some seeds circled before leaving


# ---------------------------------------------------------------------------------------------
# state


def test_state_routes_the_same_scene_differently() -> None:
    best = walk(TRUST, strategy="best", state={"trust": 0}, update=add_trust)
    worst = walk(TRUST, strategy="worst", state={"trust": 0}, update=add_trust)
    assert best.path == ("s1", "s2", "ally") and best.final_state == {"trust": 1}
    assert worst.path == ("s1", "s3", "s2", "cold") and worst.final_state == {"trust": -1}


def test_when_guards_filtering_every_choice_is_a_dead_end() -> None:
    result = walk(TRUST, strategy="best", state={"trust": float("nan")}, update=add_trust)
    assert result.failure == "dead_end"
    assert result.detail.startswith("dead end at s2 after 1 turns: not an ending and none of its 2 choices")


def test_when_must_be_callable() -> None:
    g = nx.DiGraph([("s1", "end")])
    g.edges["s1", "end"]["when"] = "trust > 0"
    g.nodes["end"]["ending"] = True
    with pytest.raises(TypeError, match="'when' on choice s1 → end must be callable"):
        walk(g, "s1")


def test_changing_state_is_progress_not_a_loop() -> None:
    # Circling s1 ↔ s2 raises patience each lap; the exit opens at patience 3.
    g = nx.DiGraph()
    g.add_edge("s1", "s2", tier="optimal")
    g.add_edge("s2", "s1", tier="optimal", when=lambda st: st < 3)
    g.add_edge("s2", "end", tier="optimal", when=lambda st: st >= 3)
    g.nodes["end"]["ending"] = True
    result = walk(g, "s1", "best", state=0, update=lambda st, c: st + 1 if c.target == "s2" else st)
    assert result.ok and result.path == ("s1", "s2", "s1", "s2", "s1", "s2", "end")
    assert result.final_state == 3


def test_same_state_at_the_same_node_is_a_loop() -> None:
    g = nx.DiGraph()
    g.add_edge("s1", "s2", tier="optimal")
    g.add_edge("s2", "s1", tier="optimal")
    g.add_edge("s2", "end", tier="wrong")
    g.nodes["end"]["ending"] = True
    result = walk(g, "s1", "best", state={"seen": ["s1"]}, update=lambda st, c: st)
    assert result.failure == "loop" and result.path == ("s1", "s2", "s1")


def test_initial_state_is_copied_for_every_walk() -> None:
    initial = {"trust": 0, "log": []}

    def mutate(state: dict[str, Any], choice: Choice) -> dict[str, Any]:
        state["log"].append(str(choice.target))  # in place, as careless user code does
        return add_trust(state, choice)

    first = walk_all(TRUST, state=initial, update=mutate, strategies=["best", "worst"])
    second = walk_all(TRUST, state=initial, update=mutate, strategies=["best", "worst"])
    assert initial == {"trust": 0, "log": []}
    assert [w.final_state for w in first] == [w.final_state for w in second]
    assert first["best"].final_state["log"] == ["s2", "ally"]


@dataclass
class Mood:
    trust: int
    notes: list[str]


def test_freeze_state_makes_common_values_hashable() -> None:
    assert freeze_state({"b": [1, {2}], "a": None}) == (("a", None), ("b", (1, frozenset({2}))))
    assert freeze_state(Mood(1, ["x"])) == ("Mood", (("notes", ("x",)), ("trust", 1)))
    assert freeze_state((1, [2])) == (1, (2,))
    hash(freeze_state({"k": [{"deep": [1]}]}))


def test_unhashable_state_is_a_clear_error() -> None:
    class Opaque:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="walker state of type Opaque is not hashable"):
        walk(LOOPING, strategy="worst", state=Opaque())


# ---------------------------------------------------------------------------------------------
# every strategy at once


def test_walk_all_runs_every_strategy_and_each_random_seed() -> None:
    table = walk_all(STORY)
    assert [w.strategy for w in table] == [
        "best",
        "worst",
        "alternating",
        "random(seed=0)",
        "random(seed=1)",
        "random(seed=2)",
    ]
    assert table.ok and table.failures == []
    assert table["worst"].outcome == "failure" and table[0].strategy == "best"
    with pytest.raises(KeyError, match="no walk for strategy 'cautious'"):
        table["cautious"]


def test_walk_all_table_renders_with_tabulate() -> None:
    text = str(walk_all(LOOPING, strategies=["best", "worst"]))
    lines = text.splitlines()
    assert lines[0].split() == ["strategy", "result", "turns", "ending", "outcome", "path"]
    assert lines[2].split() == ["best", "ok", "2", "win", "success", "s1", "→", "s2", "→", "win"]
    assert lines[3].split() == ["worst", "loop", "2", "s1", "→", "s3", "→", "s1"]


def test_walk_table_elides_long_paths() -> None:
    chain = nx.path_graph(30, create_using=nx.DiGraph)
    chain.nodes[29]["ending"] = True
    text = walk_all(chain, 0, strategies=["best"]).to_table(path_limit=9)
    assert "0 → 1 → 2 → … → 25 → 26 → 27 → 28 → 29" in text


def test_walk_all_rows_are_json_ready() -> None:
    rows = walk_all(LOOPING, strategies=["worst"]).to_rows()
    assert rows == [
        {
            "strategy": "worst",
            "result": "loop",
            "turns": 2,
            "ending": None,
            "outcome": None,
            "path": ["s1", "s3", "s1"],
            "detail": "revisited s1 in the same state after 2 turns (cycle s1 → s3 → s1)",
        }
    ]
    json.dumps(rows)


def test_walk_all_expectations_by_name_and_for_every_random_seed() -> None:
    table = walk_all(STORY, expect={"best": "success", "random": {"success", "partial", "failure"}})
    assert table.ok
    table = walk_all(STORY, expect={"worst": "success"}, strategies=["best", "worst"])
    assert [w.failure for w in table] == [None, "wrong_outcome"]


def test_walk_all_accepts_named_callables() -> None:
    table = walk_all(STORY, strategies=[("second", lambda node, choices, state, turn: choices[1])])
    assert table["second"].path == ("s1", "s3", "fail")


def test_assert_walks_ok_returns_the_table_when_every_walk_passes() -> None:
    table = assert_walks_ok(STORY, min_turns=2)
    assert len(table) == 6


def test_assert_walks_ok_lists_each_failing_strategy() -> None:
    with pytest.raises(AssertionError) as excinfo:
        assert_walks_ok(LOOPING, strategies=["best", "worst", "alternating"], min_turns=3, subject="story-7")
    message = str(excinfo.value)
    assert message.splitlines()[:4] == [
        "3 of 3 walks failed on story-7:",
        "  - best: early_ending: reached win (success) after 2 turns; min_turns is 3",
        "  - worst: loop: revisited s1 in the same state after 2 turns (cycle s1 → s3 → s1)",
        "  - alternating: early_ending: reached fail (failure) after 2 turns; min_turns is 3",
    ]
    assert "strategy" in message.splitlines()[5]  # the table follows


def test_assert_walks_ok_hides_its_own_frame() -> None:
    with pytest.raises(AssertionError) as excinfo:
        assert_walks_ok(LOOPING)
    shown = excinfo.traceback.filter(excinfo)
    assert all(Path(str(entry.path)) != Path(walker_module.__file__) for entry in shown)


# ---------------------------------------------------------------------------------------------
# spine


def test_spine_is_best_play_ignoring_state() -> None:
    assert spine(STORY) == ["s1", "s2", "s4", "win"]
    assert spine(TRUST) == ["s1", "s2", "ally"]  # the first optimal route, guards ignored


def test_spine_stops_before_repeating_a_node() -> None:
    g = nx.DiGraph([("s1", "s2"), ("s2", "s1")])
    assert spine(g, "s1") == ["s1", "s2"]
    assert spine(g, "nowhere") == []


# ---------------------------------------------------------------------------------------------
# properties


@st.composite
def random_graphs(draw: st.DrawFn) -> nx.DiGraph:
    n = draw(st.integers(1, 10))
    endings = draw(st.sets(st.integers(0, n - 1), max_size=n))
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for node in endings:
        g.nodes[node]["ending"] = True
    for u, v in draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n)):
        g.add_edge(u, v, tier=draw(st.sampled_from(DEFAULT_TIERS)))
    return g


@settings(max_examples=200, deadline=None)
@given(random_graphs())
def test_property_deterministic_walks_finish_within_the_node_count(g: nx.DiGraph) -> None:
    n = g.number_of_nodes()
    for strategy in ("best", "worst", "alternating"):
        result = walk(g, 0, strategy)
        # Revisit detection bounds a memoryless walk by the number of (node, parity) pairs.
        assert result.turns <= 2 * n
        assert result.failure in (None, "loop", "dead_end")
        assert all(g.has_edge(u, v) for u, v in zip(result.path, result.path[1:], strict=False))
        assert (result.failure is None) == (result.ending is not None)
        if result.ending is not None:
            assert is_ending(g, result.ending)
            assert not any(is_ending(g, node) for node in result.path[:-1])  # play stops at the first
        assert walk(g, 0, strategy) == result


def test_min_turns_per_strategy() -> None:
    table = walk_all(SHORT_BEST, strategies=["best", "worst"], min_turns={"best": 2})
    assert [w.failure for w in table] == ["early_ending", None]
    table = walk_all(SHORT_BEST, strategies=["best", "worst", "random"], min_turns={"random": 9}, seeds=[4])
    assert [w.failure for w in table] == [None, None, "early_ending"]
