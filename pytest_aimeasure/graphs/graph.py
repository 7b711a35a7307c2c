"""Scene graphs: the contract, dict conversion, gate checks and the facts handed to the judge.

The contract is a :class:`networkx.DiGraph` plus a start node:

* a node with a truthy ``ending`` attribute is terminal; it may carry ``outcome`` (``"success"``,
  ``"partial"``, ``"failure"``, ...). Choices leaving an ending are ignored: play stops there.
* every edge is a choice; it may carry ``tier`` (ranked best to worst, :data:`DEFAULT_TIERS` unless
  told otherwise), ``label``, and for the walker a ``when`` predicate on the walk's state.
* the start node is passed as ``start=`` or stored as ``graph.graph["start"]``.

Generators usually emit JSON, so the plain dict form documented in :func:`graph_from_dict` is accepted
wherever a graph is. Checks never raise on a broken artifact: they return :class:`Violation` objects,
because "scene 7 is unreachable" is a result a gate reports, not a crash.

Example::

    from pytest_aimeasure.graphs.graph import assert_graph_ok, graph_facts

    def test_story_structure(story):
        assert_graph_ok(story, required_outcomes={"success", "failure"})

    facts = graph_facts(story)   # {"branching": {"max": 3, ...}, "endings": 4, ...}
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeAlias

import networkx as nx

DEFAULT_TIERS: tuple[str, ...] = ("optimal", "acceptable", "suboptimal", "wrong")
"""Choice tiers, best first. Pass ``tiers=`` to any function here to use your own ranking."""

UNSPECIFIED_OUTCOME = "unspecified"
"""The outcome reported for an ending that has no ``outcome`` attribute."""

GraphLike: TypeAlias = "nx.DiGraph | Mapping[str, Any]"

ViolationKind = Literal[
    "missing_start",
    "invalid_spec",
    "dangling_choice",
    "duplicate_choice",
    "unknown_tier",
    "unreachable",
    "dead_end",
    "trap",
    "no_ending",
    "missing_outcome",
]


@dataclass(frozen=True)
class Violation:
    """One broken rule of the graph contract: what kind, which nodes, and a one-line explanation.

    Example::

        >>> str(Violation("dead_end", ("s5",), "s5 is not an ending and has no choices"))
        'dead_end: s5 is not an ending and has no choices'
    """

    kind: ViolationKind
    nodes: tuple[Hashable, ...]
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class ConvertedGraph(NamedTuple):
    """What :func:`graph_from_dict` returns; unpacks as ``graph, start, violations``."""

    graph: nx.DiGraph
    start: Hashable | None
    violations: list[Violation]


# ---------------------------------------------------------------------------------------------
# small shared helpers


def is_ending(graph: nx.DiGraph, node: Hashable) -> bool:
    """True when ``node`` is terminal (truthy ``ending`` attribute).

    Example::

        >>> g = nx.DiGraph(); g.add_node("end", ending=True)
        >>> is_ending(g, "end")
        True
    """
    return bool(graph.nodes[node].get("ending"))


def outcome_of(graph: nx.DiGraph, node: Hashable) -> str:
    """The outcome of an ending, or :data:`UNSPECIFIED_OUTCOME` when it has none.

    Example::

        >>> g = nx.DiGraph(); g.add_node("end", ending=True, outcome="success")
        >>> outcome_of(g, "end")
        'success'
    """
    outcome = graph.nodes[node].get("outcome")
    return UNSPECIFIED_OUTCOME if outcome is None else str(outcome)


def tier_ranks(tiers: Sequence[str] = DEFAULT_TIERS) -> dict[str, int]:
    """Map each tier to its rank (0 is best). Untiered or unknown choices rank after all of them.

    Example::

        >>> tier_ranks(("good", "bad"))
        {'good': 0, 'bad': 1}
    """
    return {tier: rank for rank, tier in enumerate(tiers)}


def format_nodes(nodes: Iterable[Hashable]) -> str:
    """Node ids joined for a one-line message: ``"s4, s9"``."""
    return ", ".join(str(node) for node in nodes)


def resolve(graph: GraphLike, start: Hashable | None = None) -> ConvertedGraph:
    """Turn a graph or a dict spec into ``(graph, start, conversion violations)``.

    ``start`` wins over the dict's ``"start"`` and over ``graph.graph["start"]``.

    Example::

        >>> g, start, problems = resolve({"start": "a", "nodes": {"a": {"ending": True}}})
        >>> start, problems
        ('a', [])
    """
    if isinstance(graph, nx.Graph):
        # A MultiDiGraph is a DiGraph subclass, but its adjacency holds edge keys, not edge data.
        if not graph.is_directed() or graph.is_multigraph():
            raise TypeError(f"a scene graph must be a networkx.DiGraph, not {type(graph).__name__}")
        return ConvertedGraph(graph, graph.graph.get("start") if start is None else start, [])
    converted = graph_from_dict(graph)
    if start is None or start == converted.start:
        return converted
    # An explicit start replaces the spec's, so the spec's verdict on its own start no longer applies.
    kept = [v for v in converted.violations if v.kind != "missing_start"]
    converted.graph.graph["start"] = start
    return ConvertedGraph(converted.graph, start, kept)


def play_view(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph as a player experiences it: choices leaving an ending are dropped.

    Returns ``graph`` itself when no ending has choices, so the common case costs nothing.
    """
    exits = [(u, v) for u, ending in graph.nodes(data="ending") if ending for v in graph.succ[u]]
    if not exits:
        return graph
    return nx.restricted_view(graph, [], exits)


