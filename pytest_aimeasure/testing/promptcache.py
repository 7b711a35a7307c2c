"""The local provider's imitation of Anthropic prompt caching, so a client's caching is tested for real.

What it imitates (Anthropic's documented behaviour): a ``cache_control`` block in ``tools``,
``system`` or a message's content marks a breakpoint; the prefix up to it (tools, then system, then
messages, in that order, for that model) is cached once it is at least ``min_tokens`` long. A request
reads the longest marked prefix that is in the cache (``cache_read_input_tokens``) and writes the
longest marked prefix beyond it (``cache_creation_input_tokens``); ``input_tokens`` is what is left.
An entry lives five minutes from its last use, and becomes readable only once the request that wrote
it is answered, so calls sent together all write, as on the real API.

Token counts follow the server's rule (a quarter of the characters of system and message text), so
the three figures add up to the ``input_tokens`` the same request reports without caching.

Stdlib only, like the rest of :mod:`pytest_aimeasure.testing`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CachePlan", "PromptCache"]

TTL_S = 300.0
DEFAULT_MIN_TOKENS = 1024


@dataclass(frozen=True)
class CachePlan:
    """What one request reads from the cache and would write to it (committed once it is answered)."""

    read_tokens: int
    write_tokens: int
    writes: tuple[tuple[str, int], ...]  # (prefix key, prefix tokens) of every cacheable breakpoint
    read_key: str | None


def _blocks(body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Every block of the prompt in cache order, with the text it contributes to the token count."""
    out: list[tuple[dict[str, Any], str]] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            out.append((tool, ""))
    system = body.get("system")
    if isinstance(system, str):
        out.append(({"type": "text", "text": system}, system))
    elif isinstance(system, list):
        for block in system:
            if isinstance(block, dict):
                out.append((block, str(block.get("text") or "")))
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        role = str(message.get("role"))
        if isinstance(content, str):
            out.append(({"role": role, "text": content}, content if role == "user" else ""))
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    text = str(block.get("text") or "") if role == "user" else ""
                    out.append(({"role": role, **block}, text))
    return out


class PromptCache:
    """The cache of one server: marked prefixes and when they expire."""

    def __init__(
        self, *, min_tokens: int = DEFAULT_MIN_TOKENS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_tokens = min_tokens
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, float] = {}  # prefix key -> expiry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def plan(self, body: dict[str, Any]) -> CachePlan | None:
        """What ``body`` (an Anthropic Messages request) reads and writes; None without breakpoints."""
        model = str(body.get("model", ""))
        digest = hashlib.sha256(model.encode())
        chars = 0
        marked: list[tuple[str, int]] = []
        for block, text in _blocks(body):
            digest.update(
                json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True).encode()
            )
            chars += len(text)
            if isinstance(block.get("cache_control"), dict):
                marked.append((digest.copy().hexdigest(), chars // 4))
        if not marked:
            return None
        cacheable = tuple((key, tokens) for key, tokens in marked if tokens >= self.min_tokens)
        now = self._clock()
        read_key, read = None, 0
        with self._lock:
            for key, tokens in cacheable:
                if self._entries.get(key, float("-inf")) > now and tokens >= read:
                    read_key, read = key, tokens
            if read_key is not None:
                self._entries[read_key] = now + TTL_S  # a read refreshes the entry
        longest = max((tokens for _, tokens in cacheable), default=0)
        return CachePlan(read, max(longest - read, 0), cacheable, read_key)

    def commit(self, plan: CachePlan) -> None:
        """The request was answered: what it wrote is readable now."""
        expiry = self._clock() + TTL_S
        with self._lock:
            for key, _ in plan.writes:
                self._entries[key] = max(self._entries.get(key, float("-inf")), expiry)
