"""The suite file format: schema, cross-field rules, and errors that name the line and the field."""

from __future__ import annotations

import textwrap

import pytest

from pytest_aimeasure.suites.model import SuiteFormatError, parse_suite, render_text

GOOD = """\
suite: demo
description: two targets, two prompts
variables: {who: world}
targets:
  - model: openai/gpt-4o-mini
  - {name: mine, callable: "pkg.mod:generate", params: {temperature: 0.2}}
prompts:
  - id: hello
    text: "Say hello to {{ who }}."
    category: tone
    notes: the simplest probe
    gates:
      - must_not_include: "I appreciate"
    dimensions: [tone, {name: brevity, rubric: "5: one line"}]
  - id: json-out
    text: 'Return {"a": 1} as JSON.'
    variables: {who: nobody}
gates:
  - length: {max_words: 50}
dimensions:
  - {name: tone, rubric: "5: cold; 1: warm", floor: 3.5, samples: 2}
"""


def problems_of(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(SuiteFormatError) as excinfo:
        parse_suite(textwrap.dedent(text), "bad.aimeasure.yaml")
    return [(p.line, p.field, p.message) for p in excinfo.value.problems]


def test_a_valid_suite_resolves_names_dimensions_gates_and_variables() -> None:
    loaded = parse_suite(GOOD, "demo.aimeasure.yaml")
    spec = loaded.spec
    assert [t.resolved_name for t in spec.targets] == ["gpt-4o-mini", "mine"]
    hello, json_out = spec.prompts
    dims = spec.dimensions_for(hello)
    assert [(d.name, d.floor, d.samples) for d in dims] == [("tone", 3.5, 2), ("brevity", 3.0, None)]
    assert [d.name for d in spec.dimensions_for(json_out)] == ["tone"]  # no list: the suite's dimensions
    assert [g.label() for g in spec.gates_for(hello)] == [
        "length(max_words=50)",
        "must_not_include('I appreciate')",
    ]
    assert render_text(hello.text, spec.variables_for(hello)) == "Say hello to world."
    # single braces (JSON in a prompt) are left alone; prompt variables override the suite's
    assert render_text(json_out.text, spec.variables_for(json_out)) == 'Return {"a": 1} as JSON.'
    assert loaded.prompt_lines == {"hello": 8, "json-out": 15}


def test_yaml_syntax_error_names_the_line() -> None:
    problems = problems_of(
        """\
        suite: demo
        targets:
          - model: openai/x
        prompts: [
          - id: a
        """
    )
    assert len(problems) == 1
    line, _, message = problems[0]
    assert line == 5
    assert message.startswith("YAML syntax error")


def test_duplicate_keys_are_errors_not_silently_last_wins() -> None:
    assert problems_of("suite: a\nsuite: b\n") == [(2, "suite", "duplicate key (first on line 1)")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "the file is empty"),
        ("- a\n- b\n", "the top level must be a mapping"),
    ],
)
def test_empty_or_non_mapping_files(text: str, expected: str) -> None:
    assert expected in problems_of(text)[0][2]


def test_schema_errors_list_every_problem_with_line_and_field() -> None:
    problems = problems_of(
        """\
        suite: demo
        targets:
          - model: openai/x
            temperature: 0.3
        prompts:
          - id: p1
            txt: hello
          - id: bad id
            text: hi
            gates:
              - length: {max_words: many}
              - {regex: "a", json: true}
        dimensions:
          - name: tone
        """
    )
    assert problems == [
        (
            4,
            "targets[0].temperature",
            "unknown field 'temperature' (model parameters such as temperature or max_tokens go under "
            "'params:')",
        ),
        (6, "prompts[0].text", "required field is missing"),
        (
            7,
            "prompts[0].txt",
            "unknown field 'txt' (did you mean 'text'?); known fields: id, text, category, "
            "notes, variables, system, gates, dimensions, repeats",
        ),
        (
            8,
            "prompts[1].id",
            "'bad id' is not a valid name: use letters, digits, '_', '.', '-', starting with a "
            "letter or digit",
        ),
        (
            11,
            "prompts[1].gates[0].length.max_words",
            "Input should be a valid integer, unable to parse string as an integer",
        ),
        (
            12,
            "prompts[1].gates[1]",
            "a gate needs exactly one of: length, must_include, must_not_include, regex, "
            "json, json_schema, callable (found regex, json)",
        ),
        (14, "dimensions[0].rubric", "required field is missing"),
    ]


