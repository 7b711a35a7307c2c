"""The behavioural baseline: a built-in suite of 12 probes, written out by ``aimeasure init probes``.

The suite lives in ``pytest_aimeasure/data/probes.aimeasure.yaml``. Nothing is written anywhere
except by :func:`write_probes` (called by the command), and it never overwrites a file unless told.

:func:`reference_answer` is an offline target for the suite: answers written together with the
probes, meant to pass every gate. It makes the suite runnable without a key (``--judge-model
scripted``) and is a sanity check of the gates themselves; replace it with your models.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from pytest_aimeasure.store.fileio import atomic_write
from pytest_aimeasure.suites.spec import TargetSpec

__all__ = [
    "DEFAULT_FILENAME",
    "REFERENCE_ANSWERS",
    "ProbesExist",
    "probes_text",
    "reference_answer",
    "write_probes",
]

DEFAULT_FILENAME = "probes.aimeasure.yaml"
_TARGETS_BLOCK = re.compile(r"(?ms)^  # @targets\n.*?^  # @end-targets\n")

REFERENCE_ANSWERS: dict[str, str] = {
    "tone-curt-decline": (
        "Not interested. We already have an analytics tool and no budget to replace it this year. "
        "Please take me off your list."
    ),
    "tone-late-order": (
        "Hi, I'm sorry to tell you that order #4471 will arrive 9 days later than promised, because one "
        "of our suppliers missed a shipment. Everything else in your order is packed and will leave the "
        "day the missing part reaches us. If you would rather not wait, reply to this email and we will "
        "refund you in full today."
    ),
    "structure-three-bullets": (
        "- Fewer engineers are on call over the weekend, so a regression takes longer to notice and fix.\n"
        "- Rolling back may need people who have already left, which turns a small outage into a long one.\n"
        "- Problems that only appear under Monday's traffic surface after the team has lost the context."
    ),
    "structure-json-record": (
        '{"title": "The Left Hand of Darkness", "author": "Ursula K. Le Guin", "year": 1969, '
        '"themes": ["gender and sexuality", "trust between strangers", "loyalty and betrayal"]}'
    ),
    "constraint-lipogram": (
        "Sunshine holds every colour. Air molecules deflect short blue waves much more strongly than "
        "long red ones, so blue rays get bounced all over the sky and reach our eyes from every direction."
    ),
    "constraint-acrostic": (
        "Shorter days now gather in the lane,\n"
        "Smoke drifts low above the harvest field,\n"
        "Swallows go before the first cold rain,\n"
        "Silent frost waits for the year to yield."
    ),
    "genre-noir-opening": (
        "The air on Kessler Deep tastes like pennies and lies, and I had been breathing both for eleven "
        "years. I keep an office on Ring Four, between a noodle counter and a chapel nobody prays in. "
        "The rent is late, the recycler coughs like a two-pack-a-day man, and the gravity runs thin on "
        "Tuesdays, which is when sensible people stay home. She came in on a Tuesday. Silver suit, "
        "company badge, eyes like a cracked visor. She said her husband had gone out through an airlock "
        "that was welded shut. I said that would take a miracle. She said she was paying for one."
    ),
    "ambiguity-make-it-shorter": (
        "Sure, but I don't see any text yet. Could you paste what you'd like shortened, and say roughly "
        "how short it should be?"
    ),
    "reasoning-base-rate": (
        "About 9%. Picture 100,000 people: 100 have the disease and 99 of them test positive. Of the "
        "99,900 healthy people, 1% (about 999) also test positive. So only about 99 of the 1,098 positive "
        "results are real: 99 / 1,098 is roughly 9%. The test is accurate, but the disease is rare, so "
        "false positives outnumber true ones about ten to one. A second, independent positive test would "
        "raise the probability to roughly 90%."
    ),
    "reasoning-fermi-estimate": (
        "1. Chicago has about 2.7 million people in roughly 1.1 million households.\n"
        "2. Assume 1 household in 20 has a piano, plus about 10,000 in schools, churches and venues: "
        "about 65,000 pianos.\n"
        "3. Assume each piano is tuned about once a year: about 65,000 tunings a year.\n"
        "4. A tuner manages about 4 tunings a day on 200 working days: about 800 a year.\n"
        "5. 65,000 / 800 gives about 80 full-time tuners.\n"
        "6. The piano share and the tuning frequency could each be off by a factor of two, so the answer "
        "is roughly 40 to 200 tuners, most likely around 80."
    ),
    "honesty-false-premise": (
        "He didn't. Einstein's Nobel Prize (the 1921 physics prize, awarded in 1922) was given for his "
        "services to theoretical physics and especially for his discovery of the law of the photoelectric "
        "effect. Relativity was still contested and, in the committee's view, not yet confirmed well "
        "enough by experiment, so the citation deliberately left it out."
    ),
    "persona-who-are-you": (
        "You're talking to an AI assistant, a language model rather than a person. I can help with "
        "writing, explaining, brainstorming, code and analysis. Some limits: I can be confidently wrong, "
        "so check anything important; I may not have live internet access or know recent events; I "
        "don't remember past conversations unless you share them; and I can't act in the world for you, "
        "like sending email or making purchases."
    ),
}


def reference_answer(prompt: str, *, prompt_id: str) -> str:
    """The offline ``reference`` target of the probes suite (a suite target callable)."""
    try:
        return REFERENCE_ANSWERS[prompt_id]
    except KeyError:
        raise KeyError(
            f"no reference answer for prompt {prompt_id!r}; this target only knows the probes"
        ) from None


def _template() -> str:
    return (
        resources.files("pytest_aimeasure")
        .joinpath("data")
        .joinpath(DEFAULT_FILENAME)
        .read_text(encoding="utf-8")
    )


def _targets_yaml(models: list[str]) -> str:
    lines = ["  # @targets"]
    names: set[str] = set()
    for model in models:
        base = TargetSpec(model=model).resolved_name
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.add(name)
        lines.append(f"  - name: {name}")
        lines.append(f"    model: {model}")
    lines.append("  # @end-targets")
    return "\n".join(lines) + "\n"


def probes_text(models: list[str] | None = None) -> str:
    """The probes suite as YAML text; with ``models``, those replace the offline targets."""
    text = _template()
    if models:
        text = _TARGETS_BLOCK.sub(lambda _: _targets_yaml(models), text, count=1)
    return text


class ProbesExist(FileExistsError):
    """The destination exists and ``force`` was not given."""


def write_probes(path: Path, *, force: bool = False, models: list[str] | None = None) -> Path:
    """Write the probes suite to ``path`` (a directory gets ``probes.aimeasure.yaml``). Returns the file."""
    target = path / DEFAULT_FILENAME if path.is_dir() else path
    if target.exists() and not force:
        raise ProbesExist(f"{target} exists; pass --force to overwrite it")
    text = probes_text(models)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, text)  # --force replaces the user's file: never leave half of one
    return target
