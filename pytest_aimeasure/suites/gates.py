"""Deterministic gates on a suite output: cheap checks that run before the judge is paid for.

Each gate returns a list of problems (empty = passed). Messages quote what they found, with its
position, so a failure can be fixed without re-running anything.

The ``json_schema`` gate is JSON Schema itself, through the ``jsonschema`` library
(:mod:`pytest_aimeasure.suites.schema`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_aimeasure.suites.callables import call_accepting
from pytest_aimeasure.suites.schema import check_json_schema
from pytest_aimeasure.suites.spec import GateSpec, JsonGate, LengthGate, RegexGate

__all__ = ["GateResult", "check_json_schema", "run_gate", "run_gates", "text_counts"]

CONTEXT_CHARS = 30
FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


@dataclass
class GateResult:
    name: str
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"gate": self.name, "problems": list(self.problems)}


def text_counts(text: str) -> dict[str, int]:
    """Sizes computed in code, used by length gates and handed to the judge as facts."""
    return {
        "characters": len(text),
        "words": len(text.split()),
        "lines": sum(1 for line in text.splitlines() if line.strip()),
    }


def _around(text: str, start: int, end: int) -> str:
    left = max(start - CONTEXT_CHARS, 0)
    right = min(end + CONTEXT_CHARS, len(text))
    snippet = " ".join(text[left:right].split())
    return ("…" if left else "") + snippet + ("…" if right < len(text) else "")


def check_length(gate: LengthGate, text: str) -> list[str]:
    counts = text_counts(text)
    out: list[str] = []
    for unit, counted in (
        ("chars", counts["characters"]),
        ("words", counts["words"]),
        ("lines", counts["lines"]),
    ):
        low, high = getattr(gate, f"min_{unit}"), getattr(gate, f"max_{unit}")
        if low is not None and counted < low:
            out.append(f"{counted} {unit} < min_{unit} {low}")
        if high is not None and counted > high:
            out.append(f"{counted} {unit} > max_{unit} {high}")
    return out


def _find(text: str, needle: str, case_sensitive: bool) -> int:
    return text.find(needle) if case_sensitive else text.lower().find(needle.lower())


def check_include(needles: list[str], text: str, *, case_sensitive: bool) -> list[str]:
    return [f"missing {needle!r}" for needle in needles if _find(text, needle, case_sensitive) < 0]


def check_exclude(needles: list[str], text: str, *, case_sensitive: bool) -> list[str]:
    out: list[str] = []
    for needle in needles:
        at = _find(text, needle, case_sensitive)
        if at >= 0:
            out.append(f"found {needle!r} at char {at}: {_around(text, at, at + len(needle))!r}")
    return out


def check_regex(gate: RegexGate, text: str) -> list[str]:
    pattern = gate.compiled()
    if gate.mode == "fullmatch":
        matched = pattern.fullmatch(text.strip()) is not None
        if gate.absent and matched:
            return [f"the whole output matches /{gate.pattern}/"]
        if not gate.absent and not matched:
            return [f"the whole output does not match /{gate.pattern}/"]
        return []
    found = pattern.search(text)
    if gate.absent and found is not None:
        return [
            f"/{gate.pattern}/ found at char {found.start()}: {_around(text, found.start(), found.end())!r}"
        ]
    if not gate.absent and found is None:
        return [f"/{gate.pattern}/ not found"]
    return []


def parse_json(gate: JsonGate, text: str) -> tuple[Any, str | None]:
    """(value, None) or (None, the problem)."""
    body = text
    if gate.strip_fences:
        fenced = FENCE.match(text)
        if fenced:
            body = fenced.group(1)
    try:
        return json.loads(body), None
    except ValueError as exc:
        hint = (
            " (it is wrapped in a ``` fence; set strip_fences: true to allow that)"
            if FENCE.match(text)
            else ""
        )
        return None, f"not valid JSON: {exc}{hint}"


def check_callable(fn: Callable[..., Any], text: str, context: dict[str, Any]) -> list[str]:
    """A user's check: ``fn(text)`` (optionally taking ``context=``, or any of its keys) returns True /
    False, or a list of problems (empty = passed), or one problem as a string."""
    try:
        result = call_accepting(fn, text, {"context": context, **context})
    except Exception as exc:  # a crashing check must fail its gate, not the session
        return [f"raised {type(exc).__name__}: {exc}"]
    if result is True:
        return []
    if result is False:
        return ["returned False"]
    if isinstance(result, str):
        return [result] if result.strip() else []
    if isinstance(result, (list, tuple)):
        return [str(p) for p in result]
    return [f"returned {type(result).__name__} {result!r}; return True/False or a list of problems"]


def run_gate(
    gate: GateSpec,
    text: str,
    *,
    context: dict[str, Any],
    resolve: Callable[[str], Callable[..., Any]],
) -> GateResult:
    result = GateResult(gate.label())
    if gate.length is not None:
        result.problems = check_length(gate.length, text)
    elif gate.must_include is not None:
        result.problems = check_include(gate.must_include, text, case_sensitive=gate.case_sensitive)
    elif gate.must_not_include is not None:
        result.problems = check_exclude(gate.must_not_include, text, case_sensitive=gate.case_sensitive)
    elif gate.regex is not None:
        result.problems = check_regex(gate.regex, text)
    elif gate.json_ is not None:
        result.problems = [p for p in [parse_json(gate.json_, text)[1]] if p]
    elif gate.json_schema is not None:
        value, problem = parse_json(JsonGate(), text)
        result.problems = [problem] if problem else check_json_schema(value, gate.json_schema)
    elif gate.callable_ is not None:
        result.problems = check_callable(resolve(gate.callable_), text, context)
    return result


def run_gates(
    gates: list[GateSpec],
    text: str,
    *,
    context: dict[str, Any],
    resolve: Callable[[str], Callable[..., Any]],
) -> list[GateResult]:
    """Every gate's result, in order (all gates run, so one failure report lists every problem)."""
    return [run_gate(g, text, context=context, resolve=resolve) for g in gates]
