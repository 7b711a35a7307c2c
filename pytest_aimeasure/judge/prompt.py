"""The judge's prompt template and its single tool.

The template (system text and instructions) is hashed into the fingerprint, so editing it, or
changing it through the ``pytest_aimeasure_judge_prompt`` hook, makes old measurements
"not comparable" instead of silently comparable.

The user message opens with what every item of a dimension shares (dimension and rubric) and goes on
with what is the item's own (facts, artifact), so a backend can cache the shared prefix: the system
prompt, the tool and the rubric (see :func:`render_user_parts`). The text is the same as before the
split, so the template hash and the sample cache keys kept their meaning and values.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pytest_aimeasure.judge.backends.base import ToolSpec
from pytest_aimeasure.measure.models import SCORE_MAX, SCORE_MIN

TOOL_NAME = "record_verdict"

DEFAULT_SYSTEM = (
    "You are a careful, strict evaluator. You measure exactly one quality dimension of an artifact "
    "produced by an AI system, on an integer scale from 1 (unacceptable) to 5 (excellent). "
    "Judge only the named dimension. Be consistent: the same artifact must get the same score."
)

DEFAULT_INSTRUCTIONS = (
    "Read the artifact, then call the tool `record_verdict` exactly once with the dimension name, "
    "a rationale that quotes the parts of the artifact your score rests on, and the score. "
    "Scores: 1 unacceptable, 2 poor, 3 acceptable, 4 good, 5 excellent."
)

FACTS_PREAMBLE = (
    "The following facts were computed by code from the artifact. They are ground truth: use them "
    "as given and do not recount or recompute them."
)


@dataclass
class JudgePrompt:
    """The editable template. A ``pytest_aimeasure_judge_prompt`` hook may change these fields."""

    system: str = DEFAULT_SYSTEM
    instructions: str = DEFAULT_INSTRUCTIONS
    facts_preamble: str = FACTS_PREAMBLE
    extra: dict[str, str] = field(default_factory=dict)

    def template_hash(self) -> str:
        blob = json.dumps(
            [self.system, self.instructions, self.facts_preamble, sorted(self.extra.items())]
        ).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=256)  # one per dimension: every judge call built it again
def verdict_tool(dimension: str) -> ToolSpec:
    """The forced tool. ``dimension`` is pinned with an enum so a verdict about another one is invalid;
    the rationale comes before the score so the model argues before it decides."""
    return ToolSpec(
        name=TOOL_NAME,
        description=f"Record your verdict on the dimension '{dimension}'.",
        input_schema={
            "type": "object",
            "properties": {
                "dimension": {"type": "string", "enum": [dimension]},
                "rationale": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Why this score; quote the artifact.",
                },
                "score": {"type": "integer", "minimum": SCORE_MIN, "maximum": SCORE_MAX},
            },
            "required": ["dimension", "rationale", "score"],
            "additionalProperties": False,
        },
    )


def render_facts(facts: dict[str, Any]) -> str:
    return json.dumps(facts, indent=2, sort_keys=True, default=str)


def render_user_parts(
    prompt: JudgePrompt, *, dimension: str, rubric: str, artifact: str, facts: dict[str, Any] | None
) -> tuple[str, str]:
    """The user message in two parts: the fixed part every item of the dimension shares (dimension
    and rubric, ending in the blank line that separates it), then the per-item part (facts, extra
    texts, the artifact, the instructions). Their concatenation is :func:`render_user_message`, the
    text the judge reads; the split only tells a caching backend where the shared prefix ends."""
    fixed = f"Dimension: {dimension}\n\nRubric:\n{rubric.strip()}\n\n"
    parts: list[str] = []
    if facts:
        parts.append(f"{prompt.facts_preamble}\n<facts>\n{render_facts(facts)}\n</facts>")
    for name, text in sorted(prompt.extra.items()):
        parts.append(f"{name}:\n{text}")
    parts.append(f"<artifact>\n{artifact}\n</artifact>")
    parts.append(prompt.instructions)
    return fixed, "\n\n".join(parts)


def render_user_message(
    prompt: JudgePrompt, *, dimension: str, rubric: str, artifact: str, facts: dict[str, Any] | None
) -> str:
    """The judge's user message: the dimension, its rubric, facts, extra texts, the artifact and the
    instructions, in that order."""
    fixed, per_item = render_user_parts(
        prompt, dimension=dimension, rubric=rubric, artifact=artifact, facts=facts
    )
    return fixed + per_item
