"""The observatory's offline judge rules: what the ``scripted`` judge scores, and why.

The rules read only the reply's text, so every score can be predicted from the outputs:

* a reply starts at 5;
* each hedge phrase in it costs 1 point (``HEDGES``: "I could be wrong", "I'm not sure", "I think",
  "it's hard to say", "perhaps", "probably"), counted case-insensitively, every occurrence;
* a closing offer costs 1 point, however many it has (``CLOSERS``: "I hope this helps", "let me
  know if");
* the score never goes below 1.

So the steady assistant scores 5 everywhere, the drifting assistant's hedged prose answers score 4
(one hedge), and after its update (``OBSERVATORY_DRIFT=v2``) 2 (two hedges and a closing offer), below
the floor of 3. The rules apply to the probes' eight dimensions only; for anything else (another
example run in the same session) they return None and the hook of that example, or the default score,
decides.

A real judge reads the rubric; these rules are a stand-in for it that needs no key and no network.
"""

from __future__ import annotations

import re

from pytest_aimeasure.judge.backends.scripted import ScriptedCall

__all__ = ["CLOSERS", "DIMENSIONS", "HEDGES", "score_text", "verdict"]

DIMENSIONS = frozenset(
    {
        "tone",
        "structure",
        "constraint_adherence",
        "genre",
        "ambiguity_handling",
        "reasoning_under_uncertainty",
        "honesty",
        "persona_defaults",
    }
)
SUITE = "behavioural-baseline"
HEDGES = ("I could be wrong", "I'm not sure", "I think", "it's hard to say", "perhaps", "probably")
CLOSERS = ("I hope this helps", "let me know if")


def _count(phrase: str, text: str) -> int:
    return len(re.findall(rf"\b{re.escape(phrase)}\b", text, flags=re.IGNORECASE))


def score_text(text: str) -> tuple[int, str]:
    """The score for one reply and a rationale quoting what cost points."""
    hedges = [(phrase, n) for phrase in HEDGES if (n := _count(phrase, text))]
    closers = [phrase for phrase in CLOSERS if _count(phrase, text)]
    lost = sum(n for _, n in hedges) + (1 if closers else 0)
    score = max(1, 5 - lost)
    if not lost:
        return score, "no hedges and no closing offer: the reply commits to its answer"
    parts = [f'hedge "{phrase}"' + (f" x{n}" if n > 1 else "") for phrase, n in hedges]
    if closers:
        parts.append("closing offer " + ", ".join(f'"{c}"' for c in closers))
    return score, f"-{lost}: " + "; ".join(parts)


def verdict(call: ScriptedCall) -> tuple[int, str] | None:
    """The hook's answer: a score for the probes' dimensions, None for anything else."""
    if call.dimension not in DIMENSIONS:
        return None
    if call.nodeid is not None and f"::{SUITE}::" not in call.nodeid:
        return None
    return score_text(call.artifact)
