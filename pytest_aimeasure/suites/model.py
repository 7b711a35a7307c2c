"""The suite file format (``*.aimeasure.yaml``): pydantic models, loading, and errors with line numbers.

A suite file is checked in three steps, and every problem is reported with the file, the line and
the field, all problems of a step at once:

1. YAML syntax (and duplicate keys, which YAML itself silently resolves to the last one);
2. the schema (:class:`SuiteSpec`);
3. the cross-field rules (:func:`semantic_problems`): unique ids, known dimensions, defined
   variables, valid regular expressions, a JSON-schema subset we actually enforce.

Environment-dependent checks (is the target's provider known, can ``module:function`` be imported)
happen at collection, in :mod:`pytest_aimeasure.suites.collect`, with the same line mapping.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "DimensionSpec",
    "GateSpec",
    "LoadedSuite",
    "PromptSpec",
    "SuiteFormatError",
    "SuiteProblem",
    "SuiteSpec",
    "TargetSpec",
    "load_suite",
    "parse_suite",
    "render_text",
]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_HELP = "letters, digits, '_', '.', '-', starting with a letter or digit"
VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
DEFAULT_WAIT_S = 3600.0

Scalar = str | int | float | bool
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


def _as_list(value: Any) -> Any:
    """``must_include: "x"`` means ``["x"]``."""
    return [value] if isinstance(value, str) else value


def _as_regex(value: Any) -> Any:
    return {"pattern": value} if isinstance(value, str) else value


def _as_json_gate(value: Any) -> Any:
    if value is True:
        return {}
    if value is False or value is None:
        raise ValueError("'json: false' checks nothing; remove the gate")
    return value


def _as_dimension_ref(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# -- gates -------------------------------------------------------------------------------------------
class LengthGate(_Strict):
    """Bounds on the output's size. Words are whitespace-separated runs; lines are non-empty lines."""

    min_chars: int | None = Field(default=None, ge=0)
    max_chars: int | None = Field(default=None, ge=0)
    min_words: int | None = Field(default=None, ge=0)
    max_words: int | None = Field(default=None, ge=0)
    min_lines: int | None = Field(default=None, ge=0)
    max_lines: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> LengthGate:
        values = self.model_dump()
        if all(v is None for v in values.values()):
            raise ValueError("a length gate needs at least one bound (min_words, max_words, min_chars, ...)")
        for unit in ("chars", "words", "lines"):
            low, high = values[f"min_{unit}"], values[f"max_{unit}"]
            if low is not None and high is not None and low > high:
                raise ValueError(f"min_{unit} {low} is above max_{unit} {high}")
        return self


class RegexGate(_Strict):
    """``pattern`` must be found (``mode: search``, the default) or match the whole stripped output
    (``mode: fullmatch``); with ``absent: true`` it must not be found."""

    pattern: str = Field(min_length=1)
    mode: Literal["search", "fullmatch"] = "search"
    ignore_case: bool = False
    absent: bool = False

    def compiled(self) -> re.Pattern[str]:
        flags = re.MULTILINE | (re.IGNORECASE if self.ignore_case else 0)
        return re.compile(self.pattern, flags)


class JsonGate(_Strict):
    """The output must parse as JSON. ``strip_fences`` first removes one surrounding ```` ``` ```` fence."""

    strip_fences: bool = False


GATE_KINDS = ("length", "must_include", "must_not_include", "regex", "json", "json_schema", "callable")


