"""The session's regression tests as one family: a gatekeeping procedure that keeps the family-wise
error at α without letting powerless item tests tax the dimension tests (issue 19).

The procedure is a graphical weighted-Bonferroni procedure (Bretz, Maurer, Brannath & Posch 2009,
"A graphical approach to sequentially rejective multiple test procedures", Stat. Med. 28:586). Every
such procedure is a shortcut of a closed test whose local tests are weighted Bonferroni tests, so
it controls the family-wise error rate strongly at its level, whatever the correlation between the
tests and whatever the weights and edges chosen (chosen here before any data is seen).

The graph, over the one-sided level ``alpha / 2`` (a family of one test reproduces the 95%-CI rule):

* each *group* (a dimension with paired items) gets an equal share 1/K of the level;
* within a comparable dimension of m ≥ 2 items, the dimension test starts with ``1 − ITEM_SHARE``
  of the share and its items with ``ITEM_SHARE`` split evenly (enough to catch one item that
  collapsed while the others held the dimension's mean up);
* a rejected dimension passes its weight on: all of it to its own items when it is the only group,
  otherwise half to its items and half, evenly, to the other groups (Holm's step over dimensions);
* a rejected item passes its weight evenly to the remaining items of its dimension (Holm within);
* a dimension of one item is one test (the item shares its verdict); the paired items of a dimension
  that is not comparable as a whole have no dimension test and take the group's whole share.

Items of one dimension are exchangeable in this graph, so each group's items are kept as one node
whose weight its remaining items share equally: the same rejections as the full graph, in
O(K² + items · log items) instead of O(items²) per step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

ITEM_SHARE = 0.1
"""The part of a dimension's share its items start with, before the dimension is decided."""


@dataclass
class Group:
    """One dimension's regression tests: its own p-value (None: no dimension test) and its items'."""

    name: str
    dimension_p: float | None
    item_ps: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejections:
    dimensions: frozenset[str]
    items: frozenset[str]


Node = tuple[str, str]  # ("dimension" | "items", group name)


def start_levels(groups: Sequence[Group], level: float) -> dict[Node, float]:
    """Each node's starting level (its weight × ``level``): what its tests' power is quoted at."""
    weights, _ = _graph(groups)
    return {node: w * level for node, w in weights.items()}


def item_level_after_dimension(groups: Sequence[Group], name: str, level: float) -> float:
    """The level one item of ``name`` is tested at once its dimension is rejected (no other
    rejection yet): the level its power figure is quoted at."""
    weights, edges = _graph(groups)
    group = next(g for g in groups if g.name == name)
    items = ("items", name)
    total = weights.get(items, 0.0) + weights.get(("dimension", name), 0.0) * edges.get(
        ("dimension", name), {}
    ).get(items, 0.0)
    return total * level / max(len(group.item_ps), 1)


def _graph(groups: Sequence[Group]) -> tuple[dict[Node, float], dict[Node, dict[Node, float]]]:
    share = 1.0 / len(groups) if groups else 0.0
    weights: dict[Node, float] = {}
    for g in groups:
        has_items = bool(g.item_ps)
        if g.dimension_p is not None and has_items:
            weights[("dimension", g.name)] = share * (1.0 - ITEM_SHARE)
            weights[("items", g.name)] = share * ITEM_SHARE
        elif g.dimension_p is not None:
            weights[("dimension", g.name)] = share
        elif has_items:
            weights[("items", g.name)] = share
    edges: dict[Node, dict[Node, float]] = {}
    for g in groups:
        node: Node = ("dimension", g.name)
        if node not in weights:
            continue
        others = [_entry(o) for o in groups if o.name != g.name and _entry(o) in weights]
        own: Node = ("items", g.name)
        out: dict[Node, float] = {}
        to_others = 0.5 if own in weights else 1.0
        if own in weights:
            out[own] = 1.0 if not others else 0.5
        for other in others:
            out[other] = to_others / len(others)
        edges[node] = out
    return weights, edges


def _entry(group: Group) -> Node:
    """Where weight passed to a group arrives: its dimension test, else its items."""
    return ("dimension", group.name) if group.dimension_p is not None else ("items", group.name)


def _remove(node: Node, weights: dict[Node, float], edges: dict[Node, dict[Node, float]]) -> None:
    """Bretz et al.'s update on rejecting (or exhausting) ``node``: its weight flows along its edges,
    and every edge into it is rerouted through it."""
    w = weights.pop(node)
    out = edges.pop(node, {})
    for target, g in out.items():
        if target in weights:
            weights[target] += w * g
    for source, source_out in edges.items():
        g_in = source_out.pop(node, 0.0)
        if g_in == 0.0:
            continue
        back = out.get(source, 0.0)
        scale = 1.0 - g_in * back
        merged = {t: source_out.get(t, 0.0) + g_in * out.get(t, 0.0) for t in {*source_out, *out}}
        merged.pop(source, None)
        edges[source] = {t: v / scale for t, v in merged.items() if v > 0 and scale > 0 and t in weights}


def reject(groups: Sequence[Group], level: float) -> Rejections:
    """Run the procedure at one-sided ``level``: which dimension and item tests are rejected."""
    weights, edges = _graph(groups)
    by_name = {g.name: g for g in groups}
    waiting = {g.name: deque(sorted(g.item_ps.items(), key=lambda kv: kv[1])) for g in groups}
    dims: set[str] = set()
    items: set[str] = set()
    progress = True
    while progress:
        progress = False
        for node in list(weights):
            if node not in weights:
                continue
            kind, name = node
            if kind == "dimension":
                p = by_name[name].dimension_p
                if p is not None and p <= weights[node] * level:
                    dims.add(name)
                    _remove(node, weights, edges)
                    progress = True
                continue
            queue = waiting[name]
            while queue and queue[0][1] <= weights[node] * level / len(queue):
                items.add(queue.popleft()[0])
                progress = True
            if not queue:
                _remove(node, weights, edges)
    return Rejections(dimensions=frozenset(dims), items=frozenset(items))
