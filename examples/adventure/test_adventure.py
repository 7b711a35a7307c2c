"""A branching training scenario per generator seed: healed, gated, walked, then judged with facts.

For each seed the generator writes the whole scenario up front. Self-healing validates it and, when
the generator cannot fix what the validator reports, splices orphaned scenes back in. Two cheap gates
follow: the graph contract and a deterministic walk of every strategy. Only a scenario that passes
both reaches the judge, which grades three dimensions with the countable facts computed in code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from adventure_generator import (
    BRIEF,
    OUTCOMES,
    apply_effects,
    choice_facts,
    generate_scenario,
    initial_warmth,
    outline_facts,
    render_choices,
    render_outline,
    render_voice,
    voice_facts,
)

from pytest_aimeasure.graphs.graph import assert_graph_ok, graph_validator
from pytest_aimeasure.graphs.heal import heal, unreachable_repair
from pytest_aimeasure.graphs.walker import assert_walks_ok
from pytest_aimeasure.measure.artifact import Artifact
from pytest_aimeasure.session.fixture import Judge

SEEDS = (2, 3, 4, 5, 6)
"""Five consecutive seeds: one clean, one with an orphan scene, one with a near-duplicate choice, one
with a worst-play loop, one with the cold character's warmth leak (see README.md)."""
GENERATOR = "adventure-generator 1 (offline miniature)"
Artifacts = Callable[..., Artifact]

PEDAGOGY_RUBRIC = (
    "Does the branching teach? Judge the outline: scenes by week and role, each choice's quality tier "
    "and where it leads, the endings. Take every count from the facts. 5: every scene is a real "
    "decision, better play earns a better ending, wrong choices have consequences a learner can "
    "recover from, the milestones come in a sensible order. 3: branching exists, but some decisions "
    "are obvious, lead to the same place, or the story can loop. 1: effectively linear, or the "
    "choices do not change what happens."
)
DISTINCTNESS_RUBRIC = (
    "Are the choices in each scene genuinely different moves? The quality tiers are hidden. 5: in "
    "every scene each choice is a distinct course of action that a thoughtful learner could defend "
    "or be tempted by. 3: some scene offers two choices that are the same move in other words, or "
    "one right answer among strawmen. 1: most scenes offer near-duplicates or a single real option. "
    "Quote the choices that decided your score."
)
VOICE_RUBRIC = (
    "Does the character sound like themselves at every warmth band, and do the bands differ? Band 1 "
    "is the coldest relationship state, band 4 the warmest. 5: every line fits the character's "
    "personality and band; a cold, skeptical character stays guarded and curt at bands 1-2, with no "
    "reassurance and no warmth phrases such as 'I appreciate', 'happy to', 'great question'; warmth "
    "grows band by band. 3: mostly in character, a few lines belong to another band. 1: the bands "
    "are indistinguishable, or the character sounds like someone else. Quote the line that decided "
    "your score."
)


@pytest.fixture(scope="module", params=SEEDS, ids=lambda seed: f"seed{seed}")
def scenario(request: pytest.FixtureRequest, aimeasure_artifact: Artifacts) -> Artifact:
    """The generator's scenario for one seed, healed, recorded once per session in the run store."""
    seed: int = request.param
    key = f"adventure-seed{seed}"

    def generate() -> dict[str, Any]:
        healed = heal(
            lambda feedback: generate_scenario(BRIEF, seed, feedback),
            graph_validator(required_outcomes=OUTCOMES),
            repair=unreachable_repair(),
            attempts=2,
            name=key,
        )
        return dict(healed.value)  # the scenario, repaired if it had to be

    return aimeasure_artifact(key, generate, label=GENERATOR)


def judged_view(
    aimeasure_artifact: Artifacts, scenario: Artifact, view: str, render: Callable[[dict[str, Any]], str]
) -> Artifact:
    """The part of the scenario one dimension's judge reads, recorded as an artifact of its own."""
    return aimeasure_artifact(f"{scenario.key}/{view}", lambda: render(scenario.value), label=GENERATOR)


# -- gates: cheap, deterministic, run first; a failure means the judge never sees the scenario -----------
@pytest.mark.gate
def test_structure(scenario: Artifact) -> None:
    assert_graph_ok(scenario.value, required_outcomes=OUTCOMES, subject=scenario.key)


@pytest.mark.gate
def test_playthrough(scenario: Artifact) -> None:
    table = assert_walks_ok(
        scenario.value,
        subject=scenario.key,
        min_turns={"best": 5},  # optimal play must not end the story early
        expect={"best": "success", "worst": {"failure", "partial"}},
        state=initial_warmth(scenario.value),  # each character's warmth band, 1..4
        update=apply_effects,
    )
    print(table)


# -- dimensions: graded 1-5 by the judge, with the countable facts handed over as ground truth -----------
@pytest.mark.dimension("scene-graph pedagogy", floor=3.0, rubric=PEDAGOGY_RUBRIC, phase="outline")
def test_scene_graph_pedagogy(scenario: Artifact, judge: Judge, aimeasure_artifact: Artifacts) -> None:
    outline = judged_view(aimeasure_artifact, scenario, "outline", render_outline)
    judge.score(outline, facts=outline_facts(scenario.value))


@pytest.mark.dimension("action distinctness", floor=3.0, rubric=DISTINCTNESS_RUBRIC, phase="scenes")
def test_action_distinctness(scenario: Artifact, judge: Judge, aimeasure_artifact: Artifacts) -> None:
    choices = judged_view(aimeasure_artifact, scenario, "choices", render_choices)
    judge.score(choices, facts=choice_facts(scenario.value))


@pytest.mark.dimension(
    "in-character voice",
    floor=3.0,
    rubric=VOICE_RUBRIC,
    phase="responses",
    anchors="anchors/voice.yaml",  # human labels: pytest --judge-calibrate measures the judge against them
)
@pytest.mark.parametrize("character", [c.id for c in BRIEF.cast])
def test_in_character_voice(
    scenario: Artifact, character: str, judge: Judge, aimeasure_artifact: Artifacts
) -> None:
    lines = judged_view(
        aimeasure_artifact, scenario, f"voice-{character}", lambda s: render_voice(s, character)
    )
    judge.score(lines, facts=voice_facts(scenario.value, character))