def reachable_nodes(graph: nx.DiGraph, start: Hashable) -> set[Hashable]:
    """Every node a player can reach from ``start`` (``start`` included; endings are terminal).

    Example::

        >>> g = nx.DiGraph([("a", "b"), ("c", "b")])
        >>> sorted(reachable_nodes(g, "a"))
        ['a', 'b']
    """
    if start not in graph:
        return set()
    found: set[Hashable] = nx.descendants(play_view(graph), start)
    found.add(start)
    return found


def nodes_reaching_endings(graph: nx.DiGraph, endings: Collection[Hashable] | None = None) -> set[Hashable]:
    """Every node from which one of ``endings`` (default: all endings) can be reached, endings included.

    Example::

        >>> g = nx.DiGraph([("a", "end"), ("b", "c")]); g.nodes["end"]["ending"] = True
        >>> sorted(nodes_reaching_endings(g))
        ['a', 'end']
    """
    if endings is None:
        endings = [n for n in graph if is_ending(graph, n)]
    if not endings:
        return set()
    reverse = play_view(graph).reverse(copy=False)
    return {node for layer in nx.bfs_layers(reverse, list(endings)) for node in layer}


# ---------------------------------------------------------------------------------------------
# the dict form


def _missing_start(graph: nx.DiGraph, start: Hashable | None) -> list[Violation]:
    if start is None:
        return [
            Violation(
                "missing_start",
                (),
                'no start node given: pass start=, or set graph.graph["start"] or the spec\'s "start"',
            )
        ]
    if start not in graph:
        return [Violation("missing_start", (start,), f"start node {start} is not in the graph")]
    return []


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _spec_nodes(nodes: Any, problems: list[Violation]) -> list[tuple[Hashable, Mapping[str, Any]]]:
    """The spec's nodes as ``(id, body)`` pairs; malformed entries become ``invalid_spec`` violations."""
    if isinstance(nodes, Mapping):
        entries: list[tuple[Any, Any]] = list(nodes.items())
    elif isinstance(nodes, Sequence) and not isinstance(nodes, str | bytes):
        entries = []
        for position, body in enumerate(nodes):
            node_id = body.get("id") if isinstance(body, Mapping) else None
            if node_id is None:
                problems.append(Violation("invalid_spec", (), f'node #{position} has no "id"'))
                continue
            entries.append((node_id, {k: v for k, v in body.items() if k != "id"}))
    else:
        problems.append(
            Violation("invalid_spec", (), f'"nodes" must be a mapping or a list, not {type(nodes).__name__}')
        )
        return []
    seen: set[Hashable] = set()
    out: list[tuple[Hashable, Mapping[str, Any]]] = []
    for node_id, body in entries:
        if not _hashable(node_id):
            problems.append(Violation("invalid_spec", (), f"node id {node_id!r} is not hashable"))
        elif node_id in seen:
            problems.append(Violation("invalid_spec", (node_id,), f"node {node_id} is defined twice"))
        elif body is None:
            seen.add(node_id)
            out.append((node_id, {}))
        elif not isinstance(body, Mapping):
            why = f"node {node_id} must be a mapping, not {type(body).__name__}"
            problems.append(Violation("invalid_spec", (node_id,), why))
        else:
            seen.add(node_id)
            out.append((node_id, body))
    return out


