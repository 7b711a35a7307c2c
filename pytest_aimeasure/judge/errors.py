"""Why an item has no score: the judge's fault (:class:`JudgeError`) or not (:class:`NotJudged`).

Kept apart from the engine and free of heavy imports, so the hooks can recognise these in a test's
report without loading the judge when ``--ai-judge`` is off.
"""

from __future__ import annotations

from pytest_aimeasure.judge.backends.secrets import redact

__all__ = ["Interrupted", "JudgeError", "NotJudged", "ProviderUnreachable", "QuotaExhausted", "ReplayMiss"]


class JudgeError(Exception):
    """The judge could not produce a valid verdict for an item; no score is recorded for it."""

    def __init__(self, message: str, *, raw_outputs: list[str] | None = None) -> None:
        # What a provider said is shown and stored with the error: never a key it echoed.
        super().__init__(redact(message))
        self.raw_outputs = [redact(raw) for raw in raw_outputs or []]


class ProviderUnreachable(JudgeError):
    """The provider failed to connect several times in a row (the engine's ``UNREACHABLE_AFTER``);
    no call was made."""


class QuotaExhausted(JudgeError):
    """The provider answered nothing but 429/529 for ``quota_wait`` seconds; no more calls are made."""


class ReplayMiss(JudgeError):
    """``--judge-cache=replay`` found no stored sample for a call it would have made."""


class NotJudged(Exception):
    """The item was not judged for a reason that is not the judge's fault (the budget ran out)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Interrupted(NotJudged):
    """The session was interrupted (Ctrl-C, SIGTERM) before this call was sent: it never goes out."""

    def __init__(self) -> None:
        super().__init__("interrupted", "not judged: the session was interrupted before this call was sent")
