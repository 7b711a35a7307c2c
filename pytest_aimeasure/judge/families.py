"""Which model family wrote an artifact, and whether it is the judge's: judges tend to favour their own
family's writing (self-preference), so a shared family is worth a warning wherever the two meet
(suite targets, anchors, Python artifacts made with ``aimeasure_artifact(generator=...)``)."""

from __future__ import annotations

import re

# Model-name patterns of the families whose judges are known to favour their own outputs.
_FAMILY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("anthropic", re.compile(r"claude|anthropic")),
    ("openai", re.compile(r"(^|[/.:_-])(gpt|chatgpt|o[1-9])([.:_-]|$)|davinci")),
    ("google", re.compile(r"gemini|gemma|palm")),
    ("meta", re.compile(r"(^|[/.:_-])(code)?llama")),
    ("mistral", re.compile(r"mistral|mixtral|codestral|ministral|magistral|pixtral")),
    ("qwen", re.compile(r"qwen|qwq")),
    ("deepseek", re.compile(r"deepseek")),
    ("xai", re.compile(r"grok")),
    ("amazon", re.compile(r"(^|[/.])(nova|titan)")),
    ("cohere", re.compile(r"command-|cohere")),
    ("moonshot", re.compile(r"kimi|moonshot")),
)
# Provider prefixes that are the model maker itself (not a router or a host of many families).
_FIRST_PARTY = {
    "anthropic": "anthropic",
    "openai": "openai",
    "azure": "openai",
    "gemini": "google",
    "mistral": "mistral",
    "deepseek": "deepseek",
    "xai": "xai",
    "cohere": "cohere",
    "moonshot": "moonshot",
}


def model_families(model: str) -> set[str]:
    """The model families a model string belongs to ('anthropic', 'openai', ...); empty when unknown."""
    lowered = model.lower()
    found = {family for family, pattern in _FAMILY_PATTERNS if pattern.search(lowered)}
    prefix = lowered.split("/", 1)[0] if "/" in lowered else None
    if prefix in _FIRST_PARTY:
        found.add(_FIRST_PARTY[prefix])
    return found


def family_clash(target_model: str, judge_model: str) -> str | None:
    """The family a target shares with its judge (self-preference risk), or None.

    Known families are compared by name; when either model's family is unknown, the provider
    prefix decides (two models behind the same ``provider/`` may well be one family).
    """
    if "scripted" in (target_model, judge_model) or judge_model.startswith("scripted:"):
        return None
    mine, theirs = model_families(target_model), model_families(judge_model)
    if mine and theirs:
        shared = sorted(mine & theirs)
        return shared[0] if shared else None
    prefix = target_model.split("/", 1)[0] if "/" in target_model else None
    if prefix is not None and "/" in judge_model and judge_model.split("/", 1)[0] == prefix:
        return f"provider {prefix}"
    return None
