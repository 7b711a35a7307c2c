"""Why an item has no score: the judge's fault (:class:`JudgeError`) or not (:class:`NotJudged`).

Kept apart from the engine and free of heavy imports, so the hooks can recognise these in a test's
report without loading the judge when ``--ai-judge`` is off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_aimeasure.judge.backends.secrets import redact
from pytest_aimeasure.measure.text import replace_lone_surrogates

__all__ = [
    "SHOWN_OUTPUTS",
    "AttemptOutput",
    "Interrupted",
    "JudgeError",
    "NotJudged",
    "ProviderUnreachable",
    "QuotaExhausted",
    "ReplayMiss",
]

SHOWN_OUTPUTS = 9
"""Attempt outputs a test's failure text shows: every answer of the default 3 samples × 3 attempts."""


@dataclass(frozen=True)
class AttemptOutput:
    """What the judge answered at one attempt (from 1) of one sample, when it was no valid verdict."""

    sample: int
    attempt: int
    text: str


def _stored(text: str) -> str:
    return redact(replace_lone_surrogates(text))


class JudgeError(Exception):
    """The judge could not produce a valid verdict for an item; no score is recorded for it.

    ``outputs`` are the judge's answers that were no valid verdict, in sample and attempt order: each
    one was a call made and paid for, so a report shows them or says how many it left out."""

    def __init__(
        self, message: str, *, outputs: Sequence[AttemptOutput] = (), sample: int | None = None
    ) -> None:
        # What a provider said is shown and stored with the error: never a key it echoed, nor a lone
        # surrogate no file can hold.
        super().__init__(_stored(message))
        self.outputs = [AttemptOutput(o.sample, o.attempt, _stored(o.text)) for o in outputs]
        self.sample = sample
        """The sample that failed, when one did (not a whole item given up on)."""

    def of_sample(self, sample: int, outputs: Sequence[AttemptOutput]) -> JudgeError:
        """This error as sample ``sample``'s, after ``outputs`` (its answers before it)."""
        if self.sample is None:
            self.sample = sample
            earlier = [AttemptOutput(o.sample, o.attempt, _stored(o.text)) for o in outputs]
            self.outputs = [*earlier, *self.outputs]
        return self

    @property
    def raw_outputs(self) -> list[str]:
        return [o.text for o in self.outputs]

    def output_lines(self, limit: int = SHOWN_OUTPUTS) -> list[str]:
        """The outputs as indented lines, the first ``limit`` of them (the message's own sample
        first), then how many were left out."""
        lines = [
            f"  attempt output (sample #{o.sample}, attempt {o.attempt}): {o.text}"
            for o in self.outputs
        ]
        if len(lines) <= limit:
            return lines
        left_out = f"  ({len(lines) - limit} more attempt outputs not shown: {len(lines)} in all)"
        return [*lines[:limit], left_out]


class ProviderUnreachable(JudgeError):
    """The provider failed to connect several times in a row (the engine's ``UNREACHABLE_AFTER``);
    no call was made."""


class QuotaExhausted(JudgeError):
    """The provider answered nothing but 429/529 for ``quota_wait`` seconds; no more calls are made."""


class ReplayMiss(JudgeError):
    """``--judge-cache=replay`` found no stored sample for a call it would have made."""


class NotJudged(Exception):
    """The item was not judged for a reason that is not the judge's fault (the budget ran out)."""

    def __init__(self, reason: str, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.detail = detail
        """What the user needs to act on it (the budget: what the refused call would have reserved)."""


class Interrupted(NotJudged):
    """The session was interrupted (Ctrl-C, SIGTERM) before this call was sent: it never goes out."""

    def __init__(self) -> None:
        super().__init__("interrupted", "not judged: the session was interrupted before this call was sent")
