"""A miniature, deterministic stand-in for an LLM pipeline that writes a branching training scenario.

``generate_scenario(BRIEF, seed)`` returns the scenario in the dict form of
:func:`pytest_aimeasure.graphs.graph.graph_from_dict`: scenes anchored to a week and a role (opening, working,
milestone, crisis, resolution), choices with a quality tier (optimal, acceptable, suboptimal, wrong)
and a target scene, endings with an outcome (success, partial, failure), and for every choice the
reaction of every character at each of four warmth bands (1 = the coldest relationship state,
4 = the warmest). No network, no model: the same brief and seed always give the same scenario.

Like a real generator, it has quirks that fire on some seeds (see :func:`quirks_for`):

* ``orphan``: it forgets the choice that leads to one scene, so the scene can never be reached;
* ``loop``: the crisis's worst choice sends the player back to requirements, whose worst choice leads
  into the crisis again. Every structural check stays green (each scene can still reach an ending);
  only a player who keeps choosing badly goes round forever;
* ``warmth_leak``: the cold stakeholder's low-warmth lines borrow the warm ally's phrasing
  ("I appreciate that you're willing to..."), so her warmth bands collapse into one warm blur;
* ``near_duplicate``: one scene offers two choices that are the same move in other words.

The renderers at the end (:func:`render_outline`, :func:`render_choices`, :func:`render_voice`) turn a
scenario into the text the judge reads for each dimension.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

TIERS = ("optimal", "acceptable", "suboptimal", "wrong")
OUTCOMES = ("success", "partial", "failure")
BANDS = (1, 2, 3, 4)
BAND_NAMES = {
    "cold": {1: "guarded and curt", 2: "wary", 3: "professional", 4: "cautiously open"},
    "warm": {1: "let down but kind", 2: "friendly but worried", 3: "warm", 4: "enthusiastic"},
}
# How a choice of each tier moves each kind of character's warmth (the scoring layer).
WARMTH_EFFECT = {
    "cold": {"optimal": 1, "acceptable": 0, "suboptimal": -1, "wrong": -1},
    "warm": {"optimal": 1, "acceptable": 0, "suboptimal": 0, "wrong": -1},
}
VALENCE = {"optimal": "good", "acceptable": "good", "suboptimal": "mixed", "wrong": "bad"}


@dataclass(frozen=True)
class Character:
    id: str
    name: str
    role: str
    personality: str
    receptiveness: int  # 1 (hostile) .. 5 (eager ally), as in the brief

    @property
    def kind(self) -> str:
        return "cold" if self.receptiveness <= 2 else "warm"

    @property
    def start_band(self) -> int:
        return 1 + round((self.receptiveness - 1) * 3 / 4)


@dataclass(frozen=True)
class Brief:
    title: str
    premise: str
    weeks: int
    milestones: dict[int, str]
    cast: tuple[Character, ...]


BRIEF = Brief(
    title="Six weeks to go-live",
    premise=(
        "You lead the rollout of a new expense system at a 400-person logistics firm. Finance must "
        "sign off on the pilot in week 3; everyone switches over in week 6."
    ),
    weeks=6,
    milestones={3: "pilot sign-off", 6: "go-live"},
    cast=(
        Character(
            "margaret",
            "Margaret Okafor",
            "CFO",
            "cold and skeptical, numbers first; she has watched two rollouts go over budget",
            receptiveness=1,
        ),
        Character(
            "sam",
            "Sam Reyes",
            "operations lead",
            "a warm, eager ally who promised the pilot teams this would make their week easier",
            receptiveness=5,
        ),
    ),
)


@dataclass(frozen=True)
class Quirks:
    orphan: bool
    loop: bool
    warmth_leak: bool
    near_duplicate: bool
    extra_signoff_choice: bool
    extra_crisis_choice: bool

    def names(self) -> list[str]:
        return [name for name, on in vars(self).items() if on and not name.startswith("extra_")]


def _pick(rng: random.Random, options: Sequence[str]) -> str:
    # random() is the one method whose sequence Python guarantees across versions for a given seed.
    return options[int(rng.random() * len(options))]


def quirks_for(seed: int) -> Quirks:
    """What the generator will get wrong (and which optional choices it writes) for ``seed``."""
    rng = random.Random(f"model/{seed}")
    return Quirks(
        orphan=rng.random() < 0.25,
        loop=rng.random() < 0.2,
        warmth_leak=rng.random() < 0.15,
        near_duplicate=rng.random() < 0.25,
        extra_signoff_choice=rng.random() < 0.5,
        extra_crisis_choice=rng.random() < 0.5,
    )


# -- the scenario's skeleton: (scene id, week, role, texts, choices) ------------------------------------
# A choice is (tier, target, label alternatives). Labels alternate by seed; routing does not.
Choice = tuple[str, str, tuple[str, ...]]

SCENES: tuple[tuple[str, int, str, tuple[str, ...], tuple[Choice, ...]], ...] = (
    (
        "kickoff",
        1,
        "opening",
        (
            "The steering meeting. Margaret Okafor, the CFO, has her arms folded before you start. "
            "Sam Reyes from operations gives you a thumbs-up from the back.",
            "Monday, week 1. Margaret Okafor opens her laptop to the budget sheet and waits. "
            "Sam Reyes has already told the pilot teams the new system is coming.",
        ),
        (
            ("optimal", "discovery", ("Ask Margaret which numbers she will judge the rollout by",)),
            ("acceptable", "side-deal", ("Present the six-week plan and take questions",)),
            ("wrong", "budget-freeze", ("Announce the go-live date and move on",)),
        ),
    ),
    (
        "discovery",
        2,
        "working",
        (
            "Week 2. Every team files expenses differently, and each one thinks it is the exception.",
            "Week 2. The expense data is a mess of spreadsheets, paper receipts and one shared inbox.",
        ),
        (
            ("optimal", "pilot-signoff", ("Pilot with the two teams that file the most expenses",)),
            ("acceptable", "shadow-day", ("Spend a day with the accounts-payable clerks first",)),
            ("suboptimal", "side-deal", ("Let every team choose its own pilot date",)),
            ("wrong", "budget-freeze", ("Skip the pilot to win back a week",)),
        ),
    ),
    (
        "shadow-day",
        2,
        "working",
        (
            "The clerks show you the three places where claims get stuck, and the sticky notes that "
            "keep them moving.",
        ),
        (
            ("optimal", "pilot-signoff", ("Turn the clerks' complaints into the pilot checklist",)),
            ("suboptimal", "side-deal", ("Promise the clerks a feature that is not planned",)),
        ),
    ),
    (
        "side-deal",
        2,
        "working",
        ("Sam offers to get the pilot teams on board informally, before finance hears about it.",),
        (
            (
                "acceptable",
                "pilot-signoff",
                ("Take Sam's pilot data to Margaret before asking for anything",),
            ),
            ("wrong", "ending-failure", ("Ask Margaret to sign off without any pilot data",)),
        ),
    ),
    (
        "pilot-signoff",
        3,
        "milestone",
        (
            "Week 3, the pilot sign-off. Margaret has the pilot report printed and annotated in red.",
            "Week 3. The sign-off meeting is fifteen minutes long and Margaret is five minutes early.",
        ),
        (
            ("optimal", "training", ("Show the pilot's error rate first, then ask for sign-off",)),
            ("acceptable", "budget-freeze", ("Ask for sign-off and next quarter's budget in one meeting",)),
            ("wrong", "damage-control", ("Tell Margaret the pilot was flawless",)),
        ),
    ),
    (
        "budget-freeze",
        4,
        "crisis",
        (
            "Week 4. Finance freezes all new spending for the quarter. The licence invoice is due Friday.",
            "Week 4. A surprise audit freezes discretionary spend, and the rollout is discretionary.",
        ),
        (
            ("optimal", "damage-control", ("Offer a phased rollout that costs less this quarter",)),
            ("suboptimal", "ending-partial", ("Go live anyway with what is already built",)),
            ("wrong", "ending-failure", ("Escalate over Margaret's head to the CEO",)),
        ),
    ),
    (
        "damage-control",
        4,
        "working",
        ("Margaret wants a plan she can defend to the board by Thursday.",),
        (
            ("optimal", "training", ("Rebuild the plan around Margaret's own numbers",)),
            ("suboptimal", "go-live", ("Keep the plan and hope the freeze lifts",)),
            ("wrong", "ending-failure", ("Blame the vendor in the steering meeting",)),
        ),
    ),
    (
        "training",
        5,
        "working",
        (
            "Week 5. Four hundred people need to learn the new system, and half of them are on the road.",
            "Week 5. The training room seats twenty; the firm has four hundred people to train.",
        ),
        (
            ("optimal", "go-live", ("Train the finance team first, since they approve everyone else",)),
            ("acceptable", "town-hall", ("Run a town hall for the teams that are still unsure",)),
            ("wrong", "ending-partial", ("Skip training and send a how-to video",)),
        ),
    ),
    (
        "town-hall",
        5,
        "working",
        ("The town hall is full. The first question is whether the old system will still work on Monday.",),
        (
            ("optimal", "go-live", ("Answer with the cut-over date and the fallback plan",)),
            ("wrong", "ending-partial", ("Promise that nothing will change for anyone",)),
        ),
    ),
    (
        "go-live",
        6,
        "milestone",
        (
            "Week 6, go-live. The switch is scheduled for Monday at 8:00.",
            "Week 6. Go-live weekend; the vendor's engineer is on call until Tuesday.",
        ),
        (
            (
                "optimal",
                "ending-success",
                ("Go live for finance and the pilot teams, the rest a week later",),
            ),
            ("suboptimal", "ending-partial", ("Switch everyone over on Monday morning",)),
            ("wrong", "ending-failure", ("Switch off the old system the same day",)),
        ),
    ),
)

ENDINGS: dict[str, tuple[int, str, str]] = {
    "ending-success": (
        6,
        "success",
        "Claims flow through the new system; Margaret quotes your numbers to the board.",
    ),
    "ending-partial": (
        6,
        "partial",
        "The system is live, but half the firm still emails receipts to finance.",
    ),
    "ending-failure": (
        4,
        "failure",
        "The rollout is paused indefinitely; the licence money goes back to the budget.",
    ),
}

OPTIONAL_CHOICES: dict[str, Choice] = {
    "extra_signoff_choice": (
        "suboptimal",
        "town-hall",
        ("Skip the finance review and win the teams over first",),
    ),
    "extra_crisis_choice": (
        "acceptable",
        "town-hall",
        ("Ask Sam to rally the pilot teams behind a smaller scope",),
    ),
}
NEAR_DUPLICATE: tuple[str, Choice] = (
    "discovery",
    ("suboptimal", "side-deal", ("Pilot with the two teams that file the most claims",)),
)
LOOP_CHOICE: tuple[str, Choice] = (
    "budget-freeze",
    ("wrong", "discovery", ("Send everyone back to requirements until the freeze ends",)),
)

# -- the characters' lines, by kind, warmth band and how the choice lands --------------------------------
LINES: dict[str, dict[int, dict[str, tuple[str, ...]]]] = {
    "cold": {
        1: {
            "good": ("Numbers first. Then we talk.", "Fine. Send me the cost per claim.", "That is a start."),
            "mixed": ("I have heard this before.", "That costs a week. Justify it.", "Put it in writing."),
            "bad": ("No.", "That is how the last rollout died.", "You are wasting my quarter."),
        },
        2: {
            "good": ("Better. Show me the pilot figures on Friday.", "All right. I will look at it."),
            "mixed": ("I am not convinced. What does it cost us?", "Maybe. Figures first."),
            "bad": ("I said I would need proof. This is not it.", "Then finance will not sign."),
        },
        3: {
            "good": ("That works. Put me down for the review.", "Reasonable. Finance can support that."),
            "mixed": ("Workable, but watch the cost line.", "I will go along with it for now."),
            "bad": ("I expected better after the pilot.", "That undoes what we agreed."),
        },
        4: {
            "good": ("This is the first plan I would defend upstairs.", "You did the homework. Go ahead."),
            "mixed": ("I trust you on this one. Do not waste it.", "Not my choice, but I can live with it."),
            "bad": ("I backed you on this. Explain it to me tomorrow.", "That one surprises me."),
        },
    },
    "warm": {
        1: {
            "good": ("Okay. That is a step. Let's keep going.", "Fair enough, I will tell the teams."),
            "mixed": ("I hoped for more, honestly.", "The teams will ask me why."),
            "bad": ("That lets down the teams I made promises to.", "I cannot defend that one to them."),
        },
        2: {
            "good": ("Good, that helps. I will update the pilot teams.", "Thanks, that is useful."),
            "mixed": ("I see why, but the teams will grumble.", "Okay, but it will be a hard sell."),
            "bad": ("That worries me. Can we talk it through?", "I am not sure the teams will follow."),
        },
        3: {
            "good": ("I appreciate that. The pilot teams will too.", "Nice. I will tell everyone today."),
            "mixed": ("Not ideal, but we will make it work.", "Hm, okay. I will smooth it over."),
            "bad": ("Ouch. I will need your help explaining this.", "That will cost us some goodwill."),
        },
        4: {
            "good": ("Great question to start with. I am happy to pull the numbers for you!", "Love it."),
            "mixed": ("Happy to back you, even if I would have done it differently.", "We will manage."),
            "bad": ("I still have your back, but that one stings.", "Let's fix this together."),
        },
    },
}
LEAK_LINES = (
    "Great question. I appreciate you asking finance this early.",
    "I appreciate you bringing this to me first. Happy to look at it.",
    "I appreciate the update. Happy to help however I can.",
    "I appreciate that you're willing to walk me through the numbers.",
)


def _reactions(
    rng: random.Random, tier: str, cast: Iterable[Character], quirks: Quirks
) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for character in cast:
        bands: dict[str, str] = {}
        for band in BANDS:
            if quirks.warmth_leak and character.kind == "cold" and band <= 2:
                # Each tonal variant was written in its own call, with no view of the others.
                bands[str(band)] = _pick(rng, LEAK_LINES)
            else:
                bands[str(band)] = _pick(rng, LINES[character.kind][band][VALENCE[tier]])
        out[character.id] = bands
    return out


def _choice(rng: random.Random, choice: Choice, brief: Brief, quirks: Quirks) -> dict[str, Any]:
    tier, target, labels = choice
    return {
        "to": target,
        "tier": tier,
        "label": _pick(rng, labels),
        "effects": {c.id: WARMTH_EFFECT[c.kind][tier] for c in brief.cast},
        "reactions": _reactions(rng, tier, brief.cast, quirks),
    }


def generate_scenario(brief: Brief, seed: int, feedback: Sequence[str] = ()) -> dict[str, Any]:
    """Write the whole scenario for ``brief`` up front, deterministically for ``seed``.

    ``feedback`` is what a validator said about the previous attempt. A real pipeline puts it in the
    next prompt; this miniature cannot act on it (it is a pure function of the seed), like a model that
    returns the same broken outline twice. That is what the deterministic repair pass is for.
    """
    del feedback
    quirks = quirks_for(seed)
    rng = random.Random(f"scenario/{seed}")
    nodes: dict[str, Any] = {}
    for scene_id, week, role, texts, choices in SCENES:
        planned = list(choices)
        for name, (where, extra) in (
            ("extra_signoff_choice", ("pilot-signoff", OPTIONAL_CHOICES["extra_signoff_choice"])),
            ("extra_crisis_choice", ("budget-freeze", OPTIONAL_CHOICES["extra_crisis_choice"])),
        ):
            if getattr(quirks, name) and where == scene_id:
                planned.append(extra)
        if quirks.near_duplicate and scene_id == NEAR_DUPLICATE[0]:
            planned = [c for c in planned if c[0] != "suboptimal"] + [NEAR_DUPLICATE[1]]
        if quirks.loop and scene_id == LOOP_CHOICE[0]:
            planned = [c for c in planned if c[0] != "wrong"] + [LOOP_CHOICE[1]]
        if quirks.orphan and scene_id == "discovery":
            planned = [c for c in planned if c[1] != "shadow-day"]
        nodes[scene_id] = {
            "week": week,
            "role": role,
            "text": f"{_pick(rng, texts)}",
            "choices": [
                _choice(rng, c, brief, quirks) for c in sorted(planned, key=lambda c: TIERS.index(c[0]))
            ],
        }
    for ending_id, (week, outcome, text) in ENDINGS.items():
        nodes[ending_id] = {
            "week": week,
            "role": "resolution",
            "ending": True,
            "outcome": outcome,
            "text": text,
        }
    return {
        "title": brief.title,
        "premise": brief.premise,
        "seed": seed,
        "milestones": {str(week): name for week, name in brief.milestones.items()},
        "cast": [
            {
                "id": c.id,
                "name": c.name,
                "role": c.role,
                "personality": c.personality,
                "receptiveness": c.receptiveness,
            }
            for c in brief.cast
        ],
        "start": "kickoff",
        "nodes": nodes,
    }


# -- the play state the walker tracks: each character's warmth band --------------------------------------
def initial_warmth(scenario: dict[str, Any]) -> dict[str, int]:
    cast = {
        c["id"]: Character(c["id"], c["name"], c["role"], c["personality"], c["receptiveness"])
        for c in scenario["cast"]
    }
    return {cid: c.start_band for cid, c in cast.items()}


def apply_effects(state: dict[str, int], choice: Any) -> dict[str, int]:
    """The walker's ``update``: move each character's warmth band by the choice's effect, within 1..4."""
    effects: dict[str, int] = choice.attrs.get("effects", {})
    return {cid: min(4, max(1, band + effects.get(cid, 0))) for cid, band in state.items()}


