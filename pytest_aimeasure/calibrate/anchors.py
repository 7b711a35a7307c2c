"""Anchor sets: human-labelled examples of a dimension, the reference the judge is calibrated against.

Two file forms hold the same records (docs/calibration.md):

* YAML (``.yaml``/``.yml``): a mapping with optional ``dimension:`` and ``rubric:`` defaults and a
  list ``anchors:``;
* JSONL (``.jsonl``): one anchor object a line, each naming its ``dimension``.

An anchor is an artifact (``text:``, a ``path:`` relative to the anchor file, or ``parts:``, several
artifacts shown to the judge together), one or more human scores 1-5 (``labels:``, a mapping rater →
score, a list, or one number) and optionally a ``note:`` on why, the ``generator:`` that wrote it
and ``facts:`` handed to the judge as for a real item. Every problem is one :class:`AnchorError`
naming the file, the line and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_aimeasure.measure.artifact import join_parts
from pytest_aimeasure.measure.models import SCORE_MAX, SCORE_MIN
from pytest_aimeasure.measure.text import invalid_text_message, value_problem
from pytest_aimeasure.store.yamlsource import YamlFormatError, load_yaml

YAML_SUFFIXES = (".yaml", ".yml")
JSONL_SUFFIXES = (".jsonl",)
Score = int


class AnchorError(Exception):
    """A bad anchor file or reference; the message names the file, line and field and the fix."""


def _check_score(value: object, rater: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not SCORE_MIN <= value <= SCORE_MAX:
        who = f"{rater}: " if rater else ""
        raise ValueError(
            f"{who}a human score must be a whole number from {SCORE_MIN} to {SCORE_MAX}, got {value!r}"
        )
    return value


class AnchorEntry(BaseModel):
    """One anchor as written in the file."""

    # defer_build: the schema is built on first use, not at import (the session's start paid
    # for every model here before its first judge call, used or not).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str = Field(
        min_length=1, description="unique within the dimension; keeps cache keys and reports stable"
    )
    dimension: str | None = Field(default=None, min_length=1)
    text: str | None = None
    path: str | None = Field(
        default=None, min_length=1, description="artifact file, relative to the anchor file"
    )
    parts: list[str] | None = Field(
        default=None, description="several artifacts judged together (order probe)"
    )
    labels: dict[str, Any] | list[Any] | int = Field(
        description="human scores: {rater: score}, [score, ...] or score"
    )
    note: str | None = None
    generator: str | None = Field(default=None, description="the model that wrote the artifact, if known")
    facts: dict[str, Any] | None = None
    judge: list[int] | None = Field(
        default=None, description="the judge's scores when aimeasure label picked it (not used to calibrate)"
    )

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, Any] | list[Any] | int) -> dict[str, int]:
        if isinstance(value, dict):
            if not value:
                raise ValueError(
                    "needs at least one human score (an empty labels: {} is a template from aimeasure label: "
                    "fill in e.g. labels: {alice: 4}, or remove the anchor)"
                )
            return {str(k): _check_score(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            if not value:
                raise ValueError("needs at least one human score")
            return {f"rater{i + 1}": _check_score(v, f"score #{i + 1}") for i, v in enumerate(value)}
        return {"rater1": _check_score(value)}

    @field_validator("parts")
    @classmethod
    def _parts(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) < 2:
            raise ValueError("parts needs two or more artifacts (use text: for one)")
        return value

    @model_validator(mode="after")
    def _one_artifact(self) -> AnchorEntry:
        given = [name for name in ("text", "path", "parts") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "give the artifact exactly once, as text:, path: or parts:"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.text is not None and not self.text.strip():
            raise ValueError("text is empty")
        return self


class AnchorFileModel(BaseModel):
    """A YAML anchor file."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    dimension: str | None = Field(default=None, min_length=1, description="default for every anchor")
    rubric: str | None = Field(default=None, min_length=1, description="the rubric; else the marker's")
    anchors: list[AnchorEntry] = Field(min_length=1)


@dataclass(frozen=True)
class Anchor:
    """One resolved anchor: the artifact text the judge reads and the human labels."""

    id: str
    dimension: str
    text: str
    labels: dict[str, int]
    source: str  # "file:line", for messages
    parts: tuple[str, ...] = ()
    note: str | None = None
    generator: str | None = None
    facts: dict[str, Any] | None = None

    @property
    def human_mean(self) -> float:
        return sum(self.labels.values()) / len(self.labels)


@dataclass
class AnchorSet:
    """The anchors of one file, by dimension, and the file's rubric (if it gives one)."""

    path: Path
    rubric: str | None
    anchors: list[Anchor] = field(default_factory=list)

    def dimensions(self) -> list[str]:
        return sorted({a.dimension for a in self.anchors})


def _yaml_line(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (as deep as it can be followed)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == str(part)), None)
            if found is None:
                key = next((k for k, _ in node.value if k.value == str(part)), None)
                return key.start_mark.line + 1 if key is not None else line
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