class GateSpec(_Strict):
    """One deterministic check. Exactly one of the kind fields is set."""

    name: str | None = Field(default=None, min_length=1)
    length: LengthGate | None = None
    must_include: Annotated[list[Annotated[str, Field(min_length=1)]] | None, BeforeValidator(_as_list)] = (
        None
    )
    must_not_include: Annotated[
        list[Annotated[str, Field(min_length=1)]] | None, BeforeValidator(_as_list)
    ] = None
    case_sensitive: bool = False
    regex: Annotated[RegexGate | None, BeforeValidator(_as_regex)] = None
    json_: Annotated[JsonGate | None, BeforeValidator(_as_json_gate)] = Field(default=None, alias="json")
    json_schema: dict[str, Any] | None = None
    callable_: str | None = Field(default=None, alias="callable", pattern=r"^[\w.]+:[\w.]+$")

    @model_validator(mode="after")
    def _one_kind(self) -> GateSpec:
        kinds = self.kinds()
        if len(kinds) != 1:
            found = f"found {', '.join(kinds)}" if kinds else "found none"
            raise ValueError(f"a gate needs exactly one of: {', '.join(GATE_KINDS)} ({found})")
        if self.case_sensitive and kinds[0] not in ("must_include", "must_not_include"):
            raise ValueError("case_sensitive applies to must_include / must_not_include gates only")
        return self

    def kinds(self) -> list[str]:
        attrs = {"json": "json_", "callable": "callable_"}
        return [kind for kind in GATE_KINDS if getattr(self, attrs.get(kind, kind)) is not None]

    @property
    def kind(self) -> str:
        return self.kinds()[0]

    def label(self) -> str:
        """A short readable name for messages and the results (``name`` when given)."""
        if self.name:
            return self.name
        kind = self.kind
        if self.length is not None:
            bounds = ", ".join(f"{k}={v}" for k, v in self.length.model_dump().items() if v is not None)
            return f"length({bounds})"
        if self.must_include is not None or self.must_not_include is not None:
            words = self.must_include if self.must_include is not None else self.must_not_include
            shown = ", ".join(repr(w) for w in (words or [])[:3])
            more = ", …" if len(words or []) > 3 else ""
            return f"{kind}({shown}{more})"
        if self.regex is not None:
            return f"regex({'not ' if self.regex.absent else ''}/{self.regex.pattern}/)"
        if self.callable_ is not None:
            return f"callable({self.callable_})"
        return kind


# -- dimensions --------------------------------------------------------------------------------------
class DimensionSpec(_Strict):
    """A quality the judge grades 1–5 for every output of the suite (unless a prompt lists its own)."""

    name: Name
    rubric: str = Field(min_length=1)
    floor: float = Field(default=3.0, ge=1, le=5)
    tolerance: float = Field(default=0.5, gt=0)
    samples: int | None = Field(default=None, ge=1)
    # Calibration (--judge-calibrate), as on @pytest.mark.dimension: anchor files relative to the suite
    # file, and this dimension's thresholds (else --judge-min-kappa / --judge-max-abs-bias).
    anchors: Annotated[list[Annotated[str, Field(min_length=1)]] | None, BeforeValidator(_as_list)] = Field(
        default=None, min_length=1
    )
    min_kappa: float | None = Field(default=None, ge=-1, le=1)
    max_abs_bias: float | None = Field(default=None, ge=0)


class DimensionRef(_Strict):
    """A prompt's dimension: a suite dimension by name (``- tone``), or one with fields overridden or
    defined for this prompt only (``- {name: tone, rubric: ...}``)."""

    name: Name
    rubric: str | None = Field(default=None, min_length=1)
    floor: float | None = Field(default=None, ge=1, le=5)
    tolerance: float | None = Field(default=None, gt=0)
    samples: int | None = Field(default=None, ge=1)


# -- targets and prompts -----------------------------------------------------------------------------
class TargetSpec(_Strict):
    """What generates the outputs: a model (litellm ``provider/model``, ``anthropic/<model>``, or
    ``scripted`` offline) or a Python callable ``module:function`` (your own pipeline)."""

    name: Name | None = None
    model: str | None = Field(default=None, min_length=1)
    callable_: str | None = Field(default=None, alias="callable", pattern=r"^[\w.]+:[\w.]+$")
    params: dict[str, Any] = Field(default_factory=dict)
    system: str | None = None
    concurrency_key: str | None = Field(default=None, min_length=1)
    concurrency: int | None = Field(default=None, ge=1)
    timeout_s: float | None = Field(default=None, gt=0)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    cost_per_call_usd: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_source(self) -> TargetSpec:
        if (self.model is None) == (self.callable_ is None):
            raise ValueError(
                "a target needs exactly one of 'model' (e.g. openai/gpt-4o-mini) or 'callable' "
                "(module:function)"
            )
        if "api_key" in self.params:
            raise ValueError("params.api_key would put a secret in the suite file; use api_key_env: VARIABLE")
        return self

    @property
    def spec(self) -> str:
        """The model string or ``module:function``."""
        return self.model if self.model is not None else str(self.callable_)

    @property
    def resolved_name(self) -> str:
        if self.name:
            return self.name
        raw = (
            self.model.rsplit("/", 1)[-1]
            if self.model is not None
            else str(self.callable_).rsplit(":", 1)[-1]
        )
        cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-._")
        return cleaned or "target"


