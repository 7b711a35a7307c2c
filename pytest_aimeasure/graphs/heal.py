"""Self-healing generation: validate, feed the errors back, retry, and repair deterministically.

A validator that nobody consumes enforces nothing: a generator can be told "scene 7 is unreachable"
and return the broken outline anyway. :func:`heal` closes that loop. Each attempt's specific errors
go into the next attempt; when the attempts run out, an optional pure repair gets the last output.
Retries and repairs are recorded as findings (kinds ``"retry"`` and ``"repair"``, severity ``"warn"``)
against the running test, so a green run that only passed because something was patched shows up in
the session report.

For scene graphs, :func:`repair_unreachable` splices orphaned scenes back onto the main path, and
:func:`unreachable_repair` wraps it for :func:`heal`::

    from pytest_aimeasure.graphs.graph import graph_validator
    from pytest_aimeasure.graphs.heal import heal, unreachable_repair

    healed = heal(
        lambda errors: generate_story(premise, fix=errors),
        graph_validator(required_outcomes={"success", "failure"}),
        repair=unreachable_repair(),
        name="story-7",
    )
    story = healed.value
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar

import networkx as nx

from pytest_aimeasure.graphs.graph import (
    DEFAULT_TIERS,
    GraphLike,
    format_nodes,
    graph_from_dict,
    is_ending,
    play_view,
    reachable_nodes,
    resolve,
)
from pytest_aimeasure.graphs.walker import spine
from pytest_aimeasure.measure.runtime import record_finding

T = TypeVar("T")

Repair: TypeAlias = Callable[[T, list[str]], tuple[T, list[str]]]
"""``repair(value, errors) -> (repaired value, notes)``: one note per change, none when nothing changed."""


@dataclass
class Healed(Generic[T]):
    """What :func:`heal` produced and what it took.

    ``errors_by_attempt[i]`` are the validation errors of attempt ``i + 1`` (empty for the attempt that
    passed); ``repaired`` is true when the repair changed the value, and ``repair_notes`` says how.
    ``remaining_errors`` is empty on anything :func:`heal` returns; :class:`HealError` carries the rest.
    """

    value: T
    name: str
    attempts: int
    errors_by_attempt: list[list[str]]
    repaired: bool = False
    repair_notes: list[str] = field(default_factory=list)
    remaining_errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.remaining_errors

    def summary(self) -> str:
        """One line for logs, e.g. ``story-7: ok after 2 attempts, repaired (1 note)``."""
        plural = "" if self.attempts == 1 else "s"
        text = f"{self.name}: {'ok' if self.ok else 'invalid'} after {self.attempts} attempt{plural}"
        if self.repaired:
            text += f", repaired ({len(self.repair_notes)} note{'' if len(self.repair_notes) == 1 else 's'})"
        return text


class HealError(Exception):
    """Validation still failed after every attempt (and the repair, if any).

    ``.healed`` holds the full history; its ``value`` is the last output (``None`` when every attempt
    raised one of ``retry_on``) and ``remaining_errors`` lists what is still wrong.
    """

    def __init__(self, healed: Healed[Any]) -> None:
        self.healed = healed
        tried = f"{healed.attempts} attempt{'' if healed.attempts == 1 else 's'}"
        if healed.repaired:
            tried += " and a repair"
        lines = [f"{healed.name} is still invalid after {tried}:"]
        lines += [f"  - {error}" for error in healed.remaining_errors]
        super().__init__("\n".join(lines))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def heal(
    generate: Callable[[list[str]], T],
    validate: Callable[[T], Iterable[object]],
    *,
    repair: Repair[T] | None = None,
    attempts: int = 3,
    name: str = "artifact",
    retry_on: tuple[type[Exception], ...] = (),
) -> Healed[T]:
    """Generate until the output validates, feeding each attempt's errors into the next.

    ``generate(errors)`` gets the previous attempt's errors (``[]`` the first time); ``validate``
    returns the errors of an output (anything ``str()``-able; empty means valid). After ``attempts``
    failures, ``repair(last output, its errors)`` is applied once and the result validated again.
    An exception of a ``retry_on`` type raised by ``generate`` (say, a JSON decode error) counts as
    that attempt's error. When errors remain, :class:`HealError` is raised: an artifact that breaks
    the contract must not flow on quietly, and the exception carries the history for whoever wants it.

    Example::

        >>> def generate(errors):
        ...     return "fixed" if errors else "broken"
        >>> def validate(text):
        ...     return [] if text == "fixed" else ["text is broken"]
        >>> healed = heal(generate, validate, name="demo")
        >>> healed.value, healed.attempts, healed.errors_by_attempt
        ('fixed', 2, [['text is broken'], []])
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    run = _attempt(generate, validate, attempts, retry_on)
    if len(run.history) > 1:
        first = run.history[0][0]
        tries = len(run.history)
        told = f"needed {tries} attempts" if not run.errors else f"failed all {tries} attempts"
        record_finding(
            "retry",
            f"{name} {told}: {first}",
            subject=name,
            severity="warn",
            detail={"attempts": tries, "errors_by_attempt": run.history},
        )
    value, errors, history = run.value, run.errors, run.history
    notes: list[str] = []
    if errors and repair is not None and run.produced:
        value, notes, errors = _repair(value, run.value_errors, repair, validate, name)  # type: ignore[arg-type]
    healed: Healed[Any] = Healed(
        value=value,
        name=name,
        attempts=len(history),
        errors_by_attempt=history,
        repaired=bool(notes),
        repair_notes=notes,
        remaining_errors=errors,
    )
    if errors:
        raise HealError(healed)
    return healed


