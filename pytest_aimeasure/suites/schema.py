"""The ``json_schema`` gate's schemas, checked and applied with the ``jsonschema`` library.

A schema is checked when the suite file loads (:func:`schema_problems`): against its draft's
meta-schema (Draft 2020-12 unless ``$schema`` names another), and for keywords the draft does not
know, since JSON Schema ignores those and a typo (``requird``) would otherwise check nothing. A gate
applies it to an output's JSON value (:func:`check_json_schema`), ``format`` included where the
format has a checker.

``jsonschema`` is imported on first use: loading it costs more than a plugin start-up should pay
for a session that collects no suite.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pytest_aimeasure.suites.source import Loc, SuiteProblem

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = ["check_json_schema", "schema_problems"]

# Keywords that annotate rather than validate (or name a draft, or hold definitions): no validator
# function exists for them, yet they are part of the vocabulary.
_ANNOTATIONS = frozenset(
    {
        "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary",
        "$comment", "$defs", "definitions", "title", "description", "default", "examples",
        "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema",
        "format",
    }
)  # fmt: skip
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_VALUES = (
    "items", "additionalItems", "additionalProperties", "unevaluatedItems", "unevaluatedProperties",
    "not", "if", "then", "else", "contains", "propertyNames",
)  # fmt: skip
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAX_MESSAGE = 200


def _validator_class(schema: dict[str, Any]) -> type[Validator]:
    from jsonschema.validators import Draft202012Validator, validator_for

    return validator_for(schema, default=Draft202012Validator)


def _subschemas(schema: dict[str, Any], loc: Loc) -> Iterator[tuple[dict[str, Any], Loc]]:
    """Every schema nested in ``schema`` (itself included), with its location."""
    yield schema, loc
    for key in _SCHEMA_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, dict):
                    yield from _subschemas(sub, (*loc, key, name))
    for key in _SCHEMA_VALUES:
        value = schema.get(key)
        if isinstance(value, dict):
            yield from _subschemas(value, (*loc, key))
    for key in _SCHEMA_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, dict):
                    yield from _subschemas(sub, (*loc, key, i))


def schema_problems(schema: Any, loc: Loc) -> list[SuiteProblem]:
    """Problems with a schema written for the ``json_schema`` gate, each at its place in the file."""
    if not isinstance(schema, dict):
        return [SuiteProblem(loc, "a JSON schema must be a mapping")]
    cls = _validator_class(schema)
    meta = cls(cls.META_SCHEMA)
    out = [
        SuiteProblem((*loc, *error.absolute_path), _meta_message(error))
        for error in sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path])
    ]
    known = sorted(set(cls.VALIDATORS) | _ANNOTATIONS)
    for sub, where in _subschemas(schema, loc):
        for key in sub:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                out.append(
                    SuiteProblem(
                        (*where, key),
                        f"unknown schema keyword {key!r}{hint}: JSON Schema ignores unknown keywords, "
                        "so it would check nothing",
                    )
                )
    return out


_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")


def _meta_message(error: ValidationError) -> str:
    path = list(error.absolute_path)
    if path and path[-1] == "type" and isinstance(error.instance, str):
        # The meta-schema's "not valid under any of the given schemas" hides the actual choice.
        close = difflib.get_close_matches(error.instance, _TYPES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown type {error.instance!r}{hint}; use one of {', '.join(_TYPES)}"
    return _short(error.message)


def _short(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"


def check_json_schema(value: Any, schema: dict[str, Any]) -> list[str]:
    """Problems of ``value`` against ``schema`` (checked at load), each as ``<JSON path>: <message>``."""
    from referencing.exceptions import Unresolvable

    cls = _validator_class(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    except Unresolvable as exc:
        return [f"the schema's reference cannot be resolved: {exc}"]
    return [f"{error.json_path}: {_short(error.message)}" for error in errors]
