"""Suite gates: each kind, JSON Schema, user callables, and what failures say."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_aimeasure.suites.gates import check_json_schema, run_gate, run_gates, text_counts
from pytest_aimeasure.suites.model import GateSpec


def gate(**fields: Any) -> GateSpec:
    return GateSpec.model_validate(fields)


def problems(spec: GateSpec, text: str, **callables: Any) -> list[str]:
    return run_gate(spec, text, context={"prompt_id": "p"}, resolve=callables.__getitem__).problems


def test_text_counts() -> None:
    assert text_counts("one two\n\n three  \n") == {"characters": 18, "words": 3, "lines": 2}


def test_length_bounds_in_words_chars_and_lines() -> None:
    spec = gate(length={"min_words": 3, "max_words": 4, "max_chars": 20, "max_lines": 1})
    assert problems(spec, "one two three") == []
    assert problems(spec, "one two") == ["2 words < min_words 3"]
    assert problems(spec, "one two three four five six\nseven") == [
        "33 chars > max_chars 20",
        "7 words > max_words 4",
        "2 lines > max_lines 1",
    ]


def test_must_include_and_must_not_include_are_case_insensitive_unless_asked() -> None:
    assert problems(gate(must_include=["Dear", "regards"]), "dear Sam, ... Regards") == []
    assert problems(gate(must_include=["Dear"], case_sensitive=True), "dear Sam") == ["missing 'Dear'"]
    found = problems(gate(must_not_include="i appreciate"), "Well. I appreciate that you're willing to try.")
    assert found == ["found 'i appreciate' at char 6: \"Well. I appreciate that you're willing to try.\""]


def test_regex_search_fullmatch_and_absent() -> None:
    bullets = gate(regex={"pattern": r"(- [^\n]+\n){2}- [^\n]+", "mode": "fullmatch"})
    assert problems(bullets, "- a\n- b\n- c\n") == []
    assert problems(bullets, "Here you go:\n- a\n- b\n- c") == [
        "the whole output does not match /(- [^\\n]+\\n){2}- [^\\n]+/"
    ]
    assert problems(gate(regex=r"^\d+\."), "intro\n1. first") == []  # multiline search
    assert problems(gate(regex=r"\d"), "no digits") == ["/\\d/ not found"]
    absent = gate(regex={"pattern": "as an ai", "absent": True, "ignore_case": True})
    assert problems(absent, "Sure. As an AI, I cannot.") == [
        "/as an ai/ found at char 6: 'Sure. As an AI, I cannot.'"
    ]


def test_json_and_fences() -> None:
    assert problems(gate(json=True), '{"a": 1}') == []
    fenced = '```json\n{"a": 1}\n```'
    strict = problems(gate(json=True), fenced)
    assert len(strict) == 1
    assert strict[0].startswith("not valid JSON: Expecting value: line 1 column 1 (char 0)")
    assert strict[0].endswith("(it is wrapped in a ``` fence; set strip_fences: true to allow that)")
    assert problems(gate(json={"strip_fences": True}), fenced) == []


SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["title", "year", "themes"],
    "additionalProperties": False,
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "year": {"type": "integer", "minimum": 1800, "maximum": 2100},
        "themes": {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "string"}},
        "kind": {"enum": ["novel", "story"]},
    },
}


def test_json_schema_gate_checks_with_jsonschema() -> None:
    good = {"title": "T", "year": 1969, "themes": ["a", "b"], "kind": "novel"}
    assert check_json_schema(good, SCHEMA) == []
    bad = {"title": "", "year": True, "themes": ["a", 2, "c", "d"], "kind": "poem", "extra": 1}
    assert check_json_schema(bad, SCHEMA) == [
        "$: Additional properties are not allowed ('extra' was unexpected)",
        "$.kind: 'poem' is not one of ['novel', 'story']",
        "$.themes: ['a', 2, 'c', 'd'] is too long",
        "$.themes[1]: 2 is not of type 'string'",
        "$.title: '' should be non-empty",
        "$.year: True is not of type 'integer'",
    ]
    assert check_json_schema({"title": "T"}, SCHEMA) == [
        "$: 'year' is a required property",
        "$: 'themes' is a required property",
    ]
    assert check_json_schema(1969.0, {"type": "integer"}) == []
    assert check_json_schema([1], {"type": ["object", "null"]}) == ["$: [1] is not of type 'object', 'null'"]


def test_json_schema_gate_is_the_whole_of_json_schema() -> None:
    # Beyond the old hand-written subset: pattern properties, combinators, formats, $defs references.
    schema = {
        "$defs": {"tag": {"type": "string", "pattern": "^[a-z]+$"}},
        "type": "object",
        "patternProperties": {"^x-": {"$ref": "#/$defs/tag"}},
        "properties": {"contact": {"oneOf": [{"type": "string", "format": "email"}, {"type": "null"}]}},
    }
    assert check_json_schema({"x-a": "ok", "contact": None}, schema) == []
    assert check_json_schema({"x-a": "NO", "contact": "not-an-address"}, schema) == [
        "$.contact: 'not-an-address' is not valid under any of the given schemas",
        "$['x-a']: 'NO' does not match '^[a-z]+$'",
    ]
    # A reference that cannot be resolved fails the gate with the reason; nothing is fetched.
    assert check_json_schema({}, {"$ref": "http://127.0.0.1:9/s.json"}) == [
        "the schema's reference cannot be resolved: Unresolvable: http://127.0.0.1:9/s.json"
    ]


def test_json_schema_gate_reports_invalid_json_first() -> None:
    assert problems(gate(json_schema=SCHEMA), "not json")[0].startswith("not valid JSON")


def check_no_tables(text: str) -> list[str]:
    return ["contains a markdown table"] if "|---" in text else []


def check_with_context(text: str, *, prompt_id: str) -> bool:
    return prompt_id == "p" and bool(text)


def check_crashes(text: str) -> bool:
    raise ValueError("bad check")


def test_callable_gates_accept_bool_list_or_text_and_context_keywords() -> None:
    spec = gate(callable="checks:no_tables")
    assert problems(spec, "a | b\n|---|---|", **{"checks:no_tables": check_no_tables}) == [
        "contains a markdown table"
    ]
    assert problems(spec, "plain", **{"checks:no_tables": check_no_tables}) == []
    ctx = gate(callable="checks:ctx")
    assert problems(ctx, "x", **{"checks:ctx": check_with_context}) == []
    assert problems(ctx, "", **{"checks:ctx": check_with_context}) == ["returned False"]
    crash = gate(callable="checks:crash")
    assert problems(crash, "x", **{"checks:crash": check_crashes}) == ["raised ValueError: bad check"]
    none = gate(callable="checks:none")
    assert problems(none, "x", **{"checks:none": lambda text: None}) == [
        "returned NoneType None; return True/False or a list of problems"
    ]


def test_every_gate_runs_so_one_report_lists_every_problem() -> None:
    specs = [gate(length={"max_words": 2}), gate(must_include="x"), gate(json=True)]
    results = run_gates(specs, "one two three", context={}, resolve={}.__getitem__)
    assert [(r.name, r.passed) for r in results] == [
        ("length(max_words=2)", False),
        ("must_include('x')", False),
        ("json", False),
    ]


@pytest.mark.parametrize(
    ("fields", "label"),
    [
        ({"must_not_include": ["a", "b", "c", "d"]}, "must_not_include('a', 'b', 'c', …)"),
        ({"regex": {"pattern": "x", "absent": True}}, "regex(not /x/)"),
        ({"json_schema": {"type": "object"}}, "json_schema"),
        ({"callable": "m:f"}, "callable(m:f)"),
        ({"name": "short enough", "length": {"max_words": 3}}, "short enough"),
    ],
)
def test_gate_labels(fields: dict[str, Any], label: str) -> None:
    assert gate(**fields).label() == label