def _problems(exc: ValidationError) -> list[tuple[tuple[int | str, ...], str]]:
    out = []
    for err in exc.errors():
        # pydantic names the union branch it tried (labels.dict[str,any]); the user wrote "labels".
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p in ("int",))))
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        if err["type"] not in ("missing",) and isinstance(got, (str, int, float, bool)) and "got" not in msg:
            msg += f" (got {json.dumps(got)})"
        out.append((loc, msg))
    return out


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _error(path: Path, line: int | None, field_path: str, message: str) -> AnchorError:
    at = f"{path}:{line}" if line is not None else str(path)
    return AnchorError(f"{at}: anchor file: {field_path}: {message}")


def _resolve(
    entry: AnchorEntry,
    *,
    path: Path,
    line: int | None,
    dimension: str | None,
    field_path: str,
    path_line: int | None = None,
) -> Anchor:
    dim = entry.dimension or dimension
    if not dim:
        raise _error(
            path, line, field_path + ".dimension", "no dimension: add dimension: to the anchor or the file"
        )
    parts: tuple[str, ...] = ()
    if entry.path is not None:
        artifact_path = (path.parent / entry.path).resolve()
        try:
            text = artifact_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise _error(
                path,
                path_line or line,
                field_path + ".path",
                f"cannot read {artifact_path} ({exc.strerror or exc}); paths are relative to the anchor file",
            ) from None
        if not text.strip():
            raise _error(path, path_line or line, field_path + ".path", f"{artifact_path} is empty")
    elif entry.parts is not None:
        parts = tuple(entry.parts)
        text = join_parts(parts)
    else:
        assert entry.text is not None
        text = entry.text
    labels = entry.labels
    assert isinstance(labels, dict)
    return Anchor(
        id=entry.id,
        dimension=dim,
        text=text,
        labels=dict(labels),
        source=f"{path}:{line}" if line is not None else str(path),
        parts=parts,
        note=entry.note,
        generator=entry.generator,
        facts=entry.facts,
    )


def _check_text(path: Path, line: int | None, data: Any) -> None:
    """Text that cannot be encoded (a lone surrogate from a ``\\ud800`` escape) can be neither sent
    to the judge nor recorded: an error naming the field, before anything is judged."""
    found = value_problem(data)
    if found is not None:
        place, problem = found
        raise _error(path, line, place or "(value)", invalid_text_message("this text", problem))


def _load_yaml(path: Path, text: str) -> AnchorSet:
    try:  # the one YAML loader: parsed once, duplicate keys and runaway aliases refused
        source, data = load_yaml(text, path)
    except YamlFormatError as exc:
        first = exc.problems[0]
        more = f" (and {len(exc.problems) - 1} more problems)" if len(exc.problems) > 1 else ""
        message = first.message.replace("YAML syntax error", "not valid YAML") + more
        raise _error(path, first.line, first.field or "(syntax)", message) from None
    node = source.root
    _check_text(path, None, data)
    if not isinstance(data, dict):
        raise _error(
            path, 1, "(top level)", "must be a mapping with an anchors: list (see docs/calibration.md)"
        )
    try:
        model = AnchorFileModel.model_validate(data)
    except ValidationError as exc:
        loc, msg = _problems(exc)[0]
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        raise _error(path, _yaml_line(node, loc), _where(loc), msg + more) from None
    anchors = [
        _resolve(
            e,
            path=path,
            line=_yaml_line(node, ("anchors", i)),
            dimension=model.dimension,
            field_path=f"anchors[{i}]",
            path_line=_yaml_line(node, ("anchors", i, "path")),
        )
        for i, e in enumerate(model.anchors)
    ]
    return AnchorSet(path=path, rubric=model.rubric, anchors=_unique(path, anchors))


def _load_jsonl(path: Path, text: str) -> AnchorSet:
    anchors: list[Anchor] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _error(
                path, number, "(syntax)", f"not valid JSON at column {exc.colno}: {exc.msg}"
            ) from None
        if not isinstance(data, dict):
            raise _error(path, number, "(line)", "each line must be one JSON object (an anchor)")
        _check_text(path, number, data)
        try:
            entry = AnchorEntry.model_validate(data)
        except ValidationError as exc:
            loc, msg = _problems(exc)[0]
            raise _error(path, number, _where(loc), msg) from None
        anchors.append(_resolve(entry, path=path, line=number, dimension=None, field_path="(line)"))
    if not anchors:
        raise _error(path, None, "(file)", "holds no anchor")
    return AnchorSet(path=path, rubric=None, anchors=_unique(path, anchors))


def _unique(path: Path, anchors: list[Anchor]) -> list[Anchor]:
    seen: dict[tuple[str, str], Anchor] = {}
    for a in anchors:
        first = seen.get((a.dimension, a.id))
        if first is not None:
            raise AnchorError(
                f"{a.source}: anchor file: id: {a.id!r} is used twice for dimension {a.dimension!r} "
                f"(first at {first.source}); ids must be unique"
            )
        seen[(a.dimension, a.id)] = a
    return anchors


def load_anchor_file(path: Path) -> AnchorSet:
    """Read and validate one anchor file (YAML or JSONL, by suffix)."""
    name = path.name.lower()
    if not name.endswith(YAML_SUFFIXES + JSONL_SUFFIXES):
        raise AnchorError(f"{path}: an anchor file must end in .yaml, .yml or .jsonl")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AnchorError(f"{path}: anchor file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AnchorError(f"{path}: cannot read the anchor file ({exc})") from None
    return _load_jsonl(path, text) if name.endswith(JSONL_SUFFIXES) else _load_yaml(path, text)
