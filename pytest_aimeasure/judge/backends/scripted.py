"""The offline judge: scores come from a Python callable or a table, with optional seeded noise.

It is a real backend (it goes through the same validation, aggregation, cache and baseline code as
the SDK backends), so examples and users' own tests of their evals run without a key or a network.

Choosing it::

    pytest --ai-judge --judge-model scripted                      # scores from the hook below
    pytest --ai-judge --judge-model scripted:mypkg.judging:rules  # a callable, table or backend

A scorer receives a :class:`ScriptedCall` and returns a score, or ``(score, rationale)``, or a raw
tool-input dict (to test how malformed verdicts are handled).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from pytest_aimeasure.judge.backends.base import (
    GenerateReply,
    GenerateRequest,
    JudgeReply,
    JudgeRequest,
)
from pytest_aimeasure.measure.models import SCORE_MAX, SCORE_MIN, Usage

# A type alias at runtime (not only for annotations), so it is spelled with Union for Python 3.10.
ScriptedScore = Union[int, tuple[int, str], dict[str, Any]]  # noqa: UP007
Scorer = Callable[["ScriptedCall"], ScriptedScore | None]
DEFAULT_SCORE = 4


@dataclass(frozen=True)
class ScriptedCall:
    """What a scripted scorer sees: the unrendered inputs of one judge call."""

    dimension: str
    artifact: str
    rubric: str
    facts: dict[str, Any] | None
    index: int
    attempt: int
    nodeid: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _table_scorer(table: Mapping[str, int | Sequence[int]]) -> Scorer:
    def score(call: ScriptedCall) -> ScriptedScore | None:
        if call.dimension not in table:
            return None
        value = table[call.dimension]
        if isinstance(value, int):
            return value
        return int(value[call.index % len(value)])

    return score


class ScriptedBackend:
    """A deterministic judge. ``noise`` is the sd of Gaussian noise added before rounding; the noise is
    seeded by (seed, dimension, artifact, sample index), so a rerun reproduces every score."""

    provider = "scripted"

    def __init__(
        self,
        scorer: Scorer | Mapping[str, int | Sequence[int]] | None = None,
        *,
        noise: float = 0.0,
        seed: int = 0,
        name: str = "scripted",
        latency: float = 0.0,
        fallback: Scorer | None = None,
    ) -> None:
        if scorer is None:
            self._scorer: Scorer = lambda call: None
        elif isinstance(scorer, Mapping):
            self._scorer = _table_scorer(scorer)
        else:
            self._scorer = scorer
        self._fallback = fallback
        self.noise = noise
        self.seed = seed
        self.model = name
        self.latency = latency

    @property
    def concurrency_key(self) -> str:
        return "scripted"

    def _draw(self, call: ScriptedCall) -> ScriptedScore:
        result = self._scorer(call)
        if result is None and self._fallback is not None:
            result = self._fallback(call)
        if result is None:
            return (DEFAULT_SCORE, f"scripted judge: no rule for '{call.dimension}', default score")
        return result

    def _noisy(self, score: int, call: ScriptedCall) -> int:
        if self.noise <= 0:
            return score
        digest = hashlib.sha256(
            f"{self.seed}|{call.dimension}|{call.artifact}|{call.index}".encode()
        ).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        return max(SCORE_MIN, min(SCORE_MAX, round(score + rng.gauss(0.0, self.noise))))

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        ctx = request.context
        call = ScriptedCall(
            dimension=request.dimension,
            artifact=str(ctx.get("artifact", "")),
            rubric=str(ctx.get("rubric", "")),
            facts=ctx.get("facts"),
            index=int(ctx.get("index", 0)),
            attempt=int(ctx.get("attempt", 0)),
            nodeid=ctx.get("nodeid"),
        )
        if self.latency:
            await asyncio.sleep(self.latency)
        result = self._draw(call)
        if isinstance(result, dict):
            tool_input: dict[str, Any] = result
        else:
            score, rationale = (result, "") if isinstance(result, int) else result
            if isinstance(score, int) and not isinstance(score, bool):
                score = self._noisy(score, call)
            tool_input = {
                "dimension": request.dimension,
                "score": score,
                "rationale": rationale or f"scripted score {score} for {request.dimension}",
            }
        raw = json.dumps(tool_input, sort_keys=True)
        return JudgeReply(
            tool_input=tool_input,
            text="",
            raw=raw,
            usage=Usage(),
            model=self.model,
            latency_s=self.latency,
            mode="scripted",
            temperature_sent=0.0,
        )

    async def generate(self, request: GenerateRequest) -> GenerateReply:
        return GenerateReply(text=f"[{self.model}] {request.prompt}", model=self.model)

    async def aclose(self) -> None:
        return None


def load_scripted(spec: str, *, fallback: Scorer | None = None) -> ScriptedBackend:
    """Build a scripted backend from ``scripted`` or ``scripted:module:attr``.

    ``attr`` may be a :class:`ScriptedBackend`, a table ``{dimension: score or [scores]}`` or a scorer
    callable. Raises ValueError with the spec named when it cannot be loaded.
    """
    if spec == "scripted":
        return ScriptedBackend(None, fallback=fallback)
    _, _, target = spec.partition(":")
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"judge model {spec!r}: use 'scripted' or 'scripted:module:attribute' "
            "(e.g. scripted:tests.judging:rules)"
        )
    try:
        module = importlib.import_module(module_name)
        obj = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"judge model {spec!r}: cannot load {module_name}:{attr}: {exc}") from exc
    if isinstance(obj, ScriptedBackend):
        backend = obj
    elif isinstance(obj, Mapping) or callable(obj):
        backend = ScriptedBackend(obj, fallback=fallback)
    else:
        raise ValueError(
            f"judge model {spec!r}: {module_name}:{attr} is a {type(obj).__name__}; expected a "
            "ScriptedBackend, a dict of scores or a scorer callable"
        )
    backend.model = spec
    return backend
