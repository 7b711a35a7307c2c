"""Loading a suite file (``*.aimeasure.yaml``): the checks, in order, and errors with line numbers.

A suite file is checked in three steps, and every problem is reported with the file, the line and
the field, all problems of a step at once:

1. YAML (:mod:`~pytest_aimeasure.suites.source`): syntax, duplicate keys (which YAML itself silently
   resolves to the last one), and aliases that would expand without bound;
2. the schema (:class:`~pytest_aimeasure.suites.spec.SuiteSpec`);
3. the cross-field rules (:func:`semantic_problems`): unique ids, known dimensions, defined
   variables, valid regular expressions, valid JSON schemas (:mod:`~pytest_aimeasure.suites.schema`).

Environment-dependent checks (is the target's provider known, can ``module:function`` be imported)
happen at collection, in :mod:`pytest_aimeasure.suites.collect`, with the same line mapping.

The format's models live in :mod:`~pytest_aimeasure.suites.spec`; the ones a suite's user meets are
re-exported here, next to the functions that load them.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pytest_aimeasure.suites.schema import schema_problems
from pytest_aimeasure.suites.source import (
    Loc,
    LocatedProblem,
    SuiteFormatError,
    SuiteProblem,
    SuiteSource,
    format_loc,
    load_yaml,
)
from pytest_aimeasure.suites.spec import (
    NAME_HELP,
    VARIABLE,
    DimensionSpec,
    GateSpec,
    PromptSpec,
    SuiteSpec,
    TargetSpec,
    render_text,
)

__all__ = [
    "DimensionSpec",
    "GateSpec",
    "LoadedSuite",
    "PromptSpec",
    "SuiteFormatError",
    "SuiteProblem",
    "SuiteSpec",
    "TargetSpec",
    "format_loc",
    "load_suite",
    "parse_suite",
    "render_text",
    "semantic_problems",
]


@dataclass
class LoadedSuite:
    spec: SuiteSpec
    source: SuiteSource
    prompt_lines: dict[str, int] = field(default_factory=dict)

    def error(self, problems: Sequence[SuiteProblem]) -> SuiteFormatError:
        return SuiteFormatError(self.source.path, self.source.locate(problems))


def _annotation_models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _annotation_models(arg)


def _known_fields(loc: Loc) -> list[str]:
    """Field names (aliases) of the model found at ``loc`` in :class:`SuiteSpec`, for suggestions."""
    model: type[BaseModel] = SuiteSpec
    for part in loc:
        if isinstance(part, int):
            continue
        info = next((f for name, f in model.model_fields.items() if (f.alias or name) == part), None)
        if info is None:
            continue
        nested = list(_annotation_models(info.annotation))
        if not nested:
            return []
        model = nested[0]
    return [f.alias or name for name, f in model.model_fields.items()]


def _pydantic_problems(exc: ValidationError) -> list[SuiteProblem]:
    out: list[SuiteProblem] = []
    for err in exc.errors(include_url=False):
        loc: Loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and loc:
            known = _known_fields(loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            message = f"unknown field {loc[-1]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            if loc[0] == "targets" and len(loc) == 3 and not close:
                message += " (model parameters such as temperature or max_tokens go under 'params:')"
            elif known:
                message += f"; known fields: {', '.join(known)}"
        elif err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "string_pattern_mismatch" and loc and loc[-1] in ("callable",):
            message = "must look like 'module:function' (e.g. mypkg.generate:answer)"
        elif err["type"] == "string_pattern_mismatch":
            message = f"{err['input']!r} is not a valid name: use {NAME_HELP}"
        out.append(SuiteProblem(loc, message))
    return out


def _gate_problems(gates: list[GateSpec], loc: Loc) -> list[SuiteProblem]:
    out: list[SuiteProblem] = []
    for i, gate in enumerate(gates):
        if gate.regex is not None:
            try:
                gate.regex.compiled()
            except re.error as exc:
                out.append(SuiteProblem((*loc, i, "regex"), f"invalid regular expression: {exc}"))
        if gate.json_schema is not None:
            out += schema_problems(gate.json_schema, (*loc, i, "json_schema"))
    return out


def _duplicates(values: list[str]) -> dict[int, str]:
    seen: set[str] = set()
    out: dict[int, str] = {}
    for i, value in enumerate(values):
        if value in seen:
            out[i] = value
        seen.add(value)
    return out


def semantic_problems(spec: SuiteSpec) -> list[SuiteProblem]:
    """What the schema cannot see, in file order: names used twice, concurrency limits that
    disagree, gates, escalations to the dimension's own judge, and each prompt's references."""
    out = _duplicate_names(spec) + _concurrency_problems(spec) + _gate_problems(spec.gates, ("gates",))
    out += _escalation_problems(spec)
    for i, prompt in enumerate(spec.prompts):
        out += _prompt_problems(spec, i, prompt)
    return out


def _duplicate_names(spec: SuiteSpec) -> list[SuiteProblem]:
    out: list[SuiteProblem] = []
    names = [t.resolved_name for t in spec.targets]
    for i, name in _duplicates(names).items():
        where = ("targets", i, "name") if spec.targets[i].name else ("targets", i)
        out.append(
            SuiteProblem(where, f"target name {name!r} is used twice; give each target a short unique name")
        )
    for i, pid in _duplicates([p.id for p in spec.prompts]).items():
        out.append(SuiteProblem(("prompts", i, "id"), f"prompt id {pid!r} is used twice"))
    for i, dim in _duplicates([d.name for d in spec.dimensions]).items():
        out.append(SuiteProblem(("dimensions", i, "name"), f"dimension {dim!r} is defined twice"))
    return out


def _concurrency_problems(spec: SuiteSpec) -> list[SuiteProblem]:
    out: list[SuiteProblem] = []
    sizes: dict[str, tuple[int, int]] = {}
    for i, target in enumerate(spec.targets):
        if target.concurrency_key and target.concurrency is not None:
            first = sizes.setdefault(target.concurrency_key, (i, target.concurrency))
            if first[1] != target.concurrency:
                out.append(
                    SuiteProblem(
                        ("targets", i, "concurrency"),
                        f"targets sharing concurrency_key {target.concurrency_key!r} share one "
                        f"limit, but targets[{first[0]}] sets it to {first[1]}",
                    )
                )
    return out


def _escalation_problems(spec: SuiteSpec) -> list[SuiteProblem]:
    by_name = {d.name: d for d in spec.dimensions}
    escalations: list[tuple[tuple[str | int, ...], str | None, str | None]] = [
        (("dimensions", i, "escalate"), d.judge, d.escalate) for i, d in enumerate(spec.dimensions)
    ]
    for i, prompt in enumerate(spec.prompts):
        for j, ref in enumerate(prompt.dimensions or []):
            base = by_name.get(ref.name)
            judge = ref.judge or (base.judge if base is not None else None)
            escalate = ref.escalate or (base.escalate if base is not None else None)
            escalations.append((("prompts", i, "dimensions", j), judge, escalate))
    problem = "escalate {!r} is the dimension's own judge: name a stronger model"
    return [
        SuiteProblem(loc, problem.format(escalate))
        for loc, judge, escalate in escalations
        if escalate is not None and escalate == judge
    ]


def _prompt_problems(spec: SuiteSpec, i: int, prompt: PromptSpec) -> list[SuiteProblem]:
    """Prompt ``i``'s gates, undefined ``{{variables}}``, unknown dimensions and dimensions listed twice."""
    out = _gate_problems(prompt.gates, ("prompts", i, "gates"))
    variables = spec.variables_for(prompt)
    for text_field in ("text", "system"):
        for name in VARIABLE.findall(getattr(prompt, text_field) or ""):
            if name not in variables:
                out.append(
                    SuiteProblem(
                        ("prompts", i, text_field),
                        f"{{{{{name}}}}} is not defined: add it to the prompt's or the suite's variables",
                    )
                )
    known = {d.name for d in spec.dimensions}
    for j, ref in enumerate(prompt.dimensions or []):
        if ref.name not in known and ref.rubric is None:
            hint = f"; suite dimensions: {', '.join(sorted(known))}" if known else ""
            out.append(
                SuiteProblem(
                    ("prompts", i, "dimensions", j),
                    f"dimension {ref.name!r} is not defined in the suite's dimensions and "
                    f"has no rubric here{hint}",
                )
            )
    for j, dim in _duplicates([d.name for d in prompt.dimensions or []]).items():
        out.append(SuiteProblem(("prompts", i, "dimensions", j), f"dimension {dim!r} is listed twice"))
    return out