def graph_from_dict(spec: Mapping[str, Any]) -> ConvertedGraph:
    """Convert the plain dict/JSON form to a DiGraph, collecting violations instead of raising.

    The form::

        {
          "start": "s1",
          "nodes": {
            "s1": {"text": "...", "choices": [
                {"to": "s2", "tier": "optimal", "label": "Ask about the budget"},
                {"to": "fail", "tier": "wrong", "label": "Walk out"}]},
            "s2": {"choices": [{"to": "win"}]},
            "win": {"ending": True, "outcome": "success"},
            "fail": {"ending": True, "outcome": "failure"}
          }
        }

    ``"nodes"`` may also be a list of node objects that each carry an ``"id"``. Every key of a node
    other than ``"choices"`` (and a list entry's ``"id"``) becomes a node attribute; every key of a
    choice other than ``"to"`` becomes an edge attribute. A choice that names a missing node is a
    ``dangling_choice`` violation and is left out of the graph; a second choice to the same target
    is a ``duplicate_choice`` (a DiGraph holds one edge per pair) and the first is kept; a missing or
    unknown start is a ``missing_start``. The start is stored as ``graph.graph["start"]``.

    Example::

        >>> nodes = {"a": {"choices": [{"to": "b"}, {"to": "zz"}]}, "b": {"ending": True}}
        >>> g, start, problems = graph_from_dict({"start": "a", "nodes": nodes})
        >>> [str(p) for p in problems]
        ['dangling_choice: choice 2 of a goes to zz, which is not a node']
    """
    problems: list[Violation] = []
    graph = nx.DiGraph()
    if not isinstance(spec, Mapping):
        why = f"a graph spec must be a mapping, not {type(spec).__name__}"
        problems.append(Violation("invalid_spec", (), why))
        return ConvertedGraph(graph, None, problems + _missing_start(graph, None))
    if "nodes" not in spec:
        problems.append(Violation("invalid_spec", (), 'the spec has no "nodes"'))
    nodes = _spec_nodes(spec.get("nodes", {}), problems)
    for node_id, body in nodes:
        graph.add_node(node_id, **{str(k): v for k, v in body.items() if k != "choices"})
    for node_id, body in nodes:
        _add_choices(graph, node_id, body.get("choices"), problems)
    start = spec.get("start")
    if start is not None and not _hashable(start):
        problems.append(Violation("invalid_spec", (), f"start {start!r} is not hashable"))
        start = None
    if start is not None:
        graph.graph["start"] = start
    return ConvertedGraph(graph, start, _missing_start(graph, start) + problems)


