"""Keeping API keys out of error text.

A provider or a gateway in front of it sometimes echoes the key it was sent (``invalid x-api-key:
sk-ant-...``). Every provider error enters the package as a
:class:`~pytest_aimeasure.judge.backends.base.BackendError`, which passes its text through
:func:`redact` once; everything that stores or shows the error (the run journal, results.json, the
JSON, HTML and JUnit reports, the terminal) only ever sees the redacted text.

What is redacted: the value of every environment variable whose name says it holds a secret
(``*_API_KEY``, ``*_AUTH_TOKEN``, ``*_SECRET``...: what the SDKs and litellm read their keys from), a key a
backend was handed explicitly (:func:`remember`), and anything shaped like an ``sk-...`` key.
"""

from __future__ import annotations

import os
import re

__all__ = ["REDACTED", "redact", "remember"]

REDACTED = "[redacted]"

MIN_SECRET_CHARS = 8
"""Shorter values of secret-named variables are not searched for: ``KEY=1`` would blank every 1."""

_SECRET_NAME = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|_KEY$)", re.IGNORECASE)
_KEY_SHAPED = re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}")

_remembered: set[str] = set()


def remember(secret: str | None) -> None:
    """Redact ``secret`` (a key a backend was given without the environment) from now on."""
    if secret and len(secret) >= MIN_SECRET_CHARS:
        _remembered.add(secret)


def _secrets() -> list[str]:
    # Read at each call: keys are set by the environment, which a test or a conftest may change.
    # Name by name with get(): the judge's thread reads it while the test thread sets and unsets
    # variables (pytest's PYTEST_CURRENT_TEST, at every phase of every pipelined test), and items()
    # raised KeyError for a name unset between listing the names and reading its value.
    found = set()
    for name in list(os.environ):
        value = os.environ.get(name)
        if value is not None and len(value) >= MIN_SECRET_CHARS and _SECRET_NAME.search(name):
            found.add(value)
    # The longest first, so a key that contains another is replaced whole.
    return sorted(found | _remembered, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` with every configured key and every ``sk-...``-shaped secret replaced by
    :data:`REDACTED`."""
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return _KEY_SHAPED.sub(REDACTED, text)
