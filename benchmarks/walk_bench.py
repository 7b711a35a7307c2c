"""How long the graph gates, facts and walks take on a scene graph of a few hundred nodes.

The graph is built deterministically: a start scene, layers of ten scenes with four ranked choices
each (forward to the next layer, except that every third layer's suboptimal choice steps one layer
back, which makes cycles), and nine endings after the last layer. Each row shows the median and
the fastest of ``--repeat`` runs; on a busy machine the fastest is the better guide to the code's
own cost.

Usage::

    python benchmarks/walk_bench.py            # 500 nodes, 25 repetitions
    python benchmarks/walk_bench.py --nodes 2000 --repeat 9
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from tabulate import tabulate

from pytest_aimeasure.graphs.graph import check_graph, graph_facts, graph_from_dict
from pytest_aimeasure.graphs.heal import repair_unreachable
from pytest_aimeasure.graphs.walker import walk, walk_all

WIDTH = 10
OUTCOMES = ("success", "partial", "failure")


def build_spec(nodes: int = 500, *, detours: bool = True) -> dict[str, Any]:
    """The dict form of a layered branching story with exactly ``nodes`` nodes (at least 20).

    ``detours=False`` keeps every choice moving forward, so the graph is acyclic and the facts
    include the longest route to each outcome.

    Example::

        spec = build_spec(500)
        assert len(spec["nodes"]) == 500
    """
    endings = 9
    layers = (nodes - 1 - endings) // WIDTH
    extra = nodes - 1 - endings - layers * WIDTH  # leftovers join the last layer
    if layers < 2:
        raise ValueError("need at least 20 nodes")
    spec_nodes: dict[str, dict[str, Any]] = {}

    def scene(layer: int, index: int) -> str:
        return f"L{layer}.{index}"

    sizes = [WIDTH] * layers
    sizes[-1] += extra
    tiers = ("optimal", "acceptable", "suboptimal", "wrong")
    spec_nodes["start"] = {"choices": [{"to": scene(1, j), "tier": tiers[j % 4]} for j in range(WIDTH)]}
    for layer in range(1, layers + 1):
        for j in range(sizes[layer - 1]):
            if layer == layers:
                choices = [
                    {"to": f"end{j % 3}", "tier": "optimal"},
                    {"to": f"end{3 + j % 3}", "tier": "acceptable"},
                    {"to": f"end{6 + j % 3}", "tier": "wrong"},
                ]
            else:
                ahead = sizes[layer]
                # Every third layer a suboptimal choice steps one layer back, so the graph has cycles
                # that random play wanders through while ranked play keeps moving forward.
                back = detours and layer % 3 == 0
                detour = scene(layer - 1, (j + 7) % WIDTH) if back else scene(layer + 1, (j + 3) % ahead)
                choices = [
                    {"to": scene(layer + 1, j % ahead), "tier": "optimal"},
                    {"to": scene(layer + 1, (j + 1) % ahead), "tier": "acceptable"},
                    {"to": detour, "tier": "suboptimal"},
                    {"to": scene(layer + 1, (j + 5) % ahead), "tier": "wrong"},
                ]
            spec_nodes[scene(layer, j)] = {"choices": choices}
    for k in range(endings):
        spec_nodes[f"end{k}"] = {"ending": True, "outcome": OUTCOMES[k // 3]}
    return {"start": "start", "nodes": spec_nodes}


def timed_ms(action: Callable[[], object], repeat: int) -> tuple[float, float]:
    """``(median, fastest)`` wall time of ``action`` in milliseconds over ``repeat`` runs after a warm-up."""
    action()
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000, min(times) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=25)
    args = parser.parse_args(argv)
    repeat = args.repeat

    spec = build_spec(args.nodes)
    graph, start, problems = graph_from_dict(spec)
    violations = check_graph(graph, start, required_outcomes=OUTCOMES)
    if problems or violations:
        raise SystemExit(f"benchmark graph is broken: {[str(v) for v in problems + violations]}")

    table = walk_all(graph, start)
    rows: list[tuple[str, float, float, str]] = []

    def row(label: str, action: Callable[[], object], note: str = "") -> None:
        rows.append((label, *timed_ms(action, repeat), note))

    for one in table:
        if one.strategy.startswith("random"):
            seed = int(one.strategy.split("=")[1].rstrip(")"))
            play = partial(walk, graph, start, "random", seed=seed)
        else:
            play = partial(walk, graph, start, one.strategy)
        row(f"walk {one.strategy}", play, f"{one.failure or 'ok'}, {one.turns} turns")
    row("walk_all (6 walks)", partial(walk_all, graph, start))
    row("graph_from_dict", partial(graph_from_dict, spec))
    gates = partial(check_graph, graph, start, required_outcomes=OUTCOMES)
    row("check_graph (all gates)", gates, "0 violations")
    facts = graph_facts(graph, start)
    row(
        "graph_facts",
        partial(graph_facts, graph, start),
        f"{facts['cyclic_components']} cyclic component(s), {facts['nodes_on_cycles']} nodes on cycles",
    )

    def gates_and_facts() -> None:
        gates()
        graph_facts(graph, start)

    row("check_graph + graph_facts", gates_and_facts)
    dag, dag_start, _ = graph_from_dict(build_spec(args.nodes, detours=False))
    longest = graph_facts(dag, dag_start)["path_length_by_outcome"]["success"]["longest"]
    row(
        "graph_facts (acyclic variant)",
        partial(graph_facts, dag, dag_start),
        f"longest route to success: {longest}",
    )
    row("repair_unreachable (no-op)", partial(repair_unreachable, graph, start))

    print(
        f"{graph.number_of_nodes()} nodes, {graph.number_of_edges()} choices; {repeat} runs after a warm-up"
    )
    print(tabulate(rows, headers=["operation", "median ms", "fastest ms", "note"], floatfmt=".2f"))


if __name__ == "__main__":
    main()
