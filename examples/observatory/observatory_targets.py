"""The observatory's two offline assistants: deterministic stand-ins for two models under observation.

Both are suite targets (``callable: observatory_targets:steady`` in ``probes.aimeasure.yaml``): the
plugin calls them with the rendered prompt and the keywords they accept (here ``prompt_id``), and
records what they return as the output, exactly as it would record a model's reply.

* ``steady`` answers each of the 12 probes with a fixed reply written to meet every constraint.
* ``drifting`` is the same assistant with one documented weakness: it hedges. Every prose answer ends
  with "I could be wrong, though." It keeps the shape when one is asked for (the bullet list, the JSON
  record, the acrostic), so it passes every gate and only its judged quality suffers.

The model update: with ``OBSERVATORY_DRIFT=v2`` in the environment, ``drifting`` behaves like its next
version. It hedges twice ("I'm not sure, but here goes." first), and it stops counting words: every
prose answer gets a 39-word closing offer ("I hope this helps! Let me know if ..."). That breaks the
length gate of five probes, and the four prose answers that still pass their gates are judged below
their floors.
"""

from __future__ import annotations

import os

__all__ = ["DRIFT_ENV", "SHAPED", "STEADY_ANSWERS", "drifting", "drifting_version", "steady"]

DRIFT_ENV = "OBSERVATORY_DRIFT"
VERSIONS = ("v1", "v2")

# Probes that ask for an exact shape; the drifting assistant leaves its answers to these alone.
SHAPED = frozenset({"structure-three-bullets", "structure-json-record", "constraint-acrostic"})

HEDGE_V1 = "I could be wrong, though."
OPENER_V2 = "I'm not sure, but here goes."
CLOSER_V2 = (
    "I hope this helps! Let me know if you would like me to go into more detail on any part of this, "
    "suggest a few alternatives, or rewrite the whole answer in a different tone or format for you."
)

STEADY_ANSWERS: dict[str, str] = {
    "tone-curt-decline": (
        "No call. We signed a three-year analytics contract in March and I'm not reviewing vendors before "
        "it ends. Remove me from this list."
    ),
    "tone-late-order": (
        "Your order #4471 will reach you 9 days later than we promised, because one of our suppliers "
        "missed a shipment. I'm sorry for the wait. Everything else is packed and leaves the day the "
        "missing part arrives. If you'd rather not wait, reply to this email and we'll refund you in full "
        "today."
    ),
    "structure-three-bullets": (
        "- A regression found on Saturday waits for a thin on-call rota to fix it.\n"
        "- A rollback may need engineers who have already signed off for the weekend.\n"
        "- Load-dependent bugs surface on Monday morning, after everyone has lost the context."
    ),
    "structure-json-record": (
        '{"title": "The Left Hand of Darkness", "author": "Ursula K. Le Guin", "year": 1969, '
        '"themes": ["gender", "trust between strangers", "loyalty and betrayal"]}'
    ),
    "constraint-lipogram": (
        "Sunshine mixes all colours. Air molecules deflect short blue waves far more than long red ones, "
        "so blue arrives at our eyes from every part of the sky."
    ),
    "constraint-acrostic": (
        "September smoke hangs low across the lane,\n"
        "Swallows gather on the wires and go,\n"
        "Short grey mornings smell of coming rain,\n"
        "Stubble fields lie waiting for the snow."
    ),
    "genre-noir-opening": (
        "Kessler Deep smells of ore dust and bad decisions, and I have been breathing both for nine "
        "years. My office sits on Ring Four, between a noodle bar and a chapel nobody prays in. The "
        "recycler wheezes like an old informant, the rent is three weeks late, and the gravity goes soft "
        "every Tuesday, when honest miners stay in their bunks. She came in on a Tuesday. Company suit, "
        "cracked visor, a voice like a cold airlock. She said her brother had walked out of a sealed "
        "shaft. I said that took a miracle. She said she could pay for one."
    ),
    "ambiguity-make-it-shorter": (
        "Happy to, but there is no text here yet. Could you paste what you want shortened and say "
        "roughly how short?"
    ),
    "reasoning-base-rate": (
        "About 9%. Take 100,000 people: 100 have the disease and 99 of them test positive. Of the 99,900 "
        "healthy people, 1% (about 999) test positive too. So only 99 of roughly 1,098 positives are real, "
        "about 9%. The disease is rare, so false positives outnumber true ones. A second independent "
        "positive would raise it to about 90%."
    ),
    "reasoning-fermi-estimate": (
        "1. Chicago has about 2.7 million people, roughly 1.1 million households.\n"
        "2. Assume 1 household in 20 owns a piano, plus 10,000 in schools and venues: about 65,000 pianos.\n"
        "3. Assume one tuning per piano per year: about 65,000 tunings.\n"
        "4. A tuner does about 4 tunings a day on 200 working days: 800 a year.\n"
        "5. 65,000 / 800 gives about 80 tuners.\n"
        "6. The piano share and tuning frequency could each be off by half or double, so roughly 40 to "
        "200 tuners, most likely near 80."
    ),
    "honesty-false-premise": (
        "He didn't. Einstein's Nobel Prize in Physics (the 1921 prize, awarded in 1922) was for his "
        "services to theoretical physics and especially his discovery of the law of the photoelectric "
        "effect. Relativity was still disputed and not yet confirmed well enough by experiment for the "
        "committee, so the citation left it out."
    ),
    "persona-who-are-you": (
        "You're talking to an AI assistant, a language model, not a person. I can help with writing, "
        "explaining, code and analysis. My limits: I can be confidently wrong, so check what matters; I "
        "may not know recent events; I don't remember earlier conversations; and I can't act for you, "
        "such as sending email or buying things."
    ),
}


def steady(prompt: str, *, prompt_id: str) -> str:
    """The steady assistant: the same constraint-abiding answer to each probe, every run."""
    del prompt  # the answers are keyed by probe id; a real target would read the prompt
    try:
        return STEADY_ANSWERS[prompt_id]
    except KeyError:
        raise KeyError(f"the steady assistant only knows the 12 probes, not {prompt_id!r}") from None


def drifting_version() -> str:
    """``v1`` unless ``OBSERVATORY_DRIFT`` names another version."""
    version = os.environ.get(DRIFT_ENV, "v1").strip() or "v1"
    if version not in VERSIONS:
        raise ValueError(f"{DRIFT_ENV}={version!r}: use one of {', '.join(VERSIONS)}")
    return version


def drifting(prompt: str, *, prompt_id: str) -> str:
    """The drifting assistant: the steady answer, hedged (v1), or hedged and padded (v2)."""
    answer = steady(prompt, prompt_id=prompt_id)
    if prompt_id in SHAPED:
        return answer
    if drifting_version() == "v1":
        return f"{answer} {HEDGE_V1}"
    # Like a chat model, v2 puts its opener and its closing offer in paragraphs of their own.
    return f"{OPENER_V2}\n\n{answer} {HEDGE_V1}\n\n{CLOSER_V2}"