def test_target_needs_exactly_one_source_and_no_inline_secret() -> None:
    problems = problems_of(
        """\
        suite: demo
        targets:
          - {name: a}
          - {name: b, model: openai/x, params: {api_key: sk-123}}
        prompts: [{id: p, text: t}]
        """
    )
    assert [(line, field) for line, field, _ in problems] == [(3, "targets[0]"), (4, "targets[1]")]
    assert "exactly one of 'model'" in problems[0][2]
    assert "api_key_env" in problems[1][2]


def test_cross_field_rules() -> None:
    problems = problems_of(
        """\
        suite: demo
        targets:
          - {model: openai/x}
          - {model: ollama/x}
          - {name: k1, model: openai/y, concurrency_key: box, concurrency: 1}
          - {name: k2, model: openai/z, concurrency_key: box, concurrency: 2}
        prompts:
          - {id: p, text: "hi {{missing}}"}
          - id: p
            text: t
            dimensions: [tone, undefined]
            gates:
              - regex: "(unclosed"
              - json_schema: {type: objekt, requird: [a], properties: {a: {type: string, minLength: -1}}}
        dimensions:
          - {name: tone, rubric: r}
        """
    )
    assert problems == [
        (4, "targets[1]", "target name 'x' is used twice; give each target a short unique name"),
        (
            6,
            "targets[3].concurrency",
            "targets sharing concurrency_key 'box' share one limit, but targets[2] sets it to 1",
        ),
        (8, "prompts[0].text", "{{missing}} is not defined: add it to the prompt's or the suite's variables"),
        (9, "prompts[1].id", "prompt id 'p' is used twice"),
        (
            11,
            "prompts[1].dimensions[1]",
            "dimension 'undefined' is not defined in the suite's dimensions and has no rubric here; suite "
            "dimensions: tone",
        ),
        (
            13,
            "prompts[1].gates[0].regex",
            "invalid regular expression: missing ), unterminated subpattern at position 0",
        ),
        (
            14,
            "prompts[1].gates[1].json_schema.properties.a.minLength",
            "-1 is less than the minimum of 0",
        ),
        (
            14,
            "prompts[1].gates[1].json_schema.type",
            "unknown type 'objekt' (did you mean 'object'?); use one of array, boolean, integer, null, "
            "number, object, string",
        ),
        (
            14,
            "prompts[1].gates[1].json_schema.requird",
            "unknown schema keyword 'requird' (did you mean 'required'?): JSON Schema ignores unknown "
            "keywords, so it would check nothing",
        ),
    ]


def test_error_text_names_the_file_once_and_each_problem() -> None:
    with pytest.raises(SuiteFormatError) as excinfo:
        parse_suite("suite: demo\ntargets: []\nprompts: []\n", "my.aimeasure.yaml")
    text = str(excinfo.value)
    assert text.splitlines()[0] == "invalid suite file my.aimeasure.yaml: 2 problems"
    assert "  line 2: targets: List should have at least 1 item after validation, not 0" in text
    assert "  line 3: prompts: List should have at least 1 item after validation, not 0" in text


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        ("{length: {}}", "a length gate needs at least one bound"),
        ("{length: {min_words: 5, max_words: 2}}", "min_words 5 is above max_words 2"),
        ("{json: false}", "'json: false' checks nothing; remove the gate"),
        ("{regex: x, case_sensitive: true}", "case_sensitive applies to must_include / must_not_include"),
        ("{callable: not-a-ref}", "must look like 'module:function'"),
    ],
)
def test_gate_shapes(gate: str, message: str) -> None:
    problems = problems_of(
        f"suite: d\ntargets: [{{model: scripted}}]\nprompts: [{{id: p, text: t}}]\ngates: [{gate}]\n"
    )
    assert len(problems) == 1
    assert problems[0][0] == 4
    assert message in problems[0][2]


def test_aliases_within_reason_load_and_a_recursive_alias_is_refused() -> None:
    loaded = parse_suite(
        """\
        suite: demo
        targets:
          - {name: a, model: scripted, params: &p {temperature: 0.2, max_tokens: 300}}
          - {name: b, model: scripted, params: *p}
        prompts:
          - {id: p, text: hi}
        """.replace("        ", "")
    )
    assert loaded.spec.targets[1].params == {"temperature": 0.2, "max_tokens": 300}
    with pytest.raises(SuiteFormatError) as excinfo:
        parse_suite("suite: x\ntargets: &t\n  - {model: scripted, params: {x: *t}}\nprompts: []\n", "r.yaml")
    assert str(excinfo.value) == (
        "invalid suite file r.yaml: line 3: alias *t refers to a value that contains itself; a suite "
        "value cannot be recursive"
    )