def _add_choices(graph: nx.DiGraph, node_id: Hashable, choices: Any, problems: list[Violation]) -> None:
    """Add a node's ``choices`` as edges; each one that cannot be an edge becomes a violation."""
    if choices is None:
        return
    if not isinstance(choices, Sequence) or isinstance(choices, str | bytes):
        problems.append(Violation("invalid_spec", (node_id,), f'"choices" of {node_id} must be a list'))
        return
    for number, choice in enumerate(choices, start=1):
        where = f"choice {number} of {node_id}"
        if not isinstance(choice, Mapping) or "to" not in choice:
            problems.append(Violation("invalid_spec", (node_id,), f'{where} must be a mapping with a "to"'))
            continue
        target = choice["to"]
        if not _hashable(target) or target not in graph:
            where_to = (node_id, target) if _hashable(target) else (node_id,)
            why = f"{where} goes to {target}, which is not a node"
            problems.append(Violation("dangling_choice", where_to, why))
        elif graph.has_edge(node_id, target):
            why = f"{where} is a second choice to {target}; only the first is kept"
            problems.append(Violation("duplicate_choice", (node_id, target), why))
        else:
            graph.add_edge(node_id, target, **{str(k): v for k, v in choice.items() if k != "to"})


def graph_to_dict(graph: nx.DiGraph, start: Hashable | None = None) -> dict[str, Any]:
    """The dict form of a graph (inverse of :func:`graph_from_dict`), e.g. to store it as an artifact.

    Example::

        >>> g = nx.DiGraph(); g.add_edge("a", "b", tier="optimal"); g.nodes["b"]["ending"] = True
        >>> graph_to_dict(g, "a")
        {'start': 'a', 'nodes': {'a': {'choices': [{'to': 'b', 'tier': 'optimal'}]}, 'b': {'ending': True}}}
    """
    nodes: dict[Hashable, dict[str, Any]] = {}
    for node, attrs in graph.nodes(data=True):
        body = dict(attrs)
        if graph.out_degree(node):
            body["choices"] = [{"to": target, **data} for target, data in graph.succ[node].items()]
        nodes[node] = body
    return {"start": graph.graph.get("start") if start is None else start, "nodes": nodes}


# ---------------------------------------------------------------------------------------------
# gate checks: each returns violations, none raises on a broken graph


def find_unreachable(graph: nx.DiGraph, start: Hashable) -> list[Violation]:
    """Nodes a player can never reach from ``start`` (one violation naming all of them).

    Example::

        >>> g = nx.DiGraph([("s1", "end"), ("s4", "end")]); g.nodes["end"]["ending"] = True
        >>> [str(v) for v in find_unreachable(g, "s1")]
        ['unreachable: not reachable from start s1: s4']
    """
    if start not in graph:
        return []
    reachable = reachable_nodes(graph, start)
    lost = tuple(node for node in graph if node not in reachable)
    if not lost:
        return []
    return [Violation("unreachable", lost, f"not reachable from start {start}: {format_nodes(lost)}")]


def find_dead_ends(graph: nx.DiGraph) -> list[Violation]:
    """Non-ending nodes without choices, one violation each.

    Example::

        >>> g = nx.DiGraph([("s1", "s5")])
        >>> [str(v) for v in find_dead_ends(g)]
        ['dead_end: s5 is not an ending and has no choices']
    """
    return [
        Violation("dead_end", (node,), f"{node} is not an ending and has no choices")
        for node in graph
        if not graph.out_degree(node) and not is_ending(graph, node)
    ]


def find_traps(graph: nx.DiGraph) -> list[Violation]:
    """Nodes with choices from which no ending can be reached (dead ends are reported separately).

    Only meaningful when the graph has endings at all; a graph without any is reported as
    ``no_ending`` by :func:`find_missing_outcomes`.

    Example::

        >>> g = nx.DiGraph([("s1", "end"), ("s1", "s2"), ("s2", "s3"), ("s3", "s2")])
        >>> g.nodes["end"]["ending"] = True
        >>> [str(v) for v in find_traps(g)]
        ['trap: no ending can be reached from s2, s3']
    """
    endings = [n for n in graph if is_ending(graph, n)]
    if not endings:
        return []
    escapes = nodes_reaching_endings(graph, endings)
    trapped = tuple(node for node in graph if node not in escapes and graph.out_degree(node))
    if not trapped:
        return []
    return [Violation("trap", trapped, f"no ending can be reached from {format_nodes(trapped)}")]


