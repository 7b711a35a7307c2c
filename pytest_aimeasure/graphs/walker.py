"""A deterministic walker that plays a scene graph the way players would, with no model calls.

Reachability is blind to a cycle that *can* be left but never *is* by a given player, and to optimal
play that ends the story too early. Walking every strategy catches both in milliseconds.

Strategies: ``"best"`` (highest tier), ``"worst"`` (lowest tier), ``"alternating"`` (best, worst,
best, ...), ``"random"`` (seeded) and any callable ``(node, choices, state, turn) -> choice``. Ties go
to the earliest choice in edge order (the order choices were added, which is the dict form's list
order), so a walk is a pure function of the graph, the strategy, the seed and the state.

State is optional: ``state=`` is the initial value (deep-copied per walk), ``update(state, choice)``
returns the next state, and a choice whose edge carries ``when`` (a predicate on the state) is only
offered while ``when(state)`` is true. That is enough to route the same scene differently by, say,
a relationship score: give the scene one edge per route and guard each with ``when``.

Example::

    from pytest_aimeasure.graphs.walker import assert_walks_ok

    def test_story_plays(story):
        table = assert_walks_ok(story, min_turns=4, expect={"best": "success"})
        print(table)
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, overload

import networkx as nx
from tabulate import tabulate

from pytest_aimeasure.graphs.graph import DEFAULT_TIERS, GraphLike, is_ending, outcome_of, resolve, tier_ranks

WalkFailure = Literal["missing_start", "dead_end", "loop", "early_ending", "wrong_outcome"]
BUILTIN_STRATEGIES: tuple[str, ...] = ("best", "worst", "alternating", "random")
DEFAULT_STRATEGIES: tuple[str, ...] = BUILTIN_STRATEGIES


@dataclass(frozen=True)
class Choice:
    """One choice offered at a node, as a strategy sees it.

    ``rank`` is the tier's position in the ranking (0 is best; untiered or unknown tiers rank after
    every known tier), ``index`` the choice's position in edge order, ``attrs`` the edge's data.
    """

    source: Hashable
    target: Hashable
    tier: str | None
    label: str | None
    rank: int
    index: int
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __str__(self) -> str:
        return self.label or f"{self.source} → {self.target}"


ChooseFn: TypeAlias = Callable[[Hashable, Sequence[Choice], Any, int], object]
"""A user strategy: ``(node, available choices, state, turn) -> Choice`` (or the target node id)."""
UpdateFn: TypeAlias = Callable[[Any, Choice], Any]
"""``update(state, choice) -> new state``, called after every choice."""
StrategySpec: TypeAlias = "str | ChooseFn | tuple[str, ChooseFn]"
"""A built-in strategy name, a callable (named by its ``__name__``) or a ``(name, callable)`` pair."""


@dataclass(frozen=True)
class Walk:
    """One playthrough: the nodes visited, the choices made, and how it ended or failed.

    ``failure`` is ``None`` for a good walk, else one of ``missing_start``, ``dead_end``, ``loop``
    (turn budget exhausted, or the same node revisited in the same state, which for a deterministic
    strategy means forever), ``early_ending`` (fewer turns than ``min_turns``) and ``wrong_outcome``.
    """

    strategy: str
    path: tuple[Hashable, ...]
    choices: tuple[Choice, ...]
    ending: Hashable | None
    outcome: str | None
    failure: WalkFailure | None
    detail: str
    final_state: Any = field(default=None, compare=False)

    @property
    def turns(self) -> int:
        """Choices made."""
        return len(self.choices)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        return f"{self.strategy}: {self.failure or 'ok'}: {self.detail}"


def _path_preview(path: Sequence[Hashable], limit: int) -> str:
    shown = [str(node) for node in path]
    if len(shown) > limit:
        shown = [*shown[:3], "…", *shown[-(limit - 4) :]]
    return " → ".join(shown)


@dataclass
class WalkTable:
    """The walks of :func:`walk_all`, in strategy order; ``str(table)`` renders it with tabulate.

    Example::

        >>> spec = {"start": "a", "nodes": {"a": {"choices": [{"to": "b"}]}, "b": {"ending": True}}}
        >>> table = walk_all(spec, strategies=["best"])
        >>> table["best"].path, table.ok
        (('a', 'b'), True)
    """

    walks: list[Walk]

    def __iter__(self) -> Iterator[Walk]:
        return iter(self.walks)

    def __len__(self) -> int:
        return len(self.walks)

    @overload
    def __getitem__(self, key: int) -> Walk: ...
    @overload
    def __getitem__(self, key: str) -> Walk: ...
    def __getitem__(self, key: int | str) -> Walk:
        if isinstance(key, int):
            return self.walks[key]
        for one in self.walks:
            if one.strategy == key:
                return one
        raise KeyError(f"no walk for strategy {key!r}; have {', '.join(w.strategy for w in self.walks)}")

    @property
    def failures(self) -> list[Walk]:
        return [one for one in self.walks if not one.ok]

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_rows(self) -> list[dict[str, Any]]:
        """One JSON-friendly dict per walk (node ids as strings), e.g. for a report."""
        return [
            {
                "strategy": one.strategy,
                "result": one.failure or "ok",
                "turns": one.turns,
                "ending": None if one.ending is None else str(one.ending),
                "outcome": one.outcome,
                "path": [str(node) for node in one.path],
                "detail": one.detail,
            }
            for one in self.walks
        ]

    def to_table(self, tablefmt: str = "simple", path_limit: int = 9) -> str:
        """The walks as a text table; paths longer than ``path_limit`` nodes are elided in the middle."""
        rows = [
            [
                one.strategy,
                one.failure or "ok",
                one.turns,
                "" if one.ending is None else str(one.ending),
                one.outcome or "",
                _path_preview(one.path, path_limit),
            ]
            for one in self.walks
        ]
        headers = ["strategy", "result", "turns", "ending", "outcome", "path"]
        return tabulate(rows, headers=headers, tablefmt=tablefmt)

    def __str__(self) -> str:
        return self.to_table()


# ---------------------------------------------------------------------------------------------
# internals


class _Board:
    """The graph with its choices ranked once, shared by every walk of one :func:`walk_all` call."""

    def __init__(self, graph: nx.DiGraph, tiers: Sequence[str]) -> None:
        self.graph = graph
        self._ranks = tier_ranks(tiers)
        self._unranked = len(tiers)
        self._choices: dict[Hashable, tuple[Choice, ...]] = {}

    def choices(self, node: Hashable) -> tuple[Choice, ...]:
        found = self._choices.get(node)
        if found is None:
            found = tuple(
                Choice(
                    source=node,
                    target=target,
                    tier=data.get("tier"),
                    label=data.get("label"),
                    rank=self._rank(data.get("tier")),
                    index=index,
                    attrs=data,
                )
                for index, (target, data) in enumerate(self.graph.succ[node].items())
            )
            self._choices[node] = found
        return found

    def _rank(self, tier: object) -> int:
        if isinstance(tier, str):
            return self._ranks.get(tier, self._unranked)
        return self._unranked


def freeze_state(state: Any) -> Hashable:
    """A hashable stand-in for ``state``: dicts, lists, sets and dataclasses are converted recursively.

    Example::

        >>> freeze_state({"trust": 2, "seen": ["s1"]})
        (('seen', ('s1',)), ('trust', 2))
    """
    if isinstance(state, Mapping):
        return tuple(sorted(((freeze_state(k), freeze_state(v)) for k, v in state.items()), key=repr))
    if isinstance(state, list | tuple):
        return tuple(freeze_state(item) for item in state)
    if isinstance(state, set | frozenset):
        return frozenset(freeze_state(item) for item in state)
    try:
        hash(state)
    except TypeError:
        if dataclasses.is_dataclass(state) and not isinstance(state, type):
            return (type(state).__name__, freeze_state(dataclasses.asdict(state)))
        raise TypeError(
            f"walker state of type {type(state).__name__} is not hashable; use a hashable value, "
            "or dicts, lists, sets and dataclasses of them"
        ) from None
    return state  # type: ignore[no-any-return]  # hash() succeeded, so it is Hashable


def _offered(choice: Choice, state: Any) -> bool:
    when = choice.attrs.get("when")
    if when is None:
        return True
    if not callable(when):
        raise TypeError(f"'when' on choice {choice.source} → {choice.target} must be callable, not {when!r}")
    return bool(when(state))


def _best(node: Hashable, available: Sequence[Choice], state: Any, turn: int) -> Choice:
    # min() keeps the first of equals, so ties go to the earliest choice in edge order.
    return min(available, key=lambda c: c.rank)


def _worst(node: Hashable, available: Sequence[Choice], state: Any, turn: int) -> Choice:
    return max(available, key=lambda c: c.rank)


def _alternating(node: Hashable, available: Sequence[Choice], state: Any, turn: int) -> Choice:
    return (_best if turn % 2 == 0 else _worst)(node, available, state, turn)


def _seeded(seed: int) -> ChooseFn:
    rng = random.Random(seed)

    def pick(node: Hashable, available: Sequence[Choice], state: Any, turn: int) -> Choice:
        return available[rng.randrange(len(available))]

    return pick


def _as_choice(picked: object, available: Sequence[Choice], name: str, node: Hashable) -> Choice:
    if isinstance(picked, Choice) and picked in available:
        return picked
    for choice in available:
        if choice.target == picked:
            return choice
    offered = ", ".join(str(c.target) for c in available)
    raise ValueError(f"strategy {name} picked {picked!r} at {node}; the choices on offer lead to: {offered}")


def _resolve_strategy(strategy: StrategySpec, seed: int) -> tuple[str, ChooseFn, bool]:
    """``(name, pick, detect revisits by default)``; random walks are not memoryless, so no revisits."""
    if isinstance(strategy, tuple):
        return strategy[0], strategy[1], True
    if callable(strategy):
        return getattr(strategy, "__name__", "custom"), strategy, True
    table: dict[str, ChooseFn] = {"best": _best, "worst": _worst, "alternating": _alternating}
    if strategy in table:
        return strategy, table[strategy], True
    if strategy == "random":
        return f"random(seed={seed})", _seeded(seed), False
    raise ValueError(
        f"unknown strategy {strategy!r}; use one of {', '.join(BUILTIN_STRATEGIES)} or a callable"
    )


def _expected(expect: str | Collection[str] | None) -> frozenset[str] | None:
    if expect is None:
        return None
    return frozenset([expect]) if isinstance(expect, str) else frozenset(expect)


def _play(
    board: _Board,
    start: Hashable | None,
    name: str,
    pick: ChooseFn,
    *,
    alternating: bool,
    state: Any,
    update: UpdateFn | None,
    max_turns: int,
    min_turns: int,
    detect_revisits: bool,
    expect: frozenset[str] | None,
    ignore_when: bool = False,
) -> Walk:
    graph = board.graph
    if start is None or start not in graph:
        why = "no start node given" if start is None else f"start node {start} is not in the graph"
        return Walk(name, (), (), None, None, "missing_start", why, state)
    state = copy.deepcopy(state)
    path: list[Hashable] = [start]
    taken: list[Choice] = []
    seen: dict[Hashable, int] = {}
    node = start
    while True:
        turn = len(taken)
        if is_ending(graph, node):
            return _ended(graph, node, turn, min_turns, expect, name, path, taken, state)
        choices = board.choices(node)
        available = choices if ignore_when else [c for c in choices if _offered(c, state)]
        if not available:
            why = (
                "no choices"
                if not choices
                else f"none of its {len(choices)} choices is offered in state {state!r}"
            )
            detail = f"dead end at {node} after {turn} turns: not an ending and {why}"
            return Walk(name, tuple(path), tuple(taken), None, None, "dead_end", detail, state)
        if detect_revisits:
            # Alternating play depends on the turn's parity, so the same node and state only repeat
            # the future when the parity matches too.
            key = (node, freeze_state(state), turn % 2 if alternating else 0)
            if key in seen:
                cycle = " → ".join(str(n) for n in path[seen[key] :])
                detail = f"revisited {node} in the same state after {turn} turns (cycle {cycle})"
                return Walk(name, tuple(path), tuple(taken), None, None, "loop", detail, state)
            seen[key] = turn
        if turn >= max_turns:
            tail = " → ".join(str(n) for n in path[-5:])
            detail = f"turn budget of {max_turns} exhausted without an ending (last: {tail})"
            return Walk(name, tuple(path), tuple(taken), None, None, "loop", detail, state)
        choice = _as_choice(pick(node, available, state, turn), available, name, node)
        if update is not None:
            state = update(state, choice)
        taken.append(choice)
        path.append(choice.target)
        node = choice.target


def _ended(
    graph: nx.DiGraph,
    node: Hashable,
    turn: int,
    min_turns: int,
    expect: frozenset[str] | None,
    name: str,
    path: list[Hashable],
    taken: list[Choice],
    state: Any,
) -> Walk:
    """The walk that reached an ending: a failure when it came too early or with the wrong outcome."""
    outcome = outcome_of(graph, node)
    reached = f"reached {node} ({outcome}) after {turn} turns"
    failure: WalkFailure | None = None
    if turn < min_turns:
        failure, reached = "early_ending", f"{reached}; min_turns is {min_turns}"
    elif expect is not None and outcome not in expect:
        failure, reached = "wrong_outcome", f"{reached}; expected {' or '.join(sorted(expect))}"
    return Walk(name, tuple(path), tuple(taken), node, outcome, failure, reached, state)


def _budget(graph: nx.DiGraph, max_turns: int | None) -> int:
    # Four passes over every scene is far beyond any story a player should sit through.
    return max(100, 4 * graph.number_of_nodes()) if max_turns is None else max_turns


# ---------------------------------------------------------------------------------------------
# public API


def walk(
    graph: GraphLike,
    start: Hashable | None = None,
    strategy: StrategySpec = "best",
    *,
    seed: int = 0,
    tiers: Sequence[str] = DEFAULT_TIERS,
    max_turns: int | None = None,
    min_turns: int = 0,
    state: Any = None,
    update: UpdateFn | None = None,
    expect_outcome: str | Collection[str] | None = None,
    detect_revisits: bool | None = None,
) -> Walk:
    """Play ``graph`` from ``start`` with one strategy and report the path and the ending or failure.

    ``max_turns`` defaults to ``max(100, 4 × nodes)``. ``detect_revisits`` (default: on, except for
    ``"random"``) stops a walk as a ``loop`` as soon as it is at a node it was at before with the same
    state, which for a strategy that decides from (node, state) means it would circle forever; turn
    it off for a callable that also decides from the turn number or from memory of its own.

    Example::

        >>> spec = {"start": "a", "nodes": {
        ...     "a": {"choices": [{"to": "b", "tier": "optimal"}, {"to": "a", "tier": "wrong"}]},
        ...     "b": {"ending": True, "outcome": "success"}}}
        >>> walk(spec, strategy="best").outcome
        'success'
        >>> print(walk(spec, strategy="worst"))
        worst: loop: revisited a in the same state after 1 turns (cycle a → a)
    """
    g, start, _ = resolve(graph, start)
    name, pick, revisits = _resolve_strategy(strategy, seed)
    return _play(
        _Board(g, tiers),
        start,
        name,
        pick,
        alternating=strategy == "alternating",
        state=state,
        update=update,
        max_turns=_budget(g, max_turns),
        min_turns=min_turns,
        detect_revisits=revisits if detect_revisits is None else detect_revisits,
        expect=_expected(expect_outcome),
    )


def walk_all(
    graph: GraphLike,
    start: Hashable | None = None,
    strategies: Iterable[StrategySpec] = DEFAULT_STRATEGIES,
    *,
    seeds: Iterable[int] = (0, 1, 2),
    tiers: Sequence[str] = DEFAULT_TIERS,
    max_turns: int | None = None,
    min_turns: int | Mapping[str, int] = 0,
    state: Any = None,
    update: UpdateFn | None = None,
    expect: Mapping[str, str | Collection[str]] | None = None,
    detect_revisits: bool | None = None,
) -> WalkTable:
    """Walk every strategy (``"random"`` once per seed) and return the table of results.

    ``expect`` maps a strategy name (``"random"`` covers every seed) to the outcome(s) it must reach,
    e.g. ``{"best": "success", "worst": {"failure", "partial"}}``. ``min_turns`` is one number for
    every strategy or such a mapping (``{"best": 4}``: a failing player may well lose fast, but
    optimal play that ends early is content starvation); strategies it does not name get 0.

    Example::

        table = walk_all(story, min_turns=4, expect={"best": "success"})
        print(table)          # strategy | result | turns | ending | outcome | path
        assert table.ok, [str(w) for w in table.failures]
    """
    g, start, _ = resolve(graph, start)
    board = _Board(g, tiers)
    budget = _budget(g, max_turns)
    seed_list = list(seeds)
    expect = expect or {}
    walks: list[Walk] = []
    for strategy in strategies:
        for seed in seed_list if strategy == "random" else [0]:
            name, pick, revisits = _resolve_strategy(strategy, seed)
            base = strategy if isinstance(strategy, str) else name
            wanted = expect.get(name, expect.get(base))
            shortest = (
                min_turns if isinstance(min_turns, int) else min_turns.get(name, min_turns.get(base, 0))
            )
            walks.append(
                _play(
                    board,
                    start,
                    name,
                    pick,
                    alternating=strategy == "alternating",
                    state=state,
                    update=update,
                    max_turns=budget,
                    min_turns=shortest,
                    detect_revisits=revisits if detect_revisits is None else detect_revisits,
                    expect=_expected(wanted),
                )
            )
    return WalkTable(walks)


def format_walk_failures(table: WalkTable, subject: str = "the scene graph") -> str:
    """One line per failing walk, then the whole table, as :func:`assert_walks_ok` prints it."""
    failed = table.failures
    lines = [f"{len(failed)} of {len(table)} walks failed on {subject}:"]
    lines += [f"  - {one}" for one in failed]
    return "\n".join([*lines, "", table.to_table()])


def assert_walks_ok(
    graph: GraphLike,
    start: Hashable | None = None,
    strategies: Iterable[StrategySpec] = DEFAULT_STRATEGIES,
    *,
    subject: str = "the scene graph",
    seeds: Iterable[int] = (0, 1, 2),
    tiers: Sequence[str] = DEFAULT_TIERS,
    max_turns: int | None = None,
    min_turns: int | Mapping[str, int] = 0,
    state: Any = None,
    update: UpdateFn | None = None,
    expect: Mapping[str, str | Collection[str]] | None = None,
    detect_revisits: bool | None = None,
) -> WalkTable:
    """Walk every strategy and fail the test listing each failing one; returns the table when all pass.

    Example::

        @pytest.mark.gate
        def test_story_plays(story):
            assert_walks_ok(story, min_turns={"best": 4}, expect={"best": "success", "worst": "failure"})
    """
    __tracebackhide__ = True
    table = walk_all(
        graph,
        start,
        strategies,
        seeds=seeds,
        tiers=tiers,
        max_turns=max_turns,
        min_turns=min_turns,
        state=state,
        update=update,
        expect=expect,
        detect_revisits=detect_revisits,
    )
    if not table.ok:
        raise AssertionError(format_walk_failures(table, subject))
    return table


def spine(
    graph: GraphLike, start: Hashable | None = None, *, tiers: Sequence[str] = DEFAULT_TIERS
) -> list[Hashable]:
    """The main path: where best play goes from ``start``, ignoring state and ``when`` guards.

    It stops at an ending, a dead end or the first revisited node, so it is always finite.

    Example::

        >>> spec = {"start": "a", "nodes": {"a": {"choices": [{"to": "x", "tier": "wrong"},
        ...     {"to": "b", "tier": "optimal"}]}, "b": {"ending": True}, "x": {"ending": True}}}
        >>> spine(spec)
        ['a', 'b']
    """
    g, start, _ = resolve(graph, start)
    if start is None or start not in g:
        return []
    played = _play(
        _Board(g, tiers),
        start,
        "best",
        _best,
        alternating=False,
        state=None,
        update=None,
        max_turns=g.number_of_nodes() + 1,
        min_turns=0,
        detect_revisits=True,
        expect=None,
        ignore_when=True,
    )
    path = list(played.path)
    # A loop ends on the node it revisited; the spine lists each node once.
    return path[:-1] if played.failure == "loop" else path