@dataclass
class _Attempts(Generic[T]):
    """What the generate/validate loop left: the last valid-or-not output and every attempt's errors."""

    value: T | None
    produced: bool
    value_errors: list[str]
    """The errors of ``value``, which a later raising attempt must not replace."""
    errors: list[str]
    history: list[list[str]]


def _attempt(
    generate: Callable[[list[str]], T],
    validate: Callable[[T], Iterable[object]],
    attempts: int,
    retry_on: tuple[type[Exception], ...],
) -> _Attempts[T]:
    run: _Attempts[T] = _Attempts(value=None, produced=False, value_errors=[], errors=[], history=[])
    feedback: list[str] = []
    for _ in range(attempts):
        try:
            candidate = generate(list(feedback))
        except retry_on as exc:
            run.errors = [_describe(exc)]
        else:
            run.errors = [str(error) for error in validate(candidate)]
            run.value, run.value_errors, run.produced = candidate, run.errors, True
        run.history.append(run.errors)
        if not run.errors:
            break
        feedback = run.errors
    return run


def _repair(
    value: T, value_errors: list[str], repair: Repair[T], validate: Callable[[T], Iterable[object]], name: str
) -> tuple[T, list[str], list[str]]:
    """Apply ``repair`` once to the last output; its notes become a finding. Returns the repaired
    value, the notes and the errors left."""
    repaired, notes = repair(value, list(value_errors))
    notes = list(notes)
    errors = [str(error) for error in validate(repaired)]
    if notes:
        record_finding(
            "repair",
            f"repaired {name}: {'; '.join(notes)}",
            subject=name,
            severity="warn",
            detail={"notes": notes, "errors_before": value_errors, "errors_after": errors},
        )
    return repaired, notes, errors


# ---------------------------------------------------------------------------------------------
# graph repair


@dataclass(frozen=True)
class _Splice:
    anchor: Hashable
    entry: Hashable
    reconnects: tuple[Hashable, ...]

    def note(self) -> str:
        return (
            f"new choice {self.anchor} → {self.entry} reconnects unreachable {format_nodes(self.reconnects)}"
        )


def _plan_splices(
    graph: nx.DiGraph,
    start: Hashable | None,
    tiers: Sequence[str],
    unusable: frozenset[Hashable] = frozenset(),
) -> list[_Splice]:
    """The new choices that make every node reachable, decided by graph order alone.

    Each orphaned region is entered through its source components (strongly connected parts no
    other orphan leads into); one new choice per source component is the fewest that can work.
    """
    if start is None or start not in graph:
        return []
    reachable = reachable_nodes(graph, start)
    lost = [node for node in graph if node not in reachable]
    if not lost:
        return []
    order = {node: position for position, node in enumerate(graph)}
    main = [n for n in spine(graph, start, tiers=tiers) if not is_ending(graph, n) and n not in unusable]
    if not main:
        # Best play has nowhere to hang a choice (it starts at an unusable node); fall back to any
        # reachable non-ending, nearest to the start first.
        near = nx.single_source_shortest_path_length(play_view(graph), start)
        main = [n for n in near if not is_ending(graph, n) and n not in unusable]
    if not main:
        return []  # only endings are reachable; making one non-terminal would change the story's end

    orphans = play_view(graph).subgraph(lost)
    parts = nx.condensation(orphans)
    entries = sorted(
        (
            min(parts.nodes[part]["members"], key=order.__getitem__)
            for part in parts
            if not parts.in_degree(part)
        ),
        key=order.__getitem__,
    )
    added: dict[Hashable, int] = {}
    claimed: set[Hashable] = set()
    splices: list[_Splice] = []
    for entry in entries:
        # Prefer the spine scene with the fewest choices (a linear scene becomes a real decision);
        # ties go to the earliest on the spine.
        anchor = min(main, key=lambda n: (graph.out_degree(n) + added.get(n, 0), main.index(n)))
        added[anchor] = added.get(anchor, 0) + 1
        region = nx.descendants(orphans, entry) | {entry}
        reconnects = tuple(sorted(region - claimed, key=order.__getitem__))
        claimed |= region
        splices.append(_Splice(anchor, entry, reconnects))
    return splices


