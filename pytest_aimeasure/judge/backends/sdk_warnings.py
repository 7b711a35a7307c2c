"""Quiet the pydantic warnings the judge's SDKs raise about their own types, never the user's.

litellm (and the openai SDK it loads) declare TypedDicts with ``ReadOnly`` items; pydantic warns once
for each such type when it builds its schema, which happens whenever the SDK first imports one of its
many lazily loaded modules (the first call of a session, a batch, ...). litellm adds an ``ignore``
filter for them when it is imported, but pytest restores the warning filters after each test and
after collection, so every later lazy import lands in the run's warnings summary: 13 warnings after
a session's first litellm call, about 144 on other paths, none of them about the user's code.

A message or module filter cannot tell those apart from the user's own TypedDicts (pydantic is the
warning's module either way), so the filter here looks at who asked pydantic: the warning is ignored
when pydantic raised it and the nearest caller outside pydantic, typing and the import machinery is
the SDK's code. It is installed once, at configure, into the filter list every test's and the
collection's filters are copied from, so it holds in every thread (the SDK may be imported in a
background warm-up thread, where ``warnings.catch_warnings`` would not be safe) and a user's
``filterwarnings`` still comes first.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

__all__ = ["SDK_PACKAGES", "SdkOrigin", "quiet_sdk_schema_warnings"]

SDK_PACKAGES = frozenset({"litellm", "openai", "anthropic"})
"""The top-level packages of the judge SDKs whose own types pydantic may warn about."""

_PYDANTIC = frozenset({"pydantic", "pydantic_core"})
_PASS_THROUGH = _PYDANTIC | {"typing", "typing_extensions", "typing_inspection", "importlib", "warnings"}
_MAX_FRAMES = 200


def _package(frame: FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name.partition(".")[0] if isinstance(name, str) else ""


class SdkOrigin:
    """Stands in a warning filter's message slot: ``match`` is true for a warning pydantic raises
    while building a schema the SDK asked for (the warnings module calls ``match`` on whatever is in
    that slot, synchronously, in the thread that warns)."""

    def match(self, text: str) -> bool:
        frame: FrameType | None = sys._getframe(1)
        # The warnings machinery's own frames (its pure-Python fallback) are not the one that warns.
        while frame is not None and _package(frame) == "warnings":
            frame = frame.f_back
        if frame is None or _package(frame) not in _PYDANTIC:
            return False
        for _ in range(_MAX_FRAMES):
            if frame is None:
                return False
            package = _package(frame)
            if package not in _PASS_THROUGH:
                return package in SDK_PACKAGES
            frame = frame.f_back
        return False

    def __repr__(self) -> str:
        return "SdkOrigin()"


def quiet_sdk_schema_warnings() -> None:
    """Ignore the pydantic warnings the judge SDKs raise about their own types (idempotent)."""
    if any(isinstance(entry[1], SdkOrigin) for entry in warnings.filters):
        return
    # Appended, not inserted first: every filter already there (the user's -W and filterwarnings
    # ini, pytest's own) keeps its say; only warnings that reach the end would have been shown.
    entry: tuple[str, SdkOrigin, type[Warning], None, int] = ("ignore", SdkOrigin(), Warning, None, 0)
    filters: list[object] = warnings.filters  # type: ignore[assignment]
    filters.append(entry)
    warnings._filters_mutated()  # type: ignore[attr-defined]