class PromptSpec(_Strict):
    id: Name
    text: str = Field(min_length=1)
    category: str | None = Field(default=None, min_length=1)
    notes: str | None = None
    variables: dict[str, Scalar] = Field(default_factory=dict)
    system: str | None = None
    gates: list[GateSpec] = Field(default_factory=list)
    dimensions: list[Annotated[DimensionRef, BeforeValidator(_as_dimension_ref)]] | None = None


class SuiteSpec(_Strict):
    """A whole suite file."""

    format: Literal[1] = 1
    suite: Name
    description: str | None = None
    system: str | None = None
    variables: dict[str, Scalar] = Field(default_factory=dict)
    targets: list[TargetSpec] = Field(min_length=1)
    prompts: list[PromptSpec] = Field(min_length=1)
    gates: list[GateSpec] = Field(default_factory=list)
    dimensions: list[DimensionSpec] = Field(default_factory=list)
    facts: bool = True
    timeout_s: float = Field(default=DEFAULT_WAIT_S, gt=0)

    def dimensions_for(self, prompt: PromptSpec) -> list[DimensionSpec]:
        """The dimensions one prompt's outputs are graded on (resolved; call after validation)."""
        if prompt.dimensions is None:
            return list(self.dimensions)
        known = {d.name: d for d in self.dimensions}
        out: list[DimensionSpec] = []
        for ref in prompt.dimensions:
            base = known.get(ref.name)
            fields = base.model_dump() if base is not None else {"name": ref.name}
            fields.update({k: v for k, v in ref.model_dump().items() if v is not None})
            out.append(DimensionSpec.model_validate(fields))
        return out

    def gates_for(self, prompt: PromptSpec) -> list[GateSpec]:
        return [*self.gates, *prompt.gates]

    def system_for(self, prompt: PromptSpec, target: TargetSpec) -> str | None:
        return prompt.system or target.system or self.system

    def variables_for(self, prompt: PromptSpec) -> dict[str, Scalar]:
        return {**self.variables, **prompt.variables}


def render_text(text: str, variables: dict[str, Scalar]) -> str:
    """Replace ``{{name}}`` placeholders (every name must be defined; checked when the file loads)."""
    return VARIABLE.sub(lambda m: str(variables[m.group(1)]), text)


# -- errors with lines -------------------------------------------------------------------------------
Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class SuiteProblem:
    loc: Loc
    message: str


@dataclass(frozen=True)
class LocatedProblem:
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "file"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class SuiteFormatError(Exception):
    """A suite file that cannot be used. ``str()`` names the file, and each problem's line and field."""

    def __init__(self, path: Path | str, problems: Sequence[LocatedProblem]) -> None:
        self.path = str(path)
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"invalid suite file {self.path}"
        if len(self.problems) == 1:
            return f"{head}: {self.problems[0]}"
        return "\n".join([f"{head}: {len(self.problems)} problems", *(f"  {p}" for p in self.problems)])


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


@dataclass
class SuiteSource:
    """The composed YAML node tree, to map a field path back to its line."""

    path: Path
    root: yaml.Node | None

    def line_of(self, loc: Loc) -> int | None:
        node = self.root
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                hit = next(
                    (
                        (k, v)
                        for k, v in node.value
                        if isinstance(k, yaml.ScalarNode) and k.value == str(part)
                    ),
                    None,
                )
                if hit is None:
                    continue  # a pydantic-internal step (a union branch, a tag); skip it
                key, node = hit
                line = key.start_mark.line + 1
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    break
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                continue
        return line

    def locate(self, problems: Sequence[SuiteProblem]) -> list[LocatedProblem]:
        located = [LocatedProblem(self.line_of(p.loc), format_loc(p.loc), p.message) for p in problems]
        return sorted(located, key=lambda p: p.line or 0)