def find_missing_outcomes(
    graph: nx.DiGraph, start: Hashable, required_outcomes: Iterable[str] = ()
) -> list[Violation]:
    """``no_ending`` when play can never end, and ``missing_outcome`` per required outcome never reached.

    Example::

        >>> g = nx.DiGraph([("s1", "win")]); g.nodes["win"].update(ending=True, outcome="success")
        >>> [str(v) for v in find_missing_outcomes(g, "s1", {"success", "failure"})]
        ["missing_outcome: required outcome 'failure' cannot be reached: no ending has that outcome"]
    """
    endings = [n for n in graph if is_ending(graph, n)]
    found: list[Violation] = []
    reachable = reachable_nodes(graph, start) if start in graph else None
    if not endings:
        found.append(Violation("no_ending", (), "the graph has no ending node (no node has ending=True)"))
    elif reachable is not None and not any(e in reachable for e in endings):
        found.append(Violation("no_ending", (start,), f"no ending can be reached from start {start}"))
    for outcome in sorted(set(required_outcomes)):
        with_outcome = tuple(e for e in endings if outcome_of(graph, e) == outcome)
        if not with_outcome:
            why = "no ending has that outcome"
        elif reachable is None or any(e in reachable for e in with_outcome):
            continue
        else:
            why = f"its ending(s) {format_nodes(with_outcome)} cannot be reached from {start}"
        why = f"required outcome {outcome!r} cannot be reached: {why}"
        found.append(Violation("missing_outcome", with_outcome, why))
    return found


def find_unknown_tiers(graph: nx.DiGraph, tiers: Sequence[str] = DEFAULT_TIERS) -> list[Violation]:
    """Choices whose ``tier`` is set but not in the ranking (a typo silently changes best/worst play).

    Example::

        >>> g = nx.DiGraph(); g.add_edge("s1", "s2", tier="optimial")
        >>> [v.kind for v in find_unknown_tiers(g)]
        ['unknown_tier']
    """
    known = set(tiers)
    return [
        Violation(
            "unknown_tier",
            (u, v),
            f"choice {u} → {v} has tier {tier!r}, which is not one of {', '.join(tiers)}",
        )
        for u, v, tier in graph.edges(data="tier")
        if tier is not None and not (isinstance(tier, str) and tier in known)
    ]


def check_graph(
    graph: GraphLike,
    start: Hashable | None = None,
    *,
    required_outcomes: Iterable[str] = (),
    tiers: Sequence[str] = DEFAULT_TIERS,
) -> list[Violation]:
    """Run every structural check and return all violations (an empty list means the graph is sound).

    Accepts a DiGraph or the dict form (whose conversion problems are included). Checks that need a
    start are skipped when the start is missing; the ``missing_start`` violation says why. The checks
    are state-agnostic: a choice with a ``when`` predicate counts as available.

    Example::

        >>> spec = {"start": "s1", "nodes": {"s1": {"choices": [{"to": "end"}]}, "end": {"ending": True}}}
        >>> check_graph(spec, required_outcomes={"success"})[0].kind
        'missing_outcome'
    """
    g, start, found = resolve(graph, start)
    found = list(found)
    start_ok = start is not None and start in g
    if not start_ok and not any(v.kind == "missing_start" for v in found):
        found = _missing_start(g, start) + found
    found += find_unknown_tiers(g, tiers)
    if start_ok:
        found += find_unreachable(g, start)
    found += find_dead_ends(g)
    found += find_traps(g)
    found += find_missing_outcomes(g, start, required_outcomes)
    return found


