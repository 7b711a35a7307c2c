"""The offline judge's rules for the adventure example: simple, documented, predictable.

The ``scripted`` judge runs through the same validation, sampling, aggregation, cache and baseline code
as a live judge; only the verdict comes from here instead of a model. Each rule reads the same text and
facts a live judge would get, and its rationale quotes what decided the score, the way the live
judge is asked to. Every sample of an item gets the same verdict (a temperature-0 judge often
repeats itself exactly), so the error bars come from the variance floor.

Rules (see README.md, "The offline judge's rules"):

* ``scene-graph pedagogy`` reads only the facts: 5, minus 2 if an outcome (success, partial, failure)
  cannot be reached, minus 1 each if success takes fewer than 4 choices, if a scene is not a
  decision (fewer than 2 choices), if scenes offer fewer than 3 choices on average, or if the graph
  has a cycle a learner can go round.
* ``action distinctness``: 5, minus 1 for every pair of choices in one scene whose labels share
  most of their words (Jaccard similarity of the word sets >= 0.6); the rationale quotes the pair.
* ``in-character voice``: 2 when a character with receptiveness 1-2 (cold) says a warmth phrase
  ("I appreciate", "happy to", "great question", "I'm glad to", "glad you") at warmth band 1 or 2;
  the rationale quotes the phrase and the line. 3 when two bands of one reaction are word for word
  the same. Otherwise 5.
"""

from __future__ import annotations

import re
from typing import Any

from pytest_aimeasure.judge.backends.scripted import ScriptedCall

WARMTH_PHRASES = ("I appreciate", "happy to", "great question", "I'm glad to", "glad you")
NEAR_DUPLICATE_JACCARD = 0.6
VOICE_LINE = re.compile(r"^band (\d) \| ([^|]+?) \| ([^|]+?) \| (.+)$")
SCENE_LINE = re.compile(r"^(\S+) \(week \d+, \w+\):")
CHOICE_LINE = re.compile(r"^  [a-h]\. (.+)$")


def verdict(call: ScriptedCall) -> tuple[int, str] | None:
    """The score and rationale for one call, or None for a dimension this example does not define."""
    rule = RULES.get(call.dimension)
    return None if rule is None else rule(call.artifact, call.facts or {})


def pedagogy(artifact: str, facts: dict[str, Any]) -> tuple[int, str]:
    paths: dict[str, dict[str, int | None]] = facts.get("path_length_by_outcome", {})
    branching = facts.get("branching", {}).get("mean") or 0.0
    scenes = facts.get("nodes", 0) - facts.get("endings", 0)
    found = (
        f"facts: {scenes} scenes, {facts.get('decision_nodes')} of them decisions, {branching:g} choices "
        f"per scene on average; success in {paths.get('success', {}).get('shortest')} choices at best; "
        f"acyclic: {str(facts.get('acyclic')).lower()}"
    )
    penalties: list[tuple[int, str]] = []
    unreachable = [o for o in ("success", "partial", "failure") if paths.get(o, {}).get("shortest") is None]
    if unreachable:
        penalties.append((2, f"no route to {', '.join(unreachable)}"))
    shortest = paths.get("success", {}).get("shortest")
    if shortest is not None and shortest < 4:
        penalties.append((1, f"success after only {shortest} choices"))
    if facts.get("decision_nodes", 0) < scenes:
        penalties.append((1, f"{scenes - facts.get('decision_nodes', 0)} scene(s) offer no real decision"))
    if branching < 3.0:
        penalties.append((1, f"{branching:g} choices per scene: several scenes offer only two moves"))
    if not facts.get("acyclic", True):
        penalties.append((1, f"{facts.get('nodes_on_cycles')} scenes lie on a loop a learner can circle"))
    score = max(1, 5 - sum(p for p, _ in penalties))
    if not penalties:
        return score, f"{found}. Every scene is a decision, good play earns the success ending."
    return score, f"{found}. Lower because: {'; '.join(why for _, why in penalties)}."


def _words(label: str) -> set[str]:
    return set(re.findall(r"[a-z']+", label.lower()))


def distinctness(artifact: str, facts: dict[str, Any]) -> tuple[int, str]:
    scene = "?"
    by_scene: dict[str, list[str]] = {}
    for line in artifact.splitlines():
        header = SCENE_LINE.match(line)
        if header:
            scene = header.group(1)
            by_scene[scene] = []
            continue
        choice = CHOICE_LINE.match(line)
        if choice:
            by_scene.setdefault(scene, []).append(choice.group(1))
    pairs: list[tuple[str, str, str]] = []
    for where, labels in by_scene.items():
        for i, first in enumerate(labels):
            for second in labels[i + 1 :]:
                a, b = _words(first), _words(second)
                if a and b and len(a & b) / len(a | b) >= NEAR_DUPLICATE_JACCARD:
                    pairs.append((where, first, second))
    if not pairs:
        counts = [len(labels) for labels in by_scene.values()]
        return 5, (
            f"all {len(by_scene)} scenes offer distinct moves ({min(counts)}-{max(counts)} choices each); "
            "no two choices in a scene are the same move in other words."
        )
    quoted = "; ".join(
        f'in {where}, "{a}" and "{b}" are the same move in other words' for where, a, b in pairs
    )
    return max(1, 5 - len(pairs)), f"{quoted}. The other scenes offer distinct moves."


def _warmth_phrases(line: str) -> list[str]:
    """The warmth phrases in ``line``, as written there, in the order of WARMTH_PHRASES."""
    found = (re.search(re.escape(phrase), line, flags=re.IGNORECASE) for phrase in WARMTH_PHRASES)
    return [match.group(0) for match in found if match]


def voice(artifact: str, facts: dict[str, Any]) -> tuple[int, str]:
    name = facts.get("character", "the character")
    cold = int(facts.get("receptiveness", 3)) <= 2
    rows = [m.groups() for m in map(VOICE_LINE.match, artifact.splitlines()) if m]
    low = [(int(b), scene, label, said) for b, scene, label, said in rows if int(b) <= 2]
    leaks = [(b, scene, label, said, _warmth_phrases(said)) for b, scene, label, said in low]
    leaks = [leak for leak in leaks if leak[4]]
    if cold and leaks:
        band, scene, label, said, found = leaks[0]
        phrase = found[0]
        phrases = sorted({p for *_, ps in leaks for p in ps}, key=str.lower)
        return 2, (
            f'warmth phrase "{phrase}" in a band-{band} line of {name}, who is cold and skeptical at this '
            f'warmth: in {scene} ("{label}") the line reads "{said}". {len(leaks)} of {len(low)} band 1-2 '
            f"lines use warmth phrases ({', '.join(phrases)}): the low bands read like a warm ally."
        )
    by_reaction: dict[tuple[str, str], dict[int, str]] = {}
    for band_text, scene, label, said in rows:
        by_reaction.setdefault((scene, label), {})[int(band_text)] = said
    for (scene, label), bands in by_reaction.items():
        seen: dict[str, int] = {}
        for number, said in sorted(bands.items()):
            if said in seen:
                return 3, (
                    f'bands {seen[said]} and {number} of {name} say the same thing in {scene} ("{label}"): '
                    f'"{said}"; the relationship state makes no difference there.'
                )
            seen[said] = number
    tone = "stays guarded at bands 1-2 (no warmth phrase)" if cold else "warms band by band"
    return 5, f"{name} {tone}; every line fits the character, and no two bands of a reaction are the same."


RULES = {
    "scene-graph pedagogy": pedagogy,
    "action distinctness": distinctness,
    "in-character voice": voice,
}