@dataclass
class LoadedSuite:
    spec: SuiteSpec
    source: SuiteSource
    prompt_lines: dict[str, int] = field(default_factory=dict)

    def error(self, problems: Sequence[SuiteProblem]) -> SuiteFormatError:
        return SuiteFormatError(self.source.path, self.source.locate(problems))


def _duplicate_keys(node: yaml.Node | None, path: Path) -> list[LocatedProblem]:
    out: list[LocatedProblem] = []
    stack: list[yaml.Node] = [node] if node is not None else []
    seen_nodes: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:  # aliases point at the same node
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            keys: dict[str, int] = {}
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    line = key.start_mark.line + 1
                    if key.value in keys:
                        out.append(
                            LocatedProblem(
                                line, key.value, f"duplicate key (first on line {keys[key.value]})"
                            )
                        )
                    keys.setdefault(key.value, line)
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return sorted(out, key=lambda p: p.line or 0)


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


# -- semantic checks ---------------------------------------------------------------------------------
SCHEMA_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
SCHEMA_KEYWORDS = {
    "type",
    "required",
    "properties",
    "additionalProperties",
    "enum",
    "const",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "description",
    "title",
}


def schema_problems(schema: Any, loc: Loc) -> list[SuiteProblem]:
    """Problems with a JSON schema written for the ``json_schema`` gate: it must stay inside the subset
    :mod:`pytest_aimeasure.suites.gates` enforces, so nothing in it is silently ignored."""
    if not isinstance(schema, dict):
        return [SuiteProblem(loc, "a JSON schema must be a mapping")]
    out: list[SuiteProblem] = []
    for key in schema:
        if key not in SCHEMA_KEYWORDS:
            out.append(
                SuiteProblem(
                    (*loc, key),
                    f"schema keyword {key!r} is not supported; supported: "
                    f"{', '.join(sorted(SCHEMA_KEYWORDS))}",
                )
            )
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for k in kinds:
        if k not in SCHEMA_TYPES:
            out.append(
                SuiteProblem(
                    (*loc, "type"), f"unknown type {k!r}; use one of {', '.join(sorted(SCHEMA_TYPES))}"
                )
            )
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            out.append(SuiteProblem((*loc, "properties"), "properties must be a mapping"))
        else:
            for name, sub in props.items():
                out += schema_problems(sub, (*loc, "properties", name))
    if "items" in schema:
        out += schema_problems(schema["items"], (*loc, "items"))
    required = schema.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        out.append(SuiteProblem((*loc, "required"), "required must be a list of property names"))
    if "enum" in schema and not isinstance(schema["enum"], list):
        out.append(SuiteProblem((*loc, "enum"), "enum must be a list"))
    extra = schema.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        out.append(SuiteProblem((*loc, "additionalProperties"), "only true/false is supported"))
    for key in ("minItems", "maxItems", "minLength", "maxLength"):
        value = schema.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            out.append(SuiteProblem((*loc, key), f"{key} must be a whole number >= 0"))
    for key in ("minimum", "maximum"):
        value = schema.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            out.append(SuiteProblem((*loc, key), f"{key} must be a number"))
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
    out += _gate_problems(spec.gates, ("gates",))
    known = {d.name for d in spec.dimensions}
    for i, prompt in enumerate(spec.prompts):
        out += _gate_problems(prompt.gates, ("prompts", i, "gates"))
        variables = spec.variables_for(prompt)
        for text_field in ("text", "system"):
            text = getattr(prompt, text_field)
            for name in VARIABLE.findall(text or ""):
                if name not in variables:
                    out.append(
                        SuiteProblem(
                            ("prompts", i, text_field),
                            f"{{{{{name}}}}} is not defined: add it to the prompt's or the suite's variables",
                        )
                    )
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
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        raise SuiteFormatError(path, [LocatedProblem(line, "", f"YAML syntax error: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise SuiteFormatError(path, [LocatedProblem(None, "", f"YAML error: {exc}")]) from None
    source = SuiteSource(path, root)
    duplicates = _duplicate_keys(root, path)
    if duplicates:
        raise SuiteFormatError(path, duplicates)
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