def format_violations(violations: Sequence[Violation], subject: str = "the scene graph") -> str:
    """A readable block, one line per violation, as the assertion helper prints it.

    Example::

        >>> dead = Violation("dead_end", ("s5",), "s5 is not an ending and has no choices")
        >>> print(format_violations([dead]))
        the scene graph breaks the graph contract (1 violation):
          - dead_end: s5 is not an ending and has no choices
    """
    plural = "" if len(violations) == 1 else "s"
    lines = [f"{subject} breaks the graph contract ({len(violations)} violation{plural}):"]
    lines += [f"  - {violation}" for violation in violations]
    return "\n".join(lines)


def assert_graph_ok(
    graph: GraphLike,
    start: Hashable | None = None,
    *,
    required_outcomes: Iterable[str] = (),
    tiers: Sequence[str] = DEFAULT_TIERS,
    subject: str = "the scene graph",
) -> None:
    """Fail a gate test with one line per violation when :func:`check_graph` finds any.

    Example::

        @pytest.mark.gate
        def test_story_structure(story):
            assert_graph_ok(story, "s1", required_outcomes={"success", "failure"})
    """
    __tracebackhide__ = True
    violations = check_graph(graph, start, required_outcomes=required_outcomes, tiers=tiers)
    if violations:
        raise AssertionError(format_violations(violations, subject))


def graph_validator(
    start: Hashable | None = None,
    *,
    required_outcomes: Iterable[str] = (),
    tiers: Sequence[str] = DEFAULT_TIERS,
) -> Callable[[GraphLike], list[str]]:
    """A ``validate`` callable for :func:`pytest_aimeasure.graphs.heal.heal`: the violations as strings.

    Example::

        healed = heal(generate_story, graph_validator(required_outcomes={"success"}), name="story-7")
    """
    required = tuple(required_outcomes)

    def validate(graph: GraphLike) -> list[str]:
        return [str(v) for v in check_graph(graph, start, required_outcomes=required, tiers=tiers)]

    return validate


# ---------------------------------------------------------------------------------------------
# facts for the judge


def _sorted_deep(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _sorted_deep(value[k]) for k in sorted(value, key=str)}
    return value


def _farthest(play: nx.DiGraph, start: Hashable, parts: list[set[Hashable]]) -> dict[Hashable, int]:
    """Longest distance from ``start`` to each reachable node, by one pass in topological order.

    Exact for every node whose reachable ancestors are all off cycles; other values are meaningless,
    and :func:`graph_facts` only reads values it has shown to be exact.
    """
    order = nx.condensation(play, parts)
    farthest: dict[Hashable, int] = {start: 0}
    for part in nx.topological_sort(order):
        for node in order.nodes[part]["members"]:
            before = [farthest[u] for u in play.pred[node] if u in farthest]
            if before and node != start:
                farthest[node] = max(before) + 1
    return farthest



def _structure_counts(g: nx.DiGraph, tiers: Sequence[str], digits: int) -> dict[str, Any]:
    """The facts that need no start: sizes, choices by tier, branching, dead ends and traps."""
    degrees = [g.out_degree(n) for n in g if not is_ending(g, n)]
    return {
        "nodes": g.number_of_nodes(),
        "choices": g.number_of_edges(),
        "choices_by_tier": _choices_by_tier(g, tiers),
        "branching": {
            "mean": round(sum(degrees) / len(degrees), digits) if degrees else None,
            "min": min(degrees) if degrees else None,
            "max": max(degrees) if degrees else None,
        },
        "decision_nodes": sum(1 for d in degrees if d >= 2),
        "dead_ends": sum(1 for d in degrees if d == 0),
        "trap_nodes": sum(len(v.nodes) for v in find_traps(g)),
    }


def _choices_by_tier(g: nx.DiGraph, tiers: Sequence[str]) -> dict[str, int]:
    """Choices counted by tier; ``"untiered"`` for choices without a known tier."""
    by_tier: dict[str, int] = dict.fromkeys(tiers, 0)
    by_tier["untiered"] = 0
    for _, _, tier in g.edges(data="tier"):
        known = isinstance(tier, str) and tier in by_tier and tier != "untiered"
        by_tier[tier if known else "untiered"] += 1
    return by_tier


