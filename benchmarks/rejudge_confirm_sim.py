"""A proposal for issue 19, simulated: confirm a suspected drop against a one-session baseline by judging
the baseline's stored outputs again in today's session. Not what the plugin does (yet).

Against one session the drift rule assumes a session-wide shift it cannot measure (the prior, sd 0.2;
docs/concepts.md, "Which shift to assume, and why 0.2"), and that costs most of its detection on the
default path: 20% of 0.75 drops at m = 5, 33% at m = 10, where the known-variance limit is 57-67%
and 91%. A shift that lives in the judge (a session whose judge scores every item a little higher)
cancels when the old outputs and the new ones are judged in the same session: the paired
difference needs no prior. So:

1. the plugin's rule, as it is (``compare()``): regressed fails the run;
2. a dimension it leaves *suspected* (D <= -tolerance, not confirmed) has the baseline's outputs
   judged again today (the run store keeps them; fresh calls, not the sample cache's, which would
   return the baseline session's own scores), and ``compare()`` of today's session against that
   rejudged baseline, with no session-wide prior, decides it.

Both stages are the plugin's own ``compare()``; the sessions are ``noise_model_sim.py``'s designs.
Where the shift lives is the question the proposal rests on, so both are simulated: ``judge`` (the
judge's session adds it to every score: rejudging cancels it) and ``generator`` (the generator's
session adds it to every output: rejudging keeps it, and stage 2 has no prior to hold it). Columns:
unchanged runs failed and 0.75 drops caught by the rule alone and with stage 2, and the share of
runs that rejudged (m x N judge calls each).

Run:  python benchmarks/rejudge_confirm_sim.py [--sessions 2000] [--seed 100]   (about 5 minutes)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
from noise_model_sim import DIMENSION, SPREAD, TOLERANCE, measurements

from pytest_aimeasure.compare.drift import compare
from pytest_aimeasure.measure.stats import CONSERVATIVE_PRIOR, Prior
from pytest_aimeasure.store.baseline import BaselineFile, merge_entries

SAME_SESSION = Prior(item_var=CONSERVATIVE_PRIOR.item_var, shared_var=0.0)
"""Stage 2's prior: the items' movement as the rule assumes it, no session-wide shift (same session)."""
DROP = 0.75
RUNS_PER_BASELINE = 4


@dataclass(frozen=True)
class Case:
    name: str
    noise: str  # "moving": a generator whose outputs move, a temperature-0 judge; "independent"
    items: int
    base_outputs: int  # outputs an item in the baseline's session (--update-baseline makes 3)
    lucky: float = 0.0  # the baseline session's judge scored this much high on every item
    shift_sd: float = 0.0  # every session shifted by N(0, sd^2)
    shift_in: str = "judge"  # where that shift lives: "judge" or "generator"


CASES = (
    Case("moving, one update (3 outputs), m=5", "moving", 5, 3),
    Case("moving, one update (3 outputs), m=10", "moving", 10, 3),
    Case("moving, one session (1 output), m=5", "moving", 5, 1),
    Case("judge shift sd 0.2, one update, m=5", "moving", 5, 3, shift_sd=0.2),
    Case("judge shift sd 0.2, one update, m=10", "moving", 10, 3, shift_sd=0.2),
    Case("generator shift sd 0.2, one update, m=5", "moving", 5, 3, shift_sd=0.2, shift_in="generator"),
    Case("generator shift sd 0.2, one update, m=10", "moving", 10, 3, shift_sd=0.2, shift_in="generator"),
    Case("lucky +0.4, independent, one session, m=5", "independent", 5, 1, lucky=0.4),
    Case("lucky +0.4, moving, one update, m=5", "moving", 5, 3, lucky=0.4),
    Case("lucky +0.4, moving, one update, m=10", "moving", 10, 3, lucky=0.4),
)


def generate(rng: np.random.Generator, truth: np.ndarray, outputs: int, case: Case) -> np.ndarray:
    """Each item's outputs' qualities, (items, outputs)."""
    if case.noise == "moving":
        return truth[:, None] + rng.normal(0.0, SPREAD, size=(len(truth), outputs))
    return np.repeat(truth[:, None], outputs, axis=1)


def judge(rng: np.random.Generator, quality: np.ndarray, shift: float, case: Case, n: int = 3) -> list:
    """The judge's N scores of each output, with this session's judge shift."""
    items, outputs = quality.shape
    if case.noise == "moving":  # a temperature-0 judge: an output's N samples agree
        raw = np.repeat((quality + shift)[:, :, None], n, axis=2)
    else:
        raw = (quality + shift)[:, :, None] + rng.normal(0.0, SPREAD, size=(items, outputs, n))
    return np.clip(np.floor(raw + 0.5), 1, 5).astype(int).tolist()  # type: ignore[no-any-return]


def one_session_baseline(scores: list) -> BaselineFile:
    entries, _ = merge_entries({}, measurements(scores), whole_suite=True, prune=False, pool=1)
    return BaselineFile(entries=entries)


def run(case: Case, sessions: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    counts = dict.fromkeys(("aa_rule", "aa_both", "drop_rule", "drop_both", "rejudged"), 0)
    runs = 0
    for _ in range(max(1, sessions // RUNS_PER_BASELINE)):
        truth = rng.uniform(2.5, 4.5, size=case.items)
        kept = generate(rng, truth, case.base_outputs, case)  # the outputs the run store keeps
        shift = float(rng.normal(0.0, case.shift_sd)) if case.shift_sd else 0.0
        if case.shift_in == "generator":
            kept, judged_shift = kept + shift, case.lucky
        else:
            judged_shift = shift + case.lucky
        baseline = one_session_baseline(judge(rng, kept, judged_shift, case))
        for drop in (0.0, -DROP) * RUNS_PER_BASELINE:
            today = float(rng.normal(0.0, case.shift_sd)) if case.shift_sd else 0.0
            outputs = generate(rng, truth + drop, 1, case)
            judge_today = today
            if case.shift_in == "generator":
                outputs, judge_today = outputs + today, 0.0
            now = measurements(judge(rng, outputs, judge_today, case))
            result = compare(baseline, now, whole_suite=True)
            regressed = result.has_regressions
            both = regressed
            delta = result.dimensions[DIMENSION].delta
            if not regressed and delta is not None and delta <= -TOLERANCE + 1e-9:
                counts["rejudged"] += 1
                again = one_session_baseline(judge(rng, kept, judge_today, case))
                both = compare(again, now, whole_suite=True, prior=SAME_SESSION).has_regressions
            kind = "aa" if drop == 0.0 else "drop"
            counts[f"{kind}_rule"] += regressed
            counts[f"{kind}_both"] += both
            runs += drop != 0.0
    return {key: value / (2 * runs if key == "rejudged" else runs) for key, value in counts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=2000, help="unchanged and dropped runs, each, a case")
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    print(f"tolerance {TOLERANCE}, drop {DROP}, N = 3, {args.sessions} runs a case of each kind")
    print("| case | unchanged failed: rule | + rejudged | drops caught: rule | + rejudged | rejudged |")
    print("|---|---|---|---|---|---|")
    for k, case in enumerate(CASES):
        r = run(case, args.sessions, args.seed + k)
        print(
            f"| {case.name} | {r['aa_rule']:.1%} | {r['aa_both']:.1%} | {r['drop_rule']:.1%} "
            f"| {r['drop_both']:.1%} | {r['rejudged']:.0%} |"
        )


if __name__ == "__main__":
    main()