# -- loading -----------------------------------------------------------------------------------------
def parse_suite(text: str, path: Path | str = "<suite>") -> LoadedSuite:
    """Parse and validate a suite's YAML text. Raises :class:`SuiteFormatError`."""
    path = Path(path)
    source, data = load_yaml(text, path)
    if data is None:
        raise SuiteFormatError(
            path, [LocatedProblem(None, "", "the file is empty; a suite needs suite, targets and prompts")]
        )
    if not isinstance(data, dict):
        raise SuiteFormatError(
            path,
            [
                LocatedProblem(
                    source.line_of(()), "", "the top level must be a mapping (suite:, targets:, prompts:)"
                )
            ],
        )
    try:
        spec = SuiteSpec.model_validate(data)
    except ValidationError as exc:
        raise SuiteFormatError(path, source.locate(_pydantic_problems(exc))) from None
    loaded = LoadedSuite(spec, source)
    problems = semantic_problems(spec)
    if problems:
        raise loaded.error(problems)
    loaded.prompt_lines = {p.id: source.line_of(("prompts", i)) or 1 for i, p in enumerate(spec.prompts)}
    return loaded


def load_suite(path: Path | str) -> LoadedSuite:
    """Read and validate a suite file. Raises :class:`SuiteFormatError` (OSError for an unreadable file)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteFormatError(path, [LocatedProblem(None, "", f"not UTF-8 text: {exc}")]) from None
    return parse_suite(text, path)
