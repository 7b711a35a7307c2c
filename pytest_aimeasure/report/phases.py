"""Grouping a report by phase: a table per phase, so a structure-phase reliability failure and a
content-phase quality limit read apart.

A dimension's phase comes from its marker (``@pytest.mark.dimension(..., phase="content")``) or its
suite dimension (``phase: content``); a gate's from ``@pytest.mark.gate(phase="structure")``. Phases
are shown in the order they first appear in the results; dimensions and gates without one come last,
under "no phase". Nothing is grouped when no phase is set anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pytest_aimeasure.measure.models import ItemResult
from pytest_aimeasure.measure.repeats import gate_counts

NO_PHASE = "no phase"


@dataclass
class Phase:
    """One phase's share of a session: its dimensions, and its gates counted over outputs."""

    name: str | None
    dimensions: list[str] = field(default_factory=list)
    gates: int = 0
    gates_failed: int = 0
    outputs: int = 0
    valid_outputs: int = 0

    @property
    def title(self) -> str:
        return f"phase {self.name}" if self.name is not None else NO_PHASE

    @property
    def heading(self) -> str:
        """The title at the start of a heading; the phase's name keeps its case ("Phase JSON")."""
        return f"Phase {self.name}" if self.name is not None else NO_PHASE.capitalize()

    def gate_text(self) -> str | None:
        """ "2 gates (1 failed), 5/6 outputs valid", or None without gates."""
        if not self.gates:
            return None
        text = f"{self.gates} gate{'s' if self.gates != 1 else ''} ({self.gates_failed} failed)"
        if self.outputs:
            text += f", {self.valid_outputs}/{self.outputs} outputs valid"
        return text


def gate_phase(result: ItemResult) -> str | None:
    value = result.extra.get("phase")
    return value if isinstance(value, str) and value else None


def phases(results: Iterable[ItemResult], dimension_names: Sequence[str] | None = None) -> list[Phase]:
    """The session's phases, or ``[]`` when no dimension or gate has one. ``dimension_names`` limits
    (and orders, within a phase) the dimensions listed."""
    items = list(results)
    by_name: dict[str | None, Phase] = {}
    order: list[str | None] = []
    dim_phase: dict[str, str | None] = {}

    def phase(name: str | None) -> Phase:
        if name not in by_name:
            by_name[name] = Phase(name)
            order.append(name)
        return by_name[name]

    for r in items:
        for m in r.measurements:
            if m.dimension not in dim_phase or (dim_phase[m.dimension] is None and m.phase):
                dim_phase[m.dimension] = m.phase
    if not any(dim_phase.values()) and not any(gate_phase(r) for r in items if r.kind == "gate"):
        return []
    for r in items:
        for m in r.measurements:
            phase(dim_phase[m.dimension])
        if r.kind == "gate":
            p = phase(gate_phase(r))
            p.gates += 1
            p.gates_failed += 1 if r.outcome in ("failed", "error") else 0
            for check in gate_counts(r.extra):
                p.outputs += int(check.get("total", 0))
                p.valid_outputs += int(check.get("passed", 0))
    names = list(dimension_names) if dimension_names is not None else sorted(dim_phase)
    for name in names:
        if name in dim_phase:
            phase(dim_phase[name]).dimensions.append(name)
    ordered = [by_name[n] for n in order if n is not None]
    if None in by_name:
        ordered.append(by_name[None])
    return [p for p in ordered if p.dimensions or p.gates]
