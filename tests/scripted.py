"""The scripted-judge project setup many plugin tests share: a conftest whose offline judge reads each
test's scores from ``scores.json`` (test name → the scores of its samples, in order), and the command
line that runs a session with it."""

from __future__ import annotations

from pytest_aimeasure.measure.models import Fingerprint

SCRIPTED_ARGS = (
    "--ai-judge",
    "--judge-model",
    "scripted",
    "--judge-cache=off",
    "-p",
    "no:randomly",
    "-p",
    "no:cacheprovider",
)
"""The scripted judge, no sample cache, tests in file order, no pytest cache in the project."""

SCRIPTED_FINGERPRINT = Fingerprint(
    provider="scripted",
    model="scripted",
    temperature=0.0,
    samples=3,
    prompt_hash="p",
    rubric_hash="r",
    plugin_major=0,
)
"""The ruler of a measurement the scripted judge made, for tests that build measurements by hand."""


def scores_conftest(*, default: list[int] | None = None, rationale: str = "") -> str:
    """A conftest that scores sample ``k`` of test ``name`` with ``scores.json[name][k]``, with the
    rationale ``scripted <name> #<k>`` (then ``rationale``). ``default``: the scores of a test the table
    does not name (without it such a test is a judge error)."""
    scores = "table[name]" if default is None else f"table.get(name, {default!r})"
    return f"""
import json, pathlib

def pytest_aimeasure_scripted_verdict(call, config):
    table = json.loads(pathlib.Path(config.rootpath, "scores.json").read_text())
    name = call.nodeid.split("::")[-1]
    return {scores}[call.index], f"scripted {{name}} #{{call.index}}{rationale}"
"""


RED_FIRST_TESTS = """
import pytest

@pytest.fixture(scope="module")
def reply(aimeasure_artifact):
    return aimeasure_artifact("reply", lambda: "a reply")

@pytest.mark.gate
def test_gate(reply):
    assert "walk" in reply.text, "1 of 6 walks failed on seed5"

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=3.0)
def test_tone(judge):
    judge.score("a tone")

@pytest.mark.dimension("clarity", rubric="5 = clear", floor=3.0)
def test_clarity(judge):
    judge.score("clear")
"""
"""A project whose failed gate is the real red (its artifact never reaches the judge) beside two
judged dimensions, scored from ``scores.json``: what the reports must show first."""