def _path_lengths(
    g: nx.DiGraph,
    group: list[Hashable],
    distance: Mapping[Hashable, int],
    farthest: Mapping[Hashable, int],
    reachable: set[Hashable],
    on_cycles: set[Hashable],
) -> dict[str, int | None]:
    """The shortest and longest route (in choices) from the start to the endings of one outcome."""
    hits = [distance[e] for e in group if e in distance]
    longest: int | None = None
    # A cycle through a node on some route to these endings lies wholly on such routes (its nodes
    # share that node's reachability), so no route node on a cycle means the routes form a DAG, and
    # the farthest distance of its endings is the longest route.
    if hits and not (reachable & nodes_reaching_endings(g, group) & on_cycles):
        longest = max(farthest[e] for e in group if e in distance)
    return {"shortest": min(hits) if hits else None, "longest": longest}


def graph_facts(
    graph: GraphLike,
    start: Hashable | None = None,
    *,
    tiers: Sequence[str] = DEFAULT_TIERS,
    digits: int = 3,
) -> dict[str, Any]:
    """The graph's countable facts as a JSON-serialisable dict with sorted keys, for ``facts=``.

    Counts cover the whole graph; path lengths cover what a player can reach from the start and are
    measured in choices. ``longest`` is the longest simple path to an ending of that outcome when no
    cycle lies on any route to it, else ``None`` (a player could loop there, so there is no bound).
    Branching is the number of choices of non-ending nodes.

    Keys: ``start``, ``nodes``, ``choices``, ``endings``, ``endings_by_outcome``, ``choices_by_tier``
    (``"untiered"`` for choices without a known tier), ``branching`` (``mean``/``min``/``max``),
    ``decision_nodes`` (non-endings with two or more choices), ``reachable_nodes``,
    ``reachable_fraction``, ``unreachable_nodes``, ``dead_ends``, ``trap_nodes``,
    ``path_length_by_outcome`` (``{outcome: {"shortest", "longest"}}``), ``acyclic``,
    ``cyclic_components`` (strongly connected parts a player can circle in) and ``nodes_on_cycles``.

    Example::

        judge.score(story_text, facts=graph_facts(story))
    """
    g, start, _ = resolve(graph, start)
    play = play_view(g)
    endings = [n for n in g if is_ending(g, n)]
    by_outcome: dict[str, list[Hashable]] = {}
    for ending in endings:
        by_outcome.setdefault(outcome_of(g, ending), []).append(ending)

    start_ok = start is not None and start in g
    reachable = reachable_nodes(g, start) if start_ok else set()
    distance: dict[Hashable, int] = nx.single_source_shortest_path_length(play, start) if start_ok else {}
    parts = list(nx.strongly_connected_components(play))
    cyclic = [part for part in parts if len(part) > 1 or play.has_edge(next(iter(part)), next(iter(part)))]
    on_cycles: set[Hashable] = set().union(*cyclic)
    farthest = _farthest(play, start, parts) if start_ok else {}

    paths = {
        outcome: _path_lengths(g, group, distance, farthest, reachable, on_cycles)
        for outcome, group in by_outcome.items()
    }
    total = g.number_of_nodes()
    facts: dict[str, Any] = {
        **_structure_counts(g, tiers, digits),
        "start": None if start is None else str(start),
        "endings": len(endings),
        "endings_by_outcome": {k: len(v) for k, v in by_outcome.items()},
        "reachable_nodes": len(reachable),
        "reachable_fraction": round(len(reachable) / total, digits) if total else 0.0,
        "unreachable_nodes": total - len(reachable),
        "path_length_by_outcome": paths,
        "acyclic": not cyclic,
        "cyclic_components": len(cyclic),
        "nodes_on_cycles": len(on_cycles),
    }
    result: dict[str, Any] = _sorted_deep(facts)
    return result