def _splice_attrs(entry: Hashable, tier: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"label": f"continue to {entry}", "repaired": True}
    if tier is not None:
        attrs["tier"] = tier
    return attrs


def repair_unreachable(
    graph: nx.DiGraph,
    start: Hashable | None = None,
    *,
    tiers: Sequence[str] = DEFAULT_TIERS,
    tier: str | None = "acceptable",
) -> tuple[nx.DiGraph, list[str]]:
    """Splice unreachable nodes back into the main path; returns a new graph and one note per splice.

    The main path is where best play goes (:func:`pytest_aimeasure.graphs.walker.spine`). Every orphaned
    region gets one new choice per entry point, from the spine's non-ending scene with the fewest
    choices (earliest on ties), carrying ``tier`` (default ``"acceptable"``: a detour, neither the
    best nor the worst move), ``label="continue to <entry>"`` and ``repaired=True``. Endings are never
    given choices and nothing is removed. On a healthy graph it returns an equal copy and no notes;
    the input is never modified. When the start is missing or is itself an ending there is nothing to
    splice onto, so the copy comes back unchanged and the validator still reports the problem.

    Example::

        >>> g = nx.DiGraph([("s1", "s2"), ("s2", "end"), ("s4", "end")])
        >>> g.nodes["end"]["ending"] = True
        >>> fixed, notes = repair_unreachable(g, "s1")
        >>> notes
        ['new choice s1 → s4 reconnects unreachable s4']
    """
    g, start, _ = resolve(graph, start)
    fixed = g.copy()
    splices = _plan_splices(g, start, tiers)
    for splice in splices:
        fixed.add_edge(splice.anchor, splice.entry, **_splice_attrs(splice.entry, tier))
    return fixed, [splice.note() for splice in splices]


def repair_unreachable_spec(
    spec: Mapping[str, Any],
    start: Hashable | None = None,
    *,
    tiers: Sequence[str] = DEFAULT_TIERS,
    tier: str | None = "acceptable",
) -> tuple[dict[str, Any], list[str]]:
    """:func:`repair_unreachable` for the dict form: the splices are appended to a deep copy's choices.

    Repairing the dict (rather than converting, repairing and converting back) keeps every other
    problem of the spec, such as a dangling choice, in place for the validator to report.

    Example::

        >>> spec = {"start": "s1", "nodes": {"s1": {"choices": [{"to": "end"}]},
        ...         "s4": {"choices": [{"to": "end"}]}, "end": {"ending": True}}}
        >>> fixed, notes = repair_unreachable_spec(spec)
        >>> fixed["nodes"]["s1"]["choices"][-1]
        {'to': 's4', 'label': 'continue to s4', 'repaired': True, 'tier': 'acceptable'}
    """
    out: dict[str, Any] = copy.deepcopy(dict(spec))
    converted = graph_from_dict(out)
    start = converted.start if start is None else start
    bodies: dict[Hashable, dict[str, Any]] = {}
    nodes = out.get("nodes")
    if isinstance(nodes, dict):
        for node_id, body in nodes.items():
            if body is None:
                nodes[node_id] = body = {}
            if isinstance(body, dict):
                bodies.setdefault(node_id, body)
    elif isinstance(nodes, list):
        for body in nodes:
            if isinstance(body, dict) and body.get("id") in converted.graph:
                bodies.setdefault(body["id"], body)
    # A node whose "choices" is not a list cannot take one more; leave it to the validator.
    unusable = frozenset(
        node
        for node in converted.graph
        if node not in bodies or not isinstance(bodies[node].get("choices", []), list | type(None))
    )
    splices = _plan_splices(converted.graph, start, tiers, unusable)
    for splice in splices:
        body = bodies[splice.anchor]
        if body.get("choices") is None:
            body["choices"] = []
        body["choices"].append({"to": splice.entry, **_splice_attrs(splice.entry, tier)})
    return out, [splice.note() for splice in splices]


def unreachable_repair(
    start: Hashable | None = None,
    *,
    tiers: Sequence[str] = DEFAULT_TIERS,
    tier: str | None = "acceptable",
) -> Callable[[GraphLike, list[str]], tuple[GraphLike, list[str]]]:
    """A ``repair`` for :func:`heal` that splices unreachable scenes of a DiGraph or a dict spec.

    Example::

        healed = heal(generate_story, graph_validator(), repair=unreachable_repair(), name="story-7")
    """

    def repair(value: GraphLike, errors: list[str]) -> tuple[GraphLike, list[str]]:
        if isinstance(value, nx.DiGraph):
            return repair_unreachable(value, start, tiers=tiers, tier=tier)
        return repair_unreachable_spec(value, start, tiers=tiers, tier=tier)

    return repair
