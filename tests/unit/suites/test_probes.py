"""The behavioural baseline probes: twelve prompts, one per category, each with its rubric, and gates
that pass the reference answers (run offline and compared: tests/integration/test_suites_probes.py)."""

from __future__ import annotations

from pytest_aimeasure.suites.gates import run_gates
from pytest_aimeasure.suites.model import parse_suite, render_text
from pytest_aimeasure.suites.probes import REFERENCE_ANSWERS, probes_text

CATEGORIES = {
    "tone",
    "structure",
    "constraint adherence",
    "genre",
    "ambiguity handling",
    "reasoning under uncertainty",
    "honesty",
    "persona defaults",
}


def test_twelve_probes_cover_every_category_each_with_its_rubric() -> None:
    spec = parse_suite(probes_text(), "probes.aimeasure.yaml").spec
    assert len(spec.prompts) == 12
    assert {p.category for p in spec.prompts} == CATEGORIES
    for prompt in spec.prompts:
        (dimension,) = spec.dimensions_for(prompt)
        assert dimension.rubric.count("\n") >= 4, prompt.id  # a 5-to-1 scale, one line per score
        assert prompt.notes, prompt.id
    assert set(REFERENCE_ANSWERS) == {p.id for p in spec.prompts}


def test_reference_answers_pass_every_gate_and_the_echo_does_not() -> None:
    spec = parse_suite(probes_text(), "probes.aimeasure.yaml").spec
    echo_failures = 0
    for prompt in spec.prompts:
        context = {"prompt_id": prompt.id}
        results = run_gates(
            spec.gates_for(prompt), REFERENCE_ANSWERS[prompt.id], context=context, resolve={}.__getitem__
        )
        assert [r.problems for r in results if not r.passed] == [], prompt.id
        echo = "[scripted] " + render_text(prompt.text, spec.variables_for(prompt))
        echo_results = run_gates(spec.gates_for(prompt), echo, context=context, resolve={}.__getitem__)
        echo_failures += any(not r.passed for r in echo_results)
    assert echo_failures == 7