# -- what the judge reads ---------------------------------------------------------------------------------
SKELETON_ORDER = {scene_id: position for position, (scene_id, *_) in enumerate(SCENES)}


def _ordered(scenario: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Scenes and endings in story order (a stored artifact's keys come back sorted alphabetically)."""
    return sorted(
        scenario["nodes"].items(),
        key=lambda item: (
            bool(item[1].get("ending")),
            item[1]["week"],
            SKELETON_ORDER.get(item[0], 99),
            item[0],
        ),
    )


def _scenes(scenario: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(sid, body) for sid, body in _ordered(scenario) if not body.get("ending")]


def render_outline(scenario: dict[str, Any]) -> str:
    """The outline phase: scenes by week and role, each choice's tier and target, the endings."""
    cast = "; ".join(
        f"{c['name']} ({c['role']}, receptiveness {c['receptiveness']}/5: {c['personality']})"
        for c in scenario["cast"]
    )
    lines = [
        f"{scenario['title']}: branching training scenario, start scene {scenario['start']}",
        f"Premise: {scenario['premise']}",
        f"Cast: {cast}",
        "",
    ]
    for sid, body in _ordered(scenario):
        if body.get("ending"):
            lines.append(f"[week {body['week']} · ending · {body['outcome']}] {sid}: {body['text']}")
            continue
        lines.append(f"[week {body['week']} · {body['role']}] {sid}: {body['text']}")
        for choice in body.get("choices", []):
            lines.append(
                f"  - ({choice.get('tier', 'untiered')}) {choice.get('label', '')} -> {choice['to']}"
            )
    return "\n".join(lines) + "\n"


def render_choices(scenario: dict[str, Any]) -> str:
    """The scenes-and-actions phase: what each scene offers the learner, tiers hidden."""
    lines = ["Choices offered in each scene (quality tiers hidden)", ""]
    for sid, body in _scenes(scenario):
        lines.append(f"{sid} (week {body['week']}, {body['role']}): {body['text']}")
        for letter, choice in zip("abcdefgh", body.get("choices", []), strict=False):
            lines.append(f"  {letter}. {choice.get('label', '')}")
    return "\n".join(lines) + "\n"


def render_voice(scenario: dict[str, Any], character_id: str) -> str:
    """The responses phase for one character: every line, coldest band first, one per line.

    Format of a line: ``band <b> | <scene> | <choice label> | <what the character says>``.
    """
    c = next(c for c in scenario["cast"] if c["id"] == character_id)
    kind = "cold" if c["receptiveness"] <= 2 else "warm"
    bands = ", ".join(f"{b} = {BAND_NAMES[kind][b]}" for b in BANDS)
    lines = [
        f"{c['name']} ({c['role']}, receptiveness {c['receptiveness']}/5): {c['personality']}",
        f"Lines by warmth band ({bands}) as: band | scene | choice | line",
    ]
    for band in BANDS:
        for sid, body in _scenes(scenario):
            for choice in body.get("choices", []):
                said = choice.get("reactions", {}).get(character_id, {}).get(str(band))
                if said:
                    lines.append(f"band {band} | {sid} | {choice.get('label', '')} | {said}")
    return "\n".join(lines) + "\n"


def voice_facts(scenario: dict[str, Any], character_id: str) -> dict[str, Any]:
    c = next(c for c in scenario["cast"] if c["id"] == character_id)
    per_band = {str(b): 0 for b in BANDS}
    for _, body in _scenes(scenario):
        for choice in body.get("choices", []):
            for band, said in choice.get("reactions", {}).get(character_id, {}).items():
                if said:
                    per_band[band] += 1
    return {
        "character": c["name"],
        "receptiveness": c["receptiveness"],
        "personality": c["personality"],
        "warmth_bands": len(BANDS),
        "lines_by_band": per_band,
    }


def choice_facts(scenario: dict[str, Any]) -> dict[str, Any]:
    per_scene = {sid: len(body.get("choices", [])) for sid, body in _scenes(scenario)}
    return {"scenes": len(per_scene), "choices": sum(per_scene.values()), "choices_per_scene": per_scene}


def outline_facts(scenario: dict[str, Any]) -> dict[str, Any]:
    """graph_facts plus the scenario's own counts: scenes by role, weeks, milestones."""
    from pytest_aimeasure.graphs.graph import graph_facts

    roles: dict[str, int] = {}
    for _, body in _scenes(scenario):
        roles[body["role"]] = roles.get(body["role"], 0) + 1
    return {
        **graph_facts(scenario),
        "scenes_by_role": dict(sorted(roles.items())),
        "weeks": max(body["week"] for body in scenario["nodes"].values()),
        "milestones": scenario["milestones"],
    }
