"""Text the plugin records or sends but did not write: whether it can be encoded at all (a lone
surrogate cannot), what it is stored as when it comes from a provider, and how long an artifact may be
sent to the judge.

A ground-floor module the judge's errors import: it holds no model and no artifact, so the plugin's
import (every pytest run, the judge on or off) does not pay for the artifact machinery.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "MAX_ARTIFACT_CHARS",
    "REPLACEMENT",
    "invalid_text_message",
    "oversize_message",
    "replace_lone_surrogates",
    "replace_lone_surrogates_in",
    "unicode_problem",
    "value_problem",
]


def unicode_problem(text: str) -> str | None:
    """What makes ``text`` impossible to encode as UTF-8 (a lone surrogate), or None.

    Such text comes from decoding bytes with ``errors="surrogateescape"`` or from splitting a
    surrogate pair; no file, journal or provider request can carry it.
    """
    if text.isascii():  # (known without a look at the text: no copy of it is encoded per check)
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate U+{ord(text[exc.start]):04X} at character {exc.start}"
    return None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
"""What a lone surrogate in text a provider sent is stored as: U+FFFD, Unicode's replacement character."""


def replace_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD. For text the plugin did not choose (a
    judge's reply, a provider's error message): refusing it would lose the verdict or the error the
    user needs, and keeping it would break every file and request it reaches."""
    if unicode_problem(text) is None:  # the common case: no copy, no regex pass
        return text
    return _LONE_SURROGATE.sub(REPLACEMENT, text)


def replace_lone_surrogates_in(value: Any) -> Any:
    """``value`` (a parsed JSON reply: dicts, lists, strings, as deep as they go) with every string in
    it, keys too, passed through :func:`replace_lone_surrogates`."""
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if not _holds_lone_surrogate(value):
        return value  # the common case: every reply is read this way, and none is copied
    if isinstance(value, dict):
        return {replace_lone_surrogates_in(k): replace_lone_surrogates_in(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(replace_lone_surrogates_in(v) for v in value)
    return value


def _holds_lone_surrogate(value: Any) -> bool:
    """Does a string inside ``value`` (dicts, keys too, lists and tuples) hold a lone surrogate?"""
    pending = [value]  # (a walk without a call per value: it reads every judge reply)
    while pending:
        part = pending.pop()
        if isinstance(part, str):
            if not part.isascii() and unicode_problem(part) is not None:
                return True
        elif isinstance(part, dict):
            pending += part
            pending += part.values()
        elif isinstance(part, (list, tuple)):
            pending += part
    return False


def value_problem(value: Any, where: str = "") -> tuple[str, str] | None:
    """The first text inside ``value`` (a str, or dict keys and values, lists and tuples, as deep as
    they go) that cannot be encoded as UTF-8: (its place, e.g. ``['k'][2]``, and the problem), or None.
    Any other value is checked as the text it is recorded as (``str(value)``)."""
    if isinstance(value, str):
        problem = unicode_problem(value)
        return (where, problem) if problem is not None else None
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = value_problem(key, f"{where} (key {key!r})") or value_problem(item, f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if (found := value_problem(item, f"{where}[{i}]")) is not None:
                return found
        return None
    return value_problem(str(value), where)


MAX_ARTIFACT_CHARS = 1_000_000
"""The default longest artifact text sent to the judge (``--judge-max-artifact-chars``): a real API
refuses a prompt much larger, and paying to hear so is no answer."""


def oversize_message(what: str, text: str, limit: int) -> str | None:
    """Why ``text`` (an artifact, an anchor) may not be sent to the judge: longer than ``limit``
    characters. One sentence for every text the cap covers, naming the option that raises it."""
    if len(text) <= limit:
        return None
    return (
        f"{what} is {len(text):,} characters, above the limit of {limit:,} sent to the judge (a provider "
        "refuses a prompt that large); shorten it, or raise the limit with --judge-max-artifact-chars / "
        "aimeasure_judge_max_artifact_chars"
    )


def invalid_text_message(what: str, problem: str) -> str:
    return (
        f"{what} is not valid Unicode text: {problem}. It can be neither recorded nor sent to the "
        "judge; fix the generator, or replace them first (text.encode('utf-8', 'replace').decode() "
        "turns each into '?')"
    )
