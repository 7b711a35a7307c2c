"""The suite file format (``*.aimeasure.yaml``) as pydantic models: what each field means and allows.

Loading a file (YAML, line numbers, cross-field rules) is :mod:`pytest_aimeasure.suites.model`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

__all__ = [
    "GATE_KINDS",
    "DimensionRef",
    "DimensionSpec",
    "GateSpec",
    "JsonGate",
    "LengthGate",
    "PromptSpec",
    "RegexGate",
    "Scalar",
    "SuiteSpec",
    "TargetSpec",
    "render_text",
]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_HELP = "letters, digits, '_', '.', '-', starting with a letter or digit"
VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
DEFAULT_WAIT_S = 3600.0

Scalar = str | int | float | bool
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Repeats = Annotated[int, Field(ge=1, le=100)] | Literal["auto"]
"""A prompt's or suite's ``repeats``: a whole number of outputs, or ``auto`` (the baseline decides)."""


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
    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


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
    samples: Annotated[int, Field(ge=1)] | Literal["auto"] | None = None
    phase: str | None = Field(default=None, min_length=1)
    """The report groups dimensions by phase (e.g. structure, content): one table per phase."""
    # Calibration (--judge-calibrate), as on @pytest.mark.dimension: anchor files relative to the suite
    # file, and this dimension's thresholds (else --judge-min-kappa / --judge-max-abs-bias).
    anchors: Annotated[list[Annotated[str, Field(min_length=1)]] | None, BeforeValidator(_as_list)] = Field(
        default=None, min_length=1
    )
    min_kappa: float | None = Field(default=None, ge=-1, le=1)
    max_abs_bias: float | None = Field(default=None, ge=0)
    judge: str | None = Field(default=None, min_length=1)
    """This dimension's judge model (``anthropic/<model>``, ``provider/model``); else ``--judge-model``."""
    escalate: str | None = Field(default=None, min_length=1)
    """A stronger model that re-judges an output whose samples disagree by 2+ points or straddle the
    floor; its measurement decides the floor verdict and goes to the baseline."""


class DimensionRef(_Strict):
    """A prompt's dimension: a suite dimension by name (``- tone``), or one with fields overridden or
    defined for this prompt only (``- {name: tone, rubric: ...}``)."""

    name: Name
    rubric: str | None = Field(default=None, min_length=1)
    floor: float | None = Field(default=None, ge=1, le=5)
    tolerance: float | None = Field(default=None, gt=0)
    samples: Annotated[int, Field(ge=1)] | Literal["auto"] | None = None
    phase: str | None = Field(default=None, min_length=1)
    judge: str | None = Field(default=None, min_length=1)
    escalate: str | None = Field(default=None, min_length=1)


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
    repeats: Repeats | None = None


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
    repeats: Repeats | None = None
    """Outputs generated per prompt × target; gates count over them, dimensions pool them. None:
    one, or ``--aimeasure-baseline-repeats`` while ``--update-baseline`` writes the baseline.
    ``auto``: the baseline decides (three where the generator moves more than the judge, else one)."""

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
